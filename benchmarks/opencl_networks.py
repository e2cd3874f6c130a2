"""Whole exported networks on an OpenCL device: the host's cost per node, the wall time
against the device's own kernel time, beside PyTorch eager and graphexec's CPU engine.

For each network (``artifacts/networks/<name>``, exported by ``tools/export_networks.py``):

- ``nodes``: nodes that run on the device; ``launches``: commands one run enqueues there;
- ``host us/node``: the calling thread's CPU time in ``forward``, less what it spends in the
  downloads (where it waits for the device), per device node: the Python and the driver
  calls that enqueue the run, median of as many rounds run back to back (as a loop over
  inputs runs) after the interleaved ones; ``interleaved``: the same in the interleaved
  rounds, where the other engines' runs between two of its own leave the host's caches
  cold; ``host ms/run``: back to back, whole;
- ``OpenCL ms``: wall-clock median of ``forward``;
- ``kernels ms``: the device's time in the run's commands, summed from event profiling (a
  second engine on the same device opened with ``profiling=True``), and ``wall/kernels``;
- ``PyTorch ms``: the same torchvision model in eager mode on the CUDA GPU, where torch
  sees one (``--torch``); ``CPU ms``: graphexec on the CPU (``--cpu``);
- ``err``: max |OpenCL - reference| / max |reference|; the script stops above 1e-4. The
  reference is PyTorch's saved output, or the CPU engine's for ``--size`` or
  ``--random-weights``.

Rounds of the engines are interleaved. The first lines name the device, its driver and
the library versions, so that a table can be quoted as it stands::

    python benchmarks/opencl_networks.py --torch googlenet resnet50 inception_v3 mobilenet_v3_small
    python benchmarks/opencl_networks.py --device opencl:pocl --size 64 --no-profile googlenet
    python benchmarks/opencl_networks.py --random-weights --networks params/ resnet50   # params only
"""

from __future__ import annotations

import argparse
import platform
import re
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from graphexec.blas import ask_for_short_spins  # isort: skip

ask_for_short_spins()  # as the CLI does, before numpy loads OpenBLAS (see graphexec.blas)
import numpy as np  # isort: skip

from graphexec import Engine  # isort: skip
from graphexec import pnnx  # isort: skip
from graphexec.devices.opencl import open_device  # isort: skip
from graphexec.transfers import _Transfer  # isort: skip

