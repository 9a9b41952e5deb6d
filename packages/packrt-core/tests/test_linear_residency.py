"""Linear and weight residency: packing, staleness, visibility, threads, state dicts, memory."""

from __future__ import annotations

import threading
import tracemalloc
from typing import Any

import numpy as np
import pytest

import packrt_core as prt
from packrt_core import nn
from packrt_core.errors import DeviceError, DTypeError, ResidencyError, ShapeError, StateDictError
from packrt_core.nn.residency import free_memory_override
from packrt_kernels_cpu.tolerance import assert_same_result

RESIDENCIES = ["packed", "borrowed", "auto", "per_call"]


def checkpoint(i: int = 16, o: int = 8, dtype: Any = "float32") -> dict[str, prt.Tensor]:
    prt.manual_seed(0)
    return {"weight": prt.randn(o, i).to(dtype), "bias": prt.randn(o).to(dtype)}


def served(residency: str | None = None, sd: dict[str, prt.Tensor] | None = None, **kwargs: Any) -> nn.Linear:
    sd = sd if sd is not None else checkpoint()
    with prt.meta_init():
        layer = nn.Linear(sd["weight"].shape[1], sd["weight"].shape[0], dtype=sd["weight"].dtype)
    layer.load_state_dict(sd, assign=True, weight_residency=residency, **kwargs)
    return layer


def reference(sd: dict[str, prt.Tensor], x: prt.Tensor) -> np.ndarray:
    w, b = (sd[k].float().numpy().astype(np.float64) for k in ("weight", "bias"))
    return x.float().numpy().astype(np.float64) @ w.T + b


# -- the layer -------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "float64"])
def test_linear_matches_torch(torch: Any, dtype: str) -> None:
    tol = {"float32": 1e-5, "float16": 1e-2, "bfloat16": 3e-2, "float64": 1e-12}[dtype]
    ref = torch.nn.Linear(32, 24).to(getattr(torch, dtype))
    layer = nn.Linear(32, 24, dtype=dtype)
    layer.load_state_dict({k: prt.from_numpy(v.float().numpy()).to(dtype) for k, v in ref.state_dict().items()})
    x = torch.randn(5, 32).to(getattr(torch, dtype))
    got = layer(prt.from_numpy(x.float().numpy()).to(dtype))
    assert got.dtype.name == dtype
    np.testing.assert_allclose(got.float().numpy(), ref(x).float().detach().numpy(), rtol=tol, atol=tol)


def test_linear_declares_weight_and_bias_like_torch_and_prints_its_geometry() -> None:
    layer = nn.Linear(64, 256)
    assert [(n, p.shape) for n, p in layer.named_parameters()] == [("weight", (256, 64)), ("bias", (256,))]
    assert repr(layer) == "Linear(in_features=64, out_features=256, bias=True)"
    assert nn.Linear(3, 2, bias=False).bias is None
    assert abs(layer.weight.numpy()).max() <= 1 / 8


def test_linear_reports_bad_input_by_name() -> None:
    layer = nn.Linear(4, 2)
    with pytest.raises(ShapeError, match=r"Linear expects input \(\.\.\., 4\), got shape \(3, 5\)"):
        layer(prt.zeros(3, 5))
    with pytest.raises(DTypeError, match=r"Linear holds float32 weights but got float16 input"):
        layer(prt.zeros(3, 4, dtype="half"))
    with pytest.raises(TypeError, match="Linear takes a packrt Tensor, got list"):
        layer([1.0, 2.0, 3.0, 4.0])
    bogus = prt.Tensor._make(None, prt.Device("cuda"), prt.float32, shape=(1, 4))
    with pytest.raises(DeviceError, match="input on cuda:0, weights on cpu"):
        layer(bogus)


def test_default_residency_is_packed_and_an_unknown_one_is_refused() -> None:
    assert nn.Linear(2, 2).weight_residency == "packed"
    with pytest.raises(ResidencyError, match="unknown weight_residency 'eager'"):
        nn.Linear(2, 2, weight_residency="eager")
    with pytest.raises(ResidencyError, match="unknown weight_residency 'lazy'"):
        nn.Linear(2, 2).set_weight_residency("lazy")


# -- packing -----------------------------------------------------------------------------------------


def test_packing_happens_once_on_the_first_forward() -> None:
    layer = served()
    assert not layer.is_packed
    x = prt.randn(3, 16)
    layer(x)
    layer(x)
    assert layer.is_packed and layer.pack_count == 1


def test_pack_true_packs_at_the_end_of_the_load() -> None:
    layer = served(pack=True)
    assert layer.is_packed and layer.pack_count == 1
    layer(prt.randn(2, 16))
    assert layer.pack_count == 1


