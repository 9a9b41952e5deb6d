"""What a family's config.json must hold, written as data and checked before any module is declared.

Each model type has a :class:`Schema`: its :class:`Field` rows (kind, default, the values packrt
implements and the ones transformers knows), which sizes the weight files must hold, which fields
divide which, and whether it carries rotary settings. :func:`validate` checks a config against it
(types: an int is never a bool, a float is finite; ranges: sizes positive, eps and ``rope_theta``
finite and positive; heads that divide the width; complete rope dicts; token ids inside the
vocabulary); :func:`check_capacity` then compares layer counts and widths with the checkpoint's
headers, so a config asking for ``n_layer: 10**9`` is refused in microseconds, before anything is
built. Every refusal is a :class:`ConfigError` naming the file, the field, the value and the fix; a
valid setting packrt does not implement yet (``rope_type: yarn``) is an
:class:`UnsupportedModelError` saying so and listing what is supported.

Adding a family is one entry in :data:`SCHEMAS` per model type (see the ones below).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Final, Literal, NamedTuple

from packrt.errors import CheckpointError
from packrt.models.hfconfig import UnsupportedModelError
from packrt.models.keymap import template_of

if TYPE_CHECKING:
    import packrt_io
    from packrt.models.hfconfig import HFConfig
    from packrt.models.keymap import KeyMap


class ConfigError(CheckpointError):
    """A config.json field is missing, of the wrong type, out of range, or disagrees with the weights."""


Kind = Literal[
    "size", "count", "eps", "number", "positive", "bool", "choice", "token_ids", "layer_types", "layer_flags"
]
REQUIRED: Final = object()
_FIX: Final = "config.json must describe the checkpoint beside it, as transformers' save_pretrained writes it"

# Every activation name transformers' ACT2FN knows: a name here that a family does not implement is
# "not implemented yet"; a name outside it is a mistake in the config.
HF_ACTIVATIONS: Final = (
    "gelu",
    "gelu_10",
    "gelu_accurate",
    "gelu_fast",
    "gelu_new",
    "gelu_python",
    "gelu_pytorch_tanh",
    "laplace",
    "leaky_relu",
    "linear",
    "mish",
    "prelu",
    "quick_gelu",
    "relu",
    "relu2",
    "relu6",
    "sigmoid",
    "silu",
    "swish",
    "tanh",
    "xielu",
)
HF_ROPE_TYPES: Final = ("default", "linear", "dynamic", "yarn", "longrope", "llama3", "proportional")
ROPE_TYPES: Final = ("default", "linear", "llama3", "yarn", "longrope")
# Older names transformers still reads for one model type (Phi-3's "su" is longrope).
LEGACY_ROPE_TYPES: Final[dict[str, tuple[str, ...]]] = {"phi3": ("su",)}
HF_LAYER_TYPES: Final = ("full_attention", "sliding_attention", "chunked_attention", "linear_attention")


@dataclass(frozen=True)
class Field:
    """One config.json field: its kind, default (``REQUIRED`` when it must be present), and limits.

    ``size``: a positive int (``null`` allowed when ``nullable``); ``count``: an int >= 0; ``eps``: a
    finite positive number (an epsilon); ``positive``: any other finite positive number; ``number``: a
    finite number; ``choice``: one of ``implemented`` (a value
    in ``known`` but not ``implemented`` is valid but not built by packrt); ``token_ids``: an id, a list
    of ids, or null, each inside the vocabulary; ``layer_types``: one of ``implemented`` per layer.
    ``held`` marks a width the weight files must hold: no larger than their largest tensor dimension.
    """

    name: str
    kind: Kind
    default: Any = REQUIRED
    implemented: tuple[str, ...] = ()
    known: tuple[str, ...] = ()
    held: bool = False
    nullable: bool = False


@dataclass(frozen=True)
class Schema:
    """A model type's fields and the checks across them (all data; see the module docstring).

    ``layers``: the field counting the layers the weights hold (default: transformers' usual name, as for
    ``vocab``); ``divides``: (divisor, dividend)
    pairs; ``head_dim``: (width, heads, head_dim field) for rotary families, where an explicit
    ``head_dim`` replaces ``width // heads`` (and must be even); ``vocab``: the field token ids must
    stay below; ``rope``: whether ``rope_parameters`` / ``rope_scaling`` / ``rope_theta`` apply
    (``"per_layer_type"``: one rope dict per attention type, as gemma3 keeps them: see
    :func:`rope_by_layer_type`); ``off``: true/false fields packrt implements only when false (a true
    value is valid for transformers but not built by packrt).
    """

    fields: tuple[Field, ...]
    layers: str = "num_hidden_layers"
    vocab: str = "vocab_size"
    divides: tuple[tuple[str, str], ...] = ()
    head_dim: tuple[str, str, str] | None = None
    rope: bool | Literal["per_layer_type"] = False
    off: tuple[str, ...] = ()


def _show(value: Any, limit: int = 80) -> str:
    shown = repr(value)
    return shown if len(shown) <= limit else f"{shown[:limit]}... ({len(shown) - limit} more characters)"


def error(config: HFConfig, name: str, value: Any, problem: str, fix: str = _FIX) -> ConfigError:
    """The ConfigError for field ``name`` of ``config``'s file holding ``value``."""
    shown = "missing" if value is REQUIRED else _show(value)
    return ConfigError(config.describe(name, f"is {shown}, {problem}", fix))


