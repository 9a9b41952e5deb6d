"""The conformance tests, written only against the adapter (the ``impl`` fixture)."""
