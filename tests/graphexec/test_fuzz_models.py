"""Whole real models, damaged at random: they load and run, or raise a GraphexecError.

Each case takes a real pnnx export (an example network or one of the per-operator
fixtures), damages it (byte flips and truncations of either file; line edits of the param
file: lines deleted, duplicated or swapped, a number, a count, a token, a dtype, a shape
annotation or a param value changed; the output nested in tuples up to 400 deep, doubling
or not; a list param made 10^5 items long; an expression nested 5,000 deeper; a bin entry
renamed up the tree or onto another's name; 10^4 empty entries added to the bin), then
``Engine.load``s it and, when that works, runs ``forward`` on inputs of the shapes it
declares. A second test makes hostile calls to ``forward`` on the example models (other
dtypes, ranks and sizes, broadcast views of 2^40 images, no arrays at all, wrong names and
counts, odd timeouts and extracts). Every outcome must be a result or a
GraphexecError subclass, within a time bound (load is timed; forward gets a ``timeout``)
and a memory bound (the growth of the process's peak RSS during the case).

Memory: when ``Engine.load`` takes a ``memory_limit``, the damaged model is loaded with a
small one and graphexec itself must refuse plans that would not fit. Without it, a plan
whose tensors would need more than :data:`MEMORY_BUDGET` is not run (the case only counts
as ``skipped``), since running it could take the test's machine down; nor is a model
whose declared inputs alone exceed it (the caller would be the one allocating them). In
both modes the process's address space is capped a few GiB above what it holds while this
module runs, so an allocation nobody predicted fails with MemoryError (which the test
reports) instead of waking the kernel's OOM killer.

``GRAPHEXEC_FUZZ_EXAMPLES=N`` runs N cases instead of the short default;
``pytest --hypothesis-show-statistics`` shows the outcomes by kind.
"""

from __future__ import annotations

import inspect
import io
import math
import os
import re
import resource
import tempfile
import time
import warnings
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import numpy as np
import pytest
from graphexec.layers.specs import SequenceSpec, TensorSpec
from hypothesis import HealthCheck, event, given, note, settings
from hypothesis import strategies as st

from graphexec import Engine, GraphexecError
from tests.golden import OPS
from tests.paths import REPO

ROOT = REPO
EXAMPLES = ROOT / "examples" / "models"

#: Cases per run; the environment variable (read only here) runs the fuzzer long.
MAX_EXAMPLES = int(os.environ.get("GRAPHEXEC_FUZZ_EXAMPLES", "300"))
#: Seconds a load may take (the largest model here loads in about 0.1 s).
LOAD_SECONDS = 10.0
#: The timeout given to forward, and how much later than it forward must have returned.
FORWARD_TIMEOUT = 5.0
FORWARD_GRACE = 10.0
#: Bytes of tensors a damaged model may plan (the memory_limit, when there is one).
MEMORY_BUDGET = 256 * 2**20
#: How much the process's peak RSS may grow during one case.
RSS_GROWTH = 768 * 2**20
#: Headroom of the address-space cap over what the process has mapped at the start.
ADDRESS_SPACE_HEADROOM = 6 * 2**30

HAS_MEMORY_LIMIT = "memory_limit" in inspect.signature(Engine.load).parameters
LOAD_OPTIONS: dict[str, object] = {"memory_limit": MEMORY_BUDGET} if HAS_MEMORY_LIMIT else {}


# --------------------------------------------------------------------------------------
# the models
# --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Model:
    name: str
    param: Path
    bin: Path
    io: Path


def _models() -> list[Model]:
    examples = [
        Model(p.name.removesuffix(".pnnx.param"), p, p.with_name(p.name.replace(".param", ".bin")),
              p.with_name(p.name.replace(".pnnx.param", ".io.npz")))
        for p in sorted(EXAMPLES.glob("*.pnnx.param"))
    ]
    ops = [
        Model(f"{p.parent.parent.name}/{p.parent.name}", p, p.with_suffix(".bin"), p.parent / "io.npz")
        for p in sorted(OPS.glob("*/*/model.pnnx.param"))
    ]
    return examples + ops


