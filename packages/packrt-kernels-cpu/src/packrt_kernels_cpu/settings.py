"""What configures the CPU kernels, read once into one object: the GEMM road, numba on or off, the thread cap.

- ``PACKRT_BLAS``: ``auto`` (the default: MKL where it loads on an Intel CPU, else numpy's OpenBLAS; see
  :func:`packrt_kernels_cpu.mkl.auto_road`), ``mkl`` (MKL or
  :class:`~packrt_kernels_cpu.errors.BlasUnavailableError`), ``numpy``.
- ``PACKRT_NUMBA``: ``0`` turns numba's compiled kernels off (numpy's reference kernels everywhere).
- ``PACKRT_BLOCK_PREFILL``: how a prompt's rows of activations multiply block-quantized weights: ``q8``
  (the default: quantized per block of 32 to int8, as llama.cpp quantizes them, on the VNNI block GEMM where the
  CPU has it, :mod:`packrt_kernels_cpu.q8_gemm`) or ``float`` (float32, against dequantized panels: slower, and
  what the float32 product of the dequantized weights gives, within float32 rounding).
- ``PACKRT_DECODE_STEP``: how a one-token step runs a decoder layer whose linears are quantized blocks: ``layer``
  (the default: the whole layer in one compiled call, :mod:`packrt_kernels_cpu.decode`) or ``kernels`` (kernel by
  kernel, with Python between them). Both give the same bits; ``kernels`` is there to compare and to profile.
- The thread cap: what ``packrt.set_num_threads`` last set (None: every core).

The environment is read at the first kernel call, not at import, and never again: a process keeps
the road it started on. Tests and callers that must try another road use :func:`override`, which
applies the changed settings to the process for the block (the GEMM road decided afresh on entry
and on exit), instead of editing environment variables under a running process.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Literal

from packrt_kernels_cpu.errors import BlasUnavailableError, SettingError

BlasChoice = Literal["auto", "mkl", "numpy"]
BLAS_CHOICES: tuple[BlasChoice, ...] = ("auto", "mkl", "numpy")
BlockPrefill = Literal["q8", "float"]
BLOCK_PREFILLS: tuple[BlockPrefill, ...] = ("q8", "float")
DecodeStepRoad = Literal["layer", "kernels"]
DECODE_STEPS: tuple[DecodeStepRoad, ...] = ("layer", "kernels")


@dataclass(frozen=True)
class Settings:
    """The CPU kernels' configuration (see the module docstring for each field's source)."""

    blas: BlasChoice = "auto"
    numba: bool = True
    threads: int | None = None
    block_prefill: BlockPrefill = "q8"
    decode_step: DecodeStepRoad = "layer"


def from_environment(environ: Mapping[str, str]) -> Settings:
    """The settings an environment asks for; BlasUnavailableError naming ``PACKRT_BLAS`` if its value
    is not a road packrt knows."""
    choice = environ.get("PACKRT_BLAS", "auto").strip().lower() or "auto"
    if choice not in BLAS_CHOICES:
        raise BlasUnavailableError(
            f"PACKRT_BLAS={choice!r} is not a BLAS packrt knows; expected one of {', '.join(BLAS_CHOICES)} "
            "(unset it for the default, auto)"
        )
    prefill = environ.get("PACKRT_BLOCK_PREFILL", "q8").strip().lower() or "q8"
    if prefill not in BLOCK_PREFILLS:
        raise SettingError(
            f"PACKRT_BLOCK_PREFILL={prefill!r} is not a road packrt knows; expected one of {', '.join(BLOCK_PREFILLS)} "
            "(unset it for the default, q8)"
        )
    step = environ.get("PACKRT_DECODE_STEP", "layer").strip().lower() or "layer"
    if step not in DECODE_STEPS:
        raise SettingError(
            f"PACKRT_DECODE_STEP={step!r} is not a road packrt knows; expected one of {', '.join(DECODE_STEPS)} "
            "(unset it for the default, layer)"
        )
    numba = environ.get("PACKRT_NUMBA", "1").strip() != "0"
    return Settings(blas=choice, numba=numba, block_prefill=prefill, decode_step=step)


_current: Settings | None = None
_listeners: list[Callable[[Settings, Settings], None]] = []  # called with (before, after) on every change


def current() -> Settings:
    """The settings in force: the environment's, read on the first call, as changed since."""
    settings = _current
    if settings is None:
        settings = _install(from_environment(os.environ))
    return settings


def on_change(listener: Callable[[Settings, Settings], None]) -> None:
    """Call ``listener(before, after)`` whenever the settings change (a module caching a decision taken
    from them, such as the GEMM road, forgets it there)."""
    _listeners.append(listener)


def update(**changes: object) -> Settings:
    """Change the process's settings from now on (``threads=`` is what ``set_num_threads`` sets)."""
    return _install(replace(current(), **changes))  # type: ignore[arg-type]


def _install(settings: Settings) -> Settings:
    global _current
    before, _current = _current, settings
    if before is not None and before != settings:
        for listener in _listeners:
            listener(before, settings)
    return settings


@contextlib.contextmanager
def override(**changes: object) -> Iterator[Settings]:
    """Within the block the process runs with ``changes`` applied (``blas="numpy"``, ``numba=False``);
    the settings as they were come back after it, even on error. Process-wide, not per thread."""
    before = current()
    try:
        yield update(**changes)
    finally:
        _install(before)


__all__ = [
    "BLAS_CHOICES",
    "BLOCK_PREFILLS",
    "DECODE_STEPS",
    "BlasChoice",
    "BlockPrefill",
    "DecodeStepRoad",
    "Settings",
    "current",
    "from_environment",
    "on_change",
    "override",
    "update",
]
