"""What a sentence-transformers directory's ``modules.json`` says: :class:`Pipeline`.

``modules.json`` lists the steps (a Transformer, a Pooling, optionally a Normalize),
``sentence_bert_config.json`` gives ``max_seq_length``, the Pooling step's ``config.json`` the pooling
modes. Read here, apart from the encoder that runs them, so :func:`packrt.models.describe` can say what
such a directory holds without loading it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packrt.errors import CheckpointError
from packrt.models.hfconfig import read_json

POOLING_MODES = ("cls_token", "max_tokens", "mean_tokens", "mean_sqrt_len_tokens")  # sentence-transformers' order


def _json(path: Path, what: str) -> Any:
    try:
        return read_json(path)
    except FileNotFoundError:
        raise CheckpointError(f"{str(path)!r} is missing; a sentence-transformers directory holds {what}") from None


@dataclass(frozen=True)
class Pipeline:
    """What modules.json and its configs say: where the transformer is, how to pool, whether to normalize."""

    transformer: Path
    pooling: tuple[str, ...]
    normalize: bool
    max_seq_length: int | None

    @classmethod
    def read(cls, directory: Path) -> Pipeline:
        modules = _json(directory / "modules.json", "modules.json (its list of steps)")
        if not isinstance(modules, list):
            raise CheckpointError(f"{str(directory / 'modules.json')!r} must hold a JSON list of modules")
        by_kind = {str(m.get("type", "")).rsplit(".", 1)[-1]: m for m in modules if isinstance(m, dict)}
        if "Transformer" not in by_kind or "Pooling" not in by_kind:
            raise CheckpointError(
                f"{str(directory / 'modules.json')!r} lists {sorted(by_kind)}; SentenceEncoder serves a Transformer "
                "followed by a Pooling step (and optionally Normalize)"
            )
        transformer = directory / str(by_kind["Transformer"].get("path", ""))
        pooling_path = directory / str(by_kind["Pooling"].get("path", "1_Pooling")) / "config.json"
        pooling_config = _json(pooling_path, "the pooling step's config")
        if not isinstance(pooling_config, dict):
            raise CheckpointError(f"{str(pooling_path)!r} must hold a JSON object of pooling_mode_* flags")
        modes = tuple(mode for mode in POOLING_MODES if pooling_config.get(f"pooling_mode_{mode}"))
        if not modes:
            raise CheckpointError(
                f"{str(pooling_path)!r} turns on no pooling mode packrt implements ({', '.join(POOLING_MODES)})"
            )
        settings = transformer / "sentence_bert_config.json"
        bert_config = _json(settings, "sentence_bert_config.json") if settings.exists() else {}
        max_length = bert_config.get("max_seq_length") if isinstance(bert_config, dict) else bert_config
        if max_length is not None and (
            isinstance(max_length, bool) or not isinstance(max_length, int) or max_length <= 0
        ):
            raise CheckpointError(
                f"{str(settings)!r}: field 'max_seq_length' is {max_length!r}, expected a positive integer or null "
                "(the most tokens a text is truncated to); fix the file"
            )
        return cls(transformer, modes, "Normalize" in by_kind, max_length)


__all__ = ["POOLING_MODES", "Pipeline"]