MODELS = _models()
EXAMPLE_MODELS = [m for m in MODELS if m.param.parent == EXAMPLES]
OP_MODELS = [m for m in MODELS if m.param.parent != EXAMPLES]


@cache
def _original(model: Model) -> tuple[bytes, bytes]:
    return model.param.read_bytes(), model.bin.read_bytes() if model.bin.exists() else b""


@cache
def _inputs(model: Model) -> tuple[np.ndarray, ...]:
    """The inputs in0, in1, ... saved with the export."""
    if not model.io.exists():
        return ()
    with np.load(model.io) as saved:
        return tuple(saved[f"in{i}"] for i in range(sum(k.startswith("in") for k in saved.files)))


@cache
def _zip_structure(model: Model) -> tuple[tuple[int, int], ...]:
    """Byte ranges of the bin's local headers and central directory (not the weights)."""
    raw = _original(model)[1]
    if not raw:
        return ()
    ranges = []
    archive = zipfile.ZipFile(io.BytesIO(raw))
    for info in archive.infolist():
        h = info.header_offset
        name_len, extra_len = int.from_bytes(raw[h + 26 : h + 28], "little"), int.from_bytes(raw[h + 28 : h + 30], "little")
        ranges.append((h, h + 30 + name_len + extra_len))
    ranges.append((archive.start_dir, len(raw)))
    return tuple(ranges)


# --------------------------------------------------------------------------------------
# damage
# --------------------------------------------------------------------------------------
@dataclass
class Files:
    """The two files of one case, being damaged."""

    model: Model
    param: bytes
    bin: bytes
    done: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        return self.param.decode("utf-8", "surrogateescape").split("\n")

    def set_lines(self, lines: list[str]) -> None:
        self.param = "\n".join(lines).encode("utf-8", "surrogateescape")


Draw = Callable[..., object]

DTYPES = ["f32", "f64", "f16", "bf16", "i64", "i32", "i16", "i8", "u8", "bool", "c64", "c128", "c32", "null", "f33", ""]
DIMS = ["0", "1", "2", "3", "7", "-1", "?", "%s", "%", "", "1000", "100000", "1000000", "2147483648", "10000000000",
        "9223372036854775808", "1" * 40]
NUMBERS = ["0", "1", "2", "3", "-1", "-2", "255", "65536", "100000", "2147483647", "2147483648", "4294967296",
           "9223372036854775807", "9223372036854775808", "1000000000000", "1" * 120]
PARAM_VALUES = [
    "0", "1", "-1", "2", "3", "-3", "7", "100000", "1000000000", "9223372036854775807", "1e30", "-1e30", "1e-30",
    "1e308", "(1e308,1e308)", "(1e308,1e308,1e308)",
    "0.0", "-0.5", "0.5", "nan", "inf", "-inf", "None", "True", "False", "()", "(0)", "(0,0)", "(-1,-1)", "(1,1,1)",
    "(2,2)", "(100000,100000)", "(1000000000,1)", "(0.0,0.0)", "(1e30,1e30)", "(nan,nan)", "zeros", "reflect",
    "replicate", "circular", "nearest", "bilinear", "bicubic", "linear", "junk", "", "add(@0,@1)", "mul(@0,1e30)",
    "@0", "@9", "(a,b)", "[1,2]", "1.0+2.0j", "%batch", "(1,%w)", "[int(size(@0,0)),-1]", "floor_divide(@0,0)",
]
ANNOTATION = re.compile(r"(?P<head>[#@][^=\s]+=)\((?P<dims>[^()\s]*)\)(?P<dtype>[a-z0-9]*)")


def _index(draw: Draw, seq: list, label: str) -> int:
    return draw(st.integers(0, len(seq) - 1), label=label)


def _body_line(files: Files, draw: Draw) -> tuple[list[str], int]:
    """The lines and the index of one of them, mostly operator lines."""
    lines = files.lines()
    if len(lines) > 2 and draw(st.integers(0, 9), label="header?") > 0:
        return lines, draw(st.integers(2, len(lines) - 1), label="line")
    return lines, _index(draw, lines, "line")


