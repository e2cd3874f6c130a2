"""graphexec.pnnx: reading and writing .pnnx.param and .pnnx.bin.

A real export (tests/fixtures/format/m.pnnx.*, made by export_m.py beside it) is read,
checked field by field and round-tripped; random graphs round-trip through save and load;
damaged files only ever raise GraphexecError subclasses.
"""

from __future__ import annotations

import functools
import io
import math
import mmap
import re
import shutil
import struct
import tempfile
import zipfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from graphexec import Engine, dtypes, pnnx
from graphexec.errors import GraphexecError, GraphStructureError, ModelFormatError, WeightError
from graphexec.ir import Attribute, Graph
from tests.golden import OPS, load_io
from tests.paths import REPO

FORMAT = REPO / "tests" / "fixtures" / "format"
REAL_PARAM = FORMAT / "m.pnnx.param"
REAL_BIN = FORMAT / "m.pnnx.bin"
ENTRIES = [  # in the order pnnx wrote them
    "c.bias", "c.weight", "bn.bias", "bn.running_mean", "bn.running_var", "bn.weight", "l.bias", "l.weight"
]

IO_SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# --------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------
def same_param(a: object, b: object) -> bool:
    """Equal values of the same types; NaN equals NaN."""
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same_param(x, y) for x, y in zip(a, b))
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    if isinstance(a, complex):
        pairs = ((a.real, b.real), (a.imag, b.imag))
        return all(x == y or (math.isnan(x) and math.isnan(y)) for x, y in pairs)
    return a == b


def assert_same_graph(a: Graph, b: Graph) -> None:
    """Operators, params, attributes (to the byte), bindings and annotations all agree."""
    assert [(op.type, op.name) for op in a.operators] == [(op.type, op.name) for op in b.operators]
    for x, y in zip(a.operators, b.operators):
        where = f"operator {x.name}"
        assert [o.name for o in x.inputs] == [o.name for o in y.inputs], where
        assert [o.name for o in x.outputs] == [o.name for o in y.outputs], where
        assert (x.input_names or [""] * len(x.inputs)) == (y.input_names or [""] * len(y.inputs)), where
        assert set(x.params) == set(y.params), where
        for key in x.params:
            one, two = x.params[key], y.params[key]
            assert same_param(one, two), f"{where} param {key}: {one!r} != {two!r}"
        assert list(x.attrs) == list(y.attrs), where
        for key, attr in x.attrs.items():
            other = y.attrs[key]
            assert (attr.dtype, tuple(attr.shape)) == (other.dtype, tuple(other.shape)), f"{where} @{key}"
            if attr.data is None:
                assert other.data is None, f"{where} @{key}"
            else:
                want = dtypes.encode(np.asarray(attr.data), attr.dtype)
                assert other.data is not None, f"{where} @{key}"
                assert dtypes.encode(other.data, other.dtype) == want, f"{where} @{key}"
    assert set(a.operands) == set(b.operands)
    for name, operand in a.operands.items():
        other = b.operands[name]
        if operand.shape is None or operand.dtype is None:  # the format writes both or neither
            assert other.shape is None and other.dtype is None, name
        else:
            assert (tuple(operand.shape), operand.dtype) == (other.shape, other.dtype), name


def round_trip(graph: Graph, folder: Path, *, force_zip64: bool = False) -> Graph:
    param = folder / "g.pnnx.param"
    pnnx.save(graph, param, force_zip64=force_zip64)
    return pnnx.load(param)


@pytest.fixture
def real_copy(tmp_path: Path) -> Path:
    """A private copy of the real export, free to damage."""
    shutil.copy(REAL_PARAM, tmp_path / "m.pnnx.param")
    shutil.copy(REAL_BIN, tmp_path / "m.pnnx.bin")
    return tmp_path / "m.pnnx.param"


def edit_line(param: Path, number: int, edit) -> None:
    lines = param.read_text().split("\n")
    lines[number - 1] = edit(lines[number - 1])
    param.write_text("\n".join(lines))


def line_of(param: Path, name: str) -> int:
    """The 1-based line where operator ``name`` is defined."""
    for number, line in enumerate(param.read_text().split("\n"), start=1):
        tokens = line.split()
        if len(tokens) > 1 and tokens[1] == name:
            return number
    raise AssertionError(name)


def rewrite_zip(src: Path, dst: Path, *, drop: str = "", deflate: str = "") -> None:
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for info in zin.infolist():
            if info.filename == drop:
                continue
            method = zipfile.ZIP_DEFLATED if info.filename == deflate else zipfile.ZIP_STORED
            out = zipfile.ZipInfo(info.filename, date_time=(1980, 1, 1, 0, 0, 0))
            out.compress_type = method
            with zout.open(out, "w") as handle:
                handle.write(zin.read(info))


def load_or_format_error(param: Path) -> Graph | None:
    """Load ``param``; a GraphexecError gives None, anything else fails the test."""
    try:
        return pnnx.load(param)
    except GraphexecError:
        return None


