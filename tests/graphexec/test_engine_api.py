"""graphexec.Engine's API, on tiny graphs of test-only layers written with graphexec.pnnx.

The layers are registered under made-up ``test.api.*`` types for the module and removed
again afterwards; every graph is built with Graph.add_operator and saved to tmp_path, so
these tests exercise the engine, not any real operator.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest
from graphexec.layers import registry
from graphexec.layers.base import Layer, Params, ShapeMismatch
from graphexec.layers.specs import SequenceSpec

from graphexec import Engine, pnnx
from graphexec.errors import (
    ExecutionError,
    ExportMismatchWarning,
    GraphexecError,
    InputError,
    InputShapeError,
    ModelFormatError,
    UnsupportedOperatorError,
    WeightError,
)
from graphexec.ir import INPUT_TYPE, OUTPUT_TYPE, Attribute, Graph
from tests.paths import REPO

TUPLE = "prim::TupleConstruct"


class AddOne(Layer):
    def infer_shapes(self, shapes):
        return [shapes[0]]

    def forward(self, inputs):
        return [inputs[0] + np.float32(1)]


class Add(Layer):
    """Elementwise sum of its inputs (the shapes must agree)."""

    def infer_shapes(self, shapes):
        if any(s != shapes[0] for s in shapes):
            raise ShapeMismatch(f"shapes differ: {shapes}")
        return [shapes[0]]

    def forward(self, inputs):
        return [sum(inputs[1:], inputs[0])]


class Scale(Layer):
    """x * @w, where @w is a weight of shape (last dim,): refuses any other last dim."""

    def build(self, params: Params) -> None:
        self.w = params.attr("w")

    def infer_shapes(self, shapes):
        if not shapes[0] or shapes[0][-1] != self.w.shape[0]:
            raise ShapeMismatch(f"the last dim must be {self.w.shape[0]}, got {shapes[0]}")
        return [shapes[0]]

    def forward(self, inputs):
        return [inputs[0] * self.w]


class Boom(Layer):
    """Fails at run time (but not while shapes are inferred)."""

    def infer_shapes(self, shapes):
        return [shapes[0]]

    def forward(self, inputs):
        raise ZeroDivisionError("boom went the layer")


class PackTuple(Layer):
    """Only registered if no real prim::TupleConstruct layer exists yet."""

    def infer(self, specs):
        return [SequenceSpec(tuple(specs))]

    def forward(self, inputs):
        return [tuple(inputs)]


TEST_LAYERS = {
    "test.api.AddOne": AddOne,
    "test.api.Add": Add,
    "test.api.Scale": Scale,
    "test.api.Boom": Boom,
}


@pytest.fixture(autouse=True, scope="module")
def test_layers():
    added = []
    for op_type, cls in TEST_LAYERS.items():
        registry.register(op_type)(cls)
        added.append(op_type)
    if registry.lookup(TUPLE) is None:
        registry.register(TUPLE)(PackTuple)
        added.append(TUPLE)
    yield
    for op_type in added:
        registry.unregister(op_type)


@pytest.fixture(params=[{"threads": 1}, {"threads": 2}], ids=["sequential", "concurrent"])
def options(request):
    """Engine.load options: the sequential reference executor and the concurrent one."""
    return request.param


def save(graph: Graph, folder: Path) -> Path:
    graph.validate()
    param = folder / "model.pnnx.param"
    pnnx.save(graph, param)
    return param


def add_input(g: Graph, index: int, name: str, shape, dtype: str | None = "f32") -> None:
    g.add_operator(INPUT_TYPE, f"pnnx_input_{index}", [], [name])
    g.operands[name].shape, g.operands[name].dtype = shape, dtype


def one_in_one_out(folder: Path, shape=(2, 3)) -> Path:
    """x -> AddOne -> y."""
    g = Graph()
    add_input(g, 0, "x", shape)
    g.add_operator("test.api.AddOne", "plus", ["x"], ["y"])
    g.add_operator(OUTPUT_TYPE, "pnnx_output_0", ["y"], [])
    return save(g, folder)


def two_in_two_out(folder: Path) -> Path:
    """(a, b) -> s = a + b, t = AddOne(s) -> outputs t, s through a TupleConstruct."""
    g = Graph()
    add_input(g, 0, "a", (2, 4))
    add_input(g, 1, "b", (2, 4))
    g.add_operator("test.api.Add", "sum", ["a", "b"], ["s"])
    g.add_operator("test.api.AddOne", "plus", ["s"], ["t"])
    g.add_operator(TUPLE, "pack", ["t", "s"], ["packed"])
    g.add_operator(OUTPUT_TYPE, "pnnx_output_0", ["packed"], [])
    return save(g, folder)


def with_weight(folder: Path) -> Path:
    """x (1,4) -> Scale(@w) -> y."""
    g = Graph()
    add_input(g, 0, "x", (1, 4))
    w = Attribute.from_array(np.array([1, 2, 3, 4], np.float32))
    g.add_operator("test.api.Scale", "scale", ["x"], ["y"], attrs={"w": w})
    g.add_operator(OUTPUT_TYPE, "pnnx_output_0", ["y"], [])
    return save(g, folder)


# --------------------------------------------------------------------------------------
# loading and describing
# --------------------------------------------------------------------------------------
def test_load_takes_the_sibling_bin_by_default(tmp_path, options):
    param = with_weight(tmp_path)
    engine = Engine.load(param, **options)
    np.testing.assert_array_equal(engine.forward(np.ones((1, 4), np.float32)), [[1, 2, 3, 4]])
    assert Engine.load(str(param), str(tmp_path / "model.pnnx.bin"), **options).forward(
        np.full((1, 4), 2, np.float32)
    ).tolist() == [[2, 4, 6, 8]]


def test_an_input_no_operator_reads_is_named_at_load():
    """A real export whose first input only gave its shape (folded into the graph): its
    values cannot change the outputs, which the load says, naming it; a model reading every
    input says nothing."""
    from loguru import logger

    from tests.golden import OPS

    lines: list[str] = []
    logger.enable("graphexec")
    sink = logger.add(lambda m: lines.append(str(m)), level="WARNING", format="{message}")
    try:
        Engine.load(OPS / "aten_more" / "nearest_exact_to_a_size_of_another" / "model.pnnx.param")
        Engine.load(OPS / "attention" / "mha_encoder_causal_mask" / "model.pnnx.param")
    finally:
        logger.remove(sink)
        logger.disable("graphexec")
    assert [line for line in lines if "read by no operator" in line] == [
        "inputs ['in0'] are read by no operator: the outputs do not depend on their values (right if the model "
        "reads only their shapes; else the export lost what reads them)\n"]


def test_a_model_reading_no_input_at_all_is_warned_of_at_load(tmp_path):
    """Every output a constant, as pnnx leaves a model it folded whole (around a function
    compiled with torch.jit.script): a warning at the user's line, not a log line."""
    g = Graph()
    add_input(g, 0, "image", (1, 3))
    boxes = Attribute.from_array(np.ones((2, 6), np.float32))
    g.add_operator("pnnx.Attribute", "folded", [], ["boxes"], attrs={"data": boxes})
    g.operands["boxes"].shape, g.operands["boxes"].dtype = (2, 6), "f32"
    g.add_operator(OUTPUT_TYPE, "pnnx_output_0", ["boxes"], [])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        engine = Engine.load(save(g, tmp_path))
    assert [(w.category, w.filename) for w in caught] == [(ExportMismatchWarning, __file__)]
    assert "no operator reads the inputs ['in0']: every output is the same" in str(caught[0].message)
    np.testing.assert_array_equal(engine.forward(np.zeros((1, 3), np.float32)), np.ones((2, 6)))


