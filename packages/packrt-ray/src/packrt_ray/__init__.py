"""packrt models on Ray: batch inference with Ray Data, online serving with Ray Serve.

Everything distributed is Ray's; this package only loads a packrt model once per Ray actor or
Serve replica and maps requests or batches onto it:

- :class:`~packrt_ray.data.ModelBatchMapper` / :func:`~packrt_ray.data.map_model`: a callable
  class for ``Dataset.map_batches`` (texts to embeddings, token ids to hidden states or logits).
- :class:`~packrt_ray.serve.PackrtServer` / :func:`~packrt_ray.serve.build_app` /
  :func:`~packrt_ray.serve.app_builder`: ``packrt serve``'s OpenAI-style application on Ray Serve
  (``@serve.ingress``), with Serve's ``check_health`` failing when the checkpoint changed.
- :class:`~packrt_ray.memory.WeightMemory`: what the weights cost each worker, measured inside it.

Workers load with ``weight_residency="borrowed"`` by default: every worker on a node maps the same
checkpoint files, so the node keeps one copy of the weights in its page cache, however many
workers serve them. The directory must be readable at the same path on every node.

``import packrt_ray`` imports neither Ray Data nor Ray Serve; each submodule imports its own part.
"""

from __future__ import annotations

import importlib
from typing import Any

from packrt_ray.memory import FileMapping, MemoryProbeError, ProcessMemory, WeightMemory
from packrt_ray.model import (
    BatchColumnError,
    LoadedModel,
    ModelDirectoryError,
    ModelKindError,
    ModelSource,
    RequestError,
    load,
)

__version__ = "0.1.0"

_LAZY = {
    "ModelBatchMapper": "packrt_ray.data",
    "map_model": "packrt_ray.data",
    "PackrtServer": "packrt_ray.serve",
    "PackrtDeployment": "packrt_ray.serve",
    "build_app": "packrt_ray.serve",
    "app_builder": "packrt_ray.serve",
}


def __getattr__(name: str) -> Any:
    """``ModelBatchMapper``, ``map_model``, ``PackrtServer``, ``PackrtDeployment``, ``build_app`` and ``app_builder``
    on first use (importing Ray Data or Ray Serve only then)."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'packrt_ray' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])


__all__ = [
    "BatchColumnError",
    "FileMapping",
    "LoadedModel",
    "MemoryProbeError",
    "ModelBatchMapper",
    "ModelDirectoryError",
    "ModelKindError",
    "ModelSource",
    "PackrtDeployment",
    "PackrtServer",
    "ProcessMemory",
    "RequestError",
    "WeightMemory",
    "app_builder",
    "build_app",
    "load",
    "map_model",
]
