"""EngineOptions.plan_for: the input shapes an engine plans for (its kernels prepared,
compiled loops made ready) when it loads, not in the first run of those shapes."""

from __future__ import annotations

import numpy as np
import pytest

from graphexec import Engine, EngineOptions
from graphexec.errors import OptionError
from tests.paths import REPO

MODELS = REPO / "examples" / "models"


def test_plan_for_takes_shapes_or_sets_of_shapes():
    assert EngineOptions(plan_for=[(1, 3, 64, 64)]).plan_for == (((1, 3, 64, 64),),)
    assert EngineOptions(plan_for=[[(1, 3, 8, 8), (1, 10)]]).plan_for == (((1, 3, 8, 8), (1, 10)),)
    for bad in ((1, 3, 64, 64), [(1, 0, 4)], ["1,3,4,4"], [(1.5, 2)], [()]):
        with pytest.raises(OptionError, match="plan_for"):
            EngineOptions(plan_for=bad)


def test_an_engine_plans_for_those_shapes_when_it_loads():
    plain = Engine.load(MODELS / "inception_mini.pnnx.param", threads=1)
    engine = Engine.load(MODELS / "inception_mini.pnnx.param", threads=1, plan_for=[(1, 3, 48, 48)])
    assert len(plain.planner._plans) == 1 and len(engine.planner._plans) == 2  # the exported shapes', and this one
    planned = engine.plan((1, 3, 48, 48))
    engine.forward(np.random.default_rng(0).standard_normal((1, 3, 48, 48)).astype(np.float32))
    assert engine.plan((1, 3, 48, 48)) is planned and len(engine.planner._plans) == 2


def test_a_shape_the_model_cannot_take_fails_the_load():
    with pytest.raises(Exception, match="cannot take"):
        Engine.load(MODELS / "inception_mini.pnnx.param", plan_for=[(1, 3, 2, 2)])
