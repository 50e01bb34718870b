"""The custody fixtures: ``store`` runs each test on every backend (SQLite, and PostgreSQL
where a server is given)."""

from support.custody_fixtures import backend as backend
from support.custody_fixtures import fake_clock as fake_clock
from support.custody_fixtures import postgres_dsn as postgres_dsn
from support.custody_fixtures import store as store
from support.custody_fixtures import where as where
