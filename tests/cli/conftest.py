"""The CLI verbs as a user runs them: PostgreSQL for the store verbs, and no bridge left running."""

from support.custody_fixtures import postgres_dsn as postgres_dsn
from support.service_fixtures import reap_bridges as reap_bridges
