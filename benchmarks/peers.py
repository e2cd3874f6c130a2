"""Batch-1 latency of graphexec beside onnxruntime, ncnn and PyTorch eager, on the same models.

Every engine runs the same exported model with the same input: graphexec the pnnx export,
onnxruntime the ``torch.onnx.export`` of it, ncnn the ncnn files of the same pnnx run (fp32
weights), PyTorch the module itself. Each column runs in a process of its own (so no
engine's thread pool or OpenMP runtime shares a process with another's), and rounds are
interleaved: each round runs every column once, in turn, with a short pause so that no
engine's spinning workers eat into the next one's time. After a warm-up a cell shows the
median and the 90th percentile in ms. Each engine's output is checked against PyTorch's
saved one (max |diff| / max |ref|), and the last columns give graphexec's best over the
best peer's best, and ``Engine.load`` time.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/peers.py
    python benchmarks/peers.py --rounds 30 googlenet wide
    python benchmarks/peers.py --profile --rounds 20 googlenet resnet50   # graphexec's time per op type

Columns: ``ge-1`` graphexec sequential, one thread in all (``threads=1``,
``intra_op_threads=1``); ``ge-def`` graphexec with the engine's defaults (N workers x M
BLAS threads, shown under the table); ``ort-1``/``ort-2`` onnxruntime sequential with 1/2
intra-op threads; ``ort-par`` onnxruntime's parallel executor (2 inter-op x 1 intra-op);
``ncnn-1``/``ncnn-2`` and ``torch-1``/``torch-2`` with 1/2 threads. A peer that is not
installed (or a model without its export) gives a column of ``-``. Needs the exports of
``python tools/export_networks.py --peers-only NAME ...`` (the pnnx ones besides); PyTorch
columns need torch and torchvision. ``--profile`` runs no peer: it prints graphexec's
sequential single-thread time per op type for each model (the median over the rounds of
each type's summed node time), to show where a network's time goes. This is a script,
never run as a test.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from graphexec.blas import ask_for_short_spins  # isort: skip

ask_for_short_spins()  # as the CLI does, before numpy loads OpenBLAS (see graphexec.blas)
from graphexec import Engine  # isort: skip
from graphexec.engine import cpu_count  # isort: skip
import numpy as np  # isort: skip
from benchmarks._checks import model_files  # isort: skip

NETWORKS = ["googlenet", "inception_v3", "resnet50", "densenet121", "squeezenet1_1", "mobilenet_v3_small",
            "shufflenet_v2", "efficientnet_b0", "wide"]
GE_COLUMNS = ["ge-1", "ge-def"]
PEER_COLUMNS = ["ort-1", "ort-2", "ort-par", "ncnn-1", "ncnn-2", "torch-1", "torch-2"]
#: Seconds between two timed calls, so that spinning worker threads go back to sleep.
PAUSE = 0.002


class Model:
    """Where one model's files live: the pnnx export, its peers' exports and PyTorch's io."""

    def __init__(self, name: str):
        self.name = name
        self.param, io = model_files(name)
        # a bundled example's peers live in artifacts/peers, a network's beside its pnnx files
        bundled = self.param.parent == ROOT / "examples" / "models"
        self.peers = ROOT / "artifacts" / "peers" / name if bundled else self.param.parent
        if not self.param.exists():
            raise FileNotFoundError(f"{name}: no pnnx export; run `python tools/export_networks.py {name}`")
        with np.load(io) as data:
            self.x, self.want = data["in0"], data["out0"]

    def torch_module(self):
        """The PyTorch module, rebuilt as tools/export_networks.py builds it."""
        from tools.export_networks import NETWORKS as TORCHVISION
        from tools.export_networks import build, build_example

        return build(self.name) if self.name in TORCHVISION else build_example(self.name)[0]


# -- one builder per engine: the call that runs a column, returning the output ---------------------
def graphexec_column(model: Model, column: str) -> tuple[Callable, str, float | None]:
    """(run, workers x BLAS threads, median Engine.load seconds for ge-1)."""
    load = None
    if column == "ge-1":
        seconds = []
        for _ in range(3):
            start = time.perf_counter()
            Engine.load(model.param).close()
            seconds.append(time.perf_counter() - start)
        load = statistics.median(seconds)
        engine = Engine.load(model.param, threads=1, intra_op_threads=1)
    else:
        engine = Engine.load(model.param)
    x = model.x
    return (lambda: engine.forward(x)), f"{engine.threads}x{engine.intra_op_threads}", load


