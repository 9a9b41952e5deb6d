"""profile(): per-module call counts, total and self time, one handle for every hook."""

from __future__ import annotations

import copy
import math
import re
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from hookfakes import Affine, FakeModule, Raises, Seq, Sleep

from packrt_hooks import Profile, profile


def model() -> Seq:
    return Seq(enc=Seq(fast=Affine(), slow=Sleep(0.02)), head=Sleep(0.01))


def test_profile_counts_every_call_of_every_module() -> None:
    net = model()
    with profile(net) as prof:
        for _ in range(3):
            net(np.ones(4))
    assert {name: t.calls for name, t in prof.timings.items()} == {
        "": 3,
        "enc": 3,
        "enc.fast": 3,
        "enc.slow": 3,
        "head": 3,
    }


def test_a_parent_total_covers_its_children_and_self_times_sum_to_the_wall_time() -> None:
    net = model()
    with profile(net) as prof:
        net(np.ones(4))
    t = prof.timings
    assert t[""].total_s >= t["enc"].total_s + t["head"].total_s
    assert t["enc"].total_s >= t["enc.fast"].total_s + t["enc.slow"].total_s
    assert t["enc"].children_s == pytest.approx(t["enc.fast"].total_s + t["enc.slow"].total_s)
    assert all(timing.self_s >= 0 for timing in t.values())
    assert math.fsum(timing.self_s for timing in t.values()) == pytest.approx(prof.total_s)
    assert prof.total_s == t[""].total_s


def test_self_time_is_the_module_own_work_and_excludes_its_children() -> None:
    net = model()
    with profile(net) as prof:
        net(np.ones(4))
    t = prof.timings
    assert t["enc.slow"].self_s >= 0.02
    assert t["head"].self_s >= 0.01
    assert t["enc"].self_s < t["enc.slow"].self_s  # the sleep is the child's, not enc's
    assert t[""].self_s < 0.01


def test_the_table_lists_modules_by_total_time_with_self_and_total_columns() -> None:
    net = model()
    with profile(net) as prof:
        net(np.ones(4))
    lines = str(prof).splitlines()
    columns = ["module", "type", "calls", "total ms", "self ms", "mean ms", "% total"]
    assert re.split(r"\s{2,}", lines[0].strip()) == columns
    names = [line.split()[0] for line in lines[1:]]
    assert names == [t.name or "(root)" for t in prof.rows()]
    totals = [t.total_s for t in prof.rows()]
    assert totals == sorted(totals, reverse=True)
    assert names[0] == "(root)"
    assert lines[1].rstrip().endswith("100.0%")
    assert "errors" not in lines[0]
    assert len(prof.table(limit=2).splitlines()) == 3


def test_the_table_says_when_nothing_ran_yet() -> None:
    prof = profile(model())
    assert "no profiled module has been called yet" in str(prof)
    prof.remove()


def test_removing_the_one_handle_removes_every_hook_and_keeps_the_numbers() -> None:
    net = model()
    prof = profile(net)
    assert isinstance(prof, Profile)
    net(np.ones(4))
    prof.remove()
    assert all(not m._forward_pre_hooks and not m._forward_hooks for _, m in net.named_modules())
    net(np.ones(4))
    assert prof.timings[""].calls == 1


def test_a_call_that_raises_is_timed_and_counted_as_an_error() -> None:
    net = Seq(ok=Affine(), bad=Raises())
    with profile(net) as prof:
        with pytest.raises(ValueError, match="forward failed on purpose"):
            net(1.0)
        net.ok(1.0)
    assert (prof.timings["bad"].calls, prof.timings["bad"].errors) == (1, 1)
    assert (prof.timings[""].calls, prof.timings[""].errors) == (1, 1)
    assert (prof.timings["ok"].calls, prof.timings["ok"].errors) == (2, 0)
    assert "errors" in str(prof).splitlines()[0]


def test_a_pre_hook_raising_before_the_timer_starts_leaves_the_parent_timing_intact() -> None:
    net = Seq(child=Affine())
    prof = profile(net)

    def refuse(_m: object, _args: object) -> None:
        raise RuntimeError("refused")

    net.child.register_forward_pre_hook(refuse, prepend=True)  # runs before profile's timer
    with pytest.raises(RuntimeError, match="refused"):
        net(1.0)
    assert prof.timings["child"].calls == 0
    assert prof.timings[""].calls == 1
    prof.remove()


def test_reset_zeroes_the_numbers_and_keeps_measuring() -> None:
    net = model()
    with profile(net) as prof:
        net(np.ones(4))
        prof.reset()
        assert prof.total_s == 0.0
        assert all(t.calls == 0 for t in prof.timings.values())
        net(np.ones(4))
    assert prof.timings[""].calls == 1


def test_threads_profile_their_own_call_stacks_into_shared_totals() -> None:
    net = Seq(a=Sleep(0.005), b=Affine())
    with profile(net) as prof:
        threads = [threading.Thread(target=net, args=(1.0,)) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert prof.timings[""].calls == 4
    assert prof.timings["a"].calls == 4
    assert prof.timings[""].children_s == pytest.approx(prof.timings["a"].total_s + prof.timings["b"].total_s)


def test_a_profiled_model_can_be_deep_copied_and_the_copy_reports_to_the_same_profile() -> None:
    net = model()
    prof = profile(net)
    twin = copy.deepcopy(net)
    twin(np.ones(4))
    assert prof.timings[""].calls == 1
    prof.remove()
    assert all(not m._forward_hooks for _, m in net.named_modules())


def test_profile_rejects_an_object_that_is_not_a_module_tree() -> None:
    with pytest.raises(TypeError, match=r"needs a module tree with named_modules\(\), got int"):
        profile(3)  # type: ignore[arg-type]


def test_profile_rejects_a_tree_whose_modules_cannot_take_hooks_and_installs_nothing() -> None:
    class NoHooks:
        pass

    class Tree(FakeModule):
        def named_modules(self, prefix: str = "") -> Iterator[tuple[str, Any]]:
            yield "", self
            yield "plain", NoHooks()

    tree = Tree()
    with pytest.raises(TypeError, match=r"module 'plain' \(NoHooks\) has no register_forward_pre_hook"):
        profile(tree)
    assert not tree._forward_hooks
