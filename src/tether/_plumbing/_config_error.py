"""``ConfigError``: a bad setting, reported in one line and exit code 2, raisable by every layer
without importing the layer that reads the settings."""

from __future__ import annotations


class ConfigError(ValueError):
    """A setting is missing, malformed or out of range; the message is one line."""
