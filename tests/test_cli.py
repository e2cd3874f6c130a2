"""The command line on a bundled model, and its one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from graphexec.cli import main

MODEL = Path(__file__).resolve().parent.parent / "examples" / "models" / "inception_mini.pnnx.param"


def test_info_lists_inputs_operators_and_the_plan(capsys):
    assert main(["info", str(MODEL)]) == 0
    out = capsys.readouterr().out
    assert "input  in0: (1, 3, 64, 64)" in out
    assert "nn.Conv2d" in out and "ideal speedup" in out


def test_run_saves_outputs(tmp_path, capsys):
    x = np.random.default_rng(0).random((1, 3, 64, 64), dtype=np.float32)
    np.save(tmp_path / "x.npy", x)
    assert main(["run", str(MODEL), "--input", str(tmp_path / "x.npy"), "--output", str(tmp_path / "y.npz")]) == 0
    with np.load(tmp_path / "y.npz") as saved:
        assert saved["out0"].shape == (1, 10)


def test_trace_writes_chrome_json(tmp_path, capsys):
    path = tmp_path / "trace.json"
    assert main(["trace", str(MODEL), "-o", str(path), "--threads", "2"]) == 0
    spans = [e for e in json.loads(path.read_text())["traceEvents"] if e["ph"] == "X"]
    assert len(spans) > 20
    assert "parallelism" in capsys.readouterr().out


@pytest.mark.parametrize("make_bad", ["missing", "corrupt"])
def test_bad_models_give_one_line_and_status_1(tmp_path, capsys, make_bad):
    path = tmp_path / "bad.pnnx.param"
    if make_bad == "corrupt":
        path.write_text("7767517\n3 2\nnn.ReLU relu 1 1 0 1\n")
    assert main(["info", str(path)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("graphexec: error:") and "bad.pnnx.param" in err[0]
