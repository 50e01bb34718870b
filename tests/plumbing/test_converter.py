from __future__ import annotations

import attrs
import pytest

from tether._plumbing._converter import structure, unstructure


@attrs.frozen
class Record:
    count: int
    label: str = "x"
    ratio: float = 0.0


def test_round_trip() -> None:
    rec = Record(count=3, label="a", ratio=0.5)
    assert structure(unstructure(rec), Record) == rec


@pytest.mark.parametrize(
    ("data", "needle"),
    [
        ({"count": True}, "Record.count"),
        ({"count": "3"}, "Record.count"),
        ({"count": 3.9}, "Record.count"),
        ({"count": 1, "extra": 2}, "extra"),
        ({"count": 1, "label": 5}, "Record.label"),
    ],
)
def test_refuses_what_cattrs_would_coerce(data: dict[str, object], needle: str) -> None:
    with pytest.raises(ValueError, match="invalid Record") as info:
        structure(data, Record)
    assert needle in str(info.value)


def test_int_widens_to_float() -> None:
    assert structure({"count": 1, "ratio": 2}, Record).ratio == 2.0


@attrs.frozen
class Doc:
    value: int
    schema_version: int = 2


def test_a_document_of_another_schema_version_is_refused() -> None:
    from tether._plumbing._converter import structure_versioned

    assert structure_versioned({"value": 1}, Doc, version=2, what="doc") == Doc(1)
    with pytest.raises(ValueError, match="doc schema_version 1 is not supported"):
        structure_versioned({"value": 1, "schema_version": 1}, Doc, version=2, what="doc")
