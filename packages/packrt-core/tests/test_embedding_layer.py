"""Embedding: torch's lookups and state dicts, the four residencies, packing once, and its errors."""

from __future__ import annotations

from types import ModuleType
from typing import Any

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import packrt_core as prt
from packrt_core.device import Device
from packrt_core.errors import DeviceError, DTypeError, IndexingError, PackrtError
from packrt_core.nn import free_memory_override, memory_report
from packrt_core.nn.embedding import Embedding
from packrt_core.nn.module import Module
from packrt_core.tensor import Tensor

RESIDENCIES = ("packed", "borrowed", "auto", "per_call")
DTYPES = ("float32", "float64", "float16", "bfloat16")


def as_float64(t: Tensor) -> np.ndarray:
    return np.asarray(t).astype(np.float64)


def bits(t: Tensor) -> bytes:
    return np.ascontiguousarray(np.asarray(t)).tobytes()


def fresh(**overrides: Any) -> Embedding:
    prt.manual_seed(0)
    return Embedding(**{"num_embeddings": 10, "embedding_dim": 4, **overrides})


def ids(*values: Any, dtype: str = "int64") -> Tensor:
    return prt.tensor(list(values), dtype=dtype)


def test_embedding_constructor_and_repr_follow_torch(torch: ModuleType) -> None:
    for args in [(10, 3), (10, 3, 0), (10, 3, -1), (7, 5, 6)]:
        ours, ref = Embedding(*args), torch.nn.Embedding(*args)
        assert repr(ours) == repr(ref)
        assert ours.padding_idx == ref.padding_idx
        assert ours.weight.shape == tuple(ref.weight.shape)


def test_embedding_initialization_is_standard_normal_with_the_padding_row_zeroed() -> None:
    prt.manual_seed(2)
    table = np.asarray(Embedding(2000, 16, padding_idx=-2).weight)
    assert not table[1998].any()
    rest = np.delete(table, 1998, axis=0)
    assert abs(rest.mean()) < 0.02 and abs(rest.std() - 1.0) < 0.02


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("id_dtype", ["int64", "int32"])
def test_embedding_with_torch_weights_matches_torch_per_dtype(torch: ModuleType, dtype: str, id_dtype: str) -> None:
    torch.manual_seed(0)
    ref = torch.nn.Embedding(10, 4, padding_idx=3)
    ours = Embedding(10, 4, padding_idx=3, dtype=dtype)
    sd = {k: prt.tensor(v.detach().numpy(), dtype=dtype) for k, v in ref.state_dict().items()}
    ours.load_state_dict(sd)
    picks = np.array([[0, 3, 9], [9, 1, 3]])
    out = ours(prt.tensor(picks, dtype=id_dtype))
    assert out.shape == (2, 3, 4) and out.dtype.name == dtype
    ref_out = ref.to(getattr(torch, dtype))(torch.from_numpy(picks)).detach().double().numpy()
    np.testing.assert_array_equal(as_float64(out), ref_out)  # a gather is exact in every dtype


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(0, 9), min_size=0, max_size=12), st.sampled_from(RESIDENCIES))
def test_embedding_returns_the_rows_the_ids_pick(picks: list[int], residency: str) -> None:
    layer = fresh(weight_residency=residency)
    table = np.asarray(layer.weight).copy()
    out = layer(prt.tensor(np.array(picks, dtype=np.int64)))
    np.testing.assert_array_equal(np.asarray(out), table[np.array(picks, dtype=np.int64)])


def test_embedding_outputs_agree_across_the_four_residencies() -> None:
    picks = ids(1, 2, 2, 9)
    outputs = [np.asarray(fresh(weight_residency=r)(picks)) for r in RESIDENCIES]
    for out in outputs[1:]:
        np.testing.assert_array_equal(out, outputs[0])


def test_embedding_residency_set_on_the_layer_or_the_load_is_the_one_served() -> None:
    layer = fresh()
    assert layer.weight_residency == "packed"  # the documented default
    sd = {k: v.clone() for k, v in layer.state_dict().items()}
    for residency in RESIDENCIES:
        layer.load_state_dict(sd, weight_residency=residency)
        assert layer.weight_residency == residency
        layer.set_weight_residency("packed")
        assert layer.weight_residency == "packed"


def test_embedding_packs_once_over_many_forwards() -> None:
    layer = fresh()
    for _ in range(5):
        layer(ids(1, 2))
    assert layer.pack_count == 1 and layer.is_packed


def test_embedding_in_place_edit_through_the_parameter_repacks_on_the_next_forward() -> None:
    layer = fresh()
    before = np.asarray(layer(ids(4)))
    layer.weight.add_(1.0)
    after = np.asarray(layer(ids(4)))
    assert layer.pack_count == 2
    np.testing.assert_allclose(after, before + 1.0, rtol=1e-6)


