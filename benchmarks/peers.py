"""graphexec beside onnxruntime, ncnn and PyTorch on the same models: batch-1 latency and
batch-8 throughput, every output checked against PyTorch's.

Every engine runs the same exported model with the same input: graphexec the pnnx export,
onnxruntime the ``torch.onnx.export`` of it (its batch dimension made free for batch 8),
ncnn the ncnn files of the same pnnx run (fp32 weights; a batch of 8 is 8 calls, as ncnn
serves batches), PyTorch the module itself. Each column runs in a process of its own (so
no engine's thread pool or OpenMP runtime shares a process with another's), and rounds are
interleaved: each round runs every column once at batch 1 and once at batch 8, in turn,
with a short pause so that no engine's spinning workers eat into the next one's time (over
a second before graphexec's default engines, whose reading of the load must not count the
other columns' calls: see ``ADAPTING``).
After a warm-up a cell shows the median ms (per call of 1 image; per 8 images) over the
rounds. Each engine's batch-1 output is checked against PyTorch's saved one and its
batch-8 output against PyTorch's on the same 8 images (max |diff| / max |ref|); a column
off by more than 1e-3 is dropped from the ratios with a note. The last columns give the
ratios graphexec (compiled kernels) / best peer, at batch 1 and batch 8, and
``Engine.load`` time.

    python benchmarks/peers.py                                     # the nine networks, 15 rounds
    python benchmarks/peers.py --rounds 30 googlenet wide
    python benchmarks/peers.py --peer-python /work/envs/export/bin/python   # peers in another env
    python benchmarks/peers.py --profile --kernels jit googlenet   # graphexec's time per op type

Columns: ``ge-np`` and ``ge-jit``: graphexec with the engine's defaults (its threads chosen
and adapted to the load, see graphexec.threads), on the numpy kernels and on the compiled
ones (the jit extra); ``ge-jit-1``: compiled kernels, ``threads=1, intra_op_threads=1``;
``ort-1``/``ort-2`` onnxruntime sequential with 1/2 intra-op threads; ``ort-par``
onnxruntime's parallel executor (2 inter-op x 1 intra-op); ``ncnn-1``/``ncnn-2`` with 1/2
threads; ``torch`` PyTorch eager with its default threads. A peer that is not installed (or
a model without its export) gives a column of ``-``. ``--peer-python`` runs the peers'
columns with another interpreter (one that has onnxruntime, ncnn, onnx, torch and
torchvision; the repository goes on its path). Needs the exports of ``python
tools/export_networks.py NAME`` (with peers); a bundled example's peer files are looked
for in ``artifacts/peers/NAME`` and then ``--peer-dir``. ``--profile`` runs no peer: it
prints graphexec's single-thread time per op type for each model (the median over the
rounds of each type's summed node time) and the time between nodes, to show where a
network's time goes. The method and the results are in docs/benchmarks.md. This is a
script, never run as a test.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from graphexec.blas import ask_for_short_spins  # isort: skip

ask_for_short_spins()  # as the CLI does, before numpy loads OpenBLAS (see graphexec.blas)
from graphexec.occupancy import STALE_SECONDS  # isort: skip
import numpy as np  # isort: skip
from benchmarks._checks import model_files  # isort: skip

NETWORKS = ["googlenet", "inception_v3", "resnet50", "densenet121", "squeezenet1_1", "mobilenet_v3_small",
            "shufflenet_v2", "efficientnet_b0", "wide"]
GE_COLUMNS = ["ge-np", "ge-jit", "ge-jit-1"]
PEER_COLUMNS = ["ort-1", "ort-2", "ort-par", "ncnn-1", "ncnn-2", "torch"]
#: The column whose time the ratios take for graphexec.
GE_RATIO = "ge-jit"
#: Seconds between two timed calls, so that spinning worker threads go back to sleep.
PAUSE = 0.002
#: The columns whose engines adapt their threads to the load of other processes, which
#: they read over the time since their last reading (graphexec/occupancy.py): the other
#: columns' calls in between would count as such. Each of their rounds starts after a
#: pause long enough for that reading to be stale, so that they see the machine as it is
#: when they start, as in a quiet service.
ADAPTING = ("ge-np", "ge-jit")
#: The larger batch (throughput).
BATCH = 8
#: An output further than this from PyTorch's (relative to its largest) is a wrong answer.
WRONG = 1e-3
#: Where a bundled example's peer files are looked for after artifacts/peers.
PEER_DIR = ROOT / ".cache" / "peers"


class Model:
    """Where one model's files live: the pnnx export, its peers' exports and PyTorch's io."""

    def __init__(self, name: str, peer_dir: Path = PEER_DIR):
        self.name = name
        self.param, io = model_files(name)
        # a bundled example's peers live in artifacts/peers (or peer_dir), a network's beside its pnnx files
        bundled = self.param.parent == ROOT / "examples" / "models"
        self.peers = self.param.parent
        if bundled:
            found = [d / name for d in (ROOT / "artifacts" / "peers", peer_dir) if (d / name).is_dir()]
            self.peers = found[0] if found else ROOT / "artifacts" / "peers" / name
        if not self.param.exists():
            raise FileNotFoundError(f"{name}: no pnnx export; run `python tools/export_networks.py {name}`")
        with np.load(io) as data:
            self.x, self.want = data["in0"], data["out0"]
        rest = np.random.default_rng(0).random((BATCH - 1, *self.x.shape[1:]), dtype=np.float32)
        #: The batch of :data:`BATCH`: the saved input, then random images.
        self.batch = np.concatenate([self.x, rest]).astype(self.x.dtype)

    def torch_module(self):
        """The PyTorch module, rebuilt as tools/export_networks.py builds it."""
        from tools.export_networks import NETWORKS as TORCHVISION
        from tools.export_networks import build, build_example

        return build(self.name) if self.name in TORCHVISION else build_example(self.name)[0]


