"""The agents the tests run: in-process factories (``handler``) and the modules a bridge
process loads by name (``--agent support.agents.<module>:factory``; the tests put ``tests/``
on PYTHONPATH), plus the outside programs of the file exchange (``*_program.py``)."""
