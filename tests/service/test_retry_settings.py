"""``--retry-backoff`` (flags, TOML, ``TETHER_RETRY_BACKOFF``) and what ``tether store status``
says about tasks waiting for a retry (issue #16, item 1)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import trio

from tether._cli._main import main
from tether.bridge import ConfigError, SqliteStore, Task, load_config
from tether.bridge.pool import RetryBackoff


def test_the_default_backoff_suits_a_flaky_model_provider() -> None:
    assert load_config(environ={}).retry_backoff == RetryBackoff(2.0, 300.0)


def test_retry_backoff_follows_the_precedence(tmp_path: Path) -> None:
    file = tmp_path / "bridge.toml"
    file.write_text('[bridge]\nretry_backoff = "1:60"\n')
    assert load_config(file=file, environ={}).retry_backoff == RetryBackoff(1.0, 60.0)
    environ = {"TETHER_RETRY_BACKOFF": "0.5:8"}
    assert load_config(file=file, environ=environ).retry_backoff == RetryBackoff(0.5, 8.0)
    flags = {"retry_backoff": "off"}
    assert load_config(file=file, environ=environ, flags=flags).retry_backoff == RetryBackoff(0, 0)
    file.write_text("[bridge]\nretry_backoff = 3\n")  # a bare TOML number is FIRST
    assert load_config(file=file, environ={}).retry_backoff == RetryBackoff(3.0, 300.0)


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("soon", "must be FIRST[:CAP] in seconds"),
        ("10:2", "must have CAP >= FIRST"),
        ("1:999999", "must have CAP <= 86400 seconds"),
    ],
)
def test_a_bad_retry_backoff_is_one_line_naming_its_source(value: str, says: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(environ={"TETHER_RETRY_BACKOFF": value})
    message = str(info.value)
    assert message.startswith(f"retry_backoff {says}")
    assert message.endswith(f"got {value!r} (from TETHER_RETRY_BACKOFF)")
    assert "\n" not in message


async def _one_waiting(path: Path) -> None:
    async with await SqliteStore.open(path) as store:
        await store.ingest(Task("flaky", "hi"))
        await store.ingest(Task("fresh", "hi"))
        claim = await store.claim("w1", leaderless=True)
        assert claim is not None
        await store.fail(claim, "ConnectionError: 503", retry_after=600.0)


def test_status_shows_the_tasks_waiting_for_a_retry(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "custody.db"
    trio.run(_one_waiting, path)
    assert main(["store", "status", "--store", str(path)]) == 0
    out = capsys.readouterr().out
    [line] = [line for line in out.splitlines() if line.startswith("waiting for a retry")]
    assert line.startswith("waiting for a retry: 1 pending, next due in ")
    minutes = float(line.rsplit(" ", 1)[1].removesuffix("m"))
    assert 9.0 < minutes <= 10.0
    assert main(["store", "status", "--store", str(path), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["waiting_retries"] == 1
    assert 540 < doc["next_retry_in_s"] <= 600


def test_status_says_nothing_of_retries_when_none_wait(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    async def fill() -> None:
        async with await SqliteStore.open(tmp_path / "custody.db") as store:
            await store.ingest(Task("t", "hi"))

    trio.run(fill)
    assert main(["store", "status", "--store", str(tmp_path / "custody.db"), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert (doc["waiting_retries"], doc["next_retry_in_s"]) == (0, None)


def test_run_timeout_defaults_to_ten_minutes_and_may_be_turned_off(tmp_path: Path) -> None:
    assert load_config(environ={}).run_timeout == 600.0
    assert load_config(environ={"TETHER_RUN_TIMEOUT": "90"}).run_timeout == 90.0
    for off in ("0", "off", "none"):
        assert load_config(environ={}, flags={"run_timeout": off}).run_timeout is None
    file = tmp_path / "bridge.toml"
    file.write_text("[bridge]\nrun_timeout = 0\n")
    assert load_config(file=file, environ={}).run_timeout is None


def test_a_bad_run_timeout_is_one_line_naming_its_source() -> None:
    with pytest.raises(ConfigError) as info:
        load_config(environ={}, flags={"run_timeout": "soon"})
    assert str(info.value) == (
        "run_timeout must be a number of seconds from 0.1 to 604800, or 0/off for no limit, "
        "got 'soon' (from --run-timeout)"
    )