# --------------------------------------------------------------------------------------
# the real export
# --------------------------------------------------------------------------------------
def test_real_export_reads_field_by_field():
    g = pnnx.load(REAL_PARAM)  # the bin defaults to the sibling
    assert len(g.operators) == 13 and len(g.operands) == 12
    ops = {op.name: op for op in g.operators}
    assert [o.name for o in g.input_operands] == ["0"]
    assert [o.name for o in g.output_operands] == ["11"]

    conv = ops["c"]
    assert conv.type == "nn.Conv2d"
    assert conv.params == {
        "bias": True, "dilation": [1, 1], "groups": 1, "in_channels": 3, "kernel_size": [3, 3],
        "out_channels": 8, "padding": [1, 1], "padding_mode": "zeros", "stride": [1, 1],
    }
    assert (conv.attrs["weight"].dtype, conv.attrs["weight"].shape) == ("f32", (8, 3, 3, 3))
    assert conv.attrs["weight"].data.shape == (8, 3, 3, 3) and conv.attrs["bias"].data.dtype == np.float32
    assert ops["bn"].params["eps"] == pytest.approx(1e-5) and isinstance(ops["bn"].params["eps"], float)
    np.testing.assert_array_equal(ops["bn"].attrs["running_var"].data, np.ones(8, np.float32))
    assert ops["torch.clamp_0"].params == {"max": math.inf, "min": -1.0}
    assert ops["torch.mean_1"].params == {"dim": [2, 3], "keepdim": False}
    assert ops["pnnx_expr_7"].params == {"expr": "add(mul(@0,2),1)"}

    # $argument=operand bindings, and operators without any
    assert ops["F.relu_5"].input_names == ["input"] and ops["F.relu_5"].named_input("input").name == "2"
    assert ops["torch.cat_2"].input_names == ["", ""]
    # #operand=(shape)dtype annotations, on inputs and outputs alike
    assert (g.operands["0"].shape, g.operands["0"].dtype) == ((1, 3, 8, 8), "f32")
    assert g.operands["7"].shape == (1, 16) and g.operands["11"].shape is None
    # producers and consumers
    assert g.operands["7"].producer is ops["torch.mean_1"]
    assert {c.name for c in g.operands["7"].consumers} == {"Tensor.slice_4", "torch.clamp_0"}
    assert ops["c"].source == f"{REAL_PARAM}:4"


def test_a_header_may_count_operands_that_pnnx_left_unconnected():
    """pnnx's header counts every operand its graph held, also those its passes folded
    away: a file it wrote that declares more than it uses loads; one that declares fewer
    is refused (the broken corpus checks that)."""
    folder = REPO / "tests" / "fixtures" / "ops" / "indexing" / "embedding_bag_of_constant_bags"
    declared = int((folder / "model.pnnx.param").read_text().splitlines()[1].split()[1])
    g = pnnx.load(folder / "model.pnnx.param")
    assert declared == 8 and len(g.operands) == 5


def test_real_bin_is_zip64_and_read_as_views_of_one_read_only_map():
    with zipfile.ZipFile(REAL_BIN) as z:
        assert all(struct.unpack("<H", i.extra[:2])[0] == 0x0001 for i in z.infolist())  # zip64 extras
    g = pnnx.load(REAL_PARAM, REAL_BIN)
    weights = [a.data for op in g.operators for a in op.attrs.values()]
    assert len(weights) == 8
    maps = set()
    for w in weights:
        assert w.dtype == np.float32 and not w.flags.writeable
        with pytest.raises(ValueError):
            w[...] = 0
        base = w
        while isinstance(base, np.ndarray):  # reshape view -> frombuffer array -> memoryview
            base = base.base
        assert isinstance(base, memoryview) and base.readonly
        assert isinstance(base.obj, mmap.mmap)
        maps.add(id(base.obj))
    assert len(maps) == 1  # one map for the whole file, no per-weight copies
    whole = np.frombuffer(next(iter({id(w): w for w in weights}.values())).base.base.obj, np.uint8)
    raw = REAL_BIN.read_bytes()
    for w in weights:
        assert np.shares_memory(w, whole)
        assert w.tobytes() in raw


def test_real_export_round_trips(tmp_path):
    g = pnnx.load(REAL_PARAM)
    for force_zip64 in (False, True):
        again = round_trip(g, tmp_path, force_zip64=force_zip64)
        assert_same_graph(g, again)
        # writing is deterministic: what we wrote reads back and writes the same text
        assert pnnx.dumps(again)[0] == pnnx.dumps(g)[0]
    original = [line.split() for line in REAL_PARAM.read_text().split("\n")]
    ours = [line.split() for line in pnnx.dumps(g)[0].split("\n")]
    # the same tokens as pnnx wrote, but for the spelling of floats (1.000000e-5 -> 1e-05)
    assert [t for line in ours for t in line if not t.startswith("eps=")] == [
        t for line in original for t in line if not t.startswith("eps=")
    ]


def test_written_bins_are_stored_zips_in_both_variants(tmp_path):
    g = pnnx.load(REAL_PARAM)
    names = ENTRIES
    for force_zip64 in (False, True):
        pnnx.save(g, tmp_path / "g.pnnx.param", force_zip64=force_zip64)
        with zipfile.ZipFile(tmp_path / "g.pnnx.bin") as z:
            infos = z.infolist()
            assert [i.filename for i in infos] == names
            assert all(i.compress_type == zipfile.ZIP_STORED and not i.flag_bits & 0x8 for i in infos)
            assert z.testzip() is None  # CRCs are right
        raw = (tmp_path / "g.pnnx.bin").read_bytes()
        # the local header of a zip64 entry says 0xffffffff and holds the sizes in an extra field
        assert (raw[18:26] == b"\xff" * 8) is force_zip64


def test_saving_over_a_loaded_model_leaves_its_weights_intact(tmp_path):
    g = round_trip(pnnx.load(REAL_PARAM), tmp_path)
    before = g.operators[1].attrs["weight"].data.copy()
    other = Graph()
    other.add_operator("pnnx.Input", "in", [], ["x"])
    big = Attribute.from_array(np.zeros((1000,), np.float32))
    other.add_operator("t.W", "w", ["x"], ["y"], attrs={"w": big})
    other.add_operator("pnnx.Output", "out", ["y"], [])
    pnnx.save(other, tmp_path / "g.pnnx.param")  # same path as g's bin, now a new file
    np.testing.assert_array_equal(g.operators[1].attrs["weight"].data, before)
    assert not any(p.name.endswith(".tmp") for p in tmp_path.iterdir())