def test_a_shape_unlike_the_exported_annotation_is_warned_of_at_load():
    """pnnx can write a graph that computes other shapes than it annotated (an index folded
    into a wrong constant, whose result still broadcasts): the load warns, at the user's
    line, naming the first operand where inference parts from the annotations. Here a real
    export, one annotation changed in memory; the export as written says nothing."""
    from tests.golden import OPS

    folder = OPS / "activation" / "relu"
    graph = pnnx.load(folder / "model.pnnx.param", folder / "model.pnnx.bin")
    graph.operands["3"].shape = (2, 3, 1, 5)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        Engine.load(folder / "model.pnnx.param")
        Engine(graph)
    assert [(w.category, str(w.message), w.filename) for w in caught] == [(
        ExportMismatchWarning,
        "the shapes inferred at the exported input shapes part from pnnx's annotations at operand 3, output of "
        "F.relu_0 (F.relu): annotated (2,3,1,5), inferred (2,3,4,5): the graph pnnx wrote computes something "
        "other than what PyTorch traced there, so the outputs may differ from PyTorch's", __file__)]


def test_a_dynamic_export_is_held_against_its_annotations_ranks_at_the_first_shapes_given():
    """A dynamic export (sizes ``?``) has no exported shapes to plan at load: the first
    forward's plan is held against the annotations' ranks, and warns once, at the user's
    line, where one parts (here a real export, one annotation given a dim more in memory);
    the export as written says nothing."""
    from tests.golden import OPS

    folder = OPS / "creation" / "arange_of_a_size"
    x = np.zeros((3, 7), np.float32)
    graph = pnnx.load(folder / "model.pnnx.param", folder / "model.pnnx.bin")
    graph.operands["2"].shape = (None, 1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        Engine.load(folder / "model.pnnx.param").forward(x)
        engine = Engine(graph)
        engine.forward(x)
        engine.forward(np.zeros((2, 5), np.float32))
    assert [(w.category, str(w.message), w.filename) for w in caught] == [(
        ExportMismatchWarning,
        "the shapes inferred at the given input shapes part from pnnx's annotations at operand 2, output of "
        "torch.arange_1 (torch.arange): annotated (?,1), inferred (7): the graph pnnx wrote computes "
        "something other than what PyTorch traced there, so the outputs may differ from PyTorch's", __file__)]


def test_a_shape_changed_in_place_is_no_mismatch():
    """``x.permute(0, 2, 1).unsqueeze_(1)``: pnnx annotates the permute's output with the shape
    the in-place unsqueeze leaves it, which is what PyTorch traced; nothing to warn of."""
    from tests.golden import OPS

    folder = OPS / "shape" / "unsqueeze_in_place"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        Engine.load(folder / "model.pnnx.param")
    assert not [w for w in caught if w.category is ExportMismatchWarning]


def test_names_and_shapes(tmp_path):
    g = Graph()
    add_input(g, 0, "img", (1, 3, None, "w"))
    add_input(g, 1, "mask", None, None)
    g.add_operator("test.api.AddOne", "plus", ["img"], ["y"])
    g.operands["y"].shape, g.operands["y"].dtype = (1, 3, None, "w"), "f32"
    g.add_operator(OUTPUT_TYPE, "pnnx_output_0", ["y", "mask"], [])
    engine = Engine.load(save(g, tmp_path))
    assert engine.input_names == ["in0", "in1"]
    assert engine.output_names == ["out0", "out1"]
    assert engine.input_shapes == {"in0": (1, 3, None, "w"), "in1": None}
    assert engine.output_shapes == {"out0": (1, 3, None, "w"), "out1": None}
    x = np.zeros((1, 3, 5, 7), np.float32)
    y, mask = engine.forward(x, np.ones(2, np.float32))
    assert y.shape == (1, 3, 5, 7) and (y == 1).all() and mask.tolist() == [1, 1]


# --------------------------------------------------------------------------------------
# forward
# --------------------------------------------------------------------------------------
def test_array_in_array_out(tmp_path, options):
    engine = Engine.load(one_in_one_out(tmp_path), **options)
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    y = engine.forward(x)
    assert isinstance(y, np.ndarray) and y.dtype == np.float32
    np.testing.assert_array_equal(y, x + 1)
    np.testing.assert_array_equal(x, np.arange(6).reshape(2, 3))  # the input is untouched
    np.testing.assert_array_equal(engine(x), x + 1)  # calling the engine is forward


def test_positional_inputs_and_tuple_outputs_flattened_in_order(tmp_path, options):
    engine = Engine.load(two_in_two_out(tmp_path), **options)
    assert engine.input_names == ["in0", "in1"] and engine.output_names == ["out0", "out1"]
    a = np.ones((2, 4), np.float32)
    b = np.full((2, 4), 2, np.float32)
    t, s = engine.forward(a, b)
    np.testing.assert_array_equal(s, a + b)
    np.testing.assert_array_equal(t, a + b + 1)


def test_dict_in_dict_out_by_alias_or_by_operand_name(tmp_path, options):
    engine = Engine.load(two_in_two_out(tmp_path), **options)
    a = np.ones((2, 4), np.float32)
    b = np.full((2, 4), 3, np.float32)
    by_alias = engine.forward({"in0": a, "in1": b})
    assert set(by_alias) == {"out0", "out1"}
    np.testing.assert_array_equal(by_alias["out0"], a + b + 1)
    np.testing.assert_array_equal(by_alias["out1"], a + b)
    by_operand = engine.forward({"a": a, "b": b})
    np.testing.assert_array_equal(by_operand["out0"], by_alias["out0"])
    mixed = engine.forward({"in0": a, "b": b})
    np.testing.assert_array_equal(mixed["out1"], a + b)


def test_extract_returns_intermediates(tmp_path, options):
    engine = Engine.load(two_in_two_out(tmp_path), **options)
    a = np.ones((2, 4), np.float32)
    (t, s), inner = engine.forward(a, a, extract=["s", "a"])
    assert set(inner) == {"s", "a"}
    np.testing.assert_array_equal(inner["s"], a + a)
    np.testing.assert_array_equal(inner["a"], a)
    outs, inner = engine.forward({"in0": a, "in1": a}, extract=["t"])
    np.testing.assert_array_equal(inner["t"], outs["out0"])
    assert engine.forward(a, a, extract=[])[1] == {}


def test_extracting_the_flattened_tuple_is_an_input_error(tmp_path):
    engine = Engine.load(two_in_two_out(tmp_path), threads=1)
    a = np.ones((2, 4), np.float32)
    with pytest.raises(InputError, match="bundle the model's outputs"):
        engine.forward(a, a, extract=["packed"])
    with pytest.raises(InputError, match="list of operand ids or operator names"):
        engine.forward(a, a, extract="packed")  # a string is not a list of names


def test_a_float_input_of_another_width_is_converted(tmp_path):
    engine = Engine.load(one_in_one_out(tmp_path))
    y = engine.forward(np.zeros((2, 3), np.float64))
    assert y.dtype == np.float32 and (y == 1).all()


# --------------------------------------------------------------------------------------
# errors
# --------------------------------------------------------------------------------------
def test_wrong_number_of_inputs(tmp_path):
    engine = Engine.load(two_in_two_out(tmp_path))
    a = np.ones((2, 4), np.float32)
    with pytest.raises(InputError, match=r"takes 2 input\(s\) \['in0', 'in1'\], got 1"):
        engine.forward(a)
    with pytest.raises(InputError, match="got 3"):
        engine.forward(a, a, a)
    with pytest.raises(InputError, match="missing input"):
        engine.forward({"in0": a})


def test_unknown_names(tmp_path):
    engine = Engine.load(two_in_two_out(tmp_path))
    a = np.ones((2, 4), np.float32)
    message = r"unknown input name\(s\) \['in2'\]; the model's inputs are \['in0', 'in1'\]"
    with pytest.raises(InputError, match=message):
        engine.forward({"in0": a, "in2": a})
    with pytest.raises(InputError, match="cannot extract 'nope': no operator or operand is so named"):
        engine.forward(a, a, extract=["nope"])


def test_wrong_rank_says_expected_and_given(tmp_path):
    engine = Engine.load(one_in_one_out(tmp_path))
    message = r"input in0: expected a tensor of rank 2 \(2,3\), given shape \(6,\)"
    with pytest.raises(InputShapeError, match=message):
        engine.forward(np.zeros(6, np.float32))


@pytest.mark.parametrize(
    "bad", [np.zeros((2, 3), np.int64), np.zeros((2, 3), bool), np.array([["a"] * 3] * 2)]
)
def test_wrong_dtype_kind(tmp_path, bad):
    engine = Engine.load(one_in_one_out(tmp_path))
    with pytest.raises(InputError, match=f"input in0: expected dtype float32, given {bad.dtype}"):
        engine.forward(bad)


def test_a_shape_a_layer_refuses_names_the_operator(tmp_path):
    engine = Engine.load(with_weight(tmp_path))
    with pytest.raises(InputShapeError) as info:
        engine.forward(np.ones((1, 5), np.float32))
    message = str(info.value)
    assert "operator scale (test.api.Scale) refuses [(1,5)float32]" in message
    assert "the last dim must be 4" in message and "exported with in0=(1,4)" in message
    assert isinstance(info.value.__cause__, Exception)


def test_a_layer_failing_at_run_time(tmp_path, options):
    g = Graph()
    add_input(g, 0, "x", (2, 3))
    g.add_operator("test.api.AddOne", "plus", ["x"], ["y"])
    g.add_operator("test.api.Boom", "kaboom", ["y", "x"], ["z"])
    g.add_operator(OUTPUT_TYPE, "pnnx_output_0", ["z"], [])
    engine = Engine.load(save(g, tmp_path), **options)
    with pytest.raises(ExecutionError) as info:
        engine.forward(np.zeros((2, 3), np.float32))
    error = info.value
    assert (error.op_name, error.op_type) == ("kaboom", "test.api.Boom")
    assert error.input_shapes == ["(2,3)float32", "(2,3)float32"]
    assert str(error) == (
        "while executing kaboom (test.api.Boom) on inputs [(2,3)float32, (2,3)float32]: "
        "ZeroDivisionError: boom went the layer"
    )
    assert isinstance(error.__cause__, ZeroDivisionError)
    # the engine is still usable afterwards
    with pytest.raises(ExecutionError):
        engine.forward(np.zeros((2, 3), np.float32))


def test_every_unsupported_type_in_one_error(tmp_path):
    g = Graph()
    add_input(g, 0, "x", (2, 3))
    g.add_operator("nn.Nonexistent", "n1", ["x"], ["a"])
    g.add_operator("test.api.AddOne", "fine", ["a"], ["b"])
    g.add_operator("nn.Nonexistent", "n2", ["b"], ["c"])
    g.add_operator("F.made_up", "m1", ["c"], ["d"])
    g.add_operator(OUTPUT_TYPE, "pnnx_output_0", ["d"], [])
    with pytest.raises(UnsupportedOperatorError) as info:
        Engine.load(save(g, tmp_path))
    assert info.value.unsupported == {"nn.Nonexistent": ["n1", "n2"], "F.made_up": ["m1"]}
    assert "nn.Nonexistent: used by n1, n2" in str(info.value) and "F.made_up: used by m1" in str(info.value)


def test_a_missing_bin(tmp_path):
    param = with_weight(tmp_path)
    (tmp_path / "model.pnnx.bin").unlink()
    message = r"model\.pnnx\.bin: the weight file does not exist; the param file reads its weights from it"
    with pytest.raises(WeightError, match=message):
        Engine.load(param)
    with pytest.raises(ModelFormatError, match="cannot open the weight file"):
        Engine.load(param, tmp_path / "elsewhere.bin")


def test_a_missing_param(tmp_path):
    with pytest.raises(ModelFormatError, match="cannot open the param file"):
        Engine.load(tmp_path / "nothing.pnnx.param")


def test_all_those_errors_are_graphexec_errors():
    for cls in (
        ExecutionError, InputError, InputShapeError, ModelFormatError, UnsupportedOperatorError, WeightError
    ):
        assert issubclass(cls, GraphexecError)


MODELS = REPO / "examples" / "models"


def test_weight_pages_dropped_after_load_read_in_again_unchanged():
    """The layers copy their weights at load, so the engine lets the OS drop the weight
    file's pages; a value still read from the file reads the same bytes."""
    graph = pnnx.load(MODELS / "inception_mini.pnnx.param")
    attrs = [a for op in graph.operators for a in op.attrs.values() if a.data is not None]
    before = [np.array(a.data) for a in attrs]
    graph.drop_weight_pages()
    for attr, want in zip(attrs, before):
        np.testing.assert_array_equal(attr.data, want)


@pytest.mark.skipif(not Path("/proc/self/smaps").exists(), reason="reads Linux's /proc/self/smaps")
def test_a_loaded_engine_holds_none_of_the_weight_file(tmp_path):
    import subprocess
    import sys

    script = f"""
from graphexec import Engine
engine = Engine.load({str(MODELS / "inception_mini.pnnx.param")!r})
resident, current = 0, ""
for line in open("/proc/self/smaps"):
    fields = line.split()
    if not fields[0].endswith(":"):  # a mapping's first line: range, perms, offset, dev, inode[, path]
        current = fields[5] if len(fields) > 5 else ""
    elif fields[0] == "Rss:" and current.endswith("inception_mini.pnnx.bin"):
        resident += int(fields[1])
print(resident)
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          cwd=REPO)
    assert done.returncode == 0, done.stderr
    size_kb = (MODELS / "inception_mini.pnnx.bin").stat().st_size // 1024
    assert size_kb > 300 and int(done.stdout) < size_kb // 4  # 368 kB of weights; pages stay out
