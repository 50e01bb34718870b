"""The runs' fixtures: a SQLite store on the mock clock (``timed_store``), and both stores
(``backend``: SQLite and PostgreSQL) where a run's store calls are the point."""

from support.custody_fixtures import backend as backend
from support.custody_fixtures import postgres_dsn as postgres_dsn
from support.pool_fixtures import mock_clock as mock_clock
from support.pool_fixtures import timed_store as timed_store
