"""A tier loads its names on first use (issue #56) and reads as it did when it loaded them
all at once: every exported name, ``dir()``, and a subpackage as an attribute."""

from __future__ import annotations

import subprocess
import sys

_PROBE = """
import sys
import tether, tether.bridge
assert "trio" not in sys.modules and "httpx" not in sys.modules
print(tether.bridge.pool.__name__)  # a subpackage, not imported by anyone yet
print(tether.open_runtime.__module__, "open_runtime" in dir(tether))
print("GatewayClient" in dir(tether.bridge), "httpx" in sys.modules)
print(tether.bridge.GatewayClient.__module__, "httpx" in sys.modules)
try:
    tether.bridge.no_such_name
except AttributeError as exc:
    print(exc)
"""


def test_a_tier_reads_as_before_and_imports_a_name_when_it_is_asked_for() -> None:
    done = subprocess.run(
        [sys.executable, "-c", _PROBE], capture_output=True, text=True, check=False, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "tether.bridge.pool",
        "tether._runtime True",
        "True False",
        "tether.bridge.client._client True",
        "module 'tether.bridge' has no attribute 'no_such_name'",
    ]
