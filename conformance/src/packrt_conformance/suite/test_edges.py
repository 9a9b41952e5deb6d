"""The edge matrix: every keyword of a method both ways and combined, on trees with shared tensors and
children (the combinations come from ``_edges.EDGES``; docs/conformance.md's table is generated from it)."""

from __future__ import annotations

from typing import Any

import pytest

from packrt_conformance.adapter import Adapter
from packrt_conformance.suite._edges import call_kwargs, cases
from packrt_conformance.suite._support import SAMPLE_STATE, names, sample_tree, values_equal

# -- the walks ---------------------------------------------------------------------------------
# edge_tree: root(w, w_alias: the same Parameter; buf, buf_alias: the same tensor; scratch: not
# persistent) -> first: C, second: C (one child, two names; C holds cw, cb), tied(tw: root's w) ->
# deep(dw, db). Every list below is the rule applied by hand to that tree.
_ALL = {
    "params": ["w", "w_alias", "first.cw", "second.cw", "tied.tw", "tied.deep.dw"],
    "buffers": ["buf", "buf_alias", "scratch", "first.cb", "second.cb", "tied.deep.db"],
    "modules": ["", "first", "second", "tied", "tied.deep"],
}
_ONCE = {
    "params": ["w", "first.cw", "tied.deep.dw"],
    "buffers": ["buf", "scratch", "first.cb", "tied.deep.db"],
    "modules": ["", "first", "tied", "tied.deep"],
}
_OWN_ALL = {
    "params": ["w", "w_alias"],
    "buffers": ["buf", "buf_alias", "scratch"],
    "modules": ["", "first", "second", "tied"],
}
_OWN_ONCE = {"params": ["w"], "buffers": ["buf", "scratch"], "modules": ["", "first", "tied"]}
_OBJECT_OF = {"w_alias": "w", "buf_alias": "buf", "tied.tw": "w", "second.cw": "first.cw", "second.cb": "first.cb"}


def edge_tree(impl: Adapter) -> tuple[Any, dict[str, Any]]:
    """The tree above and its objects by (first) name."""
    root = impl.nn.Module()
    w = impl.parameter([1.0])
    root.w = w
    root.w_alias = w
    buf = impl.tensor([2.0])
    root.register_buffer("buf", buf)
    root.register_buffer("buf_alias", buf)
    root.register_buffer("scratch", impl.tensor([0.0]), persistent=False)
    child = impl.nn.Module()
    child.cw = impl.parameter([3.0])
    child.register_buffer("cb", impl.tensor([4.0]))
    root.first = child
    root.second = child
    root.tied = impl.nn.Module()
    root.tied.tw = w
    deep = impl.nn.Module()
    deep.dw = impl.parameter([5.0])
    deep.register_buffer("db", impl.tensor([6.0]))
    root.tied.deep = deep
    objects = {
        "w": w,
        "buf": root.buf,
        "scratch": root.scratch,
        "first.cw": child.cw,
        "first.cb": child.cb,
        "tied.deep.dw": deep.dw,
        "tied.deep.db": deep.db,
        "": root,
        "first": child,
        "second": child,
        "tied": root.tied,
        "tied.deep": deep,
    }
    return root, objects


def _expected(kind: str, recurse: Any, remove_duplicate: bool) -> list[str]:
    if recurse is False:
        return (_OWN_ONCE if remove_duplicate else _OWN_ALL)[kind]
    return (_ONCE if remove_duplicate else _ALL)[kind]


