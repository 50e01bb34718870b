"""``tether.bridge`` exports what a user needs to run and inspect a bridge in-process."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import tether.bridge
from tether.bridge.service import _config, _service, _store_status

PUBLIC = {
    "BridgeService": _service.BridgeService,
    "BridgeConfig": _config.BridgeConfig,
    "ConfigError": _config.ConfigError,
    "load_config": _config.load_config,
    "store_status": _store_status.store_status,
    "render_status": _store_status.render_status,
    "StoreStatus": _store_status.StoreStatus,
    "StatusEntry": _store_status.StatusEntry,
}


@pytest.mark.parametrize("name", sorted(PUBLIC))
def test_the_public_name_is_the_private_object(name: str) -> None:
    assert getattr(tether.bridge, name) is PUBLIC[name]


def test_a_fresh_interpreter_imports_the_public_names_from_the_package() -> None:
    """Not only through attributes the test process set up: a plain ``from tether.bridge
    import ...`` works in a new interpreter (no import cycle with ``tether``)."""
    names = ", ".join(sorted(PUBLIC))
    code = f"from tether.bridge import {names}; print(BridgeService.__module__)"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "tether.bridge.service._service"


def test_the_public_loader_merges_like_the_cli(tmp_path: Path) -> None:
    """``load_config`` (public) gives a user the CLI's precedence: TOML < env < flags."""
    toml = tmp_path / "bridge.toml"
    toml.write_text("[bridge]\nworkers = 2\nconcurrency = 3\n")
    config = tether.bridge.load_config(
        file=toml, environ={"TETHER_CONCURRENCY": "5"}, flags={"workers": None}
    )
    assert isinstance(config, tether.bridge.BridgeConfig)
    assert (config.workers, config.concurrency) == (2, 5)
