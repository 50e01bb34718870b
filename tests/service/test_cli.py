"""The `tether` command's contract: exit codes documented, errors in one line."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import trio

from tether._cli import build_parser, main


def test_help_documents_the_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        build_parser().parse_args(["bridge", "run", "--help"])
    assert caught.value.code == 0
    out = capsys.readouterr().out
    for line in ("0  success", "1  a runtime error", "2  bad usage", "3  the gateway refused"):
        assert line in out
    for flag in ("--gateway", "--token-file", "--store", "--agent", "--workers", "--config"):
        assert flag in out
    assert "TETHER_WORKERS" in out


def test_help_explains_capacity_and_its_trade_off(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["bridge", "run", "--help"])
    out = " ".join(capsys.readouterr().out.split())  # argparse wraps the help text
    assert "--capacity CAPACITY" in out
    assert "(default: adaptive, 4 x concurrency while runs are quick" in out
    assert "slow agents" in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["bridge", "run", "--workers", "0"], "workers must be an integer from 1 to 256"),
        (
            ["bridge", "run", "--concurrency", "2", "--capacity", "1"],
            "capacity must be an integer >= concurrency (2)",
        ),
        (["bridge", "run", "--gateway", "localhost:8765"], "gateway must be an http://"),
        (["bridge", "run", "--config", "/nonexistent/bridge.toml"], "does not exist"),
        (["demo", "--messages", "0"], "--messages must be from 1 to 100000"),
        (["bridge", "run", "--agent", "nosuch.module:factory"], "cannot import module"),
    ],
)
def test_bad_configuration_is_exit_2_and_one_line(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("tether: error: ")
    assert message in err
    assert err.count("\n") == 1


async def test_a_missing_token_file_is_exit_3_in_one_line(tmp_path: Path) -> None:
    result = await trio.run_process(
        [
            sys.executable,
            "-m",
            "tether._cli",
            "bridge",
            "run",
            "--gateway",
            "http://127.0.0.1:9",
            "--token-file",
            str(tmp_path / "missing-token"),
            "--store",
            str(tmp_path / "data" / "custody.db"),
        ],
        capture_stdout=True,
        capture_stderr=True,
        check=False,
    )
    err = result.stderr.decode()
    assert result.returncode == 3, err
    last = err.strip().splitlines()[-1]
    assert last.startswith("tether: error: cannot use the gateway token")
    assert "missing-token does not exist" in last
    assert "Traceback" not in err


def test_the_readme_demo_crashes_a_bridge_midway_and_loses_nothing(tmp_path: Path) -> None:
    """`tether demo`, the README's first command, as a user runs it: a real process."""
    done = subprocess.run(
        [sys.executable, "-m", "tether._cli", "demo", "--messages", "200", "--quiet"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    summary = done.stdout.strip().splitlines()[-1]
    assert summary.startswith("sent 200 / replied 200 / lost 0 / duplicates absorbed "), summary
    crashed = re.search(r"the first bridge crashed after (\d+) replies", summary)
    assert crashed is not None, summary
    assert 100 <= int(crashed.group(1)) < 200  # midway: the second bridge had work left
    assert list(tmp_path.iterdir()) == []  # the demo works in a temporary folder


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (
            ["--store", "postgresql://user:s3cretPW@127.0.0.1:1/x"],
            "postgresql://user@127.0.0.1:1/x carries a password",
        ),
        (["--store", "password=s3cretPW host=127.0.0.1 dbname=x"], "carries a password"),
        (["--gateway", "http://user:s3cretPW@127.0.0.1:9"], "must not carry a user or password"),
        (["--gateway", "http://s3cretPW@127.0.0.1:9"], "must not carry a user or password"),
    ],
)
async def test_a_password_in_a_url_is_never_printed(
    tmp_path: Path, flags: list[str], message: str
) -> None:
    """Issue 22: the start-up line printed ``--store``/``--gateway`` as given, password and
    all, before the URL was refused. Nothing the bridge prints may carry it."""
    token = tmp_path / "token"
    token.write_text("worker-token-1\n")
    token.chmod(0o600)
    argv = ["--token-file", str(token), "--status-file", str(tmp_path / "status.json")]
    if "--gateway" not in flags:
        argv += ["--gateway", "http://127.0.0.1:9"]
    if "--store" not in flags:
        argv += ["--store", str(tmp_path / "custody.db")]
    with trio.fail_after(120):
        result = await trio.run_process(
            [sys.executable, "-m", "tether._cli", "bridge", "run", *argv, *flags],
            capture_stdout=True,
            capture_stderr=True,
            check=False,
            cwd=tmp_path,  # a URL misread as a file name would be created here, not in the repo
        )
    out = result.stdout.decode() + result.stderr.decode()
    assert result.returncode == 2, out
    assert "s3cretPW" not in out
    assert message in out
    assert "Traceback" not in out
    assert (
        not (tmp_path / "status.json").exists()
        or "s3cretPW" not in (tmp_path / "status.json").read_text()
    )
