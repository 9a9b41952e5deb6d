"""PyTorch's ParameterList and ParameterDict tests (test/test_nn.py), rewritten for packrt and run
through the ``shim`` fixture. Containers are compared by the objects they hold."""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import pytest


def _param(shim: Any, *shape: int) -> Any:
    return shim.nn.Parameter(shim.randn(*(shape or (2, 2))))


def _same_params(expected: list[Any], param_list: Any, shim: Any) -> None:
    assert len(param_list) == len(expected)
    assert all(a is b for a, b in zip(expected, param_list, strict=True))
    params = [p for p in expected if isinstance(p, shim.nn.Parameter)]
    assert all(a is b for a, b in zip(params, param_list.parameters(), strict=True))
    assert all(param_list[i] is expected[i] for i in range(len(expected)))


def test_parameter_list_follows_the_list_operations(shim: Any) -> None:
    parameters = [_param(shim), _param(shim)]
    param_list = shim.nn.ParameterList(parameters)
    _same_params(parameters, param_list, shim)
    parameters += [_param(shim)]
    param_list += [parameters[-1]]
    parameters.append(_param(shim))
    param_list.append(parameters[-1])
    more = [_param(shim), _param(shim)]
    parameters.extend(more)
    param_list.extend(more)
    parameters[2] = _param(shim)
    param_list[2] = parameters[2]
    parameters[-1] = _param(shim)
    param_list[-1] = parameters[-1]
    _same_params(parameters, param_list, shim)
    idx = shim.tensor(2, dtype=shim.int32)
    parameters[2] = _param(shim)
    param_list[idx] = parameters[2]
    assert param_list[idx] is parameters[2]
    for part in (slice(1, None), slice(3, None), slice(None, -1), slice(None, -3), slice(None, None, -1)):
        assert list(param_list[part]) == parameters[part]


def test_parameter_list_refuses_a_single_parameter_where_an_iterable_is_expected(shim: Any) -> None:
    param_list = shim.nn.ParameterList()
    with pytest.raises(TypeError, match="extend takes an iterable of values, got Parameter"):
        param_list += _param(shim)
    with pytest.raises(TypeError, match="extend takes an iterable of values, got Parameter"):
        param_list.extend(_param(shim))


def test_parameter_list_takes_a_module_walk_and_mixed_values(shim: Any) -> None:
    nn = shim.nn
    s = nn.Sequential(OrderedDict([("layer1", nn.Linear(1, 2)), ("layer2", nn.Linear(2, 3))]))
    parameters = list(s.parameters())
    param_list = nn.ParameterList()
    param_list.extend(s.parameters())
    _same_params(parameters, param_list, shim)
    param_list.append(shim.rand(2, 2))
    assert isinstance(param_list[-1], nn.Parameter)
    parameters.append(param_list[-1])
    param_list.extend([shim.rand(2, 2), "foo"])
    assert isinstance(param_list[-2], nn.Parameter) and param_list[-1] == "foo"
    parameters.extend(param_list[-2:])
    param_list += ["bar", shim.rand(2, 2)]
    assert param_list[-2] == "bar" and isinstance(param_list[-1], nn.Parameter)
    parameters += list(param_list[-2:])
    _same_params(parameters, param_list, shim)


def test_parameter_list_of_a_storage_free_parameter_prints_its_dtype_and_size(shim: Any) -> None:
    with shim.meta_init():
        p = shim.nn.Parameter(shim.empty(1))
    assert repr(shim.nn.ParameterList([p])) == "ParameterList((0): Parameter containing: [float32 of size 1])"


def _same_items(expected: OrderedDict[str, Any], parameter_dict: Any) -> None:
    assert len(parameter_dict) == len(expected)
    named = list(parameter_dict.named_parameters())
    assert [k for k in expected if not isinstance(expected[k], str)] == [k for k, _ in named]
    assert all(expected[k1] is parameter_dict[k2] for k1, k2 in zip(expected, parameter_dict, strict=True))
    assert all(expected[k] is v for k, v in parameter_dict.items())
    assert all(expected[k] is v for k, v in zip(expected, parameter_dict.values(), strict=True))
    assert all(k in parameter_dict for k in expected)


