"""Tiny random transformers models, and the comparisons that hold what packrt serves from them to transformers.

Shared by the tests of from_pretrained against transformers (save_pretrained directories and GGUF files):
a tiny model of a family's config, the directory it is saved to, its logits, and the generation checks
(greedy tokens, and a left-padded batch stopped by an eos) that packrt must pass token for token.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

import packrt
from packrt.models import from_pretrained

VOCAB = 97
# hidden 32, two layers: the size of the tiny models of most families' tests
SMALL = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 64}
NO_SPECIAL_TOKENS = {"bos_token_id": None, "eos_token_id": None, "pad_token_id": None}
# the residencies the comparisons load under: served from the mapped file, and packed
RESIDENCIES = ("borrowed", "packed")


def encoder_fields(pad: int, **fields: Any) -> dict[str, Any]:
    """A tiny BERT-family config's fields: :data:`SMALL`'s widths, :data:`VOCAB` ids, 40 positions, weights
    drawn wide (``initializer_range`` 0.3) and padding id ``pad`` (roberta counts positions from it);
    ``fields`` on top."""
    return {
        **SMALL,
        "vocab_size": VOCAB,
        "max_position_embeddings": 40,
        "initializer_range": 0.3,
        "pad_token_id": pad,
        **fields,
    }


def tiny_model(transformers: ModuleType, config_class: str, model_class: str, **fields: Any) -> Any:
    """A random transformers ``model_class`` of ``config_class(**fields)``, in eval mode.

    Its weights are drawn wide (``initializer_range`` 0.3 unless ``fields`` gives one), which keeps the
    logits far apart so greedy decoding is a sharp test, and it has no bos/eos/pad token unless ``fields``
    names one, so every generation step runs.
    """
    config = getattr(transformers, config_class)(**{"initializer_range": 0.3, **NO_SPECIAL_TOKENS, **fields})
    return getattr(transformers, model_class)(config).eval()


def save(model: Any, directory: Path, **save_args: Any) -> tuple[Path, Any]:
    """(directory, model) once ``model`` is saved there with safetensors (``save_args``: save_pretrained's)."""
    model.save_pretrained(directory, safe_serialization=True, **save_args)
    return directory, model


def padded_batch(seed: int, pad: int, vocab: int = VOCAB) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """ids, attention_mask and token types of an encoder batch of three rows of 12: a full row, a
    right-padded one and a left-padded one (padding holds ``pad``; ids drawn from 3 up); the type is 1
    from position 6 on."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(3, vocab, (3, 12)).astype(np.int64)
    mask = np.ones_like(ids)
    mask[1, 7:] = 0
    mask[2, :4] = 0
    ids[mask == 0] = pad
    types = (np.arange(12)[None, :] >= 6).astype(np.int64).repeat(3, axis=0)
    return ids, mask, types


def perturb_norms(torch: ModuleType, model: Any, names: tuple[str, ...] = ("norm",)) -> None:
    """Every norm weight of ``model`` (every tensor whose name holds one of ``names``) moved off its init, so a
    norm read as ``w`` instead of ``1 + w``, or skipped (a bias initialized to zeros: skipped), shows in the
    outputs."""
    with torch.no_grad():
        for name, tensor in model.state_dict().items():
            if any(part in name for part in names):
                tensor.add_(0.3 * torch.randn_like(tensor))


def logits(torch: ModuleType, model: Any, ids: np.ndarray, mask: np.ndarray | None = None) -> np.ndarray:
    """transformers' float32 logits of ``model`` for ``ids`` (and ``attention_mask``, when given)."""
    kwargs = {} if mask is None else {"attention_mask": torch.from_numpy(mask)}
    with torch.no_grad():
        out: np.ndarray = model(torch.from_numpy(ids), **kwargs).logits.float().numpy()
    return out


def outputs(
    torch: ModuleType, model: Any, ids: np.ndarray, mask: np.ndarray, types: np.ndarray | None = None
) -> np.ndarray:
    """transformers' float32 logits (a causal model) or last hidden state (an encoder) of ``model`` for ``ids``,
    ``attention_mask`` and, when given, ``token_type_ids``."""
    kwargs = {"attention_mask": torch.from_numpy(mask)}
    if types is not None:
        kwargs["token_type_ids"] = torch.from_numpy(types)
    with torch.no_grad():
        out = model(torch.from_numpy(ids), **kwargs)
    result: np.ndarray = (out.logits if hasattr(out, "logits") else out.last_hidden_state).float().numpy()
    return result


def served(model: Any, ids: np.ndarray, mask: np.ndarray, types: np.ndarray | None = None) -> np.ndarray:
    """packrt's output of ``model`` for the same inputs as :func:`outputs`, as float32."""
    kwargs = {"attention_mask": packrt.from_numpy(mask)}
    if types is not None:
        kwargs["token_type_ids"] = packrt.from_numpy(types)
    out: np.ndarray = model(packrt.from_numpy(ids), **kwargs).to(packrt.float32).numpy()
    return out


def max_logits_diff(torch: ModuleType, model: Any, reference: Any, ids: np.ndarray) -> float:
    """The largest absolute difference between packrt's logits (``model``) and transformers' (``reference``)."""
    return float(np.abs(model(packrt.from_numpy(ids)).numpy() - logits(torch, reference, ids)).max())


def assert_close_on_real_tokens(ours: np.ndarray, theirs: np.ndarray, mask: np.ndarray, what: str) -> None:
    """packrt's output ``ours`` has transformers' shape and is within 1e-4 of ``theirs`` at every position
    ``mask`` keeps (padding is not compared); ``what`` names the case in a failure."""
    assert ours.shape == theirs.shape, f"{what}: shape {ours.shape}, transformers' {theirs.shape}"
    diff = float(np.abs(ours - theirs)[mask.astype(bool)].max())
    assert diff <= 1e-4, f"{what}: max abs diff {diff:.2e} against transformers"


def assert_served_borrowed(model: Any) -> None:
    """``model``, after a call, holds no packed weight and serves borrowed ones (from the mapped file)."""
    totals = packrt.nn.memory_report(model).totals()
    assert totals["packed"] == 0 and totals["borrowed"] > 0, totals


def assert_greedy_matches(
    torch: ModuleType, model: Any, reference: Any, ids: np.ndarray, new_tokens: int, **options: Any
) -> np.ndarray:
    """packrt's ``new_tokens`` greedy tokens after ``ids`` (``options``: generate's) are transformers', token
    for token; returns them."""
    ours: np.ndarray = model.generate(packrt.from_numpy(ids), new_tokens, **options).numpy()
    with torch.no_grad():
        theirs = reference.generate(torch.from_numpy(ids), max_new_tokens=new_tokens, do_sample=False).numpy()
    np.testing.assert_array_equal(ours, theirs)
    return ours


def assert_greedy_matches_but_near_ties(
    torch: ModuleType, model: Any, reference: Any, ids: np.ndarray, new_tokens: int, margin: float = 1e-3
) -> None:
    """packrt's greedy tokens are transformers' up to each row's first difference, and there transformers' own
    two best logits are within ``margin``: a near-tie that another summation order may break either way (as
    between two engines multiplying quantized weights in their own order)."""
    eos = reference.generation_config.eos_token_id  # both stop at transformers' eos and pad with it
    ours = model.generate(packrt.from_numpy(ids), new_tokens, eos_token_id=eos, pad_token_id=eos).numpy()
    with torch.no_grad():
        theirs = reference.generate(
            torch.from_numpy(ids), max_new_tokens=new_tokens, do_sample=False, eos_token_id=eos, pad_token_id=eos
        ).numpy()
    for row in range(ids.shape[0]):
        differ = np.flatnonzero(ours[row] != theirs[row])
        if differ.size == 0:
            continue
        at = int(differ[0])
        scores = logits(torch, reference, theirs[row : row + 1, :at])[0, -1]
        top = np.sort(scores)[-2:]
        assert top[1] - top[0] <= margin, (
            f"row {row} differs at token {at} ({ours[row, at]} vs {theirs[row, at]}) where transformers' best two "
            f"logits are {top[1] - top[0]:.2e} apart: not a near-tie"
        )


def assert_eos_generation_matches(
    torch: ModuleType, model: Any, reference: Any, ids: np.ndarray, mask: np.ndarray, eos_at: int
) -> None:
    """On a padded batch, with the eos set to the token the first row emits at column ``eos_at`` when no eos
    is set (so that row stops early) and pad id 0, packrt's 10 new tokens are transformers'."""
    free = model.generate(packrt.from_numpy(ids), 10, attention_mask=packrt.from_numpy(mask)).numpy()
    eos = int(free[0, eos_at])
    ours = model.generate(
        packrt.from_numpy(ids), 10, attention_mask=packrt.from_numpy(mask), eos_token_id=eos, pad_token_id=0
    ).numpy()
    with torch.no_grad():
        theirs = reference.generate(
            torch.from_numpy(ids),
            attention_mask=torch.from_numpy(mask),
            max_new_tokens=10,
            do_sample=False,
            eos_token_id=eos,
            pad_token_id=0,
        ).numpy()
    np.testing.assert_array_equal(ours, theirs)


def bf16_copies(torch: ModuleType, reference: Any, directory: Path, saved_to: Path) -> tuple[Any, dict[str, Any]]:
    """transformers' bf16 copy of ``reference`` (read from its checkpoint ``directory``), saved to ``saved_to``
    with safetensors, and packrt's models of that bf16 checkpoint under each of :data:`RESIDENCIES`."""
    half = type(reference).from_pretrained(directory, dtype=torch.bfloat16).eval()
    half.save_pretrained(saved_to, safe_serialization=True)
    models = {residency: from_pretrained(saved_to, weight_residency=residency) for residency in RESIDENCIES}
    return half, models


def assert_bf16_no_farther_than_transformers(
    name: str,
    batches: Sequence[tuple[np.ndarray, np.ndarray]],
    theirs: Callable[[Any, np.ndarray, np.ndarray], np.ndarray],
    ours: Callable[[Any, np.ndarray, np.ndarray], np.ndarray],
    models: dict[str, Any],
    exact_model: Any,
    half_model: Any,
) -> None:
    """packrt's bf16 ``models`` (by residency) are no farther from the fp32 result than transformers' own
    bf16 ``half_model``: the mean absolute error over the real tokens of ``batches`` (ids, mask), pooled,
    against ``exact_model``'s. ``theirs(model, ids, mask)`` and ``ours`` give float32 outputs."""
    errors_theirs: list[np.ndarray] = []
    errors_ours: dict[str, list[np.ndarray]] = {residency: [] for residency in models}
    for ids, mask in batches:
        exact, where = theirs(exact_model, ids, mask), mask.astype(bool)
        errors_theirs.append(np.abs(theirs(half_model, ids, mask) - exact)[where])
        for residency, model in models.items():
            errors_ours[residency].append(np.abs(ours(model, ids, mask) - exact)[where])
    their_error = np.concatenate(errors_theirs)
    for residency, errors in errors_ours.items():
        our_error = np.concatenate(errors)
        assert our_error.mean() <= their_error.mean(), (
            f"{name} {residency}: bf16 mean abs error {our_error.mean():.3e} is "
            f"{our_error.mean() / their_error.mean():.2f}x transformers' {their_error.mean():.3e} "
            f"(max {our_error.max():.3e} against {their_error.max():.3e})"
        )