def unsupported(config: HFConfig, name: str, value: Any, implemented: tuple[str, ...], model_type: str) -> Exception:
    """The UnsupportedModelError for a valid setting packrt does not build yet."""
    return UnsupportedModelError(
        f"{str(config.path)!r}: field {name!r} is {_show(value)}: packrt does not implement {name} {_show(value)} "
        f"for {model_type!r} yet; supported: "
        f"{', '.join(implemented)} (the config is valid for transformers; serve it there, or re-export the "
        "model with a supported setting)"
    )


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


class _Scalar(NamedTuple):
    """How a field of a scalar kind is checked: which values it accepts, what the error says was expected,
    and the fix it gives (``{name}``: the field's name)."""

    accepts: Callable[[Any], bool]
    expected: str
    fix: str = _FIX


_SCALARS: Final[Mapping[str, _Scalar]] = {
    "size": _Scalar(
        lambda value: _is_int(value) and value > 0,
        "expected a positive integer",
        "set {name} to the model's size; " + _FIX,
    ),
    "count": _Scalar(
        lambda value: _is_int(value) and value >= 0, "expected an integer >= 0", "set {name} to a whole number"
    ),
    "eps": _Scalar(
        lambda value: _is_number(value) and value > 0,
        "expected a finite positive number",
        "set {name} to the epsilon the model was trained with (such as 1e-6)",
    ),
    "number": _Scalar(_is_number, "expected a finite number"),
    "positive": _Scalar(
        lambda value: _is_number(value) and value > 0,
        "expected a finite positive number",
        "set {name} to the model's value",
    ),
    "bool": _Scalar(lambda value: isinstance(value, bool), "expected true or false", "write {name} as a JSON boolean"),
}


def _check_field(config: HFConfig, field: Field, value: Any, model_type: str) -> None:
    kind, name = field.kind, field.name
    if value is None and (field.nullable or kind == "token_ids"):
        return
    scalar = _SCALARS.get(kind)
    if scalar is not None and not scalar.accepts(value):
        raise error(config, name, value, scalar.expected, scalar.fix.format(name=name))
    if kind == "choice":
        _check_choice(config, field, value, model_type, name)
    elif kind == "token_ids":
        _check_token_ids(config, name, value)
    elif kind == "layer_types":
        if not isinstance(value, list):
            raise error(config, name, value, "expected a list with one attention type per layer")
        for index, item in enumerate(value):
            _check_choice(config, field, item, model_type, f"{name}[{index}]")
    elif kind == "layer_flags" and (not isinstance(value, list) or any(item not in (0, 1) for item in value)):
        raise error(config, name, value, "expected a list with one 0 or 1 per layer", f"write {name} as 0s and 1s")


def _check_token_ids(config: HFConfig, name: str, value: Any) -> None:
    items = value if isinstance(value, list) else [value]
    if not items or not all(_is_int(item) and item >= 0 for item in items):
        raise error(
            config,
            name,
            value,
            "expected a token id (an integer >= 0), a list of them, or null",
            f"set {name} to the tokenizer's id for it, or null",
        )


def _check_choice(config: HFConfig, field: Field, value: Any, model_type: str, name: str) -> None:
    if value in field.implemented:
        return
    if isinstance(value, str) and value in field.known:
        raise unsupported(config, name, value, field.implemented, model_type)
    raise error(
        config,
        name,
        value,
        f"not a value transformers knows for it (known: {', '.join(field.known or field.implemented)})",
        f"use one of {', '.join(field.implemented)}",
    )


