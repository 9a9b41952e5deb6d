"""HookRegistry order and RemovableHandle removal, copy and pickle rules."""

from __future__ import annotations

import copy
import gc
import pickle
import weakref
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from packrt_hooks import HookRegistry, RemovableHandle, call_with_hooks


def named(tag: str, log: list[str]) -> Any:
    def hook(_module: object, _args: tuple[Any, ...]) -> None:
        log.append(tag)

    hook.__qualname__ = f"hook_{tag}"
    return hook


def tags(registry: HookRegistry) -> list[str]:
    return [hook.__qualname__.removeprefix("hook_") for hook in registry.hooks]


def module_level_hook(_module: object, _args: tuple[Any, ...]) -> None:
    return None


def test_hooks_run_in_registration_order() -> None:
    log: list[str] = []
    registry = HookRegistry()
    for tag in "abc":
        registry.add(named(tag, log))
    call_with_hooks(object(), lambda: None, (), {}, registry, HookRegistry())
    assert log == ["a", "b", "c"]


def test_prepend_puts_the_hook_before_every_earlier_one() -> None:
    log: list[str] = []
    registry = HookRegistry()
    registry.add(named("a", log))
    registry.add(named("b", log))
    registry.add(named("first", log), prepend=True)
    registry.add(named("c", log))
    registry.add(named("very_first", log), prepend=True)
    call_with_hooks(object(), lambda: None, (), {}, registry, HookRegistry())
    assert log == ["very_first", "first", "a", "b", "c"]


def test_registering_the_same_hook_twice_runs_it_twice_and_each_handle_removes_one() -> None:
    log: list[str] = []
    hook = named("x", log)
    registry = HookRegistry()
    first = registry.add(hook)
    registry.add(hook)
    first.remove()
    assert len(registry) == 1
    call_with_hooks(object(), lambda: None, (), {}, registry, HookRegistry())
    assert log == ["x"]


def test_bool_of_a_registry_says_whether_any_hook_is_registered() -> None:
    registry = HookRegistry()
    assert not registry
    handle = registry.add(module_level_hook)
    assert registry
    handle.remove()
    assert not registry


def test_remove_unregisters_and_calling_it_again_does_nothing() -> None:
    log: list[str] = []
    registry = HookRegistry()
    keep = registry.add(named("keep", log))
    handle = registry.add(named("gone", log))
    assert not handle.removed
    handle.remove()
    handle.remove()
    assert handle.removed
    assert tags(registry) == ["keep"]
    keep.remove()
    assert not registry


def test_a_handle_removes_its_hook_when_its_with_block_exits() -> None:
    registry = HookRegistry()
    with registry.add(module_level_hook) as handle:
        assert len(registry) == 1
        assert isinstance(handle, RemovableHandle)
    assert not registry


def test_a_handle_removes_its_hook_when_its_with_block_raises() -> None:
    registry = HookRegistry()
    with pytest.raises(KeyError, match="inside"), registry.add(module_level_hook):
        raise KeyError("inside")
    assert not registry


def test_a_combined_handle_removes_every_registration_it_covers_and_nothing_else() -> None:
    log: list[str] = []
    first, second = HookRegistry(), HookRegistry()
    covered = [first.add(named("a", log)), second.add(named("b", log)), first.add(named("c", log))]
    first.add(named("other", log))
    combined = RemovableHandle.combine(covered)
    combined.remove()
    combined.remove()
    assert tags(first) == ["other"]
    assert not second


def test_a_stale_handle_never_removes_a_later_registration() -> None:
    registry = HookRegistry()
    stale = registry.add(module_level_hook)
    registry.clear()
    fresh = registry.add(module_level_hook)
    stale.remove()
    assert len(registry) == 1
    fresh.remove()
    assert not registry


def test_registering_something_not_callable_is_a_type_error_naming_it() -> None:
    registry = HookRegistry()
    with pytest.raises(TypeError, match=r"a hook must be callable, got int 42"):
        registry.add(42)  # type: ignore[arg-type]
    assert not registry


def test_a_deep_copied_registry_is_independent_of_the_original() -> None:
    log: list[str] = []
    original = HookRegistry()
    handle = original.add(named("a", log))
    duplicate = copy.deepcopy(original)
    handle.remove()
    assert not original
    assert tags(duplicate) == ["a"]
    duplicate.add(named("b", log))
    assert not original
    assert tags(duplicate) == ["a", "b"]


def test_a_shallow_copied_registry_shares_hooks_but_not_removals() -> None:
    log: list[str] = []
    original = HookRegistry()
    hook = named("a", log)
    handle = original.add(hook)
    duplicate = copy.copy(original)
    handle.remove()
    assert duplicate.hooks == (hook,)


