"""The README's and the docs' examples run: each page's python blocks, in order, as one script.

Every page under docs/ that holds a ```python block is collected (new pages need no registration).
A block that is illustrative only is marked by an HTML comment ``<!-- not-run -->`` on the line
before its fence; it is skipped visibly (the test reports how many blocks it skipped), never run.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
_FENCE = re.compile(r"^(?P<mark><!-- not-run -->\n)?```python[^\n]*\n(?P<code>.*?)^```", re.DOTALL | re.MULTILINE)


def _pages() -> list[str]:
    docs = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").rglob("*.md"))
    return ["README.md", *(p for p in docs if _FENCE.search((ROOT / p).read_text(encoding="utf-8")))]


PAGES = _pages() if (ROOT / "docs").is_dir() else ["README.md"]


def _blocks(page: Path) -> list[tuple[bool, str]]:
    """(runs, code) for each python block of the page, in order."""
    text = page.read_text(encoding="utf-8")
    return [(m.group("mark") is None, m.group("code")) for m in _FENCE.finditer(text)]


def test_the_docs_pages_are_collected() -> None:
    if not (ROOT / "docs").is_dir():
        pytest.skip("docs/ is not beside this checkout (the docs ship with the repository, not the wheel)")
    for expected in ("docs/module.md", "docs/hooks.md", "docs/index.md", "docs/guides/residency.md"):
        assert expected in PAGES


@pytest.mark.parametrize("name", PAGES)
def test_every_python_example_on_the_page_runs(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    page = ROOT / name
    if not page.exists():
        pytest.skip(f"{page} is not beside this checkout (the docs ship with the repository, not the wheel)")
    blocks = _blocks(page)
    assert blocks, f"{name} has no python examples"
    namespace: dict[str, object] = {"__name__": f"docs.{name}"}
    skipped = 0
    for i, (runs, block) in enumerate(blocks):
        if not runs:
            skipped += 1
            continue
        try:
            exec(compile(block, f"{name}[block {i}]", "exec"), namespace)
        except Exception as err:  # report which block broke, then fail
            pytest.fail(f"{name}, python block {i} raised {type(err).__name__}: {err}\n{block}")
    capsys.readouterr()
    if skipped:
        pytest.skip(f"{name}: {len(blocks) - skipped} blocks ran, {skipped} marked <!-- not-run --> were skipped")
