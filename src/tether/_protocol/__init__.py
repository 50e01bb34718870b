"""Gateway protocol v1, shared by both ends: id rules and size limits (``_limits``), the records
on the wire (``_messages``), progress requests (``_progress``) and a client's connection record
(``_connection``). The bridge's client, custody, the admin endpoint and the reference gateway
import it; it imports only plumbing.
"""