def schema_for(config: HFConfig) -> Schema:
    """The schema of config.json's ``model_type`` (every family packrt builds has one)."""
    model_type = config.get("model_type")
    schema = SCHEMAS.get(model_type) if isinstance(model_type, str) else None
    if schema is None:
        raise UnsupportedModelError(
            f"{str(config.path)!r}: model_type {_show(model_type)} has no config schema in packrt; "
            f"schemas exist for {', '.join(sorted(SCHEMAS))}"
        )
    return schema


def value_of(config: HFConfig, field: Field) -> Any:
    """The field's value in ``config``, its default when absent (ConfigError when required)."""
    if field.name in config:
        return config[field.name]
    if field.default is REQUIRED:
        raise error(config, field.name, REQUIRED, "and it is required", f"add {field.name}; {_FIX}")
    return field.default


def completed(config: HFConfig) -> HFConfig:
    """``config`` with every field its model type's schema gives a default filled in where config.json leaves it
    out (a field that must be present stays absent). The schema is the one statement of a family's defaults:
    a family reads the completed config and restates none of them. Completing twice changes nothing."""
    schema = schema_for(config)
    missing = {f.name: f.default for f in schema.fields if f.name not in config and f.default is not REQUIRED}
    return config.with_values(missing) if missing else config


def validate(config: HFConfig) -> Schema:
    """Check ``config`` against its model type's schema (see the module docstring); return the schema."""
    schema = schema_for(config)
    model_type = str(config.get("model_type"))
    values = {}
    for field in schema.fields:
        values[field.name] = value = value_of(config, field)
        _check_field(config, field, value, model_type)
    for divisor, dividend in schema.divides:
        if values[divisor] is not None and values[dividend] % values[divisor]:
            raise error(
                config,
                divisor,
                values[divisor],
                f"which does not divide {dividend}={values[dividend]}",
                f"set {divisor} to a divisor of {dividend}; {_FIX}",
            )
    head_dim = None if schema.head_dim is None else _check_head_dim(config, schema.head_dim, values)
    vocab = values[schema.vocab]
    for field in schema.fields:
        # A pad id is written into generated rows, so it must be a token; other ids only compare.
        if field.name == "pad_token_id" and values[field.name] is not None:
            ids = values[field.name] if isinstance(values[field.name], list) else [values[field.name]]
            if any(item >= vocab for item in ids):
                raise error(
                    config, field.name, values[field.name], f"outside the vocabulary [0, {vocab}) ({schema.vocab})"
                )
        listed = values[field.name] if field.kind in ("layer_types", "layer_flags") else None
        if listed is not None and len(listed) != values[schema.layers]:
            raise error(
                config,
                field.name,
                values[field.name],
                f"listing {len(values[field.name])} layers, but {schema.layers} is {values[schema.layers]}",
                "give one entry per layer",
            )
    for name in schema.off:
        if values.get(name):
            raise unsupported(config, name, True, ("false",), model_type)
    if schema.rope == "per_layer_type":
        for layer_type, params in rope_by_layer_type(config).items():
            check_rope_params(config, f"rope_parameters.{layer_type}", params, model_type, head_dim)
    elif schema.rope:
        check_rope(config, model_type, head_dim)
    return schema


def _check_head_dim(config: HFConfig, names: tuple[str, str, str], values: Mapping[str, Any]) -> int:
    """The head width (given, or width // heads), refused where it cannot be: heads not dividing the width
    without a head_dim given, or an odd width."""
    width_name, heads_name, head_dim_name = names
    width, heads, head_dim = values[width_name], values[heads_name], values[head_dim_name]
    if head_dim is None:
        if width % heads:
            raise error(
                config,
                heads_name,
                heads,
                f"which does not divide {width_name}={width} (and {head_dim_name} is not given)",
                f"set {head_dim_name} explicitly, or {heads_name} to a divisor of {width_name}",
            )
        head_dim, name = width // heads, f"{width_name} // {heads_name}"
    else:
        name = head_dim_name
    if head_dim % 2:
        raise error(
            config,
            head_dim_name,
            head_dim,
            f"but the head width ({name} = {head_dim}) must be even for rotary positions",
        )
    return int(head_dim)


