"""Reference models: each matches an equivalent torch model on the same random weights, declares
no weight storage under meta_init, binds a packrt.io checkpoint with assign=True, serves the same
outputs under every residency and keeps a tied LM head one Parameter through save and load.

Sizes are realistic (hidden 256, 4 heads, 4 layers, sequence 128, batch 2) so the comparison
exercises real accumulation lengths. Both sides compute in float32 and differ only in BLAS
blocking and reduction order. Bounds on the max abs error, with what was measured on the
reference machine in brackets: encoder hidden states (|values| up to ~5) 5e-5 [3e-6]; decoder
logits 1e-3, where the tied head gives |logits| up to ~300 [2e-4, about 1e-6 relative] and an
untied one |logits| up to ~3 [2e-6].
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import packrt
from packrt import io, nn
from packrt.errors import ShapeError
from packrt.models import (
    BertEncoder,
    CausalDecoder,
    DecoderConfig,
    EncoderConfig,
    RotaryEmbedding,
    rotary_tables,
    rotate_half,
)

RESIDENCIES = ("packed", "borrowed", "auto", "per_call")
BATCH, SEQ = 2, 128
ENCODER = EncoderConfig(vocab=1000, hidden=256, heads=4, layers=4, intermediate=1024, max_positions=256)
DECODER = DecoderConfig(vocab=1000, hidden=256, heads=4, layers=4, intermediate=688, max_positions=256)
ENCODER_ATOL = 5e-5
DECODER_ATOL = 1e-3


# -- the torch twins: plain torch.nn modules with packrt's parameter names -----------------------------
def torch_models(torch: ModuleType) -> dict[str, Any]:
    tnn, tf = torch.nn, torch.nn.functional

    class Attention(tnn.Module):  # type: ignore[misc, name-defined]
        def __init__(self, hidden: int, heads: int, bias: bool) -> None:
            super().__init__()
            self.heads, self.head_dim = heads, hidden // heads
            for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
                setattr(self, name, tnn.Linear(hidden, hidden, bias=bias))

        def forward(self, x: Any, mask: Any = None, rope: Any = None, causal: bool = False) -> Any:
            b, s, h = x.shape
            q, k, v = (
                p(x).view(b, s, self.heads, self.head_dim).transpose(1, 2)
                for p in (self.q_proj, self.k_proj, self.v_proj)
            )
            if rope is not None:
                q, k = rope(q), rope(k)
            out = tf.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal)
            return self.o_proj(out.transpose(1, 2).reshape(b, s, h))

    class Embeddings(tnn.Module):  # type: ignore[misc, name-defined]
        def __init__(self, c: EncoderConfig) -> None:
            super().__init__()
            self.word = tnn.Embedding(c.vocab, c.hidden)
            self.position = tnn.Embedding(c.max_positions, c.hidden)
            self.token_type = tnn.Embedding(c.type_vocab, c.hidden)
            self.norm = tnn.LayerNorm(c.hidden, eps=c.eps)

        def forward(self, ids: Any, types: Any) -> Any:
            pos = torch.arange(ids.shape[1])[None]
            return self.norm(self.word(ids) + self.position(pos) + self.token_type(types))

    class EncoderLayer(tnn.Module):  # type: ignore[misc, name-defined]
        def __init__(self, c: EncoderConfig) -> None:
            super().__init__()
            self.attention = Attention(c.hidden, c.heads, bias=True)
            self.attention_norm = tnn.LayerNorm(c.hidden, eps=c.eps)
            self.mlp = tnn.Module()
            self.mlp.up, self.mlp.down = tnn.Linear(c.hidden, c.intermediate), tnn.Linear(c.intermediate, c.hidden)
            self.mlp_norm = tnn.LayerNorm(c.hidden, eps=c.eps)

        def forward(self, x: Any, mask: Any) -> Any:
            x = self.attention_norm(x + self.attention(x, mask))
            return self.mlp_norm(x + self.mlp.down(tf.gelu(self.mlp.up(x))))

    class Encoder(tnn.Module):  # type: ignore[misc, name-defined]
        def __init__(self, c: EncoderConfig) -> None:
            super().__init__()
            self.embeddings = Embeddings(c)
            self.layers = tnn.ModuleList([EncoderLayer(c) for _ in range(c.layers)])

        def forward(self, ids: Any, padding: Any = None, types: Any = None) -> Any:
            mask = None if padding is None else padding.bool()[:, None, None, :]
            x = self.embeddings(ids, torch.zeros_like(ids) if types is None else types)
            for layer in self.layers:
                x = layer(x, mask)
            return x

    class Rope(tnn.Module):  # type: ignore[misc, name-defined]
        def __init__(self, head_dim: int, theta: float) -> None:
            super().__init__()
            self.inv_freq = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)

        def forward(self, x: Any) -> Any:
            angles = torch.outer(torch.arange(x.shape[-2], dtype=torch.float64), self.inv_freq)
            angles = torch.cat([angles, angles], dim=-1)
            half = x.shape[-1] // 2
            rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
            return x * angles.cos().float() + rotated * angles.sin().float()

    class DecoderLayer(tnn.Module):  # type: ignore[misc, name-defined]
        def __init__(self, c: DecoderConfig) -> None:
            super().__init__()
            self.attention_norm = tnn.RMSNorm(c.hidden, eps=c.eps)
            self.attention = Attention(c.hidden, c.heads, bias=False)
            self.mlp_norm = tnn.RMSNorm(c.hidden, eps=c.eps)
            self.mlp = tnn.Module()
            self.mlp.gate = tnn.Linear(c.hidden, c.intermediate, bias=False)
            self.mlp.up = tnn.Linear(c.hidden, c.intermediate, bias=False)
            self.mlp.down = tnn.Linear(c.intermediate, c.hidden, bias=False)

        def forward(self, x: Any, rope: Any) -> Any:
            x = x + self.attention(self.attention_norm(x), rope=rope, causal=True)
            h = self.mlp_norm(x)
            return x + self.mlp.down(tf.silu(self.mlp.gate(h)) * self.mlp.up(h))

    class Decoder(tnn.Module):  # type: ignore[misc, name-defined]
        def __init__(self, c: DecoderConfig) -> None:
            super().__init__()
            self.embed = tnn.Embedding(c.vocab, c.hidden)
            self.rope = Rope(c.hidden // c.heads, c.rope_theta)
            self.layers = tnn.ModuleList([DecoderLayer(c) for _ in range(c.layers)])
            self.norm = tnn.RMSNorm(c.hidden, eps=c.eps)
            self.lm_head = tnn.Linear(c.hidden, c.vocab, bias=False)
            if c.tie_embeddings:
                self.lm_head.weight = self.embed.weight

        def forward(self, ids: Any) -> Any:
            x = self.embed(ids)
            for layer in self.layers:
                x = layer(x, self.rope)
            return self.lm_head(self.norm(x))

    return {"encoder": Encoder, "decoder": Decoder}


def randomized(torch: ModuleType, model: Any, seed: int) -> Any:
    """Seeded random weights: torch's default init, with norm scales moved off 1 so they matter."""
    torch.manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.normal_(1.0 if name.endswith("weight") else 0.0, 0.1)
    return model.eval()


