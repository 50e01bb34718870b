"""Gateway protocol v1, shared by both ends: id rules and size limits (``_bounds``), wire records
(``_messages``), progress (``_progress``), a client's connection record (``_connection``).
It imports only plumbing."""
