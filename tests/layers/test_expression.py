"""pnnx.Expression beyond the goldens: parsing, validation, PyTorch's promotion, sizes, lists."""

from __future__ import annotations

import math

import numpy as np
import pytest
from graphexec.layers import _expr
from graphexec.layers.base import ShapeMismatch
from graphexec.layers.expression import Expression
from graphexec.layers.specs import SequenceSpec, TensorSpec
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from graphexec.errors import LayerConfigError
from graphexec.ir import Graph
from graphexec.pnnx import parse_value

F32, F64, I64, I32, BOOL = (np.dtype(t) for t in (np.float32, np.float64, np.int64, np.int32, np.bool_))


def expression(expr: str, num_inputs: int = 1, num_outputs: int = 1) -> Expression:
    """The layer for ``expr=<text>`` exactly as the param reader would hand it over."""
    graph = Graph()
    op = graph.add_operator(
        "pnnx.Expression", "e", [f"in{i}" for i in range(num_inputs)],
        [f"out{i}" for i in range(num_outputs)], {"expr": parse_value(expr)},
    )
    return Expression(op)


def run(expr: str, *inputs):
    layer = expression(expr, len(inputs))
    (out,) = layer.forward(list(inputs))
    return out


def spec_of(expr: str, *specs):
    return expression(expr, len(specs)).infer(list(specs))[0]


# -- parsing ----------------------------------------------------------------------------
def test_parses_nested_calls_into_a_tree():
    tree = expression("sub(add(@0,mul(@1,2)),div(@0,3.0))", 2).tree
    assert tree == _expr.Call("sub", (
        _expr.Call("add", (_expr.Input(0), _expr.Call("mul", (_expr.Input(1), _expr.Literal(2))))),
        _expr.Call("div", (_expr.Input(0), _expr.Literal(3.0))),
    ))


def test_reads_the_forms_pnnx_garbles_like_pnnx_does():
    # pnnx's evaluation pass rewrites log1p(@0) as "log1p,@0"; arities recover the tree
    assert expression("log1p,@0").tree == expression("log1p(@0)").tree
    assert expression("add(log1p,@0),1").tree == expression("add(log1p(@0),1)").tree


@pytest.mark.parametrize("text, value", [
    ("2", 2), ("-3", -3), ("2.0", 2.0), ("1.000000e-5", 1e-5), ("1.23456792e8", 1.23456792e8),
    ("inf", math.inf),
    ("True", True), ("None", None), ("ij", "ij"), ("floor", "floor"),
    ("1.000000e+00+2.000000e+00j", 1 + 2j),
])
def test_literals(text, value):
    assert expression(text, 0).tree == _expr.Literal(value)
    assert type(expression(text, 0).tree.value) is type(value)


def test_nan_as_pnnx_writes_it():
    assert math.isnan(expression("nan.0", 0).tree.value)  # add(@0,nan.0) for x + float('nan')
    assert np.isnan(run("add(@0,nan.0)", np.ones(2, F32))).all()


def test_param_reader_lists_and_numbers_round_trip():
    # the param reader turns expr=[@0,@1] into a list of strings and expr=2 into an int
    assert isinstance(parse_value("[@0,@1]"), list)
    out = run("[@0,@1]", np.ones(2, F32), np.zeros(3, F32))
    assert [o.shape for o in out] == [(2,), (3,)]
    constant = run("2")
    assert constant.dtype == I64 and constant.shape == () and int(constant) == 2


@pytest.mark.parametrize("expr, num_inputs, message", [
    ("sqr(@0)", 1, "unknown function 'sqr'"),
    ("add(@0,@2)", 2, "@2 refers to input 2, but the operator has 2"),
    ("add(@0)", 1, "add() takes 2 argument(s), got 1"),
    ("add(@0,1),2", 1, "unexpected '2'"),
    ("add(@0,1", 1, "unclosed '('"),
    ("add(@0,1))", 1, "unbalanced ')'"),
    ("mul(@0,ij)", 1, "cannot take the string 'ij'"),
    ("add(@0,None)", 1, "cannot take None"),
    ("add([1,2],@0)", 1, "cannot take a list"),
    ("@x", 1, "bad input reference"),
    ("add(@0,$1)", 1, "unknown token '$1'"),
    ("neg(" * 300 + "@0" + ")" * 300, 1, "nested deeper"),
])
def test_bad_expressions_are_config_errors_naming_the_problem(expr, num_inputs, message):
    with pytest.raises(LayerConfigError, match="pnnx.Expression") as caught:
        expression(expr, num_inputs)
    assert message in str(caught.value)