def _rope_number(config: HFConfig, where: str, params: Mapping[str, Any], key: str, default: Any = REQUIRED) -> float:
    value = params.get(key, default)
    name = f"{where}.{key}" if where else key
    if value is REQUIRED:
        raise error(config, where, dict(params), f"which lacks {key!r}", f"add {name} (a finite positive number)")
    if not (_is_number(value) and value > 0):
        raise error(
            config,
            name,
            value,
            "expected a finite positive number",
            f"set {name} to the value the model was trained with (rope_theta is often 10000.0; factor >= 1)",
        )
    return float(value)


# rope settings an older config.json keeps at its top level, which transformers 5 moves into rope_parameters
_TOP_LEVEL_ROPE = ("partial_rotary_factor", "original_max_position_embeddings")


def rope_settings(config: HFConfig) -> dict[str, Any]:
    """The one rope dict of a single-table model, as transformers 5 reads it: ``rope_parameters`` (or an older
    file's ``rope_scaling``), with ``partial_rotary_factor`` and ``original_max_position_embeddings`` taken from
    the top level where the dict lacks them (``rope_theta`` too is read from either place by its users)."""
    given = config.get("rope_parameters") or config.get("rope_scaling") or {}
    params = dict(given) if isinstance(given, dict) else {}
    for key in _TOP_LEVEL_ROPE:
        if key not in params and config.get(key) is not None:
            params[key] = config[key]
    # transformers' exception: a top-level pretrained length wins over the dict's for the scaled types (Phi-3
    # keeps it there; its schema's default, 4096, is what a phi3 config without one means)
    kind = params.get("rope_type", params.get("type"))
    if kind in ("llama3", "yarn", "longrope") and config.get("original_max_position_embeddings") is not None:
        params["original_max_position_embeddings"] = config["original_max_position_embeddings"]
    return params


def check_rope(config: HFConfig, model_type: str, head_dim: int | None = None) -> None:
    """``rope_theta`` finite and positive; ``rope_parameters`` / ``rope_scaling`` a complete dict of a known type."""
    where = next((key for key in ("rope_parameters", "rope_scaling") if config.get(key) is not None), "")
    params = config.get(where) if where else {}
    if not isinstance(params, dict):
        raise error(config, where, params, "expected an object with rope_type and its parameters, or null")
    if "rope_theta" not in params:
        _rope_number(config, "", config, "rope_theta", 10000.0)
    check_rope_params(config, where, rope_settings(config), model_type, head_dim)


def rope_by_layer_type(config: HFConfig) -> dict[str, dict[str, Any]]:
    """Rotary settings per attention type, as transformers' Gemma3 config derives them.

    ``rope_parameters`` holds one dict per type (``full_attention``, ``sliding_attention``); a type it
    lacks is ``default``. Older files give the global layers' ``rope_theta`` (default 1e6) and
    ``rope_scaling``, and the local layers' ``rope_local_base_freq`` (default 1e4) instead.
    """
    given = config.get("rope_parameters")
    if given is not None and not isinstance(given, dict):
        raise error(config, "rope_parameters", given, "expected an object with one rope dict per attention type")
    given = given or {}
    out: dict[str, dict[str, Any]] = {}
    for layer_type, theta_key, theta in (
        ("full_attention", "rope_theta", 1_000_000.0),
        ("sliding_attention", "rope_local_base_freq", 10_000.0),
    ):
        params = given.get(layer_type) or {"rope_type": "default"}
        if not isinstance(params, dict):
            raise error(config, f"rope_parameters.{layer_type}", params, "expected an object with rope_type")
        params = dict(params)
        scaling = config.get("rope_scaling")
        if layer_type == "full_attention" and isinstance(scaling, dict):
            params.update(scaling)
        params.setdefault("rope_theta", config.get(theta_key, theta))
        out[layer_type] = params
    return out


def rotary_dim(params: Mapping[str, Any], head_dim: int) -> int:
    """How many features of a head rotate: ``head_dim * partial_rotary_factor`` rounded down, as transformers
    takes it (the whole head by default)."""
    return int(head_dim * float(params.get("partial_rotary_factor", 1.0)))


