"""Test-only: a bridge process started with this folder on PYTHONPATH and TETHER_TEST_SPANS
set exports its spans to that file (support.tracing), as an application configures the SDK."""

import os
from pathlib import Path

if os.environ.get("TETHER_TEST_SPANS"):
    from support.span_file import install_file_exporter

    install_file_exporter(Path(os.environ["TETHER_TEST_SPANS"]), os.getpid())
