"""The command line on bundled models, and its one-line errors."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import graphexec
from graphexec import Engine, cli
from graphexec.cli import main
from tests.graphexec.cli_support import MODEL, MODELS, UNSUPPORTED, loggers_quiet_again, one_error_line  # noqa: F401


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


def test_info_describes_a_model_an_operator_of_which_cannot_run(tmp_path, capsys):
    """A real export with one convolution's stride made zero: the model is described anyway,
    and the operator that refuses its params is named with the file and line."""
    for suffix in (".pnnx.param", ".pnnx.bin"):
        (tmp_path / f"m{suffix}").write_bytes(MODEL.with_name(MODEL.name.replace(".pnnx.param", suffix)).read_bytes())
    param = tmp_path / "m.pnnx.param"
    param.write_text(param.read_text().replace("stride=(2,2)", "stride=(0,2)", 1))
    assert main(["info", str(param)]) == 0
    out = capsys.readouterr().out
    assert "input  in0: (1, 3, 64, 64)" in out and "nn.Conv2d" in out and "FLOPs:" not in out
    assert re.search(r"cannot run: operator \S+ \(nn.Conv2d\): stride=\(0, 2\) must be positive "
                     r"\(defined at .*m.pnnx.param:\d+\)", out), out


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


def test_info_on_opencl_places_the_shapes_given_for_a_dynamic_model(capsys):
    """A model exported with a dynamic batch: the placement is the plan's for --input-shape."""
    if _opencl_missing() is not None:
        pytest.skip(f"no OpenCL device: {_opencl_missing()}")
    from tests.golden import OPS

    model = OPS / "plumbing" / "relative_positions" / "model.pnnx.param"
    assert main(["info", str(model), "--input-shape", "4,3,5,5", "--device", "opencl", "--placement"]) == 0
    out = capsys.readouterr().out
    assert "planned for inputs in0 (4, 3, 5, 5)" in out
    assert "placement: 6 nodes: 3 on opencl, 3 on cpu" in out and "Tensor.permute_3" in out