def check_rope_params(
    config: HFConfig, where: str, params: Mapping[str, Any], model_type: str, head_dim: int | None = None
) -> None:
    """One rope dict (found at ``where``): its theta, a type packrt implements and that type's numbers (the
    rotated width and LongRoPE's factor lists against ``head_dim`` where it is known)."""
    if "rope_theta" in params:
        _rope_number(config, where, params, "rope_theta")
    type_key = "rope_type" if "rope_type" in params else "type"
    kind = params.get(type_key, "default")
    known = HF_ROPE_TYPES + LEGACY_ROPE_TYPES.get(model_type, ())
    if kind not in ROPE_TYPES:
        if isinstance(kind, str) and kind in known:
            raise unsupported(config, "rope_type", kind, ROPE_TYPES, model_type)
        raise error(
            config,
            f"{where}.{type_key}",
            kind,
            f"not a rope type transformers knows ({', '.join(known)})",
            f"use one of {', '.join(ROPE_TYPES)}",
        )
    partial = params.get("partial_rotary_factor", 1.0)
    if not (_is_number(partial) and 0 < partial <= 1):
        raise error(config, f"{where}.partial_rotary_factor", partial, "expected a number in (0, 1]")
    pairs = None
    if head_dim is not None:
        dim = rotary_dim(params, head_dim)
        if dim <= 0 or dim % 2:
            raise error(
                config,
                f"{where}.partial_rotary_factor" if where else "partial_rotary_factor",
                partial,
                f"which rotates {dim} of the head's {head_dim} features; rotary features pair up",
                "give a factor whose product with the head width is a positive even number",
            )
        pairs = dim // 2
    if kind == "longrope":
        _check_longrope(config, where, params, pairs)
    if kind in ("linear", "llama3") or (kind == "yarn" and params.get("factor") is not None):
        _rope_number(config, where, params, "factor")
    if kind == "yarn":
        for name in ("beta_fast", "beta_slow", "attention_factor", "mscale", "mscale_all_dim"):
            if params.get(name) is not None:
                _rope_number(config, where, params, name)
        original = params.get("original_max_position_embeddings", config.get("max_position_embeddings", 8192))
        if not (_is_int(original) and original > 0):
            raise error(config, f"{where}.original_max_position_embeddings", original, "expected a positive integer")
    if kind == "llama3":
        low = _rope_number(config, where, params, "low_freq_factor")
        high = _rope_number(config, where, params, "high_freq_factor")
        if not high > low:
            raise error(
                config, f"{where}.high_freq_factor", high, f"but llama3 scaling needs it above low_freq_factor={low}"
            )
        original = params.get("original_max_position_embeddings", config.get("max_position_embeddings", 8192))
        if not (_is_int(original) and original > 0):
            raise error(config, f"{where}.original_max_position_embeddings", original, "expected a positive integer")


def _check_longrope(config: HFConfig, where: str, params: Mapping[str, Any], pairs: int | None) -> None:
    """LongRoPE's numbers: a short and a long factor list of one length (``pairs``, one per rotated pair,
    where the head width is known), the pretrained context length, and ``factor`` / ``attention_factor``
    where given."""
    lengths = []
    for name in ("short_factor", "long_factor"):
        factors = params.get(name)
        if not (isinstance(factors, list) and factors and all(_is_number(f) and f > 0 for f in factors)):
            raise error(config, f"{where}.{name}", factors, "expected a list of positive numbers, one per rotary pair")
        lengths.append(len(factors))
    if lengths[0] != lengths[1]:
        raise error(
            config,
            f"{where}.long_factor",
            params.get("long_factor"),
            f"listing {lengths[1]} factors, but short_factor lists {lengths[0]}",
            "give both one factor per rotary pair",
        )
    if pairs is not None and lengths[0] != pairs:
        raise error(
            config,
            f"{where}.short_factor",
            params.get("short_factor"),
            f"listing {lengths[0]} factors, but the head rotates {2 * pairs} features in {pairs} pairs",
            "give one factor per pair",
        )
    original = params.get("original_max_position_embeddings")
    if not (isinstance(original, int) and _is_int(original) and original > 0):
        raise error(
            config,
            f"{where}.original_max_position_embeddings",
            original,
            "expected a positive integer (the context length the short factors serve)",
        )
    for name in ("factor", "attention_factor"):
        if params.get(name) is not None:
            _rope_number(config, where, params, name)