def delete_line(files: Files, draw: Draw) -> str:
    lines, i = _body_line(files, draw)
    del lines[i]
    files.set_lines(lines)
    return f"deleted line {i + 1}"


def duplicate_line(files: Files, draw: Draw) -> str:
    lines, i = _body_line(files, draw)
    lines.insert(i, lines[i])
    files.set_lines(lines)
    return f"duplicated line {i + 1}"


def swap_lines(files: Files, draw: Draw) -> str:
    lines, i = _body_line(files, draw)
    j = _index(draw, lines, "other line")
    lines[i], lines[j] = lines[j], lines[i]
    files.set_lines(lines)
    return f"swapped lines {i + 1} and {j + 1}"


def change_number(files: Files, draw: Draw) -> str:
    """A run of digits anywhere on a line (a count, a dim, a param, an operand name)."""
    lines, i = _body_line(files, draw)
    spans = [m.span() for m in re.finditer(r"[0-9]+", lines[i])]
    if not spans:
        return "no number to change"
    a, b = spans[_index(draw, spans, "number")]
    old = int(lines[i][a:b]) if b - a < 30 else 1
    new = draw(st.sampled_from([*NUMBERS, str(old + 1), str(max(old - 1, 0)), str(old * 2)]), label="new number")
    lines[i] = lines[i][:a] + new + lines[i][b:]
    files.set_lines(lines)
    return f"line {i + 1}: number at column {a} {old} -> {new}"


def change_count(files: Files, draw: Draw) -> str:
    """The header's counts or an operator's input/output counts, moved by a little."""
    lines, i = _body_line(files, draw)
    tokens = lines[i].split()
    places = [k for k in ((0, 1) if i == 1 else (2, 3)) if k < len(tokens) and tokens[k].isdigit()]
    if not places:
        return "no count to change"
    k = places[_index(draw, places, "count")]
    delta = draw(st.sampled_from([-2, -1, 1, 2, 1000]), label="delta")
    old = tokens[k]
    tokens[k] = str(int(old) + delta)
    lines[i] = " ".join(tokens)
    files.set_lines(lines)
    return f"line {i + 1}: count {old} -> {tokens[k]}"


def drop_token(files: Files, draw: Draw) -> str:
    lines, i = _body_line(files, draw)
    tokens = lines[i].split()
    if not tokens:
        return "no token to drop"
    k = _index(draw, tokens, "token")
    gone = tokens.pop(k)
    lines[i] = " ".join(tokens)
    files.set_lines(lines)
    return f"line {i + 1}: dropped token {k} {gone[:60]!r}"


def change_token(files: Files, draw: Draw) -> str:
    """A token replaced by another token of the file, or by junk."""
    lines, i = _body_line(files, draw)
    tokens = lines[i].split()
    if not tokens:
        return "no token to change"
    k = _index(draw, tokens, "token")
    pool = [t for line in lines for t in line.split()]
    new = draw(st.one_of(st.sampled_from(pool), st.sampled_from(["x", "=", "a=b", "@w=(1)f32", "#0=(1)f32", "$input=0", ""])),
               label="new token")
    old, tokens[k] = tokens[k], new
    lines[i] = " ".join(tokens)
    files.set_lines(lines)
    return f"line {i + 1}: token {k} {old[:60]!r} -> {new[:60]!r}"


def _annotation(files: Files, draw: Draw) -> tuple[list[str], int, re.Match] | None:
    lines = files.lines()
    found = [(i, m) for i, line in enumerate(lines) for m in ANNOTATION.finditer(line)]
    if not found:
        return None
    i, match = found[_index(draw, found, "annotation")]
    return lines, i, match


def change_dtype(files: Files, draw: Draw) -> str:
    picked = _annotation(files, draw)
    if picked is None:
        return "no annotation"
    lines, i, m = picked
    new = draw(st.sampled_from(DTYPES), label="dtype")
    lines[i] = lines[i][: m.start("dtype")] + new + lines[i][m.end("dtype") :]
    files.set_lines(lines)
    return f"line {i + 1}: {m.group(0)[:60]} dtype -> {new!r}"


