"""The runtime's core: registry, owners, background scope, directory, stop signal, and the context
variables in the leaf ``_context`` (which keeps the core free of import cycles)."""