# --------------------------------------------------------------------------------------
# values
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("None", None),
        ("True", True),
        ("False", False),
        ("0", 0),
        ("-7", -7),
        ("1.0", 1.0),
        ("-1.5", -1.5),
        ("1.000000e-5", 1e-5),
        ("1e-05", 1e-5),
        ("3.e2", 300.0),
        (".5", 0.5),
        ("inf", math.inf),
        ("-inf", -math.inf),
        ("zeros", "zeros"),
        ("", ""),
        ("()", []),
        ("[]", []),
        ("(192)", [192]),
        ("(1,1)", [1, 1]),
        ("[2,-3]", [2, -3]),
        ("(1.0,2)", [1.0, 2.0]),
        ("(nearest,bilinear)", ["nearest", "bilinear"]),
        ("(a,1)", ["a", "1"]),
        ("add(mul(@0,2),1)", "add(mul(@0,2),1)"),
        ("[int(size(@0,0)),-1]", "[int(size(@0,0)),-1]"),
        ("(True,1)", "(True,1)"),
        ("%batch", "%batch"),
        ("(1,%w)", "(1,%w)"),
        ("1.000000e+00+2.000000e+00j", complex(1, 2)),
        ("1.000000e+00+-2.000000e+00j", complex(1, -2)),  # how pnnx's "%e+%ej" writes a negative part
        ("1.0-2.0j", complex(1, -2)),
        ("(1.0+2.0j,0.0-1.0j)", [complex(1, 2), complex(0, -1)]),
        ("12j", "12j"),
        ("1_000", "1_000"),
        ("\u0663", "\u0663"),  # a non-ASCII digit is text, not a number
    ],
)
def test_parse_value(text, value):
    assert same_param(pnnx.parse_value(text), value)


def test_parse_value_nan():
    assert math.isnan(pnnx.parse_value("nan")) and math.isnan(pnnx.parse_value("-nan"))
    both = pnnx.parse_value("(nan,1.0)")
    assert math.isnan(both[0]) and both[1] == 1.0
    # pnnx writes NaN as "nan.0" (masked_fill(m, float('nan')) gives value=nan.0)
    assert math.isnan(pnnx.parse_value("nan.0")) and pnnx.parse_value("-inf.0") == -math.inf
    assert pnnx.parse_value("nanny") == "nanny"


def test_parse_value_refuses_absurdly_long_integers():
    with pytest.raises(ValueError, match="digits"):
        pnnx.parse_value("9" * 5000)


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (np.float32(0.5), "0.5"),
        (np.int64(3), "3"),
        (np.bool_(True), "True"),
        ((1, 2), "(1,2)"),
        ([], "()"),
        (float("inf"), "inf"),
        (-0.0, "-0.0"),
        (1e-5, "1e-05"),
        (complex(1, -2), "1.0-2.0j"),
        ("", ""),
    ],
)
def test_format_value(value, text):
    assert pnnx.format_value(value) == text


@pytest.mark.parametrize(
    "value",
    [
        "inf", "None", "True", "12", "a b", "(1,2)",
        ["1", "2"], ["a,b"], [""], [True], [None], [1, 2.0], [[1]], {"a": 1}, object(),
    ],
)
def test_format_value_refuses_what_would_not_read_back(value):
    with pytest.raises(ValueError):
        pnnx.format_value(value)


# --------------------------------------------------------------------------------------
# random graphs round-trip
# --------------------------------------------------------------------------------------
_NAME = st.from_regex(r"[A-Za-z_][A-Za-z0-9_:]{0,6}", fullmatch=True)
_KEY = st.from_regex(r"[a-z_][a-z0-9_]{0,6}", fullmatch=True)
_WORD = st.from_regex(r"[A-Za-z_][A-Za-z0-9_.]{0,8}", fullmatch=True).filter(
    lambda s: pnnx.parse_value(s) == s  # not "inf", "nan", "None", "True", ...
)
_EXPR = st.sampled_from(
    ["add(@0,mul(@1,2))", "[int(size(@0,0)),-1]", "%batch", "floor_divide(@0,2.5)", "(1,%w)"]
)
_INT32 = st.integers(-(2**31), 2**31 - 1)
_FLOATS = st.floats(allow_nan=True, allow_infinity=True)
PARAM_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    _INT32,
    _FLOATS,
    st.floats(width=32),
    st.complex_numbers(allow_nan=True, allow_infinity=True),
    _WORD,
    _EXPR,
    st.lists(_INT32, max_size=4),
    st.lists(_FLOATS, min_size=1, max_size=4),
    st.lists(_WORD.filter(lambda s: not s[0].isdigit() and s[0] != "-"), min_size=1, max_size=4),
)
#: Every numpy-held pnnx type; bf16 values come from bf16 bit patterns, so they are exact.
_HELD = {name: dtypes.numpy_dtype(name) for name in dtypes.PNNX_TYPES if name != "bf16"}


@st.composite
def attributes(draw) -> Attribute:
    type_name = draw(st.sampled_from(sorted(dtypes.PNNX_TYPES)))
    shape = tuple(draw(st.lists(st.integers(0, 4), max_size=3)))
    if type_name == "bf16":
        bits = draw(hnp.arrays(np.uint16, shape))
        data = (bits.astype(np.uint32) << 16).view(np.float32)
    else:
        data = draw(hnp.arrays(_HELD[type_name], shape))
    if shape == () and draw(st.booleans()):
        return Attribute(type_name, (), None)  # what pnnx itself would hold: no data
    return Attribute(type_name, shape, data)


