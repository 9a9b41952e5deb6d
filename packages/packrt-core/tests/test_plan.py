"""The serving plan's rules (packrt_core.nn.plan), on a small model with a plan of its own: a call takes
the plan only while nobody could tell it from the module-by-module road, and rebuilds it after any
change to the weights, the residencies or the tree."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import packrt_core as prt
from packrt_base.plan import PlanKernels
from packrt_core import dispatch, nn
from packrt_core.nn.plan import PlanUnavailableError, owned_copy, serve
from packrt_kernels_cpu import CpuBackend
from packrt_kernels_cpu.tolerance import assert_same_model_output


class Block(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.a = nn.Linear(width, width)
        self.b = nn.Linear(width, width)
        self.norm = nn.LayerNorm(width)

    def forward(self, x: prt.Tensor) -> prt.Tensor:
        out: prt.Tensor = self.norm(x + self.b(self.a(x)))
        return out


class TwoBlocks(nn.Module):
    """A model whose top-level call asks for a plan; ``refuse`` makes its builder refuse it."""

    serves_plans = True

    def __init__(self, width: int = 8) -> None:
        super().__init__()
        self.first = Block(width)
        self.second = Block(width)
        self.refuse: str | None = None
        self.during_build: Any = None

    def forward(self, x: prt.Tensor) -> prt.Tensor:
        plan = serve(self, self.first.a.weight.device, self._build)
        if plan is not None:
            out: prt.Tensor = plan.run(x)
            return out
        return self.second(self.first(x))  # type: ignore[no-any-return]

    def _build(self, model: Any, kernels: PlanKernels) -> BlocksPlan:
        if self.refuse is not None:
            raise PlanUnavailableError(self.refuse)
        plan = BlocksPlan(model, kernels)
        if self.during_build is not None:
            self.during_build()
        return plan


class BlocksPlan:
    """Each block as a plan linear pair and one residual-norm pass, over the layers' packs."""

    def __init__(self, model: TwoBlocks, kernels: PlanKernels) -> None:
        self.kernels = kernels
        self.blocks = [
            (
                kernels.linear([block.a._serving_pack()]),
                kernels.linear([block.b._serving_pack()]),
                owned_copy(block.norm.weight),
                owned_copy(block.norm.bias),
                block.norm.eps,
            )
            for block in (model.first, model.second)
        ]
        self.nbytes = sum(w.nbytes + b.nbytes for _, _, w, b, _ in self.blocks)
        self.fused = ("two blocks: residual add + LayerNorm in one pass",)
        self.calls = 0

    def run(self, x: prt.Tensor) -> prt.Tensor:
        self.calls += 1
        h = x._array().copy()
        for a, b, w, bias, eps in self.blocks:
            out = np.empty_like(h)
            self.kernels.residual_norm(b.forward(a.forward(h)), h, w, bias, eps, out)
            h = out
        return x._wrap(h)


@pytest.fixture
def model() -> TwoBlocks:
    prt.manual_seed(3)
    return TwoBlocks()


def _x(rows: int = 5, width: int = 8) -> prt.Tensor:
    return prt.from_numpy(np.random.default_rng(rows).standard_normal((rows, width)).astype(np.float32))


def _plain(model: nn.Module, x: prt.Tensor) -> np.ndarray:
    with nn.serving_plans(False):
        return np.asarray(model(x).numpy())


def test_a_call_takes_the_plan_and_gives_the_plain_roads_numbers(model: TwoBlocks) -> None:
    x = _x()
    planned = model(x).numpy()
    report = nn.plan_report(model)
    assert (report.road, report.builds, report.planned_calls) == ("plan", 1, 1)
    assert report.fused == ("two blocks: residual add + LayerNorm in one pass",) and report.nbytes == 4 * 4 * 8
    assert_same_model_output(planned, _plain(model, x))
    model(x)
    assert nn.plan_report(model).builds == 1  # nothing changed: the plan is kept


def test_a_hook_on_an_inner_module_sees_every_call(model: TwoBlocks) -> None:
    seen: list[str] = []
    handle = model.second.a.register_forward_hook(lambda m, args, out: seen.append("second.a"))
    model(_x())
    report = nn.plan_report(model)
    assert seen == ["second.a"] and report.road == "plain"
    assert "second.a" in report.reason and "hook" in report.reason
    handle.remove()
    model(_x())
    assert seen == ["second.a"] and nn.plan_report(model).road == "plan"


