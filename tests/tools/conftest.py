from support.custody_fixtures import postgres_dsn as postgres_dsn
