"""The project's one cattrs converter: everything tether persists or sends goes through it.

Strict, because a silent coercion turns a corrupt record into a wrong value: types must match and
unknown keys are refused. See docs/guide/design.md, "Strict JSON and the converter".
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    import cattrs

T = TypeVar("T")


@functools.cache
def converter() -> cattrs.Converter:
    """Built on first use: cattrs costs a sixth of a CLI verb's start (issue #56)."""
    import cattrs

    made = cattrs.Converter(forbid_extra_keys=True)
    for kind in (str, int, float, bool, bytes):
        made.register_structure_hook(kind, _strict(kind))
    return made


def _strict(kind: type[Any]) -> Any:
    def hook(value: Any, _type: Any) -> Any:
        # bool is a subclass of int: refuse it where an int or float is declared
        if isinstance(value, bool) and kind is not bool:
            raise TypeError(f"expected {kind.__name__}, got bool {value!r}")
        if kind is float and isinstance(value, int):
            return float(value)
        if not isinstance(value, kind):
            raise TypeError(f"expected {kind.__name__}, got {type(value).__name__} {value!r}")
        return value

    return hook


def structure(data: Any, cls: type[T]) -> T:
    """Structure ``data`` into ``cls`` or raise ``ValueError`` with a readable message."""
    try:
        return converter().structure(data, cls)
    except Exception as exc:
        raise ValueError(structure_error_message(exc, cls)) from exc


def unstructure(obj: Any) -> Any:
    return converter().unstructure(obj)


def structure_error_message(exc: BaseException, cls: type[Any]) -> str:
    import cattrs

    if isinstance(exc, cattrs.BaseValidationError):
        details = "; ".join(cattrs.transform_error(exc, path=cls.__name__))
    else:
        details = str(exc)
    return f"invalid {cls.__name__}: {details}"


def structure_versioned(data: Any, cls: type[T], *, version: int, what: str) -> T:
    """Structure a persisted document and refuse one written under another schema version.

    ``cls`` has a ``schema_version`` field; ``what`` names the document in the error.
    """
    doc = structure(data, cls)
    found = getattr(doc, "schema_version")  # noqa: B009 - T is unbounded; attrs docs carry it
    if found != version:
        raise ValueError(f"{what} schema_version {found} is not supported (expected {version})")
    return doc