def to_packrt(state: dict[str, Any]) -> dict[str, packrt.Tensor]:
    """torch state -> packrt tensors; a tensor torch ties under two names stays one object."""
    made: dict[int, packrt.Tensor] = {}
    out = {}
    for key, t in state.items():
        if t.data_ptr() not in made:
            made[t.data_ptr()] = packrt.from_numpy(t.detach().numpy().copy())
        out[key] = made[t.data_ptr()]
    return out


def inputs(torch: ModuleType, vocab: int) -> tuple[Any, packrt.Tensor]:
    ids = torch.randint(0, vocab, (BATCH, SEQ), generator=torch.Generator().manual_seed(7))
    return ids, packrt.from_numpy(ids.numpy().copy())


@pytest.fixture(scope="module")
def encoder_pair(torch: ModuleType) -> tuple[Any, BertEncoder]:
    reference = randomized(torch, torch_models(torch)["encoder"](ENCODER), seed=1)
    with packrt.meta_init():
        model = BertEncoder(ENCODER)
    model.load_state_dict(to_packrt(reference.state_dict()), assign=True)
    return reference, model


def decoder_pair(torch: ModuleType, config: DecoderConfig) -> tuple[Any, CausalDecoder]:
    reference = randomized(torch, torch_models(torch)["decoder"](config), seed=2)
    with packrt.meta_init():
        model = CausalDecoder(config)
    model.load_state_dict(to_packrt(reference.state_dict()), assign=True)
    return reference, model