_DIM = st.one_of(st.integers(0, 2**31 - 1), st.none(), st.from_regex(r"[a-z][a-z0-9_]{0,4}", fullmatch=True))
ANNOTATIONS = st.one_of(
    st.none(),
    st.tuples(
        st.lists(_DIM, max_size=5).map(tuple),
        st.sampled_from(sorted(dtypes.PNNX_TYPES | dtypes.ANNOTATION_ONLY)),
    ),
)


@st.composite
def graphs(draw) -> Graph:
    graph = Graph()
    operands: list[str] = []

    def new_operand() -> str:
        prefix = draw(st.from_regex(r"[A-Za-z_.]{0,4}", fullmatch=True))
        name = f"{prefix}{len(operands)}"  # a prefix without digits + a counter: unique names
        operands.append(name)
        return name

    n_inputs = draw(st.integers(0, 2))
    for i in range(n_inputs):
        graph.add_operator("pnnx.Input", f"pnnx_input_{i}", [], [new_operand()])
    for i in range(draw(st.integers(0, 6))):
        reads = draw(st.lists(st.sampled_from(operands), max_size=3)) if operands else []
        writes = [new_operand() for _ in range(draw(st.integers(0, 2)))]
        params = draw(st.dictionaries(_KEY, PARAM_VALUES, max_size=4))
        attrs = draw(st.dictionaries(_KEY, attributes(), max_size=3))
        op = graph.add_operator(draw(_NAME), f"{draw(_NAME)}_{i}", reads, writes, params, attrs)
        # $bindings: a repeated operand can only have its earlier readings named
        names, unnamed = [], set()
        for operand in reads:
            key = draw(st.one_of(st.just(""), _KEY)) if operand not in unnamed else ""
            if not key:
                unnamed.add(operand)
            names.append(key)
        op.input_names = names
    if operands:
        shown = draw(st.lists(st.sampled_from(operands), min_size=1, max_size=3))
        graph.add_operator("pnnx.Output", "pnnx_output_0", shown, [])
    for name in graph.operands:
        note = draw(ANNOTATIONS)
        if note is not None:
            graph.operands[name].shape, graph.operands[name].dtype = note
    graph.validate()
    return graph


@IO_SETTINGS
@given(graph=graphs(), force_zip64=st.booleans())
def test_random_graphs_round_trip(graph, force_zip64):
    with tempfile.TemporaryDirectory() as folder:
        again = round_trip(graph, Path(folder), force_zip64=force_zip64)
        assert_same_graph(graph, again)
        assert pnnx.dumps(again)[0] == pnnx.dumps(graph)[0]


@settings(max_examples=100, deadline=None)
@given(value=PARAM_VALUES)
def test_param_values_round_trip_through_text(value):
    assert same_param(pnnx.parse_value(pnnx.format_value(value)), pnnx._plain(value))


# --------------------------------------------------------------------------------------
# what the writer refuses
# --------------------------------------------------------------------------------------
def _tiny(**change) -> Graph:
    g = Graph()
    g.add_operator("pnnx.Input", "in", [], ["x"])
    w = Attribute.from_array(np.ones(2, np.float32))
    op = g.add_operator("t.Op", "op", ["x"], ["y"], params={"k": 1}, attrs={"w": w})
    g.add_operator("pnnx.Output", "out", ["y"], [])
    for key, value in change.items():
        setattr(op, key, value)
    return g


@pytest.mark.parametrize(
    "change",
    [
        {"name": "has space"},
        {"name": ""},
        {"type": "a\tb"},
        {"params": {"k=": 1}},
        {"params": {"@k": 1}},
        {"params": {"k": "two words"}},
        {"params": {"k": "None"}},
        {"attrs": {"w": Attribute("f32", (3,), np.ones(2, np.float32))}},
        {"attrs": {"w": Attribute("f32", (2,), None)}},
        {"attrs": {"w": Attribute("f33", (2,), np.ones(2, np.float32))}},
        {"attrs": {"w": Attribute("f32", (-1,), np.ones(2, np.float32))}},
        {"attrs": {"a=b": Attribute.from_array(np.ones(2, np.float32))}},
        {"input_names": ["a", "b"]},
        {"input_names": ["has space"]},
    ],
)
def test_the_writer_refuses_graphs_that_would_not_read_back(tmp_path, change):
    with pytest.raises(ModelFormatError, match="cannot write"):
        pnnx.save(_tiny(**change), tmp_path / "g.pnnx.param")
    assert not list(tmp_path.iterdir())  # nothing half-written


def test_the_writer_refuses_clashing_entry_names_and_bad_annotations(tmp_path):
    g = Graph()
    g.add_operator("t.A", "a.b", [], ["x"], attrs={"c": Attribute.from_array(np.ones(1, np.float32))})
    g.add_operator("t.A", "a", [], ["y"], attrs={"b.c": Attribute.from_array(np.ones(1, np.float32))})
    with pytest.raises(ModelFormatError, match="same entry name"):
        pnnx.dumps(g)
    for shape, dtype in [((1, -2), "f32"), ((1, "a,b"), "f32"), ((1,), "q7"), ((True,), "f32")]:
        g = _tiny()
        g.operands["x"].shape, g.operands["x"].dtype = shape, dtype
        with pytest.raises(ModelFormatError, match="annotation"):
            pnnx.dumps(g)


