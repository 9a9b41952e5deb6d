"""The README's and the guides' examples run: each page's python blocks, in order, as one script."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
PAGES = ["README.md", "docs/architecture.md", "docs/hooks.md", "docs/module.md"]


def _blocks(page: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", page.read_text(encoding="utf-8"), flags=re.DOTALL)


@pytest.mark.parametrize("name", PAGES)
def test_every_python_example_on_the_page_runs(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    page = ROOT / name
    if not page.exists():
        pytest.skip(f"{page} is not beside this checkout (the docs ship with the repository, not the wheel)")
    blocks = _blocks(page)
    assert blocks, f"{name} has no python examples"
    namespace: dict[str, object] = {"__name__": f"docs.{name}"}
    for i, block in enumerate(blocks):
        try:
            exec(compile(block, f"{name}[block {i}]", "exec"), namespace)
        except Exception as err:  # report which block broke, then fail
            pytest.fail(f"{name}, python block {i} raised {type(err).__name__}: {err}\n{block}")
    capsys.readouterr()