def _prefixed(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix and name else prefix or name


def _check_named(pairs: list[tuple[str, Any]], expected: list[str], prefix: str, objects: dict[str, Any]) -> None:
    assert names(pairs) == [_prefixed(prefix, n) for n in expected]
    for (_, got), name in zip(pairs, expected, strict=True):
        assert got is objects[_OBJECT_OF.get(name, name)], f"{name} is not the object filed under it"


@pytest.mark.parametrize("values", cases("named_parameters"))
def test_keyword_matrix_of_named_parameters(impl: Adapter, values: dict[str, Any]) -> None:
    root, objects = edge_tree(impl)
    pairs = list(root.named_parameters(**values))
    _check_named(pairs, _expected("params", values["recurse"], values["remove_duplicate"]), values["prefix"], objects)


@pytest.mark.parametrize("values", cases("named_buffers"))
def test_keyword_matrix_of_named_buffers(impl: Adapter, values: dict[str, Any]) -> None:
    root, objects = edge_tree(impl)
    pairs = list(root.named_buffers(**values))
    _check_named(pairs, _expected("buffers", values["recurse"], values["remove_duplicate"]), values["prefix"], objects)


@pytest.mark.parametrize("values", cases("named_modules"))
def test_keyword_matrix_of_named_modules(impl: Adapter, values: dict[str, Any]) -> None:
    root, objects = edge_tree(impl)
    pairs = list(root.named_modules(**call_kwargs(values, "prefix", "recurse", "remove_duplicate")))
    _check_named(pairs, _expected("modules", values["recurse"], values["remove_duplicate"]), values["prefix"], objects)


def _check_unnamed(impl: Adapter, kind: str, recurse: bool) -> None:
    root, objects = edge_tree(impl)
    got = list((root.parameters if kind == "params" else root.buffers)(recurse=recurse))
    expected = [objects[_OBJECT_OF.get(n, n)] for n in _expected(kind, recurse, True)]
    assert len(got) == len(expected), "each tensor once"
    assert all(g is e for g, e in zip(got, expected, strict=True)), "each tensor once, in walk order"


@pytest.mark.parametrize("values", cases("parameters"))
def test_recurse_matrix_of_parameters(impl: Adapter, values: dict[str, Any]) -> None:
    _check_unnamed(impl, "params", values["recurse"])


@pytest.mark.parametrize("values", cases("buffers"))
def test_recurse_matrix_of_buffers(impl: Adapter, values: dict[str, Any]) -> None:
    _check_unnamed(impl, "buffers", values["recurse"])


# -- state_dict --------------------------------------------------------------------------------
@pytest.mark.parametrize("values", cases("state_dict"))
def test_keyword_matrix_of_state_dict(impl: Adapter, values: dict[str, Any]) -> None:
    root = sample_tree(impl)
    held = dict([*root.named_parameters(), *root.named_buffers()])
    sd = root.state_dict(**values)
    prefix = values["prefix"]
    assert list(sd) == [prefix + k for k in SAMPLE_STATE]
    for key in SAMPLE_STATE:
        value = sd[prefix + key]
        if values["keep_vars"]:
            assert value is held[key], f"{key}: keep_vars=True hands out the registered object"
        else:
            assert not isinstance(value, impl.nn.Parameter), f"{key}: a plain tensor without keep_vars"
            assert impl.shares_storage(value, held[key]), f"{key}: the value shares the module's storage"
    assert impl.dtype_name(sd[prefix + "decoder.steps"]) == "int64"


# -- load_state_dict ---------------------------------------------------------------------------
_VALUES = {"gain": [3.0, 4.0], "table": [5.0, 6.0], "proj.weight": [[7.0, 8.0]], "proj.bias": [9.0]}
_BEFORE = {"gain": [1.0, 2.0], "table": [0.0, 0.0]}


def _load_tree(impl: Adapter) -> Any:
    root = impl.nn.Module()
    root.gain = impl.parameter(_BEFORE["gain"])
    root.register_buffer("table", impl.tensor(_BEFORE["table"]))
    root.proj = impl.linear(2, 1)
    return root


def _checkpoint(impl: Adapter, keys: str, dtype: str, assign: bool) -> dict[str, Any]:
    """:data:`_VALUES` in ``dtype``, less ``gain`` or plus ``stray`` as ``keys`` says."""
    # A layer serves floating-point weights: integers reach it through the copy road only.
    layer_dtype = "float32" if assign and dtype == "int64" else dtype
    ckpt = {k: impl.tensor(v, layer_dtype if k.startswith("proj.") else dtype) for k, v in _VALUES.items()}
    if keys == "one missing":
        del ckpt["gain"]
    if keys == "one unexpected":
        ckpt["stray"] = impl.tensor([0.0], dtype)
    return ckpt


def _check_refused(impl: Adapter, root: Any, ckpt: dict[str, Any], values: dict[str, Any]) -> None:
    """A strict load of a checkpoint with a missing or unexpected key raises, naming the key; with
    transactional loads the module keeps its objects and values."""
    held = dict(root.state_dict(keep_vars=True))
    proj_before = {k: impl.to_numpy(v) for k, v in held.items() if k.startswith("proj.")}
    with pytest.raises(RuntimeError, match="gain" if values["keys"] == "one missing" else "stray"):
        root.load_state_dict(ckpt, strict=values["strict"], assign=values["assign"])
    if "transactional-load" not in impl.capabilities:
        return  # the refusal is the rule; leaving the module as it was is that capability's promise
    assert values_equal(impl, root.gain, _BEFORE["gain"]) and values_equal(impl, root.table, _BEFORE["table"])
    assert all(values_equal(impl, root.get_parameter(k), v) for k, v in proj_before.items())
    assert root.gain is held["gain"], "a refused load keeps every object"


def _check_loaded(impl: Adapter, root: Any, ckpt: dict[str, Any], values: dict[str, Any]) -> None:
    """A load that goes through reports the missing and unexpected keys and holds the checkpoint's values:
    ``assign`` binds the incoming tensors, a copy keeps the registered objects and their dtype."""
    keys, assign = values["keys"], values["assign"]
    held = dict(root.state_dict(keep_vars=True))
    result = root.load_state_dict(ckpt, strict=values["strict"], assign=assign)
    assert list(result.missing_keys) == (["gain"] if keys == "one missing" else [])
    assert list(result.unexpected_keys) == (["stray"] if keys == "one unexpected" else [])
    now = dict(root.state_dict(keep_vars=True))
    for key, value in ckpt.items():
        if key == "stray":
            continue
        assert values_equal(impl, now[key], _VALUES[key]), f"{key} holds the checkpoint's values"
        if assign:
            assert impl.dtype_name(now[key]) == impl.dtype_name(value), f"{key}: assign takes the incoming dtype"
            assert impl.shares_storage(now[key], value), f"{key}: assign binds the incoming tensor"
        else:
            assert now[key] is held[key], f"{key}: a copy load keeps the registered object"
            assert impl.dtype_name(now[key]) == "float32", f"{key}: a copy converts to the slot's dtype"
            assert not impl.shares_storage(now[key], value), f"{key}: a copy load copies"
    assert isinstance(root.gain, impl.nn.Parameter) and isinstance(root.proj.weight, impl.nn.Parameter)
    if keys == "one missing":
        assert root.gain is held["gain"] and values_equal(impl, root.gain, _BEFORE["gain"])


@pytest.mark.parametrize("values", cases("load_state_dict"))
def test_keyword_matrix_of_load_state_dict(impl: Adapter, values: dict[str, Any]) -> None:
    root = _load_tree(impl)
    ckpt = _checkpoint(impl, values["keys"], values["dtype"], values["assign"])
    if values["strict"] and values["keys"] != "exact":
        _check_refused(impl, root, ckpt, values)
    else:
        _check_loaded(impl, root, ckpt, values)


@pytest.mark.parametrize("values", cases("load_state_dict (weight_residency)"))
def test_residency_matrix_of_load_state_dict(impl: Adapter, values: dict[str, Any]) -> None:
    residency, assign, dtype = values["weight_residency"], values["assign"], values["dtype"]
    root = _load_tree(impl)
    # Served first from a packed load of other values, so a pack the reload fails to drop shows.
    root.load_state_dict(root.state_dict(), weight_residency="packed")
    root.proj(impl.tensor([[1.0, -1.0]]))
    layer_dtype = "float32" if assign and dtype == "int64" else dtype
    ckpt = {k: impl.tensor(v, layer_dtype if k.startswith("proj.") else dtype) for k, v in _VALUES.items()}
    result = root.load_state_dict(ckpt, assign=assign, weight_residency=residency)
    assert (list(result.missing_keys), list(result.unexpected_keys)) == ([], [])
    now = root.state_dict()
    for key, value in ckpt.items():
        assert values_equal(impl, now[key], _VALUES[key]), f"{key} reads back the checkpoint's values"
        want = impl.dtype_name(value) if assign else "float32"
        assert impl.dtype_name(now[key]) == want, (
            f"{key}: {'assign takes the incoming' if assign else 'a copy keeps the'} dtype"
        )
    x = impl.tensor([[1.0, -1.0]], impl.dtype_name(root.proj.weight))
    out = impl.to_numpy(root.proj(x))
    assert out.tolist() == [[7.0 - 8.0 + 9.0]], f"{residency}: the layer computes x W^T + b from the loaded values"


# -- hooks -------------------------------------------------------------------------------------
def _hooked_module(impl: Adapter, raises: bool) -> Any:
    class Affine(impl.nn.Module):  # type: ignore[name-defined,misc]
        def forward(self, x: Any, y: Any = 0) -> Any:
            if raises:
                raise ValueError("forward failed on purpose")
            return x * 10 + y

    return Affine()


@pytest.mark.parametrize("values", cases("register_forward_hook"))
def test_keyword_matrix_of_register_forward_hook(impl: Adapter, values: dict[str, Any]) -> None:
    raises = values["forward"] == "raises"
    m = _hooked_module(impl, raises)
    log: list[Any] = []
    m.register_forward_hook(lambda mod, args, out: log.append("before"))

    def hook(mod: Any, args: Any, *rest: Any) -> None:
        log.append(("new", mod is m, args, *rest))

    m.register_forward_hook(hook, **call_kwargs(values, "prepend", "with_kwargs", "always_call"))
    m.register_forward_hook(lambda mod, args, out: log.append("after"))
    out = None if raises else 15
    seen = ("new", True, (1,), {"y": 5}, out) if values["with_kwargs"] else ("new", True, (1,), out)
    if raises:
        with pytest.raises(ValueError, match="forward failed on purpose"):
            m(1, y=5)
        assert log == ([seen] if values["always_call"] else []), "only always_call hooks run when forward raises"
        return
    assert m(1, y=5) == 15
    assert log == ([seen, "before", "after"] if values["prepend"] else ["before", seen, "after"])


@pytest.mark.parametrize("values", cases("register_forward_pre_hook"))
def test_keyword_matrix_of_register_forward_pre_hook(impl: Adapter, values: dict[str, Any]) -> None:
    m = _hooked_module(impl, raises=False)
    log: list[Any] = []
    m.register_forward_pre_hook(lambda mod, args: log.append(("before", args)))

    def hook(mod: Any, args: Any, *kwargs: Any) -> Any:
        log.append(("new", args, *kwargs))
        return ((2,), {"y": 3}) if values["with_kwargs"] else (2,)

    m.register_forward_pre_hook(hook, **call_kwargs(values, "prepend", "with_kwargs"))
    m.register_forward_pre_hook(lambda mod, args: log.append(("after", args)))
    assert m(1, y=5) == (23 if values["with_kwargs"] else 25), "the hook's return value replaces the arguments"
    new = ("new", (1,), {"y": 5}) if values["with_kwargs"] else ("new", (1,))
    replaced = (2,)
    if values["prepend"]:
        assert log == [new, ("before", replaced), ("after", replaced)]
    else:
        assert log == [("before", (1,)), new, ("after", replaced)]


# -- to_empty, register_buffer -----------------------------------------------------------------
@pytest.mark.parametrize("values", cases("to_empty"))
def test_keyword_matrix_of_to_empty(impl: Adapter, values: dict[str, Any]) -> None:
    root = impl.nn.Module()
    root.p = impl.parameter([1.0, 2.0])
    root.register_buffer("b", impl.tensor([3], "int64"))
    root.lin = impl.linear(2, 1)
    old = root.state_dict()  # plain handles on the old storage
    shapes = {k: tuple(v.shape) for k, v in old.items()}
    dtypes = {k: impl.dtype_name(v) for k, v in old.items()}
    device = None if values["device"] is None else impl.device
    assert root.to_empty(device=device, recurse=values["recurse"]) is root
    new = root.state_dict()
    assert {k: tuple(v.shape) for k, v in new.items()} == shapes
    assert {k: impl.dtype_name(v) for k, v in new.items()} == dtypes
    fresh = [k for k in old if not impl.shares_storage(new[k], old[k])]
    assert fresh == (list(old) if values["recurse"] else ["p", "b"])
    assert {impl.device_of(t) for t in new.values()} == {impl.device_of(impl.tensor([0.0]))}


@pytest.mark.parametrize("values", cases("register_buffer"))
def test_persistent_matrix_of_register_buffer(impl: Adapter, values: dict[str, Any]) -> None:
    kind = values["value"]
    own = kind.endswith("True)")
    value = impl.tensor([1.0]) if kind == "tensor" else impl.buffer([1.0], persistent=own)
    m = impl.nn.Module()
    m.register_buffer("b", value, **call_kwargs(values, "persistent"))
    kept = own if kind != "tensor" else values["persistent"] is not False
    assert names(m.named_buffers()) == ["b"], "persistent or not, it is a buffer"
    assert list(m.state_dict()) == (["b"] if kept else [])
