"""packrt-conformance: the documented Module contract as tests, for any implementation.

The suite reaches an implementation only through an :class:`~packrt_conformance.adapter.Adapter`;
the clauses it checks live in :mod:`packrt_conformance.clauses`.
"""

from __future__ import annotations

from packrt_conformance.adapter import ADAPTER_PROTOCOL_VERSION, Adapter, AdapterError
from packrt_conformance.clauses import CAPABILITIES, Clause, Registry, RegistryError, load_registry
from packrt_conformance.expectations import Expectations, ExpectationsError, parse_expectations

__version__ = "0.2.0"

__all__ = [
    "ADAPTER_PROTOCOL_VERSION",
    "CAPABILITIES",
    "Adapter",
    "AdapterError",
    "Clause",
    "Expectations",
    "ExpectationsError",
    "Registry",
    "RegistryError",
    "__version__",
    "load_registry",
    "parse_expectations",
]