def test_one_output_only():
    with pytest.raises(LayerConfigError, match="one output"):
        expression("@0", 1, num_outputs=2)


def test_missing_expr_param():
    graph = Graph()
    op = graph.add_operator("pnnx.Expression", "e", ["a"], ["b"], {})
    with pytest.raises(LayerConfigError, match="missing param 'expr'"):
        Expression(op)


# -- PyTorch's type promotion -------------------------------------------------------------
def arr(dtype, shape=(2, 3), value=3):
    return np.full(shape, value, dtype=dtype)


@pytest.mark.parametrize("expr, inputs, dtype", [
    ("mul(@0,2.5)", [arr(F32)], F32),                       # a Python float keeps float32
    ("add(@0,2.5)", [arr(I64)], F32),                       # int tensor + float -> default float
    ("div(@0,@1)", [arr(I64), arr(I64)], F32),              # true division of integers
    ("floor_divide(@0,@1)", [arr(I64), arr(I64)], I64),
    ("add(@0,3)", [arr(I32)], I32),                         # a Python int never widens
    ("add(@0,1)", [arr(BOOL, value=True)], I64),
    ("add(@0,1.0)", [arr(np.float16)], np.dtype(np.float16)),
    ("add(@0,@1)", [arr(I64), np.array(1.5, F64)], F64),    # a 0-d float counts against ints
    ("add(@0,@1)", [arr(F32), np.array(1.5, F64)], F32),    # ... but not against floats
    ("add(@0,@1)", [arr(I32), np.array(7, I64)], I32),
    ("add(@0,@1)", [arr(I32), arr(I64)], I64),
    ("mul(@0,1.0+2.0j)", [arr(F32)], np.dtype(np.complex64)),
    ("mul(@0,1.0+2.0j)", [arr(F64)], np.dtype(np.complex128)),
    ("abs(mul(@0,1.0+2.0j))", [arr(F32)], F32),
    ("sqrt(@0)", [arr(I64)], F32),
    ("floor(@0)", [arr(I64)], I64),
    ("square(@0)", [arr(BOOL, value=True)], I64),
    ("sign(@0)", [arr(BOOL, value=True)], BOOL),
    ("pow(2.5,@0)", [arr(I64)], F32),
    ("atan2(@0,@1)", [arr(I64), arr(I64)], F32),
    ("gt(@0,0.5)", [arr(I64)], BOOL),
    ("and(@0,@1)", [arr(BOOL, value=True), arr(BOOL, value=False)], BOOL),
])
def test_promotion_follows_pytorch_and_inference_agrees(expr, inputs, dtype):
    out = run(expr, *inputs)
    assert out.dtype == dtype
    assert spec_of(expr, *(TensorSpec(x.shape, x.dtype) for x in inputs)).dtype == dtype


def test_integer_tensor_compared_with_a_float_compares_as_float():
    np.testing.assert_array_equal(run("gt(@0,0.5)", np.array([0, 1, 2])), [False, True, True])


def test_floor_divide_remainder_fmod_sign_rules():
    a, b = np.array([-7, 7, -7, 7]), np.array([2, -2, -2, 2])
    np.testing.assert_array_equal(run("floor_divide(@0,@1)", a, b), [-4, -4, 3, 3])
    np.testing.assert_array_equal(run("remainder(@0,@1)", a, b), [1, -1, -1, 1])  # sign of the divisor
    np.testing.assert_array_equal(run("fmod(@0,@1)", a, b), [-1, 1, -1, 1])  # sign of the dividend
    f = a.astype(F32)
    np.testing.assert_array_equal(run("remainder(@0,-2.0)", f), [-1, -1, -1, -1])
    np.testing.assert_array_equal(run("floor_divide(@0,2.0)", f), [-4, 3, -4, 3])