def test_parameter_dict_follows_the_dict_operations(shim: Any) -> None:
    nn = shim.nn
    parameters = OrderedDict([("p1", _param(shim, 10, 10)), ("p2", _param(shim, 10, 10)), ("p3", _param(shim, 10))])
    parameter_dict = nn.ParameterDict(parameters)
    _same_items(parameters, parameter_dict)
    parameters["p4"] = _param(shim)
    parameter_dict["p4"] = parameters["p4"]
    pairs = [("p5", _param(shim)), ("p2", _param(shim))]
    parameters.update(pairs)
    parameter_dict.update(pairs)
    ordered = OrderedDict([("p6", _param(shim)), ("p5", _param(shim))])
    parameters.update(ordered)
    parameter_dict.update(ordered)
    plain = {"p8": _param(shim), "p7": _param(shim)}
    parameters.update(sorted(plain.items()))  # a plain dict goes in sorted by key
    parameter_dict.update(plain)
    other = nn.ParameterDict([("p10", _param(shim)), ("p9", _param(shim))])
    parameters.update(other)
    parameter_dict.update(other)
    del parameter_dict["p3"]
    del parameters["p3"]
    _same_items(parameters, parameter_dict)
    assert parameter_dict.pop("p4") is parameters.pop("p4")
    forward, backward = list(parameter_dict), list(reversed(parameter_dict))
    assert forward == backward[::-1]
    copy = parameter_dict.copy()
    assert all(copy[key] is parameter_dict[key] for key in parameter_dict)
    parameter_dict["p20"] = _param(shim)
    copy["p21"] = _param(shim)
    assert "p20" not in copy and "p21" not in parameter_dict
    parameter_dict.pop("p20")
    p = _param(shim)
    parameter_dict["p12"] = p
    assert parameter_dict.popitem() == ("p12", p)
    _same_items(parameters, parameter_dict)


def test_parameter_dict_update_refuses_what_is_not_pairs(shim: Any) -> None:
    parameter_dict = shim.nn.ParameterDict()
    with pytest.raises(TypeError, match="got int"):
        parameter_dict.update(1)
    with pytest.raises(TypeError, match="element #0 is a int"):
        parameter_dict.update([1])
    with pytest.raises(ValueError, match="element #0 has length 10"):
        parameter_dict.update(_param(shim, 10, 10))


def test_parameter_dict_setdefault_merge_get_clear_and_fromkeys(shim: Any) -> None:
    nn = shim.nn
    parameter_dict = nn.ParameterDict()
    p11 = _param(shim)
    assert parameter_dict.setdefault("p11", p11) is p11 and parameter_dict["p11"] is p11
    assert parameter_dict.setdefault("p11", _param(shim)) is p11
    assert parameter_dict.setdefault("p26") is None
    del parameter_dict["p26"]
    second = nn.ParameterDict(OrderedDict([("p13", _param(shim)), ("p2", _param(shim))]))
    parameter_dict |= second
    assert list(parameter_dict) == ["p11", "p13", "p2"]
    parameter_dict = parameter_dict | nn.ParameterDict(OrderedDict([("p20", _param(shim))]))
    parameter_dict = nn.ParameterDict(OrderedDict([("p23", _param(shim))])) | parameter_dict
    assert list(parameter_dict) == ["p23", "p11", "p13", "p2", "p20"]
    temp = _param(shim)
    assert parameter_dict.get("p11") is p11 and parameter_dict.get("p11", temp) is p11
    assert parameter_dict.get("p18") is None and parameter_dict.get("p18", temp) is temp
    parameter_dict.clear()
    assert len(parameter_dict) == 0
    assert dict(parameter_dict.fromkeys(["p19", "p20"])) == {"p19": None, "p20": None}
    assert dict(parameter_dict.fromkeys(["p19", "p20"], temp)) == {"p19": temp, "p20": temp}


def test_parameter_dict_wraps_tensors_and_keeps_other_values(shim: Any) -> None:
    parameter_dict = shim.nn.ParameterDict()
    parameter_dict["p21"] = shim.rand(2, 2)
    assert isinstance(parameter_dict["p21"], shim.nn.Parameter)
    parameter_dict.update({"p22": shim.rand(2, 2), "foo": "bar"})
    assert isinstance(parameter_dict["p22"], shim.nn.Parameter) and parameter_dict["foo"] == "bar"


def test_parameter_containers_train_and_eval_quietly(shim: Any, recwarn: pytest.WarningsRecorder) -> None:
    for container in (
        shim.nn.ParameterList([shim.rand(2), shim.rand(2)]),
        shim.nn.ParameterDict({"a": shim.rand(2), "b": shim.rand(2)}),
    ):
        container.train()
        container.eval()
    assert len(recwarn) == 0