def change_shape(files: Files, draw: Draw) -> str:
    picked = _annotation(files, draw)
    if picked is None:
        return "no annotation"
    lines, i, m = picked
    dims = m.group("dims").split(",") if m.group("dims") else []
    how = draw(st.sampled_from(["set", "drop", "add", "empty"]) if dims else st.just("add"), label="how")
    value = draw(st.sampled_from(DIMS), label="dim")
    if how == "set":
        dims[_index(draw, dims, "which dim")] = value
    elif how == "drop":
        del dims[_index(draw, dims, "which dim")]
    elif how == "add":
        dims.insert(draw(st.integers(0, len(dims)), label="where"), value)
    else:
        dims = []
    lines[i] = lines[i][: m.start("dims") - 1] + "(" + ",".join(dims) + ")" + lines[i][m.end("dims") + 1 :]
    files.set_lines(lines)
    return f"line {i + 1}: {m.group(0)[:60]} -> {lines[i][m.start('head'):m.start('dims') - 1]}({','.join(dims)})"


def change_param(files: Files, draw: Draw) -> str:
    lines = files.lines()
    found = [
        (i, k) for i, line in enumerate(lines[2:], start=2)
        for k, t in enumerate(line.split()) if k >= 4 and "=" in t and t[0] not in "@#$"
    ]
    if not found:
        return "no param"
    i, k = found[_index(draw, found, "param")]
    tokens = lines[i].split()
    key, _, old = tokens[k].partition("=")
    new = draw(st.sampled_from(PARAM_VALUES), label="value")
    tokens[k] = f"{key}={new}"
    lines[i] = " ".join(tokens)
    files.set_lines(lines)
    return f"line {i + 1}: {key}={old[:40]} -> {new}"


def flip_param_byte(files: Files, draw: Draw) -> str:
    if not files.param:
        return "empty param"
    where = draw(st.integers(0, len(files.param) - 1), label="offset")
    mask = draw(st.integers(1, 255), label="xor")
    damaged = bytearray(files.param)
    damaged[where] ^= mask
    files.param = bytes(damaged)
    return f"param byte {where} ^= {mask:#x}"


def truncate_param(files: Files, draw: Draw) -> str:
    cut = draw(st.integers(0, max(len(files.param) - 1, 0)), label="cut")
    files.param = files.param[:cut]
    return f"param cut to {cut} bytes"


def flip_bin_byte(files: Files, draw: Draw) -> str:
    if not files.bin:
        return "empty bin"
    structure = [r for r in _zip_structure(files.model) if r[1] <= len(files.bin)]
    if structure and draw(st.booleans(), label="in the zip structure?"):
        a, b = structure[_index(draw, structure, "header")]
        where = draw(st.integers(a, b - 1), label="offset")
    else:
        where = draw(st.integers(0, len(files.bin) - 1), label="offset")
    mask = draw(st.sampled_from([1, 2, 4, 8, 16, 32, 64, 128, 255]) | st.integers(1, 255), label="xor")
    damaged = bytearray(files.bin)
    damaged[where] ^= mask
    files.bin = bytes(damaged)
    return f"bin byte {where} ^= {mask:#x}"


def truncate_bin(files: Files, draw: Draw) -> str:
    cut = draw(st.integers(0, max(len(files.bin) - 1, 0)), label="cut")
    files.bin = files.bin[:cut]
    return f"bin cut to {cut} bytes"


def _outputs_line(lines: list[str]) -> int | None:
    found = [i for i, line in enumerate(lines) if line.split()[:1] == ["pnnx.Output"]]
    return found[0] if found else None