def test_a_pre_hook_anywhere_inside_turns_the_plan_off_and_its_removal_back_on(model: TwoBlocks) -> None:
    model(_x())
    handle = model.first.norm.register_forward_pre_hook(lambda m, args: None)
    model(_x())
    assert nn.plan_report(model).road == "plain"
    handle.remove()
    model(_x())
    report = nn.plan_report(model)
    assert report.road == "plan" and report.builds == 1  # the plan waited; nothing had changed


def test_a_hook_on_the_model_itself_keeps_the_plan(model: TwoBlocks) -> None:
    outputs: list[Any] = []
    model.register_forward_hook(lambda m, args, out: outputs.append(out))
    y = model(_x())
    assert nn.plan_report(model).road == "plan" and outputs == [y]


def test_an_in_place_weight_edit_rebuilds_the_plan_over_the_new_weight(model: TwoBlocks) -> None:
    x = _x()
    before = model(x).numpy()
    model.first.a.weight.mul_(2.0)
    after = model(x).numpy()
    report = nn.plan_report(model)
    assert report.road == "plan" and report.builds == 2
    assert not np.allclose(before, after)
    assert_same_model_output(after, _plain(model, x))


def _check_rebuilt_after(model: TwoBlocks, edit: Callable[[TwoBlocks], object]) -> None:
    """Once a first call has built the plan, ``edit`` makes the next call build it again, and that call
    gives the module-by-module road's numbers."""
    x = _x()
    model(x)
    edit(model)
    got = model(x).numpy()
    assert nn.plan_report(model).builds == 2
    assert_same_model_output(got, _plain(model, x))


@pytest.mark.parametrize("assign", [False, True])
def test_a_load_rebuilds_the_plan(model: TwoBlocks, assign: bool) -> None:
    def load_halved_weights(m: TwoBlocks) -> None:
        state = {k: (v * 0.5 if k.endswith("weight") else v) for k, v in m.state_dict().items()}
        m.load_state_dict({k: v.clone() for k, v in state.items()}, assign=assign)

    _check_rebuilt_after(model, load_halved_weights)


def test_a_norm_weight_edit_rebuilds_the_plan(model: TwoBlocks) -> None:
    # a plain parameter the plan copied: its version tells
    _check_rebuilt_after(model, lambda m: m.second.norm.weight.fill_(3.0))


def test_a_residency_change_rebuilds_the_plan(model: TwoBlocks) -> None:
    _check_rebuilt_after(model, lambda m: m.first.b.set_weight_residency("borrowed"))


def test_a_replaced_submodule_rebuilds_the_plan(model: TwoBlocks) -> None:
    def replace(m: TwoBlocks) -> None:
        m.second.b = nn.Linear(8, 8)

    _check_rebuilt_after(model, replace)
    model.set_submodule("first.a", nn.Linear(8, 8))
    model(_x())
    assert nn.plan_report(model).builds == 3


def test_a_cast_rebuilds_the_plan(model: TwoBlocks) -> None:
    x = _x()
    model(x)
    model.to(prt.float64).to(prt.float32)
    model(x)
    assert nn.plan_report(model).builds == 2


def test_plans_turned_off_serve_the_plain_road(model: TwoBlocks) -> None:
    with nn.serving_plans(False):
        model(_x())
        report = nn.plan_report(model)
        assert report.road == "plain" and "turned off" in report.reason
    model(_x())
    assert nn.plan_report(model).road == "plan"
    before = nn.set_serving_plans(False)
    try:
        assert before is True
        model(_x())
        assert nn.plan_report(model).road == "plain"
    finally:
        nn.set_serving_plans(True)
    with pytest.raises(TypeError, match="set_serving_plans takes a bool, got str"):
        nn.set_serving_plans("no")  # type: ignore[arg-type]


class NoPlanBackend(CpuBackend):
    """The CPU backend but for plan kernels, as on a device that has none."""

    def __init__(self) -> None:
        super().__init__()
        from dataclasses import replace

        self.kernels = replace(self.kernels, plan_kernels=lambda: None)


def test_a_device_without_plan_kernels_serves_the_plain_road(model: TwoBlocks) -> None:
    x = _x()
    with dispatch.use_backend("cpu", NoPlanBackend()):
        got = model(x).numpy()
        report = nn.plan_report(model)
    assert report.road == "plain" and "no serving-plan kernels" in report.reason
    assert_same_model_output(got, _plain(model, x))
    model(x)
    assert nn.plan_report(model).road == "plan"  # the usual backend back: a plan built for it


