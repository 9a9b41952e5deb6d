"""PyTorch's nn.Module registration, walk, path and argument tests (test/test_nn.py), rewritten for
packrt and run through the ``shim`` fixture."""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import pytest


def _basic_net(shim: Any) -> tuple[Any, Any, Any]:
    """A layer with one parameter and one buffer, a net holding it, and a Sequential of the net."""
    nn = shim.nn

    class Layer(nn.Module):  # type: ignore[misc, name-defined]
        def __init__(self) -> None:
            super().__init__()
            self.layer_dummy_param = nn.Parameter(shim.empty(3, 5))
            self.layer_dummy_buf = nn.Buffer(shim.zeros(1, 3, 3, 7))

    class Net(nn.Module):  # type: ignore[misc, name-defined]
        def __init__(self) -> None:
            super().__init__()
            self.l1 = Layer()
            self.dummy_param = nn.Parameter(shim.empty(3, 5))
            self.dummy_buf = nn.Buffer(shim.zeros(7, 3, 3, 1))

    layer = Layer()
    net = Net()
    return layer, net, nn.Sequential(net)


def _names(pairs: Any) -> list[str]:
    return [name for name, _ in pairs]


@pytest.mark.parametrize("mode", ["invalid_str", "cpu-device"])
@pytest.mark.parametrize("container", [False, True], ids=["subclass", "sequential"])
def test_train_with_a_mode_that_is_not_a_bool_is_a_value_error(shim: Any, mode: str, container: bool) -> None:
    nn = shim.nn
    module = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2)) if container else nn.Linear(2, 2)
    with pytest.raises(ValueError, match="expects a bool training mode"):
        module.train(shim.device("cpu") if mode == "cpu-device" else mode)


def test_dir_lists_registered_names_and_each_is_an_attribute(shim: Any) -> None:
    linear = shim.nn.Linear(2, 2)
    linear._test_submodule = shim.nn.Linear(2, 2)
    linear._test_parameter = shim.nn.Parameter(shim.empty(2, 2))
    linear._test_buffer = shim.nn.Buffer(shim.empty(2, 2))
    keys = dir(linear)
    assert {"_test_submodule", "_test_parameter", "_test_buffer"} <= set(keys)
    assert all(hasattr(linear, key) for key in keys)


def test_repr_of_an_empty_a_leaf_and_a_nested_module(shim: Any) -> None:
    assert repr(shim.nn.Sequential()) == "Sequential()"
    linear = shim.nn.Linear(1, 1)
    assert repr(linear) == "Linear(in_features=1, out_features=1, bias=True)"
    assert repr(shim.nn.Sequential(linear)) == "Sequential(\n  (0): Linear(in_features=1, out_features=1, bias=True)\n)"


def test_named_children_refuse_bad_names_and_list_each_child_once(shim: Any) -> None:
    l1, l2, l3, l4 = (shim.nn.Linear(2, 2) for _ in range(4))
    subnet = shim.nn.Sequential(l3, l4)
    s = shim.nn.Sequential()
    with pytest.raises(KeyError, match="cannot be empty"):
        s.add_module("", l1)
    with pytest.raises(KeyError, match=r"cannot contain '\.'"):
        s.add_module("name.with.dot", l1)
    for name, module in [("layer1", l1), ("layer2", l2), ("layer3", l1), ("layer4", l2), ("subnet", subnet)]:
        s.add_module(name, module)
    assert list(s.named_children()) == [("layer1", l1), ("layer2", l2), ("subnet", subnet)]