# -- one builder per engine: run(x) -> the output, for a batch of 1 or of BATCH ------------------------
def graphexec_column(model: Model, column: str) -> tuple[Callable, str]:
    """(run, the engine's workers x BLAS threads and kernels)."""
    from graphexec import Engine

    kernels = "numpy" if column == "ge-np" else "jit"
    threads = {"threads": 1, "intra_op_threads": 1} if column.endswith("-1") else {}
    engine = Engine.load(model.param, cpu_kernels=kernels, **threads)
    note = f"{engine.threads}x{engine.intra_op_threads}" + (" adapting" if engine.policy.adapts else "")
    return _batched(engine.forward), note


def _batched(one: Callable) -> Callable:
    """``one`` on a batch in one call, or image by image where the export keeps batch 1 in
    its shapes (a reshape to a fixed shape)."""
    def run(x: np.ndarray) -> np.ndarray:
        if len(x) == 1 or run.batched:
            try:
                return one(x)
            except Exception:  # noqa: BLE001
                if len(x) == 1:
                    raise
                run.batched = False
        return np.concatenate([one(x[k:k + 1]) for k in range(len(x))])

    run.batched = True  # type: ignore[attr-defined]
    return run


def onnxruntime_column(model: Model, column: str) -> tuple[Callable, str] | None:
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
    source: str | bytes = str(path)
    try:  # the export's batch dimension made free, so that a batch of 8 is one call
        import onnx

        proto = onnx.load(str(path))
        for value in (*proto.graph.input, *proto.graph.output):
            value.type.tensor_type.shape.dim[0].dim_param = "batch"
        source = proto.SerializeToString()
    except ImportError:
        pass
    options.log_severity_level = 3  # a batch the export cannot take is retried image by image, quietly
    session = ort.InferenceSession(source, options, providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name
    return _batched(lambda x: session.run(None, {name: x})[0]), "-"


def ncnn_column(model: Model, column: str) -> tuple[Callable, str] | None:
    import ncnn

    param, weights = model.peers / "model.ncnn.param", model.peers / "model.ncnn.bin"
    if not param.exists():
        return None
    net = ncnn.Net()
    net.opt.num_threads = int(column.split("-")[1])
    # fp32 throughout, as the other engines compute.
    net.opt.use_fp16_packed = net.opt.use_fp16_storage = net.opt.use_fp16_arithmetic = False
    net.opt.use_bf16_storage = False
    net.load_param(str(param))
    net.load_model(str(weights))
    shape = model.want.shape[1:]

    def image(x: np.ndarray) -> np.ndarray:
        extractor = net.create_extractor()
        extractor.input("in0", ncnn.Mat(np.ascontiguousarray(x)))
        _, out = extractor.extract("out0")
        return np.array(out).reshape(shape)

    return (lambda x: np.stack([image(one) for one in x])), "-"


def torch_column(model: Model, column: str) -> tuple[Callable, str] | None:
    import torch

    module = model.torch_module().eval()

    def run(x: np.ndarray) -> np.ndarray:
        with torch.inference_mode():
            return module(torch.from_numpy(x)).numpy()

    return run, f"{torch.get_num_threads()} threads"


# -- one process per column ---------------------------------------------------------------------
PEERS = {"ort": onnxruntime_column, "ncnn": ncnn_column, "torch": torch_column}


def worker(column: str, name: str, peer_dir: Path) -> None:
    """Serve one column of one model: print ``ready <rel diff> <load s> <note>`` (or
    ``missing <why>``), then answer ``save PATH`` (the batch's output saved there, or
    ``failed <why>``) and ``go B`` (the seconds of one call at batch B) from stdin."""
    warnings.filterwarnings("ignore")
    model = Model(name, peer_dir)
    start = time.perf_counter()
    if column in GE_COLUMNS:
        built = graphexec_column(model, column)
    else:
        family = column.split("-")[0]
        try:
            built = PEERS[family](model, column)
        except ImportError as exc:
            print(f"missing {family} not installed ({exc.name})", flush=True)
            return
        if built is None:
            print(f"missing {family}: no export (python tools/export_networks.py --peers-only {name})", flush=True)
            return
    run, note = built
    load = time.perf_counter() - start
    print(f"ready {rel_diff(run(model.x), model.want):.3e} {load:.3f} {note}", flush=True)
    inputs = {1: model.x, BATCH: model.batch}
    for line in sys.stdin:
        command, _, argument = line.strip().partition(" ")
        if command == "save":
            try:
                np.save(argument, run(model.batch))
                print("saved", flush=True)
            except Exception as exc:  # noqa: BLE001 - this column has no batch of 8
                print(f"failed {type(exc).__name__}: {str(exc).splitlines()[0][:120]}", flush=True)
        else:
            x = inputs[int(argument)]
            begin = time.perf_counter()
            run(x)
            print(time.perf_counter() - begin, flush=True)


class Column:
    """A worker process running one column (``script --worker COLUMN NAME``)."""

    def __init__(self, column: str, name: str, python: str, peer_dir: Path):
        self.column = column
        env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")}
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
        self.process = subprocess.Popen([python, __file__, "--worker", column, name, "--peer-dir", str(peer_dir)],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        words = (self.process.stdout.readline() or "missing worker failed").split(maxsplit=3)
        self.ok = words[0] == "ready"
        self.diff = float(words[1]) if self.ok else None
        self.load = float(words[2]) if self.ok else None
        self.note = words[3].strip() if self.ok and len(words) > 3 else " ".join(words[1:]).strip()
        #: The batch's output, against PyTorch's, and whether this column runs a batch at all.
        self.batch_diff: float | None = None
        self.batched = self.ok
        if not self.ok:
            self.close()

    def ask(self, line: str) -> str:
        self.process.stdin.write(line + "\n")
        self.process.stdin.flush()
        return self.process.stdout.readline().strip()

    def time(self, batch: int) -> float:
        return float(self.ask(f"go {batch}"))

    def close(self) -> None:
        if self.process.stdin:
            self.process.stdin.close()
        self.process.wait()


def check_batches(columns: list[Column], folder: Path, notes: list[str], name: str) -> None:
    """Each column's output for the batch, against PyTorch's (the torch column's)."""
    outputs = {}
    for column in columns:
        path = folder / f"{column.column}.npy"
        answer = column.ask(f"save {path}")
        if answer == "saved":
            outputs[column.column] = np.load(path)
        else:
            column.batched = False
            notes.append(f"{name}: {column.column} runs no batch of {BATCH} ({answer})")
    reference = outputs.get("torch")
    for column in columns:
        if column.batched and reference is not None:
            column.batch_diff = rel_diff(outputs[column.column], reference)


def pause_before(column: Column, batch: int) -> None:
    """The pause before ``column``'s call at ``batch`` (see :data:`ADAPTING`)."""
    time.sleep(STALE_SECONDS + 0.05 if column.column in ADAPTING and batch == 1 else PAUSE)


def measure(columns: list[Column], rounds: int, warmup: int) -> dict[tuple[str, int], list[float]]:
    for column in columns:
        for _ in range(warmup):
            column.time(1)
            time.sleep(PAUSE)
        if column.batched:
            column.time(BATCH)
            time.sleep(PAUSE)
    times: dict[tuple[str, int], list[float]] = {}
    for _ in range(rounds):
        for column in columns:
            for batch in (1, BATCH) if column.batched else (1,):
                pause_before(column, batch)
                times.setdefault((column.column, batch), []).append(column.time(batch))
    return times


def rel_diff(got: np.ndarray, want: np.ndarray) -> float:
    got = np.asarray(got, dtype=np.float64).reshape(want.shape)
    return float(np.abs(got - want).max() / max(float(np.abs(want).max()), 1e-30))


def blas_line() -> str:
    from threadpoolctl import threadpool_info

    info = [f"{i.get('internal_api')} {i.get('version')} {i.get('architecture')} ({i.get('num_threads')} threads)"
            for i in threadpool_info() if i.get("user_api") == "blas"]
    return ", ".join(info) or "no BLAS found by threadpoolctl"


def profile(name: str, rounds: int, warmup: int, kernels: str) -> None:
    """Print graphexec's time per op type on ``name`` (one worker, one BLAS thread), and what
    the run costs beside its nodes (the executor, the engine's call), per node."""
    from graphexec import Engine, Trace

    model = Model(name)
    engine = Engine.load(model.param, threads=1, intra_op_threads=1, cpu_kernels=kernels)
    for _ in range(warmup):
        engine.forward(model.x)
    per_type: dict[str, list[float]] = {}
    counts: dict[str, int] = {}
    walls, plain, between = [], [], []
    trace = Trace()
    for _ in range(rounds):
        start = time.perf_counter()
        engine.forward(model.x)
        plain.append((time.perf_counter() - start) * 1e3)
        engine.forward(model.x, trace=trace)
        walls.append((trace.end_ns - trace.start_ns) / 1e6)
        sums: dict[str, float] = dict.fromkeys(per_type, 0.0)
        counts = {}
        for event in trace.events:
            sums[event.type] = sums.get(event.type, 0.0) + (event.end_ns - event.start_ns) / 1e6
            counts[event.type] = counts.get(event.type, 0) + 1
        between.append(walls[-1] - sum(sums.values()))
        for op_type, ms in sums.items():
            per_type.setdefault(op_type, []).append(ms)
        time.sleep(PAUSE)
    engine.close()
    wall, nodes = statistics.median(walls), sum(counts.values())
    print(f"{name} ({kernels} kernels): median {statistics.median(plain):.2f} ms a forward, {wall:.2f} ms traced, "
          f"over {rounds} runs (1 worker, 1 BLAS thread); {nodes} nodes, "
          f"{statistics.median(between) / max(1, nodes) * 1e3:.1f} us a node between nodes")
    medians = {t: statistics.median(v) for t, v in per_type.items()}
    for op_type, ms in sorted(medians.items(), key=lambda kv: -kv[1]):
        print(f"  {op_type:<28} {counts.get(op_type, 0):>5} x {ms:9.3f} ms {ms / wall:7.1%}")


def foreign_cores() -> float:
    from graphexec.occupancy import occupancy

    return occupancy().foreign_cores()


def main() -> None:
    parser = argparse.ArgumentParser(description="graphexec beside onnxruntime, ncnn and PyTorch")
    parser.add_argument("names", nargs="*", help=f"models (default: {' '.join(NETWORKS)})")
    parser.add_argument("--rounds", type=int, default=15, help="timed rounds per model (default 15)")
    parser.add_argument("--warmup", type=int, default=3, help="untimed batch-1 runs per column first (default 3)")
    parser.add_argument("--peer-python", default=sys.executable,
                        help="the interpreter of the peers' columns (default: this one)")
    parser.add_argument("--peer-dir", type=Path, default=PEER_DIR,
                        help="where a bundled example's peer files are, after artifacts/peers")
    parser.add_argument("--profile", action="store_true",
                        help="print graphexec's single-thread time per op type instead of comparing engines")
    parser.add_argument("--kernels", default="jit", choices=("numpy", "jit"), help="--profile's CPU kernels")
    parser.add_argument("--worker", nargs=2, metavar=("COLUMN", "MODEL"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(*args.worker, args.peer_dir)
        return
    if args.profile:
        from threadpoolctl import threadpool_limits

        with threadpool_limits(1):
            for name in args.names or NETWORKS:
                profile(name, args.rounds, args.warmup, args.kernels)
        return
    from graphexec.threads import cpu_count

    for variable in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"):
        if variable in os.environ:
            print(f"note: {variable}={os.environ[variable]} is set here; the workers run without it")
    foreign_cores()
    time.sleep(0.5)
    print(f"{cpu_count()} cores, load average {os.getloadavg()[0]:.2f}, other processes' load "
          f"{foreign_cores():.2f} cores; numpy BLAS: {blas_line()}")
    print(f"median ms over {args.rounds} interleaved rounds (batch 1, and batch {BATCH} per {BATCH} images) after "
          f"{args.warmup} warm-up runs, one process per column")
    names = GE_COLUMNS + PEER_COLUMNS
    rows: dict[int, list[str]] = {1: [], BATCH: []}
    diffs, notes, ratios = [], [], {1: [], BATCH: []}
    loads = []
    for name in args.names or NETWORKS:
        try:
            Model(name, args.peer_dir)
        except FileNotFoundError as exc:
            notes.append(str(exc))
            continue
        columns = [Column(c, name, sys.executable if c in GE_COLUMNS else args.peer_python, args.peer_dir)
                   for c in names]
        for note in dict.fromkeys(c.note for c in columns if not c.ok):
            notes.append(f"{name}: {note}")
        running = [c for c in columns if c.ok]
        with tempfile.TemporaryDirectory() as folder:
            check_batches(running, Path(folder), notes, name)
        wrong = {c.column for c in running if (c.diff or 0) > WRONG or (c.batch_diff or 0) > WRONG}
        for column in sorted(wrong):
            notes.append(f"{name}: {column} is off PyTorch's answer by more than {WRONG:g}: left out of the ratios")
        before = foreign_cores()
        times = measure(running, args.rounds, args.warmup)
        loads.append((before + foreign_cores()) / 2)
        for column in running:
            column.close()
        by_name = {c.column: c for c in columns}
        for batch in (1, BATCH):
            med = {c: statistics.median(t) * 1e3 for (c, b), t in times.items() if b == batch}
            cells = "".join(f"{f'{med[c]:.1f}' if c in med else '-':>9}" for c in names)
            peer = min((med[c] for c in PEER_COLUMNS if c in med and c not in wrong), default=None)
            ge = med.get(GE_RATIO) if GE_RATIO not in wrong else None
            numpy_ge = med.get("ge-np") if "ge-np" not in wrong else None
            ratio = ge / peer if ge and peer else None
            if ratio is not None:
                ratios[batch].append((name, ratio))
            cell = f"{ratio:.2f}x" if ratio else "-"
            cell_np = f"{numpy_ge / peer:.2f}x" if numpy_ge and peer else "-"
            load = by_name["ge-jit"].load if by_name["ge-jit"].ok else None
            rows[batch].append(f"{name:<19}{cells}{cell:>9}{cell_np:>9}" + (f"{load:>8.2f}" if batch == 1 and load
                                                                           else ""))
        diffs.append(f"{name:<19}" + "".join(
            f"{f'{by_name[c].diff:.0e}/{by_name[c].batch_diff:.0e}' if by_name[c].ok and by_name[c].batch_diff is not None else (f'{by_name[c].diff:.0e}/-' if by_name[c].ok else '-'):>15}"
            for c in names))
        notes.append(f"{name}: " + ", ".join(f"{c.column} {c.note}" for c in columns if c.ok and c.note != "-"))
        print(rows[1][-1] + "   |" + rows[BATCH][-1][19:], flush=True)
    header = f"{'network':<19}" + "".join(f"{c:>9}" for c in names) + f"{'jit/peer':>9}{'np/peer':>9}"
    for batch, title in ((1, "batch 1: median ms a call"), (BATCH, f"batch {BATCH}: median ms per {BATCH} images")):
        print(f"\n{title}\n" + header + (f"{'load s':>8}" if batch == 1 else ""))
        print("\n".join(rows[batch]))
        found = sorted(r for _, r in ratios[batch])
        if found:
            print(f"ge-jit / best peer: median {statistics.median(found):.2f}x, largest {found[-1]:.2f}x "
                  f"({', '.join(f'{n} {r:.2f}x' for n, r in ratios[batch])})")
    print("\nmax |out - PyTorch's| / max |PyTorch's|, batch 1 / batch 8\n"
          + f"{'network':<19}" + "".join(f"{c:>15}" for c in names))
    print("\n".join(diffs))
    print(f"\nload average at the end {os.getloadavg()[0]:.2f}; other processes' load during the rounds "
          f"{min(loads, default=0):.2f}-{max(loads, default=0):.2f} cores; load s = ge-jit's Engine.load")
    for note in notes:
        print(f"  {note}")


if __name__ == "__main__":
    main()