def test_a_model_the_builder_refuses_serves_the_plain_road_and_says_why(model: TwoBlocks) -> None:
    model.refuse = "first.a is a custom layer the plan does not know"
    model(_x())
    model(_x())
    report = nn.plan_report(model)
    assert (report.road, report.reason, report.builds) == ("plain", model.refuse, 0)
    model.refuse = None
    model(_x())
    assert nn.plan_report(model).road == "plain"  # refused for this tree: asked again only when it changes
    model.first.a.weight.add_(0.0)
    model(_x())
    assert nn.plan_report(model).road == "plan"


def test_a_write_during_the_build_keeps_that_plan_from_serving(model: TwoBlocks) -> None:
    x = _x()
    model.during_build = lambda: model.second.b.weight.add_(1.0)
    got = model(x).numpy()
    report = nn.plan_report(model)
    assert report.road == "plain" and "changed while the plan was being built" in report.reason
    model.during_build = None
    assert_same_model_output(got, _plain(model, x))
    model(x)
    assert nn.plan_report(model).road == "plan"


def test_a_call_computes_from_the_plan_it_validated_whatever_lands_meanwhile(model: TwoBlocks) -> None:
    x = _x()
    expected = model(x).numpy()
    plan = _plan_of(model)
    first, *rest = plan.blocks[0]
    state = {k: v * 3.0 for k, v in model.state_dict().items()}
    loads: list[int] = []

    class LoadAfter:
        """The plan's first step, then a load that commits before the call's next step."""

        def forward(self, h: Any, out: Any = None) -> Any:
            result = first.forward(h)
            if not loads:
                loads.append(1)
                model.load_state_dict(state)
            return result

    plan.blocks[0] = (LoadAfter(), *rest)
    np.testing.assert_array_equal(model(x).numpy(), expected)  # the whole call on the weights it started with
    assert loads == [1]
    got = model(x).numpy()  # the next call sees the load, all of it
    assert nn.plan_report(model).builds == 2
    assert_same_model_output(got, _plain(model, x))


def _plan_of(model: nn.Module) -> Any:
    from packrt_core.nn import plan as plan_module

    return plan_module._slot(model).plan


