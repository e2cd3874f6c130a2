"""ONNX models through pnnx: ``graphexec.convert``, ``Engine.load("m.onnx")`` and
``graphexec run m.onnx`` on ONNX exports of torchvision networks, checked against
onnxruntime's outputs (tests/fixtures/onnx/, written by tools/export_onnx_fixtures.py).

Converting needs pnnx (the export extra); without it these tests skip, but for the one that
checks the error a user without it gets."""

from __future__ import annotations

import json
import shutil
import sys

import numpy as np
import pytest
from loguru import logger

import graphexec
from graphexec import Engine
from graphexec.cli import main
from graphexec.converting import ExportToolsMissing, pnnx_tool
from tests.paths import REPO

FIXTURES = REPO / "tests" / "fixtures" / "onnx"
NETWORKS = sorted(p.stem for p in FIXTURES.glob("*.onnx"))
#: max|graphexec - onnxruntime| / max|onnxruntime|.
TOLERANCE = 1e-4


def _pnnx_missing() -> str | None:
    try:
        pnnx_tool()
    except ExportToolsMissing as exc:
        return str(exc)
    return None


needs_pnnx = pytest.mark.skipif(_pnnx_missing() is not None, reason=f"no pnnx: {_pnnx_missing()}")


def reference(name: str) -> tuple[np.ndarray, np.ndarray]:
    """The input and onnxruntime's output on it."""
    with np.load(FIXTURES / f"{name}.ort.npz") as data:
        return data["in0"], data["out0"]


def relative_error(got: np.ndarray, want: np.ndarray) -> float:
    assert got.shape == want.shape
    return float(np.abs(got - want).max() / np.abs(want).max())


def test_the_fixtures_are_there():
    assert NETWORKS == ["lstm_classifier", "mobilenet_v3_small", "onnx_operators", "recurrent_states", "shufflenet_v2",
                        "token_classifier"]


@needs_pnnx
@pytest.mark.parametrize("name", NETWORKS)
def test_convert_matches_onnxruntime(tmp_path, name):
    x, want = reference(name)
    model = tmp_path / f"{name}.onnx"
    shutil.copyfile(FIXTURES / f"{name}.onnx", model)
    # mobilenet_v3_small and the token classifier leave their batch dynamic and their
    # references run at batch 2: the shapes fix it (pnnx would take 1); the classifier's
    # token ids are int64, which pnnx names when told float32, and the conversion follows
    param = graphexec.convert(model, input_shapes=[x.shape])
    assert param == tmp_path / f"{name}.pnnx.param" and (tmp_path / f"{name}.pnnx.bin").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([model.name, param.name, f"{name}.pnnx.bin"])
    with Engine.load(param) as engine:
        assert engine.input_shapes["in0"] == x.shape
        assert relative_error(engine.forward(x), want) <= TOLERANCE


@needs_pnnx
@pytest.mark.parametrize("name", ["lstm_classifier", "mobilenet_v3_small", "token_classifier"])
def test_other_shapes_keep_the_batch_dynamic(tmp_path, name):
    """Converted at two batches, a model whose ONNX batch is dynamic runs at any: each
    sample's output is onnxruntime's whatever the batch (the LSTM's zero state, sized by
    the batch, is computed by the run)."""
    x, want = reference(name)
    shutil.copyfile(FIXTURES / f"{name}.onnx", tmp_path / "model.onnx")
    param = graphexec.convert(tmp_path / "model.onnx", input_shapes=[x.shape], other_shapes=[(1, *x.shape[1:])],
                              input_types=[x.dtype])
    with Engine.load(param) as engine:
        assert engine.input_shapes["in0"] == (None, *x.shape[1:])
        for batch, expected in [(x, want), (x[:1], want[:1]), (np.concatenate([x, x]), np.concatenate([want, want]))]:
            assert relative_error(engine.forward(batch), expected) <= TOLERANCE


def test_other_shapes_come_one_for_each_input_shape(tmp_path):
    shutil.copyfile(FIXTURES / "token_classifier.onnx", tmp_path / "model.onnx")
    with pytest.raises(graphexec.GraphexecError, match="2 other shapes for 1 input shapes"):
        graphexec.convert(tmp_path / "model.onnx", input_shapes=[(2, 6)], other_shapes=[(1, 6), (3, 6)])


@needs_pnnx
def test_a_model_named_by_a_relative_path_converts(tmp_path, monkeypatch):
    """pnnx runs in a scratch folder: the model's path must not be read from there."""
    x, want = reference("shufflenet_v2")
    shutil.copyfile(FIXTURES / "shufflenet_v2.onnx", tmp_path / "net.onnx")
    monkeypatch.chdir(tmp_path)
    param = graphexec.convert("net.onnx")
    assert param.resolve() == tmp_path / "net.pnnx.param"
    with Engine.load(param) as engine:
        assert relative_error(engine.forward(x), want) <= TOLERANCE