def onnxruntime_column(model: Model, column: str) -> Callable | None:
    import onnxruntime as ort

    path = model.peers / "model.onnx"
    if not path.exists():
        return None
    mode, inter, intra = {"ort-1": (ort.ExecutionMode.ORT_SEQUENTIAL, 1, 1),
                          "ort-2": (ort.ExecutionMode.ORT_SEQUENTIAL, 1, 2),
                          "ort-par": (ort.ExecutionMode.ORT_PARALLEL, 2, 1)}[column]
    options = ort.SessionOptions()
    options.execution_mode, options.inter_op_num_threads, options.intra_op_num_threads = mode, inter, intra
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    feed = {session.get_inputs()[0].name: model.x}
    return lambda: session.run(None, feed)[0]


def ncnn_column(model: Model, column: str) -> Callable | None:
    import ncnn

    param, weights = model.peers / "model.ncnn.param", model.peers / "model.ncnn.bin"
    if not param.exists():
        return None
    image = ncnn.Mat(np.ascontiguousarray(model.x[0]))
    net = ncnn.Net()
    net.opt.num_threads = int(column.split("-")[1])
    # fp32 throughout, as the other engines compute.
    net.opt.use_fp16_packed = net.opt.use_fp16_storage = net.opt.use_fp16_arithmetic = False
    net.opt.use_bf16_storage = False
    net.load_param(str(param))
    net.load_model(str(weights))

    def run():
        extractor = net.create_extractor()
        extractor.input("in0", image)
        _, out = extractor.extract("out0")
        return np.array(out).reshape(model.want.shape)

    return run


def torch_column(model: Model, column: str) -> Callable | None:
    import torch

    module = model.torch_module().eval()
    torch.set_num_threads(int(column.split("-")[1]))
    x = torch.from_numpy(model.x)

    def run():
        with torch.inference_mode():
            return module(x).numpy()

    return run


# -- one process per column ---------------------------------------------------------------------
PEERS = {"ort": onnxruntime_column, "ncnn": ncnn_column, "torch": torch_column}


def worker(column: str, name: str) -> None:
    """Serve one column of one model: print ``ready <rel diff> <load s> <note>``, then one
    duration per line read from stdin (or ``missing <why>`` if the column cannot run)."""
    warnings.filterwarnings("ignore")
    model = Model(name)
    note, load = "-", None
    if column in GE_COLUMNS:
        run, note, load = graphexec_column(model, column)
    else:
        family = column.split("-")[0]
        try:
            run = PEERS[family](model, column)
        except ImportError as exc:
            print(f"missing {family} not installed ({exc.name})", flush=True)
            return
        if run is None:
            print(f"missing {family}: no export (python tools/export_networks.py --peers-only {name})", flush=True)
            return
    print(f"ready {rel_diff(run(), model.want):.3e} {'-' if load is None else f'{load:.3f}'} {note}", flush=True)
    for _ in sys.stdin:
        start = time.perf_counter()
        run()
        print(time.perf_counter() - start, flush=True)


class Column:
    """A worker process running one column (``script --worker COLUMN NAME``, by default this
    script's :func:`worker`)."""

    def __init__(self, column: str, name: str, script: str = __file__):
        self.column = column
        env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")}
        self.process = subprocess.Popen([sys.executable, script, "--worker", column, name], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, text=True, env=env)
        words = (self.process.stdout.readline() or "missing worker failed").split(maxsplit=3)
        self.ok = words[0] == "ready"
        self.diff = float(words[1]) if self.ok else None
        self.load = words[2] if self.ok else "-"
        self.note = words[3].strip() if self.ok and len(words) > 3 else " ".join(words[1:]).strip()
        if not self.ok:
            self.close()

    def time(self) -> float:
        self.process.stdin.write("go\n")
        self.process.stdin.flush()
        return float(self.process.stdout.readline())

    def close(self) -> None:
        if self.process.stdin:
            self.process.stdin.close()
        self.process.wait()


def measure(columns: list[Column], rounds: int, warmup: int) -> dict[str, list[float]]:
    for column in columns:
        for _ in range(warmup):
            column.time()
        time.sleep(PAUSE)
    times: dict[str, list[float]] = {c.column: [] for c in columns}
    for _ in range(rounds):
        for column in columns:
            times[column.column].append(column.time())
            time.sleep(PAUSE)
    return times


def p90(values: list[float]) -> float:
    return statistics.quantiles(values, n=10)[-1] if len(values) > 1 else values[0]


def rel_diff(got: np.ndarray, want: np.ndarray) -> float:
    got = np.asarray(got, dtype=np.float64).reshape(want.shape)
    return float(np.abs(got - want).max() / max(float(np.abs(want).max()), 1e-30))


def blas_line() -> str:
    from threadpoolctl import threadpool_info

    info = [f"{i.get('internal_api')} {i.get('version')} {i.get('architecture')} ({i.get('num_threads')} threads)"
            for i in threadpool_info() if i.get("user_api") == "blas"]
    return ", ".join(info) or "no BLAS found by threadpoolctl"