NETWORKS = ROOT / "artifacts" / "networks"
#: max |OpenCL - reference| / max |reference| above which the script stops.
TOLERANCE = 1e-4


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="networks (default: every one exported)")
    parser.add_argument("--device", default="opencl", help="the OpenCL device (default: the first GPU, else any)")
    parser.add_argument("--rounds", type=int, default=30, help="timed rounds per engine (default 30)")
    parser.add_argument("--size", type=int, help="image side of a random input (default: the exported input)")
    parser.add_argument("--torch", action="store_true", help="time PyTorch eager on the CUDA GPU too")
    parser.add_argument("--cpu", action="store_true", help="time graphexec on the CPU too")
    parser.add_argument("--random-weights", action="store_true",
                        help="weights drawn at random from the param file's shapes (no .bin needed)")
    parser.add_argument("--networks", type=Path, default=NETWORKS, help="folder of <name>/model.pnnx.param")
    parser.add_argument("--no-profile", action="store_true",
                        help="leave out the kernel times (on a CPU device they only double the run)")
    parser.add_argument("--enqueue", default="auto",
                        help="how replays enqueue: auto, compiled or python, or several with commas "
                             "(a row each, their rounds interleaved)")
    args = parser.parse_args()
    folder = args.networks
    names = args.names or sorted(p.name for p in folder.iterdir() if (p / "model.pnnx.param").exists())
    devices = {mode: open_device(args.device, enqueue=mode) for mode in args.enqueue.split(",")}
    device = next(iter(devices.values()))
    profiled = None if args.no_profile else open_device(args.device, profiling=True)
    print(describe(device))
    torch_gpu = torch_device() if args.torch else None
    if args.torch:
        print(torch_gpu[1] if torch_gpu is not None else "PyTorch: no CUDA device visible, column left empty")
    print(f"{args.rounds} interleaved rounds, medians; input {'exported' if args.size is None else args.size}; "
          f"{'random' if args.random_weights else 'exported'} weights\n")
    print("| network | nodes | launches | host us/node | host us/node interleaved | host ms/run | OpenCL ms | "
          "kernels ms | wall/kernels | PyTorch ms | CPU ms | err |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name in names:
        param = folder / name / "model.pnnx.param"
        if not param.exists():
            print(f"| {name} | not exported: python tools/export_networks.py {name} |")
            continue
        eager = torch_gpu[0] if torch_gpu is not None else None
        for row in measure(name, param, args, devices, profiled, eager):
            print(row, flush=True)


def describe(device: Any) -> str:
    """The device, its driver and the versions the numbers depend on."""
    import pyopencl

    cl = device.cl_device
    return (f"OpenCL device: {cl.name.strip()} ({device.info.platform}), driver {cl.driver_version.strip()}, "
            f"{cl.version.strip()}; pyopencl {pyopencl.VERSION_TEXT}; numpy {np.__version__}; "
            f"Python {platform.python_version()}; host {platform.processor() or platform.machine()}")


def torch_device() -> tuple[Any, str] | None:
    """(torch, a line naming the GPU and CUDA) when torch sees a CUDA device, else None."""
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    return torch, (f"PyTorch {torch.__version__}, CUDA {torch.version.cuda}, "
                   f"{torch.cuda.get_device_name(0)} (eager, inference_mode)")


def load(param: Path, random_weights: bool, **options: Any) -> Engine:
    if not random_weights:
        return Engine.load(param, **options)
    return Engine(random_graph(param), **options)


def random_graph(param: Path) -> Any:
    """The param file's graph with every weight drawn at random: N(0, 1/fan_in) for a
    tensor of two dims or more (activations keep their scale through deep networks), small
    values otherwise; for timing only."""
    text = param.read_text(encoding="utf-8")
    shapes: dict[str, tuple[tuple[int, ...], str]] = {}
    for line in text.splitlines()[2:]:
        fields = line.split()
        if len(fields) < 2:
            continue
        for key, dims, dtype in re.findall(r"@(\w+)=\(([\d,]*)\)(\w+)", line):
            shapes[f"{fields[1]}.{key}"] = (tuple(int(d) for d in dims.split(",") if d), dtype)
    return pnnx.parse(text, _RandomWeights(shapes), path=str(param))


class _RandomWeights(pnnx.WeightArchive):
    """A weight archive whose float32 entries are drawn at random (see :func:`random_graph`)."""

    def __init__(self, shapes: dict[str, tuple[tuple[int, ...], str]]):
        super().__init__(None)
        self._shapes = shapes
        self._rng = np.random.default_rng(0)

    def __contains__(self, name: str) -> bool:
        return name in self._shapes and self._shapes[name][1] == "f32" and bool(self._shapes[name][0])

    def size(self, name: str) -> int:
        return 4 * int(np.prod(self._shapes[name][0]))

    def view(self, name: str) -> memoryview:
        shape = self._shapes[name][0]
        scale = 1 / np.sqrt(np.prod(shape[1:])) if len(shape) >= 2 else 0.01
        return memoryview(self._rng.normal(0.0, scale, shape).astype(np.float32).tobytes())


def device_nodes(engine: Engine, shape: tuple[int, ...]) -> int:
    plan = engine.plan(shape)
    return sum(1 for n in plan.nodes if n.device != "cpu" and not isinstance(n.step.layer, _Transfer))


def host_seconds(engine: Engine) -> Callable[[np.ndarray], float]:
    """A forward that returns the calling thread's CPU seconds outside the downloads."""
    device = engine.device
    download = type(device).download
    waited = [0]

    def timed_download(*args: Any, **kwargs: Any) -> Any:
        start = time.thread_time_ns()
        try:
            return download(device, *args, **kwargs)
        finally:
            waited[0] += time.thread_time_ns() - start

    device.download = timed_download  # type: ignore[method-assign]

    def run(x: np.ndarray) -> float:
        waited[0] = 0
        start = time.thread_time_ns()
        engine.forward(x)
        return (time.thread_time_ns() - start - waited[0]) / 1e9

    return run


def kernel_seconds(engine: Engine, x: np.ndarray, profile: bool = True) -> tuple[float | None, int | None]:
    """The device's time in the commands of one run (None unless ``profile``), and how
    many commands there were (None where the engine does not replay: older versions)."""
    device = engine.device
    collect = getattr(device, "collect_launches", None)
    if collect is None:
        engine.forward(x)
        return None, None
    with collect() as found:
        engine.forward(x)
    device.finish()
    if not profile:
        return None, len(found)
    return sum(e.profile.end - e.profile.start for _, _, e in found) / 1e9, len(found)


def torch_runner(torch: Any, name: str, x: np.ndarray) -> Callable[[], None]:
    from tools.export_networks import build

    model = build(name).cuda()
    xt = torch.from_numpy(x).cuda()

    def run() -> None:
        with torch.inference_mode():
            model(xt)
        torch.cuda.synchronize()

    return run


def measure(name: str, param: Path, args: argparse.Namespace, devices: dict[str, Any], profiled: Any,
            torch: Any) -> list[str]:
    """The network's rows: one per enqueue mode of ``devices``, their rounds interleaved."""
    io = param.parent / "io.npz"
    if args.size is None and io.exists():
        with np.load(io) as saved:
            x, want = saved["in0"], saved["out0"]
    else:
        side = args.size or 224
        x, want = np.random.default_rng(1).standard_normal((1, 3, side, side)).astype(np.float32), None
    engines = {mode: load(param, args.random_weights, device=device) for mode, device in devices.items()}
    timed = load(param, args.random_weights, device=profiled) if profiled is not None else None
    cpu = load(param, args.random_weights) if args.cpu or want is None or args.random_weights else None
    if want is None or args.random_weights:
        want = cpu.forward(x)  # type: ignore[union-attr]
    errors = {}
    for mode, engine in engines.items():
        got = engine.forward(x)
        errors[mode] = float(np.abs(got - want).max() / np.abs(want).max())
        if not errors[mode] <= TOLERANCE:
            raise SystemExit(f"{name}: OpenCL ({mode}) differs from the reference by {errors[mode]:.2g}")
    first = next(iter(engines.values()))
    nodes = device_nodes(first, x.shape)
    hosts = {mode: host_seconds(engine) for mode, engine in engines.items()}
    eager = torch_runner(torch, name, x) if torch is not None else None
    for _ in range(3):  # warm: arenas bound, programs built, caches filled
        for host in hosts.values():
            host(x)
        if timed is not None:
            timed.forward(x)
        if eager is not None:
            eager()
    _, launches = kernel_seconds(first, x, profile=False)
    runs: dict[str, list[float]] = {"kernels": [], "torch": [], "cpu": []}
    for mode in engines:
        runs[f"host {mode}"], runs[f"wall {mode}"] = [], []
    for _ in range(args.rounds):
        for mode, host in hosts.items():
            start = time.perf_counter()
            runs[f"host {mode}"].append(host(x))
            runs[f"wall {mode}"].append(time.perf_counter() - start)
        if timed is not None:
            seconds, _ = kernel_seconds(timed, x)
            if seconds is not None:
                runs["kernels"].append(seconds)
        if eager is not None:
            start = time.perf_counter()
            eager()
            runs["torch"].append(time.perf_counter() - start)
        if args.cpu and cpu is not None:
            start = time.perf_counter()
            cpu.forward(x)
            runs["cpu"].append(time.perf_counter() - start)
    alone: dict[str, list[float]] = {mode: [] for mode in engines}
    for _ in range(args.rounds):  # back to back, as a loop over inputs runs (the modes in turns of 5)
        for mode, host in hosts.items():
            alone[mode].extend(host(x) for _ in range(5))
    median = {k: statistics.median(v) if v else None for k, v in runs.items()}
    for engine in engines.values():
        engine.close()
    if timed is not None:
        timed.close()

    def ms(value: float | None) -> str:
        return "" if value is None else f"{value * 1e3:.2f}"

    rows = []
    for mode in engines:
        wall, host_ms = median[f"wall {mode}"], statistics.median(alone[mode])
        kernels = median["kernels"]
        ratio = "" if kernels is None else f"{wall / kernels:.2f}"  # type: ignore[operator]
        label = name if len(engines) == 1 else f"{name} ({devices[mode].enqueue})"
        interleaved = median[f"host {mode}"] * 1e6 / nodes  # type: ignore[operator]
        rows.append(f"| {label} | {nodes} | {'' if launches is None else launches} | {host_ms * 1e6 / nodes:.1f} | "
                    f"{interleaved:.1f} | {ms(host_ms)} | {ms(wall)} | "
                    f"{ms(median['kernels'])} | {ratio} | {ms(median['torch'])} | {ms(median['cpu'])} | "
                    f"{errors[mode]:.1e} |")
    return rows


if __name__ == "__main__":
    main()