@needs_pnnx
def test_input_types_say_what_an_input_holds(tmp_path):
    x, want = reference("token_classifier")
    model = tmp_path / "tokens.onnx"
    shutil.copyfile(FIXTURES / "token_classifier.onnx", model)
    for k, given in enumerate((["i64"], [np.int64])):
        param = graphexec.convert(model, input_shapes=[x.shape], input_types=given, output=tmp_path / f"typed{k}")
        with Engine.load(param) as engine:
            assert engine.input_dtypes["in0"] == np.int64
            assert relative_error(engine.forward(x), want) <= TOLERANCE
    with pytest.raises(graphexec.GraphexecError, match="1 input types for 2 input shapes"):
        graphexec.convert(model, input_shapes=[x.shape, x.shape], input_types=["i64"])
    with pytest.raises(graphexec.GraphexecError, match="input type 'tensor' is neither a pnnx type name"):
        graphexec.convert(model, input_shapes=[x.shape], input_types=["tensor"])


@needs_pnnx
def test_engine_load_converts_into_the_cache_and_says_so(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    x, want = reference("shufflenet_v2")
    lines: list[str] = []
    sink = logger.add(lambda message: lines.append(str(message)), level="INFO", format="{message}")
    logger.enable("graphexec")
    try:
        with Engine.load(FIXTURES / "shufflenet_v2.onnx", threads=2) as engine:
            assert relative_error(engine.forward(x), want) <= TOLERANCE
        with Engine.load(FIXTURES / "shufflenet_v2.onnx", threads=1):
            pass
    finally:
        logger.remove(sink)
        logger.disable("graphexec")
    (converted,) = (tmp_path / "cache" / "graphexec").glob("shufflenet_v2-*/model.pnnx.param")
    said = [line for line in lines if "with pnnx" in line]
    assert len(said) == 2, lines
    assert said[0].startswith(f"converted {FIXTURES / 'shufflenet_v2.onnx'} with pnnx in ")
    assert said[0].rstrip().endswith(str(converted))
    assert said[1].startswith(f"{FIXTURES / 'shufflenet_v2.onnx'} was converted with pnnx before")
    assert not list(FIXTURES.glob("*.pnnx.*")), "nothing is written beside the model"


@needs_pnnx
def test_the_command_line_runs_an_onnx_model_with_its_shape(tmp_path, capsys):
    x, want = reference("mobilenet_v3_small")
    np.save(tmp_path / "x.npy", x)
    assert main(["run", str(FIXTURES / "mobilenet_v3_small.onnx"), "--input-shape", "2,3,64,64",
                 "--input", str(tmp_path / "x.npy"), "--output", str(tmp_path / "y.npz"),
                 "--cache-dir", str(tmp_path / "cache")]) == 0
    err = capsys.readouterr().err
    assert f"graphexec: converted {FIXTURES / 'mobilenet_v3_small.onnx'} with pnnx" in err
    with np.load(tmp_path / "y.npz") as got:
        assert relative_error(got["out0"], want) <= TOLERANCE


@needs_pnnx
def test_the_command_line_converts_with_the_batch_dynamic_given_another_shape(tmp_path, capsys):
    """Run at batch 2 with --other-shape at batch 1, the conversion it keeps takes any batch."""
    x, want = reference("mobilenet_v3_small")
    assert main(["run", str(FIXTURES / "mobilenet_v3_small.onnx"), "--input-shape", "2,3,64,64", "--other-shape",
                 "1,3,64,64", "--output", str(tmp_path / "y.npz"), "--cache-dir", str(tmp_path / "cache")]) == 0
    (param,) = (tmp_path / "cache").glob("*/model.pnnx.param")
    with Engine.load(param) as engine:
        assert engine.input_shapes["in0"] == (None, 3, 64, 64)
        assert relative_error(engine.forward(x[:1]), want[:1]) <= TOLERANCE


@needs_pnnx
def test_bench_converts_an_onnx_model_at_the_batch_asked_for(tmp_path, capsys):
    """The batch mobilenet_v3_small leaves dynamic is fixed by conversion at --batch."""
    target = tmp_path / "r.json"
    assert main(["bench", str(FIXTURES / "mobilenet_v3_small.onnx"), "--batch", "3", "--threads", "1",
                 "--rounds", "1", "--warmup", "0", "--json", str(target), "--cache-dir", str(tmp_path)]) == 0
    assert json.loads(target.read_text())["inputs"] == [[3, 3, 64, 64]]
    assert len(list(tmp_path.glob("mobilenet_v3_small-*/model.pnnx.param"))) == 2  # at pnnx's batch 1, then at 3


def test_without_pnnx_the_error_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "pnnx", None)  # as if it were not installed
    with pytest.raises(ExportToolsMissing, match=r"pip install 'graphexec\[export\]'"):
        Engine.load(FIXTURES / "shufflenet_v2.onnx")