def test_pytorch_sign_and_round():
    np.testing.assert_array_equal(run("sign(@0)", np.array([np.nan, -0.0, -2, 3], F32)), [0, 0, -1, 1])
    np.testing.assert_array_equal(run("round(@0)", np.array([0.5, 1.5, 2.5, -0.5], F32)), [0, 2, 2, -0])


def test_never_mutates_or_widens_float32():
    x = np.linspace(-1, 1, 6, dtype=F32).reshape(2, 3)
    before = x.copy()
    out = run("add(mul(@0,0.1),div(@0,3))", x)
    np.testing.assert_array_equal(x, before)
    assert out.dtype == F32


# -- sizes, scalars, lists ----------------------------------------------------------------
def test_size_is_a_known_int64_scalar():
    x = np.zeros((2, 3, 4), F32)
    out = run("size(@0,-1)", x)
    assert out.dtype == I64 and out.shape == () and int(out) == 4
    spec = spec_of("size(@0,-1)", TensorSpec((2, 3, 4), F32))
    assert isinstance(spec, _expr.ScalarSpec) and spec.value == 4 and spec.dtype == I64


def test_size_used_in_tensor_arithmetic_keeps_float32():
    out = run("mul(@0,size(@1,1))", np.ones((2, 2), F32), np.zeros((5, 3)))
    assert out.dtype == F32 and out[0, 0] == 3


def test_scalar_arithmetic_is_done_at_python_precision():
    # size/3 is a Python float: 1/3 in double, then added to the float32 tensor once
    out = run("add(@0,div(size(@1,0),3))", np.zeros(1, F32), np.zeros((1, 1)))
    assert out[0] == np.float32(1 / 3)
    assert run("floor(div(size(@0,1),2))", np.zeros((1, 5))).dtype == I64  # rounding a scalar gives an int