def nest_tuples(files: Files, draw: Draw) -> str:
    """The first output packed into tuples level after level, each holding the level below
    once or twice (twice doubles the tensors: 2^levels of them), unpacked again or not."""
    lines = files.lines()
    at = _outputs_line(lines)
    if at is None or len(lines[at].split()) < 5:
        return "no output to nest"
    levels = draw(st.sampled_from([1, 3, 20, 99, 101, 400]), label="levels")
    twice = draw(st.booleans(), label="twice")
    unpack = draw(st.booleans(), label="unpacked")
    tokens = lines[at].split()
    last = tokens[4]
    added = []
    for k in range(levels):
        added.append(f"prim::TupleConstruct fz{k} 2 1 {last} {last if twice else tokens[4]} fzt{k}")
        last = f"fzt{k}"
    if unpack:
        added.append(f"prim::ListUnpack fzu 1 2 {last} fza fzb")
        last = "fza"
    tokens[4] = last
    lines[at] = " ".join(tokens)
    lines[at:at] = added
    if len(lines) > 1 and len(lines[1].split()) == 2 and all(t.isdigit() for t in lines[1].split()):
        ops, operands = map(int, lines[1].split())
        lines[1] = f"{ops + len(added)} {operands + len(added) + (2 if unpack else 0)}"
    files.set_lines(lines)
    return f"output nested {levels} levels ({'twice' if twice else 'once'} each{', unpacked' if unpack else ''})"


def inflate_list(files: Files, draw: Draw) -> str:
    """A list param (or a list in an index expression) made 10^3 or 10^5 items long."""
    lines = files.lines()
    found = [(i, m) for i, line in enumerate(lines) for m in re.finditer(r"=[(\[]([-0-9.e,]+)[)\]]", line)]
    if not found:
        return "no list"
    i, m = found[_index(draw, found, "list")]
    items = m.group(1).split(",")
    count = draw(st.sampled_from([1000, 100_000]), label="items")
    lines[i] = lines[i][: m.start(1)] + ",".join(items[k % len(items)] for k in range(count)) + lines[i][m.end(1):]
    files.set_lines(lines)
    return f"line {i + 1}: list {m.group(1)[:30]} made {count} items long"


def nest_expression(files: Files, draw: Draw) -> str:
    lines = files.lines()
    found = [(i, m) for i, line in enumerate(lines) for m in re.finditer(r"expr=(\S+)", line)]
    if not found:
        return "no expression"
    i, m = found[_index(draw, found, "expression")]
    depth = draw(st.sampled_from([50, 199, 201, 5000]), label="depth")
    lines[i] = lines[i][: m.start(1)] + "neg(" * depth + m.group(1) + ")" * depth + lines[i][m.end(1):]
    files.set_lines(lines)
    return f"line {i + 1}: expression nested {depth} deeper"


def rename_entry(files: Files, draw: Draw) -> str:
    """A bin entry renamed: up the tree, to another entry's name, or to junk."""
    if not files.bin:
        return "empty bin"
    try:
        archive = zipfile.ZipFile(io.BytesIO(files.bin))
        infos = archive.infolist()
        datas = [archive.read(i) for i in infos]
    except Exception:  # noqa: BLE001 - already damaged: nothing to rename
        return "bin not readable"
    if not infos:
        return "no entry"
    k = _index(draw, infos, "entry")
    new = draw(st.sampled_from(["../" + infos[k].filename, infos[0].filename, "/etc/passwd", "", "x" * 300]),
               label="new name")
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a duplicate name is the point
        for j, (info, data) in enumerate(zip(infos, datas)):
            z.writestr(zipfile.ZipInfo(new if j == k else info.filename, date_time=(1980, 1, 1, 0, 0, 0)), data)
    files.bin = out.getvalue()
    return f"entry {infos[k].filename!r} renamed {new[:40]!r}"


def pad_directory(files: Files, draw: Draw) -> str:
    """Empty entries added to the bin: 10^2 or 10^4 of them."""
    if not files.bin:
        return "empty bin"
    try:
        archive = zipfile.ZipFile(io.BytesIO(files.bin))
        pairs = [(i.filename, archive.read(i)) for i in archive.infolist()]
    except Exception:  # noqa: BLE001
        return "bin not readable"
    count = draw(st.sampled_from([100, 10_000]), label="entries")
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # padded twice: the names repeat
        for name, data in pairs + [(f"pad{k}.w", b"") for k in range(count)]:
            z.writestr(zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0)), data)
    files.bin = out.getvalue()
    return f"{count} empty entries added"


