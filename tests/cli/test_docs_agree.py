"""Issue 47.11: what the CLI's help and errors say agrees with what it does. A store verb
never creates a store (a bridge does, on its first start), and says so; a bridge on a SQLite
file keeps fixed pool names (``<client-name>-<host>``), and its help says so."""

from __future__ import annotations

from pathlib import Path

import pytest

from tether._cli._main import build_parser, main


def _help(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    with pytest.raises(SystemExit):
        build_parser().parse_args([*argv, "--help"])
    return " ".join(capsys.readouterr().out.split())  # argparse wraps the help text


@pytest.mark.parametrize(
    "verb",
    [
        ("store", "limits", "set", "acme", "--concurrency", "2"),
        ("store", "tenants", "set", "acme", "--weight", "2"),
        ("store", "retry", "t1"),
    ],
)
def test_a_store_verb_on_a_path_with_no_store_says_a_bridge_creates_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], verb: tuple[str, ...]
) -> None:
    path = tmp_path / "nowhere" / "custody.db"
    assert main([*verb, "--store", str(path)]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"tether: error: no custody store at {path} (is --store right? a bridge creates the "
        "store on its first start: run `tether bridge run` once)\n"
    )
    assert not path.parent.exists()


def test_the_store_verbs_help_does_not_promise_to_create_the_store(
    capsys: pytest.CaptureFixture[str],
) -> None:
    shown = _help(capsys, "store", "limits", "set")
    assert "directory created" not in shown
    assert "it must exist: a bridge creates it on its first start" in shown
    assert "directory created 0700" in _help(capsys, "bridge", "run")  # a bridge does


def test_the_bridge_help_names_the_fixed_pool_names_of_a_sqlite_store(
    capsys: pytest.CaptureFixture[str],
) -> None:
    shown = "".join(_help(capsys, "bridge", "run").split())  # argparse breaks at hyphens
    expected = (
        "(default: <client-name>-<host> on a SQLite store, one bridge per file; "
        "<client-name>-<host>-<random> on PostgreSQL, unique per process)"
    )
    assert "".join(expected.split()) in shown


@pytest.mark.parametrize(("host", "shown"), [("127.0.0.1", "127.0.0.1"), ("::1", "[::1]")])
def test_the_bridge_prints_the_operator_pages_address_at_start(
    capsys: pytest.CaptureFixture[str], host: str, shown: str
) -> None:
    """Issue 47.9: the bridge said where its admin endpoint listens, never where its page is."""
    from tether._cli._startup import admin_announcer

    admin_announcer("tether bridge", host, Path("tether-data/bridge/admin-token"))(8766)
    lines = capsys.readouterr().err.splitlines()
    assert lines == [
        f"tether bridge: admin endpoint http://{shown}:8766 (token in "
        "tether-data/bridge/admin-token)",
        f"tether bridge: operator page http://{shown}:8766/ops (paste the admin token, or open "
        f"http://{shown}:8766/ops#token=<the admin token>)",
    ]
