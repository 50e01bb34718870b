"""A quarantine child's environment (issue #48): only what an agent needs, never the bridge's
secrets (``PGPASSWORD`` was readable in ``/proc/PID/environ``, and by every tool the agent
started there). The operator names what else the agent reads (``quarantine_env``)."""

from __future__ import annotations

import os

import pytest
import trio

from support.service import TESTS_DIR
from tether.bridge import Task
from tether.bridge.pool._quarantine import QuarantineSpec, run_in_quarantine
from tether.bridge.pool._quarantine_env import check_env_names, child_environ
from tether.bridge.service._config import ConfigError, load_config

pytestmark = pytest.mark.slow

SPEC = QuarantineSpec("support.agents.quarantine:factory")


@pytest.fixture(autouse=True)
def _environment(monkeypatch: pytest.MonkeyPatch) -> None:
    path = os.pathsep.join(filter(None, [str(TESTS_DIR), os.environ.get("PYTHONPATH")]))
    monkeypatch.setenv("PYTHONPATH", path)
    monkeypatch.setenv("PGPASSWORD", "pg-s3cret")
    monkeypatch.setenv("PGPASSFILE", "/etc/tether/pgpass")
    monkeypatch.setenv("TETHER_STORE", "postgresql://tether@db/tether")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-agent-key")
    monkeypatch.setenv("ACME_REGION", "eu")
    monkeypatch.setenv("LC_ALL", "C.UTF-8")


async def _tool_environ(spec: QuarantineSpec) -> dict[str, str]:
    with trio.fail_after(60):
        reply = await run_in_quarantine(spec, Task("e", "environ"))
    return dict(line.split("=", 1) for line in reply.body.splitlines() if "=" in line)


async def test_a_quarantined_agent_and_its_tools_see_no_secret_of_the_bridge() -> None:
    seen = await _tool_environ(SPEC)
    for name in ("PGPASSWORD", "PGPASSFILE", "TETHER_STORE", "OPENAI_API_KEY", "ACME_REGION"):
        assert name not in seen, name
    assert seen["PATH"] == os.environ["PATH"]
    assert seen["LC_ALL"] == "C.UTF-8"
    assert str(TESTS_DIR) in seen["PYTHONPATH"]


async def test_the_names_the_operator_gives_reach_the_agent() -> None:
    seen = await _tool_environ(QuarantineSpec(SPEC.agent, env=("OPENAI_API_KEY", "ACME_*")))
    assert (seen["OPENAI_API_KEY"], seen["ACME_REGION"]) == ("sk-agent-key", "eu")
    assert "PGPASSWORD" not in seen


def test_the_filter_keeps_the_base_names_and_the_ones_named() -> None:
    environ = {
        "PATH": "/bin",
        "HOME": "/home/a",
        "LANG": "C",
        "LC_TIME": "C",
        "PYTHONPATH": "/x",
        "VIRTUAL_ENV": "/venv",
        "PGPASSWORD": "pw",
        "PGHOST": "db",
        "AWS_SECRET_ACCESS_KEY": "k",
        "TETHER_ADMIN_TOKEN_FILE": "/t",
        "HF_TOKEN": "t",
    }
    assert sorted(child_environ(environ, ())) == [
        "HOME",
        "LANG",
        "LC_TIME",
        "PATH",
        "PYTHONPATH",
        "VIRTUAL_ENV",
    ]
    assert "HF_TOKEN" in child_environ(environ, ("HF_TOKEN",))
    assert "AWS_SECRET_ACCESS_KEY" in child_environ(environ, ("AWS_*",))


def test_the_setting_takes_names_and_prefixes_and_refuses_anything_else() -> None:
    config = load_config(flags={"quarantine_env": "OPENAI_API_KEY, ACME_*"}, environ={})
    assert config.quarantine_env == ("OPENAI_API_KEY", "ACME_*")
    assert load_config(environ={"TETHER_QUARANTINE_ENV": "HF_TOKEN"}).quarantine_env == (
        "HF_TOKEN",
    )
    assert load_config(environ={}).quarantine_env == ()
    for bad in ("A=B", "*", "A B*C", "1ABC", "A-B"):
        with pytest.raises(ConfigError, match="quarantine_env"):
            load_config(flags={"quarantine_env": bad}, environ={})
    assert check_env_names(["A", "B_*"]) == ("A", "B_*")