def test_modules_and_named_modules_visit_each_module_once_unless_asked(shim: Any) -> None:
    nn = shim.nn
    shared = nn.Linear(10, 20)
    block = nn.Sequential()
    l1, l2 = nn.Linear(10, 20), nn.Linear(10, 20)
    block.add_module("linear1", l1)
    block.add_module("linear2", l2)
    net = nn.Module()
    net.l1, net.l2, net.block = shared, shared, block
    net.param = shim.empty(3, 5)  # a plain tensor attribute: not registered
    s = nn.Sequential(net, net)
    small = nn.Module()
    small.l1, small.l2 = shared, shared
    four = nn.Sequential(small, small, small, small)
    assert list(four.modules()) == [four, small, shared]
    assert list(s.named_modules()) == [
        ("", s),
        ("0", net),
        ("0.l1", shared),
        ("0.block", block),
        ("0.block.linear1", l1),
        ("0.block.linear2", l2),
    ]
    everything = _names(s.named_modules(remove_duplicate=False))
    assert everything == [
        "",
        *[f"{i}{tail}" for i in "01" for tail in ("", ".l1", ".l2", ".block", ".block.linear1", ".block.linear2")],
    ]


@pytest.mark.parametrize("kind", ["buffer", "parameter"])
def test_a_registration_name_that_is_not_a_string_is_a_type_error(shim: Any, kind: str) -> None:
    m = shim.nn.Module()
    register = m.register_buffer if kind == "buffer" else m.register_parameter
    value = shim.rand(5) if kind == "buffer" else shim.nn.Parameter()
    for name, shown in [(1, "int"), (None, "NoneType")]:
        with pytest.raises(TypeError, match=f"{kind} name must be a str, got {shown}"):
            register(name, value)


def test_register_buffer_refuses_a_name_taken_by_anything_else(shim: Any) -> None:
    m = shim.nn.Module()
    m.attribute_name = 5
    with pytest.raises(KeyError, match="already taken"):
        m.register_buffer("attribute_name", shim.rand(5))
    with pytest.raises(KeyError, match="already taken"):
        m.attribute_name = shim.nn.Buffer(shim.rand(5))
    del m.attribute_name
    m.register_parameter("attribute_name", shim.nn.Parameter())
    with pytest.raises(KeyError, match="already taken"):
        m.register_buffer("attribute_name", shim.rand(5))
    del m.attribute_name
    m.add_module("attribute_name", shim.nn.Module())
    with pytest.raises(KeyError, match="already taken"):
        m.register_buffer("attribute_name", shim.rand(5))


def test_register_parameter_refuses_a_name_taken_by_anything_else(shim: Any) -> None:
    m = shim.nn.Module()
    m.attribute_name = 5
    with pytest.raises(KeyError, match="already taken"):
        m.register_parameter("attribute_name", shim.nn.Parameter())
    del m.attribute_name
    m.register_buffer("attribute_name", shim.rand(5))
    with pytest.raises(KeyError, match="already taken"):
        m.register_parameter("attribute_name", shim.nn.Parameter())
    del m.attribute_name
    m.attribute_name = shim.nn.Buffer(shim.rand(5))
    with pytest.raises(KeyError, match="already taken"):
        m.register_parameter("attribute_name", shim.nn.Parameter())
    del m.attribute_name
    m.add_module("attribute_name", shim.nn.Module())
    with pytest.raises(KeyError, match="already taken"):
        m.register_parameter("attribute_name", shim.nn.Parameter())


@pytest.mark.parametrize("method", ["add_module", "register_module"])
def test_add_module_refuses_a_name_taken_by_a_tensor_or_attribute(shim: Any, method: str) -> None:
    m = shim.nn.Module()
    m.attribute_name = 5
    with pytest.raises(KeyError, match="already taken"):
        getattr(m, method)("attribute_name", shim.nn.Module())
    del m.attribute_name
    m.register_buffer("attribute_name", shim.rand(5))
    with pytest.raises(KeyError, match="already taken"):
        getattr(m, method)("attribute_name", shim.nn.Module())
    del m.attribute_name
    m.register_parameter("attribute_name", shim.nn.Parameter())
    with pytest.raises(KeyError, match="already taken"):
        getattr(m, method)("attribute_name", shim.nn.Module())


