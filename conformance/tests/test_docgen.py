"""docs/conformance.md restates the code in generated blocks; a block that drifts from the code fails here."""

from __future__ import annotations

from pathlib import Path

import pytest

from packrt_conformance import docgen
from packrt_conformance.adapter import _MEMBERS, DTYPE_NAMES
from packrt_conformance.clauses import CAPABILITIES
from packrt_conformance.suite._edges import EDGES

DOC = Path(__file__).resolve().parents[2] / "docs" / "conformance.md"


def test_the_docs_generated_blocks_match_the_code() -> None:
    text = DOC.read_text(encoding="utf-8")
    assert sorted(m.group(2) for m in docgen._BLOCK.finditer(text)) == sorted(docgen.BLOCKS)
    assert docgen.drifted(text) == [], "run: python -m packrt_conformance.docgen docs/conformance.md"


def test_the_blocks_name_every_member_dtype_capability_and_edge_method() -> None:
    text = DOC.read_text(encoding="utf-8")
    for name in _MEMBERS:
        assert f"- `{name}" in text, name
    assert "`raw_bytes(module)`" in text and "def raw_bytes(self, module: Any) -> int" in text
    assert "def buffer(self, data: Any, dtype: str = 'float32', *, persistent: bool = True) -> Any" in text
    assert all(f"`{n}`" in text for n in DTYPE_NAMES)
    assert all(f"| `{cap}` | {promise} |" in text for cap, promise in CAPABILITIES.items())
    assert all(f"| `{method}` |" in text for method in EDGES)


def test_a_hand_edit_inside_a_block_is_drift(tmp_path: Path) -> None:
    doc = tmp_path / "conformance.md"
    doc.write_text(DOC.read_text(encoding="utf-8").replace("`raw_bytes(module)`", "`raw_bytes(...)`"), encoding="utf-8")
    assert docgen.drifted(doc.read_text(encoding="utf-8")) == ["members"]
    assert docgen.main(["--check", str(doc)]) == 1
    assert docgen.main([str(doc)]) == 0
    assert docgen.main(["--check", str(doc)]) == 0
    assert doc.read_text(encoding="utf-8") == DOC.read_text(encoding="utf-8")


def test_an_unknown_block_name_is_refused() -> None:
    with pytest.raises(KeyError, match="nonsense"):
        docgen.render("<!-- generated: nonsense -->\nx\n<!-- end generated: nonsense -->")