@pytest.mark.parametrize("dtype", DTYPES)
def test_embedding_packed_drops_raw_storage_yet_state_dict_is_complete_and_bit_exact(dtype: str) -> None:
    layer = fresh(dtype=dtype)
    original = bits(layer.weight)
    weight_object = layer.weight
    layer(ids(0))
    assert layer.weight.storage_nbytes == 0 and layer.weight is weight_object
    sd = layer.state_dict()
    assert list(sd) == ["weight"]
    assert sd["weight"].dtype.name == dtype and sd["weight"].shape == (10, 4)
    assert bits(sd["weight"]) == original


def test_embedding_under_revision_1_packed_entries_leave_state_dict() -> None:
    packed, borrowed = fresh(), fresh(weight_residency="borrowed")
    with prt.contract_revision(1):
        packed(ids(1))
        borrowed(ids(1))
        assert packed.state_dict() == {}
        assert list(borrowed.state_dict()) == ["weight"]
    assert list(packed.state_dict()) == ["weight"]


def test_embedding_under_meta_init_is_storage_free_and_packs_at_load() -> None:
    source = fresh(padding_idx=0)
    sd = {k: v.clone() for k, v in source.state_dict().items()}
    with prt.meta_init():
        layer = fresh(padding_idx=0)
    assert not layer.weight.has_storage and layer.weight.storage_nbytes == 0
    layer.load_state_dict(sd, assign=True, pack=True)
    assert layer.is_packed and layer.pack_count == 1
    np.testing.assert_array_equal(np.asarray(layer(ids(0, 5))), np.asarray(source(ids(0, 5))))
    assert layer.pack_count == 1


def test_embedding_borrowed_sees_writes_through_the_checkpoint_handle() -> None:
    sd = {k: v.clone() for k, v in fresh().state_dict().items()}
    with prt.meta_init():
        layer = fresh()
    layer.load_state_dict(sd, assign=True, weight_residency="borrowed")
    sd["weight"][2].fill_(7.0)
    np.testing.assert_array_equal(np.asarray(layer(ids(2))), np.full((1, 4), 7.0, np.float32))


def test_embedding_auto_packs_when_it_fits_and_borrows_when_it_does_not() -> None:
    small, large = fresh(weight_residency="auto"), fresh(weight_residency="auto")
    with free_memory_override(10 * 4 * 4 - 1):  # one byte short of the table
        small(ids(1))
    with free_memory_override(10 * 4 * 4):
        large(ids(1))
    assert small.residency_decision == "borrowed" and not small.is_packed
    assert large.residency_decision == "packed" and large.is_packed


class Tables(Module):
    def __init__(self) -> None:
        super().__init__()
        self.words = Embedding(100, 8, weight_residency="packed")
        self.positions = Embedding(16, 8, weight_residency="borrowed", dtype="bfloat16")


def test_embedding_memory_report_shows_packed_and_borrowed_bytes() -> None:
    model = Tables()
    model.words(ids(1))
    model.positions(ids(1))
    rows = {row.path: row for row in memory_report(model)}
    assert (rows["words"].raw, rows["words"].packed, rows["words"].borrowed) == (0, 100 * 8 * 4, 0)
    assert (rows["positions"].raw, rows["positions"].packed, rows["positions"].borrowed) == (0, 0, 16 * 8 * 2)
    assert "Embedding" in str(memory_report(model))


@pytest.mark.parametrize("residency", RESIDENCIES)
@pytest.mark.parametrize("bad", [10, 11, -1])
def test_embedding_rejects_an_id_out_of_range_naming_it_and_the_table_size(residency: str, bad: int) -> None:
    layer = fresh(weight_residency=residency)
    with pytest.raises(IndexingError, match=rf"id {bad} at position \(1,\) is out of range for a table of 10 rows"):
        layer(ids(3, bad))
    with pytest.raises(IndexError, match="out of range"):  # the builtin a user would catch
        layer(ids(bad))


@pytest.mark.parametrize("dtype", ["float32", "float16", "bool"])
def test_embedding_rejects_ids_that_are_not_integers(dtype: str) -> None:
    with pytest.raises(DTypeError, match=f"takes integer ids .*got {dtype}"):
        fresh()(prt.zeros(3, dtype=dtype))


def test_embedding_rejects_ids_that_are_not_a_tensor() -> None:
    with pytest.raises(TypeError, match="takes a packrt Tensor of integer ids, got list"):
        fresh()([1, 2])


def test_embedding_rejects_ids_on_another_device() -> None:
    elsewhere = Tensor._make(np.zeros(3, np.int64), Device("cuda:0"))
    with pytest.raises(DeviceError, match="ids on cuda:0, table on cpu"):
        fresh()(elsewhere)


def test_embedding_rejects_a_padding_idx_outside_the_table() -> None:
    for bad in (10, -11):
        with pytest.raises(IndexingError, match=f"padding_idx={bad} is out of range for a table of 10 rows"):
            fresh(padding_idx=bad)
    with pytest.raises(PackrtError, match="padding_idx"):
        fresh(padding_idx=99)


def test_embedding_output_has_the_table_dtype() -> None:
    layer = fresh(dtype="bfloat16")
    assert np.asarray(layer.weight).dtype == np.dtype(ml_dtypes.bfloat16)
    assert np.asarray(layer(ids(1, 2))).dtype == np.dtype(ml_dtypes.bfloat16)
