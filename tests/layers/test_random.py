"""Random draws: what each holds (the distribution, the range, the dtype), that every run
draws anew, that a model loaded twice draws the same numbers run after run (the
sequential and concurrent executors alike), and that nothing computes a draw ahead of a
run (a size fixed in the graph is not folded into one constant draw)."""

from __future__ import annotations

import numpy as np
import pytest
from graphexec.layers.registry import lookup

import graphexec  # noqa: F401  (import order: graphexec before layers)
from graphexec import Engine
from graphexec.errors import LayerConfigError
from graphexec.ir import Graph, Operand, Operator
from tests.golden import OPS, load_io

RANDOM = OPS / "random"
SIZE = (400, 500)


def layer(op_type: str, constants: dict[int, object], inputs: int, name: str = "draw", **params):
    """A layer whose inputs at the positions of ``constants`` are pnnx constants."""
    operands = []
    for i in range(inputs):
        operand = Operand(f"in{i}")
        if i in constants:
            operand.producer = Operator("pnnx.Expression", f"c{i}", outputs=[operand],
                                        params={"expr": constants[i]})
        operands.append(operand)
    names = [""] * inputs
    if op_type.startswith("torch."):
        names = ["size" if op_type == "torch.randn" else "input"]
    op = Operator(op_type, name, inputs=operands, outputs=[Operand("out")], params=params, input_names=names)
    return lookup(op_type)(op)


def test_normal_draws_have_the_asked_mean_and_spread():
    for draw in (layer("torch.randn", {}, 1).forward([list(SIZE)])[0],
                 layer("torch.randn_like", {}, 1).forward([np.zeros(SIZE, np.float32)])[0]):
        assert draw.shape == SIZE and draw.dtype == np.float32
        assert abs(draw.mean()) < 0.01 and abs(draw.std() - 1) < 0.01
    normal = layer("torch.normal", {}, 1, mean=3.0, std=0.5).forward([np.zeros(SIZE, np.float64)])[0]
    assert normal.dtype == np.float64
    assert abs(normal.mean() - 3) < 0.01 and abs(normal.std() - 0.5) < 0.01
    wide = layer("torch.randn", {}, 1, dtype="torch.double").forward([[3, 4]])[0]
    assert wide.dtype == np.float64 and wide.shape == (3, 4)


def test_uniform_draws_lie_in_zero_to_one_evenly():
    rand, rand_like = layer("aten::rand", {1: None}, 5), layer("aten::rand_like", {1: None}, 6)
    for draw in (rand.forward([list(SIZE), None, None, None, False])[0],
                 rand_like.forward([np.zeros(SIZE, np.float32), *[None] * 5])[0]):
        assert draw.dtype == np.float32 and draw.min() >= 0 and draw.max() < 1
        counts = np.histogram(draw, bins=10, range=(0, 1))[0] / draw.size
        assert np.all(np.abs(counts - 0.1) < 0.005)


def test_integer_draws_cover_low_to_high_exclusive():
    randint = layer("aten::randint", {3: None}, 7)
    draw = randint.forward([-2, 3, list(SIZE), None, None, None, False])[0]
    assert draw.dtype == np.int64
    assert set(np.unique(draw)) == {-2, -1, 0, 1, 2}
    like = layer("aten::randint_like", {2: None}, 7).forward([np.zeros(SIZE, np.float32), 4] + [None] * 5)[0]
    assert like.dtype == np.float32 and set(np.unique(like)) == {0, 1, 2, 3}
    with pytest.raises(graphexec.layers.ShapeMismatch, match=r"low \(3\) must be below high \(3\)"):
        randint.forward([3, 3, [2], None, None, None, False])