def check_capacity(config: HFConfig, schema: Schema, info: packrt_io.CheckpointInfo, keymap: KeyMap) -> None:
    """Layer count and widths no larger than the weight files hold, read from the headers alone.

    The layers are counted from the layer indices of the tensor names the family's key map knows;
    each ``held`` width must fit within the largest tensor dimension. Run before the model is declared, so
    a config asking for more than the files can hold costs no building.
    """
    indices = set()
    largest = 0
    for key, tensor in info.tensors.items():
        largest = max(largest, *tensor.shape, 0)
        found = keymap.lookup(key)
        if found is not None and found != "ignored":
            numbers = template_of(found.model)[1]
            if numbers:
                indices.add(int(numbers[0]))
    held = max(indices) + 1 if indices else 0
    layers = value_of(config, next(f for f in schema.fields if f.name == schema.layers))
    where = str(info.path)
    if layers > held:
        raise error(
            config,
            schema.layers,
            layers,
            f"but the weight files ({where!r}) hold tensors for {held} layer(s)",
            f"set {schema.layers} to {held}, or use the config.json saved with these weights",
        )
    for field in schema.fields:
        value = value_of(config, field)
        if field.held and value is not None and value > largest:
            raise error(
                config,
                field.name,
                value,
                f"larger than any dimension of the tensors in the weight files ({where!r}; the largest is {largest})",
                "use the config.json saved with these weights",
            )


# -- the families' schemas ---------------------------------------------------------------------------

# The sizes every family but GPT-2 names the same way, and the special token ids of the causal families.
_SIZES = (
    Field("vocab_size", "size", held=True),
    Field("hidden_size", "size", held=True),
    Field("num_hidden_layers", "size"),
    Field("num_attention_heads", "size"),
)
_TOKEN_IDS = (
    Field("pad_token_id", "token_ids", None),
    Field("bos_token_id", "token_ids", None),
    Field("eos_token_id", "token_ids", None),
)
# A rotary decoder's key/value heads divide its query heads; an explicit head_dim replaces hidden // heads.
_KV_GROUPS = (("num_key_value_heads", "num_attention_heads"),)
_ROTARY_HEAD_DIM = ("hidden_size", "num_attention_heads", "head_dim")

_BERT = Schema(
    fields=(
        *_SIZES,
        Field("intermediate_size", "size", held=True),
        Field("max_position_embeddings", "size", 512, held=True),
        Field("type_vocab_size", "size", 2, held=True),
        Field("layer_norm_eps", "eps", 1e-12),
        Field("hidden_act", "choice", "gelu", implemented=("gelu",), known=HF_ACTIVATIONS),
        Field(
            "position_embedding_type",
            "choice",
            "absolute",
            implemented=("absolute",),
            known=("absolute", "relative_key", "relative_key_query"),
        ),
        Field("pad_token_id", "token_ids", None),
    ),
    divides=(("num_attention_heads", "hidden_size"),),
)


def _replace_default(field: Field, default: Any) -> Field:
    return replace(field, default=default)


# RobertaConfig's and XLMRobertaConfig's pad id is 1 (its positions are numbered from pad id + 1)
_ROBERTA = replace(_BERT, fields=tuple(_replace_default(f, 1) if f.name == "pad_token_id" else f for f in _BERT.fields))

_GPT2 = Schema(
    fields=(
        Field("vocab_size", "size", held=True),
        Field("n_embd", "size", held=True),
        Field("n_layer", "size"),
        Field("n_head", "size"),
        Field("n_positions", "size", 1024, held=True),
        Field("n_inner", "size", None, held=True, nullable=True),
        Field("layer_norm_epsilon", "eps", 1e-5),
        Field(
            "activation_function",
            "choice",
            "gelu_new",
            implemented=("gelu_new", "gelu_pytorch_tanh", "gelu", "relu", "silu"),
            known=HF_ACTIVATIONS,
        ),
        Field("scale_attn_weights", "bool", True),
        Field("scale_attn_by_inverse_layer_idx", "bool", False),
        Field("tie_word_embeddings", "bool", True),
        *_TOKEN_IDS,
    ),
    layers="n_layer",
    divides=(("n_head", "n_embd"),),
)


def _decoder(
    *extra: Field, head_dim: int | None = None, eps: float = 1e-6, positions: int = 2048, tied: bool = False
) -> Schema:
    """The llama-like decoders' schema (llama, qwen2, mistral, qwen3, phi3), plus the fields one model type adds.

    ``head_dim``: the head width a config without ``head_dim`` means (None: hidden_size // heads); ``eps`` and
    ``positions``, ``tied``: the ``rms_norm_eps``, ``max_position_embeddings`` and ``tie_word_embeddings`` one
    without them means (each model type's transformers config class's own defaults).
    """
    return Schema(
        fields=(
            *_SIZES,
            Field("num_key_value_heads", "size", None, nullable=True),
            Field("head_dim", "size", head_dim, held=True, nullable=True),
            Field("intermediate_size", "size", held=True),
            Field("max_position_embeddings", "size", positions),
            Field("rms_norm_eps", "eps", eps),
            Field("hidden_act", "choice", "silu", implemented=("silu",), known=HF_ACTIVATIONS),
            Field("attention_bias", "bool", False),
            Field("mlp_bias", "bool", False),
            Field("tie_word_embeddings", "bool", tied),
            *_TOKEN_IDS,
            *extra,
        ),
        divides=_KV_GROUPS,
        head_dim=_ROTARY_HEAD_DIM,
        rope=True,
    )


