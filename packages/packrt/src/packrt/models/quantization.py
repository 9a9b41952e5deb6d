"""``from_pretrained(..., quantize="int8")``: every Linear of a loaded model as an int8
:class:`~packrt.nn.QuantizedLinear`, but the ones that stay float.

What is quantized: each ``nn.Linear`` whose weight no other module holds (attention projections,
fused QKV, MLPs, an untied LM head), symmetric int8 per output channel at load; activations are
quantized per row at run time (see docs/guides/int8.md).

What stays float, and why:

- embeddings (token, position, token-type): a lookup, not a GEMM, so int8 would save memory only,
  and they set the scale of everything after them;
- a Linear whose weight is tied to another module (an LM head sharing the token embedding): the
  float embedding must stay, so an int8 copy of it would add memory rather than save it;
- norms, biases (kept float32 inside each QuantizedLinear) and everything that is not a Linear.
"""

from __future__ import annotations

from collections import Counter

from packrt import nn
from packrt.errors import CheckpointError, PackrtError

QUANTIZE = ("int8",)


class QuantizeError(PackrtError, ValueError):
    """``quantize=`` names no scheme packrt has (also a ValueError: the value is wrong)."""


def check_quantize(quantize: str | None) -> None:
    """:class:`QuantizeError` unless ``quantize`` is None or one of :data:`QUANTIZE`."""
    if quantize is not None and quantize not in QUANTIZE:
        raise QuantizeError(
            f"from_pretrained: quantize={quantize!r} is not a scheme packrt has; expected one of "
            f"{', '.join(repr(q) for q in QUANTIZE)}, or None to keep the checkpoint's floats"
        )


def quantize_linears(model: nn.Module, weight_residency: str | None = None) -> list[str]:
    """Replace each untied ``nn.Linear`` of ``model`` with ``QuantizedLinear.from_float`` of it (in
    place) and return the replaced paths. A Linear whose weight another module also holds stays."""
    holders = Counter(id(p) for _, p in model.named_parameters(remove_duplicate=False))
    targets = [
        path for path, module in model.named_modules() if type(module) is nn.Linear and holders[id(module.weight)] == 1
    ]
    replacements = []  # every layer quantized before any is swapped: a failure leaves the model as it was
    for path in targets:
        linear = model.get_submodule(path)
        assert isinstance(linear, nn.Linear)
        try:
            replacements.append((path, nn.QuantizedLinear.from_float(linear, weight_residency=weight_residency)))
        except ValueError as err:
            raise CheckpointError(f"{path}: cannot quantize to int8 ({err}); load without quantize=") from err
    for path, quantized in replacements:
        model.set_submodule(path, quantized)
    return targets


__all__ = ["QUANTIZE", "QuantizeError", "check_quantize", "quantize_linears"]
