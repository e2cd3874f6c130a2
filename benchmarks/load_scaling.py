"""How loading, planning and the first run grow with the model: synthetic pnnx graphs of
10^3 to 10^6 operators, each size in a process of its own.

The graphs are written as param text here (they are inputs for the reader and the planner,
not models whose numbers are checked against PyTorch): a long chain of activations, a wide
fan of branches summed up again, a chain of tuples nested one in the next, and a long run
of views (reshapes, flattens, transposes) with a copy between runs. Each row gives the
seconds to parse the file, to build the engine (layers, passes, plan), to make the memory
plan, to run the first and the second forward, and the process's peak RSS over what it held
after the imports (the files are written before that baseline). The first run's output is
checked against numpy.

    python benchmarks/load_scaling.py                         # every kind, 10^3 .. 10^5
    python benchmarks/load_scaling.py --sizes 1000 1000000    # up to 10^6 (minutes, GBs)
    python benchmarks/load_scaling.py --kinds chain views --timeout 600
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

HEADER = "7767517"
#: Every graph's input: small, so that the runs cost little beside the bookkeeping.
SHAPE = (1, 8)


def _lines(body: list[str], operands: int) -> str:
    return "\n".join([HEADER, f"{len(body)} {operands}", *body]) + "\n"


def _input(name: str = "x") -> str:
    return f"pnnx.Input in 0 1 {name} #{name}=(1,8)f32"


def chain(n: int) -> str:
    """x -> ReLU -> ReLU -> ... (n of them) -> output."""
    body = [_input()]
    last = "x"
    for k in range(n):
        body.append(f"nn.ReLU r{k} 1 1 {last} v{k}")
        last = f"v{k}"
    body.append(f"pnnx.Output out 1 0 {last}")
    return _lines(body, n + 1)


def fan(n: int) -> str:
    """x read by n/2 ReLUs side by side, summed back by a balanced tree of adds (n - 1 ops
    in all beside the ReLUs' n/2... about n operators)."""
    width = max(2, n // 2)
    body = [_input()]
    level = []
    for k in range(width):
        body.append(f"nn.ReLU r{k} 1 1 x b{k}")
        level.append(f"b{k}")
    count = 0
    while len(level) > 1:
        nxt = []
        for a, b in zip(level[::2], level[1::2]):
            body.append(f"pnnx.Expression s{count} 2 1 {a} {b} t{count} expr=add(@0,@1)")
            nxt.append(f"t{count}")
            count += 1
        if len(level) % 2:
            nxt.append(level[-1])
        level = nxt
    body.append(f"pnnx.Output out 1 0 {level[0]}")
    return _lines(body, 1 + width + count)


def tuples(n: int) -> str:
    """n/2 ReLUs of x, each packed with the tuple before it: t_k = (t_{k-1}, relu_k(x)), so
    the model's output is a tuple nested n/2 deep holding n/2 + 1 tensors."""
    half = max(1, n // 2)
    body = [_input()]
    last = "x"
    for k in range(half):
        body.append(f"nn.ReLU r{k} 1 1 x v{k}")
        body.append(f"prim::TupleConstruct t{k} 2 1 {last} v{k} p{k}")
        last = f"p{k}"
    body.append(f"pnnx.Output out 1 0 {last}")
    return _lines(body, 1 + 2 * half)


def views(n: int) -> str:
    """Runs of 16 views (reshape to (2,4), flatten back, ...) with a copy (ReLU) between."""
    body = [_input()]
    last, count = "x", 0
    for k in range(n):
        name = f"v{k}"
        if k % 16 == 15:
            body.append(f"nn.ReLU r{k} 1 1 {last} {name}")
        elif k % 2 == 0:
            body.append(f"Tensor.reshape s{k} 1 1 {last} {name} shape=(2,4)")
        else:
            body.append(f"torch.flatten f{k} 1 1 {last} {name} end_dim=-1 start_dim=0")
        last = name
        count += 1
    body.append(f"Tensor.reshape s{n} 1 1 {last} v{n} shape=(1,8)")  # back to the input's shape
    body.append(f"pnnx.Output out 1 0 v{n}")
    return _lines(body, 2 + count)


def mixed(n: int) -> str:
    """All four one after the other, about n/4 operators each: a chain of ReLUs, a run of
    views, a fan summed back (so the output is width x relu(x)), and the result packed into
    tuples nested n/8 deep with as many more ReLUs of it."""
    q = max(4, n // 4)
    body, last, count = [_input()], "x", 0

    def add(line: str, out: str) -> None:
        nonlocal last, count
        body.append(line)
        last, count = out, count + 1

    for k in range(q):
        add(f"nn.ReLU c{k} 1 1 {last} c{k}", f"c{k}")
    for k in range(q):
        if k % 2 == 0:
            add(f"Tensor.reshape s{k} 1 1 {last} s{k} shape=(2,4)", f"s{k}")
        else:
            add(f"torch.flatten f{k} 1 1 {last} s{k} end_dim=-1 start_dim=0", f"s{k}")
    add(f"Tensor.reshape back 1 1 {last} back shape=(1,8)", "back")
    source, level = last, []
    for k in range(q // 2):
        body.append(f"nn.ReLU b{k} 1 1 {source} b{k}")
        level.append(f"b{k}")
    count += len(level)
    adds = 0
    while len(level) > 1:
        nxt = []
        for a, b in zip(level[::2], level[1::2]):
            body.append(f"pnnx.Expression t{adds} 2 1 {a} {b} t{adds} expr=add(@0,@1)")
            nxt.append(f"t{adds}")
            adds += 1
        if len(level) % 2:
            nxt.append(level[-1])
        level = nxt
    count += adds
    last = level[0]
    for k in range(q // 2):
        body.append(f"nn.ReLU r{k} 1 1 {level[0]} r{k}")
        body.append(f"prim::TupleConstruct p{k} 2 1 {last} r{k} p{k}")
        last = f"p{k}"
    count += q
    body.append(f"pnnx.Output out 1 0 {last}")
    return _lines(body, 1 + count)


KINDS: dict[str, Callable[[int], str]] = {"chain": chain, "fan": fan, "tuples": tuples, "views": views, "mixed": mixed}


def expected(kind: str, n: int, x):
    """What the graph computes on ``x``, by numpy."""
    import numpy as np

    relu = np.maximum(x, 0)
    if kind == "views" and n < 16:
        return x
    if kind in ("fan", "mixed"):
        return None  # a sum of equal terms, in tree order: checked in measure
    if kind == "tuples":
        return None  # the flattened tuple: x, then relu(x) n/2 times (checked in measure)
    return relu


def measure(kind: str, n: int, folder: str, threads: int) -> dict:
    """One (kind, size) in this process: the timings and the peak RSS growth."""
    import numpy as np

    from graphexec import Engine, pnnx

    param = Path(folder) / f"{kind}_{n}.pnnx.param"
    if not param.exists():
        param.write_text(KINDS[kind](n))
        param.with_name(param.name.replace(".param", ".bin")).write_bytes(b"")
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    row = {"kind": kind, "n": n, "bytes": param.stat().st_size}
    t = time.perf_counter()
    graph = pnnx.load(param)
    row["parse"] = time.perf_counter() - t
    row["operators"] = len(graph.operators)
    t = time.perf_counter()
    engine = Engine(graph, threads=threads, intra_op_threads=1)
    row["engine"] = time.perf_counter() - t
    t = time.perf_counter()
    memory = engine.memory_plan()
    row["memory_plan"] = time.perf_counter() - t
    row["arena_bytes"] = memory.arena_bytes
    x = np.random.default_rng(0).standard_normal(SHAPE).astype(np.float32)
    t = time.perf_counter()
    out = engine.forward(x)
    row["first_run"] = time.perf_counter() - t
    t = time.perf_counter()
    engine.forward(x)
    row["second_run"] = time.perf_counter() - t
    want = expected(kind, n, x)
    if kind == "tuples":
        assert len(out) == max(1, n // 2) + 1 and np.array_equal(out[0], x)
        assert all(np.array_equal(o, np.maximum(x, 0)) for o in out[1:])
    elif kind == "fan":  # relu(x) summed n/2 times
        assert np.allclose(out, max(2, n // 2) * np.maximum(x, 0), rtol=1e-5)
    elif kind == "mixed":  # relu(x) summed width times (exactly: small integers times one value)
        width = max(4, n // 4) // 2
        assert len(out) == width + 1 and all(np.array_equal(o, out[0]) for o in out[1:])
        assert np.allclose(out[0], width * np.maximum(x, 0), rtol=1e-5)
    elif want is not None:
        assert np.array_equal(out, want), f"{kind} {n}: wrong output"
    row["peak_mib"] = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) / 1024
    engine.close()
    return row


def run(kind: str, n: int, folder: str, threads: int, timeout: float) -> dict:
    """``measure`` in a fresh process (so each peak RSS is its own)."""
    script = (f"import json, sys; sys.path.insert(0, {str(ROOT)!r}); from benchmarks.load_scaling import measure; "
              f"print(json.dumps(measure({kind!r}, {n}, {folder!r}, {threads})))")
    start = time.perf_counter()
    try:
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"kind": kind, "n": n, "failed": f"over {timeout:g} s"}
    if done.returncode != 0:
        lines = (done.stderr or done.stdout).strip().splitlines()
        return {"kind": kind, "n": n, "failed": lines[-1][:100] if lines else f"exit {done.returncode}",
                "seconds": time.perf_counter() - start}
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description="load, plan and first-run cost of synthetic graphs by size")
    parser.add_argument("--kinds", nargs="+", default=list(KINDS), choices=list(KINDS))
    parser.add_argument("--sizes", nargs="+", type=int, default=[1000, 10_000, 100_000])
    parser.add_argument("--threads", type=int, default=2, help="inter-op workers of each engine (default 2)")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per (kind, size) (default 300)")
    args = parser.parse_args()
    print(f"{'graph':<8} {'ops':>9} {'file':>9} {'parse':>8} {'engine':>8} {'memory':>8} {'1st run':>8} "
          f"{'2nd run':>8} {'peak RSS':>9}")
    print(f"{'':<8} {'':>9} {'kB':>9} {'s':>8} {'s':>8} {'plan s':>8} {'s':>8} {'s':>8} {'+MiB':>9}")
    with tempfile.TemporaryDirectory() as folder:
        for kind in args.kinds:
            for n in args.sizes:
                row = run(kind, n, folder, args.threads, args.timeout)
                if "failed" in row:
                    print(f"{kind:<8} {n:>9,} failed: {row['failed']}", flush=True)
                    continue
                print(f"{kind:<8} {row['operators']:>9,} {row['bytes'] / 1000:>9,.0f} {row['parse']:>8.2f} "
                      f"{row['engine']:>8.2f} {row['memory_plan']:>8.2f} {row['first_run']:>8.2f} "
                      f"{row['second_run']:>8.3f} {row['peak_mib']:>9,.0f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
