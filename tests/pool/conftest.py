"""The pool's fixtures: a SQLite store on a fake clock, or on the mock clock (``timed_store``)."""

from support.pool_fixtures import fake_clock as fake_clock
from support.pool_fixtures import mock_clock as mock_clock
from support.pool_fixtures import store as store
from support.pool_fixtures import timed_store as timed_store
from support.suspects import tests_importable as tests_importable