def test_a_repeated_input_must_be_named_in_order(tmp_path):
    g = Graph()
    g.add_operator("pnnx.Input", "in", [], ["x"])
    op = g.add_operator("torch.mul", "mul", ["x", "x"], ["y"])
    op.input_names = ["", "other"]
    with pytest.raises(ModelFormatError, match="twice"):
        pnnx.dumps(g)
    op.input_names = ["input", "other"]
    assert pnnx.load(_saved(g, tmp_path)).operators[1].input_names == ["input", "other"]


def _saved(graph: Graph, folder: Path) -> Path:
    pnnx.save(graph, folder / "g.pnnx.param")
    return folder / "g.pnnx.param"


def test_zero_size_and_zero_dim_attributes(tmp_path):
    g = Graph()
    g.add_operator(
        "t.A", "a", [], ["x"],
        attrs={
            "empty": Attribute.from_array(np.zeros((0, 3), np.float32)),
            "scalar": Attribute.from_array(np.array(2.5, np.float64)),
            "nothing": Attribute("f32", (), None),
        },
    )
    again = pnnx.load(_saved(g, tmp_path))
    attrs = again.operators[0].attrs
    assert attrs["empty"].data.shape == (0, 3)
    assert attrs["scalar"].data.shape == () and attrs["scalar"].data == 2.5
    assert attrs["nothing"].data is None
    # pnnx reads an empty entry as a missing one: a zero-size weight needs no entry at all
    rewrite_zip(tmp_path / "g.pnnx.bin", tmp_path / "h.bin", drop="a.empty")
    (tmp_path / "h.bin").replace(tmp_path / "g.pnnx.bin")
    assert pnnx.load(tmp_path / "g.pnnx.param").operators[0].attrs["empty"].data.shape == (0, 3)


def test_an_empty_bin_serves_a_model_without_weights(tmp_path):
    (tmp_path / "g.pnnx.param").write_text("7767517\n2 1\npnnx.Input in 0 1 x\npnnx.Output out 1 0 x\n")
    (tmp_path / "g.pnnx.bin").write_bytes(b"")
    assert len(pnnx.load(tmp_path / "g.pnnx.param").operators) == 2
    (tmp_path / "g.pnnx.bin").unlink()  # and so does no bin at all
    assert len(pnnx.load(tmp_path / "g.pnnx.param").operators) == 2


# --------------------------------------------------------------------------------------
# damaged files
# --------------------------------------------------------------------------------------
def test_missing_files(tmp_path, real_copy):
    with pytest.raises(ModelFormatError, match="cannot open the param file") as info:
        pnnx.load(tmp_path / "nope.pnnx.param")
    assert info.value.path == str(tmp_path / "nope.pnnx.param")
    with pytest.raises(ModelFormatError, match="cannot open the weight file"):
        pnnx.load(real_copy, tmp_path / "nope.pnnx.bin")
    with pytest.raises(ModelFormatError, match="the weight file is not a regular file"):
        pnnx.load(real_copy, tmp_path)  # a folder
    (tmp_path / "m.pnnx.bin").unlink()
    with pytest.raises(WeightError, match=r"m\.pnnx\.bin: the weight file does not exist"):
        pnnx.load(real_copy)


def test_not_text_not_zip(tmp_path, real_copy):
    real_copy.write_bytes(b"\xff\xfe7767517\n")
    with pytest.raises(ModelFormatError, match="not a text file"):
        pnnx.load(real_copy)
    lines = REAL_PARAM.read_bytes().split(b"\n")
    lines[4] = lines[4].replace(b" ", b" \xa3\x12 ", 1)  # operand names pnnx once wrote as garbage
    real_copy.write_bytes(b"\n".join(lines))
    with pytest.raises(ModelFormatError, match=r"m.pnnx.param:5: the line holds bytes that are not UTF-8") as caught:
        pnnx.load(real_copy)
    assert caught.value.line == 5
    shutil.copy(REAL_PARAM, real_copy)
    shutil.copy(REAL_PARAM, real_copy)
    (tmp_path / "m.pnnx.bin").write_bytes(b"PK\x03\x04 not really a zip")
    with pytest.raises(ModelFormatError, match="zip"):
        pnnx.load(real_copy)


@pytest.mark.parametrize(
    ("header", "line", "message"),
    [
        ("7767518\n13 12", 1, "magic"),
        ("\n13 12", 1, "magic number"),
        ("7767517\n14 12", 2, "declares 14 operators"),
        ("7767517\n12 12", 2, "declares 12 operators"),
        ("7767517\n13 11", 2, "declares 11 operands"),
        ("7767517\n13", 2, "operand count"),
        ("7767517\n13 -12", 2, "operand count"),
        ("7767517\n13 1" + "0" * 200, 2, "operand count"),
    ],
)
def test_wrong_header(real_copy, header, line, message):
    text = real_copy.read_text().split("\n", 2)[2]
    real_copy.write_text(header + "\n" + text)
    with pytest.raises(ModelFormatError, match=message) as info:
        pnnx.load(real_copy)
    assert (info.value.path, info.value.line) == (str(real_copy), line)
    assert f"{real_copy}:{line}:" in str(info.value)


