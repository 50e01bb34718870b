"""A real gateway, a SQLite store and a client for the service tests; no bridge left running."""

from support.service_fixtures import client as client
from support.service_fixtures import gateway as gateway
from support.service_fixtures import http as http
from support.service_fixtures import reap_bridges as reap_bridges
from support.service_fixtures import store as store
from support.service_fixtures import token_file as token_file
