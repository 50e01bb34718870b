"""``tether ps`` and ``tether status`` against a real admin endpoint."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import trio

from support.observe import running_admin
from tether import ChildSpec
from tether._cli._main import main
from tether.bridge import SqliteStore, Task, write_token


async def parked(release: trio.Event) -> None:
    await release.wait()


async def service(*, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
    task_status.started()
    await trio.sleep_forever()


async def cli(*argv: str) -> int:
    return await trio.to_thread.run_sync(main, list(argv))


async def test_ps_renders_the_tree_and_status_the_children_and_custody(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = await SqliteStore.open(tmp_path / "c.db", synchronous="NORMAL")
    try:
        await store.ingest(Task(id="job-1", body="hi"))
        async with running_admin(tmp_path, store=store) as admin:
            await admin.runtime.supervisor.start_child(
                ChildSpec("ingest", service, shutdown_grace=0)
            )
            release = trio.Event()
            admin.runtime.spawn(parked, release, name="cleanup")
            token = str(tmp_path / "admin-token")

            assert await cli("ps", "--url", admin.url, "--token-file", token) == 0
            out = capsys.readouterr().out
            assert out.splitlines()[0].endswith("live tasks")
            [ingest] = [ln for ln in out.splitlines() if "── ingest " in ln]
            assert "[ingest]" in ingest
            [cleanup] = [ln for ln in out.splitlines() if "── cleanup " in ln]
            assert "[runtime.background]" in cleanup

            assert await cli("ps", "--stacks", "--url", admin.url, "--token-file", token) == 0
            assert "in parked" in capsys.readouterr().out

            assert await cli("ps", "--json", "--url", admin.url, "--token-file", token) == 0
            assert json.loads(capsys.readouterr().out)["count"] >= 2

            assert await cli("status", "--url", admin.url, "--token-file", token) == 0
            out = capsys.readouterr().out
            assert out.startswith("health: ok\n")
            assert "supervisor runtime: one_for_one" in out
            [child] = [ln for ln in out.splitlines() if ln.strip().startswith("ingest")]
            assert "running" in child
            assert "restarts=0" in child
            assert "custody: 1 in flight (pending 1, assigned 0, claimed 0" in out
            release.set()
    finally:
        await store.aclose()


async def test_wrong_token_and_unreachable_url_are_one_line_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    wrong = tmp_path / "wrong"
    write_token(wrong, "definitely-not-it")
    async with running_admin(tmp_path) as admin:
        assert await cli("ps", "--url", admin.url, "--token-file", str(wrong)) == 1
        err = capsys.readouterr().err
        assert err.startswith("tether: error: the admin endpoint at")
        assert "refused the token" in err
        assert "definitely-not-it" not in err
    assert await cli("status", "--url", admin.url, "--token-file", str(wrong)) == 1
    assert "cannot reach the admin endpoint" in capsys.readouterr().err
    assert await cli("ps", "--token-file", str(tmp_path / "missing")) == 1
    assert "does not exist" in capsys.readouterr().err


async def test_a_timeout_must_be_above_zero_and_one_that_passes_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 32.9: ``--timeout 0`` printed ``[Errno 115] Operation now in progress``."""
    token = tmp_path / "token"
    write_token(token, "a-token-of-some-length")
    for bad in ("0", "-1", "nan", "inf"):
        assert await cli("status", "--token-file", str(token), "--timeout", bad) == 2
        assert capsys.readouterr().err == (
            f"tether: error: --timeout must be a number of seconds above 0, got {bad}\n"
        )
    # a socket that listens but never answers: the connection opens, no reply comes
    (listener,) = await trio.open_tcp_listeners(0, host="127.0.0.1")
    url = f"http://127.0.0.1:{listener.socket.getsockname()[1]}"
    async with listener:
        code = await cli("status", "--url", url, "--token-file", str(token), "--timeout", "0.3")
    assert code == 1
    assert capsys.readouterr().err == (
        f"tether: error: the admin endpoint at {url} did not answer within 0.3 s\n"
    )