#: Every kind of damage; those that often leave a loadable model (so that forward runs on
#: it) come twice.
DAMAGE = [
    delete_line, duplicate_line, swap_lines, change_number, change_count, drop_token, change_token,
    change_dtype, change_shape, change_param, flip_param_byte, truncate_param, flip_bin_byte, truncate_bin,
    change_number, change_shape, change_param, flip_bin_byte,
    nest_tuples, inflate_list, nest_expression, rename_entry, pad_directory,
]


# --------------------------------------------------------------------------------------
# running a case
# --------------------------------------------------------------------------------------
def _peak_rss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # kilobytes on Linux


def _spec_bytes(spec: object) -> int:
    """Bytes a value of ``spec`` takes, in Python integers (no int64 wrap-around)."""
    if isinstance(spec, TensorSpec):
        return math.prod(spec.shape) * spec.dtype.itemsize
    if isinstance(spec, SequenceSpec):
        return sum(_spec_bytes(s) for s in spec.items)
    return 0


def _input_shapes(engine: Engine, model: Model) -> list[tuple[int, ...]]:
    """The declared input shapes; an unknown size takes the original input's, else 1."""
    originals = _inputs(model)
    shapes = []
    for k, declared in enumerate(engine.input_shapes.values()):
        original = originals[k].shape if k < len(originals) else ()
        if declared is None:
            shapes.append(tuple(original))
            continue
        shapes.append(tuple(
            d if isinstance(d, int) else (original[j] if j < len(original) and len(original) == len(declared) else 1)
            for j, d in enumerate(declared)
        ))
    return shapes


def _make_inputs(engine: Engine, model: Model, shapes: list[tuple[int, ...]]) -> list[np.ndarray]:
    """The original inputs where they fit the declared shapes and dtypes, else random ones."""
    originals = _inputs(model)
    rng = np.random.default_rng(len(shapes))
    inputs = []
    for k, (shape, dtype) in enumerate(zip(shapes, engine.input_dtypes.values())):
        if k < len(originals) and originals[k].shape == shape and originals[k].dtype == dtype:
            inputs.append(originals[k])
        elif dtype.kind == "b":
            inputs.append(rng.random(shape) < 0.5)
        elif dtype.kind in "iu":
            inputs.append(rng.integers(0, 4, shape).astype(dtype))
        elif dtype.kind == "c":
            inputs.append((rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype))
        else:
            inputs.append(rng.standard_normal(shape).astype(dtype))
    return inputs


def _is_memory_error(exc: BaseException) -> bool:
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, MemoryError):
            return True
        seen = seen.__cause__ or seen.__context__
    return "MemoryError" in str(exc)


def _forward(engine: Engine, model: Model) -> str:
    """Run the loaded engine once on inputs of its declared shapes; the outcome's kind."""
    try:
        shapes = _input_shapes(engine, model)
        plan = engine.plan(*shapes)
    except GraphexecError as exc:
        return f"plan: {type(exc).__name__}"
    given = sum(math.prod(shape) for shape in shapes) * 16
    if given > MEMORY_BUDGET:
        # The caller would have to allocate these inputs: that is not graphexec's doing.
        note(f"the declared inputs {shapes} would take about {given} bytes; not run")
        return "skipped: the declared inputs exceed the memory budget"
    need = sum(_spec_bytes(s) for s in plan.specs.values())
    if need > MEMORY_BUDGET and not HAS_MEMORY_LIMIT:
        # Without memory_limit graphexec would try it; the test does not.
        note(f"the plan needs {need} bytes of tensors; not run")
        return "skipped: the plan needs more than the memory budget"
    inputs = _make_inputs(engine, model, shapes)
    start = time.monotonic()
    try:
        engine.forward(*inputs, timeout=FORWARD_TIMEOUT)
        outcome = "ran"
    except GraphexecError as exc:
        assert not _is_memory_error(exc), f"a damaged model made graphexec run out of memory: {exc}"
        outcome = f"forward: {type(exc).__name__}"
    elapsed = time.monotonic() - start
    assert elapsed < FORWARD_TIMEOUT + FORWARD_GRACE, f"forward took {elapsed:.1f} s with timeout={FORWARD_TIMEOUT}"
    return outcome


