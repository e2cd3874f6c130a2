"""Plumbing beyond the goldens: read-only constants, tuples, and the unregistered unpackers."""

from __future__ import annotations

import numpy as np
import pytest
from graphexec.layers._expr import ScalarSpec
from graphexec.layers.base import ShapeMismatch
from graphexec.layers.plumbing import Attribute, SequenceUnpack, SliceIndexes, TupleConstruct
from graphexec.layers.registry import lookup
from graphexec.layers.specs import SequenceSpec, TensorSpec

from graphexec import Engine
from graphexec.errors import LayerConfigError
from graphexec.ir import Attribute as IrAttribute
from graphexec.ir import Graph
from graphexec import pnnx
from graphexec.pnnx import parse_value
from tests.paths import REPO

F32, I64 = np.dtype(np.float32), np.dtype(np.int64)
FIXTURES = REPO / "tests" / "fixtures" / "ops" / "plumbing"


def build(cls, op_type, num_inputs=0, num_outputs=1, params=None, attrs=None):
    graph = Graph()
    op = graph.add_operator(op_type, "op", [f"i{k}" for k in range(num_inputs)],
                            [f"o{k}" for k in range(num_outputs)], params, attrs)
    return cls(op)


def test_attribute_output_is_read_only_even_from_a_writable_array():
    source = np.arange(6, dtype=F32).reshape(2, 3)
    layer = build(Attribute, "pnnx.Attribute", attrs={"data": IrAttribute.from_array(source)})
    (out,) = layer.forward([])
    np.testing.assert_array_equal(out, source)
    assert not out.flags.writeable
    with pytest.raises(ValueError):
        out[0, 0] = 1
    assert source.flags.writeable  # the caller's array is left as it was
    assert layer.infer([]) == [TensorSpec((2, 3), F32)]


def test_an_integer_scalar_attribute_is_known_before_the_run(tmp_path):
    """pnnx keeps a size it folded while tracing as a 0-d integer constant (Hugging Face's
    Swin clamps its window to the map as a tensor) and computes pads from it: the pads are
    known when the run is planned, so the plan has their shapes."""
    window = build(Attribute, "pnnx.Attribute", attrs={"data": IrAttribute.from_array(np.array(3, np.int64))})
    assert window.infer([]) == [ScalarSpec((), I64, 3)]
    g = Graph()
    g.add_operator("pnnx.Input", "pnnx_input_0", [], ["x"])
    g.operands["x"].shape, g.operands["x"].dtype = (1, 5, 4, 2), "f32"
    g.add_operator("pnnx.Attribute", "window", [], ["w"], attrs={"data": IrAttribute.from_array(np.array(3, np.int64))})
    g.add_operator("pnnx.Expression", "pads", ["w"], ["p"],
                   {"expr": "[0,0,0,int(remainder(sub(@0,remainder(4,@0)),@0)),0,int(remainder(sub(@0,remainder(5,@0)),@0))]"})
    g.add_operator("F.pad", "pad", ["x", "p"], ["y"], {"mode": "constant"})
    g.operators[-1].input_names = ["input", "pad"]
    g.add_operator("pnnx.Output", "pnnx_output_0", ["y"], [])
    param = tmp_path / "model.pnnx.param"
    g.validate()
    pnnx.save(g, param)
    x = np.arange(40, dtype=F32).reshape(1, 5, 4, 2)
    y = Engine.load(param).forward(x)
    np.testing.assert_array_equal(y, np.pad(x, ((0, 0), (0, 1), (0, 2), (0, 0))))


def test_attribute_from_a_real_bin_cannot_be_written_through():
    engine = Engine.load(FIXTURES / "attribute" / "model.pnnx.param")
    x = np.ones((2, 3), F32)
    _, offset = engine.forward(x)
    assert offset.dtype == I64 and not offset.flags.writeable
    with pytest.raises(ValueError):
        offset += 1
    _, offset_again = engine.forward(x)
    np.testing.assert_array_equal(offset_again, np.arange(6).reshape(2, 3))


def test_attribute_needs_data_and_no_inputs():
    with pytest.raises(LayerConfigError, match="missing weight @data"):
        build(Attribute, "pnnx.Attribute")
    with pytest.raises(LayerConfigError, match="no input"):
        data = IrAttribute.from_array(np.zeros(2, F32))
        build(Attribute, "pnnx.Attribute", num_inputs=1, attrs={"data": data})


def test_tuple_construct_packs_its_inputs():
    layer = build(lookup("prim::TupleConstruct"), "prim::TupleConstruct", num_inputs=2)
    assert isinstance(layer, TupleConstruct)
    a, b = np.zeros(2, F32), np.ones((1, 3), I64)
    (packed,) = layer.forward([a, b])
    assert isinstance(packed, tuple) and packed[0] is a and packed[1] is b
    assert layer.infer([TensorSpec((2,), F32), TensorSpec((1, 3), I64)]) == [
        SequenceSpec((TensorSpec((2,), F32), TensorSpec((1, 3), I64)))
    ]


def test_tuple_construct_then_unpack_round_trips():
    pack = build(TupleConstruct, "prim::TupleConstruct", num_inputs=2)
    unpack = build(SequenceUnpack, "prim::ListUnpack", num_inputs=1, num_outputs=2)
    specs = [TensorSpec((2,), F32), TensorSpec((3,), I64)]
    assert unpack.infer(pack.infer(specs)) == specs
    values = [np.zeros(2, F32), np.arange(3)]
    out = unpack.forward(pack.forward(values))
    assert out[0] is values[0] and out[1] is values[1]


def test_unpack_refuses_a_tensor_or_a_wrong_count():
    unpack = build(SequenceUnpack, "prim::ListUnpack", num_inputs=1, num_outputs=2)
    with pytest.raises(ShapeMismatch, match="got a tensor"):
        unpack.infer([TensorSpec((2,), F32)])
    with pytest.raises(ShapeMismatch, match="unpacks 2 values, the sequence holds 3"):
        unpack.infer([SequenceSpec((TensorSpec((), I64),) * 3)])


def test_a_list_construct_is_never_left_to_run():
    assert lookup("prim::ListConstruct") is None  # pnnx always rewrites lists into expressions


def test_slice_indexes_mixes_constants_and_scalar_inputs():
    params = {"indexes": parse_value("(1,@0,2147483647)")}
    layer = build(SliceIndexes, "pnnx.SliceIndexes", num_inputs=1, params=params)
    (values,) = layer.forward([np.array(4)])
    assert [int(v) for v in values] == [1, 4, 2147483647] and all(v.dtype == I64 for v in values)
    (spec,) = layer.infer([ScalarSpec((), I64, 4)])
    assert [s.value for s in spec.items] == [1, 4, 2147483647]
    (unknown,) = layer.infer([TensorSpec((), I64)])
    assert type(unknown.items[1]) is TensorSpec
    with pytest.raises(ShapeMismatch, match="should be one integer"):
        layer.infer([TensorSpec((2,), I64)])


def test_slice_indexes_refuses_bad_entries():
    with pytest.raises(LayerConfigError, match="neither an integer nor @k, k < 1"):
        build(SliceIndexes, "pnnx.SliceIndexes", num_inputs=1, params={"indexes": parse_value("(1,@3)")})
