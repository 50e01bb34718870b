"""Plumbing every layer may use: private, atomic and token files, strict JSON, the converter,
logging, redaction, ``ConfigError``, the SQLite writer; it knows nothing of custody."""