@pytest.mark.parametrize("residency", ["borrowed", "per_call"])
def test_pack_true_under_borrowed_or_per_call_makes_no_copy(residency: str) -> None:
    layer = served(residency, pack=True)
    assert not layer.is_packed and layer.weight.storage_nbytes == 16 * 8 * 4


@pytest.mark.parametrize(("room", "packs"), [(1 << 40, True), (16, False)], ids=["fits", "does-not-fit"])
def test_pack_true_under_auto_packs_only_a_pack_that_fits_the_free_memory(room: int, packs: bool) -> None:
    sd = checkpoint()
    with free_memory_override(room):
        layer = served("auto", sd=sd, pack=True)
    assert layer.is_packed is packs
    assert layer.residency_decision == ("packed" if packs else "borrowed")
    x = prt.randn(2, 16)
    sd["bias"].add_(100.0)  # a borrowed layer serves from the checkpoint's own storage
    seen = not np.allclose(layer(x).numpy(), reference(checkpoint(), x), rtol=1e-4, atol=1e-4)
    assert seen is not packs


def test_initialize_packs_every_bound_weight_now() -> None:
    model = nn.Sequential(served(), served())
    assert model.initialize() is model
    assert all(layer.is_packed for layer in model)


def test_a_failure_while_packing_during_a_load_leaves_the_model_unchanged() -> None:
    class Failing(nn.Linear):
        def _pack(self, kernels: Any, arrays: Any) -> Any:
            raise MemoryError("no room for the pack")

    layer = Failing(16, 8)
    weight, before = layer.weight, layer.weight.tolist()
    with pytest.raises(MemoryError, match="no room for the pack"):
        layer.load_state_dict(checkpoint(), assign=True, pack=True)
    assert layer.weight is weight and layer.weight.tolist() == before


def test_eight_threads_on_the_first_forward_share_one_pack_and_get_the_same_bits() -> None:
    """A promise (docs/guides/determinism.md): one road, one input, one thread count: the same bits on
    every call, from every calling thread."""
    layer = served()
    x = prt.randn(64, 16)
    barrier = threading.Barrier(8)
    outputs: list[np.ndarray] = [np.empty(0)] * 8

    def run(i: int) -> None:
        barrier.wait()
        outputs[i] = layer(x).numpy()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert layer.pack_count == 1
    for out in outputs[1:]:
        np.testing.assert_array_equal(out, outputs[0])


def test_a_forward_beside_an_edit_sees_the_old_pack_or_the_new_one_never_a_mix() -> None:
    i, o = 256, 256
    a, b = prt.full((o, i), 1.0), prt.full((o, i), 2.0)
    layer = served(sd={"weight": a.clone(), "bias": prt.zeros(o)})
    x = prt.ones(1, i)
    allowed = {float(i), float(2 * i)}
    seen: set[float] = set()

    served_one = threading.Event()

    def edit() -> None:
        for k in range(40):
            layer.weight.copy_(b if k % 2 == 0 else a)
            served_one.clear()
            served_one.wait(1.0)  # let at least one forward in between edits, as a serving process would

    editor = threading.Thread(target=edit)
    editor.start()
    forwards = 0
    while editor.is_alive() or forwards < 50:
        out = layer(x).numpy()
        values = set(np.unique(out).tolist())
        assert len(values) == 1 and values <= allowed, f"a forward mixed two packs: {sorted(values)[:4]}"
        seen |= values
        forwards += 1
        served_one.set()
    editor.join()
    assert seen == allowed  # the edits really interleaved with the forwards


# -- visibility -------------------------------------------------------------------------------------


def test_an_edit_through_the_modules_parameter_makes_the_next_forward_repack() -> None:
    sd = checkpoint()
    layer = served(sd=sd)
    x = prt.randn(2, 16)
    before = layer(x).numpy().copy()
    layer.bias.add_(1.0)
    np.testing.assert_allclose(layer(x).numpy(), before + 1.0, rtol=1e-5, atol=1e-5)
    assert layer.pack_count == 2


def test_a_write_through_the_checkpoint_handle_is_seen_before_the_first_pack() -> None:
    sd = checkpoint()
    layer = served(sd=sd)
    sd["bias"].add_(1.0)
    x = prt.randn(2, 16)
    np.testing.assert_allclose(layer(x).numpy(), reference(sd, x), rtol=1e-4, atol=1e-4)


