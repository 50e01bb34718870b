"""Progress: what an agent shows people while a run goes (status text, the partial reply).

``progress_of(task)`` records the latest state in memory only; the worker sends it at a bounded
rate, and it is never custody. See docs/guide/design.md, "Progress reporters".
"""

from __future__ import annotations

import threading
from collections.abc import AsyncIterable

import attrs


@attrs.frozen
class ProgressUpdate:
    """One coalesced update of a running task, as the worker hands it to ``on_progress``.

    ``seq`` grows with every change within one attempt (a receiver keeps the update with the
    highest ``(attempt, seq)``); ``running_s`` is how long the run has been going."""

    id: str
    attempt: int
    seq: int
    running_s: float
    worker: str
    status: str | None = None
    partial: str | None = None

    def dropped(self, problem: str) -> str:
        """A line saying this update did not reach its receiver, named for what it was: the
        worker sends a "still working" notice for any long run, so an author whose agent
        reports nothing is not told about "a progress update" they never sent."""
        if self.seq == 0 and self.status is None and self.partial is None:
            what = (
                f"the worker's 'still working' notice of task {self.id} (the agent sends no "
                "progress of its own; the worker tells the gateway a long run is going)"
            )
        else:
            what = f"the agent's progress update of task {self.id}"
        return (
            f"{what} did not reach the gateway ({problem}); progress is best effort, the run "
            "goes on"
        )


@attrs.define(eq=False)
class Progress:
    """The progress reporter of one run. Thread-safe: a sync handler (run in a worker thread)
    may call it too. Every method returns at once."""

    _lock: threading.Lock = attrs.field(factory=threading.Lock, init=False)
    _status: str | None = attrs.field(default=None, init=False)
    _parts: list[str] = attrs.field(factory=list, init=False)
    _version: int = attrs.field(default=0, init=False)

    def status(self, text: str) -> None:
        """Set the status line people see ("searching the web..."); the latest one wins."""
        if not isinstance(text, str):
            raise TypeError(f"progress status must be a str, got {type(text).__name__}")
        with self._lock:
            self._status = text
            self._version += 1

    def stream(self, chunk: str) -> None:
        """Append ``chunk`` to the partial reply people see while it is being written."""
        if not isinstance(chunk, str):
            raise TypeError(f"a streamed chunk must be a str, got {type(chunk).__name__}")
        if chunk:
            with self._lock:
                self._parts.append(chunk)
                self._version += 1

    def clear(self) -> None:
        """Forget the partial reply shown so far (the agent starts its answer over)."""
        with self._lock:
            self._parts.clear()
            self._version += 1

    @property
    def partial(self) -> str:
        """The partial reply streamed so far (all of it, however long)."""
        with self._lock:
            text = "".join(self._parts)
            self._parts[:] = [text] if text else []
        return text

    @property
    def version(self) -> int:
        """Grows with every change: what the worker compares to send only what is new."""
        return self._version

    async def stream_from(self, chunks: AsyncIterable[str]) -> str:
        """Stream every chunk of ``chunks`` (an LLM client's token stream) and return the
        whole text, ready to be the reply: ``return await progress.stream_from(stream)``."""
        async for chunk in chunks:
            self.stream(chunk)
        return self.partial

    def snapshot(self) -> tuple[int, str | None, str | None]:
        """``(version, status, partial)``: what the next update carries (the gateway client
        cuts both texts to protocol v1's limits)."""
        with self._lock:
            version, status = self._version, self._status
        return version, status, self.partial or None
