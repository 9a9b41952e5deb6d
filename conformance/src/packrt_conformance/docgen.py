"""The parts of docs/conformance.md that restate the code, generated from it.

``python -m packrt_conformance.docgen docs/conformance.md`` rewrites every block between
``<!-- generated: NAME -->`` and ``<!-- end generated: NAME -->``; ``--check`` exits 1 and names
the blocks that drifted instead. The blocks: the protocol's members (``members``), the helpers'
real signatures (``helpers``), the canonical dtype names (``dtypes``), the capabilities with what
each promises and how ``--check-adapter`` probes it (``capabilities``), and the edge matrix each
method's clause covers (``edges``).
"""

from __future__ import annotations

import inspect
import re
import sys
from collections.abc import Callable
from pathlib import Path

from packrt_conformance.adapter import _MEMBERS, DTYPE_NAMES, Adapter
from packrt_conformance.adapter_check import PROBES
from packrt_conformance.clauses import CAPABILITIES
from packrt_conformance.suite._edges import EDGES, OMITTED

__all__ = ["BLOCKS", "main", "render"]

_DATA_DOC = {
    "protocol_version": "the protocol version the adapter speaks (must be the suite's)",
    "name": "the implementation's name (written into the report)",
    "version": "the implementation's version (written into the report)",
    "revision": "the contract revision it targets by default (1 or 2)",
    "revisions": "every revision it can be held to (a frozenset)",
    "device": "where its tensors live: 'cpu', 'cuda', 'cuda:1', ...",
    "capabilities": "the optional features it really has (a frozenset; see the capability table)",
    "nn": "a namespace holding Module, Parameter, Buffer, Linear, Sequential",
}


def _first_sentence(obj: object) -> str:
    return " ".join((inspect.getdoc(obj) or "").split())


def _members() -> str:
    annotations = Adapter.__annotations__
    lines = []
    for name in _MEMBERS:
        if name in annotations:
            lines.append(f"- `{name}: {annotations[name]}`: {_DATA_DOC[name]}")
        else:
            lines.append(f"- `{name}({_params(name, annotated=False)})`: {_first_sentence(getattr(Adapter, name))}")
    return "\n".join(lines)


def _params(name: str, annotated: bool) -> str:
    """The protocol method's parameters after ``self``, written as in source (``*`` before keyword-only)."""
    out: list[str] = []
    star = False
    for p in inspect.signature(getattr(Adapter, name)).parameters.values():
        if p.name == "self":
            continue
        if p.kind is p.KEYWORD_ONLY and not star:
            out.append("*")
            star = True
        text = p.name + (f": {p.annotation}" if annotated and p.annotation is not p.empty else "")
        if p.default is not p.empty:
            text += f" = {p.default!r}" if annotated else f"={p.default!r}"
        out.append(text)
    return ", ".join(out)


def _helpers() -> str:
    sigs = []
    for name in _MEMBERS:
        if name in Adapter.__annotations__:
            continue
        ret = inspect.signature(getattr(Adapter, name)).return_annotation
        params = _params(name, annotated=True)
        sigs.append(f"def {name}(self{', ' + params if params else ''}) -> {ret}: ...")
    return "```python\n" + "\n".join(sigs) + "\n```"


def _dtypes() -> str:
    names = ", ".join(f"`{n}`" for n in DTYPE_NAMES)
    return f"{names} (`bfloat16` only with the `bfloat16` capability)."


def _capabilities() -> str:
    rows = ["| capability | declaring it promises | what `--check-adapter` calls |", "| --- | --- | --- |"]
    for cap, promise in CAPABILITIES.items():
        rows.append(f"| `{cap}` | {promise} | {_probe_summary(PROBES[cap])} |")
    return "\n".join(rows)


def _probe_summary(probe: Callable[..., object]) -> str:
    doc = inspect.getdoc(probe)
    return " ".join(doc.split()) if doc else ""


def _value(v: object) -> str:
    return "omitted" if v is OMITTED else repr(v)


def _edges() -> str:
    rows = ["| method | keyword values crossed (full product) | tree shapes | clause |", "| --- | --- | --- | --- |"]
    for method, edges in EDGES.items():
        keys = "; ".join(f"`{k}`: {', '.join(_value(v) for v in vals)}" for k, vals in edges.keywords.items())
        clause = f"`{edges.clause}`"
        if edges.split is not None:
            clause += f" (`{edges.split[0]}` where {edges.split[2]})"
        shapes = ", ".join(edges.shapes) + (f"; also {edges.also}" if edges.also else "")
        rows.append(f"| `{method}` | {keys} | {shapes} | {clause} |")
    return "\n".join(rows)


#: block name -> its generator.
BLOCKS: dict[str, Callable[[], str]] = {
    "members": _members,
    "helpers": _helpers,
    "dtypes": _dtypes,
    "capabilities": _capabilities,
    "edges": _edges,
}

_BLOCK = re.compile(r"(<!-- generated: (\w+) -->\n)(.*?)(<!-- end generated: \2 -->)", re.DOTALL)


def render(text: str) -> str:
    """``text`` with every generated block rewritten from the code (an unknown block name is a KeyError)."""
    return _BLOCK.sub(lambda m: m.group(1) + BLOCKS[m.group(2)]() + "\n" + m.group(4), text)


def drifted(text: str) -> list[str]:
    """The names of the blocks whose text differs from what the code generates."""
    return [m.group(2) for m in _BLOCK.finditer(text) if m.group(3) != BLOCKS[m.group(2)]() + "\n"]


def main(argv: list[str] | None = None) -> int:
    """``docgen [--check] PATH``: rewrite PATH's generated blocks, or (``--check``) report drift."""
    args = sys.argv[1:] if argv is None else argv
    check = "--check" in args
    paths = [a for a in args if a != "--check"]
    if len(paths) != 1:
        print("usage: python -m packrt_conformance.docgen [--check] docs/conformance.md", file=sys.stderr)
        return 2
    path = Path(paths[0])
    text = path.read_text(encoding="utf-8")
    if check:
        stale = drifted(text)
        if stale:
            print(
                f"{path}: generated blocks {stale} differ from the code; run python -m packrt_conformance.docgen {path}"
            )
            return 1
        return 0
    path.write_text(render(text), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
