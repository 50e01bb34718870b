"""``ConfigError``: a bad setting, reported in one line and exit code 2.

It lives at the root so every layer can raise it (a store's URL, a bridge's flag, an agent
that cannot run under a policy) without importing the layer that reads the settings.
"""

from __future__ import annotations


class ConfigError(ValueError):
    """A setting is missing, malformed or out of range; the message is one line."""
