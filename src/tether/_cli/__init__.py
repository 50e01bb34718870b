"""The ``tether`` command: every verb lives here, and nothing in the package imports it."""

from ._main import main as main
