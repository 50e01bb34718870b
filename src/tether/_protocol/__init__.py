"""Gateway protocol v1, shared by both ends: id rules and limits (``_limits``), wire records
(``_messages``), progress (``_progress``). It imports only plumbing."""
