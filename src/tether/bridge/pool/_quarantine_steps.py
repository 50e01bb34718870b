"""A quarantine child's recorded steps as the ``task`` frame carries them (the child records
new ones by asking its parent: ``_quarantine_journal``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from ..custody._records import StepRecord


def steps_fields(records: Sequence[StepRecord]) -> list[dict[str, Any]]:
    """Recorded steps as the ``task`` frame carries them to the child."""
    return [attrs.asdict(record) for record in records]


def steps_from(fields: Sequence[dict[str, Any]] | None) -> list[StepRecord]:
    """The child's side of ``steps_fields``."""
    return [step_from(record) for record in fields or ()]


def step_from(fields: Mapping[str, Any]) -> StepRecord:
    """A record from its fields (a frame's other keys ignored; a parent without versions
    sends none)."""
    return StepRecord(
        fields["name"],
        fields["value"],
        fields["at"],
        fields["attempt"],
        fields["size"],
        fields.get("version"),
        fields.get("fingerprint"),
        fields.get("call"),
    )
