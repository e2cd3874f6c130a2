"""Every failure reaches the caller as a GraphexecError, with a message of bounded length.

Paths no file system can open (a NUL byte, a name too long, a loop of symbolic links, a
directory without search permission), an engine closed while it runs, and damaged files
whose offending text is megabytes long: each gives our own error, never a raw ValueError,
OSError or PermissionError, and a message that quotes an excerpt and says where the rest is.
The large files are generated here (they would not fit the broken corpus): they test the
reader's limits, not a model's numbers.
"""

from __future__ import annotations

import errno
import os
import shutil
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from graphexec import (
    Engine,
    ExecutionError,
    GraphexecError,
    GraphStructureError,
    InputError,
    LayerConfigError,
    ModelFormatError,
    UnsupportedOperatorError,
)
from graphexec import pnnx
from graphexec.errors import MESSAGE_LIMIT, excerpt, quoted
from graphexec.ir import Graph
from graphexec.layers.registry import lookup, register
from tests.graphexec.test_early_exit import _IntoLayer, _register
from tests.paths import REPO

FORMAT = REPO / "tests" / "fixtures" / "format"
ARITH = REPO / "tests" / "fixtures" / "ops" / "expression" / "arith"
#: Longest message any error here may have.
BOUND = 2 * MESSAGE_LIMIT


@pytest.fixture
def model(tmp_path) -> Path:
    """A copy of the format fixture (a convolution, batch norm, linear layer...) in tmp_path."""
    for suffix in (".pnnx.param", ".pnnx.bin"):
        shutil.copy(FORMAT / f"m{suffix}", tmp_path / f"m{suffix}")
    return tmp_path / "m.pnnx.param"


def _fails(call, error=ModelFormatError) -> GraphexecError:
    with pytest.raises(GraphexecError) as info:
        call()
    assert type(info.value) is error, f"{type(info.value).__name__}: {info.value}"
    assert len(str(info.value)) <= BOUND
    return info.value


# -- paths -----------------------------------------------------------------------------------
def test_a_nul_byte_in_either_path(model):
    assert "NUL byte" in str(_fails(lambda: Engine.load("m\0.pnnx.param")))
    assert "NUL byte" in str(_fails(lambda: Engine.load(model, "m\0.pnnx.bin")))


@pytest.mark.parametrize("length", [300, 5000])
def test_a_name_or_path_too_long(tmp_path, length):
    name = tmp_path / ("x" * length + ".pnnx.param") if length < 1000 else "/".join(["y" * 200] * 25) + ".pnnx.param"
    error = _fails(lambda: Engine.load(name))
    assert "too long" in str(error)


def test_a_loop_of_symbolic_links_is_no_missing_file(model):
    folder = model.parent
    (folder / "loop.pnnx.param").symlink_to(folder / "loop.pnnx.param")
    assert "symbolic links" in str(_fails(lambda: Engine.load(folder / "loop.pnnx.param")))
    os.replace(model.with_name("m.pnnx.bin"), folder / "weights.bin")
    model.with_name("m.pnnx.bin").symlink_to(folder / "back.bin")
    (folder / "back.bin").symlink_to(model.with_name("m.pnnx.bin"))
    for bin_path in (None, model.with_name("m.pnnx.bin")):  # the default sibling, and given
        error = _fails(lambda: Engine.load(model, bin_path))
        assert "symbolic links" in str(error) and "does not exist" not in str(error)


def test_a_dangling_default_bin_says_so(model):
    weights = model.with_name("m.pnnx.bin")
    weights.unlink()
    weights.symlink_to(model.parent / "gone.bin")
    assert "symbolic link to nothing" in str(_fails(lambda: Engine.load(model)))


def test_a_directory_without_search_permission(model, monkeypatch):
    """Run as root, the permission is never refused: there the refusal is staged."""
    locked = model.parent / "locked"
    locked.mkdir()
    shutil.move(model, locked / model.name)
    shutil.move(model.with_name("m.pnnx.bin"), locked / "m.pnnx.bin")
    if os.geteuid() == 0:
        real = os.stat

        def refused(path, *args, **kwargs):
            if str(path).startswith(str(locked) + os.sep):
                raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))
            return real(path, *args, **kwargs)

        monkeypatch.setattr(pnnx.os, "stat", refused)
        error = _fails(lambda: Engine.load(locked / model.name))
    else:
        locked.chmod(0o600)
        try:
            error = _fails(lambda: Engine.load(locked / model.name))
        finally:
            locked.chmod(0o700)
    assert "Permission denied" in str(error)


@pytest.mark.parametrize("path", [3, None, "", ".", b"\0"], ids=["int", "None", "empty", "dot", "bytes NUL"])
def test_what_is_no_path_at_all(path):
    _fails(lambda: Engine.load(path))


def test_a_path_as_bytes_loads(model):
    assert Engine.load(os.fsencode(model), threads=1).forward(np.zeros((1, 3, 8, 8), np.float32))[0].shape == (1, 4)


# -- close() during forward ----------------------------------------------------------------------
class Sleepy(_IntoLayer):
    """Its input + 1, after ``sleep`` seconds."""

    def build(self, params):
        self.sleep = params.float("sleep", 0.0)

    def forward_into(self, inputs, outputs):
        time.sleep(self.sleep)
        np.add(inputs[0], 1, out=outputs[0])


