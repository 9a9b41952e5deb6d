"""The ``packrt`` command takes a GGUF file where it takes a model: ``inspect`` lists its tensors (GGML type,
shape, bytes) and metadata, ``warmup`` runs it, and a file named ``.gguf`` that is not one is answered as a
damaged GGUF file, by ``inspect`` and by ``from_pretrained``, not as a missing directory."""

from __future__ import annotations

from pathlib import Path

import pytest

from packrt.cli import main
from packrt.errors import CheckpointError
from packrt.models import from_pretrained


def test_inspect_lists_a_gguf_files_tensors_and_metadata(
    smollm2_gguf: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["inspect", str(smollm2_gguf)]) == 0
    out = capsys.readouterr().out
    assert f"checkpoint: {smollm2_gguf} (GGUF, architecture llama)" in out
    assert "tensors: 272, " in out
    row = next(line for line in out.splitlines() if line.startswith("blk.0.attn_q.weight "))
    assert row.split() == ["blk.0.attn_q.weight", "Q4_1", "[576,", "576]", "207360"]
    assert any(line.split() == ["tokenizer.ggml.tokens", "[49152", "items]"] for line in out.splitlines())


def test_warmup_runs_a_gguf_file(smollm2_gguf: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["warmup", str(smollm2_gguf), "--shape", "1x8"]) == 0
    assert "warmed 1 model(s)" in capsys.readouterr().out


def test_a_file_named_gguf_that_is_not_one_is_called_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fake = tmp_path / "model.gguf"
    fake.write_text("<html>Not Found</html>")
    assert main(["inspect", str(fake)]) == 2
    assert "does not start with the GGUF magic b'GGUF'; it is not a GGUF file" in capsys.readouterr().err
    with pytest.raises(CheckpointError, match=r"does not start with the GGUF magic b'GGUF'"):
        from_pretrained(fake)
