"""Gateway protocol v1's optional progress endpoint: ``POST /v1/tasks/<id>/progress``.

Best effort, never custody: a receiver keeps the highest ``(attempt, seq)``. See
docs/guide/design.md, "Progress on the wire".
"""

from __future__ import annotations

from typing import Any, Final

import attrs

from .._plumbing._converter import structure
from ._messages import check_task_id, check_worker_name, require_object

MAX_STATUS_CHARS: Final = 1000
"""The longest status line."""

MAX_PARTIAL_CHARS: Final = 32_000
"""The most partial reply text one update carries (a longer one is sent as its tail)."""


@attrs.frozen
class ProgressRequest:
    id: str
    attempt: int
    seq: int
    running_s: float
    status: str | None = None
    partial: str | None = None
    worker: str | None = None


def fit_progress(request: ProgressRequest) -> ProgressRequest:
    """Cut the texts to the limits: the status keeps its start, the partial reply its end
    (what is being written), each marking the cut with an ellipsis; lone surrogates are
    escaped so the request is valid JSON text."""
    status, partial = request.status, request.partial
    if status is not None:
        status = _text(status)
        if len(status) > MAX_STATUS_CHARS:
            status = status[: MAX_STATUS_CHARS - 1] + "…"
    if partial is not None:
        partial = _text(partial)
        if len(partial) > MAX_PARTIAL_CHARS:
            partial = "…" + partial[-(MAX_PARTIAL_CHARS - 1) :]
    return attrs.evolve(request, status=status, partial=partial)


def _text(value: str) -> str:
    return value.encode("utf-8", "backslashreplace").decode("utf-8").replace("\x00", "")


def parse_progress(data: Any, path_id: str) -> ProgressRequest:
    progress = structure(require_object(data), ProgressRequest)
    check_task_id(progress.id, "id")
    if progress.id != path_id:
        raise ValueError(
            f"progress body id {progress.id!r} does not match the id in the path {path_id!r}"
        )
    if progress.worker is not None:
        check_worker_name(progress.worker, "worker")
    if progress.attempt < 0 or progress.seq < 0:
        raise ValueError("attempt and seq must be >= 0")
    if not progress.running_s >= 0 or progress.running_s == float("inf"):
        raise ValueError(f"running_s must be a finite number >= 0, got {progress.running_s}")
    if progress.status is not None and len(progress.status) > MAX_STATUS_CHARS:
        raise ValueError(
            f"status has {len(progress.status)} characters; the limit is {MAX_STATUS_CHARS}"
        )
    if progress.partial is not None and len(progress.partial) > MAX_PARTIAL_CHARS:
        raise ValueError(
            f"partial has {len(progress.partial)} characters; the limit is {MAX_PARTIAL_CHARS}"
        )
    for name, text in (("status", progress.status), ("partial", progress.partial)):
        if text is not None and "\x00" in text:
            raise ValueError(f"{name} contains a NUL character")
    return progress
