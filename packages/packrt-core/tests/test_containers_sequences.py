"""Sequential and ModuleList: the list protocol, registration names, re-numbering and the error paths."""

from __future__ import annotations

from typing import Any

import pytest

import packrt_core as prt
from packrt_core import nn


def mods(n: int) -> list[nn.Module]:
    return [nn.Identity() for _ in range(n)]


def names(container: nn.Module) -> list[str]:
    return list(container._modules)


@pytest.mark.parametrize("kind", [nn.Sequential, nn.ModuleList])
class TestTheSharedListProtocol:
    def make(self, kind: Any, items: list[nn.Module]) -> Any:
        return kind(*items) if kind is nn.Sequential else kind(items)

    def test_an_index_reads_by_position_counting_negatives_from_the_end(self, kind: Any) -> None:
        a, b, c = mods(3)
        box = self.make(kind, [a, b, c])
        assert box[0] is a and box[-1] is c and box[prt.tensor(1)] is b

    def test_an_integer_valued_tensor_is_an_index_for_get_set_and_del(self, kind: Any) -> None:
        a, b, c = mods(3)
        box = self.make(kind, [a, b])
        box[prt.tensor(1, dtype="int16")] = c
        assert box[1] is c
        del box[prt.tensor(0)]
        assert list(box) == [c] and names(box) == ["0"]

    @pytest.mark.parametrize("bad", [1.5, "0", None], ids=["float", "str", "none"])
    def test_a_non_integer_index_is_a_type_error_naming_the_type(self, kind: Any, bad: Any) -> None:
        box = self.make(kind, mods(2))
        with pytest.raises(TypeError, match=f"indices must be integers or slices, not {type(bad).__name__}"):
            box[bad]

    def test_a_float_or_many_element_tensor_index_is_a_type_error(self, kind: Any) -> None:
        box = self.make(kind, mods(2))
        with pytest.raises(TypeError, match="an integer tensor of one element; got a float32 tensor"):
            box[prt.tensor(1.0)]
        with pytest.raises(TypeError, match=r"got a int64 tensor of shape \(2,\)"):
            box[prt.tensor([0, 1])]

    def test_an_index_out_of_range_is_an_index_error(self, kind: Any) -> None:
        box = self.make(kind, mods(2))
        with pytest.raises(IndexError, match=r"index 2 is out of range for 2 module\(s\)"):
            box[2]
        with pytest.raises(IndexError, match="index -3 is out of range"):
            box[-3] = nn.Identity()

    def test_assigning_by_index_keeps_the_name_and_the_place(self, kind: Any) -> None:
        a, b, c = mods(3)
        box = self.make(kind, [a, b])
        box[-1] = c
        assert list(box) == [a, c] and names(box) == ["0", "1"]

    def test_assigning_a_non_module_by_index_is_a_type_error(self, kind: Any) -> None:
        box = self.make(kind, mods(1))
        with pytest.raises(TypeError, match="cannot assign a int to child module '0'"):
            box[0] = 3

    def test_deleting_an_index_or_a_slice_renumbers_from_zero(self, kind: Any) -> None:
        items = mods(5)
        box = self.make(kind, items)
        del box[1]
        del box[::2]
        assert list(box) == [items[2], items[4]] and names(box) == ["0", "1"]
        assert list(box.state_dict()) == []

    def test_append_extend_and_insert_keep_string_positions(self, kind: Any) -> None:
        a, b, c, d = mods(4)
        box = self.make(kind, [a])
        assert box.append(b) is box
        assert box.extend([c]) is box
        box.insert(0, d)
        assert list(box) == [d, a, b, c] and names(box) == ["0", "1", "2", "3"]

    def test_extending_by_itself_appends_one_copy(self, kind: Any) -> None:
        a, b = mods(2)
        box = self.make(kind, [a, b])
        box.extend(box)
        assert list(box) == [a, b, a, b]

    def test_extend_with_a_non_iterable_is_a_type_error(self, kind: Any) -> None:
        box = self.make(kind, [])
        with pytest.raises(TypeError, match=r"extend takes an iterable of modules, got ReLU"):
            box.extend(nn.ReLU())  # type: ignore[arg-type]

    def test_insert_of_a_non_module_is_a_type_error(self, kind: Any) -> None:
        box = self.make(kind, mods(1))
        with pytest.raises(TypeError, match=r"insert takes a Module, got list"):
            box.insert(0, [nn.Identity()])  # type: ignore[arg-type]

    def test_pop_removes_and_returns_and_the_rest_renumber(self, kind: Any) -> None:
        a, b, c = mods(3)
        box = self.make(kind, [a, b, c])
        assert box.pop(1) is b and box.pop() is c
        assert list(box) == [a] and names(box) == ["0"]

    def test_dir_leaves_out_the_position_names(self, kind: Any) -> None:
        box = self.make(kind, mods(2))
        assert "0" not in dir(box) and "append" in dir(box)

    def test_state_dict_keys_follow_the_positions(self, kind: Any) -> None:
        box = self.make(kind, [nn.Linear(2, 2), nn.Linear(2, 1)])
        del box[0]
        assert list(box.state_dict()) == ["0.weight", "0.bias"]


