"""The client's small helpers: the backoff schedule and token files."""

from __future__ import annotations

import os
import random
import stat
from pathlib import Path

import pytest

from tether._backoff import Backoff
from tether.bridge import (
    GatewayClient,
    TokenFileError,
    ensure_token_file,
    read_token,
    write_token,
)


def test_backoff_doubles_to_the_cap_and_resets() -> None:
    backoff = Backoff(initial=1.0, maximum=60.0, jitter=0.0)
    assert [backoff.next_delay() for _ in range(9)] == [1, 2, 4, 8, 16, 32, 60, 60, 60]
    backoff.reset()
    assert backoff.next_delay() == 1


def test_backoff_survives_a_very_long_outage() -> None:
    backoff = Backoff(jitter=0.0)
    for _ in range(5000):
        delay = backoff.next_delay()
    assert delay == 60


def test_backoff_jitter_stays_within_bounds() -> None:
    backoff = Backoff(initial=1.0, maximum=60.0, jitter=0.2, rng=random.Random(7))
    for nominal in [1, 2, 4, 8, 16, 32, 60, 60, 60, 60]:
        assert 0.8 * nominal <= backoff.next_delay() <= nominal


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"initial": -1.0}, "0 <= initial <= maximum"),
        ({"initial": 5.0, "maximum": 1.0}, "0 <= initial <= maximum"),
        ({"multiplier": 0.5}, "multiplier"),
        ({"jitter": 1.5}, "jitter"),
        ({"jitter": "half"}, "jitter"),
    ],
)
def test_backoff_refuses_nonsense(kwargs: dict[str, float], needle: str) -> None:
    with pytest.raises(ValueError, match=needle):
        Backoff(**kwargs)  # type: ignore[arg-type]


def test_the_client_refuses_a_zero_first_delay(tmp_path: Path) -> None:
    # zero would retry a down gateway in a hot loop (a restart or a task retry may use it)
    with pytest.raises(ValueError, match="0 < initial <= maximum"):
        GatewayClient("http://127.0.0.1:1", tmp_path / "token", backoff_initial=0.0)


def test_full_jitter_draws_between_zero_and_the_ceiling() -> None:
    backoff = Backoff(initial=2.0, maximum=10.0, jitter="full", rng=random.Random(3))
    twin = random.Random(3)
    ceilings = [2.0, 4.0, 8.0, 10.0, 10.0]
    assert [backoff.ceiling(n) for n in range(5)] == ceilings
    assert [backoff.next_delay() for _ in ceilings] == [twin.uniform(0, c) for c in ceilings]


def test_token_round_trip_is_private(tmp_path: Path) -> None:
    path = tmp_path / "token"
    write_token(path, "abc.DEF-123")
    assert read_token(path) == "abc.DEF-123"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_ensure_token_file_creates_a_random_private_token_once(tmp_path: Path) -> None:
    path = tmp_path / "fresh" / "token"
    assert ensure_token_file(path)
    token = read_token(path)
    assert len(token) >= 32
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert not ensure_token_file(path)
    assert read_token(path) == token


@pytest.mark.parametrize(
    ("content", "mode", "needle"),
    [
        (b"tok\n", 0o644, "chmod 600"),
        (b"\n  \n", 0o600, "is empty"),
        (b"two words\n", 0o600, "printable ASCII"),
        (b"caf\xc3\xa9\n", 0o600, "printable ASCII"),
    ],
)
def test_bad_token_files_are_refused(
    tmp_path: Path, content: bytes, mode: int, needle: str
) -> None:
    path = tmp_path / "token"
    path.write_bytes(content)
    os.chmod(path, mode)
    with pytest.raises(TokenFileError, match=needle):
        read_token(path)


def test_missing_token_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(TokenFileError, match="does not exist"):
        read_token(tmp_path / "nope")