def test_deepcopy_rebinds_a_bound_method_hook_to_the_copied_owner() -> None:
    class Owner:
        def __init__(self) -> None:
            self.seen = 0
            self.registry = HookRegistry()
            self.registry.add(self.hook)

        def hook(self, _module: object, _args: tuple[Any, ...]) -> None:
            self.seen += 1

    owner = Owner()
    twin = copy.deepcopy(owner)
    call_with_hooks(object(), lambda: None, (), {}, twin.registry, HookRegistry())
    assert (owner.seen, twin.seen) == (0, 1)


def test_a_handle_copied_together_with_its_registry_follows_the_copy() -> None:
    registry = HookRegistry()
    holder = (registry, registry.add(module_level_hook))
    twin_registry, twin_handle = copy.deepcopy(holder)
    twin_handle.remove()
    assert not twin_registry
    assert len(registry) == 1


def test_a_registry_of_module_level_functions_survives_pickling() -> None:
    registry = HookRegistry()
    registry.add(module_level_hook, prepend=True, with_kwargs=True)
    restored = pickle.loads(pickle.dumps(registry))
    assert restored.hooks == (module_level_hook,)
    assert restored.entries[0].with_kwargs
    restored.add(module_level_hook).remove()
    assert len(restored) == 1


def test_repr_lists_the_hooks_by_name() -> None:
    registry = HookRegistry()
    registry.add(module_level_hook)
    assert "module_level_hook" in repr(registry)
    handle = registry.add(module_level_hook)
    assert "1 registration" in repr(handle)
    handle.remove()
    assert "removed" in repr(handle)


# --- property: any sequence of register / prepend / remove matches a plain list model ---

operations = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.booleans()),
        st.tuples(st.just("remove"), st.integers(min_value=0, max_value=30)),
    ),
    max_size=40,
)


@given(operations)
def test_any_sequence_of_registrations_and_removals_runs_hooks_in_the_model_order(
    ops: list[tuple[str, Any]],
) -> None:
    log: list[str] = []
    registry = HookRegistry()
    model: list[str] = []
    handles: list[tuple[str, RemovableHandle]] = []
    for number, (op, arg) in enumerate(ops):
        if op == "add":
            tag = str(number)
            handles.append((tag, registry.add(named(tag, log), prepend=arg)))
            if arg:
                model.insert(0, tag)
            else:
                model.append(tag)
        elif handles:
            tag, handle = handles[arg % len(handles)]
            handle.remove()  # removing twice is allowed and must change nothing
            if tag in model:
                model.remove(tag)
        assert tags(registry) == model
        assert bool(registry) == bool(model)
    call_with_hooks(object(), lambda: None, (), {}, registry, HookRegistry())
    assert log == model


def test_on_change_is_called_after_every_registration_and_removal() -> None:
    calls: list[int] = []
    registry = HookRegistry(lambda: calls.append(len(registry)))
    handle = registry.add(lambda *a: None)
    other = registry.add(lambda *a: None, prepend=True)
    handle.remove()
    handle.remove()  # already gone: nothing changed, no call
    registry.clear()
    assert calls == [1, 2, 1, 0]
    other.remove()
    assert calls == [1, 2, 1, 0]


def test_a_deep_copy_sends_a_bound_method_callback_to_the_copied_owner() -> None:
    import copy

    owner = _Owner()
    twin = copy.deepcopy(owner)
    twin.registry.add(lambda *a: None)
    assert (owner.changes, twin.changes) == (0, 1)


class _Owner:
    """An object that keeps its registry and is told of every change (as a Module is)."""

    def __init__(self) -> None:
        self.changes = 0
        self.registry = HookRegistry(self.changed)

    def changed(self) -> None:
        self.changes += 1


def test_a_bound_method_callback_does_not_keep_its_owner_alive() -> None:
    owner = _Owner()
    owner.registry.add(lambda *a: None)
    assert owner.changes == 1
    alive = weakref.ref(owner)
    gc.disable()
    try:
        del owner
        assert alive() is None  # freed by reference counting alone: the registry made no cycle
    finally:
        gc.enable()


def test_a_registry_whose_owner_is_gone_still_registers_and_calls_nothing() -> None:
    owner = _Owner()
    registry = owner.registry
    del owner
    registry.add(lambda *a: None)  # the weak callback is dead: nothing to tell, nothing raised
    assert len(registry) == 1


def test_a_pickled_owner_keeps_its_callback() -> None:
    twin = pickle.loads(pickle.dumps(_Owner()))
    twin.registry.add(lambda *a: None)
    assert twin.changes == 1
