"""Bridge configuration: precedence, validation with one-line errors, the data directory."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from tether.bridge import BridgeConfig, ConfigError, load_config
from tether.bridge.service._settings import prepare_store_dir as prepare_data_dir


def _toml(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "tether.toml"
    path.write_text(text)
    return path


def test_defaults_need_nothing() -> None:
    config = load_config(environ={})
    assert config == BridgeConfig()
    assert config.store == "tether-data/bridge/custody.db"
    assert config.token_file == Path("tether-data/gateway/token")


def test_flags_beat_environment_beat_file(tmp_path: Path) -> None:
    file = _toml(
        tmp_path,
        '[bridge]\nworkers = 2\nagent = "pkg.mod:make"\ngateway = "http://file:1"\ngrace = 3\n',
    )
    environ = {"TETHER_WORKERS": "6", "TETHER_GATEWAY": "http://env:2/"}
    config = load_config(file=file, environ=environ, flags={"workers": 8, "grace": None})
    assert config.workers == 8  # flag
    assert config.gateway == "http://env:2"  # environment over file, trailing / dropped
    assert config.agent == "pkg.mod:make"  # file over default
    assert config.grace == 3.0  # an unset flag (None) does not override
    assert config.concurrency == 4  # default


def test_the_config_file_can_come_from_the_environment(tmp_path: Path) -> None:
    file = _toml(tmp_path, '[bridge]\nstore = "postgresql://db/tether"\n')
    config = load_config(environ={"TETHER_CONFIG": str(file)})
    assert config.store_is_url


@pytest.mark.parametrize(
    ("environ", "flags", "message"),
    [
        (
            {"TETHER_WORKERS": "many"},
            {},
            "workers must be an integer from 1 to 256, got 'many' (from TETHER_WORKERS)",
        ),
        ({}, {"workers": 0}, "workers must be an integer from 1 to 256, got 0 (from --workers)"),
        ({}, {"gateway": "ftp://x"}, "gateway must be an http:// or https:// URL"),
        ({}, {"agent": "no_colon"}, "agent must look like module.path:factory"),
        ({}, {"store": "mysql://x"}, "store must be a file path or a postgresql:// URL"),
        ({"TETHER_POLL_WAIT": "-1"}, {}, "poll_wait must be a number of seconds from 0 to 60"),
        ({}, {"log_level": "chatty"}, "log_level must be one of DEBUG, INFO, WARNING, ERROR"),
        (
            {"TETHER_LEAD": "maybe"},
            {},
            "lead must be true or false, got 'maybe' (from TETHER_LEAD)",
        ),
    ],
)
def test_a_bad_value_is_one_line_naming_setting_value_and_source(
    environ: dict[str, str], flags: dict[str, object], message: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(environ=environ, flags=flags)
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[bridge]\nworkres = 3\n", "unknown setting 'workres' in [bridge]"),
        (
            "[bridge]\nlead_beat_interval = 0.5\n",
            "setting 'lead_beat_interval' in [bridge] is now 'lead_lease'",
        ),
        ("workers = 3\n", "settings go in a [bridge] table"),
        ("[bridge\n", "is not valid TOML"),
        ('[bridge]\nworkers = "3x"\n', "workers must be an integer from 1 to 256, got '3x'"),
    ],
)
def test_a_bad_file_is_one_line(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=r"tether\.toml") as caught:
        load_config(file=_toml(tmp_path, text), environ={})
    assert message in str(caught.value)


def test_a_missing_config_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"config file .*nope\.toml does not exist"):
        load_config(file=tmp_path / "nope.toml", environ={})


def test_the_store_directory_is_created_private(tmp_path: Path) -> None:
    config = load_config(environ={}, flags={"store": str(tmp_path / "data" / "bridge" / "c.db")})
    prepare_data_dir(config)
    for folder in (tmp_path / "data", tmp_path / "data" / "bridge"):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700


@pytest.mark.parametrize(("text", "expected"), [("no", False), ("TRUE", True), ("0", False)])
def test_lead_reads_the_usual_spellings_of_a_boolean(text: str, expected: bool) -> None:
    assert load_config(environ={"TETHER_LEAD": text}).lead is expected


def test_capacity_is_unset_by_default_and_follows_the_precedence(tmp_path: Path) -> None:
    assert load_config(environ={}).capacity is None  # the worker's default: adaptive
    file = _toml(tmp_path, "[bridge]\ncapacity = 6\nconcurrency = 2\n")
    assert load_config(file=file, environ={}).capacity == 6  # file
    environ = {"TETHER_CAPACITY": "5"}
    assert load_config(file=file, environ=environ).capacity == 5  # environment over file
    assert load_config(file=file, environ=environ, flags={"capacity": 2}).capacity == 2  # flag
    assert load_config(file=file, environ=environ, flags={"capacity": None}).capacity == 5
    # an empty variable unsets what the file said: back to the default
    assert load_config(file=file, environ={"TETHER_CAPACITY": ""}).capacity is None


def test_capacity_equal_to_concurrency_is_valid() -> None:
    config = load_config(environ={"TETHER_CONCURRENCY": "3"}, flags={"capacity": 3})
    assert (config.concurrency, config.capacity) == (3, 3)


@pytest.mark.parametrize(
    ("environ", "flags", "message"),
    [
        (
            {},
            {"capacity": 3},
            "capacity must be an integer >= concurrency (4), or unset for adaptive, "
            "got 3 (from --capacity)",
        ),
        (
            {"TETHER_CAPACITY": "7"},
            {"concurrency": 8},
            "capacity must be an integer >= concurrency (8), or unset for adaptive, "
            "got '7' (from TETHER_CAPACITY; concurrency from --concurrency)",
        ),
        (
            {"TETHER_CAPACITY": "lots"},
            {},
            "capacity must be an integer from 1 to 16384, got 'lots' (from TETHER_CAPACITY)",
        ),
        (
            {},
            {"capacity": 0},
            "capacity must be an integer from 1 to 16384, got 0 (from --capacity)",
        ),
    ],
)
def test_a_bad_capacity_is_one_line_naming_its_source(
    environ: dict[str, str], flags: dict[str, object], message: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(environ=environ, flags=flags)
    assert str(caught.value) == message


def test_a_config_built_directly_refuses_a_capacity_below_concurrency() -> None:
    with pytest.raises(ConfigError, match=r"^capacity must be an integer >= concurrency \(4\)"):
        BridgeConfig(capacity=2)
    assert BridgeConfig(concurrency=2, capacity=2).capacity == 2


def test_limits_come_from_toml_env_or_a_flag_and_a_bad_one_is_one_line(tmp_path: Path) -> None:
    from tether.bridge.custody._limits import LimitSpec

    toml = tmp_path / "tether.toml"
    toml.write_text(
        '[bridge]\nlimits = ["openai:gpt-4o rate=500/min burst=50 concurrency=20", '
        '"tenant:acme concurrency=3"]\n'
    )
    config = load_config(file=toml, environ={})
    assert config.limits == (
        LimitSpec("openai:gpt-4o", 500 / 60, 50, 20),
        LimitSpec("tenant:acme", None, 0, 3),
    )
    env = {"TETHER_LIMITS": "search rate=2/s"}
    assert load_config(environ=env).limits == (LimitSpec("search", 2.0, 2, None),)
    flag = load_config(flags={"limits": "a concurrency=1; b rate=1/min"}, environ=env)
    assert [spec.key for spec in flag.limits] == ["a", "b"]
    for bad, message in [
        ("k", "needs rate= or concurrency="),
        ("k rate=1/fortnight", "must be N/s"),
        ("k size=3", "'size=3' is not one of"),
        ("k concurrency=1; k rate=1/s", "names a key twice"),
    ]:
        with pytest.raises(ConfigError, match="limits") as caught:
            load_config(flags={"limits": bad}, environ={})
        assert message in str(caught.value)
        assert "(from --limits)" in str(caught.value)


def test_room_keep_is_read_and_history_keep_still_works_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue #53: ``--room-keep`` is the per-room bound's name; the old ``history_keep`` (flag,
    environment, file) still sets it, saying once that it was renamed."""
    assert load_config(environ={}).room_keep == 500
    assert load_config(environ={"TETHER_ROOM_KEEP": "40"}).room_keep == 40
    assert not caplog.records
    file = _toml(tmp_path, "[bridge]\nhistory_keep = 30\n")
    for config in (
        load_config(environ={}, flags={"history_keep": 20}),
        load_config(environ={"TETHER_HISTORY_KEEP": "20"}),
        load_config(file=file, environ={}),
    ):
        assert config.room_keep in (20, 30)
    warned = [r.getMessage() for r in caplog.records if r.name == "tether.bridge.config"]
    assert len(warned) == 3
    assert "history_keep (--history-keep, TETHER_HISTORY_KEEP) is now room_keep" in warned[0]
    assert load_config(environ={}, flags={"history_keep": 20, "room_keep": 20}).room_keep == 20
    with pytest.raises(ConfigError, match="give room_keep only"):
        load_config(environ={}, flags={"history_keep": 20, "room_keep": 40})
    renamed = load_config(environ={}, flags={"history_keep": 20})
    assert (renamed.room_keep, renamed.history_keep) == (20, None)
    assert renamed == BridgeConfig(room_keep=20)
