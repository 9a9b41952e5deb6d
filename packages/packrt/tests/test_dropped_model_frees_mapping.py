"""A dropped model frees its memory-mapped checkpoint by reference counting (no cyclic GC needed)."""

from __future__ import annotations

import gc
import weakref
from pathlib import Path

import packrt
from packrt import io, nn


def _maps(path: Path) -> int:
    """How many of this process's mappings are of ``path``."""
    return Path("/proc/self/maps").read_text().count(str(path.resolve()))


def test_a_dropped_borrowed_model_unmaps_its_file_with_the_cyclic_gc_off(tmp_path: Path) -> None:
    source = nn.Sequential(nn.Linear(64, 64), nn.GELU(), nn.Linear(64, 8))
    path = tmp_path / "model.safetensors"
    io.save_checkpoint(source, path)
    gc.collect()
    gc.disable()
    try:
        for _ in range(20):
            with packrt.meta_init():
                model = nn.Sequential(nn.Linear(64, 64), nn.GELU(), nn.Linear(64, 8))
            io.load_checkpoint(model, path, weight_residency="borrowed", progress=False)
            model.register_forward_hook(lambda m, args, out: None)  # hook registries hold no cycle either
            model(packrt.randn(2, 64))
            alive = weakref.ref(model)
            assert _maps(path) >= 1
            del model
            assert alive() is None
            assert _maps(path) == 0
    finally:
        gc.enable()
