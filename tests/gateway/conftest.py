"""Token files and real reference gateways on free ports."""

from support.gateway_fixtures import client_token_file as client_token_file
from support.gateway_fixtures import http as http
from support.gateway_fixtures import mock_clock as mock_clock
from support.gateway_fixtures import start_gateway as start_gateway
from support.gateway_fixtures import token_file as token_file
from support.gateway_fixtures import token_path as token_path