def profile(name: str, rounds: int, warmup: int) -> None:
    """Print graphexec's time per op type on ``name``: one worker, one BLAS thread."""
    from graphexec import Trace

    model = Model(name)
    engine = Engine.load(model.param, threads=1, intra_op_threads=1)
    for _ in range(warmup):
        engine.forward(model.x)
    per_type: dict[str, list[float]] = {}
    counts: dict[str, int] = {}
    walls = []
    trace = Trace()
    for _ in range(rounds):
        engine.forward(model.x, trace=trace)
        walls.append((trace.end_ns - trace.start_ns) / 1e6)
        sums: dict[str, float] = dict.fromkeys(per_type, 0.0)
        counts = {}
        for event in trace.events:
            sums[event.type] = sums.get(event.type, 0.0) + (event.end_ns - event.start_ns) / 1e6
            counts[event.type] = counts.get(event.type, 0) + 1
        for op_type, ms in sums.items():
            per_type.setdefault(op_type, []).append(ms)
        time.sleep(PAUSE)
    engine.close()
    wall = statistics.median(walls)
    print(f"{name}: median wall {wall:.2f} ms over {rounds} runs (1 worker, 1 BLAS thread)")
    medians = {t: statistics.median(v) for t, v in per_type.items()}
    for op_type, ms in sorted(medians.items(), key=lambda kv: -kv[1]):
        print(f"  {op_type:<28} {counts.get(op_type, 0):>5} x {ms:9.3f} ms {ms / wall:7.1%}")


def main() -> None:
    parser = argparse.ArgumentParser(description="graphexec beside onnxruntime, ncnn and PyTorch, batch 1")
    parser.add_argument("names", nargs="*", help=f"models (default: {' '.join(NETWORKS)})")
    parser.add_argument("--rounds", type=int, default=15, help="timed rounds per model (default 15)")
    parser.add_argument("--warmup", type=int, default=3, help="untimed runs per column first (default 3)")
    parser.add_argument("--profile", action="store_true",
                        help="print graphexec's single-thread time per op type instead of comparing engines")
    parser.add_argument("--worker", nargs=2, metavar=("COLUMN", "MODEL"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(*args.worker)
        return
    if args.profile:
        from threadpoolctl import threadpool_limits

        with threadpool_limits(1):
            for name in args.names or NETWORKS:
                profile(name, args.rounds, args.warmup)
        return
    for variable in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"):
        if variable in os.environ:
            print(f"note: {variable}={os.environ[variable]} is set here; the workers run without it")
    print(f"{cpu_count()} cores, load average {os.getloadavg()[0]:.2f}; numpy BLAS: {blas_line()}")
    print(f"batch 1; median/p90 ms over {args.rounds} interleaved rounds after {args.warmup} warm-up runs, "
          "one process per column")
    names = GE_COLUMNS + PEER_COLUMNS
    header = f"{'network':<19}" + "".join(f"{c:>14}" for c in names) + f"{'ge/peer':>9}{'load s':>8}"
    rows, diffs, notes = [], [], []
    for name in args.names or NETWORKS:
        try:
            model = Model(name)
        except FileNotFoundError as exc:
            notes.append(str(exc))
            continue
        del model
        columns = [Column(c, name) for c in names]
        for note in dict.fromkeys(c.note for c in columns if not c.ok):
            notes.append(f"{name}: {note}")
        running = [c for c in columns if c.ok]
        times = measure(running, args.rounds, args.warmup)
        for column in running:
            column.close()
        med = {c: statistics.median(t) * 1e3 for c, t in times.items()}
        cells = "".join(f"{f'{med[c]:.1f}/{p90(times[c]) * 1e3:.1f}' if c in med else '-':>14}" for c in names)
        ge_best = min(med[c] for c in GE_COLUMNS)
        peer_best = min((med[c] for c in PEER_COLUMNS if c in med), default=None)
        ratio = f"{ge_best / peer_best:.2f}x" if peer_best else "-"
        by_name = {c.column: c for c in columns}
        rows.append(f"{name:<19}{cells}{ratio:>9}{by_name['ge-1'].load:>8}")
        diffs.append(f"{name:<19}" + "".join(
            f"{f'{by_name[c].diff:.1e}' if by_name[c].ok else '-':>14}" for c in names))
        notes.append(f"{name}: ge-def runs {by_name['ge-def'].note} (workers x BLAS threads)")
        print(rows[-1], flush=True)
    print("\n" + header)
    print("\n".join(rows))
    print("\nmax |out - PyTorch's| / max |PyTorch's|\n" + header[: 19 + 14 * len(names)])
    print("\n".join(diffs))
    print(f"\nload average at the end {os.getloadavg()[0]:.2f}; ge/peer = graphexec's best median over the "
          "best peer's; load s = Engine.load (median of 3)")
    for note in notes:
        print(f"  {note}")


if __name__ == "__main__":
    main()
