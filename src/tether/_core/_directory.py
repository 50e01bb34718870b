"""The supervisors and sessions open inside a runtime, so an observer can find every one.

Kept in a context variable, so nested supervisors are found too; a closed session's failures are
kept, so the total only grows. See docs/guide/design.md, "Owner labels and context variables".
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

if TYPE_CHECKING:
    from .._session import Session
    from .._supervisor import Supervisor

from ._context import DIRECTORY


def current_directory() -> Directory | None:
    return DIRECTORY.get()


@attrs.frozen
class SupervisorEntry:
    """A live supervisor and the owner label of the code that opened it (None for a root)."""

    supervisor: Supervisor
    opened_by: str | None


@attrs.define(eq=False)
class Directory:
    _supervisors: dict[int, SupervisorEntry] = attrs.field(init=False, factory=dict)
    _sessions: dict[int, Session] = attrs.field(init=False, factory=dict)
    closed_session_failures: int = attrs.field(init=False, default=0)
    closed_sessions: int = attrs.field(init=False, default=0)

    def add_supervisor(self, supervisor: Supervisor, opened_by: str | None) -> None:
        self._supervisors[id(supervisor)] = SupervisorEntry(supervisor, opened_by)

    def remove_supervisor(self, supervisor: Supervisor) -> None:
        self._supervisors.pop(id(supervisor), None)

    def supervisors(self) -> list[SupervisorEntry]:
        """Open supervisors, in the order they were opened (the root first)."""
        return list(self._supervisors.values())

    def add_session(self, session: Session) -> None:
        self._sessions[id(session)] = session

    def remove_session(self, session: Session) -> None:
        if self._sessions.pop(id(session), None) is not None:
            self.closed_sessions += 1
            self.closed_session_failures += session.stats().failed

    def sessions(self) -> list[Session]:
        """Open sessions, in the order they were opened."""
        return list(self._sessions.values())

    def handler_failures(self) -> int:
        """Handler runs that raised, in every session this runtime has had (open or closed)."""
        return self.closed_session_failures + sum(s.stats().failed for s in self._sessions.values())
