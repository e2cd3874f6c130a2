"""What one kernel launch costs the host on an OpenCL device: the driver's floor and what
raises it, beside the launches a replayed network records.

Each case enqueues the same kind of launch 70 times in a row (kernel arguments set
beforehand, nothing waited for) and reports the calling thread's CPU time per launch,
median of the rounds; the queue is drained between rounds. The synthetic cases vary one
property of a trivial kernel at a time (dimensions, ``reqd_work_group_size``, ``__local``
memory, 2 or 24 arguments, 14 of them packed in one struct), and two of them go through the
compiled loop that replays stretches too, with and without an event a launch, and with a
flush every 4 (the driver's own cost, no Python between launches; where numba is
installed). The network cases enqueue the launches of the named networks' replay
(``artifacts/networks/<name>`` or, with ``--random-weights``, any param file under
``--networks``), in their order and each one repeated, and in order through the compiled
loop. ``host us/node`` in ``benchmarks/opencl_networks.py`` is these launches plus the
Python around them::

    python benchmarks/opencl_enqueue.py                                   # synthetic only
    python benchmarks/opencl_enqueue.py --random-weights --networks DIR resnet50 mobilenet_v3_small
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from graphexec.blas import ask_for_short_spins  # isort: skip

ask_for_short_spins()
import numpy as np  # isort: skip

from graphexec.devices.opencl import open_device  # isort: skip

LAUNCHES = 70
#: What the kernels' arguments point at, kept for the script's life.
KEPT: list[object] = []
DIMS = ("__global const float* restrict A, const int a_off, __global const float* restrict X, "
        "const int x_off, __global const int4* restrict t, __global const float* restrict b, "
        "const int b_off, const int hb, __global float* restrict C, const int c_off")
INTS = ", ".join(f"const int n{i}" for i in range(14))
INDEX = "int i = get_global_id(0) + get_global_id(1) * 64;"
BODY = f"{INDEX} if (i < n0) C[c_off + i] = A[a_off + i] + X[x_off + i] + n13;"
SOURCE = f"""
__kernel void plain(__global float* C, const int n0) {{ {INDEX} if (i < n0) C[i] = 1.0f; }}
__kernel __attribute__((reqd_work_group_size(16, 16, 1)))
void required(__global float* C, const int n0) {{ {INDEX} if (i < n0) C[i] = 1.0f; }}
__kernel void shared(__global float* C, const int n0) {{
    __local float s[16][17]; {INDEX}
    s[get_local_id(1)][get_local_id(0)] = i; barrier(CLK_LOCAL_MEM_FENCE);
    if (i < n0) C[i] = s[get_local_id(0)][get_local_id(1)]; }}
