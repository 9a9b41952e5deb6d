"""``packrt check PATH --model DIR``: a checkpoint checked as ``from_pretrained(DIR)`` would load it.

The real all-MiniLM-L6-v2 directory is the case a user meets first: its own weights must be a match
(the check reads Hugging Face names through the bert key map, pooler and ``position_ids`` ignored by
design). A config.json that disagrees with the weights lists the differences by checkpoint name.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import packrt.io
from packrt.cli import main
from packrt.models import from_pretrained
from packrt.models.pretrained import check_pretrained

_SECTION = re.compile(r"^(missing keys|unexpected keys|mismatched tensors)(?: \(.*\))?: (\d+)$")


def _sections(out: str) -> dict[str, list[str]]:
    """The command's report: section title -> its indented lines (and 'result' -> [match | MISMATCH])."""
    sections: dict[str, list[str]] = {}
    counts: dict[str, int] = {}
    current: list[str] = []
    for line in out.splitlines():
        header = _SECTION.match(line)
        if line.startswith("result: "):
            sections["result"] = [line.removeprefix("result: ")]
        elif header is not None:
            current = sections.setdefault(header[1], [])
            counts[header[1]] = int(header[2])
        elif line.startswith("  "):
            current.append(line.strip())
    assert counts == {title: len(lines) for title, lines in sections.items() if title != "result"}, out
    return sections


def _config_beside(minilm_dir: Path, tmp_path: Path, **changes: Any) -> Path:
    """A directory holding MiniLM's config.json with ``changes`` (the weights stay MiniLM's own)."""
    config = json.loads((minilm_dir / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, **changes}))
    return tmp_path


def _mismatch_sections(
    minilm_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], **changes: Any
) -> dict[str, list[str]]:
    """The sections of ``packrt check`` of MiniLM's weights against its config.json with ``changes``,
    once the check has exited with 1 (a mismatch)."""
    directory = _config_beside(minilm_dir, tmp_path, **changes)
    assert main(["check", str(minilm_dir), "--model", str(directory)]) == 1
    return _sections(capsys.readouterr().out)


def test_the_minilm_directory_checked_against_its_own_weights_is_a_match(
    minilm_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["check", str(minilm_dir), "--model", str(minilm_dir)]) == 0
    out = capsys.readouterr().out
    assert _sections(out) == {"result": ["match"]}, out


def test_a_checkpoint_packrt_saved_from_minilm_matches_the_directory_by_packrt_names(
    minilm_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    packrt.io.save_checkpoint(from_pretrained(minilm_dir, weight_residency="borrowed"), tmp_path / "ckpt")
    assert main(["check", str(tmp_path / "ckpt"), "--model", str(minilm_dir)]) == 0
    assert _sections(capsys.readouterr().out) == {"result": ["match"]}


def test_layers_the_config_lacks_are_unexpected_by_their_checkpoint_names(
    minilm_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sections = _mismatch_sections(minilm_dir, tmp_path, capsys, num_hidden_layers=5)
    assert sections["result"] == ["MISMATCH"] and "missing keys" not in sections
    assert len(sections["unexpected keys"]) == 16  # layer 5: 8 modules, weight and bias each
    assert all(key.startswith("encoder.layer.5.") for key in sections["unexpected keys"])
    assert "encoder.layer.5.attention.self.query.weight" in sections["unexpected keys"]


def test_layers_the_weights_lack_are_missing_by_their_checkpoint_names(
    minilm_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sections = _mismatch_sections(minilm_dir, tmp_path, capsys, num_hidden_layers=7)
    assert "unexpected keys" not in sections
    assert len(sections["missing keys"]) == 16
    assert "encoder.layer.6.output.LayerNorm.bias" in sections["missing keys"]


def test_a_shape_config_json_disagrees_with_is_a_mismatched_tensor_in_the_files_names(
    minilm_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sections = _mismatch_sections(minilm_dir, tmp_path, capsys, intermediate_size=1024)
    assert set(sections) == {"mismatched tensors", "result"}
    assert len(sections["mismatched tensors"]) == 18  # 6 layers: up weight and bias, down weight
    assert (
        "encoder.layer.0.intermediate.dense.weight: model F32 [1024, 384], checkpoint F32 [1536, 384]"
        in (sections["mismatched tensors"])
    )


def test_a_transposed_tensor_that_misfits_is_shown_in_the_files_layout(
    transformers: ModuleType, tmp_path: Path
) -> None:
    config = transformers.GPT2Config(vocab_size=50, n_positions=16, n_embd=16, n_layer=1, n_head=2)
    transformers.GPT2LMHeadModel(config).save_pretrained(tmp_path / "gpt2")
    shutil.copytree(tmp_path / "gpt2", tmp_path / "wider", ignore=shutil.ignore_patterns("*.safetensors"))
    wider = json.loads((tmp_path / "wider" / "config.json").read_text())
    (tmp_path / "wider" / "config.json").write_text(json.dumps({**wider, "n_inner": 48}))
    assert check_pretrained(tmp_path / "gpt2").matches
    report = check_pretrained(tmp_path / "wider", tmp_path / "gpt2")
    assert not report.missing_keys and not report.unexpected_keys
    by_key = {mismatch.key: mismatch for mismatch in report.mismatched}
    assert set(by_key) == {
        "transformer.h.0.mlp.c_fc.weight",
        "transformer.h.0.mlp.c_fc.bias",
        "transformer.h.0.mlp.c_proj.weight",
    }
    fc = by_key["transformer.h.0.mlp.c_fc.weight"]  # Conv1D: stored (in, out)
    assert (fc.model_shape, fc.file_shape) == ((16, 48), (16, 64))