_WINDOW = Field("sliding_window", "size", None, nullable=True)
_LAYER_TYPES = Field(
    "layer_types",
    "layer_types",
    None,
    implemented=("full_attention", "sliding_attention"),
    known=HF_LAYER_TYPES,
    nullable=True,
)
_QWEN_WINDOWS = (
    _WINDOW,
    Field("use_sliding_window", "bool", False),
    Field("max_window_layers", "count", 28),
    _LAYER_TYPES,
)


def _gemma(
    *extra: Field, positions: int, caps: tuple[float | None, float | None], bidirectional: bool | None
) -> tuple[Field, ...]:
    """The fields Gemma 2's and Gemma 3's text configs share, with each one's ``max_position_embeddings``,
    (final, attention) soft caps and ``use_bidirectional_attention`` defaults, then ``extra``."""
    return (
        *_SIZES,
        Field("num_key_value_heads", "size", 4),
        Field("head_dim", "size", 256, held=True),
        Field("intermediate_size", "size", held=True),
        Field("max_position_embeddings", "size", positions),
        Field("rms_norm_eps", "eps", 1e-6),
        Field(
            "hidden_activation", "choice", "gelu_pytorch_tanh", implemented=("gelu_pytorch_tanh",), known=HF_ACTIVATIONS
        ),
        Field("attention_bias", "bool", False),
        Field("tie_word_embeddings", "bool", True),
        Field("query_pre_attn_scalar", "positive", 256),
        Field("sliding_window", "size", 4096, nullable=True),
        _LAYER_TYPES,
        Field("final_logit_softcapping", "positive", caps[0], nullable=True),
        Field("attn_logit_softcapping", "positive", caps[1], nullable=True),
        Field("use_bidirectional_attention", "bool", bidirectional, nullable=True),
        *extra,
        *_TOKEN_IDS,
    )


# Gemma3ForCausalLM's config (model_type gemma3_text): sandwich norms and two kinds of layer, each with its rope.
_GEMMA3 = Schema(
    fields=_gemma(
        Field("sliding_window_pattern", "size", 6),
        Field("rope_theta", "positive", 1_000_000.0),
        Field("rope_local_base_freq", "positive", 10_000.0),
        positions=131_072,
        caps=(None, None),
        bidirectional=False,
    ),
    divides=_KV_GROUPS,
    head_dim=_ROTARY_HEAD_DIM,
    rope="per_layer_type",
)
# Gemma2ForCausalLM's config: Gemma 3's text model's shape with one rotary table, no per-head norms, and the
# attention's scores soft-capped; local and global layers alternate
_GEMMA2 = Schema(
    fields=_gemma(positions=8192, caps=(30.0, 50.0), bidirectional=None),
    divides=_KV_GROUPS,
    head_dim=_ROTARY_HEAD_DIM,
    rope=True,
    off=("use_bidirectional_attention",),
)

# ModernBertConfig's defaults: a bidirectional rotary encoder (packrt.models.modernbert); its rope dicts per
# attention type (or global_rope_theta / local_rope_theta) are read and checked by the family
_MODERNBERT = Schema(
    fields=(
        *_SIZES,
        Field("intermediate_size", "size", 1152, held=True),
        Field("max_position_embeddings", "size", 8192),
        Field("norm_eps", "eps", 1e-5),
        Field("norm_bias", "bool", False),
        Field("attention_bias", "bool", False),
        Field("mlp_bias", "bool", False),
        Field("classifier_bias", "bool", False),
        Field("hidden_activation", "choice", "gelu", implemented=("gelu",), known=HF_ACTIVATIONS),
        Field("classifier_activation", "choice", "gelu", implemented=("gelu",), known=HF_ACTIVATIONS),
        Field("classifier_pooling", "choice", "cls", implemented=("cls", "mean"), known=("cls", "mean")),
        Field("local_attention", "size", 128),
        Field("global_attn_every_n_layers", "size", 3),
        _LAYER_TYPES,
        *_TOKEN_IDS,
    ),
    divides=(("num_attention_heads", "hidden_size"),),
)