@pytest.mark.parametrize(
    ("operator", "edit", "message"),
    [
        ("c", lambda s: s.replace(" 1 1 0 1 ", " 1 x 0 1 "), "counts must be numbers"),
        ("c", lambda s: s.replace(" 1 1 0 1 ", " 1 -1 0 1 "), "counts must be numbers"),
        ("c", lambda s: " ".join(s.split()[:5]), "names fewer"),
        ("c", lambda s: " ".join(s.split()[:3]), "needs"),
        ("c", lambda s: s.replace("@weight=(8,3,3,3)f32", "@weight=(8,3,3,3)f33"), "unknown type 'f33'"),
        ("c", lambda s: s.replace("@weight=(8,3,3,3)f32", "@weight=(8,3,?,3)f32"), "bad dimension"),
        ("c", lambda s: s.replace("@weight=(8,3,3,3)f32", "@weight=8,3,3,3"), "should look like"),
        ("c", lambda s: s.replace("#1=(1,8,8,8)f32", "#1=(1,8,8,8)x9"), "unknown type 'x9'"),
        ("c", lambda s: s.replace("#1=(1,8,8,8)f32", "#1=(1,-8,8,8)f32"), "bad dimension"),
        ("c", lambda s: s.replace("#1=(1,8,8,8)f32", "#1=(1,%,8,8)f32"), "bad dimension"),
        ("c", lambda s: s.replace("#1=(1,8,8,8)f32", "#99=(1,8,8,8)f32"), "neither reads nor writes"),
        ("c", lambda s: s + " groups=2", "given twice"),
        ("c", lambda s: s + " @bias=(8)f32", "given twice"),
        ("c", lambda s: s + " stray", "expected key=value"),
        ("c", lambda s: s + " =1", "expected key=value"),
        ("c", lambda s: s + " @=1", "expected key=value"),
        ("c", lambda s: s + " groups2=" + "1" * 200, "digits"),
        ("F.relu_5", lambda s: s.replace("$input=2", "$input=3"), "not one of its inputs"),
        ("F.relu_5", lambda s: s.replace(" 1 1 2 3 ", " 1 1 2 a=3 "), "not an operand name"),
    ],
)
def test_a_malformed_line_names_the_file_and_the_line(real_copy, operator, edit, message):
    number = line_of(real_copy, operator)
    edit_line(real_copy, number, edit)
    with pytest.raises(ModelFormatError, match=message) as info:
        pnnx.load(real_copy)
    assert (info.value.path, info.value.line) == (str(real_copy), number)
    assert str(info.value).startswith(f"{real_copy}:{number}: ")


@pytest.mark.parametrize("changed", ["#1=(1,8,8,9)f32", "#1=(1,8,8)f32", "#1=(1,8,8,8)f16"])
def test_annotations_of_one_operand_that_disagree_name_both(real_copy, changed):
    """The producer and each reader annotate an operand; one that contradicts another is
    refused at its line, quoting the annotation it contradicts."""
    edit_line(real_copy, line_of(real_copy, "c"), lambda s: s.replace("#1=(1,8,8,8)f32", changed))
    with pytest.raises(ModelFormatError, match=re.escape(f"contradicts the earlier annotation {changed}")) as info:
        pnnx.load(real_copy)
    assert info.value.line > line_of(real_copy, "c")


def test_an_unknown_size_agrees_with_a_number_and_the_number_is_kept(real_copy):
    edit_line(real_copy, line_of(real_copy, "c"), lambda s: s.replace("#1=(1,8,8,8)f32", "#1=(1,?,%h,8)f32"))
    assert pnnx.load(real_copy).operands["1"].shape == (1, 8, 8, 8)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda lines: lines[:4] + [lines[4].replace("bn  ", "c   ", 1)] + lines[5:], "operators are named"),
        (lambda lines: lines[:4] + [lines[4].replace(" 1 2 ", " 1 1 ", 1)] + lines[5:], "produced twice"),
    ],
)
def test_structure_errors_while_reading_name_the_line(real_copy, edit, message):
    lines = real_copy.read_text().split("\n")
    real_copy.write_text("\n".join(edit(lines)))
    with pytest.raises(GraphStructureError, match=message) as info:
        pnnx.load(real_copy)
    assert str(info.value).startswith(f"{real_copy}:5: ")


def test_a_cycle_in_a_file_names_its_operators(tmp_path):
    (tmp_path / "g.pnnx.param").write_text(
        "7767517\n5 4\n"
        "pnnx.Input in 0 1 x\n"
        "t.A a 2 1 x c a\n"
        "t.B b 1 1 a b\n"
        "t.C c 1 1 b c\n"
        "pnnx.Output out 1 0 c\n"
    )
    with pytest.raises(GraphStructureError, match="cycle through: a, b, c") as info:
        pnnx.load(tmp_path / "g.pnnx.param")
    assert str(tmp_path / "g.pnnx.param") in str(info.value)


def test_an_unproduced_input_is_an_error(tmp_path):
    (tmp_path / "g.pnnx.param").write_text("7767517\n2 2\npnnx.Input in 0 1 x\nt.A a 2 0 x ghost\n")
    with pytest.raises(GraphStructureError, match="'ghost', which no operator produces"):
        pnnx.load(tmp_path / "g.pnnx.param")


def test_missing_entry(tmp_path, real_copy):
    rewrite_zip(REAL_BIN, tmp_path / "m.pnnx.bin", drop="bn.running_var")
    missing = r"'bn\.running_var' \(\(8\)f32\) is missing: it is not in the bin"
    with pytest.raises(WeightError, match=missing) as info:
        pnnx.load(real_copy)
    assert info.value.path == str(tmp_path / "m.pnnx.bin")


def test_deflated_entry(tmp_path, real_copy):
    rewrite_zip(REAL_BIN, tmp_path / "m.pnnx.bin", deflate="c.weight")
    with pytest.raises(ModelFormatError, match="'c.weight' is compressed"):
        pnnx.load(real_copy)


