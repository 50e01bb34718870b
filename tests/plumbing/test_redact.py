"""One redaction for every URL or DSN tether prints, logs or writes to a status file."""

from __future__ import annotations

import pytest

from tether._plumbing._redact import redact_url
from tether.bridge import redact_dsn


@pytest.mark.parametrize(
    ("given", "shown"),
    [
        ("postgresql://u:pw-Secret1@h:5/db?sslmode=require", "postgresql://u@h:5/db"),
        ("postgres://u:pw-Secret1@[::1]:5/db", "postgresql://u@[::1]:5/db"),
        ("host=10.0.0.1 port=6 user=x password=pw-Secret1 dbname=d", "postgresql://x@10.0.0.1:6/d"),
        ("password=pw-Secret1 host=h dbname=d", "postgresql://h/d"),
        ("http://user:pw-Secret1@gw.example:8765/base", "http://[redacted]@gw.example:8765/base"),
        ("https://pw-Secret1@gw.example", "https://[redacted]@gw.example"),
        (
            "http://gw.example/x?token=pw-Secret1&room=r",
            "http://gw.example/x?token=[redacted]&room=r",
        ),
        ("http://127.0.0.1:8765", "http://127.0.0.1:8765"),
        ("tether-data/bridge/custody.db", "tether-data/bridge/custody.db"),
        ("http://[::1", "http://<unparsable URL>"),
    ],
)
def test_redact_url_keeps_where_and_drops_every_secret(given: str, shown: str) -> None:
    assert redact_url(given) == shown
    assert "pw-Secret1" not in redact_url(given)


def test_redact_dsn_is_the_same_redaction() -> None:
    dsn = "postgresql://u:pw-Secret1@h:5/db"
    assert redact_dsn(dsn) == redact_url(dsn) == "postgresql://u@h:5/db"


@pytest.mark.parametrize(
    ("given", "shown"),
    [
        (
            "postgresql://tether@10.0.0.1:5432,10.0.0.2:5433/chat?target_session_attrs=read-write",
            "postgresql://tether@10.0.0.1:5432,10.0.0.2:5433/chat",
        ),
        ("postgresql://tether:pw@db1,db2/chat", "postgresql://tether@db1,db2/chat"),
        ("host=db1,db2 port=5432 dbname=chat", "postgresql://db1:5432,db2:5432/chat"),
        ("host=db1,db2 port=1,2,3 dbname=chat", "postgresql://db1,db2:1,2,3/chat"),
    ],
)
def test_a_multi_host_dsn_names_each_host_with_its_port(given: str, shown: str) -> None:
    """Issue #45: the log showed ``tether@127.0.0.1,127.0.0.1:59047,55539``."""
    assert redact_dsn(given) == shown
