"""The runtime's core: the task registry, owner labels, the background scope, the directory of
supervisors and sessions, the soft stop signal, and the context variables they share
(``_context``, a leaf: it imports nothing of tether at run time, which keeps the core acyclic).
"""
