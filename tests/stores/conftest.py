"""The custody fixtures: ``store`` on every backend, ``postgres_dsn`` for PostgreSQL-only tests."""

from support.custody_fixtures import backend as backend
from support.custody_fixtures import fake_clock as fake_clock
from support.custody_fixtures import postgres_dsn as postgres_dsn
from support.custody_fixtures import store as store
from support.custody_fixtures import where as where
