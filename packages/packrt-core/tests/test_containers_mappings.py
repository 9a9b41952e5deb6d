"""ModuleDict (a MutableMapping), ParameterList and ParameterDict: their protocols and error paths."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import MutableMapping
from typing import Any

import pytest

import packrt_core as prt
from packrt_core import nn


def test_module_dict_is_a_mutable_mapping_that_stays_hashable_by_identity() -> None:
    a = nn.Identity()
    first, second = nn.ModuleDict({"a": a}), nn.ModuleDict({"a": a})
    assert isinstance(first, MutableMapping) and isinstance(first, nn.Module)
    assert first != second and first == first and len({first, second}) == 2


def test_module_dict_updates_from_a_mapping_a_module_dict_pairs_and_keywords_in_order() -> None:
    a, b, c, d, e = (nn.Identity() for _ in range(5))
    md = nn.ModuleDict({"a": a})
    md.update(nn.ModuleDict({"b": b}))
    md.update([("c", c)])
    md.update(OrderedDict(d=d), e=e)
    assert list(md) == ["a", "b", "c", "d", "e"]
    assert list(md.keys()) == list(md) and list(md.values()) == [a, b, c, d, e]
    assert next(iter(md.items())) == ("a", a) and list(md.state_dict()) == []


@pytest.mark.parametrize(
    ("bad", "error", "pattern"),
    [
        (nn.ReLU(), TypeError, "takes a mapping or an iterable of \\(key, value\\) pairs, got ReLU"),
        ([nn.ReLU()], TypeError, "element #0 is a ReLU; a \\(key, value\\) pair is expected"),
        ([["only-key"]], ValueError, "element #0 has length 1; a \\(key, value\\) pair has length 2"),
    ],
    ids=["not-iterable", "element-not-a-pair", "element-of-wrong-length"],
)
def test_module_dict_update_refuses_what_is_not_pairs(bad: Any, error: type[Exception], pattern: str) -> None:
    with pytest.raises(error, match=pattern):
        nn.ModuleDict().update(bad)


def test_module_dict_pop_popitem_setdefault_get_and_clear_act_as_a_dicts() -> None:
    a, b = nn.Identity(), nn.Identity()
    md = nn.ModuleDict([("a", a), ("b", b)])
    assert md.pop("a") is a and "a" not in md
    assert md.get("zz") is None and md.setdefault("c", a) is a
    assert list(reversed(md)) == ["c", "b"]
    md.clear()
    assert len(md) == 0 and list(md.named_children()) == []


def test_module_dict_reports_a_missing_key_with_what_it_has() -> None:
    md = nn.ModuleDict({"a": nn.Identity()})
    with pytest.raises(KeyError, match="ModuleDict has no module 'z'; it has 'a'"):
        md["z"]
    with pytest.raises(KeyError, match="has no module 'z'"):
        del md["z"]


def test_module_dict_keys_must_be_strings() -> None:
    with pytest.raises(TypeError, match="module name must be a str, got int"):
        nn.ModuleDict()[1] = nn.Identity()  # type: ignore[index]


def test_module_dict_has_no_forward() -> None:
    with pytest.raises(NotImplementedError, match="index it and call its modules"):
        nn.ModuleDict()()


def test_parameter_list_wraps_tensors_as_parameters_and_keeps_other_values() -> None:
    t = prt.ones(2)
    pl = nn.ParameterList([t, "tag"])
    assert isinstance(pl[0], nn.Parameter) and pl[0].data_ptr() == t.data_ptr() and pl[1] == "tag"
    p = nn.Parameter(prt.zeros(1))
    pl.append(p)
    assert pl[-1] is p and len(pl) == 3
    assert [name for name, _ in pl.named_parameters()] == ["0", "2"] and list(pl.state_dict()) == ["0", "2"]


def test_parameter_list_index_slice_assign_and_extend() -> None:
    pl = nn.ParameterList([prt.zeros(1), prt.ones(1)])
    q = nn.Parameter(prt.full((1,), 5.0))
    pl[prt.tensor(1)] = q
    assert pl[1] is q and next(iter(pl[::-1])) is q and isinstance(pl[:1], nn.ParameterList)
    pl += [prt.ones(3)]
    assert len(pl) == 3 and pl[2].shape == (3,)
    assert "0" not in dir(pl)


def test_parameter_list_errors_name_what_went_wrong() -> None:
    pl = nn.ParameterList([prt.zeros(1)])
    with pytest.raises(IndexError, match=r"ParameterList index 1 is out of range for 1 value\(s\)"):
        pl[1]
    with pytest.raises(TypeError, match="extend takes an iterable of values, got Parameter: use append"):
        pl.extend(nn.Parameter(prt.zeros(2)))
    with pytest.raises(TypeError, match="indices must be integers or slices, not str"):
        pl["0"]
    with pytest.raises(RuntimeError, match="ParameterList is not called"):
        pl()


def test_parameter_list_repr_lists_each_entry() -> None:
    pl = nn.ParameterList([prt.zeros(2, 3), "tag"])
    assert repr(pl) == (
        "ParameterList(\n  (0): Parameter containing: [float32 of size 2x3]\n  (1): Object of type: str\n)"
    )


def test_parameter_dict_is_a_mapping_in_insertion_order_and_wraps_tensors() -> None:
    pd = nn.ParameterDict(OrderedDict([("b", prt.ones(1)), ("a", prt.zeros(1))]))
    assert isinstance(pd, MutableMapping) and list(pd) == ["b", "a"]
    assert all(isinstance(v, nn.Parameter) for v in pd.values())
    pd["note"] = "kept as an attribute"
    assert pd["note"] == "kept as an attribute" and list(pd.state_dict()) == ["b", "a"]


def test_parameter_dict_adds_a_plain_dict_in_sorted_order_as_pytorch_does() -> None:
    pd = nn.ParameterDict({"z": prt.ones(1), "c": prt.ones(1)})
    pd.update({"b": prt.ones(1), "a": prt.ones(1)})
    assert list(pd) == ["c", "z", "a", "b"]


def test_parameter_dict_copy_merge_popitem_fromkeys_and_clear() -> None:
    p, q = nn.Parameter(prt.ones(1)), nn.Parameter(prt.zeros(1))
    pd = nn.ParameterDict([("p", p)])
    twin = pd.copy()
    twin["q"] = q
    assert twin["p"] is p and "q" not in pd
    merged = pd | twin
    assert list(merged) == ["p", "q"] and list(nn.ParameterDict([("q", q)]) | pd) == ["q", "p"]
    pd |= twin
    assert pd.popitem() == ("q", q) and list(pd) == ["p"]
    assert dict(nn.ParameterDict.fromkeys(["x", "y"])) == {"x": None, "y": None}
    assert pd.setdefault("p", q) is p and pd.get(3) is None  # type: ignore[call-overload]
    pd.clear()
    assert len(pd) == 0 and list(pd.named_parameters()) == []


def test_parameter_dict_errors_name_what_went_wrong() -> None:
    pd = nn.ParameterDict()
    with pytest.raises(TypeError, match="ParameterDict keys must be str, got int"):
        pd[1] = prt.ones(1)  # type: ignore[index]
    with pytest.raises(KeyError, match="ParameterDict has no entry 'x'; it has none"):
        pd["x"]
    with pytest.raises(KeyError, match="the ParameterDict is empty"):
        pd.popitem()
    with pytest.raises(ValueError, match="element #0 has length 3"):
        pd.update(nn.Parameter(prt.zeros(3, 3)))
    with pytest.raises(RuntimeError, match="ParameterDict is not called"):
        pd()
