"""Expected failures: known, explained kinds of trouble (a store out of reach, a gateway that
answers outside its protocol) that a log says in one line with what happens next, where an
unexpected exception keeps its whole traceback."""

from __future__ import annotations

import time


class ExpectedFailure(Exception):
    """Mixed into an exception class whose cause is known and explained by its message: the
    supervisor (and any other logger that honours it) logs ``one_line()`` instead of a
    traceback."""

    def one_line(self) -> str:
        text = " ".join(str(self).split()) or "no detail"
        return f"{type(self).__name__}: {text[:500]}"


def expected_one_line(error: BaseException) -> str | None:
    """One line for ``error`` when it is an expected failure, or an exception group holding
    only expected failures (however nested; the first one speaks for the group), else None."""
    if isinstance(error, ExpectedFailure):
        return error.one_line()
    if isinstance(error, BaseExceptionGroup):
        lines = [expected_one_line(inner) for inner in error.exceptions]
        if lines and all(line is not None for line in lines):
            more = f" (and {len(lines) - 1} more)" if len(lines) > 1 else ""
            return f"{lines[0]}{more}"
    return None


def next_at(delay: float) -> str:
    """``in N s (at HH:MM:SS)``: when something happens next, for a person reading a log."""
    at = time.strftime("%H:%M:%S", time.localtime(time.time() + delay))
    return f"in {delay:.1f} s (at {at})"