def test_threads_share_one_plan_and_each_gets_the_plain_roads_numbers(model: TwoBlocks) -> None:
    inputs = [_x(rows) for rows in range(1, 9)]
    expected = [_plain(model, x) for x in inputs]
    results: dict[int, np.ndarray] = {}

    def work(i: int) -> None:
        for _ in range(20):
            results[i] = model(inputs[i]).numpy()

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(inputs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i, x in enumerate(expected):
        assert_same_model_output(results[i], x)
    assert nn.plan_report(model).builds == 1


def test_plan_report_of_models_without_a_plan_or_not_called_yet(model: TwoBlocks) -> None:
    report = nn.plan_report(model)
    assert (report.road, report.reason) == ("none", "not called yet")
    linear = nn.Linear(2, 2)
    assert nn.plan_report(linear).reason == "Linear has no serving plan"
    model(_x())
    text = str(nn.plan_report(model))
    assert text.startswith("road of the last call: plan") and "plans built: 1" in text
    with pytest.raises(TypeError, match="plan_report takes a packrt Module, got int"):
        nn.plan_report(3)  # type: ignore[arg-type]


def test_a_layer_adopting_a_view_of_its_pack_keeps_its_values_and_frees_its_own_copy() -> None:
    prt.manual_seed(1)
    layer = nn.Linear(4, 3)
    expected = {k: v.numpy().copy() for k, v in layer.state_dict().items()}
    layer.initialize()
    old = layer._serving_pack()
    kernels = dispatch.kernels_for(layer.weight.device).plan_kernels()
    assert kernels is not None
    joined = kernels.linear([old, layer.__class__(4, 3)._serving_pack()])
    assert layer._adopt(old, joined.parts[0]) is True
    assert layer._serving_pack() is joined.parts[0] and layer.is_packed
    for key, value in layer.state_dict().items():
        np.testing.assert_array_equal(value.numpy(), expected[key])
    assert layer._adopt(old, joined.parts[1]) is False  # ``old`` is no longer the resident pack
    layer.weight.add_(1.0)
    assert layer._serving_pack() is not joined.parts[0]  # an edit repacks, as always


def test_a_planned_model_is_freed_when_its_last_reference_goes() -> None:
    import gc
    import weakref

    model = TwoBlocks()
    model(_x())
    assert nn.plan_report(model).road == "plan"
    gone = weakref.ref(model)
    del model
    gc.collect()
    assert gone() is None  # the plan refers to the model's modules but does not keep it alive


def test_a_copy_plans_its_own_weights(model: TwoBlocks) -> None:
    import copy

    x = _x()
    expected = model(x).numpy()
    twin = copy.deepcopy(model)
    assert nn.plan_report(twin).reason == "not called yet"
    assert_same_model_output(twin(x).numpy(), expected)
    report = nn.plan_report(twin)
    assert (report.road, report.builds) == ("plan", 1)
    twin.first.a.weight.mul_(0.0)  # the copy's weights are its own: the original's plan holds
    np.testing.assert_array_equal(model(x).numpy(), expected)


class SelfPlanningBlock(Block):
    """A block that asks for its own plan at the start of its forward (as packrt.models' layers do)."""

    serves_plans = True

    def forward(self, x: prt.Tensor) -> prt.Tensor:
        plan = serve(self, self.a.weight.device, _block_plan)
        if plan is not None:
            out: prt.Tensor = plan.run(x)
            return out
        return super().forward(x)


class _OneBlockPlan:
    fused = ("a, b: two plan linears; residual add + LayerNorm in one pass",)

    def __init__(self, block: SelfPlanningBlock, kernels: PlanKernels) -> None:
        if type(block.norm) is not nn.LayerNorm:
            raise PlanUnavailableError(f"norm is a {type(block.norm).__name__}, where the plan serves a LayerNorm")
        self.kernels = kernels
        self.a, self.b = kernels.linear([block.a._serving_pack()]), kernels.linear([block.b._serving_pack()])
        self.w, self.bias, self.eps = owned_copy(block.norm.weight), owned_copy(block.norm.bias), block.norm.eps
        self.nbytes = self.w.nbytes + self.bias.nbytes

    def run(self, x: prt.Tensor) -> prt.Tensor:
        h = x._array().copy()
        out = np.empty_like(h)
        self.kernels.residual_norm(self.b.forward(self.a.forward(h)), h, self.w, self.bias, self.eps, out)
        return x._wrap(out)


def _block_plan(block: Any, kernels: PlanKernels) -> _OneBlockPlan:
    return _OneBlockPlan(block, kernels)


class PlannedBlocks(nn.Module):
    """One forward: the blocks in a loop; each block plans itself."""

    def __init__(self, width: int = 8, count: int = 3) -> None:
        super().__init__()
        self.blocks = nn.ModuleList([SelfPlanningBlock(width) for _ in range(count)])

    def forward(self, x: prt.Tensor) -> prt.Tensor:
        for block in self.blocks:
            x = block(x)
        return x


def test_a_model_whose_blocks_plan_themselves_is_reported_as_a_whole() -> None:
    prt.manual_seed(5)
    model = PlannedBlocks()
    assert nn.plan_report(model).reason == "not called yet"  # a block of it has a plan builder
    got = model(_x())
    with nn.serving_plans(False):
        assert_same_model_output(got.numpy(), model(_x()).numpy())
    model(_x())
    report = nn.plan_report(model)
    assert (report.road, report.builds, report.planned_calls, report.plain_calls) == ("plan", 3, 6, 3)
    assert report.reason == "every block's last call took its plan (3 blocks)"
    assert report.fused == (f"blocks.0 .. blocks.2 (3 blocks): {_OneBlockPlan.fused[0]}",)
    assert report.nbytes == sum(nn.plan_report(block).nbytes for block in model.blocks) > 0


def test_a_hook_inside_one_block_sends_that_block_alone_down_the_plain_road() -> None:
    prt.manual_seed(6)
    model = PlannedBlocks()
    model(_x())
    seen: list[tuple[int, ...]] = []
    handle = model.blocks[1].b.register_forward_hook(lambda m, args, out: seen.append(tuple(out.shape)))
    model(_x())
    assert seen == [(5, 8)]
    report = nn.plan_report(model)
    assert report.road == "plain"
    assert report.reason == (
        "a forward hook or pre-hook is registered on blocks.1.b: every inner call runs as a module"
    )
    assert [nn.plan_report(block).road for block in model.blocks] == ["plan", "plain", "plan"]
    handle.remove()
    model(_x())
    assert nn.plan_report(model).road == "plan"


def test_a_block_its_builder_refuses_is_named_by_its_path_in_the_model() -> None:
    prt.manual_seed(7)
    model = PlannedBlocks()
    model.blocks[2].norm = nn.RMSNorm(8)
    model(_x())
    report = nn.plan_report(model)
    assert (report.road, report.reason) == ("plain", "blocks.2.norm is a RMSNorm, where the plan serves a LayerNorm")
