"""An agent module in the folder the command runs from is found, as ``python -m`` finds it:
the ``tether`` script's own folder is what Python puts on the import path, not the working
directory, so without this a user's ``myagent.py`` needed ``PYTHONPATH=.`` (issue 32.4)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tether._cli._startup import load_checked_agent
from tether.bridge.service._config import ConfigError

AGENT = """\
def factory(session):
    @session.on("task")
    async def answer(task):
        return "from the working directory"
"""


def without_working_directory(monkeypatch: pytest.MonkeyPatch, folder: Path) -> None:
    """The import path of the installed ``tether`` script: no entry naming ``folder``."""
    kept = [p for p in sys.path if p not in ("", ".") and Path(p).resolve() != folder.resolve()]
    monkeypatch.setattr(sys, "path", kept)
    monkeypatch.chdir(folder)


def test_an_agent_in_the_working_directory_is_found_and_the_command_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "cwd_agent_found.py").write_text(AGENT)
    without_working_directory(monkeypatch, tmp_path)
    monkeypatch.delitem(sys.modules, "cwd_agent_found", raising=False)

    factory = load_checked_agent("cwd_agent_found:factory")

    assert factory.__module__ == "cwd_agent_found"
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("tether: agent module cwd_agent_found from the working directory ")
    assert str(tmp_path / "cwd_agent_found.py") in line
    assert "as python -m does" in line
    sys.modules.pop("cwd_agent_found", None)


def test_an_agent_found_elsewhere_prints_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    without_working_directory(monkeypatch, tmp_path)
    load_checked_agent("tether.agents.echo:factory")
    assert capsys.readouterr().err == ""


def test_a_module_in_neither_place_is_still_a_one_line_configuration_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    without_working_directory(monkeypatch, tmp_path)
    with pytest.raises(ConfigError, match="cannot import module 'no_such_agent_here'"):
        load_checked_agent("no_such_agent_here:factory")
    assert capsys.readouterr().err == ""


def test_the_installed_script_finds_the_agent_without_pythonpath(tmp_path: Path) -> None:
    """The real entry point: ``tether`` beside the interpreter, run from the agent's folder.
    The agent asks for the handler policy ``drop``, which the check refuses (exit 2) after
    the import: so the exit says whether the module was found, and nothing starts."""
    script = Path(sys.executable).parent / "tether"
    if not script.exists():
        pytest.skip("no tether script beside the interpreter")
    (tmp_path / "dropper.py").write_text(
        "def factory(session):\n"
        "    async def handle(task):\n"
        "        return 'x'\n"
        "    session.add_handler('task', handle, policy='drop')\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run(
        [str(script), "bridge", "run", "--agent", "dropper:factory", "--store", "x/custody.db"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    found, error = done.stderr.splitlines()
    assert found.startswith("tether: agent module dropper from the working directory")
    assert "policy 'drop'" in error
    assert not (tmp_path / "x").exists()
