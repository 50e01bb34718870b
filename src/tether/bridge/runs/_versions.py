"""What a run raises when a deploy changed the code under it (issue #53; the rules are
``custody._versions``)."""

from __future__ import annotations

from ._retry import Permanent


class StepMismatch(Permanent):
    """A resumed run asked a recorded step with other arguments, or ran a new step where the
    records show the old code went on to another: its task ends ``dead`` at once, the reason
    naming the step, both versions and what differs. Nothing ran twice and no stale value was
    returned. An operator rewinds the run (``tether store retry ID --from-step NAME``) or
    re-drives it fresh; the author marks a deliberate change with ``run.patched(name)``."""
