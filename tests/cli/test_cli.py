"""The `tether` command's contract: exit codes documented, errors in one line."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import trio

from tether._cli._main import build_parser, main


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


@pytest.mark.parametrize("problem", ["missing", "mode 0644"])
async def test_a_token_file_the_bridge_cannot_use_is_exit_2_in_one_line(
    tmp_path: Path, problem: str
) -> None:
    """Bad configuration (2), not "the gateway refused the token" (3): no gateway was asked."""
    token = tmp_path / "token"
    if problem == "mode 0644":
        token.write_text("a-token\n")
        token.chmod(0o644)
    result = await trio.run_process(
        [
            sys.executable,
            "-m",
            "tether",
            "bridge",
            "run",
            "--gateway",
            "http://127.0.0.1:9",
            "--token-file",
            str(token),
            "--store",
            str(tmp_path / "data" / "custody.db"),
        ],
        capture_stdout=True,
        capture_stderr=True,
        check=False,
    )
    err = result.stderr.decode()
    assert result.returncode == 2, err
    assert err.count("\n") == 1, err
    assert err.startswith("tether: error: cannot use the gateway token")
    expected = "does not exist" if problem == "missing" else "accessible by group or others"
    assert expected in err
    assert not (tmp_path / "data").exists()


def test_the_readme_demo_crashes_a_bridge_midway_and_loses_nothing(tmp_path: Path) -> None:
    """`tether demo`, the README's first command, as a user runs it: a real process."""
    done = subprocess.run(
        [sys.executable, "-m", "tether", "demo", "--messages", "200", "--quiet"],
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
    assert done.stderr == ""  # --quiet: the summary tells the crash; no "aborting" lines


def test_bridge_run_help_shows_the_default_gateway_and_agent(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Issue 21.6: the defaults were printed as attrs slot descriptors."""
    with pytest.raises(SystemExit):
        build_parser().parse_args(["bridge", "run", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "(default: http://127.0.0.1:8765)" in out
    assert "(default: tether.agents.echo:factory)" in out
    assert "<member" not in out


def _documented_exit_codes(text: str) -> set[int]:
    return {int(m) for m in re.findall(r"^\s+(\d+)\s{2}\S", text, flags=re.MULTILINE)}


def test_the_help_the_readme_and_the_code_agree_on_exit_codes(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Issue 21.5: 130 (a second shutdown signal) and 141 (output pipe closed) were returned
    but documented nowhere."""
    from tether._cli import _main as _cli

    with pytest.raises(SystemExit):
        build_parser().parse_args(["--help"])
    documented = _documented_exit_codes(capsys.readouterr().out)
    assert documented == set(_cli.EXIT_CODES) == {0, 1, 2, 3, 130, 141}
    readme = (Path(__file__).parents[2] / "README.md").read_text()
    sentence = " ".join(readme.split("Exit codes:", 1)[1].split(".", 1)[0].split())
    assert {int(c) for c in re.findall(r"\b(\d+) ", sentence)} == documented, sentence
    bridge_doc = (Path(__file__).parents[2] / "docs" / "guide" / "bridge.md").read_text()
    section = bridge_doc.split("## Exit codes", 1)[1].split("\n## ", 1)[0]
    assert {int(c) for c in re.findall(r"\b(\d+) ", " ".join(section.split()))} == documented


def test_several_errors_at_once_are_each_named_in_the_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 21.3: the line said only "Exceptions from Trio nursery (2 sub-exceptions)"."""
    from tether._cli import _main as _cli

    async def fail(exc: Exception) -> None:
        raise exc

    async def two_failures() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(fail, OSError(28, "No space left on device"))
            nursery.start_soon(fail, ValueError("page 7 of the store is garbage"))
            nursery.start_soon(fail, OSError(28, "No space left on device"))  # said once

    def run_store(args: object) -> int:
        trio.run(two_failures)
        return 0

    monkeypatch.setattr(_cli, "run_store", run_store)
    assert main(["store", "status"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith("tether: error: 2 errors: ")
    assert "[Errno 28] No space left on device" in err
    assert "page 7 of the store is garbage" in err
    assert err.count("No space left") == 1
    assert "sub-exception" not in err


def test_many_errors_at_once_make_a_bounded_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from tether._cli import _main as _cli

    def run_store(args: object) -> int:
        raise ExceptionGroup("many", [RuntimeError(f"cause {i} " + "x" * 500) for i in range(50)])

    monkeypatch.setattr(_cli, "run_store", run_store)
    assert main(["store", "status"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert len(err) < 1200
    assert err.startswith("tether: error: 50 errors: cause 0 ")
    assert "and 47 more" in err


async def _a_store(tmp_path: Path) -> Path:
    from tether.bridge import SqliteStore, Task

    path = tmp_path / "custody.db"
    store = await SqliteStore.open(path)
    try:
        for i in range(300):
            await store.ingest(Task(f"t{i}", "x" * 100))
    finally:
        await store.aclose()
    return path


@pytest.mark.parametrize("command", [["store", "status"], ["store", "status", "--json"]])
async def test_output_into_a_closed_pipe_exits_quietly_with_141(
    command: list[str], tmp_path: Path
) -> None:
    """Issue 21.2: ``tether store status | head -1`` printed "[Errno 32] Broken pipe", exit 1.

    The reader is gone before the command writes (like ``head`` that has read its line), so
    the failure is certain, not a race.
    """
    command = [*command, "--limit", "300", "--store", str(await _a_store(tmp_path))]
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        result = await trio.run_process(
            [sys.executable, "-m", "tether", *command],
            stdout=write_end,
            capture_stderr=True,
            check=False,
        )
    finally:
        os.close(write_end)
    err = result.stderr.decode()
    assert (result.returncode, err) == (141, "")


@pytest.mark.parametrize(
    "command",
    [
        ["bridge", "run", "--gateway", "http://127.0.0.1:9", "--token-file", "{tmp}/token"],
        ["worker", "run"],
    ],
    ids=["bridge", "worker"],
)
async def test_an_agent_refused_for_its_policy_is_a_configuration_error(
    tmp_path: Path, command: list[str]
) -> None:
    """Issue 21.8: it exited 1 (an unknown module exits 2); both are configuration errors.
    A worker process makes the same check as a bridge before it creates anything."""
    (tmp_path / "drop_agent.py").write_text(
        "def factory(session):\n"
        "    async def handle(task):\n"
        "        return 'x'\n"
        "    session.add_handler('task', handle, policy='drop')\n"
    )
    result = await trio.run_process(
        [
            sys.executable,
            "-m",
            "tether",
            *(word.format(tmp=tmp_path) for word in command),
            "--agent",
            "drop_agent:factory",
            "--store",
            str(tmp_path / "data" / "custody.db"),
        ],
        capture_stdout=True,
        capture_stderr=True,
        check=False,
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
    )
    err = result.stderr.decode()
    assert result.returncode == 2, err
    assert err.count("\n") == 1
    assert err.startswith("tether: error: agent 'drop_agent:factory': ")
    assert "policy 'drop'" in err
    assert not (tmp_path / "data").exists()  # refused before anything was created


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (
            ["--store", "postgresql://user:s3cretPW@127.0.0.1:1/x"],
            "postgresql://user@127.0.0.1:1/x carries a password",
        ),
        (["--store", "password=s3cretPW host=127.0.0.1 dbname=x"], "carries a password"),
        (["--store", "Postgresql://user:s3cretPW@127.0.0.1:1/x"], "cannot be parsed"),
        (["--store", "POSTGRES://user:s3cretPW@127.0.0.1:1/x"], "cannot be parsed"),
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
            [sys.executable, "-m", "tether", "bridge", "run", *argv, *flags],
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


@pytest.mark.parametrize(
    ("source", "said"),
    [
        ("def factory(session)\n    pass\n", r"bad_agent\.py, line 1: .*syntax"),
        ("import os\nfrom os import nope\n", r"bad_agent\.py, line 2: ImportError: cannot import"),
        ("x = 1\nundefined_name\n", r"bad_agent\.py, line 2: NameError: name 'undefined_name'"),
        (
            "async def factory(session):\n    session.add_handler('task', None)\n",
            r"factory is an async function; .*def factory\(session\)",
        ),
    ],
    ids=["syntax", "import", "name", "async-factory"],
)
async def test_an_agent_module_that_cannot_load_is_exit_2_naming_file_and_line(
    tmp_path: Path, source: str, said: str
) -> None:
    """Issue 32.6: a SyntaxError was an unlabelled line and exit 1; an ``async def factory``
    warned "coroutine was never awaited" and was reported as registering no handler."""
    (tmp_path / "bad_agent.py").write_text(source)
    result = await trio.run_process(
        [
            sys.executable,
            *("-m", "tether", "bridge", "run", "--gateway", "http://127.0.0.1:9"),
            *("--token-file", str(tmp_path / "token"), "--agent", "bad_agent:factory"),
            *("--store", str(tmp_path / "data" / "custody.db")),
        ],
        capture_stdout=True,
        capture_stderr=True,
        check=False,
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
    )
    err = result.stderr.decode()
    assert result.returncode == 2, err
    assert err.count("\n") == 1, err  # one line: no warning, no traceback
    assert err.startswith("tether: error: agent 'bad_agent:factory': "), err
    assert re.search(said, err), err
    assert not (tmp_path / "data").exists()


@pytest.mark.parametrize(
    ("argv", "usage", "error"),
    [
        (
            ["store", "status", "--state", "dead"],
            "usage: tether store status ",
            "tether store status: error: unrecognized arguments: --state dead "
            "(tether store list has --state)",
        ),
        (
            ["bridge", "run", "--wrkers", "3"],
            "usage: tether bridge run ",
            "tether bridge run: error: unrecognized arguments: --wrkers 3 "
            "(did you mean --workers?)",
        ),
        (
            ["bridge", "run", "--lead-beat-interval", "0.5"],
            "usage: tether bridge run ",
            "tether bridge run: error: unrecognized arguments: --lead-beat-interval 0.5 "
            "(--lead-beat-interval is now --lead-lease (seconds a leader's lease lasts, 3 beats "
            "each))",
        ),
        (
            ["demo", "--mesages", "3"],
            "usage: tether demo ",
            "tether demo: error: unrecognized arguments: --mesages 3 (did you mean --messages?)",
        ),
        (
            ["store", "list", "--state", "dead", "extra"],
            "usage: tether store list ",
            "tether store list: error: unrecognized arguments: extra",
        ),
    ],
)
def test_a_typo_in_a_subcommand_shows_that_subcommands_usage(
    capsys: pytest.CaptureFixture[str], argv: list[str], usage: str, error: str
) -> None:
    """Issue 32.7: the top-level usage came with "unrecognized arguments", which said nothing
    about the flags the subcommand does take."""
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(usage), err
    assert err.rstrip().splitlines()[-1] == error


@pytest.mark.parametrize("command", [["bridge", "run"], ["worker", "run"], ["store", "status"]])
def test_help_names_only_docs_that_exist_and_its_own_process(
    capsys: pytest.CaptureFixture[str], command: list[str]
) -> None:
    """Issue 32.9: ``tether worker run --help`` pointed at docs/pool.md (it is
    docs/guide/pool.md) and said "a stopping bridge" of the worker's grace."""
    with pytest.raises(SystemExit):
        main([*command, "--help"])
    out = " ".join(capsys.readouterr().out.split())  # argparse wraps lines anywhere
    root = Path(__file__).resolve().parents[2]
    for path in re.findall(r"docs/[\w/.-]+\.md", out):
        assert (root / path).is_file(), path
    if command[0] == "worker":
        assert "stopping bridge" not in out
        assert "seconds a stopping worker process gives its runs to finish" in out