def test_registering_again_under_a_name_replaces_the_value(shim: Any) -> None:
    m = shim.nn.Module()
    b1 = shim.rand(5)
    b2 = b1 + 5
    for value in (b1, b2, None):
        m.register_buffer("buffer_name", value)
        assert m.buffer_name is value
    p1 = shim.nn.Parameter(shim.rand(5))
    for value in (p1, shim.nn.Parameter(p1 + 5), None):
        m.register_parameter("param_name", value)
        assert m.param_name is value


def test_non_persistent_buffers_are_walked_but_not_saved(shim: Any) -> None:
    m = shim.nn.Module()
    m.buf = shim.nn.Buffer(shim.rand(5), persistent=False)
    assert len(list(m.buffers())) == 1 and len(m.state_dict()) == 0
    m.buf = shim.nn.Buffer(shim.rand(5))
    assert len(m.state_dict()) == 1
    m.buf = shim.nn.Buffer(shim.rand(5), persistent=False)
    assert len(list(m.buffers())) == 1 and len(m.state_dict()) == 0
    m.buf = None
    assert len(list(m.buffers())) == 0
    m.buf = shim.rand(5)  # still a non-persistent buffer's slot
    assert len(list(m.buffers())) == 1 and len(m.state_dict()) == 0
    m.buf = shim.nn.Parameter(shim.rand(5))
    assert len(list(m.buffers())) == 0 and len(m.state_dict()) == 1
    m.load_state_dict({"buf": shim.rand(5)})
    del m.buf
    assert len(list(m.parameters())) == 0


def test_parameters_and_buffers_walk_with_prefixes_and_recurse(shim: Any) -> None:
    layer, net, seq = _basic_net(shim)
    assert _names(layer.named_parameters()) == ["layer_dummy_param"]
    assert _names(net.named_parameters()) == ["dummy_param", "l1.layer_dummy_param"]
    assert _names(net.named_parameters(recurse=False)) == ["dummy_param"]
    assert _names(seq.named_parameters()) == ["0.dummy_param", "0.l1.layer_dummy_param"]
    assert _names(net.named_buffers()) == ["dummy_buf", "l1.layer_dummy_buf"]
    assert _names(net.named_buffers(recurse=False)) == ["dummy_buf"]
    assert _names(seq.named_buffers()) == ["0.dummy_buf", "0.l1.layer_dummy_buf"]


def test_remove_duplicate_false_names_a_shared_tensor_once_per_name(shim: Any) -> None:
    m = shim.nn.Module()
    m.param1 = shim.nn.Parameter(shim.empty(3, 3))
    m.param2 = m.param1
    assert _names(m.named_parameters()) == ["param1"]
    assert _names(m.named_parameters(remove_duplicate=False)) == ["param1", "param2"]
    m2 = shim.nn.Module()
    m2.mod1 = shim.nn.Linear(3, 4, bias=False)
    m2.mod2 = m2.mod1
    assert _names(m2.named_parameters(remove_duplicate=False)) == ["mod1.weight", "mod2.weight"]
    b = shim.nn.Module()
    b.buffer1 = shim.nn.Buffer(shim.empty(3, 5))
    b.buffer2 = b.buffer1
    assert _names(b.named_buffers(remove_duplicate=False)) == ["buffer1", "buffer2"]


def test_get_buffer_reads_through_submodules(shim: Any) -> None:
    root, sub, subsub = shim.nn.Module(), shim.nn.Module(), shim.nn.Module()
    foo, bar = shim.randn(2, 3), shim.randn(4, 5)
    subsub.bar = shim.nn.Buffer(bar)
    sub.foo, sub.subsub = shim.nn.Buffer(foo), subsub
    root.sub = sub
    assert shim.equal(root.get_buffer("sub.foo"), foo) and shim.equal(root.get_buffer("sub.subsub.bar"), bar)


