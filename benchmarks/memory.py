"""Activation memory per network: without reuse, with graphexec's memory plan, the bound a
single-order planner could reach, and the process's peak RSS beside onnxruntime's.

Columns (MiB unless said):

- ``no reuse``: every arena tensor in bytes of its own (what a run without the plan allocates);
- ``plan``: the arena of :class:`graphexec.memory.MemoryPlan`, safe under any schedule;
- ``seq best``: the most bytes of those tensors alive at once in the best sequential order
  found (the plan's Kahn order or a greedy order that frees memory first);
- ``floor``: a true lower bound for any order (what one node touches at once);
- ``plan/seq``: the plan over ``seq best``;
- ``rss ge``, ``rss ge-noreuse``, ``rss ort``: peak resident memory of a fresh process that
  loads the model and runs 20 forwards (graphexec with and without the plan, onnxruntime
  sequential on the ONNX export of the same model), each in a process of its own;
- ``ge end``, ``ort end``: the resident memory of those processes after the 20 forwards
  (the peak also counts what loading held for a while: the weight file as it is read, the
  weights as they are laid out).

    python benchmarks/memory.py                      # every exported network
    python benchmarks/memory.py googlenet resnet50   # some of them
    python benchmarks/memory.py --no-rss             # the plan's figures only (fast)

Needs ``python tools/export_networks.py`` (and ``pip install onnx onnxruntime`` for the ort
column; without them it shows ``-``). A script, never run as a test.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

NETWORKS = ["googlenet", "inception_v3", "resnet50", "densenet121", "mobilenet_v3_small", "shufflenet_v2",
            "efficientnet_b0", "squeezenet1_1", "resnext50", "mobilenet_v2", "mobilenet_v3_large", "mnasnet",
            "regnet_y_400mf", "convnext_tiny", "vgg11", "alexnet"]

#: Runs in a child process: load, run, print the peak RSS in bytes as JSON.
_CHILD = r"""
import json, sys
import numpy as np
kind, folder = sys.argv[1], sys.argv[2]
x = np.load(folder + "/io.npz")["in0"]
if kind == "ort":
    import onnxruntime as ort
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(folder + "/model.onnx", options, providers=["CPUExecutionProvider"])
    run = lambda: session.run(None, {"in0": x})
else:
    sys.path.insert(0, sys.argv[3])
    from graphexec import Engine
    engine = Engine.load(folder + "/model.pnnx.param", threads=1, intra_op_threads=1,
                         reuse_memory=(kind == "ge"))
    run = lambda: engine.forward(x)
for _ in range(20):
    run()
# VmHWM: this process's own peak (ru_maxrss would include the parent's, inherited at fork)
status = {line.split(":")[0]: int(line.split()[1]) * 1024 for line in open("/proc/self/status")
          if line.startswith(("VmHWM:", "VmRSS:"))}
print(json.dumps([status["VmHWM"], status["VmRSS"]]))
"""


def rss(kind: str, folder: Path) -> tuple[float | None, float | None]:
    """(peak, final) RSS in MiB of a child process running ``kind`` on ``folder``'s model
    (None: n/a)."""
    if kind == "ort" and not (folder / "model.onnx").exists():
        return None, None
    done = subprocess.run([sys.executable, "-c", _CHILD, kind, str(folder), str(ROOT)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        return None, None
    peak, final = json.loads(done.stdout.strip().splitlines()[-1])
    return peak / 2**20, final / 2**20


def main() -> None:
    parser = argparse.ArgumentParser(description="activation memory and peak RSS per network")
    parser.add_argument("names", nargs="*", help="networks (default: every exported one)")
    parser.add_argument("--no-rss", action="store_true", help="skip the peak-RSS columns")
    args = parser.parse_args()
    from graphexec import Engine

    base = ROOT / "artifacts" / "networks"
    names = [n for n in (args.names or NETWORKS) if (base / n / "model.pnnx.param").exists()]
    if not names:
        sys.exit("no exported networks: run `python tools/export_networks.py` first")
    header = f"{'network':20s} {'no reuse':>9s} {'plan':>7s} {'seq best':>9s} {'floor':>7s} {'plan/seq':>9s}"
    if not args.no_rss:
        header += f" {'rss ge':>8s} {'ge end':>7s} {'rss ge-noreuse':>15s} {'rss ort':>8s} {'ort end':>8s}"
    print("MiB, batch 1, the exported input size")
    print(header)
    mib = 2**20
    for name in names:
        memory = Engine.load(base / name / "model.pnnx.param").memory_plan()
        row = (f"{name:20s} {memory.unshared_bytes / mib:9.1f} {memory.arena_bytes / mib:7.1f} "
               f"{memory.sequential_bytes / mib:9.1f} {memory.floor_bytes / mib:7.1f} "
               f"{memory.arena_bytes / max(1, memory.sequential_bytes):8.2f}x")
        if not args.no_rss:
            (ge, ge_end), (noreuse, _), (ort, ort_end) = (rss(kind, base / name) for kind in ("ge", "ge-noreuse", "ort"))
            cells = (ge, ge_end, noreuse, ort, ort_end)
            row += "".join(f" {'-' if c is None else f'{c:.0f}':>{w}s}" for c, w in zip(cells, (8, 7, 15, 8, 8)))
        print(row, flush=True)


if __name__ == "__main__":
    main()
