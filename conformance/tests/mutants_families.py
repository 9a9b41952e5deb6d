"""Mutant families (issue 45): one mutant per signature sentence, and revision-1 twins of the others.

- **Signature mutants**: for every signature clause of revision 2 (``test_signatures.SIGNATURES``), packrt
  with that one method declaring a different signature: its first parameter renamed, or, for a method
  that takes none, a required keyword-only parameter added; ``forward`` / ``to`` lose ``**kwargs``.
  The method still behaves as packrt's (the wrapper passes every call through), so exactly the
  signature sentence breaks: what a caller reads off the declaration (names, kinds, defaults).
- **Revision-1 twins**: each mutant of ``mutants.py``, ``mutants_sentences.py`` and ``mutants_backlog.py``
  whose broken clauses include sentences of the revision-1 page (not superseded there), run again under
  revision 1 and held to exactly those clauses, so the first page has its per-sentence mutants too.

Load one with ``--impl mutants_families:<Name>`` with this directory on ``PYTHONPATH``.
"""

from __future__ import annotations

import inspect
from typing import Any

import mutants_backlog
import mutants_sentences
from mutants import MUTANTS as FIRST_MUTANTS
from mutants import Mutant, mutant

from packrt_conformance.clauses import load_registry
from packrt_conformance.suite._support import NO_DEFAULT
from packrt_conformance.suite.test_signatures import SIGNATURES

_REGISTRY = load_registry()


_KINDS = {
    "pos": inspect.Parameter.POSITIONAL_OR_KEYWORD,
    "kw": inspect.Parameter.KEYWORD_ONLY,
    "*": inspect.Parameter.VAR_POSITIONAL,
    "**": inspect.Parameter.VAR_KEYWORD,
}


def _contract_signature(expected: list[Any]) -> inspect.Signature:
    """The signature the contract gives (``test_signatures``' (name, kind, default) list), self first."""
    params = [inspect.Parameter("self", _KINDS["pos"])]
    for name, kind, *default in expected:
        params.append(inspect.Parameter(name, _KINDS[kind], default=default[0] if default else NO_DEFAULT))
    return inspect.Signature(params)


def _changed_signature(expected: list[Any], protected: set[str]) -> inspect.Signature:
    """The contract's signature with one fault: its first named parameter outside ``protected`` (the
    names another signature sentence of the method fixes) renamed, ``**kwargs`` dropped from an
    all-variadic method, or a required keyword-only parameter added to one that takes nothing."""
    sig = _contract_signature(expected)
    params = list(sig.parameters.values())
    kinds = (_KINDS["pos"], _KINDS["kw"])
    named = [i for i, p in enumerate(params) if p.name != "self" and p.kind in kinds]
    free = [i for i in named if params[i].name not in protected]
    if named:
        i = (free or named)[0]
        params[i] = params[i].replace(name=params[i].name + "_")
    elif any(p.kind is p.VAR_KEYWORD for p in params):
        params = [p for p in params if p.kind is not p.VAR_KEYWORD]
    else:
        params.append(inspect.Parameter("stream", _KINDS["kw"]))
    return sig.replace(parameters=params)


def _camel(text: str) -> str:
    return "".join(part.capitalize() for part in text.replace("-", "_").replace(".", "_").split("_"))


def _signature_mutant(clause: str, method: str, expected: list[Any], others: dict[str, list[Any]]) -> type[Mutant]:
    """The mutant of one signature sentence; ``others`` maps the method's other signature clauses to
    their expected parameters. When every parameter it could rename is one another clause also fixes
    (load_state_dict's base signature inside its pack keywords), that clause breaks as well."""
    protected = {e[0] for expected in others.values() for e in expected}
    changed = _changed_signature(expected, protected)
    renamed = {p.name[:-1] for p in changed.parameters.values() if p.name.endswith("_") and p.name != method}
    breaks = {clause, *(c for c, expected in others.items() if renamed & {e[0] for e in expected})}

    def passthrough(self: Any, *args: Any, **kwargs: Any) -> Any:
        return getattr(super(fault, self), method)(*args, **kwargs)

    passthrough.__name__ = method
    passthrough.__signature__ = changed  # type: ignore[attr-defined]  # the fault
    name = f"SignatureOf{_camel(method.strip('_'))}{_camel(clause.split('.', 1)[1].removeprefix('signature'))}"
    doc = f"Module.{method} declares {changed} (the contract's sentence {clause!r} says otherwise)."
    fault = type(name, (), {"__doc__": doc, method: passthrough})
    fault.__module__ = __name__
    return mutant(f"signature-{clause}", breaks, "test_signatures")(fault)


def _signature_mutants() -> list[type[Mutant]]:
    cases = []
    for case in SIGNATURES:
        clause = next(iter(case.marks)).args[0]
        if _REGISTRY[clause].applies_to(2) and not _REGISTRY[clause].superseded:
            cases.append((clause, case.values[0], case.values[1]))
    made = []
    for clause, method, expected in cases:
        others = {c: e for c, m, e in cases if m == method and c != clause}
        made.append(_signature_mutant(clause, method, expected, others))
    return made


def _revision_1_twin(original: type[Mutant]) -> type[Mutant] | None:
    """``original`` run under revision 1, held to the revision-1 sentences among its breaks (None if none)."""
    if original.revision_under_test != 1 and any(c for c in original.breaks if _applies_to_1(c)):
        attrs = {
            "__doc__": f"{original.__doc__} (Run under revision 1.)",
            "__module__": __name__,
            "fault": f"{original.fault}@rev1",
            "breaks": frozenset(c for c in original.breaks if _applies_to_1(c)),
            "revision_under_test": 1,
        }
        return type(f"{original.__name__}Rev1", (original,), attrs)
    return None


def _applies_to_1(clause: str) -> bool:
    return _REGISTRY[clause].applies_to(1) and not _REGISTRY[clause].superseded


SIGNATURE_MUTANTS: tuple[type[Mutant], ...] = tuple(_signature_mutants())
"""One per revision-2 signature sentence."""

_OTHERS = (*FIRST_MUTANTS, *mutants_sentences.MUTANTS, *mutants_backlog.MUTANTS, *SIGNATURE_MUTANTS)
_TWINS = (_revision_1_twin(m) for m in _OTHERS)
REVISION_1_TWINS: tuple[type[Mutant], ...] = tuple(m for m in _TWINS if m is not None)
"""The mutants above whose broken sentences are on the revision-1 page too, run under revision 1."""

MUTANTS: tuple[type[Mutant], ...] = (*SIGNATURE_MUTANTS, *REVISION_1_TWINS)
globals().update({m.__name__: m for m in MUTANTS})