def run_case(files: Files, threads: int) -> str:
    """Load the damaged files and run them; the outcome's kind. Anything else fails."""
    with tempfile.TemporaryDirectory() as folder:
        param = Path(folder) / "m.pnnx.param"
        param.write_bytes(files.param)
        (Path(folder) / "m.pnnx.bin").write_bytes(files.bin)
        rss = _peak_rss()
        start = time.monotonic()
        try:
            engine = Engine.load(param, threads=threads, intra_op_threads=1, **LOAD_OPTIONS)
        except GraphexecError as exc:
            assert not _is_memory_error(exc), f"a damaged model made graphexec run out of memory: {exc}"
            engine, outcome = None, f"load: {type(exc).__name__}"
        elapsed = time.monotonic() - start
        assert elapsed < LOAD_SECONDS, f"Engine.load took {elapsed:.1f} s"
        if engine is not None:
            try:
                outcome = _forward(engine, files.model)
            finally:
                engine.close()
        grown = _peak_rss() - rss
        assert grown < RSS_GROWTH, f"the peak RSS grew by {grown / 2**20:.0f} MiB in one case"
        return outcome


@pytest.fixture(scope="module", autouse=True)
def address_space_cap():
    """Cap the address space a few GiB above what the process maps now, for this module.

    An allocation no plan predicted then fails with MemoryError (and the case fails with
    it) instead of taking the machine's memory.
    """
    try:
        with open("/proc/self/status") as f:
            mapped = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize:"))
    except (OSError, StopIteration, ValueError):
        yield
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    cap = mapped + ADDRESS_SPACE_HEADROOM
    if hard != resource.RLIM_INFINITY:
        cap = min(cap, hard)
    if soft != resource.RLIM_INFINITY and soft <= cap:
        yield
        return
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


