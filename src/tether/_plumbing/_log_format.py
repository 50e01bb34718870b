"""The log formats a setting may name, apart from the handlers (which need Trio): reading a
setting's type must not import Trio (``tether --help``, issue #56)."""

from typing import Literal, get_args

LogFormat = Literal["text", "json"]
LOG_FORMATS: tuple[LogFormat, ...] = get_args(LogFormat)
