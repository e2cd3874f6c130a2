"""The command line on bundled models, and its one-line errors."""

from __future__ import annotations

import json
import re
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest
from loguru import logger

from graphexec import Engine, cli, draw
from graphexec.cli import main
from tests.paths import REPO

MODELS = REPO / "examples" / "models"
MODEL = MODELS / "inception_mini.pnnx.param"
#: A real pnnx export with an operator graphexec has no layer for (aten::i0).
UNSUPPORTED = MODELS / "bessel_gate.pnnx.param"


@pytest.fixture(autouse=True)
def loggers_quiet_again():
    """``--verbose`` adds a sink on the test's captured stderr and turns the library's loggers
    on; both are undone after each test, or every later test writes its debug lines to a
    closed stream (a "Logging error" each)."""
    yield
    logger.remove()
    logger.add(sys.__stderr__)
    for package in ("graphexec", "layers", "devices"):
        logger.disable(package)


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith("graphexec: error:"), err[0]
    return err[0]


def test_info_lists_inputs_operators_and_the_plan(capsys):
    assert main(["info", str(MODEL)]) == 0
    out = capsys.readouterr().out
    assert "input  in0: (1, 3, 64, 64)" in out and "output out0: (1, 10)" in out
    assert "nn.Conv2d" in out and "parameters: 93,902" in out and "FLOPs:" in out
    assert "width 4" in out and "critical path: 19 nodes" in out and "ideal speedup" in out
    assert re.search(r"regions: 4, \d estimated faster with their branches side by side", out)  # 0 on 2 cores


def test_info_says_what_is_planned_at_run_time(capsys):
    from tests.golden import OPS

    assert main(["info", str(OPS / "dynamic" / "after_a_threshold" / "model.pnnx.param")]) == 0
    out = capsys.readouterr().out
    assert "plan: 11 nodes" in out
    assert "then 7 more nodes, planned at run time for the sizes of 9 (torch.masked_select)" in out


def test_keep_siblings_shows_the_plan_with_every_branch_apart(capsys):
    assert main(["info", str(MODEL), "--keep-siblings"]) == 0
    assert "plan: 33 nodes" in capsys.readouterr().out  # 55 operators, 22 activations fused
    assert main(["info", str(MODEL)]) == 0
    assert "plan: 36 nodes" in capsys.readouterr().out  # each block's 1x1 siblings one node, three views


def test_info_lists_unsupported_operators_instead_of_failing(capsys):
    assert main(["info", str(UNSUPPORTED)]) == 0
    captured = capsys.readouterr()
    assert captured.err == ""
    assert "unsupported operators: 1 type(s)" in captured.out
    assert "aten::i0                     used by pnnx_0" in captured.out
    assert "aten::i0                     1  (unsupported)" in captured.out


def test_run_saves_outputs(tmp_path, capsys):
    x = np.random.default_rng(0).random((1, 3, 64, 64), dtype=np.float32)
    np.save(tmp_path / "x.npy", x)
    assert main(["run", str(MODEL), "--input", str(tmp_path / "x.npy"), "--output", str(tmp_path / "y.npz")]) == 0
    with np.load(tmp_path / "y.npz") as saved:
        assert saved["out0"].shape == (1, 10)


def test_run_takes_an_io_npz_and_reproduces_pytorch(tmp_path, capsys):
    io = MODELS / "inception_mini.io.npz"
    assert main(["run", str(MODEL), "--input", str(io), "--device", "cpu", "--threads", "2",
                 "--output", str(tmp_path / "y")]) == 0
    assert f"saved {tmp_path / 'y.npz'}" in capsys.readouterr().out
    with np.load(tmp_path / "y.npz") as got, np.load(io) as want:
        np.testing.assert_allclose(got["out0"], want["out0"], rtol=1e-4, atol=1e-5)


def _opencl_missing() -> str | None:
    """Why no OpenCL device can be opened here (None: one can)."""
    try:
        from graphexec.devices.opencl import list_devices

        return None if list_devices() else "no OpenCL platform or device is installed"
    except Exception as exc:  # noqa: BLE001  (pyopencl missing or broken: the reason is the message)
        return str(exc)


def test_run_on_opencl_matches_pytorch_or_says_why_not(tmp_path, capsys):
    io = MODELS / "inception_mini.io.npz"
    status = main(["run", str(MODEL), "--input", str(io), "--device", "opencl", "--threads", "2",
                   "--output", str(tmp_path / "y.npz")])
    if _opencl_missing() is not None:
        assert status == 1
        assert "OpenCL" in one_error_line(capsys)
        return
    assert status == 0
    with np.load(tmp_path / "y.npz") as got, np.load(io) as want:
        scale = float(np.abs(want["out0"]).max())
        assert float(np.abs(got["out0"] - want["out0"]).max()) <= 1e-4 * scale


