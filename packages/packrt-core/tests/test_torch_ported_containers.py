"""PyTorch's own container tests (test/test_nn.py: the Sequential_*, ModuleList, ModuleDict,
ParameterList and ParameterDict cases), rewritten for packrt and run through the ``shim`` fixture.

Each test keeps the behaviour its PyTorch counterpart checks; where PyTorch compares two containers
with ``assertEqual`` these compare the modules they hold, by identity. One reading differs and is
marked: ``Sequential.insert`` of a non-module is a TypeError here (PyTorch: AssertionError), per the
rule that a bad argument type is a TypeError.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import pytest


def held(container: Any) -> list[Any]:
    return list(container)


def linears(shim: Any, n: int) -> list[Any]:
    return [shim.nn.Linear(i + 1, i + 2) for i in range(n)]


def test_sequential_indexes_by_int_tensor_and_slice(shim: Any) -> None:
    l1, l2, l3, l4 = linears(shim, 4)
    n = shim.nn.Sequential(l1, l2, l3, l4)
    assert [n[0], n[1], n[2], n[3]] == [l1, l2, l3, l4]
    assert n[shim.tensor(3, dtype=shim.int64)] is l4
    assert held(n[1:]) == [l2, l3, l4] and held(n[3:]) == [l4]
    assert held(n[:-1]) == [l1, l2, l3] and held(n[:-3]) == [l1] and held(n[::-1]) == [l4, l3, l2, l1]


def test_sequential_assigns_by_int_negative_and_tensor_index(shim: Any) -> None:
    l1, l2, l3, l4 = linears(shim, 4)
    n = shim.nn.Sequential(l1, l2, l3)
    n[0] = l4
    n[-1] = l4
    n[shim.tensor(1, dtype=shim.int16)] = l1
    assert held(n) == [l4, l1, l4]


def test_sequential_assignment_keeps_the_given_names(shim: Any) -> None:
    l1, l2, l3, l4 = linears(shim, 4)
    n = shim.nn.Sequential(OrderedDict([("linear1", l1), ("linear2", l2), ("linear3", l3)]))
    n[0] = l4
    n[-1] = l4
    assert n.linear1 is l4 and n.linear3 is l4


def test_sequential_deletes_an_index_and_a_stepped_slice(shim: Any) -> None:
    l1, l2, l3, l4 = linears(shim, 4)
    n = shim.nn.Sequential(l1, l2, l3, l4)
    del n[-1]
    assert held(n) == [l1, l2, l3]
    del n[1::2]
    assert held(n) == [l1, l3]


def test_sequential_add_and_in_place_add(shim: Any) -> None:
    l1, l2, l3, l4 = linears(shim, 4)
    assert held(shim.nn.Sequential(l1, l2) + shim.nn.Sequential(l3, l4)) == [l1, l2, l3, l4]
    n, n2 = shim.nn.Sequential(l1, l2, l3), shim.nn.Sequential(l4)
    n += n2
    n2 += n
    assert held(n) == [l1, l2, l3, l4] and held(n2) == [l4, l1, l2, l3, l4]


def test_sequential_multiplies_from_either_side_and_in_place(shim: Any) -> None:
    mods = linears(shim, 4)
    n = shim.nn.Sequential(*mods)
    assert held(n * 2) == mods * 2 and held(2 * n) == mods * 2
    n *= 2
    assert held(n) == mods * 2
    n *= 2
    assert held(n) == mods * 4


def test_sequential_append_returns_the_container(shim: Any) -> None:
    l1, l2, l3, l4 = linears(shim, 4)
    n = shim.nn.Sequential(l1, l2, l3)
    assert held(n.append(l4)) == [l1, l2, l3, l4] and held(n) == [l1, l2, l3, l4]
    assert held(shim.nn.Sequential(l1).append(l2).append(l4)) == [l1, l2, l4]


def test_sequential_pop_keeps_the_remaining_order_indexable(shim: Any) -> None:
    l1, l2, l3, l4 = linears(shim, 4)
    n = shim.nn.Sequential(l1, l2, l3, l4)
    assert n.pop(3) is l4 and held(n) == [l1, l2, l3]
    assert all(n[k] is mod for k, mod in enumerate(n))


def test_sequential_insert_counts_negative_positions_from_the_end(shim: Any) -> None:
    l1, l2, l3 = linears(shim, 3)
    extra = shim.nn.Linear(4, 5)
    assert held(shim.nn.Sequential(l1, l2, l3).insert(1, extra)) == [l1, extra, l2, l3]
    assert held(shim.nn.Sequential(l1, l2, l3).insert(-2, extra)) == [l1, extra, l2, l3]


def test_sequential_insert_out_of_range_is_an_index_error(shim: Any) -> None:
    n = shim.nn.Sequential(*linears(shim, 3))
    with pytest.raises(IndexError, match="insert index -5 is out of range"):
        n.insert(-5, shim.nn.Linear(5, 6))


@pytest.mark.xfail(
    strict=True, raises=TypeError, reason="packrt: a bad argument type is a TypeError (PyTorch: AssertionError)"
)
def test_sequential_insert_of_a_non_module_is_an_assertion_error_in_pytorch(shim: Any) -> None:
    with pytest.raises(AssertionError, match="module"):
        shim.nn.Sequential(*linears(shim, 3)).insert(1, [shim.nn.Linear(6, 7)])


def test_sequential_extend_equals_appending_each(shim: Any) -> None:
    l1, l2, l3, l4 = linears(shim, 4)
    n1, n3, n2 = shim.nn.Sequential(l1, l2), shim.nn.Sequential(l1, l2), shim.nn.Sequential(l3, l4)
    for layer in n2:
        n1.append(layer)
    n3.extend(n2)
    assert held(n3) == held(n1)


def test_sequential_dir_has_no_digit_names(shim: Any) -> None:
    assert "0" not in dir(shim.nn.Sequential(shim.nn.Linear(2, 2)))


def _same_modules(expected: list[Any], module_list: Any) -> None:
    assert len(module_list) == len(expected)
    assert all(a is b for a, b in zip(expected, module_list, strict=True))
    assert all(a is b for a, b in zip(expected, module_list.children(), strict=False))
    assert all(module_list[i] is expected[i] for i in range(len(expected)))


def test_module_list_follows_every_list_operation(shim: Any) -> None:
    nn = shim.nn
    modules = [nn.ReLU(), nn.Linear(5, 5)]
    module_list = nn.ModuleList(modules)
    _same_modules(modules, module_list)
    modules += [nn.Conv2d(3, 4, 3)]
    module_list += [modules[-1]]
    _same_modules(modules, module_list)
    modules = [*modules, nn.Conv2d(3, 4, 3, bias=False), nn.GELU()]
    module_list = module_list + nn.ModuleList(modules[-2:])
    _same_modules(modules, module_list)
    modules.insert(1, nn.Linear(3, 2))
    module_list.insert(1, modules[1])
    modules.append(nn.Tanh())
    module_list.append(modules[-1])
    tail = [nn.Linear(5, 5), nn.Sigmoid()]
    modules.extend(tail)
    module_list.extend(tail)
    _same_modules(modules, module_list)
    modules[2] = nn.Conv2d(5, 3, 2)
    module_list[2] = modules[2]
    modules[-1] = nn.Conv2d(5, 2, 1)
    module_list[-1] = modules[-1]
    _same_modules(modules, module_list)
    idx = shim.tensor(2, dtype=shim.int32)
    modules[2] = nn.Conv2d(5, 3, 2)
    module_list[idx] = modules[2]
    assert module_list[idx] is modules[2]
    _same_modules(modules, module_list)
    for part in (slice(1, None), slice(3, None), slice(None, -1), slice(None, -3), slice(None, None, -1)):
        assert held(module_list[part]) == modules[part]
    del module_list[-1]
    assert held(module_list) == modules[:-1]
    del module_list[1::2]
    assert held(module_list) == modules[:-1][0::2]


def test_module_list_refuses_a_single_module_where_an_iterable_is_expected(shim: Any) -> None:
    module_list = shim.nn.ModuleList()
    with pytest.raises(TypeError, match="iterable of modules, got ReLU"):
        module_list += shim.nn.ReLU()
    with pytest.raises(TypeError, match="iterable of modules, got ReLU"):
        module_list.extend(shim.nn.ReLU())


def test_module_list_extends_from_a_module_walk_and_pops_like_a_list(shim: Any) -> None:
    nn = shim.nn
    l1, l2, l3, l4 = nn.Linear(1, 2), nn.Linear(2, 3), nn.Linear(3, 2), nn.Linear(2, 3)
    s = nn.Sequential(OrderedDict([("layer1", l1), ("layer2", l2), ("layer3", l3), ("layer4", l4)]))
    s.subnet_layer = nn.Sequential(l3, l4)
    modules = list(s.modules())
    module_list = nn.ModuleList()
    module_list.extend(s.modules())
    _same_modules(modules, module_list)
    modules = [nn.ReLU(), nn.Linear(5, 5), nn.Conv2d(3, 4, 3)]
    module_list = nn.ModuleList(modules)
    assert modules.pop(1) is module_list.pop(1) and held(module_list) == modules
    assert all(module_list[k] is mod for k, mod in enumerate(module_list))


def test_module_list_and_dict_cannot_be_called(shim: Any) -> None:
    for container in (shim.nn.ModuleList(), shim.nn.ModuleDict()):
        with pytest.raises(NotImplementedError, match="has no forward"):
            container()
        with pytest.raises(NotImplementedError, match="has no forward"):
            container(shim.rand(1, 3))


def _same_entries(expected: OrderedDict[str, Any], module_dict: Any) -> None:
    assert len(module_dict) == len(expected)
    assert all(expected[k] is m for k, m in zip(expected, module_dict.children(), strict=False))
    assert all(expected[k1] is module_dict[k2] for k1, k2 in zip(expected, module_dict, strict=True))
    assert all(module_dict[k] is expected[k] for k in module_dict.keys())  # noqa: SIM118 - keys() under test
    assert all(expected[k] is v for k, v in module_dict.items())
    assert all(expected[k] is m for k, m in zip(expected, module_dict.values(), strict=True))
    assert all(k in module_dict for k in expected)


def test_module_dict_follows_every_dict_operation(shim: Any) -> None:
    nn = shim.nn
    modules = OrderedDict([("act", nn.ReLU()), ("conv", nn.Conv2d(10, 10, 5)), ("fc", nn.Linear(5, 5))])
    module_dict = nn.ModuleDict(modules)
    _same_entries(modules, module_dict)
    modules["conv"] = nn.Conv2d(3, 4, 3)
    module_dict["conv"] = modules["conv"]
    pairs = [("fc2", nn.Linear(5, 5)), ("act", nn.Sigmoid())]
    modules.update(pairs)
    module_dict.update(pairs)
    ordered = OrderedDict([("fc3", nn.Linear(5, 5)), ("act2", nn.Sigmoid())])
    modules.update(ordered)
    module_dict.update(ordered)
    plain = {"fc4": nn.Linear(5, 5), "act3": nn.Sigmoid()}
    modules.update(plain.items())
    module_dict.update(plain)
    other = nn.ModuleDict([("fc5", nn.Linear(5, 5)), ("act4", nn.Sigmoid())])
    modules.update(other)
    module_dict.update(other)
    del module_dict["fc"]
    del modules["fc"]
    _same_entries(modules, module_dict)
    module_dict = nn.ModuleDict(nn.Sequential(modules).named_children())
    _same_entries(modules, module_dict)
    assert module_dict.pop("conv") is modules.pop("conv")
    _same_entries(modules, module_dict)
    module_dict.clear()
    modules.clear()
    assert len(module_dict) == 0
    _same_entries(modules, module_dict)


def test_module_dict_refuses_what_is_not_string_keyed_pairs(shim: Any) -> None:
    module_dict = shim.nn.ModuleDict()
    relu = shim.nn.ReLU()
    with pytest.raises(TypeError, match="got ReLU"):
        module_dict.update(relu)
    with pytest.raises(TypeError, match="element #0 is a ReLU"):
        module_dict.update([relu])
    with pytest.raises(ValueError, match="element #0 has length 1"):
        module_dict.update([[relu]])
    with pytest.raises(TypeError, match="module name must be a str, got int"):
        module_dict[1] = relu