def test_trace_on_opencl_has_a_lane_per_queue(tmp_path, capsys):
    if _opencl_missing() is not None:
        pytest.skip(f"no OpenCL device: {_opencl_missing()}")
    path = tmp_path / "trace.json"
    assert main(["trace", str(MODEL), "-o", str(path), "--device", "opencl", "--threads", "1"]) == 0
    events = json.loads(path.read_text())["traceEvents"]
    lanes = {e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    assert {"opencl queue 0", "opencl queue 1"} <= lanes
    assert "busy time per device queue (opencl event profiling)" in capsys.readouterr().out


def test_trace_writes_chrome_json(tmp_path, capsys):
    path = tmp_path / "trace.json"
    assert main(["trace", str(MODEL), "-o", str(path), "--threads", "2"]) == 0
    spans = [e for e in json.loads(path.read_text())["traceEvents"] if e["ph"] == "X"]
    assert len(spans) > 20
    assert "parallelism" in capsys.readouterr().out


def bad_model(tmp_path: Path, kind: str) -> Path:
    path = tmp_path / "bad.pnnx.param"
    if kind == "corrupt":
        path.write_text("7767517\n3 2\nnn.ReLU relu 1 1 0 1\n")
    elif kind == "unsupported":
        return UNSUPPORTED
    return path


COMMANDS = [["info"], ["run"], ["bench", "--rounds", "1"], ["trace", "-o", "t.json"],
            ["graph", "--plan", "-o", "g.svg"]]


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
    assert "absent.pt: no such model file" in one_error_line(capsys)
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

    monkeypatch.setattr(cli.info, "command", broken)
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


# ----------------------------------------------------------------------------------------
# --input-shape, --version, --verbose
# ----------------------------------------------------------------------------------------
def test_input_shape_is_honoured_for_a_pnnx_model(tmp_path, capsys):
    assert main(["run", str(MODEL), "--input-shape", "4,3,64,64", "--output", str(tmp_path / "y.npz")]) == 0
    out = capsys.readouterr().out
    assert "in0: shape (4, 3, 64, 64) float32" in out and "out0: shape (4, 10) float32" in out
    with np.load(tmp_path / "y.npz") as saved:
        assert saved["out0"].shape == (4, 10)


def test_info_plans_at_the_input_shape(capsys):
    assert main(["info", str(MODEL), "--input-shape", "2x3x96x96"]) == 0
    out = capsys.readouterr().out
    assert "planned for inputs in0 (2, 3, 96, 96)" in out
    assert "input  in0: (1, 3, 64, 64)" in out  # the exported shape is still shown as exported


@pytest.mark.parametrize(("shapes", "says"), [
    (["1,3,64"], "operator convbn2d_0 (nn.Conv2d) refuses [(1,3,64)float32]: expected 3 input channels"),
    (["1,3,64,64", "1,3,64,64"], "the model takes 1 input(s) (in0 (1, 3, 64, 64)); --input-shape was given 2 time(s)"),
])
def test_an_input_shape_the_model_cannot_take_is_refused_with_the_reason(capsys, shapes, says):
    args = [a for s in shapes for a in ("--input-shape", s)]
    assert main(["run", str(MODEL), *args]) == 1
    assert says in one_error_line(capsys)


def test_input_shape_and_input_files_must_agree(tmp_path, capsys):
    np.save(tmp_path / "x.npy", np.zeros((1, 3, 64, 64), np.float32))
    assert main(["run", str(MODEL), "--input", str(tmp_path / "x.npy"), "--input-shape", "2,3,64,64"]) == 1
    assert "--input-shape says [(2, 3, 64, 64)] but the --input files hold [(1, 3, 64, 64)]" in one_error_line(capsys)


def test_version(capsys):
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out == f"graphexec {graphexec.__version__}\n"


def test_the_logs_are_off_by_default_and_verbose_turns_them_on(capsys):
    assert main(["run", str(MODEL)]) == 0
    assert capsys.readouterr().err == ""
    assert main(["run", str(MODEL), "-v"]) == 0
    err = capsys.readouterr().err.splitlines()
    assert any(re.search(r" INFO +graphexec\.engine: loaded .*inception_mini\.pnnx\.param: 57 operators", line)
               for line in err), err
    assert not any(" DEBUG " in line for line in err)
    assert main(["-vv", "run", str(MODEL)]) == 0
    assert " DEBUG " in capsys.readouterr().err


def test_a_file_pnnx_writes_beside_the_model_is_one_line_naming_the_param(tmp_path, capsys):
    (tmp_path / "net.ncnn.param").write_text("7767517\n")
    assert main(["info", str(tmp_path / "net.ncnn.param")]) == 1
    assert f"pass {tmp_path / 'net.pnnx.param'} instead" in one_error_line(capsys)


def test_compile_readies_the_loops_a_model_uses_and_lists_them():
    """In a process of its own, as a user runs it (this one may have readied the loops)."""
    pytest.importorskip("numba")
    done = subprocess.run([sys.executable, "-m", "graphexec", "compile", str(MODELS / "wide.pnnx.param")],
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    listed = re.findall(r"^  (\w+)\s+(compiled|cached)\s+[\d.]+ s", out, re.MULTILINE)
    # the convolutions' and the Linear's loops (whole, or in parts on every core), the
    # activations', and the one that finds numba's threads to place them
    convolutions = {"im2col", "winograd_input", "winograd_output", "im2col_rows", "im2col_whole", "im2col_parts",
                    "winograd_rows", "winograd_parts", "pointwise_whole", "pointwise_parts",
                    "winograd_channels_whole", "winograd_channels_parts", "im2col_channels_whole",
                    "im2col_channels_parts"}
    linear = {"linear_whole", "linear_parts"}
    assert listed and {name for name, _ in listed} <= convolutions | linear | {"activate_rows", "activate_rows_parts",
                                                                               "thread_ids"}, out
    assert re.search(r"\d+ CPU loops ready for .*wide\.pnnx\.param .*\d+ nodes$", out.strip()), out


def test_compile_without_numba_is_one_line_naming_the_extra(capsys, monkeypatch):
    from graphexec.devices.cpu import jit

    monkeypatch.setattr(jit, "available", lambda: False)
    assert main(["compile", str(MODEL)]) == 1
    assert "graphexec[jit]" in one_error_line(capsys)