def test_a_missing_opencl_device_is_one_line(capsys):
    assert main(["run", str(MODEL), "--device", "opencl:no-such-device"]) == 1
    line = one_error_line(capsys)
    assert "no-such-device" in line or "pyopencl" in line or "no OpenCL" in line


def test_an_unknown_device_is_refused_by_the_parser(capsys):
    with pytest.raises(SystemExit) as exited:
        main(["run", str(MODEL), "--device", "cuda"])
    assert exited.value.code == 2
    assert "'cuda' is not a device" in capsys.readouterr().err


def test_info_on_opencl_shows_where_nodes_run(capsys):
    if _opencl_missing() is not None:
        pytest.skip(f"no OpenCL device: {_opencl_missing()}")
    assert main(["info", str(MODEL), "--device", "opencl", "--cpu-types", "nn.MaxPool2d", "--placement"]) == 0
    out = capsys.readouterr().out
    assert "placement: 33 nodes: 28 on opencl, 5 on cpu" in out  # 22 conv+relu pairs fused
    assert "nn.MaxPool2d             cpu" in out and "forced to CPU by cpu_types" in out
    assert "nn.Conv2d+nn.ReLU        opencl" in out


def test_trace_on_opencl_has_a_lane_per_queue(tmp_path, capsys):
    if _opencl_missing() is not None:
        pytest.skip(f"no OpenCL device: {_opencl_missing()}")
    path = tmp_path / "trace.json"
    assert main(["trace", str(MODEL), "-o", str(path), "--device", "opencl", "--threads", "1"]) == 0
    events = json.loads(path.read_text())["traceEvents"]
    lanes = {e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    assert {"opencl queue 0", "opencl queue 1"} <= lanes
    assert "busy time per device queue (opencl event profiling)" in capsys.readouterr().out


def test_bench_prints_a_table_over_thread_counts(capsys):
    assert main(["bench", str(MODEL), "--threads", "1", "2", "--rounds", "3", "--warmup", "1",
                 "--progress", "always"]) == 0
    captured = capsys.readouterr()
    rows = [line.split() for line in captured.out.splitlines() if line.strip() and line.split()[0].isdigit()]
    assert [r[:2] for r in rows[:2]] == [["1", "1"], ["2", "1"]]  # given workers: one BLAS thread each
    assert rows[2][-4:] == ["(chosen", "by", "the", "engine)"]  # and what Engine.load(path) picks
    assert "median ms" in captured.out and "p90 ms" in captured.out and rows[0][4] == "1.00x"
    assert "bench [" in captured.err and "4/4" in captured.err  # the bar on stderr, 1 warm-up + 3 rounds


def test_progress_bar_draws_in_place():
    import io

    stream = io.StringIO()
    bar = cli.ProgressBar(4, "bench", stream=stream, width=8)
    for _ in range(4):
        bar.advance()
    bar.close()
    text = stream.getvalue()
    assert text.count("\r") == 4 and "[########] 4/4" in text and text.endswith("\n")


def test_trace_writes_chrome_json(tmp_path, capsys):
    path = tmp_path / "trace.json"
    assert main(["trace", str(MODEL), "-o", str(path), "--threads", "2"]) == 0
    spans = [e for e in json.loads(path.read_text())["traceEvents"] if e["ph"] == "X"]
    assert len(spans) > 20
    assert "parallelism" in capsys.readouterr().out


def test_graph_svg_draws_every_node_and_the_critical_path(tmp_path, capsys):
    path = tmp_path / "graph.svg"
    assert main(["graph", str(MODEL), "-o", str(path)]) == 0
    root = ET.fromstring(path.read_text())
    ns = {"svg": "http://www.w3.org/2000/svg"}
    boxes = root.findall(".//svg:g/svg:rect", ns)
    plan = Engine.load(MODEL).plan()
    # 55 operators, 22 activations fused into their producers, each block's three 1x1
    # siblings one node with a view per sibling (graphexec.siblings)
    assert len(plan.nodes) == 55 - 22 - 3 * 2 + 3 * 3
    assert len(boxes) == len(plan.nodes) + 2  # the plan's nodes, the input and the output
    critical = [b for b in boxes if b.get("stroke") == draw.CRITICAL_COLOUR]
    assert len(critical) == len(plan.critical_path) == 19
    assert {b.get("fill") for b in boxes} == {draw.device_colour("cpu"), draw.BOUNDARY_COLOUR}


def test_graph_dot_has_every_node_and_edge(tmp_path, capsys):
    path = tmp_path / "graph.dot"
    assert main(["graph", str(MODEL), "-o", str(path)]) == 0
    text = path.read_text()
    assert text.startswith('digraph "inception_mini" {') and text.rstrip().endswith("}")
    assert sum(" [label=" in line for line in text.splitlines()) == 36 + 2
    assert text.count("penwidth=2.5];") == 19 + 18 + 2  # critical nodes, edges between them, in and out
    assert "dot -Tsvg" in capsys.readouterr().out


def test_graph_colour_follows_the_device():
    assert draw.device_colour("cpu") == draw.DEVICE_COLOURS["cpu"]
    assert draw.device_colour("opencl") != draw.device_colour("cpu")
    assert draw.device_colour("npu").startswith("#") and draw.device_colour("npu") == draw.device_colour("npu")

    class Placed:
        device = "opencl"

    assert draw.node_device(Placed()) == "opencl" and draw.node_device(object()) == "cpu"


def test_graph_refuses_other_formats(tmp_path, capsys):
    assert main(["graph", str(MODEL), "-o", str(tmp_path / "graph.png")]) == 1
    assert "must end in .svg or .dot" in one_error_line(capsys)


def bad_model(tmp_path: Path, kind: str) -> Path:
    path = tmp_path / "bad.pnnx.param"
    if kind == "corrupt":
        path.write_text("7767517\n3 2\nnn.ReLU relu 1 1 0 1\n")
    elif kind == "unsupported":
        return UNSUPPORTED
    return path


COMMANDS = [["info"], ["run"], ["bench", "--rounds", "1"], ["trace", "-o", "t.json"], ["graph", "-o", "g.svg"]]


@pytest.mark.parametrize(("command", "kind"), [
    (command, kind) for command in COMMANDS for kind in ("missing", "corrupt", "unsupported")
    if (command[0], kind) != ("info", "unsupported")  # info lists them instead (tested above)
], ids=lambda v: v if isinstance(v, str) else v[0])
def test_bad_models_give_one_line_and_status_1(tmp_path, capsys, monkeypatch, command, kind):
    monkeypatch.chdir(tmp_path)
    path = bad_model(tmp_path, kind)
    assert main([command[0], str(path), *command[1:]]) == 1
    line = one_error_line(capsys)
    assert path.name in line if kind != "unsupported" else "aten::i0: used by pnnx_0" in line


def test_bad_input_files_give_one_line(tmp_path, capsys):
    (tmp_path / "x.npy").write_text("not numpy")
    assert main(["run", str(MODEL), "--input", str(tmp_path / "x.npy")]) == 1
    assert "cannot read the --input file" in one_error_line(capsys)
    np.save(tmp_path / "wrong.npy", np.zeros((1, 3, 64), np.float32))
    assert main(["run", str(MODEL), "--input", str(tmp_path / "wrong.npy")]) == 1
    assert "expected a tensor of rank 4" in one_error_line(capsys)


def test_torchscript_needs_shapes_and_a_file(tmp_path, capsys):
    assert main(["info", str(tmp_path / "absent.pt")]) == 1
    assert "no such TorchScript file" in one_error_line(capsys)
    (tmp_path / "m.pt").write_bytes(b"")
    assert main(["info", str(tmp_path / "m.pt")]) == 1
    assert "--input-shape" in one_error_line(capsys)


def test_torchscript_without_torch_or_pnnx_is_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # importing them now raises ImportError
    monkeypatch.setitem(sys.modules, "pnnx", None)
    (tmp_path / "m.pt").write_bytes(b"")
    assert main(["info", str(tmp_path / "m.pt"), "--input-shape", "1,3,8,8"]) == 1
    assert "pip install 'graphexec[export]'" in one_error_line(capsys)


def test_a_folder_with_one_model_is_a_model(capsys):
    assert main(["info", str(MODELS)]) == 1  # the examples folder holds several
    assert "expected one .pnnx.param in the folder" in one_error_line(capsys)


def test_verbose_shows_the_chain_anywhere_on_the_line(tmp_path, capsys):
    assert main(["info", str(tmp_path / "absent.pnnx.param"), "--verbose"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("graphexec: error:") and "Traceback" in err and "FileNotFoundError" in err


def test_a_bug_is_one_line_without_verbose(capsys, monkeypatch):
    def broken(args):
        raise KeyError("oops")

    monkeypatch.setattr(cli, "cmd_info", broken)
    assert main(["info", str(MODEL)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["graphexec: internal error: KeyError: 'oops' (run with --verbose for the traceback)"]


def test_one_line_joins_multi_line_messages():
    from graphexec.errors import UnsupportedOperatorError

    text = cli.one_line(UnsupportedOperatorError({"a::x": ["p"], "b::y": ["q", "r"]}))
    assert "\n" not in text
    assert text.startswith("2 unsupported operator type(s): a::x: used by p; b::y: used by q, r")


def test_info_says_where_workers_are_pinned(capsys):
    assert main(["info", str(MODEL), "--threads", "2"]) == 0
    line = [x for x in capsys.readouterr().out.splitlines() if x.startswith("threads:")][0]
    engine = Engine.load(MODEL, threads=2)
    if engine.worker_cores:
        assert line.endswith(f"workers pinned to cores {', '.join(map(str, engine.worker_cores))}")
    else:
        assert "pinned" not in line
    assert main(["info", str(MODEL), "--threads", "1"]) == 0
    assert "pinned" not in capsys.readouterr().out
