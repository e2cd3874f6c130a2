"""Whole models on the OpenCL device through ``Engine.load(..., device=...)``.

Tolerance: a device output matches the CPU (and PyTorch) when max|device - reference| is at
most ``RELATIVE`` (1e-4) times max|reference|: the kernels compute float32 like numpy but
sum in another order. Runs once per OpenCL device present (see conftest.py).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import networkx as nx
import numpy as np
import pytest
from graphexec.devices.opencl.device import OpenCLKernel

from graphexec import DeviceError, Engine, OptionError, Trace
from graphexec.placement import CONSTANT_FOR_HOST, FORCED, SIZED_BY_RUN
from graphexec.transfers import Download, Upload
from tests.devices.opencl.conftest import break_op
from tests.golden import OPS, assert_matches, assert_same_detections, engine_cases, load_io, more_io
from tests.paths import REPO

ROOT = REPO
MODELS = ROOT / "examples" / "models"
#: max|device - reference| <= RELATIVE * max|reference|
RELATIVE = 1e-4
BUNDLED = ["inception_mini", "shuffle_mini", "two_heads", "wide"]


def bundled(name: str) -> tuple[Path, list[np.ndarray], list[np.ndarray]]:
    with np.load(MODELS / f"{name}.io.npz") as io:
        ins = [io[k] for k in sorted(k for k in io.files if k.startswith("in"))]
        outs = [io[k] for k in sorted((k for k in io.files if k.startswith("out")), key=lambda k: int(k[3:]))]
    return MODELS / f"{name}.pnnx.param", ins, outs


def as_tuple(result) -> tuple:
    return result if isinstance(result, tuple) else (result,)


def assert_close(got: np.ndarray, want: np.ndarray, what: str) -> None:
    assert isinstance(got, np.ndarray), f"{what}: got a {type(got).__name__}, not a numpy array"
    assert got.shape == want.shape and got.dtype == want.dtype, f"{what}: {got.shape} {got.dtype} vs {want.shape} {want.dtype}"
    scale = max(float(np.abs(want).max()), 1e-30)
    diff = float(np.abs(got.astype(np.float64) - want).max())
    assert diff <= RELATIVE * scale, f"{what}: max|diff| {diff:.3g} > {RELATIVE} x {scale:.3g}"


@pytest.mark.parametrize("name", BUNDLED)
def test_bundled_model_matches_cpu_and_pytorch(device, name):
    param, ins, want = bundled(name)
    with Engine.load(param, device=device, threads=1) as engine:
        got = as_tuple(engine.forward(*ins))
        placement = engine.placement
    cpu = as_tuple(Engine.load(param, threads=1).forward(*ins))
    for k, (g, c, w) in enumerate(zip(got, cpu, want, strict=True)):
        assert_close(g, c, f"{name} out{k} vs CPU")
        assert_close(g, w, f"{name} out{k} vs PyTorch")
    assert len(placement.on("opencl")) >= len(placement.rows) * 0.9, placement


def test_placed_plan_has_explicit_transfers_and_device_nodes(device):
    param = MODELS / "inception_mini.pnnx.param"
    engine = Engine.load(param, device=device)
    plan = engine.plan()
    kinds = [type(node.step.layer) for node in plan.nodes]
    assert kinds.count(Upload) == 1 and kinds.count(Download) == 1
    on_device = [node for node in plan.nodes if isinstance(node.kernel, OpenCLKernel)]
    assert len(on_device) == len(engine.program.steps) - len(plan.fused_away)  # conv+relu: one node
    assert {node.device for node in plan.nodes} == {"opencl"}
    upload = next(n for n in plan.nodes if isinstance(n.step.layer, Upload))
    assert upload.step.inputs == engine.program.inputs and upload.step.outputs[0].endswith("@opencl")
    assert "upload:" in upload.name and upload.type == "graphexec.Upload"


def test_cpu_node_feeding_several_device_nodes_is_uploaded_once(device):
    param, ins, want = bundled("inception_mini")
    engine = Engine.load(param, device=device, cpu_types={"nn.MaxPool2d"})
    plan = engine.plan()
    steps = plan.program.steps
    uploads = [s.inputs[0] for s in steps if isinstance(s.layer, Upload)]
    assert len(uploads) == len(set(uploads)), "a value is uploaded twice"
    pooled = [s.outputs[0] for s in steps if s.layer.type == "nn.MaxPool2d"]
    device_readers = {p: sum(1 for n in plan.nodes if isinstance(n.kernel, OpenCLKernel)
                             and f"{p}@opencl" in n.step.inputs) for p in pooled}
    shared = [p for p, n in device_readers.items() if n >= 2]
    assert shared, f"expected a pooled value read by two device nodes: {device_readers}"
    assert all(p in uploads for p in shared)
    assert_close(engine.forward(*ins), want[0], "inception_mini with pools on the CPU")


def test_forced_cpu_types_are_honoured_and_explained(device):
    param, ins, want = bundled("inception_mini")
    engine = Engine.load(param, device=device, cpu_types={"nn.ReLU"})
    placement = engine.placement
    relus = [r for r in placement.rows if r.type == "nn.ReLU"]
    assert relus and all(r.device == "cpu" and r.reason == FORCED for r in relus)
    assert all(r.device == "opencl" for r in placement.rows if r.type == "nn.Conv2d")
    for node in engine.plan().nodes:
        if node.type == "nn.ReLU":
            assert node.device == "cpu" and not isinstance(node.kernel, OpenCLKernel)
    ups, downs = placement.transfers
    assert ups == downs == len(relus) + 1  # one of each around every ReLU, plus the input and output
    assert_close(engine.forward(*ins), want[0], "inception_mini with ReLU on the CPU")
    assert FORCED in str(placement) and "nn.ReLU" in str(placement)


def test_a_view_of_a_cpu_value_stays_on_the_cpu(device):
    param, ins, want = bundled("inception_mini")
    engine = Engine.load(param, device=device, cpu_types={"nn.AdaptiveAvgPool2d"})
    flatten = next(r for r in engine.placement.rows if r.type == "torch.flatten")
    assert flatten.device == "cpu" and "view" in flatten.reason
    assert_close(engine.forward(*ins), want[0], "flatten kept beside its CPU input")


def test_constants_live_on_the_side_that_reads_them(device):
    """A float32 or bool constant (pnnx.Attribute) that device nodes read is uploaded once and
    copied on the device each run, so the plan uploads only the model's input; one that only CPU
    nodes read (the causal mask of a MultiheadAttention kept on the CPU) stays there."""
    case = OPS / "plumbing" / "folded_constant"
    ins, want = load_io(case)
    with Engine.load(case / "model.pnnx.param", device=device) as engine:
        row = next(r for r in engine.placement.rows if r.type == "pnnx.Attribute")
        assert row.device == "opencl" and engine.placement.transfers == (1, 1)
        for _ in range(3):  # the kept copy outlives runs that reuse the arena
            assert_matches(engine.forward(*ins), want[0], what="folded_constant on the device")
    case = OPS / "attention" / "mha_causal"
    ins, want = load_io(case)
    with Engine.load(case / "model.pnnx.param", device=device) as engine:
        assert len(engine.placement.on("opencl")) == 2 and engine.placement.transfers == (1, 1)
        assert_matches(engine.forward(*ins), want[0], what="mha_causal on the device")
    with Engine.load(case / "model.pnnx.param", device=device, cpu_types={"nn.MultiheadAttention"}) as engine:
        row = next(r for r in engine.placement.rows if r.type == "pnnx.Attribute")
        assert row.device == "cpu" and row.reason == CONSTANT_FOR_HOST
        assert engine.placement.transfers == (0, 0)
        assert_matches(engine.forward(*ins), want[0], what="mha_causal kept on the CPU")
    case = OPS / "attention" / "mha_bool_causal"  # a bool constant: the mask read where it lies
    ins, want = load_io(case)
    with Engine.load(case / "model.pnnx.param", device=device) as engine:
        assert len(engine.placement.on("opencl")) == 2 and engine.placement.transfers == (1, 1)
        assert_matches(engine.forward(*ins), want[0], what="mha_bool_causal on the device")


def test_what_the_model_computes_from_constants_alone_is_a_constant_on_the_device(device):
    """A bias gathered from a table by relative positions (integer indexing, which no kernel
    computes) is folded at planning: the device reads it as a constant uploaded once, so a
    run uploads only the input; without the fold it is gathered on the CPU at every run."""
    case = OPS / "plumbing" / "relative_positions"
    ins, want = load_io(case)
    with Engine.load(case / "model.pnnx.param", device=device) as engine:
        placement = engine.plan(ins[0].shape).placement
        assert [r.device for r in placement.rows if r.node == "Tensor.permute_3"] == ["opencl"]
        assert placement.transfers == (1, 1)
        for _ in range(2):
            got = engine.forward(*ins)
            assert_close(got[0], want[0], "relative_positions on the device")
            assert np.array_equal(got[1], want[1])
    with Engine.load(case / "model.pnnx.param", device=device, passes_off={"fold_constants"}) as engine:
        assert engine.plan(ins[0].shape).placement.transfers == (2, 1)


def test_an_operator_without_kernel_runs_on_the_cpu_between_transfers(device):
    from graphexec.layers import Layer, register
    from graphexec.layers.registry import unregister

    @register("aten::i0")
    class BesselI0(Layer):
        def infer_shapes(self, shapes):
            return [shapes[0]]

        def forward(self, inputs):
            return [np.i0(inputs[0]).astype(inputs[0].dtype, copy=False)]

    try:
        param, ins, want = bundled("bessel_gate")
        engine = Engine.load(param, device=device)
        row = next(r for r in engine.placement.rows if r.type == "aten::i0")
        assert row.device == "cpu" and "no OpenCL kernel" in row.reason
        steps = engine.plan().program.steps
        i0 = next(k for k, s in enumerate(steps) if s.layer.type == "aten::i0")
        assert isinstance(steps[i0 - 1].layer, Download) or any(
            isinstance(s.layer, Download) and s.outputs[0] in steps[i0].inputs for s in steps[:i0])
        assert any(isinstance(s.layer, Upload) and s.inputs[0] in steps[i0].outputs for s in steps[i0:])
        assert len(engine.placement.on("opencl")) >= 1
        for threads in (1, 2):
            with Engine.load(param, device=device, threads=threads) as e:
                for k, (g, w) in enumerate(zip(as_tuple(e.forward(*ins)), want, strict=True)):
                    assert_close(g, w, f"bessel_gate out{k}, {threads} worker(s)")
    finally:
        unregister("aten::i0")


def test_an_engine_with_a_device_runs_one_worker_unless_asked(device):
    """Device nodes only enqueue, so more host workers would only contend for the GIL."""
    param, _, _ = bundled("wide")  # eight equal branches: on the CPU, one worker per core
    with Engine.load(param, device=device) as engine:
        assert engine.threads == 1
    with Engine.load(param, device=device, threads=2) as asked:
        assert asked.threads == 2


@pytest.mark.parametrize("threads", [2, 4])
def test_concurrent_scheduler_equals_sequential_on_the_device(device, threads):
    param, ins, _ = bundled("inception_mini")
    with Engine.load(param, device=device, threads=1) as sequential:
        want = sequential.forward(*ins)
    with Engine.load(param, device=device, threads=threads) as concurrent:
        for _ in range(3):
            got = concurrent.forward(*ins)
            assert np.array_equal(got, want), f"{threads} workers differ from one on the device"


def test_forward_from_several_threads_at_once(device):
    from concurrent.futures import ThreadPoolExecutor

    param, ins, _ = bundled("inception_mini")
    rng = np.random.default_rng(1)
    xs = [rng.standard_normal(ins[0].shape).astype(np.float32) for _ in range(4)]
    cpu = Engine.load(param, threads=1)
    with Engine.load(param, device=device, threads=2) as engine, ThreadPoolExecutor(3) as pool:
        results = list(pool.map(engine.forward, xs))
    for x, got in zip(xs, results):
        assert_close(got, cpu.forward(x), "concurrent callers")


def test_trace_shows_independent_branches_on_different_queues(device):
    param, ins, _ = bundled("inception_mini")
    with Engine.load(param, device=device, threads=1) as engine:
        engine.forward(*ins)
        trace = Trace()
        engine.forward(*ins, trace=trace)
        plan = engine.plan()
    lanes = trace.queues_used()
    assert len(lanes) >= 2, lanes
    assert trace.device_timing in ("opencl event profiling", "host enqueue times")
    lane_of = {e.node: e.thread for e in trace.device_events}
    convs = [n.index for n in plan.nodes if n.type.startswith("nn.Conv2d") and n.index in lane_of]
    independent = [(a, b) for a in convs for b in convs if a < b and lane_of[a] != lane_of[b]
                   and not nx.has_path(plan.dag, a, b) and not nx.has_path(plan.dag, b, a)]
    assert independent, "no two independent convolutions ran on different queues"
    chrome = trace.to_chrome()["traceEvents"]
    names = {e["args"]["name"] for e in chrome if e["ph"] == "M" and e["name"] == "thread_name"}
    assert {"opencl queue 0", "opencl queue 1"} <= names
    assert "busy time per device queue" in str(trace.summary())


def test_profiled_trace_maps_device_times_onto_the_run(device, tmp_path):
    from graphexec.devices.opencl import open_device

    profiled = open_device(f"opencl:{device.info.index}", profiling=True, cache_dir=tmp_path)
    param, ins, _ = bundled("inception_mini")
    with Engine.load(param, device=profiled, threads=2) as engine:
        engine.forward(*ins)
        trace = Trace()
        engine.forward(*ins, trace=trace)
    assert trace.device_timing == "opencl event profiling" and trace.device_profiled
    slack = 5_000_000  # ns: the clock offset is measured, not exact
    for e in trace.device_events:
        assert e.end_ns >= e.start_ns
        assert trace.start_ns - slack <= e.start_ns and e.end_ns <= trace.end_ns + slack, e
    summary = trace.summary()
    assert summary.critical_path_seconds <= summary.wall_seconds * 1.05


def test_extracting_an_intermediate_left_on_the_device_gives_numpy(device):
    param, ins, want = bundled("inception_mini")
    engine = Engine.load(param, device=device, threads=1)
    cpu = Engine.load(param, threads=1)
    inner = engine.plan().program.steps[3].outputs[0].removesuffix("@opencl")
    got, extracted = engine.forward(*ins, extract=[inner])
    _, reference = cpu.forward(*ins, extract=[inner])
    assert inner in engine.plan().placement.resident
    assert_close(extracted[inner], reference[inner], f"extracted {inner}")
    assert_close(got, want[0], "output beside the extraction")


def test_fallback_moves_a_failing_node_to_the_cpu(device, monkeypatch):
    from graphexec.devices.opencl.ops.pooling import WindowPoolOp

    break_op(monkeypatch, WindowPoolOp)
    param, ins, want = bundled("inception_mini")
    with pytest.raises(DeviceError) as raised:
        Engine.load(param, device=device)
    text = str(raised.value)
    assert "nn.MaxPool2d" in text and device.name in text and "fallback=True" in text
    engine = Engine.load(param, device=device, fallback=True)
    moved = [r for r in engine.placement.rows if r.type == "nn.MaxPool2d"]
    assert moved and all(r.device == "cpu" and "device run failed" in r.reason for r in moved)
    assert all(r.device == "opencl" for r in engine.placement.rows if r.type == "nn.Conv2d")
    assert_close(engine.forward(*ins), want[0], "inception_mini with failing pools moved to the CPU")


def test_fallback_is_logged_as_a_warning(device, monkeypatch):
    from graphexec.devices.opencl.ops.pooling import WindowPoolOp
    from loguru import logger

    monkeypatch.setattr(WindowPoolOp, "run", lambda self, launch, layer, inputs: (_ for _ in ()).throw(
        DeviceError("pretend failure")))
    messages: list[str] = []
    sink = logger.add(lambda m: messages.append(m.record["message"]), level="WARNING")
    logger.enable("graphexec")
    try:
        Engine.load(bundled("inception_mini")[0], device=device, fallback=True)
    finally:
        logger.disable("graphexec")
        logger.remove(sink)
    assert any("moves to the CPU" in m and "nn.MaxPool2d" in m for m in messages), messages


def _failing_enqueue(monkeypatch, kernel_calls: list[str]):
    import pyopencl as cl

    real = cl.enqueue_nd_range_kernel

    def enqueue(queue, kernel, *args, **kwargs):
        if kernel.function_name.startswith("conv"):
            kernel_calls.append(kernel.function_name)
            raise cl.RuntimeError(cl._cl._ErrorRecord(
                msg="clEnqueueNDRangeKernel failed: OUT_OF_RESOURCES", code=-5, routine="clEnqueueNDRangeKernel"))
        return real(queue, kernel, *args, **kwargs)

    monkeypatch.setattr(cl, "enqueue_nd_range_kernel", enqueue)


def test_a_device_failure_names_node_type_kernel_and_device(python_device, monkeypatch):
    device = python_device
    param, ins, _ = bundled("inception_mini")
    engine = Engine.load(param, device=device, threads=1)
    calls: list[str] = []
    _failing_enqueue(monkeypatch, calls)
    with pytest.raises(DeviceError) as raised:
        engine.forward(*ins)
    text = str(raised.value)
    first_conv = next(n for n in engine.plan().nodes if n.type.startswith("nn.Conv2d"))  # fused with its ReLU
    assert calls and f"node {first_conv.name} ({first_conv.type})" in text
    assert device.name in text and f"kernel {calls[0]}" in text and "OUT_OF_RESOURCES" in text
    with pytest.raises(DeviceError, match="while warming up"):  # at load, the same failure
        Engine.load(param, device=device)


def test_device_specs_and_errors(device):
    with pytest.raises(DeviceError, match="no OpenCL device matches 'no-such-device'; there are: opencl:0"):
        Engine.load(MODELS / "two_heads.pnnx.param", device="opencl:no-such-device")
    with pytest.raises(DeviceError, match="there is no OpenCL device 99"):
        Engine.load(MODELS / "two_heads.pnnx.param", device="opencl:99")
    engine = Engine.load(MODELS / "two_heads.pnnx.param", device=f"opencl:{device.info.index}")
    assert engine.device.name == device.name and engine.plan().placement is not None
    engine.close()


def test_unknown_device_and_bad_cpu_types_are_refused():
    with pytest.raises(DeviceError, match="unknown device 'cuda'"):
        Engine.load(MODELS / "two_heads.pnnx.param", device="cuda")
    with pytest.raises(OptionError, match="cpu_types takes a collection"):
        Engine.load(MODELS / "two_heads.pnnx.param", cpu_types="nn.ReLU")
    with pytest.raises(OptionError, match=r"cpu_types \['nn.Bogus'\] name no operator type graphexec knows"):
        Engine.load(MODELS / "two_heads.pnnx.param", cpu_types={"nn.Bogus", "nn.ReLU"})


def test_cpu_engine_places_everything_on_the_cpu_and_never_imports_pyopencl():
    code = (
        "import sys, numpy as np\n"
        "from graphexec import Engine\n"
        f"e = Engine.load({str(MODELS / 'inception_mini.pnnx.param')!r}, threads=2)\n"
        f"x = np.load({str(MODELS / 'inception_mini.io.npz')!r})['in0']\n"
        "e.forward(x); e.close()\n"
        "assert e.plan().placement.device is None and {r.device for r in e.placement.rows} == {'cpu'}\n"
        "assert not any(m.startswith('pyopencl') for m in sys.modules), 'pyopencl was imported'\n"
        "print('ok')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], check=False, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


# -- every golden operator fixture: the device (or the CPU beside it) gives PyTorch's answer ------
@pytest.mark.parametrize("case", engine_cases())
def test_operator_fixture_on_the_device(device, case):
    ins, want = load_io(case)
    engine = Engine.load(case / "model.pnnx.param", device=device, threads=1)
    got = as_tuple(engine.forward(*ins))
    for k, (g, w) in enumerate(zip(got, want, strict=True)):
        # the golden tests' own rule: floats within 1e-4 x max(1, max|want|), the rest exact
        assert_matches(g, w, what=f"{case.name} out{k}")


# -- sizes the run decides: what reads them is placed once the run has computed them --------------
@pytest.mark.parametrize("threads", [1, 2])
def test_nodes_after_a_size_the_run_decides_run_on_the_device(device, threads):
    """The value's producer stays on the CPU, saying why; the rest, planned once the run has
    computed it, puts its linear layer on the device, for every saved input set (empty rows
    among them), with PyTorch's outputs and the same bits whatever the workers."""
    folder = OPS / "dynamic" / "after_a_threshold"
    with Engine.load(folder / "model.pnnx.param", device=device, threads=threads) as engine, \
            Engine.load(folder / "model.pnnx.param", device=device, threads=1) as sequential:
        plan = engine.plan()
        producers = {name: step.name for step in plan.program.steps for name in step.outputs}
        assert {engine.placement.where(producers[n]).reason for n in plan.dynamic} == {SIZED_BY_RUN}
        for ins, want in [load_io(folder), *more_io(folder)]:
            trace = Trace()
            got = as_tuple(engine.forward(*ins, trace=trace))
            for k, (g, w) in enumerate(zip(got, want, strict=True)):
                assert_matches(g, w, what=f"t={ins[3]} out{k}")
            assert all(a.tobytes() == b.tobytes() for a, b in zip(got, as_tuple(sequential.forward(*ins))))
            rest = trace.stages[1].placement
            assert rest.where("linear").device == "opencl", str(rest)
            assert rest.where("pnnx_17").reason == SIZED_BY_RUN  # nms: its size, too, is the run's