def test_a_scalar_past_float32s_range_is_infinite_without_a_warning():
    """A float scalar result becomes a float32 0-d tensor: past its range that is +-inf, as
    in PyTorch, and numpy's cast warning does not reach the caller."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = run("mul(size(@0,0),1e300)", np.zeros((2, 1)))
        assert out.dtype == F32 and out.shape == () and np.isposinf(out)
        assert np.isneginf(run("mul(size(@0,0),-1e300)", np.zeros((2, 1))))


def test_list_result_is_a_list_of_scalars_with_known_values():
    x = np.zeros((2, 3, 4), F32)
    out = run("[int(size(@0,0)),-1,mul(size(@0,1),size(@0,2))]", x)
    assert [int(v) for v in out] == [2, -1, 12] and all(v.dtype == I64 and v.shape == () for v in out)
    spec = spec_of("[int(size(@0,0)),-1,mul(size(@0,1),size(@0,2))]", TensorSpec((2, 3, 4), F32))
    assert isinstance(spec, SequenceSpec) and [s.value for s in spec.items] == [2, -1, 12]


def test_whole_shape_size():
    assert [int(v) for v in run("size(@0)", np.zeros((2, 5)))] == [2, 5]


def test_data_dependent_scalar_has_no_known_value():
    spec = spec_of("int(@0)", TensorSpec((1,), I64))
    assert type(spec) is TensorSpec and spec.shape == () and spec.dtype == I64
    assert int(run("int(@0)", np.array([7]))) == 7


def test_known_scalar_inputs_propagate():
    known = _expr.ScalarSpec((), I64, 6)
    spec = spec_of("floor_divide(@0,4)", known)
    assert isinstance(spec, _expr.ScalarSpec) and spec.value == 1


def test_torch_dtype_casts():
    assert run("torch.float(size(@0,1))", np.zeros((1, 3))).dtype == F32
    assert run("torch.long(@0)", np.array([1.7, -1.7], F32)).tolist() == [1, -1]
    assert run("torch.bool(@0)", np.array([0.0, 2.0], F32)).dtype == BOOL


def test_constant_expressions_without_inputs():
    assert run("ij") == "ij" and run("None") is None
    assert spec_of("ij").value == "ij"


@pytest.mark.parametrize("expr, specs, message", [
    ("add(@0,@1)", [TensorSpec((2, 3), F32), TensorSpec((4,), F32)], "cannot broadcast (2, 3) with (4,)"),
    ("size(@0,3)", [TensorSpec((2, 3), F32)], "dim 3 is out of range"),
    ("size(@0,int(@1))", [TensorSpec((2, 3), F32), TensorSpec((1,), I64)], "only known when the model runs"),
    ("and(@0,1)", [TensorSpec((2,), F32)], "needs integer or bool operands"),
    ("int(@0)", [TensorSpec((2,), F32)], "only one element converts"),
    ("add(@0,1)", [SequenceSpec((TensorSpec((2,), F32),))], "a list"),
])
def test_inference_refuses_what_cannot_run(expr, specs, message):
    with pytest.raises(ShapeMismatch) as caught:
        spec_of(expr, *specs)
    assert message in str(caught.value)


# -- property: random trees against a direct numpy evaluation -------------------------------
# Over float32 tensors and Python numbers numpy (NEP 50) and PyTorch promote alike, so a plain
# recursive numpy evaluation, with Python's own operators between Python numbers, is a reference.
def _python_extreme(pick, a, b):
    """max/min of two Python numbers as PyTorch sees them: NaN wins, an int meeting a float is a float."""
    if a != a or b != b:
        return math.nan
    found = pick(a, b)
    return float(found) if isinstance(a, float) or isinstance(b, float) else found


_REFERENCE_BINARY = {
    "add": (np.add, lambda a, b: a + b),
    "sub": (np.subtract, lambda a, b: a - b),
    "mul": (np.multiply, lambda a, b: a * b),
    "div": (np.true_divide, lambda a, b: a / b),  # a Python number over 0 raises: such trees are skipped
    "maximum": (np.maximum, lambda a, b: _python_extreme(max, a, b)),
    "minimum": (np.minimum, lambda a, b: _python_extreme(min, a, b)),
    "atan2": (np.arctan2, math.atan2),
}
_REFERENCE_UNARY = {
    "neg": (np.negative, lambda a: -a),
    "abs": (np.abs, abs),
    "square": (np.square, lambda a: a * a),
    "sin": (np.sin, lambda a: math.sin(a) if math.isfinite(a) else math.nan),
    "tanh": (np.tanh, math.tanh),
    "floor": (np.floor, math.floor),
    "ceil": (np.ceil, math.ceil),
    "trunc": (np.trunc, math.trunc),
}


def _trees(num_inputs: int):
    leaves = st.one_of(
        st.integers(0, num_inputs - 1).map(lambda i: ("@", i)),
        st.integers(-5, 5).map(lambda v: ("lit", v)),
        st.floats(-4, 4, allow_nan=False, width=32).map(lambda v: ("lit", float(v))),
    )
    return st.recursive(leaves, lambda inner: st.one_of(
        st.tuples(st.sampled_from(sorted(_REFERENCE_UNARY)), inner).map(lambda t: ("call", t[0], (t[1],))),
        st.tuples(st.sampled_from(sorted(_REFERENCE_BINARY)), inner, inner)
        .map(lambda t: ("call", t[0], t[1:])),
    ), max_leaves=12)


def _text(tree) -> str:
    if tree[0] == "@":
        return f"@{tree[1]}"
    if tree[0] == "lit":
        return repr(tree[1])
    return f"{tree[1]}(" + ",".join(_text(a) for a in tree[2]) + ")"


def _reference(tree, inputs):
    if tree[0] == "@":
        return inputs[tree[1]]
    if tree[0] == "lit":
        return tree[1]
    args = [_reference(a, inputs) for a in tree[2]]
    table = _REFERENCE_UNARY if len(args) == 1 else _REFERENCE_BINARY
    array_fn, scalar_fn = table[tree[1]]
    if all(not isinstance(a, np.ndarray) for a in args):
        return scalar_fn(*args)
    return np.asarray(array_fn(*args))  # numpy hands back a scalar for 0-d operands


@st.composite
def _cases(draw):
    base = draw(st.lists(st.integers(1, 3), min_size=0, max_size=3))
    num_inputs = draw(st.integers(1, 3))
    inputs = []
    for _ in range(num_inputs):
        rank = draw(st.integers(0, len(base)))
        shape = [d if draw(st.booleans()) else 1 for d in base[len(base) - rank:]]
        size = math.prod(shape)
        values = draw(st.lists(st.floats(-3, 3, allow_nan=False, width=32), min_size=size, max_size=size))
        inputs.append(np.array(values, dtype=F32).reshape(shape))
    return draw(_trees(num_inputs)), inputs


@settings(max_examples=60, deadline=None)
@given(_cases())
def test_random_trees_match_a_direct_numpy_evaluation(case):
    tree, inputs = case
    text = _text(tree)
    layer = expression(text, len(inputs))
    with np.errstate(all="ignore"):
        try:
            value = _reference(tree, inputs)
            # a Python number leaves the expression as a 0-d array: float32 for a float, int64 for an int
            want = value if isinstance(value, np.ndarray) else np.asarray(value, F32 if isinstance(value, float) else I64)
        except ZeroDivisionError:
            assume(False)
        except (ValueError, OverflowError):  # Python refuses (math.ceil(inf)), or an int beyond int64
            with pytest.raises((ValueError, OverflowError)):
                layer.forward(inputs)
            return
    (got,) = layer.forward(inputs)
    assert got.shape == want.shape, text
    assert got.dtype == want.dtype, text
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-6, equal_nan=True, err_msg=text)
    spec = layer.infer([TensorSpec(x.shape, x.dtype) for x in inputs])[0]
    assert (spec.shape, spec.dtype) == (got.shape, got.dtype), text


@pytest.mark.parametrize("text", ["ceil(div(1,1.1754943508222875e-38))", "square(square(square(square(square(5)))))",
                                  "pow(2,63)"])
def test_python_ints_beyond_int64_are_refused(text):
    """A Python int result is kept in an int64: the ceiling of a huge float, or int
    arithmetic past 2**63, is refused rather than wrapped around into another number."""
    with pytest.raises(OverflowError, match="beyond the range of int64"):
        expression(text, 1).forward([np.array(0.0, F32)])
    (got,) = expression("pow(2,62)", 1).forward([np.array(0.0, F32)])
    assert got.dtype == I64 and int(got) == 2**62


# -- property: promotion against PyTorch itself, where it is installed ----------------------
_TORCH_DTYPES = ["float32", "float64", "int64", "int32", "uint8", "bool"]
_TORCH_BINARY = ["add", "sub", "mul", "div", "maximum", "minimum", "floor_divide", "remainder", "pow",
                 "atan2", "eq", "lt"]


@st.composite
def _promotion_cases(draw):
    operands = []
    for _ in range(2):
        form = draw(st.sampled_from(["tensor", "zero-dim", "int", "float"]))
        if form in ("tensor", "zero-dim"):
            dtype = draw(st.sampled_from(_TORCH_DTYPES))
            shape = (2, 3) if form == "tensor" else ()
            values = np.arange(1, 7).reshape(2, 3) % 4 + 1 if shape else np.array(3)
            operands.append(values.astype(dtype))
        else:
            number = st.integers(1, 4) if form == "int" else st.sampled_from([0.5, 2.0, 1.25])
            operands.append(draw(number))
    return draw(st.sampled_from(_TORCH_BINARY)), operands


@settings(max_examples=60, deadline=None)
@given(_promotion_cases())
def test_binary_promotion_matches_pytorch(case):
    torch = pytest.importorskip("torch")
    name, operands = case
    tensors = [o for o in operands if isinstance(o, np.ndarray)]
    assume(tensors)  # Python-only arithmetic is Python's, not PyTorch's
    torch_args = [torch.from_numpy(o) if isinstance(o, np.ndarray) else o for o in operands]
    torch_fn = getattr(torch, name)
    if not isinstance(torch_args[0], torch.Tensor) and name not in ("add", "mul", "sub", "pow", "remainder"):
        torch_args.reverse()
        operands = operands[::-1]
    try:
        want = torch_fn(*torch_args).numpy()
    except (RuntimeError, TypeError):  # PyTorch refuses the combination (bool - bool, maximum with a number)
        assume(False)
    inputs = [o for o in operands if isinstance(o, np.ndarray)]
    refs = iter(range(len(inputs)))
    args = [f"@{next(refs)}" if isinstance(o, np.ndarray) else repr(o) for o in operands]
    text = f"{name}(" + ",".join(args) + ")"
    (got,) = expression(text, len(inputs)).forward(inputs)
    assert got.dtype == want.dtype, text
    np.testing.assert_allclose(got, want, rtol=1e-6, err_msg=text)


# -- pnnx's lost rounding mode, and sizes in a dynamic-shape model --------------------------
def test_division_annotated_as_integer_is_a_floor_division():
    graph = Graph()
    op = graph.add_operator("pnnx.Expression", "e", ["a", "b"], ["c"], {"expr": "add(div(@0,@1),1)"})
    a, b = np.array([-7, 7]), np.array([2, 2])
    assert Expression(op).forward([a, b])[0].dtype == F32  # unannotated: true division
    op.outputs[0].dtype = "i64"  # what pnnx writes for torch.div(a, b, rounding_mode="floor") + 1
    (out,) = Expression(op).forward([a, b])
    assert out.dtype == I64 and out.tolist() == [-3, 4]


@pytest.mark.parametrize(("input_name", "want"), [("pnnx_input_0", [-4, 3, -4, 3]), ("x", [-3, 3, -3, 3])])
def test_an_integer_division_from_onnx_rounds_toward_zero(input_name, want):
    """A model pnnx converted from ONNX keeps the ONNX graph's input names: its integer
    ``div`` is ONNX's ``Div``, which truncates; a traced model's is a lost floor."""
    graph = Graph()
    graph.add_operator("pnnx.Input", input_name, [], ["a"])
    graph.add_operator("pnnx.Expression", "n", ["a"], ["b"], {"expr": "neg(@0)"})
    op = graph.add_operator("pnnx.Expression", "e", ["b"], ["c"], {"expr": "div(@0,2)"})
    op.outputs[0].dtype = "i64"
    (out,) = Expression(op).forward([np.array([-7, 7, -7, 6])])
    assert out.dtype == I64 and out.tolist() == want


DYNAMIC_PARAM = """7767517
4 3
pnnx.Input in0 0 1 0 #0=(?,?,?)f32
pnnx.Expression e0 1 1 0 1 expr=mul(@0,2) #0=(?,?,?)f32 #1=(?,?,?)f32
pnnx.Expression e1 2 1 1 0 2 expr=sub(add(@0,div(size(@1,1),2)),mul(size(@1,2),0.5)) #2=(?,?,?)f32
pnnx.Output out 1 0 2
"""


@pytest.mark.parametrize("shape", [(2, 3, 4), (1, 5, 2)])
def test_sizes_follow_the_input_of_a_dynamic_model(shape):
    from graphexec import Engine, pnnx

    engine = Engine(pnnx.parse(DYNAMIC_PARAM))
    x = np.random.default_rng(0).standard_normal(shape).astype(F32)
    out = engine.forward(x)
    np.testing.assert_allclose(out, x * 2 + shape[1] / 2 - shape[2] * 0.5, rtol=1e-6)
    assert out.dtype == F32 and engine.specs(shape)["2"] == TensorSpec(shape, F32)


def test_a_power_of_one_half_is_a_root_as_in_pytorch():
    """``x ** 0.5`` and ``x ** -0.5`` by a number are sqrt and rsqrt in PyTorch, whose
    values at -inf and -0.0 differ from C's pow (torch 2.x: ``x ** -0.5`` gives
    [nan, -inf, 0.5, 0] for [-inf, -0.0, 4, inf]); a tensor exponent keeps C's pow."""
    x = np.float32([-np.inf, -0.0, 4.0, np.inf, -1.0])
    np.testing.assert_array_equal(run("pow(@0,5.000000e-01)", x), np.float32([np.nan, -0.0, 2.0, np.inf, np.nan]))
    got = run("pow(@0,-5.000000e-01)", x)
    np.testing.assert_array_equal(got, np.float32([np.nan, -np.inf, 0.5, 0.0, np.nan]))
    assert got.dtype == np.float32
    np.testing.assert_array_equal(run("pow(@0,@1)", x, np.full(5, -0.5, np.float32)),
                                  np.float32([0.0, np.inf, 0.5, 0.0, np.nan]))