@pytest.mark.parametrize(
    ("old", "new"),
    [("@bias=(8)f32", "@bias=(9)f32"), ("@bias=(8)f32", "@bias=(8)f64"), ("@bias=(8)f32", "@bias=(2,2)f32")],
)
def test_entry_size_disagrees_with_the_declared_shape(real_copy, old, new):
    number = line_of(real_copy, "c")
    edit_line(real_copy, number, lambda s: s.replace(old, new))
    with pytest.raises(WeightError, match=r"'c\.bias' should hold \d+ bytes .* but holds 32"):
        pnnx.load(real_copy)


def test_entries_that_break_the_stored_zip_rules(tmp_path, real_copy):
    pnnx.save(pnnx.load(REAL_PARAM), tmp_path / "v.pnnx.param")  # classic entries: sizes in the directory
    raw = (tmp_path / "v.pnnx.bin").read_bytes()
    cd = zipfile.ZipFile(io.BytesIO(raw)).start_dir
    cases = [(8, 0x01, "encrypted"), (20, 0x01, "sizes differ"), (42, 0x01, "no local header")]
    for offset, mask, message in cases:
        damaged = bytearray(raw)
        damaged[cd + offset] ^= mask  # flags / compressed size / header offset of the first entry
        (tmp_path / "m.pnnx.bin").write_bytes(bytes(damaged))
        with pytest.raises(ModelFormatError, match=message):
            pnnx.load(real_copy)


@functools.lru_cache(maxsize=None)
def _variant(kind: str) -> bytes:
    """The real bin as pnnx wrote it, or as we write it with classic or zip64 entries."""
    if kind == "pnnx":
        return REAL_BIN.read_bytes()
    with tempfile.TemporaryDirectory() as folder:
        pnnx.save(pnnx.load(REAL_PARAM), Path(folder) / "v.pnnx.param", force_zip64=kind == "zip64")
        return (Path(folder) / "v.pnnx.bin").read_bytes()


def _weights(graph: Graph) -> dict[tuple[str, str], bytes]:
    return {(op.name, key): a.data.tobytes() for op in graph.operators for key, a in op.attrs.items()}


_REFERENCE = _weights(pnnx.load(REAL_PARAM))


@pytest.mark.parametrize("kind", ["pnnx", "classic", "zip64"])
@IO_SETTINGS
@given(data=st.data())
def test_a_flipped_byte_in_the_bins_directory_raises_or_changes_nothing(kind, data):
    """Never another exception, and never weights that silently differ."""
    with tempfile.TemporaryDirectory() as folder:
        folder = Path(folder)
        raw = _variant(kind)
        start = zipfile.ZipFile(io.BytesIO(raw)).start_dir
        where = data.draw(st.integers(start, len(raw) - 1), label="offset")
        mask = data.draw(st.integers(1, 255), label="xor")
        damaged = bytearray(raw)
        damaged[where] ^= mask
        shutil.copy(REAL_PARAM, folder / "m.pnnx.param")
        (folder / "m.pnnx.bin").write_bytes(bytes(damaged))
        graph = load_or_format_error(folder / "m.pnnx.param")
        assert graph is None or _weights(graph) == _REFERENCE


@pytest.mark.parametrize("kind", ["pnnx", "classic", "zip64"])
@IO_SETTINGS
@given(data=st.data())
def test_a_flipped_byte_in_a_local_header_raises_or_changes_nothing(kind, data):
    with tempfile.TemporaryDirectory() as folder:
        folder = Path(folder)
        raw = _variant(kind)
        infos = zipfile.ZipFile(io.BytesIO(raw)).infolist()
        info = data.draw(st.sampled_from(infos), label="entry")
        h = info.header_offset
        name_len, extra_len = struct.unpack("<HH", raw[h + 26 : h + 30])
        where = data.draw(st.integers(h, h + 30 + name_len + extra_len - 1), label="offset")
        damaged = bytearray(raw)
        damaged[where] ^= data.draw(st.integers(1, 255), label="xor")
        shutil.copy(REAL_PARAM, folder / "m.pnnx.param")
        (folder / "m.pnnx.bin").write_bytes(bytes(damaged))
        graph = load_or_format_error(folder / "m.pnnx.param")
        assert graph is None or _weights(graph) == _REFERENCE


@IO_SETTINGS
@given(cut=st.integers(0, REAL_BIN.stat().st_size - 1))
def test_a_truncated_bin_raises(cut):
    with tempfile.TemporaryDirectory() as folder:
        folder = Path(folder)
        shutil.copy(REAL_PARAM, folder / "m.pnnx.param")
        (folder / "m.pnnx.bin").write_bytes(REAL_BIN.read_bytes()[:cut])
        with pytest.raises(GraphexecError):
            pnnx.load(folder / "m.pnnx.param")


@IO_SETTINGS
@given(cut=st.integers(0, REAL_PARAM.stat().st_size - 1))
def test_a_truncated_param_raises_unless_only_the_last_line_lost_a_tail(cut):
    text = REAL_PARAM.read_bytes()
    last_line_start = text.rstrip(b"\n").rfind(b"\n") + 1
    with tempfile.TemporaryDirectory() as folder:
        folder = Path(folder)
        (folder / "m.pnnx.param").write_bytes(text[:cut])
        shutil.copy(REAL_BIN, folder / "m.pnnx.bin")
        graph = load_or_format_error(folder / "m.pnnx.param")
        if cut <= last_line_start:
            assert graph is None


@settings(max_examples=80, deadline=None)
@given(data=st.data())
def test_any_mangled_param_text_raises_only_graphexec_errors(data):
    text = REAL_PARAM.read_text()
    where = data.draw(st.integers(0, len(text) - 1), label="offset")
    junk = data.draw(st.text(alphabet=st.characters(codec="utf-8"), min_size=0, max_size=4), label="junk")
    length = data.draw(st.integers(0, 3), label="replace")
    mangled = text[:where] + junk + text[where + length :]
    archive = pnnx.WeightArchive(REAL_BIN)
    try:
        pnnx.parse(mangled, archive, path="m.pnnx.param")
    except GraphexecError:
        pass