# -- whole torchvision networks (exported by tools/export_networks.py) ----------------------------
NETWORKS = ROOT / "artifacts" / "networks"
#: The convolutional networks the CPU is checked on, and the two with attention (Swin's windows,
#: MaxViT's blocks); all eighteen take about 3 minutes on PoCL with 2 cores.
NETWORK_NAMES = ["googlenet", "squeezenet1_1", "mobilenet_v3_small", "shufflenet_v2", "mnasnet", "inception_v3",
                 "resnet50", "densenet121", "efficientnet_b0", "resnext50", "mobilenet_v2", "mobilenet_v3_large",
                 "regnet_y_400mf", "convnext_tiny", "vgg11", "alexnet", "swin_t", "maxvit_t"]


@pytest.mark.parametrize("name", NETWORK_NAMES)
def test_network_matches_pytorch_on_the_device(device, name):
    folder = NETWORKS / name
    if not (folder / "model.pnnx.param").exists():
        pytest.skip(f"{name} is not exported: run `python tools/export_networks.py {name}` (needs .[export])")
    with np.load(folder / "io.npz") as io:
        x, want = io["in0"], io["out0"]
    with Engine.load(folder / "model.pnnx.param", device=device, threads=2) as engine:
        got = engine.forward(x)
        on_device = len(engine.placement.on("opencl"))
    assert_close(got, want, f"{name} on {device.name}")
    assert on_device > 0


