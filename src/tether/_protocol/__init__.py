"""Gateway protocol v1, shared by both ends: id rules and size limits (``_limits``), the records
on the wire (``_messages``) and progress requests (``_progress``). The bridge's client, custody
and the reference gateway import it; it imports only plumbing.
"""