def test_set_submodule_creates_replaces_and_refuses(shim: Any) -> None:
    nn = shim.nn
    a = nn.Module()
    a.set_submodule("net_b", nn.Module())
    a.set_submodule("net_b.net_c", nn.Module())
    a.set_submodule("net_b.net_c.conv", nn.Conv2d(3, 3, 3))
    new = nn.Linear(1, 2)
    a.set_submodule("net_b.net_c.conv", new, True)
    assert a.get_submodule("net_b.net_c.conv") is new
    with pytest.raises(AttributeError, match="has no submodule 'conv'"):
        a.set_submodule("net_b.conv", nn.Conv2d(1, 1, 1), True)
    net = nn.Module()
    net.t = nn.Module()
    linear = nn.Linear(1, 2)
    with pytest.raises(ValueError, match="would replace the module itself"):
        net.set_submodule("", linear)
    with pytest.raises(AttributeError, match="'a' names nothing"):
        net.set_submodule("a.l", linear)
    with pytest.raises(AttributeError, match="has no submodule '0'"):
        net.set_submodule("0", linear, True)
    net.set_submodule("0", linear, False)
    assert net.get_submodule("0") is linear
    net.foo = "bar"
    with pytest.raises(AttributeError, match="'foo' is a attribute, not a module"):
        net.set_submodule("foo", linear)
    with pytest.raises(ValueError, match="expects a Module, got str"):
        net.set_submodule("t.l", "bazz")


@pytest.mark.parametrize(
    "call",
    ["cpu-true", "long", "none-true", "cpu-long-true", "cpu-long-kw", "list", "dict-kw", "long-tensor", "cpu-tensor"],
)
def test_module_to_refuses_argument_forms_pytorch_refuses_with_a_type_error(shim: Any, call: str) -> None:
    net = shim.nn.Sequential(shim.nn.Linear(3, 3))
    cpu, long_tensor = shim.device("cpu"), shim.tensor(3, dtype=shim.long)
    forms: dict[str, Any] = {
        "cpu-true": lambda: net.to(cpu, True),
        "long": lambda: net.to(shim.long),
        "none-true": lambda: net.to(None, True),
        "cpu-long-true": lambda: net.to(cpu, shim.long, True),
        "cpu-long-kw": lambda: net.to(cpu, dtype=shim.long, non_blocking=True),
        "list": lambda: net.to([]),
        "dict-kw": lambda: net.to({}, non_blocking=True),
        "long-tensor": lambda: net.to(long_tensor, non_blocking=True),
        "cpu-tensor": lambda: net.to(cpu, long_tensor, non_blocking=True),
    }
    with pytest.raises(TypeError, match=r"Module\.to|floating point"):
        forms[call]()


def test_casts_change_floating_tensors_and_keep_integer_buffers(shim: Any) -> None:
    layer = shim.nn.Linear(10, 20)
    net = shim.nn.Module()
    net.l, net.l2 = layer, layer
    net.add_module("empty", None)
    net.indices = shim.nn.Buffer(shim.tensor([1], dtype=shim.long))
    for cast, expected in [(net.float, shim.float32), (net.double, shim.float64), (lambda: net.to(shim.half), None)]:
        cast()
        want = expected or shim.half
        assert layer.weight.dtype is want and layer.bias.dtype is want and net.indices.dtype is shim.long
    net.to(shim.device("cpu"), non_blocking=True)
    assert layer.weight.dtype is shim.half
    net.to(shim.float32)
    net.to(shim.zeros(1, dtype=shim.float64))
    assert layer.weight.dtype is shim.float64 and layer.bias.dtype is shim.float64


def test_a_plain_tensor_cannot_replace_a_parameter(shim: Any) -> None:
    l1, l2 = shim.nn.Linear(10, 10), shim.nn.Linear(10, 10)
    with pytest.raises(TypeError, match="cannot assign a Tensor to parameter 'weight'"):
        l2.weight = l1.weight + 2
    l2.weight = shim.nn.Parameter(shim.randn(10, 10))


def test_sequential_of_an_ordered_dict_walks_in_its_order(shim: Any) -> None:
    l1, l2 = shim.nn.Linear(1, 2), shim.nn.Linear(2, 3)
    s = shim.nn.Sequential(OrderedDict([("layer1", l1), ("layer2", l2)]))
    assert list(s.children()) == [l1, l2]