def test_after_packing_a_write_through_the_checkpoint_handle_is_neither_refused_nor_seen() -> None:
    sd = checkpoint()
    layer = served("packed", sd=sd)
    x = prt.randn(2, 16)
    first = layer(x).numpy().copy()
    sd["bias"].add_(100.0)  # not refused ...
    np.testing.assert_array_equal(layer(x).numpy(), first)  # ... and not seen


@pytest.mark.parametrize("residency", ["borrowed", "per_call"])
def test_under_borrowed_and_per_call_the_checkpoint_handle_stays_a_live_road(residency: str) -> None:
    sd = checkpoint()
    layer = served(residency, sd=sd)
    x = prt.randn(2, 16)
    layer(x)
    sd["bias"].add_(100.0)
    np.testing.assert_allclose(layer(x).numpy(), reference(sd, x), rtol=1e-4, atol=1e-4)


def test_auto_follows_packed_when_it_packs_and_borrowed_when_it_borrows() -> None:
    for room, expected_seen in ((1 << 40, False), (16, True)):
        sd = checkpoint()
        with free_memory_override(room):
            layer = served("auto", sd=sd)
            x = prt.randn(2, 16)
            first = layer(x).numpy().copy()
            sd["bias"].add_(100.0)
            seen = not np.array_equal(layer(x).numpy(), first)
        assert seen is expected_seen
        assert layer.residency_decision == ("borrowed" if expected_seen else "packed")


# -- the packed residency's dropped raw weight --------------------------------------------------------


def test_packed_drops_the_raw_weight_but_keeps_the_parameter_object() -> None:
    sd = checkpoint()
    layer = served("packed", sd={k: v.clone() for k, v in sd.items()})
    weight = layer.weight
    layer(prt.randn(1, 16))
    assert layer.weight is weight and weight.storage_nbytes == 0 and weight.has_storage
    np.testing.assert_array_equal(weight.numpy(), sd["weight"].numpy())  # reading rebuilds from the pack


def test_an_edit_through_a_dropped_parameter_restores_raw_storage_and_repacks() -> None:
    layer = served("packed")
    x = prt.randn(2, 16)
    before = layer(x).numpy().copy()
    layer.weight.mul_(2.0)
    assert layer.weight.storage_nbytes == 16 * 8 * 4
    after = layer(x).numpy()
    bias = layer.bias.numpy()
    np.testing.assert_allclose(after - bias, 2 * (before - bias), rtol=1e-4, atol=1e-4)
    assert layer.weight.storage_nbytes == 0 and layer.pack_count == 2


# -- state dicts ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("residency", RESIDENCIES)
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_state_dict_after_a_forward_is_complete_and_exact_in_the_declared_dtype(residency: str, dtype: str) -> None:
    sd = checkpoint(dtype=dtype)
    expected = {k: v.clone() for k, v in sd.items()}
    layer = served(residency, sd=sd)
    layer(prt.randn(3, 16).to(dtype))
    out = layer.state_dict()
    assert list(out) == ["weight", "bias"]
    for key, value in out.items():
        assert value.dtype is expected[key].dtype and value.shape == expected[key].shape
        np.testing.assert_array_equal(value.float().numpy(), expected[key].float().numpy())


def test_a_rebuilt_state_dict_value_shares_no_storage_with_the_pack() -> None:
    layer = served("packed")
    layer(prt.randn(1, 16))
    value = layer.state_dict()["weight"]
    value.fill_(0.0)
    assert layer.weight.numpy().any()


def test_revision_1_drops_a_packed_layers_entries_from_state_dict() -> None:
    model = nn.Sequential(served(), nn.Linear(2, 2))
    model[0](prt.randn(1, 16))
    with prt.contract_revision(1):
        assert list(model.state_dict()) == ["1.weight", "1.bias"]
    assert list(model.state_dict()) == ["0.weight", "0.bias", "1.weight", "1.bias"]


def test_a_state_dict_round_trips_into_a_packed_model() -> None:
    layer = served()
    layer(prt.randn(1, 16))
    twin = nn.Linear(16, 8)
    twin.load_state_dict(layer.state_dict())
    x = prt.randn(4, 16)
    np.testing.assert_array_equal(twin(x).numpy(), layer(x).numpy())


# -- residencies agree; memory -------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_outputs_agree_across_the_four_residencies(dtype: str) -> None:
    sd = checkpoint(64, 32, dtype)
    x = prt.randn(8, 64).to(dtype)
    outs = [served(r, sd={k: v.clone() for k, v in sd.items()})(x).numpy() for r in RESIDENCIES]
    for residency, out in zip(RESIDENCIES[1:], outs[1:], strict=True):  # the GEMM layouts differ: not the same bits
        assert_same_result(out, outs[0], terms=64, err_msg=f"{residency} against {RESIDENCIES[0]}")