def test_whole_detector_on_the_device(device):
    """Faster R-CNN (tools/export_detectors.py) with its rests planned at run time on the
    device: PyTorch's detections, and nodes of the rests on the device."""
    folder = NETWORKS / "fasterrcnn_mobilenet_v3_320"
    if not (folder / "model.pnnx.param").exists():
        pytest.skip("fasterrcnn_mobilenet_v3_320 is not exported: run `python tools/export_detectors.py` "
                    "(needs .[export])")
    with np.load(folder / "io.npz") as io:
        x, want = io["in0"], [io[f"out{i}"] for i in range(3)]
    with Engine.load(folder / "model.pnnx.param", device=device, threads=2) as engine:
        trace = Trace()
        got = as_tuple(engine.forward(x, trace=trace))
    assert_same_detections(list(got), want, f"fasterrcnn_mobilenet_v3_320 on {device.name}")
    assert len(trace.stages) > 2 and all(p.rest is not None for p in trace.stages[:-1])
    assert sum(len(p.placement.on("opencl")) for p in trace.stages[1:]) > 0
    with Engine.load(folder / "model.pnnx.param", device=device, threads=1) as sequential:  # stretches replayed
        replayed = as_tuple(sequential.forward(x))
        assert sequential._arenas(sequential.plan()).replay is not None
    assert_same_detections(list(replayed), want, f"fasterrcnn_mobilenet_v3_320 on {device.name}, replayed")


# -- the memory plan on the device -----------------------------------------------------------
@pytest.mark.parametrize("threads", [1, 4])
def test_device_tensors_live_in_one_device_arena_and_give_the_same_bits(device, threads):
    """Kernels write into regions of one device buffer, shared under the same happens-before
    rule as on the host (kernels wait on their inputs' events); results equal a run that
    allocates every tensor afresh, call after call and from concurrent callers."""
    from concurrent.futures import ThreadPoolExecutor

    param, ins, _ = bundled("inception_mini")
    with Engine.load(param, device=device, threads=threads, reuse_memory=False) as plain:
        want = plain.forward(*ins)
    with Engine.load(param, device=device, threads=threads) as engine:
        memory = engine.memory_plan()
        on_device = [n for n, home in memory.homes.items() if home == "opencl"]
        assert len(on_device) >= 30  # one tensor per node: each conv+relu pair is one
        assert 0 < memory.bytes_on["opencl"] < sum(memory.regions[n][1].nbytes for n in on_device)
        for _ in range(3):
            assert np.array_equal(engine.forward(*ins), want)
        with ThreadPoolExecutor(3) as pool:
            for got in pool.map(lambda _: engine.forward(*ins), range(6)):
                assert np.array_equal(got, want)
