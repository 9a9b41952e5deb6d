"""A GGUF file's SentencePiece tokenizer (``tokenizer.ggml.model`` ``llama``: Gemma, Llama 2, Mistral, Phi-3
files), built from its metadata as llama.cpp's own tokenizer reads it.

Each vocabulary here is small enough that the expected pieces can be worked out by hand from llama.cpp's
rule (join the adjacent pair whose joined token scores highest, until none joins; bytes for what no token
spells). The real Gemma 3 270M file was compared with llama.cpp's tokenizer outside the test suite.
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest
from gguf_files import gguf_writer

from packrt.errors import CheckpointError
from packrt.models.gguf_tokenizer import load_tokenizer

NORMAL, CONTROL, USER_DEFINED, BYTE = 1, 3, 4, 6
SPECIALS = [("<unk>", 2), ("<s>", CONTROL), ("</s>", CONTROL)]
BYTES = [(f"<0x{b:02X}>", BYTE) for b in range(256)]
FIRST = len(SPECIALS) + len(BYTES)  # the id of the first piece


def _write(gguf: ModuleType, path: Path, pieces: list[tuple[str, float, int]], **meta: Any) -> Path:
    """A GGUF file whose tokenizer is SentencePiece over the specials, the 256 bytes and ``pieces``
    ((token, score, type) each); ``meta``: ``add_space_prefix``, ``add_bos``, ``merges``, ``scores``."""
    entries = [(t, 0.0, k) for t, k in SPECIALS + BYTES] + pieces
    with gguf_writer(gguf, path, "llama") as writer:
        writer.add_tokenizer_model("llama")
        writer.add_token_list([t for t, _, _ in entries])
        writer.add_token_scores(meta.get("scores", [s for _, s, _ in entries]))
        writer.add_token_types([k for _, _, k in entries])
        writer.add_unk_token_id(0)
        writer.add_bos_token_id(1)
        writer.add_eos_token_id(2)
        if "add_space_prefix" in meta:
            writer.add_add_space_prefix(meta["add_space_prefix"])
        writer.add_add_bos_token(meta.get("add_bos", False))
        if "merges" in meta:
            writer.add_token_merges(meta["merges"])
        writer.add_tensor("token_embd.weight", np.zeros((len(entries), 32), np.float32))
    return path


def _ids(*pieces: int) -> list[int]:
    return [FIRST + p for p in pieces]


PIECES = [("a", -1.0, NORMAL), ("b", -2.0, NORMAL), ("c", -3.0, NORMAL), ("\u2581", -4.0, NORMAL)]


@pytest.mark.parametrize(("ab", "bc", "expected"), [(-5.0, -6.0, [4, 2]), (-6.0, -5.0, [0, 5])])
def test_the_adjacent_pair_whose_joined_token_scores_highest_joins_first(
    gguf: ModuleType, tmp_path: Path, ab: float, bc: float, expected: list[int]
) -> None:
    """ "abc" with both "ab" and "bc" in the vocabulary (and no "abc"): the better-scoring one wins, whatever
    the ids; the other piece is left alone."""
    pieces = [*PIECES, ("ab", ab, NORMAL), ("bc", bc, NORMAL)]
    tokenizer = load_tokenizer(_write(gguf, tmp_path / "t.gguf", pieces, add_space_prefix=False))
    assert tokenizer.encode("abc").ids == _ids(*expected)


def test_spaces_become_the_visible_space_with_one_in_front_by_default(gguf: ModuleType, tmp_path: Path) -> None:
    """llama.cpp adds the leading space unless the file says ``add_space_prefix`` false; decoding drops it."""
    pieces = [*PIECES, ("\u2581a", -5.0, NORMAL)]
    default = load_tokenizer(_write(gguf, tmp_path / "d.gguf", pieces))
    assert default.encode("a b").ids == _ids(4, 3, 1)  # ▁a ▁ b
    assert default.decode(default.encode("a b").ids) == "a b"
    bare = load_tokenizer(_write(gguf, tmp_path / "n.gguf", pieces, add_space_prefix=False))
    assert bare.encode("a b").ids == _ids(0, 3, 1)  # a ▁ b
    assert bare.decode(bare.encode("a b").ids) == "a b"


def test_a_piece_no_token_spells_falls_back_to_its_utf8_bytes(gguf: ModuleType, tmp_path: Path) -> None:
    tokenizer = load_tokenizer(_write(gguf, tmp_path / "b.gguf", PIECES, add_space_prefix=False))
    encoded = tokenizer.encode("aé")
    assert encoded.ids == [FIRST, len(SPECIALS) + 0xC3, len(SPECIALS) + 0xA9]
    assert tokenizer.decode(encoded.ids) == "aé"


def test_user_defined_tokens_match_whole_in_the_text_and_control_tokens_stay_special(
    gguf: ModuleType, tmp_path: Path
) -> None:
    """Gemma's files: runs of spaces and newlines are user-defined tokens spelled with real spaces, matched in the
    raw text before anything else; ``<start_of_turn>`` is a control token; ``add_bos`` prepends ``<s>``."""
    pieces = [*PIECES, ("  ", -1000.0, USER_DEFINED), ("\n", -1000.0, USER_DEFINED), ("<start_of_turn>", 0.0, CONTROL)]
    tokenizer = load_tokenizer(_write(gguf, tmp_path / "g.gguf", pieces, add_space_prefix=False, add_bos=True))
    encoded = tokenizer.encode("<start_of_turn>a  b\nc")
    assert encoded.ids == [1, *_ids(6, 0, 4, 1, 5, 2)]
    assert tokenizer.decode(encoded.ids, skip_special_tokens=True) == "a  b\nc"


def test_merges_the_file_lists_are_used_instead_of_the_scores(gguf: ModuleType, tmp_path: Path) -> None:
    pieces = [*PIECES, ("ab", -5.0, NORMAL), ("bc", -6.0, NORMAL)]
    path = _write(gguf, tmp_path / "m.gguf", pieces, add_space_prefix=False, merges=["b c", "a b"])
    assert load_tokenizer(path).encode("abc").ids == _ids(0, 5)


def test_scores_that_do_not_match_the_tokens_are_a_checkpoint_error_naming_both_counts(
    gguf: ModuleType, tmp_path: Path
) -> None:
    path = _write(gguf, tmp_path / "s.gguf", PIECES, scores=[0.0, 0.0])
    count = FIRST + len(PIECES)
    with pytest.raises(CheckpointError, match=rf"s\.gguf': tokenizer\.ggml\.scores has 2 entries for {count} tokens"):
        load_tokenizer(path)