def test_bernoulli_draws_ones_as_often_as_each_probability_says():
    p = np.where(np.arange(SIZE[1]) < SIZE[1] // 2, 0.2, 0.9).astype(np.float32) * np.ones(SIZE, np.float32)
    draw = layer("aten::bernoulli", {1: None}, 2).forward([p, None])[0]
    assert draw.dtype == np.float32 and set(np.unique(draw)) == {0, 1}
    half = SIZE[1] // 2
    assert abs(draw[:, :half].mean() - 0.2) < 0.01 and abs(draw[:, half:].mean() - 0.9) < 0.01
    with pytest.raises(graphexec.layers.ShapeMismatch, match=r"probabilities must lie in \[0, 1\]"):
        layer("aten::bernoulli", {1: None}, 2).forward([np.float32([0.5, 1.5]), None])


def test_the_aten_normal_takes_numbers_and_a_size_or_tensors():
    normal = layer("aten::normal", {4: None}, 8)
    sized = normal.forward([3.0, 0.5, list(SIZE), None, None, None, None, False])[0]
    assert sized.dtype == np.float32 and sized.shape == SIZE
    assert abs(sized.mean() - 3) < 0.01 and abs(sized.std() - 0.5) < 0.01
    mean = np.where(np.arange(SIZE[1]) % 2, 5.0, -5.0).astype(np.float32) * np.ones((SIZE[0], 1), np.float32)
    std = np.where(np.arange(SIZE[1]) % 2, 0.1, 2.0).astype(np.float32)
    draw = layer("aten::normal", {}, 3).forward([mean, std, None])[0]
    assert draw.dtype == np.float32 and draw.shape == SIZE
    for column, (m, sd) in ((0, (-5, 2.0)), (1, (5, 0.1))):
        values = draw[:, column::2]
        assert abs(values.mean() - m) < 3 * sd / np.sqrt(values.size) + 1e-3
        assert abs(values.std() - sd) < 0.02 * sd
    with pytest.raises(graphexec.layers.ShapeMismatch, match="std must not be negative"):
        layer("aten::normal", {}, 3).forward([mean, -std, None])


def test_fills_take_the_inputs_shape_and_dtype_and_draw_their_distribution():
    x = np.zeros(SIZE, np.float64)
    uniform = layer("aten::uniform", {}, 4).forward([x, -2.0, 3.0, None])[0]
    assert uniform.dtype == np.float64 and uniform.min() >= -2 and uniform.max() < 3
    assert abs(uniform.mean() - 0.5) < 0.02
    exponential = layer("aten::exponential", {}, 3).forward([x, 4.0, None])[0]
    assert exponential.min() >= 0 and abs(exponential.mean() - 0.25) < 0.005
    rates = np.full(SIZE, 3.0, np.float32)
    counts = layer("aten::poisson", {}, 2).forward([rates, None])[0]
    assert counts.dtype == np.float32 and np.all(counts == np.round(counts)) and abs(counts.mean() - 3) < 0.02
    with pytest.raises(graphexec.layers.ShapeMismatch, match=r"from \(3.0\) must not be above to \(1.0\)"):
        layer("aten::uniform", {}, 4).forward([x, 3.0, 1.0, None])
    with pytest.raises(graphexec.layers.ShapeMismatch, match="rate must be positive"):
        layer("aten::exponential", {}, 3).forward([x, 0.0, None])


def test_a_permutation_holds_each_index_once():
    draw = layer("aten::randperm", {1: None}, 5).forward([1000, None, None, None, False])[0]
    assert draw.dtype == np.int64 and sorted(draw) == list(range(1000))
    assert not np.array_equal(draw, np.arange(1000))


def test_multinomial_draws_by_weight_with_and_without_replacement():
    weights = np.tile(np.float32([1, 0, 3, 4]), (2000, 1))
    many = layer("aten::multinomial", {1: 5, 2: True}, 4).forward([weights, 5, True, None])[0]
    assert many.shape == (2000, 5) and many.dtype == np.int64 and 1 not in many
    frequencies = np.bincount(many.ravel(), minlength=4) / many.size
    np.testing.assert_allclose(frequencies, [0.125, 0, 0.375, 0.5], atol=0.01)
    distinct = layer("aten::multinomial", {1: 3, 2: False}, 4).forward([weights, 3, False, None])[0]
    assert all(sorted(row) == [0, 2, 3] for row in distinct)
    with pytest.raises(graphexec.layers.ShapeMismatch, match="cannot draw 4 without replacement from 3"):
        layer("aten::multinomial", {1: 4, 2: False}, 4).forward([weights, 4, False, None])
    with pytest.raises(graphexec.layers.ShapeMismatch, match="not all zero"):
        layer("aten::multinomial", {1: 1, 2: True}, 4).forward([np.zeros(4, np.float32), 1, True, None])
    with pytest.raises(LayerConfigError, match="num_samples must be a constant count"):
        layer("aten::multinomial", {2: True}, 4)


def test_each_operator_draws_its_own_numbers_the_same_after_a_new_load():
    a, b = layer("torch.randn", {}, 1, name="a"), layer("torch.randn", {}, 1, name="b")
    first = a.forward([[5]])[0]
    assert not np.array_equal(first, b.forward([[5]])[0])  # seeded by name
    assert not np.array_equal(first, a.forward([[5]])[0])  # a new draw every run
    again = layer("torch.randn", {}, 1, name="a")
    np.testing.assert_array_equal(again.forward([[5]])[0], first)


def test_dtypes_that_are_not_constants_or_not_floats_are_refused_naming_the_operator():
    with pytest.raises(LayerConfigError, match=r"aten::rand.*dtype \(input 1\) must be a constant"):
        layer("aten::rand", {}, 5)
    with pytest.raises(LayerConfigError, match=r"aten::randint.*takes 6 or 7 inputs \(\(low,\) high, size"):
        layer("aten::randint", {}, 5)
    with pytest.raises(LayerConfigError, match=r"torch.normal.*std=-1.0 must not be negative"):
        layer("torch.normal", {}, 1, mean=0.0, std=-1.0)
    with pytest.raises(graphexec.layers.ShapeMismatch, match="draws floating point numbers, asked for int64"):
        layer("torch.randn_like", {}, 1).forward([np.zeros(3, np.int64)])


def test_every_run_draws_anew_and_engines_loaded_alike_draw_alike():
    """The sequential engine and the concurrent one, each loaded from the fixture, give the
    same noise run for run; a run's noise is not the run before's."""
    folder = RANDOM / "randn_noise"
    (x,), _ = load_io(folder)
    sequential = Engine.load(folder / "model.pnnx.param", threads=1)
    concurrent = Engine.load(folder / "model.pnnx.param", threads=2)
    runs = []
    for _ in range(3):
        one, two = sequential.forward(x), concurrent.forward(x)
        for a, b in zip(one, two, strict=True):
            np.testing.assert_array_equal(a, b)
        runs.append(one[0] - x)
    assert not np.array_equal(runs[0], runs[1]) and not np.array_equal(runs[1], runs[2])


@pytest.mark.parametrize("size", [[2, 3], [1]])
def test_a_draw_of_a_size_fixed_in_the_graph_is_not_folded_into_a_constant(size):
    graph = Graph()
    graph.add_operator("pnnx.Expression", "size", [], ["size"], params={"expr": size})
    graph.add_operator("torch.randn", "noise", ["size"], ["noise"], params={"dtype": None})
    graph.operators[-1].input_names = ["size"]
    graph.add_operator("pnnx.Expression", "shift", ["noise"], ["shifted"], params={"expr": "add(@0,1.0)"})
    graph.add_operator("pnnx.Output", "out", ["shifted"], [])
    engine = Engine(graph)
    first, second = engine.forward(), engine.forward()
    assert first.shape == tuple(size) and not np.array_equal(first, second)
