"""Every example script runs as a user runs it (a subprocess, no arguments but ``--smoke``),
exits 0 and prints what it is there to show."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest

from tests.paths import REPO

EXAMPLES = REPO / "examples"

def _opencl_devices() -> bool:
    """Whether an OpenCL device is present (then the OpenCL example runs layers on it)."""
    try:
        from graphexec.devices.opencl import list_devices

        return bool(list_devices())
    except Exception:  # no pyopencl, no platform: the example says so instead
        return False


#: script -> lines (or parts of lines) it must print on stdout.
EXPECTED = {
    "inception.py": ["sequential vs PyTorch: ", "concurrent == sequential: bit-identical",
                     "median latency of 3 interleaved rounds: sequential ", "engine's choice: "],
    "shufflenet.py": ["ShuffleNet vs PyTorch: ", "channel splits"],
    "multi_io.py": ["two heads vs PyTorch: ", "extracted the joined features"],
    "custom_layer.py": ["loading fails, as it should:", "aten::i0: used by pnnx_0",
                        "with the custom layer vs PyTorch: "],
    "opencl.py": ["layers ran on"] if _opencl_devices() else ["No OpenCL device here"],
    "schedule.py": ["inception_mini on 2 workers:", "parallelism"],
}
HAVE_MATPLOTLIB = importlib.util.find_spec("matplotlib") is not None


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, subprocess.CompletedProcess]:
    """Every example at once (they are short and mostly wait on imports), and schedule.py
    once more where importing matplotlib fails."""
    folder = tmp_path_factory.mktemp("examples")
    hidden = folder / "no_matplotlib" / "matplotlib"
    hidden.mkdir(parents=True)
    (hidden / "__init__.py").write_text("raise ImportError('No module named matplotlib (hidden by the test)')\n")
    jobs = {name: ([str(EXAMPLES / name), "--smoke"], None) for name in EXPECTED}
    jobs["schedule.py"] = ([str(EXAMPLES / "schedule.py"), str(folder / "timeline.png"), "--smoke"], None)
    jobs["schedule.py without matplotlib"] = (
        [str(EXAMPLES / "schedule.py"), str(folder / "never.png"), "--smoke"],
        {**os.environ, "PYTHONPATH": str(hidden.parent)},
    )
    started = {
        name: subprocess.Popen([sys.executable, *argv], cwd=folder, env=env, text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        for name, (argv, env) in jobs.items()
    }
    done: dict = {"_folder": folder}
    for name, process in started.items():
        out, err = process.communicate(timeout=120)
        done[name] = subprocess.CompletedProcess(process.args, process.returncode, out, err)
    return done


def test_every_example_is_checked_here():
    scripts = {p.name for p in EXAMPLES.glob("*.py")} - {"common.py"}
    assert scripts == set(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_example_runs_and_shows_what_it_is_for(runs, name):
    run = runs[name]
    assert run.returncode == 0, f"{name} failed:\n{run.stdout}\n{run.stderr}"
    for text in EXPECTED[name]:
        assert text in run.stdout, f"{name} did not print {text!r}:\n{run.stdout}"
    assert "MISMATCH" not in run.stdout and "Traceback" not in run.stderr


def test_schedule_draws_a_png_with_matplotlib(runs):
    run, png = runs["schedule.py"], runs["_folder"] / "timeline.png"
    if not HAVE_MATPLOTLIB:
        pytest.skip("matplotlib is not installed (the plot extra)")
    assert f"saved the timeline to {png}" in run.stdout
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_schedule_without_matplotlib_says_how_to_install_it(runs):
    run = runs["schedule.py without matplotlib"]
    assert run.returncode == 0, run.stderr
    assert 'pip install -e ".[plot]"' in run.stdout and "parallelism" in run.stdout
    assert not (runs["_folder"] / "never.png").exists()