def test_per_call_keeps_no_packed_bytes_after_a_forward() -> None:
    layer = served("per_call")
    layer(prt.randn(2, 16))
    report = nn.memory_report(layer)
    assert report.totals()["packed"] == 0 and not layer.is_packed


def test_auto_with_a_forced_limit_gets_a_mix_of_decisions_recorded_per_layer() -> None:
    with free_memory_override(64 * 64 * 4 + 64 * 4):  # room for the small layer's pack only
        model = nn.Sequential(served("auto", checkpoint(64, 64)), served("auto", checkpoint(512, 512)))
        model[0](prt.randn(1, 64))
        model[1](prt.randn(1, 512))
    assert [layer.residency_decision for layer in model] == ["packed", "borrowed"]
    rows = {row.path: row for row in nn.memory_report(model)}
    assert rows["0"].packed > 0 and rows["1"].borrowed == 512 * 512 * 4 + 512 * 4


def test_memory_report_prints_a_table_by_kind() -> None:
    model = nn.Sequential(served("packed"), served("borrowed"))
    model[0](prt.randn(1, 16))
    text = str(nn.memory_report(model))
    assert text.splitlines()[0].split() == ["module", "type", "residency", "raw", "packed", "borrowed", "mapped"]
    assert "packed" in text and "borrowed" in text and text.splitlines()[-1].startswith("total")


def _resident_after_serving(residency: str, n: int) -> tuple[int, int]:
    """(bytes the weights take once bound, bytes the layer holds after serving), by tracemalloc."""
    # Warm up first: the first call of a compiled kernel loads (or compiles) it, and what numba keeps
    # of that stays allocated: it would count as the layer's.
    served(residency, sd={"weight": prt.randn(512, 512), "bias": prt.zeros(512)})(prt.randn(1, 512))
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        layer = served(residency, sd={"weight": prt.randn(n, n), "bias": prt.zeros(n)})  # the dict is dropped here
        bound = tracemalloc.get_traced_memory()[0] - base
        x = prt.randn(1, n)
        layer(x)
        layer(x)
        del x
        held = tracemalloc.get_traced_memory()[0] - base
    finally:
        tracemalloc.stop()
    del layer
    return bound, held


def test_packed_holds_one_copy_of_an_fp32_weight() -> None:
    n = 1024
    weight_bytes = n * n * 4
    bound, held = _resident_after_serving("packed", n)
    assert bound >= weight_bytes
    assert weight_bytes * 0.95 < held < weight_bytes * 1.1


def test_borrowed_adds_no_bytes_for_an_fp32_weight() -> None:
    n = 1024
    weight_bytes = n * n * 4
    bound, held = _resident_after_serving("borrowed", n)
    assert held - bound < weight_bytes * 0.02


def test_a_move_or_cast_makes_the_next_forward_repack() -> None:
    layer = served()
    x = prt.randn(2, 16)
    layer(x)
    layer.double()
    out = layer(x.double())
    assert out.dtype is prt.float64 and layer.pack_count == 2 and layer.weight.dtype is prt.float64


def test_a_deep_copy_of_a_packed_layer_serves_independently() -> None:
    import copy

    layer = served()
    x = prt.randn(2, 16)
    first = layer(x).numpy().copy()
    twin = copy.deepcopy(layer)
    twin.bias.add_(1.0)
    np.testing.assert_array_equal(layer(x).numpy(), first)
    np.testing.assert_allclose(twin(x).numpy(), first + 1.0, rtol=1e-5, atol=1e-5)


def test_a_strict_load_failure_into_a_packed_layer_changes_nothing() -> None:
    layer = served()
    x = prt.randn(2, 16)
    first = layer(x).numpy().copy()
    with pytest.raises(StateDictError, match=r"Missing key\(s\) in state_dict"):
        layer.load_state_dict({"weight": prt.zeros(8, 16)}, pack=True)
    np.testing.assert_array_equal(layer(x).numpy(), first)
    assert layer.pack_count == 1


def test_pack_true_packs_every_layer_of_the_tree_not_only_those_the_load_binds() -> None:
    model = nn.Sequential(nn.Linear(16, 8), nn.Linear(8, 4))
    model.load_state_dict({"0.weight": prt.randn(8, 16), "0.bias": prt.zeros(8)}, strict=False, pack=True)
    assert [layer.is_packed for layer in model] == [True, True]


def test_initialize_skips_layers_whose_weights_are_still_storage_free() -> None:
    with prt.meta_init():
        model = nn.Sequential(nn.Linear(4, 4))
    assert model.initialize() is model and not model[0].is_packed