# --------------------------------------------------------------------------------------
# the tests
# --------------------------------------------------------------------------------------
FUZZ = settings(
    max_examples=MAX_EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def test_the_models_run_undamaged():
    """The harness itself: the examples and a sample of the fixtures run as they are."""
    for model in EXAMPLE_MODELS + OP_MODELS[::25]:
        param, bin_ = _original(model)
        outcome = run_case(Files(model, param, bin_), threads=2)
        if model.name == "bessel_gate":  # aten::i0 has a layer only once a user registers one
            assert outcome in ("ran", "load: UnsupportedOperatorError")
        else:
            assert outcome == "ran", f"{model.name}: {outcome}"


@FUZZ
@pytest.mark.filterwarnings("ignore::graphexec.ExportMismatchWarning")  # damaged sizes part from the annotations
@given(
    model=st.one_of(st.sampled_from(EXAMPLE_MODELS), st.sampled_from(OP_MODELS)),
    damage=st.lists(st.sampled_from(DAMAGE), min_size=1, max_size=3),
    threads=st.sampled_from([1, 2]),
    data=st.data(),
)
def test_a_damaged_model_runs_or_raises_a_graphexec_error(model, damage, threads, data):
    param, bin_ = _original(model)
    files = Files(model, param, bin_)
    for edit in damage:
        done = edit(files, data.draw)
        note(f"{model.name}: {edit.__name__}: {done}")
        event(f"damage: {edit.__name__}")
    event(run_case(files, threads))


# --------------------------------------------------------------------------------------
# hostile calls to forward
# --------------------------------------------------------------------------------------
ODD_DTYPES = [np.float16, np.float32, np.float64, np.longdouble, np.int8, np.int32, np.int64, np.uint8, np.bool_,
              np.complex64, np.complex128, object, "U3", "S2", "M8[s]", "m8[s]", [("a", "f4")]]


def _odd_array(draw: Draw, declared: tuple[int, ...]) -> object:
    """An input for a declared shape, made odd: another rank or size, a broadcast view of
    up to 2^40 images, another dtype, NaN or huge values, or no array at all."""
    how = draw(st.sampled_from(["dtype", "rank", "dims", "view", "values", "not an array", "as given"]), label="how")
    shape = list(declared)
    if how == "rank":
        shape = shape[:-1] if shape and draw(st.booleans(), label="drop") else [1, *shape]
    elif how == "dims" and shape:
        shape[draw(st.integers(0, len(shape) - 1), label="dim")] = draw(st.sampled_from([0, 1, 2, 7, 10_000]), label="size")
    if how == "view":
        big = [draw(st.sampled_from([2**20, 2**40]), label="batch"), *shape[1:]]
        return np.broadcast_to(np.float32(1), big)
    if how == "not an array":
        return draw(st.sampled_from([None, "x", [[1.0, 2.0], [3.0]], {"a": 1}, 3.5, (i for i in range(3))]), label="value")
    dtype = draw(st.sampled_from(ODD_DTYPES), label="dtype") if how == "dtype" else np.float32
    if math.prod(shape) > 10**7:
        shape = shape[:1] + [1] * (len(shape) - 1)
    try:
        array = np.zeros(shape, dtype)
    except (TypeError, ValueError):
        return np.zeros(shape, np.float32)
    if how == "values" and array.size:
        array.flat[0] = draw(st.sampled_from([np.nan, np.inf, -np.inf, 3e38, -0.0]), label="value")
    return array


@settings(max_examples=max(60, MAX_EXAMPLES // 3), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(model=st.sampled_from([m for m in EXAMPLE_MODELS if m.name != "bessel_gate"]), threads=st.sampled_from([1, 2]),
       data=st.data())
def test_hostile_calls_to_forward_return_or_raise_a_graphexec_error(model, threads, data):
    """Odd inputs, names, counts, extracts and timeouts: a result or a GraphexecError with a
    bounded message, within a bounded growth of the peak RSS."""
    engine = _engines(model.name, threads)
    declared = [tuple(s) for s in _input_shapes(engine, model)]
    inputs = [_odd_array(data.draw, shape) for shape in declared]
    call = data.draw(st.sampled_from(["positional", "by name", "too many", "too few", "unknown name"]), label="call")
    args: list[object]
    if call == "by name":
        args = [dict(zip(engine.input_names, inputs))]
    elif call == "unknown name":
        args = [{**dict(zip(engine.input_names, inputs)), "nope": inputs[0]}]
    elif call == "too many":
        args = [*inputs, inputs[0]]
    elif call == "too few":
        args = inputs[:-1]
    else:
        args = inputs
    options = {
        "timeout": data.draw(st.sampled_from([None, 30, 1e-9, 0, -1, float("nan"), float("inf"), "1", True]),
                             label="timeout"),
        "check_finite": data.draw(st.booleans(), label="check_finite"),
        "extract": data.draw(st.sampled_from([None, [], ["nope"], "0", [engine.program.inputs[0]]]), label="extract"),
    }
    note(f"{model.name}: {call} {[getattr(x, 'shape', type(x).__name__) for x in inputs]} "
         f"{[getattr(x, 'dtype', None) for x in inputs]} {options}")
    rss = _peak_rss()
    try:
        engine.forward(*args, **options)
        event("ran")
    except GraphexecError as exc:
        assert len(str(exc)) <= 4000
        event(f"forward: {type(exc).__name__}")
    assert _peak_rss() - rss < RSS_GROWTH


@cache
def _engines(name: str, threads: int) -> Engine:
    """One engine per example model and thread count, for the hostile calls (256 MiB limit)."""
    model = next(m for m in EXAMPLE_MODELS if m.name == name)
    return Engine.load(model.param, threads=threads, intra_op_threads=1, **LOAD_OPTIONS)