__kernel void many({DIMS}, {INTS}) {{ {BODY} }}
typedef struct {{ int n[14]; }} Ints;
__kernel void packed({DIMS}, const Ints d) {{ const int n0 = d.n[0], n13 = d.n[13]; {BODY} }}
"""


def synthetic(device) -> dict[str, Callable[[], None]]:
    cl = device._cl
    program = cl.Program(device.context, SOURCE).build()
    data = cl.Buffer(device.context, cl.mem_flags.READ_WRITE, 4 << 20)
    table = cl.Buffer(device.context, cl.mem_flags.READ_WRITE, 4096)
    KEPT.extend((data, table))  # a kernel argument does not keep its buffer alive
    queue = device.queues[0]
    count = np.int32(1 << 20)

    def kernel(name: str, args: list) -> object:
        k = cl.Kernel(program, name)
        for i, a in enumerate(args):
            k.set_arg(i, a)
        return k

    head = [data, np.int32(0), data, np.int32(0), table, data, np.int32(0), np.int32(1), data, np.int32(0)]
    two = [data, count]
    cases = {
        "1-D, 2 arguments": (kernel("plain", two), (1 << 14,), (256,)),
        "3-D, 2 arguments": (kernel("plain", two), (64, 256, 1), (16, 16, 1)),
        "3-D, reqd_work_group_size": (kernel("required", two), (64, 256, 1), (16, 16, 1)),
        "3-D, __local array": (kernel("shared", two), (64, 256, 1), (16, 16, 1)),
        "3-D, 24 arguments": (kernel("many", head + [count] + [np.int32(3)] * 13), (64, 256, 1), (16, 16, 1)),
        "3-D, 10 arguments + a struct of 14": (
            kernel("packed", head + [np.array([1 << 20] + [3] * 13, np.int32)]), (64, 256, 1), (16, 16, 1)),
    }
    enqueue = cl.enqueue_nd_range_kernel
    found = {name: (lambda k=k, g=g, l=l: [enqueue(queue, k, g, l, None, None) for _ in range(LAUNCHES)])
             for name, (k, g, l) in cases.items()}
    plain = [(queue, *cases["1-D, 2 arguments"])] * LAUNCHES
    many = [(queue, *cases["3-D, 24 arguments"])] * LAUNCHES
    found.update(compiled({"1-D, 2 arguments": plain, "3-D, 24 arguments": many}))
    return found


def compiled(launches: dict[str, list[tuple]]) -> dict[str, Callable[[], list]]:
    """The same launches by the compiled loop that replays stretches (no Python a launch),
    without an event, with one made and released each, and flushed every 4: the driver's
    own cost. Nothing where numba is not installed."""
    from graphexec.devices.opencl.replay_compiled import available

    if not available():
        return {}
    from graphexec.devices.cpu.jit import _loops_enqueue as loop
    from graphexec.devices.opencl.native import entry_points
    from graphexec.devices.opencl.replay_compiled import kernel_row

    calls = np.array(entry_points().addresses, np.int64)
    found = {}
    for name, listed in launches.items():
        for event, flush, label in ((loop.NO_EVENT, 0, "no event"), (loop.RELEASED, 0, "an event each"),
                                    (loop.NO_EVENT, 4, "no event, the queue flushed every 4")):
            sizes = np.zeros((len(listed), 6), np.uint64)
            table = np.zeros((len(listed), loop.COLUMNS), np.int64)
            for i, (queue, kernel, g, l) in enumerate(listed):
                kernel_row(table, sizes, i, kernel, g, l)
                table[i, loop.QUEUE], table[i, loop.EVENT] = queue.int_ptr, event
                if flush and i % flush == flush - 1:
                    table[i, loop.FLUSH_COUNT] = 1  # flushes[0]: the queue
            ints = np.zeros(1, np.int64)
            flushes = np.array([listed[0][0].int_ptr], np.int64)
            slots, failed = np.zeros(len(listed), np.int64), np.zeros(2, np.int64)
            KEPT.append(sizes)

            def run(table=table, slots=slots, failed=failed, ints=ints, flushes=flushes,
                    count=len(listed)) -> list:
                loop.enqueue(calls, table, ints, flushes, ints[:0], slots, ints, False, failed)
                assert failed[0] < 0, f"OpenCL error {failed[1]}"
                return [None] * count

            found[f"{name}, compiled loop, {label}"] = run
    return found


def recorded(device, name: str, args: argparse.Namespace) -> dict[str, Callable[[], None]]:
    """The kernel launches of the network's replay, in order, and its first convolution's repeated."""
    from benchmarks.opencl_networks import load  # the same loading, random weights included
    from graphexec.devices.opencl import replay

    engine = load(args.networks / name / "model.pnnx.param", args.random_weights, device=device)
    shape = next(iter(engine.input_shapes.values()))
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    bound = []
    run = replay.BoundReplay.run

    def keep(self, k, values):
        bound.append(self)
        return run(self, k, values)

    replay.BoundReplay.run = keep
    try:
        engine.forward(x)
    finally:
        replay.BoundReplay.run = run
    launches = [(q, k, what[0], what[1]) for s in bound[-1].stretches
                for kind, q, k, what, _, _ in s.program if kind == replay.KERNEL]
    conv = next((launch for launch in launches if launch[1].function_name.startswith("conv")), launches[0])
    enqueue = device._cl.enqueue_nd_range_kernel
    KEPT.append(engine)  # its buffers stay alive while the kernels use them
    found = {f"{name}: its {len(launches)} launches in order": lambda: [enqueue(q, k, g, l, None, None)
                                                                        for q, k, g, l in launches],
             f"{name}: its first convolution, repeated": lambda: [enqueue(*conv, None, None)
                                                                  for _ in launches]}
    found.update(compiled({f"{name}: its {len(launches)} launches in order": launches}))
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="networks whose recorded launches to time too")
    parser.add_argument("--device", default="opencl", help="the OpenCL device (default: the first GPU, else any)")
    parser.add_argument("--rounds", type=int, default=20, help="rounds per case (default 20)")
    parser.add_argument("--networks", type=Path, default=ROOT / "artifacts" / "networks")
    parser.add_argument("--random-weights", action="store_true", help="weights drawn from the param files' shapes")
    args = parser.parse_args()
    device = open_device(args.device)
    info = device.info
    print(f"{info.name} ({info.platform}), driver {info.handle.driver_version}; {args.rounds} rounds of "
          f"{LAUNCHES} launches (network cases: one per launch it records), medians\n")
    cases = synthetic(device)
    for name in args.names:
        cases.update(recorded(device, name, args))
    seconds: dict[str, list[float]] = {name: [] for name in cases}
    for r in range(args.rounds + 3):
        for name, enqueue in cases.items():
            device.finish()
            start = time.thread_time()
            count = len(enqueue())
            spent = time.thread_time() - start
            for queue in device.queues:
                queue.flush()
            device.finish()
            if r >= 3:  # warm-up rounds left out
                seconds[name].append(spent / count)
    print("| launch | host us each |")
    print("|---|---:|")
    for name, values in seconds.items():
        print(f"| {name} | {statistics.median(values) * 1e6:.2f} |")


if __name__ == "__main__":
    main()
