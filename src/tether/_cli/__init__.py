"""The ``tether`` command: every verb lives here, and nothing in the package imports it."""

from ._ctrl_c import answer_ctrl_c

answer_ctrl_c()  # before the imports below, which take most of a second on a busy machine

from ._main import main as main  # noqa: E402