def test_a_sequential_slice_keeps_the_names_and_a_module_list_slice_renumbers() -> None:
    a, b, c = mods(3)
    seq = nn.Sequential({"x": a, "y": b, "z": c})
    assert names(seq[1:]) == ["y", "z"] and list(seq[::-1]) == [c, b, a]
    listed = nn.ModuleList([a, b, c])[1:]
    assert isinstance(listed, nn.ModuleList) and names(listed) == ["0", "1"]


def test_a_sequential_insert_out_of_range_is_an_index_error_and_a_list_insert_clamps() -> None:
    with pytest.raises(IndexError, match=r"Sequential.insert index -5 is out of range for 3 module\(s\)"):
        nn.Sequential(*mods(3)).insert(-5, nn.Identity())
    a, b = mods(2)
    listed = nn.ModuleList([a])
    listed.insert(10, b)  # as list.insert
    assert list(listed) == [a, b]


def test_sequential_plus_joins_and_plus_equals_extends_in_place() -> None:
    a, b, c = mods(3)
    left, right = nn.Sequential(a, b), nn.Sequential(c)
    joined = left + right
    assert list(joined) == [a, b, c] and names(joined) == ["0", "1", "2"]
    left += right
    assert list(left) == [a, b, c]


def test_sequential_plus_a_non_sequential_is_a_type_error_with_the_fix() -> None:
    with pytest.raises(TypeError, match=r"Sequential \+ takes another Sequential, got list: .*use extend\(\)"):
        nn.Sequential().__add__([nn.Identity()])  # type: ignore[arg-type]
    seq = nn.Sequential()
    with pytest.raises(TypeError, match=r"Sequential \+= takes another Sequential, got int"):
        seq += 3  # type: ignore[arg-type]


def test_sequential_times_an_int_repeats_and_times_equals_repeats_in_place() -> None:
    a, b = mods(2)
    seq = nn.Sequential(a, b)
    assert list(seq * 2) == [a, b, a, b] and list(2 * seq) == [a, b, a, b]
    seq *= 3
    assert list(seq) == [a, b] * 3 and names(seq) == [str(i) for i in range(6)]


def test_sequential_times_a_non_int_is_a_type_error_and_a_non_positive_int_a_value_error() -> None:
    seq = nn.Sequential(nn.Identity())
    with pytest.raises(TypeError, match=r"Sequential \* takes an int, got str"):
        seq * "2"  # type: ignore[operator]
    with pytest.raises(ValueError, match=r"Sequential \* takes a positive int, got 0"):
        seq * 0
    with pytest.raises(ValueError, match="got -1"):
        seq *= -1


def test_sequential_of_one_module_dict_holds_it_as_a_child_not_its_items() -> None:
    inner = nn.ModuleDict({"a": nn.Identity()})
    seq = nn.Sequential(inner)
    assert names(seq) == ["0"] and seq[0] is inner


def test_module_list_plus_any_iterable_makes_a_new_list_and_plus_equals_extends() -> None:
    a, b, c = mods(3)
    listed = nn.ModuleList([a])
    joined = listed + (m for m in [b, c])
    assert isinstance(joined, nn.ModuleList) and list(joined) == [a, b, c] and list(listed) == [a]
    listed += nn.Sequential(b, c)
    assert list(listed) == [a, b, c]
    with pytest.raises(TypeError, match="extend takes an iterable of modules, got Identity"):
        listed += nn.Identity()  # type: ignore[arg-type]


def test_module_list_has_no_forward() -> None:
    with pytest.raises(NotImplementedError, match="iterate over it and call its modules"):
        nn.ModuleList()(prt.ones(1))