def test_weight_archive_basics():
    archive = pnnx.WeightArchive(REAL_BIN)
    assert archive.names() == ENTRIES
    assert "c.weight" in archive and "c.nope" not in archive
    assert archive.size("c.weight") == 8 * 3 * 3 * 3 * 4
    view = archive.view("l.bias")
    assert view.readonly and view.nbytes == 16
    assert pnnx.default_bin_path("a/b.pnnx.param") == Path("a/b.pnnx.bin")
    assert pnnx.default_bin_path("a/b.param") == Path("a/b.bin")
    assert pnnx.default_bin_path("a/b") == Path("a/b.bin")


def test_special_files_are_refused_before_opening(tmp_path, real_copy):
    """A FIFO would block open() forever and /dev/zero would never end: neither is read."""
    import os

    fifo = tmp_path / "fifo.pnnx.param"
    os.mkfifo(fifo)
    with pytest.raises(ModelFormatError, match="not a regular file"):
        pnnx.load(fifo)
    with pytest.raises(ModelFormatError, match="not a regular file"):
        pnnx.load(real_copy, fifo)
    with pytest.raises(ModelFormatError, match="not a regular file"):
        pnnx.load("/dev/zero")


def test_a_flipped_byte_inside_a_weight_is_caught_by_its_crc(tmp_path, real_copy):
    graph = pnnx.load(real_copy)
    bin_path = real_copy.with_name(real_copy.name.replace(".param", ".bin"))
    data = bytearray(bin_path.read_bytes())
    weight = graph.operators[1].attrs["weight"].data
    del graph
    position = bytes(data).find(weight.tobytes()[:16]) + 5
    data[position] ^= 0x40
    bin_path.write_bytes(bytes(data))
    with pytest.raises(WeightError, match="CRC-32"):
        pnnx.load(real_copy)


def _shared_convolution(weight_data: np.ndarray) -> Graph:
    """A graph as pnnx writes a module registered twice: ``nn.Conv2d`` with its own weight and
    bias, and the weight (here ``weight_data``) and bias handed over again as inputs."""
    rng = np.random.default_rng(0)
    weight, bias = rng.standard_normal((4, 1, 3, 3)).astype(np.float32), rng.standard_normal(4).astype(np.float32)
    graph = Graph()
    graph.add_operator("pnnx.Input", "in", [], ["x"])
    graph.add_operator("pnnx.Attribute", "w", [], ["w"], attrs={"data": Attribute.from_array(weight_data(weight))})
    graph.add_operator("pnnx.Attribute", "b", [], ["b"], attrs={"data": Attribute.from_array(bias)})
    graph.add_operator("nn.Conv2d", "conv", ["w", "b", "x"], ["y"],
                       params=dict(in_channels=4, out_channels=4, kernel_size=[3, 3], groups=4, padding=[1, 1], bias=True),
                       attrs={"weight": Attribute.from_array(weight), "bias": Attribute.from_array(bias)})
    graph.add_operator("pnnx.Output", "out", ["y"], [])
    return graph


def test_a_module_registered_twice_loads_with_its_weights_read_once():
    """pnnx hands a shared module's weight and bias over again as inputs (CoaT); inputs that
    restate the operator's own attributes are dropped with their attribute operators."""
    folder = OPS / "conv" / "conv2d_shared_module"
    graph = pnnx.load(folder / "model.pnnx.param")
    convs = [op for op in graph.operators if op.type == "nn.Conv2d"]
    assert len(convs) == 2 and all(len(op.inputs) == 1 for op in convs)
    assert not [op for op in graph.operators if op.type == "pnnx.Attribute"]
    inputs, outputs = load_io(folder)
    np.testing.assert_allclose(Engine.load(folder / "model.pnnx.param").forward(*inputs), outputs[0],
                               rtol=1e-5, atol=1e-6)

    same = _shared_convolution(lambda w: w)
    pnnx._drop_restated_weights(same)
    assert [op.name for op in same.operators] == ["in", "conv", "out"]
    (conv,) = [op for op in same.operators if op.type == "nn.Conv2d"]
    assert [o.name for o in conv.inputs] == ["x"] and "w" not in same.operands and "b" not in same.operands
    other = _shared_convolution(lambda w: w * 2)  # inputs that are not its own weights stay
    pnnx._drop_restated_weights(other)
    (conv,) = [op for op in other.operators if op.type == "nn.Conv2d"]
    assert [o.name for o in conv.inputs] == ["w", "b", "x"]


def test_operator_names_holding_spaces_are_read_whole():
    """pnnx names operators after ModuleDict keys, spaces included (``cells.(0, 1)``): the
    name is joined back, its weights are found under it, and extract takes it."""
    folder = OPS / "plumbing" / "names_with_spaces"
    graph = pnnx.load(folder / "model.pnnx.param")
    assert [op.name for op in graph.operators if op.type.startswith("nn.")] == ["cells.(0, 1)", "cells.(1, 1)"]
    (linear,) = [op for op in graph.operators if op.type == "nn.Linear"]
    assert linear.attrs["weight"].shape == (4, 3)
    inputs, outputs = load_io(folder)
    y, inner = Engine.load(folder / "model.pnnx.param").forward(*inputs, extract=["cells.(0, 1)"])
    np.testing.assert_allclose(y, outputs[0], rtol=1e-5, atol=1e-6)
    assert inner["cells.(0, 1)"].shape == (2, 4)
