"""Plumbing every layer may use: private files and directories, atomic and token files, strict
JSON, the one persistence converter, logging, redaction, ``ConfigError`` and the SQLite writer
thread. It knows nothing of custody or the gateway protocol.
"""