def fan_out() -> Graph:
    """x -> slow -> three branches -> their sum: the branches are handed to workers once
    the slow head is done."""
    _register({"test.Sleepy": Sleepy})
    g = Graph()
    op = g.add_operator("pnnx.Input", "input", [], ["x"])
    op.outputs[0].shape, op.outputs[0].dtype = (4, 4), "f32"
    g.add_operator("test.Sleepy", "head", ["x"], ["h"], params={"sleep": 0.5})
    for k in range(3):
        g.add_operator("test.Sleepy", f"branch{k}", ["h"], [f"b{k}"], params={"sleep": 0.01})
    g.add_operator("pnnx.Expression", "join", ["b0", "b1", "b2"], ["y"], params={"expr": "add(add(@0,@1),@2)"})
    g.add_operator("pnnx.Output", "output", ["y"], [])
    return g


def test_close_during_forward_says_so_in_the_users_terms():
    x = np.zeros((4, 4), np.float32)
    with Engine(fan_out(), threads=2) as engine:
        closer = threading.Timer(0.15, engine.close)
        closer.start()
        error = _fails(lambda: engine.forward(x), ExecutionError)
        closer.join()
        message = str(error)
        assert "shut down while this forward ran" in message and "Engine.close()" in message
        assert error.op_name.startswith("branch") and "<" not in message, message
        assert np.array_equal(engine.forward(x), np.full((4, 4), 6, np.float32))  # it starts again


# -- long messages ---------------------------------------------------------------------------------
def _write(folder: Path, text: str, weights: bytes = b"") -> Path:
    param = folder / "big.pnnx.param"
    param.write_text(text)
    param.with_name("big.pnnx.bin").write_bytes(weights)
    return param


def test_a_30_mb_list_param_gives_a_short_message_that_says_where_it_is(tmp_path):
    items = ",".join(["3"] * 15_000_000)
    text = (FORMAT / "m.pnnx.param").read_text().replace("kernel_size=(3,3)", f"kernel_size=({items})")
    param = _write(tmp_path, text, (FORMAT / "m.pnnx.bin").read_bytes())
    start = time.monotonic()
    error = _fails(lambda: Engine.load(param), LayerConfigError)
    assert time.monotonic() - start < 60  # item by item, it took minutes
    message = str(error)
    assert "kernel_size=[3, 3, 3" in message and "15,000,000 items" in message
    assert f"{param}:4" in message


def test_an_expression_nested_50000_deep_gives_a_short_message_that_says_where_it_is(tmp_path):
    deep = "add(" * 50_000 + "@0" + ",1)" * 50_000
    text = (ARITH / "model.pnnx.param").read_text().replace("expr=sub(add(@0,mul(@1,2)),div(@0,3))", f"expr={deep}")
    message = str(_fails(lambda: Engine.load(_write(tmp_path, text)), LayerConfigError))
    assert "nested deeper than" in message
    assert "characters left out" in message and f"{tmp_path / 'big.pnnx.param'}:5" in message


def test_a_30_mb_string_param(tmp_path):
    text = (FORMAT / "m.pnnx.param").read_text().replace("padding_mode=zeros", "padding_mode=" + "z" * 30_000_000)
    message = str(_fails(lambda: Engine.load(_write(tmp_path, text, (FORMAT / "m.pnnx.bin").read_bytes())),
                         LayerConfigError))
    assert "30,000,000 characters" in message


def test_a_megabyte_operator_name_and_type(tmp_path):
    name, op_type = "n" * 1_000_000, "nn.X" * 250_000
    text = f"7767517\n3 2\npnnx.Input in 0 1 0 #0=(1)f32\n{op_type} {name} 1 1 0 1\npnnx.Output out 1 0 1\n"
    error = _fails(lambda: Engine.load(_write(tmp_path, text)), UnsupportedOperatorError)
    assert "characters left out" in str(error)


def test_a_thousand_unknown_types_are_summed_up(tmp_path):
    lines = [f"nn.Unknown{k} op{k} 1 1 0 {k + 1}" for k in range(1000)]
    text = "\n".join(["7767517", "1001 1001", "pnnx.Input in 0 1 0 #0=(1)f32", *lines]) + "\n"
    text = text.replace("nn.Unknown999 op999 1 1 0 1000", "pnnx.Output out 1 0 999")
    error = _fails(lambda: Engine.load(_write(tmp_path, text)), UnsupportedOperatorError)
    assert "999 unsupported operator type(s)" in str(error) and "more types" in str(error)


def test_a_cycle_through_ten_thousand_operators(tmp_path):
    n = 10_000
    lines = [f"nn.ReLU r{k} 1 1 v{(k - 1) % n} v{k}" for k in range(n)]
    text = "\n".join(["7767517", f"{n} {n}", *lines]) + "\n"
    _fails(lambda: Engine.load(_write(tmp_path, text)), GraphStructureError)


def test_a_million_unknown_input_names():
    with Engine(fan_out(), threads=1) as engine:
        given = {f"name{k}": 0 for k in range(1_000_000)}
        _fails(lambda: engine.forward(given), InputError)


# -- the helpers -----------------------------------------------------------------------------------
def test_an_excerpt_keeps_head_and_tail_and_counts_the_rest():
    text = "head " + "x" * 10_000 + " tail"
    cut = excerpt(text, 200, where="m.pnnx.param:7")
    assert cut.startswith("head ") and cut.endswith(" tail") and len(cut) <= 200
    assert "9,893 characters left out; all of it is at m.pnnx.param:7" in cut
    assert excerpt("short", 100) == "short"


def test_quoting_a_long_list_never_writes_it_all():
    assert quoted([1, 2]) == "[1, 2]"
    assert quoted(list(range(10**6))) == "[0, 1, 2, 3, 4, 5, 6, 7, ... (1,000,000 items in all)]"
    assert quoted("z" * 10**6).endswith("... (1,000,000 characters in all)")
