"""``loads_strict``: only JSON every party can read back, refusals naming where."""

from __future__ import annotations

import enum

import pytest

from tether._plumbing._json import JsonRefused, check_values, loads_strict


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ('{"a": NaN}', "$.a: NaN"),
        ('{"a": [1, -Infinity]}', "$.a[1]: -Infinity"),
        ('{"a": 1e999}', "$.a: number too large"),
        ('{"a": 9223372036854775808}', "$.a: integer 9223372036854775808 does not fit"),
        ('{"a": -9223372036854775809}', "does not fit in 64 bits"),
        ('{"a": ' + "1" * 5000 + "}", "$.a: an integer of 5000 digits"),
        ("[" * 33 + "]" * 33, "nested deeper than 32 levels"),
        ("[" * 100_000 + "]" * 100_000, "nested deeper than 32 levels"),
        ('{"a b": {"c": NaN}}', "$.'a b'.c: NaN"),
        ("{", "not valid JSON"),
        ('{"room": "a", "room": "b"}', "an object has the key 'room' twice"),
        ('[{"a": {"b": 1, "c": 2, "b": 3}}]', "the key 'b' twice"),
        (b"\xff", "not UTF-8"),
    ],
)
def test_refused_naming_the_place(text: str | bytes, needle: str) -> None:
    with pytest.raises(JsonRefused) as caught:
        loads_strict(text)
    assert needle in str(caught.value)


def test_accepted_at_the_bounds() -> None:
    doc = loads_strict('{"a": [9223372036854775807, -9223372036854775808, 1.5e308, null]}')
    assert doc == {"a": [2**63 - 1, -(2**63), 1.5e308, None]}
    assert loads_strict("[" * 32 + "]" * 32) is not None


def test_the_quick_walk_and_the_named_refusal_agree() -> None:
    """Values the quick walk doubts (a subclass of int, a deep path) are judged by the walk
    that names paths: accepted if in bounds, refused with their path if not."""

    class Level(enum.IntEnum):
        HIGH = 3

    check_values({"tasks": [{"id": "a", "level": Level.HIGH, "n": 2**63 - 1, "x": -1.5}]})
    wide = {"tasks": [{"id": f"t{i}", "delivery": 1} for i in range(50)]}
    wide["tasks"][37]["delivery"] = 2**64
    with pytest.raises(JsonRefused, match=r"\$\.tasks\[37\]\.delivery: integer"):
        check_values(wide)
    with pytest.raises(JsonRefused, match=r"\$\.a\.b: number too large"):
        check_values({"a": {"b": float("inf")}})
