"""Bundled agents for demos, tests and benchmarks (``--agent tether.agents.echo:factory``)."""
