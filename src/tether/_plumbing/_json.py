"""Strict JSON for what crosses the network: only documents every party can read back.

A bad document (``NaN``, huge integers, deep nesting) gets a clear refusal, never a crash or a value
no store holds. Standard library only. See docs/guide/design.md, "Strict JSON and the converter".
"""

from __future__ import annotations

import json
import math
from typing import Any, Final

MAX_DEPTH: Final = 32
"""Deepest nesting of arrays and objects accepted (protocol v1 needs 3)."""
INT_MIN: Final = -(2**63)
INT_MAX: Final = 2**63 - 1


class JsonRefused(ValueError):
    """The text is not JSON this project accepts; the message says where and why."""


class _Wide:
    """An integer literal too long to convert: kept as its digit count to be reported."""

    __slots__ = ("digits",)

    def __init__(self, digits: int) -> None:
        self.digits = digits


class _Constant:
    """``NaN``, ``Infinity`` or ``-Infinity``: kept to be reported with its path."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name


def _parse_int(text: str) -> int | _Wide:
    digits = len(text.lstrip("-"))
    return _Wide(digits) if digits > 20 else int(text)


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An object whose keys are all different: with a key twice, parties disagree on the
    value (Python's ``json`` keeps the last, others the first), so it is refused."""
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise JsonRefused(f"an object has the key {key[:40]!r} twice")
            seen.add(key)
    return obj


def loads_strict(data: str | bytes, *, max_depth: int = MAX_DEPTH) -> Any:
    """Parse ``data`` (UTF-8 if bytes) as strict JSON, or raise ``JsonRefused``.

    Refused: invalid JSON, invalid UTF-8, an object with a key twice, nesting deeper than
    ``max_depth``, integers outside the signed 64-bit range, ``NaN``/``Infinity`` and numbers
    that overflow a float.
    """
    try:
        text = data.decode("utf-8") if isinstance(data, bytes) else data
    except UnicodeDecodeError:
        raise JsonRefused("not UTF-8") from None
    try:
        doc = json.loads(
            text, parse_int=_parse_int, parse_constant=_Constant, object_pairs_hook=_unique_keys
        )
    except json.JSONDecodeError as exc:
        raise JsonRefused(f"not valid JSON: {exc}") from None
    except RecursionError:
        raise JsonRefused(f"nested deeper than {max_depth} levels") from None
    check_values(doc, max_depth=max_depth)
    return doc


def check_values(doc: Any, *, max_depth: int = MAX_DEPTH) -> None:
    """Walk ``doc`` (without recursion) and refuse, naming the path, the first value out of
    bounds: nesting past ``max_depth``, an integer past 64 bits, a non-finite number.

    A quick walk that builds no paths answers for the usual document (every value in bounds:
    a poll of a hundred tasks is checked in a fraction of the time); only a document it
    doubts is walked again, path by path, to name what is wrong."""
    if _in_bounds(doc, max_depth):
        return
    _refuse_with_path(doc, max_depth)


def _in_bounds(doc: Any, max_depth: int) -> bool:
    """True if every value of ``doc`` is plainly within bounds (exact JSON types only);
    False when in doubt (``_refuse_with_path`` then decides, and says where)."""
    stack: list[tuple[Any, int]] = [(doc, 0)]
    pop, push = stack.pop, stack.append
    while stack:
        value, depth = pop()
        kind = type(value)
        if kind is str or value is None or kind is bool:
            continue
        if kind is dict or kind is list:
            if depth >= max_depth:
                return False
            for item in value.values() if kind is dict else value:
                if type(item) is not str:
                    push((item, depth + 1))
        elif kind is int:
            if not INT_MIN <= value <= INT_MAX:
                return False
        elif kind is float:
            if not math.isfinite(value):
                return False
        else:
            return False
    return True


def _refuse_with_path(doc: Any, max_depth: int) -> None:
    stack: list[tuple[Any, str, int]] = [(doc, "$", 0)]
    while stack:
        value, path, depth = stack.pop()
        if isinstance(value, dict):
            if depth >= max_depth:
                raise JsonRefused(f"{path}: nested deeper than {max_depth} levels")
            stack.extend((v, f"{path}.{_key(k)}", depth + 1) for k, v in value.items())
        elif isinstance(value, list):
            if depth >= max_depth:
                raise JsonRefused(f"{path}: nested deeper than {max_depth} levels")
            stack.extend((v, f"{path}[{i}]", depth + 1) for i, v in enumerate(value))
        elif isinstance(value, bool | str) or value is None:
            continue
        elif isinstance(value, int):
            if not INT_MIN <= value <= INT_MAX:
                raise JsonRefused(f"{path}: integer {value} does not fit in 64 bits")
        elif isinstance(value, float):
            if not math.isfinite(value):
                raise JsonRefused(f"{path}: number too large for a 64-bit float")
        elif isinstance(value, _Wide):
            raise JsonRefused(f"{path}: an integer of {value.digits} digits (at most 64 bits)")
        elif isinstance(value, _Constant):
            raise JsonRefused(f"{path}: {value.name} is not a JSON number")


def _key(key: str) -> str:
    """An object key as a path step: plain when it is a short identifier, else quoted."""
    return key if key.isidentifier() and len(key) <= 40 else repr(key[:40])
