"""The runs' fixtures: a SQLite store on the mock clock (``timed_store``)."""

from support.pool_fixtures import mock_clock as mock_clock
from support.pool_fixtures import timed_store as timed_store
