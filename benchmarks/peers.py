"""The peer engines CPU users pick, built from the same Hugging Face directory packrt and transformers load.

- **ONNX Runtime** (``ort-fp32``, ``ort-int8``): the transformers model exported with
  ``torch.onnx.export`` (TorchScript exporter, opset 17, dynamic batch and sequence; inputs
  ``input_ids`` and ``attention_mask``, output the last hidden state), run with every graph
  optimisation (``ORT_ENABLE_ALL``); int8 is ``onnxruntime.quantization.quantize_dynamic`` of that
  export (int8 weights, activations quantised per call). Encoders only: exporting a decoder with
  its key/value cache as graph inputs and outputs is not built here, so the decode cases list ORT
  as missing with that reason.
- **CTranslate2** (``ct2-fp32``, ``ct2-int8``): ``ctranslate2.converters.TransformersConverter``
  of the directory (float32 weights), loaded as ``ctranslate2.Encoder`` (BERT) or
  ``ctranslate2.Generator`` (llama, gpt2) with ``compute_type`` float32 or int8 (CTranslate2
  quantises the weights when it loads them).

Exports are cached under ``.benchmarks/peers/<name>-<hash>/`` (``PACKRT_PEER_CACHE`` moves it),
keyed by the bytes of the model's config and weights, so a second run reuses them and a changed
model gets new ones. Nothing is downloaded. An engine that is not installed or fails to export,
convert or load is returned as a :class:`Missing` with the reason, which the report prints; it is
never dropped silently.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from bench_support import as_f32

ROOT = Path(__file__).resolve().parent.parent
FP32_PEERS = ("ort-fp32", "ct2-fp32")
INT8_PEERS = ("ort-int8", "ct2-int8")
PEERS = FP32_PEERS + INT8_PEERS


@dataclass(frozen=True)
class Missing:
    """An engine that could not run a case, and why (shown in the report's peer table)."""

    impl: str
    reason: str


def cache_dir() -> Path:
    """Where exports and conversions are kept between runs."""
    chosen = os.environ.get("PACKRT_PEER_CACHE")
    return Path(chosen) if chosen else ROOT / ".benchmarks" / "peers"


# What a conversion reads besides the weights: the config, and the tokenizer (CTranslate2's vocabulary).
_KEYED = ("config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")


def model_key(directory: Path, name: str) -> Path:
    """``cache_dir()/<name>-<sha256 of the config, tokenizer and weights>``: a changed model gets a new folder."""
    digest = hashlib.sha256()
    for path in sorted(directory.iterdir()):
        if path.name in _KEYED or path.suffix == ".safetensors":
            digest.update(path.name.encode())
            with path.open("rb") as f:
                for block in iter(lambda: f.read(1 << 24), b""):
                    digest.update(block)
    out = cache_dir() / f"{name}-{digest.hexdigest()[:16]}"
    out.mkdir(parents=True, exist_ok=True)
    return out


def _reason(err: BaseException) -> str:
    text = " ".join(str(err).split())
    return f"{type(err).__name__}: {text[:300]}"


def _module(name: str) -> Any:
    return importlib.import_module(name)


def write_word_tokenizer(directory: Path, vocab: int) -> None:
    """A word-level tokenizer ``t0 .. t<vocab-1>`` saved into a random model's directory: CTranslate2's
    converter reads the vocabulary and the unknown, start and end tokens from the tokenizer, and a
    random model has none. (Decoding never stops at the end token ``t2``: every engine is asked for
    exactly the same number of new tokens.)"""
    tokenizers, transformers = _module("tokenizers"), _module("transformers")
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel({f"t{i}": i for i in range(vocab)}, unk_token="t0"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.WhitespaceSplit()
    transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="t0", bos_token="t1", eos_token="t2"
    ).save_pretrained(directory)


# -- ONNX Runtime -----------------------------------------------------------------------------------------
def _export_encoder(reference: Any, path: Path) -> None:
    torch = _module("torch")

    class LastHidden(torch.nn.Module):  # type: ignore[misc,name-defined]
        """The encoder with keyword inputs, as the exporter traces positional ones."""

        def __init__(self, model: Any) -> None:
            super().__init__()
            self.model = model

        def forward(self, input_ids: Any, attention_mask: Any) -> Any:
            return self.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state

    ids = torch.ones((2, 8), dtype=torch.int64)
    partial = path.with_suffix(".partial.onnx")
    with torch.inference_mode():
        torch.onnx.export(
            LastHidden(reference.float()).eval(),
            (ids, torch.ones_like(ids)),
            str(partial),
            input_names=["input_ids", "attention_mask"],
            output_names=["last_hidden_state"],
            dynamic_axes={name: {0: "batch", 1: "seq"} for name in ("input_ids", "attention_mask")},
            opset_version=17,
            dynamo=False,  # the dynamo exporter needs onnxscript, which the session does not install
        )
    partial.replace(path)


def ort_encoders(reference: Any, key: Path, threads: int) -> dict[str, Any]:
    """``{"ort-fp32": session | Missing, "ort-int8": session | Missing}`` for a transformers encoder."""
    try:
        ort = _module("onnxruntime")
        quantization = _module("onnxruntime.quantization")
    except ImportError as err:
        return {impl: Missing(impl, f"onnxruntime not installed ({_reason(err)})") for impl in ("ort-fp32", "ort-int8")}
    fp32, int8 = key / "model.onnx", key / "model.int8.onnx"
    out: dict[str, Any] = {}
    try:
        if not fp32.exists():
            _export_encoder(reference, fp32)
    except Exception as err:  # any exporter failure is the reason shown for both rows
        return {impl: Missing(impl, f"torch.onnx.export failed: {_reason(err)}") for impl in ("ort-fp32", "ort-int8")}
    try:
        if not int8.exists():
            partial = int8.with_suffix(".partial.onnx")
            quantization.quantize_dynamic(str(fp32), str(partial), weight_type=quantization.QuantType.QInt8)
            partial.replace(int8)
    except Exception as err:
        out["ort-int8"] = Missing("ort-int8", f"quantize_dynamic failed: {_reason(err)}")
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    for impl, path in (("ort-fp32", fp32), ("ort-int8", int8)):
        if impl in out:
            continue
        try:
            out[impl] = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        except Exception as err:
            out[impl] = Missing(impl, f"InferenceSession failed: {_reason(err)}")
    return out


def ort_call(session: Any, ids: np.ndarray, mask: np.ndarray) -> Callable[[], Any]:
    feeds = {"input_ids": ids.astype(np.int64), "attention_mask": mask.astype(np.int64)}
    return lambda: session.run(None, feeds)[0]


# -- CTranslate2 ------------------------------------------------------------------------------------------
def _ct2_model(directory: Path, key: Path) -> Path:
    """The directory converted to CTranslate2 (float32 weights), once per model."""
    ct2 = _module("ctranslate2.converters")
    out = key / "ct2"
    if (out / "model.bin").exists():
        return out
    staged = key / "ct2-source"
    shutil.rmtree(staged, ignore_errors=True)
    staged.mkdir()
    for path in directory.iterdir():
        if path.is_file():
            (staged / path.name).symlink_to(path.resolve())
    config = json.loads((directory / "config.json").read_text())
    if config.get("model_type") == "bert":
        # CTranslate2 4.8's BERT loader reads config.position_embedding_type, which transformers 5
        # no longer defines (BERT's positions are absolute); given here, in a staged copy of config.json.
        config.setdefault("position_embedding_type", "absolute")
        (staged / "config.json").unlink()
        (staged / "config.json").write_text(json.dumps(config))
    ct2.TransformersConverter(str(staged)).convert(str(out), force=True)
    return out


def ct2_engines(directory: Path, key: Path, kind: str, threads: int) -> dict[str, Any]:
    """``{"ct2-fp32": model | Missing, "ct2-int8": ...}``: a ``ctranslate2.Encoder`` (kind "encoder") or
    ``ctranslate2.Generator`` (kind "generator") at compute_type float32 and int8."""
    try:
        ctranslate2 = _module("ctranslate2")
    except ImportError as err:
        return {impl: Missing(impl, f"ctranslate2 not installed ({_reason(err)})") for impl in ("ct2-fp32", "ct2-int8")}
    try:
        converted = _ct2_model(directory, key)
    except Exception as err:
        reason = f"TransformersConverter failed: {_reason(err)}"
        return {impl: Missing(impl, reason) for impl in ("ct2-fp32", "ct2-int8")}
    cls = ctranslate2.Encoder if kind == "encoder" else ctranslate2.Generator
    out: dict[str, Any] = {}
    for impl, compute in (("ct2-fp32", "float32"), ("ct2-int8", "int8")):
        try:
            out[impl] = cls(str(converted), device="cpu", compute_type=compute, intra_threads=threads, inter_threads=1)
        except Exception as err:
            out[impl] = Missing(impl, f"ctranslate2.{cls.__name__}(compute_type={compute!r}) failed: {_reason(err)}")
    return out


def ct2_encode_call(encoder: Any, ids: np.ndarray) -> Callable[[], Any]:
    ctranslate2 = _module("ctranslate2")
    tokens = ctranslate2.StorageView.from_array(np.ascontiguousarray(ids, dtype=np.int32))
    lengths = ctranslate2.StorageView.from_array(np.full((ids.shape[0],), ids.shape[1], dtype=np.int32))
    return lambda: np.asarray(encoder.forward_batch(tokens, lengths).last_hidden_state)


def ct2_generate_call(generator: Any, prompt: np.ndarray, new_tokens: int) -> Callable[[], list[int]]:
    """Greedy decode of exactly ``new_tokens`` tokens after the prompt (its tokens forwarded at once)."""
    start = [[f"t{int(i)}" for i in prompt]]

    def call() -> list[int]:
        result = generator.generate_batch(
            start,
            max_length=new_tokens,
            min_length=new_tokens,
            include_prompt_in_result=False,
            sampling_topk=1,
            beam_size=1,
        )
        return [int(i) for i in result[0].sequences_ids[0]]

    return call


# -- encoder cases' inputs -------------------------------------------------------------------------------
def encoder_batch(vocab: int, batch: int, seq: int) -> tuple[np.ndarray, np.ndarray]:
    """A ``batch`` x ``seq`` encoder input: int64 ids in ``[0, vocab)`` drawn from a generator seeded by the
    shape (a case gets the same ids in every run and every script) and an all-ones attention mask."""
    ids = np.random.default_rng(batch * 1000 + seq).integers(0, vocab, (batch, seq)).astype(np.int64)
    return ids, np.ones_like(ids)


def torch_encoder_call(torch: Any, reference: Any, ids: np.ndarray, mask: np.ndarray) -> Callable[[], Any]:
    """transformers' last hidden state for ``ids`` under ``mask``, in inference mode: what each engine is
    timed against and held to."""
    tids, tmask = torch.from_numpy(ids), torch.from_numpy(mask)

    def call() -> Any:
        with torch.inference_mode():
            return reference(input_ids=tids, attention_mask=tmask).last_hidden_state

    return call


# -- packrt int8 ------------------------------------------------------------------------------------------
def packrt_int8(models: Any, directory: Path) -> Any:
    """packrt's model loaded with ``from_pretrained(dir, quantize="int8")``, or a Missing saying why not."""
    try:
        return models.from_pretrained(directory, quantize="int8")
    except TypeError as err:
        if "quantize" in str(err):
            return Missing("packrt-int8", "not available in this build: from_pretrained takes no quantize=")
        return Missing("packrt-int8", f"from_pretrained(quantize='int8') failed: {_reason(err)}")
    except Exception as err:
        return Missing("packrt-int8", f"from_pretrained(quantize='int8') failed: {_reason(err)}")


def max_abs_diff(got: Any, want: Any) -> float:
    """The largest |got - want| in float32 (any engine's result against transformers'), for the report."""
    a, b = as_f32(got), as_f32(want)
    assert a.shape == b.shape, f"shape {a.shape} != reference {b.shape}"
    return float(np.max(np.abs(a - b)))