@pytest.fixture(scope="module")
def decoder_checkpoint(torch: ModuleType, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, np.ndarray]:
    """A tied decoder saved with packrt.io, and its torch logits on the shared inputs."""
    reference, model = decoder_pair(torch, DECODER)
    path = tmp_path_factory.mktemp("decoder") / "decoder.safetensors"
    io.save_checkpoint(model, path)
    with torch.no_grad():
        return path, reference(torch.from_numpy(inputs_np())).numpy()


def load_decoder(path: Path, residency: str | None = None) -> CausalDecoder:
    with packrt.meta_init():
        model = CausalDecoder(DECODER)
    io.load_checkpoint(model, path, assign=True, weight_residency=residency)
    return model


def max_abs_error(a: packrt.Tensor, b: Any) -> float:
    return float(np.abs(a.numpy().astype(np.float64) - np.asarray(b, dtype=np.float64)).max())


# -- agreement with torch --------------------------------------------------------------------------------
@pytest.mark.parametrize("padded", [False, True], ids=["no-mask", "padding-mask"])
def test_encoder_matches_torch_on_the_same_weights(torch: ModuleType, encoder_pair: Any, padded: bool) -> None:
    reference, model = encoder_pair
    ids, pids = inputs(torch, ENCODER.vocab)
    types = (torch.arange(SEQ)[None] >= SEQ // 2).long().expand(BATCH, SEQ).contiguous()
    padding = torch.ones(BATCH, SEQ, dtype=torch.long)
    padding[1, SEQ - 40 :] = 0  # the second sequence ends in 40 pad tokens
    with torch.no_grad():
        expected = reference(ids, padding if padded else None, types).numpy()
    out = model(
        pids,
        attention_mask=packrt.from_numpy(padding.numpy().copy()) if padded else None,
        token_type_ids=packrt.from_numpy(types.numpy().copy()),
    )
    assert out.shape == (BATCH, SEQ, ENCODER.hidden)
    assert max_abs_error(out, expected) < ENCODER_ATOL


def test_encoder_padding_mask_hides_padded_tokens(encoder_pair: Any) -> None:
    _, model = encoder_pair
    ids = np.arange(SEQ, dtype=np.int64)[None] % ENCODER.vocab
    mask = np.ones((1, SEQ), dtype=np.int64)
    mask[0, 100:] = 0
    changed = ids.copy()
    changed[0, 100:] = 999  # other tokens where the mask hides them
    a = model(packrt.from_numpy(ids), attention_mask=packrt.from_numpy(mask)).numpy()[0, :100]
    b = model(packrt.from_numpy(changed), attention_mask=packrt.from_numpy(mask)).numpy()[0, :100]
    assert np.abs(a - b).max() < 1e-5


@pytest.mark.parametrize("tied", [True, False], ids=["tied-head", "own-head"])
def test_decoder_matches_torch_on_the_same_weights(torch: ModuleType, tied: bool) -> None:
    config = DecoderConfig(**{**DECODER.__dict__, "tie_embeddings": tied})
    reference, model = decoder_pair(torch, config)
    ids, pids = inputs(torch, config.vocab)
    with torch.no_grad():
        expected = reference(ids).numpy()
    logits = model(pids)
    assert logits.shape == (BATCH, SEQ, config.vocab)
    assert max_abs_error(logits, expected) < DECODER_ATOL
    assert (model.lm_head.weight is model.embed.weight) is tied


def test_decoder_logits_at_a_position_ignore_later_tokens(decoder_checkpoint: Any) -> None:
    model = load_decoder(decoder_checkpoint[0])
    ids = (np.arange(32, dtype=np.int64)[None] * 7) % DECODER.vocab
    later = ids.copy()
    later[0, 20:] = 3
    a = model(packrt.from_numpy(ids)).numpy()[0, :20]
    b = model(packrt.from_numpy(later)).numpy()[0, :20]
    assert np.abs(a - b).max() < 1e-4


def test_the_decoders_greedy_generate_appends_the_argmax_of_each_whole_prefix_forward(
    decoder_checkpoint: Any,
) -> None:
    model = load_decoder(decoder_checkpoint[0])
    prompt = np.array([[5, 6, 7], [8, 9, 10]], dtype=np.int64)
    out = model.generate(packrt.from_numpy(prompt), 3).numpy()
    assert out.shape == (2, 6) and (out[:, :3] == prompt).all()
    for step in range(3):
        logits = model(packrt.from_numpy(out[:, : 3 + step].copy())).numpy()
        assert (logits[:, -1].argmax(-1) == out[:, 3 + step]).all()


# -- meta init, checkpoints, residencies -----------------------------------------------------------------
def test_meta_init_declares_every_weight_without_storage() -> None:
    with packrt.meta_init():
        decoder = CausalDecoder(DECODER)
        encoder = BertEncoder(ENCODER)
    for model in (decoder, encoder):
        params = list(model.parameters())
        assert params and all(not p.has_storage and p.storage_nbytes == 0 for p in params)
        assert nn.memory_report(model).totals() == {
            "raw": sum(b.storage_nbytes for b in model.buffers()),
            "packed": 0,
            "borrowed": 0,
            "mapped": 0,
        }
    # the rotary tables are constants built on first use: no buffer, nothing in the state dict
    assert not any(b.storage_nbytes for b in decoder.buffers())
    assert not any(key.startswith("rotary") for key in decoder.state_dict())


def test_checkpoint_round_trip_binds_the_saved_weights_with_assign(decoder_checkpoint: Any) -> None:
    path, expected = decoder_checkpoint
    model = load_decoder(path)
    assert all(p.has_storage for p in model.parameters())
    logits = model(packrt.from_numpy(inputs_np()))
    assert max_abs_error(logits, expected) < DECODER_ATOL


def inputs_np() -> np.ndarray:
    return np.random.default_rng(0).integers(0, DECODER.vocab, (BATCH, SEQ), dtype=np.int64)


def test_outputs_agree_across_the_four_residencies(decoder_checkpoint: Any) -> None:
    path, _ = decoder_checkpoint
    ids = packrt.from_numpy(inputs_np())
    outs = {}
    for residency in RESIDENCIES:
        model = load_decoder(path, residency)
        outs[residency] = model(ids).numpy()
        totals = nn.memory_report(model).totals()
        if residency in ("borrowed", "per_call"):
            assert totals["packed"] == 0, residency
        else:
            assert totals["packed"] > 0, residency
    for residency in RESIDENCIES[1:]:
        assert np.abs(outs[residency] - outs["packed"]).max() < 1e-4, residency


@pytest.mark.parametrize("residency", RESIDENCIES)
def test_state_dict_is_complete_after_a_forward(decoder_checkpoint: Any, residency: str) -> None:
    path, _ = decoder_checkpoint
    saved = io.load_file(path)
    model = load_decoder(path, residency)
    model(packrt.from_numpy(inputs_np()[:, :16].copy()))
    state = model.state_dict()
    assert sorted(state) == sorted(saved)
    for key, value in state.items():
        assert value.shape == saved[key].shape and value.dtype is saved[key].dtype, key
        assert np.array_equal(value.numpy(), saved[key].numpy()), key


def test_a_tied_lm_head_stays_one_parameter_through_save_and_load(decoder_checkpoint: Any, tmp_path: Path) -> None:
    path, _ = decoder_checkpoint
    assert "lm_head.weight" not in io.load_file(path)  # saved once, under the first name
    model = load_decoder(path)
    assert model.lm_head.weight is model.embed.weight
    model(packrt.from_numpy(inputs_np()[:, :8].copy()))
    again = tmp_path / "again.safetensors"
    io.save_checkpoint(model, again)
    reloaded = load_decoder(again)
    assert reloaded.lm_head.weight is reloaded.embed.weight
    names = [name for name, _ in reloaded.named_parameters()]
    assert "embed.weight" in names and "lm_head.weight" not in names


# -- rotary embeddings -----------------------------------------------------------------------------------
def test_rotate_half_maps_a_b_to_minus_b_a() -> None:
    x = packrt.arange(8, dtype=packrt.float32).reshape(1, 1, 1, 8)
    assert rotate_half(x).numpy().ravel().tolist() == [-4, -5, -6, -7, 0, 1, 2, 3]


@settings(max_examples=30, deadline=None)
@given(half=st.integers(1, 8), seq=st.integers(1, 12), shift=st.integers(0, 20), seed=st.integers(0, 2**16))
def test_rotary_scores_depend_only_on_the_relative_position(half: int, seq: int, shift: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    rope = RotaryEmbedding(2 * half, max_positions=seq + shift)
    q = rng.standard_normal((1, 1, seq, 2 * half)).astype(np.float32)
    k = rng.standard_normal((1, 1, seq, 2 * half)).astype(np.float32)
    # the same rows at positions 0.. and shift..: q_i . k_j must not change
    a = rope(packrt.from_numpy(q)).numpy()[0, 0] @ rope(packrt.from_numpy(k)).numpy()[0, 0].T
    b = (
        rope(packrt.from_numpy(q), offset=shift).numpy()[0, 0]
        @ rope(packrt.from_numpy(k), offset=shift).numpy()[0, 0].T
    )
    assert np.allclose(a, b, atol=1e-4)
    # a rotation keeps every row's length, and position 0 is the identity
    rotated = rope(packrt.from_numpy(q)).numpy()
    assert np.allclose(np.linalg.norm(rotated, axis=-1), np.linalg.norm(q, axis=-1), rtol=1e-5)
    assert np.allclose(rotated[..., 0, :], q[..., 0, :])


def test_rotary_tables_need_an_even_head_width() -> None:
    with pytest.raises(ValueError, match="head_dim must be even, got 7"):
        rotary_tables(4, 7)


# -- configuration and input errors ----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: EncoderConfig(hidden=100, heads=3), r"hidden=100 is not divisible by heads=3"),
        (lambda: EncoderConfig(layers=0), r"EncoderConfig.layers must be a positive int, got 0"),
        (lambda: EncoderConfig(eps=0.0), r"EncoderConfig.eps must be positive"),
        (lambda: DecoderConfig(hidden=12, heads=4), r"hidden / heads = 3 is odd"),
        (lambda: DecoderConfig(vocab=True), r"DecoderConfig.vocab must be a positive int, got True"),
        (lambda: DecoderConfig(rope_theta=-1.0), r"eps and rope_theta must be positive"),
    ],
)
def test_a_config_that_cannot_build_a_model_is_refused(make: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        make()


SMALL_DECODER = DecoderConfig(vocab=50, hidden=16, heads=2, layers=1, intermediate=32, max_positions=8)
SMALL_ENCODER = EncoderConfig(vocab=50, hidden=16, heads=2, layers=1, intermediate=32, max_positions=8)


def test_the_models_name_a_wrong_input_shape_or_length() -> None:
    decoder, encoder = CausalDecoder(SMALL_DECODER), BertEncoder(SMALL_ENCODER)
    with pytest.raises(ShapeError, match=r"CausalDecoder expects input_ids of shape \(batch, seq\), got \(3,\)"):
        decoder(packrt.tensor([1, 2, 3]))
    with pytest.raises(ShapeError, match="a sequence of 9 tokens is longer than max_positions=8"):
        encoder(packrt.zeros(1, 9, dtype=packrt.int64))
    with pytest.raises(TypeError, match="takes a packrt Tensor of token ids, got list"):
        encoder([[1, 2]])
    with pytest.raises(ShapeError, match=r"attention_mask has shape \(1, 2\), expected \(batch, seq\) = \(1, 3\)"):
        encoder(packrt.tensor([[1, 2, 3]]), attention_mask=packrt.tensor([[1, 1]]))
    with pytest.raises(ShapeError, match=r"token_type_ids has shape \(1, 2\), expected input_ids' shape \(1, 3\)"):
        encoder(packrt.tensor([[1, 2, 3]]), token_type_ids=packrt.tensor([[0, 0]]))


def test_the_decoders_generate_refuses_bad_step_counts_and_lengths_past_max_positions() -> None:
    decoder = CausalDecoder(SMALL_DECODER)
    with pytest.raises(ValueError, match="max_new_tokens must be an int >= 0 or None, got -1"):
        decoder.generate(packrt.tensor([[1, 2]]), -1)
    with pytest.raises(ShapeError, match=r"CausalDecoder.generate: 2 prompt tokens \+ 8 new ones exceed the model's 8"):
        decoder.generate(packrt.tensor([[1, 2]]), 8)


def test_memory_report_counts_a_tied_borrowed_weight_once(decoder_checkpoint: Any) -> None:
    path, _ = decoder_checkpoint
    model = load_decoder(path, "borrowed")
    model(packrt.from_numpy(inputs_np()[:, :8].copy()))
    report = nn.memory_report(model)
    held = [*model.parameters(), *model.buffers()]  # each tensor once; the rotary tables are raw buffers
    weights = sum(t.storage_nbytes for t in held)
    assert all(row.raw >= 0 for row in report)
    assert report.totals()["raw"] + report.totals()["borrowed"] == weights