# SmolLM3's config: llama's, NoPE layers (``no_rope_layers``: 1 rotates, 0 does not; by default every
# ``no_rope_layer_interval``-th layer does not), sliding windows on the NoPE layers when asked
_SMOLLM3 = _decoder(
    *_QWEN_WINDOWS[:2],
    _LAYER_TYPES,
    Field("no_rope_layers", "layer_flags", None, nullable=True),
    Field("no_rope_layer_interval", "size", 4),
    Field("rope_theta", "positive", 2_000_000.0),
    positions=32_768,
    tied=True,
)

# Granite's config: llama's, with four multipliers (the embeddings, each residual branch, the attention's scale
# in place of 1/sqrt(head_dim), and the logits divided)
_GRANITE = _decoder(
    Field("embedding_multiplier", "positive", 1.0),
    Field("residual_multiplier", "positive", 1.0),
    Field("attention_multiplier", "positive", 1.0),
    Field("logits_scaling", "positive", 1.0),
)

# GptOssConfig's defaults: every layer a sparse mixture of experts with biases and a clamped SwiGLU, attention
# with biases and sinks, sliding and full layers alternating (packrt.models.gpt_oss reads the MoE fields; its
# hidden_act is not read, by transformers either: the experts' activation is fixed)
_GPT_OSS = Schema(
    fields=(
        *_SIZES,
        Field("num_key_value_heads", "size", 8, nullable=True),
        Field("head_dim", "size", 64, held=True, nullable=True),
        Field("intermediate_size", "size", 2880, held=True),
        Field("max_position_embeddings", "size", 131_072),
        Field("rms_norm_eps", "eps", 1e-5),
        Field("attention_bias", "bool", True),
        Field("tie_word_embeddings", "bool", False),
        Field("rope_theta", "positive", 150_000.0),
        _replace_default(_WINDOW, 128),
        _LAYER_TYPES,
        Field("num_local_experts", "size", 128),
        Field("num_experts_per_tok", "size", 4),
        Field("swiglu_alpha", "number", 1.702),
        Field("swiglu_limit", "positive", 7.0),
        *_TOKEN_IDS,
    ),
    divides=_KV_GROUPS,
    head_dim=_ROTARY_HEAD_DIM,
    rope=True,
)

SCHEMAS: dict[str, Schema] = {
    "bert": _BERT,
    "modernbert": _MODERNBERT,
    "roberta": _ROBERTA,  # BERT's fields, pad id 1; its position numbering (from pad_token_id + 1) is the family's
    "xlm-roberta": _ROBERTA,
    "gpt2": _GPT2,
    "llama": _decoder(),
    "mistral": _decoder(_replace_default(_WINDOW, 4096), positions=131_072),
    "qwen2": _decoder(*_QWEN_WINDOWS, positions=32_768),
    "qwen3": _decoder(*_QWEN_WINDOWS, head_dim=128, positions=32_768),
    # Qwen3MoeConfig's defaults (num_experts, which transformers 5 may save as num_local_experts, and
    # mlp_only_layers are read by the family: packrt.models.qwen3_moe)
    "qwen3_moe": _decoder(
        *_QWEN_WINDOWS,
        Field("num_experts_per_tok", "size", 8),
        Field("moe_intermediate_size", "size", 768, held=True),
        Field("decoder_sparse_step", "size", 1),
        Field("norm_topk_prob", "bool", False),
        head_dim=128,
        positions=32_768,
    ),
    "gemma3_text": _GEMMA3,
    "phi3": _decoder(_WINDOW, Field("original_max_position_embeddings", "size", 4096), eps=1e-5, positions=4096),
    "ministral": _decoder(_replace_default(_WINDOW, 4096), _LAYER_TYPES, positions=131_072),
    "smollm3": _SMOLLM3,
    "granite": _GRANITE,
    "gemma2": _GEMMA2,
    "olmo2": _decoder(eps=1e-5),  # llama's fields; its norms' placement is the family's
    "gpt_oss": _GPT_OSS,
}

__all__ = [
    "HF_ACTIVATIONS",
    "HF_ROPE_TYPES",
    "LEGACY_ROPE_TYPES",
    "ROPE_TYPES",
    "SCHEMAS",
    "ConfigError",
    "Field",
    "Schema",
    "UnsupportedModelError",
    "check_capacity",
    "check_rope",
    "rope_settings",
    "rotary_dim",
    "check_rope_params",
    "completed",
    "rope_by_layer_type",
    "schema_for",
    "validate",
]
