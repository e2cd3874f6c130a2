"""A plan is frozen when built: each node's device, kernel and queue, the placement, the
operands rewrites removed and the regions are fields fixed at construction."""

from __future__ import annotations

import pytest

from graphexec import Engine
from graphexec.devices.base import Kernel
from graphexec.plan import Analysis, Plan
from tests.paths import REPO

MODEL = REPO / "examples" / "models" / "inception_mini.pnnx.param"


def test_every_node_of_a_plan_has_its_device_kernel_and_queue():
    plan = Engine.load(MODEL, threads=1).plan()
    assert isinstance(plan.analysis, Analysis)
    for node in plan.nodes:
        assert node.device == "cpu" and isinstance(node.kernel, Kernel) and node.queue == 0
        assert node.kernel.layer is node.step.layer
    assert plan.placement is not None and {row.device for row in plan.placement.rows} == {"cpu"}
    assert plan.fused_away == frozenset().union(*plan.removed.values())


def test_a_plan_refuses_changes():
    plan = Engine.load(MODEL, threads=1).plan()
    for name in ("fused_away", "placement", "nodes", "regions", "anything"):
        with pytest.raises(AttributeError, match="frozen"):
            setattr(plan, name, None)


def test_a_plan_needs_a_kernel_per_node():
    plan = Engine.load(MODEL, threads=1).plan()
    with pytest.raises(ValueError, match="kernels for"):
        Plan(plan.analysis, [node.kernel for node in plan.nodes][:-1])


def test_the_load_plans_once_per_shape_and_reuses_it():
    engine = Engine.load(MODEL, threads=1)
    assert engine.plan() is engine.plan()
    assert engine.plan((2, 3, 64, 64)) is engine.plan((2, 3, 64, 64))
    assert engine.plan((2, 3, 64, 64)) is not engine.plan()
