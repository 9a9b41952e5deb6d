"""The guide's table of what from_pretrained serves is the one the code's own tables generate."""

from __future__ import annotations

from pathlib import Path

import pytest

from packrt.models import supported
from packrt.models.gguf import supported_architectures
from packrt.models.support import BEGIN, END, support_rows, support_table

GUIDE = Path(__file__).resolve().parents[3] / "docs" / "guides" / "huggingface.md"


def test_the_huggingface_guide_carries_the_generated_support_table() -> None:
    if not GUIDE.is_file():
        pytest.skip(f"{GUIDE} is not beside this checkout (the docs ship with the repository, not the wheel)")
    text = GUIDE.read_text(encoding="utf-8")
    assert BEGIN in text and END in text, f"{GUIDE} lost its {BEGIN} ... {END} markers"
    shown = text.split(BEGIN, 1)[1].split(END, 1)[0].strip()
    assert shown == support_table(), (
        "docs/guides/huggingface.md's support table differs from the code's; paste the output of "
        "`python -c 'from packrt.models.support import support_table; print(support_table())'` between the markers"
    )


def test_the_table_lists_every_model_type_and_gguf_architecture_the_loaders_accept() -> None:
    accepted = {row[1].strip("`") for row in support_rows()}
    assert set(supported()) <= accepted
    assert set(supported_architectures()) <= accepted
