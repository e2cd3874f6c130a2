"""The OpenCL device itself: choosing it, its queues, moving tensors, what it supports,
events across queues, kernels per thread, and the program cache (in memory, on disk,
across processes). Skipped, with the reason, where pyopencl or OpenCL is missing; the
tests of choosing and importing need no device."""

from __future__ import annotations

import re
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
from graphexec.layers.specs import TensorSpec

from graphexec.errors import DeviceError, GraphexecError
from tests.devices.opencl.conftest import make_layer
from tests.paths import REPO

ROOT = REPO


def python(code: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          check=False, **kwargs)


# ------------------------------------------------------------------------------------------
# importing and choosing (no device needed)
# ------------------------------------------------------------------------------------------
def test_importing_graphexec_and_devices_never_imports_pyopencl():
    result = python("import sys, graphexec, graphexec.devices, graphexec.devices.opencl, graphexec.layers\n"
                    "from graphexec import Engine\n"
                    "assert 'pyopencl' not in sys.modules, 'pyopencl was imported'\n")
    assert result.returncode == 0, result.stderr


def test_a_missing_pyopencl_is_a_device_error():
    result = python("import sys; sys.modules['pyopencl'] = None\n"
                    "from graphexec.devices.opencl import open_device\n"
                    "from graphexec.errors import DeviceError\n"
                    "try:\n    open_device('opencl')\n"
                    "except DeviceError as exc:\n    print('DeviceError:', exc)\n")
    assert result.returncode == 0, result.stderr
    assert "DeviceError: the OpenCL device needs pyopencl" in result.stdout
    assert "pip install" in result.stdout


def _infos():
    from graphexec.devices.opencl.selection import DeviceInfo

    return [
        DeviceInfo(0, "Portable Computing Language", "The pocl project", "AuthenticAMD", "pthread-AMD EPYC", "ALL | CPU",
                   "OpenCL 3.0"),
        DeviceInfo(1, "NVIDIA CUDA", "NVIDIA Corporation", "NVIDIA Corporation", "NVIDIA H100", "ALL | GPU", "OpenCL 3.0"),
        DeviceInfo(2, "NVIDIA CUDA", "NVIDIA Corporation", "NVIDIA Corporation", "NVIDIA A100", "ALL | GPU", "OpenCL 3.0"),
    ]


@pytest.mark.parametrize("spec, index", [
    (None, 1), ("opencl", 1), ("opencl:0", 0), ("opencl:2", 2), ("opencl:pocl", 0), ("opencl:gpu", 1),
    ("opencl:cpu", 0), ("OpenCL:A100", 2), ("opencl:nvidia", 1), ("opencl: 2 ", 2), (2, 2), (0, 0),
])
def test_select_by_index_name_or_type(spec, index):
    from graphexec.devices.opencl.selection import select

    assert select(spec, _infos()).index == index


@pytest.mark.parametrize("spec, says", [
    ("opencl:7", "there is no OpenCL device 7 (3 device(s): opencl:0  pthread-AMD EPYC"),
    ("opencl:fpga", "no OpenCL device matches 'fpga'; there are: opencl:0  pthread-AMD EPYC (ALL | CPU, Portable"),
    ("opencl:accelerator", "no OpenCL device matches 'accelerator'"),
    ("cuda:0", "'cuda:0' is not an OpenCL device spec"),
    (7, "there is no OpenCL device 7"),
    (1.5, "an OpenCL device spec is a string or an index, given float 1.5"),
    (True, "given bool True"),
])
def test_select_says_what_exists(spec, says):
    from graphexec.devices.opencl.selection import select

    with pytest.raises(DeviceError) as info:
        select(spec, _infos())
    assert says in str(info.value)
    assert isinstance(info.value, GraphexecError)


def test_no_platform_is_a_device_error(monkeypatch):
    from graphexec.devices.opencl import selection

    monkeypatch.setattr(selection, "list_devices", list)
    with pytest.raises(DeviceError, match="no OpenCL platform is installed"):
        selection.open_device("opencl")
    with pytest.raises(DeviceError, match="at least one command queue"):
        selection.open_device("opencl", queues=0)


# ------------------------------------------------------------------------------------------
# the device object
# ------------------------------------------------------------------------------------------
def test_queues_and_properties(device):
    from graphexec.devices.opencl import open_device

    assert len(device.queues) == 2
    assert isinstance(device.out_of_order, bool)
    assert device.max_work_group_size >= 1 and device.local_mem_size > 0
    three = open_device(f"opencl:{device.info.index}", queues=3, cache_dir=False)
    assert len(three.queues) == 3 and three.queue(2) is three.queues[2]
    with pytest.raises(DeviceError, match="no queue 3"):
        three.queue(3)


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int64, np.uint8, np.bool_, np.float64])
def test_upload_download_round_trip(device, dtype):
    x = (np.arange(60).reshape(3, 4, 5) % 7).astype(dtype)
    t = device.upload(x, 1)
    assert t.shape == (3, 4, 5) and t.dtype == np.dtype(dtype) and t.event is not None
    np.testing.assert_array_equal(device.download(t), x)
    part = t.narrow(0, 1, 2).reshape((2, 20))
    np.testing.assert_array_equal(device.download(part), x[1:].reshape(2, 20))
    empty = device.upload(np.zeros((0, 3), dtype))
    assert device.download(empty).shape == (0, 3)


def test_upload_takes_the_values_at_the_call(device):
    x = np.ones(1000, np.float32)
    t = device.upload(x)
    x[:] = 5  # changing the array afterwards does not change the tensor
    np.testing.assert_array_equal(device.download(t), np.ones(1000, np.float32))


def test_views_check_their_range(device):
    t = device.upload(np.zeros((2, 3, 4), np.float32))
    with pytest.raises(DeviceError, match="not contiguous"):
        t.narrow(1, 0, 2)
    with pytest.raises(DeviceError, match="out of range"):
        t.narrow(0, 1, 2)
    with pytest.raises(DeviceError, match="cannot reshape"):
        t.reshape((5, -1))
    assert t.reshape((4, -1)).shape == (4, 6)


def test_backend_errors_become_device_errors(device):
    from graphexec.devices.opencl.device import DeviceTensor

    t = device.upload(np.zeros(4, np.float32))
    bad = DeviceTensor(t.buffer, (4,), np.float32, t.event, offset=1000)
    with pytest.raises(DeviceError, match="downloading"):
        device.download(bad)
    with pytest.raises(DeviceError, match="2\\*\\*31-1"):
        device.alloc((2**16, 2**16))


def test_supports_by_class_params_and_specs(device):
    f32 = [TensorSpec((1, 4, 8, 8), np.float32)]
    conv = make_layer("nn.Conv2d", {"in_channels": 4, "out_channels": 4, "kernel_size": [3, 3], "padding": [1, 1],
                                        "padding_mode": "reflect", "bias": False},
                      {"weight": np.zeros((4, 4, 3, 3), np.float32)})
    assert device.supports(conv) and device.supports(conv, f32)
    assert not device.supports(conv, [TensorSpec((1, 3, 8, 8), np.float32)])  # wrong channels
    relu = make_layer("nn.ReLU", {})
    assert device.supports(relu, f32)
    assert "int64" in device.unsupported_reason(relu, [TensorSpec((3,), np.int64)])
    transposed = make_layer("F.conv_transpose2d", {"stride": [2, 2]}, inputs=2, names=["input", "weight"])
    assert "no OpenCL kernel for FConvTranspose2d" in device.unsupported_reason(transposed)
    pool = make_layer("nn.MaxPool2d", {"kernel_size": [2, 2], "return_indices": True}, outputs=2)
    assert "return_indices" in device.unsupported_reason(pool)
    compare = make_layer("pnnx.Expression", {"expr": "gt(@0,@1)"}, inputs=2)
    assert "gt() is not implemented" in device.unsupported_reason(compare)
    with pytest.raises(DeviceError, match="cannot run on"):
        device.run(transposed, [device.upload(np.zeros((1, 4, 3, 3), np.float32)),
                                device.upload(np.zeros((4, 4, 2, 2), np.float32))])


def test_weights_are_uploaded_once_per_layer(device):
    layer = make_layer("nn.Conv2d", {"in_channels": 3, "out_channels": 5, "kernel_size": [3, 3], "bias": True},
                       {"weight": np.ones((5, 3, 3, 3), np.float32), "bias": np.ones(5, np.float32)})
    x = device.upload(np.ones((1, 3, 6, 6), np.float32))
    first = device.download(device.run(layer, [x])[0])
    weight = device.constant(layer, "weight", lambda: pytest.fail("uploaded twice"))
    second = device.download(device.run(layer, [x])[0])
    assert device.constant(layer, "weight", lambda: pytest.fail("uploaded twice")) is weight
    np.testing.assert_array_equal(first, second)
    np.testing.assert_array_equal(first, np.full((1, 5, 4, 4), 28, np.float32))


def test_run_writes_into_given_outputs(device):
    """A plan can hand producers views of a concat's output: no copy for the concat."""
    relu, sigmoid = make_layer("nn.ReLU", {}), make_layer("nn.Sigmoid", {})
    a, b = np.linspace(-3, 3, 48, dtype=np.float32).reshape(1, 3, 4, 4), np.ones((1, 2, 4, 4), np.float32)
    joined = device.alloc((1, 5, 4, 4))
    ya = device.run(relu, [device.upload(a)], 0, out=[joined.narrow(1, 0, 3)])[0]
    yb = device.run(sigmoid, [device.upload(b)], 1, out=[joined.narrow(1, 3, 2)])[0]
    assert ya.buffer is joined.buffer and yb.offset == 48
    joined.event = None
    device.finish()
    want = np.concatenate([np.maximum(a, 0), 1 / (1 + np.exp(-b))], axis=1)
    np.testing.assert_allclose(device.download(joined), want, rtol=1e-6)
    # a view's output is copied into the given tensor
    target = device.alloc((1, 48))
    (flat,) = device.run(make_layer("torch.flatten", {"start_dim": 1, "end_dim": -1}), [device.upload(a)],
                         out=[target])
    assert flat.buffer is target.buffer
    np.testing.assert_array_equal(device.download(flat), a.reshape(1, 48))


def test_kernels_are_per_thread_and_work_groups_per_device(device):
    built = device.program("elementwise")
    mine = device.cl_kernel(built, "map_relu")
    assert device.cl_kernel(built, "map_relu") is mine
    theirs = []
    thread = threading.Thread(target=lambda: theirs.append(device.cl_kernel(built, "map_relu")))
    thread.start()
    thread.join()
    assert theirs[0] is not mine
    info = device.kernel_info(built, "map_relu")
    size = device.local_size(built, "map_relu")
    assert 1 <= size <= info.max_work_group and (size % info.multiple == 0 or size < info.multiple)


SCALARS = """
__kernel void scalars(__global float* out, int n, float f) { out[0] = n; out[1] = f; }
"""


def test_kernel_scalars_are_declared_on_first_use_and_packed_from_any_python_number(device):
    """The first launch declares each scalar's type (int32, float32) from its value, so that
    pyopencl packs plain numbers itself; later launches pass whatever number they have."""
    from graphexec.devices.opencl.ops import Launch

    built = device.source_program(SCALARS, "the scalars test")
    out = device.alloc((2,), np.float32)
    for n, f in [(3, 0.5), (np.int64(-4), np.float64(0.25)), (True, 2), (np.bool_(True), np.float32(-1.5)),
                 (np.int32(7), 3), (2**31 - 1, 1e30)]:
        launch = Launch(device, device.queue(0), [], None)
        launch.enqueue(built, "scalars", (1,), None, out.buffer, n, f)
        launch.last_event.wait()
        np.testing.assert_array_equal(device.download(out), np.float32([n, f]))
    launch = Launch(device, device.queue(0), [], None)
    with pytest.raises(DeviceError, match="kernel argument 2147483648 does not fit in 32 bits"):
        launch.enqueue(built, "scalars", (1,), None, out.buffer, 2**31, 0.0)


def test_a_node_that_enqueues_only_a_marker_has_no_device_span(device):
    """A join whose inputs all lie in place enqueues only a marker, the event its readers
    wait on; a marker's profiling stamps need not be a command's (on NVIDIA's driver, one
    that waits on another queue carries the stamps of its queue's previous command), so
    such a node gets no span, as a view gets none."""
    from graphexec.devices.opencl.ops import Launch

    before = device.upload(np.ones(4, np.float32), 1)
    launch = Launch(device, device.queue(0), [before.event], None)
    launch.mark()
    assert launch.first_event is None and launch.last_event is not None
    launch.last_event.wait()
    built = device.source_program(SCALARS, "the scalars test")
    out = device.alloc((2,), np.float32)
    launch = Launch(device, device.queue(0), [], None)
    launch.enqueue(built, "scalars", (1,), None, out.buffer, 1, 2.0)
    launch.mark()  # after a command: the node's span starts at that command
    assert launch.first_event is not None and launch.first_event is not launch.last_event
    launch.last_event.wait()


def test_threads_running_one_layer_at_once(device):
    """Each thread has its own kernel objects, so concurrent runs do not mix arguments."""
    layer = make_layer("nn.LeakyReLU", {"negative_slope": 0.5})
    arrays = [np.full((64, 64), -float(i + 1), np.float32) for i in range(8)]
    results: dict[int, np.ndarray] = {}

    def work(i: int) -> None:
        for _ in range(10):
            (y,) = device.run(layer, [device.upload(arrays[i], i % 2)], i % 2)
            results[i] = device.download(y, i % 2)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i in range(8):
        np.testing.assert_array_equal(results[i], arrays[i] * 0.5)




class _CallsChecked:
    """pyopencl, with each call that creates an object or enqueues a command noting
    whether the device's ``host_calls`` lock was held while it ran."""

    CHECKED = ("Kernel", "Buffer", "Program", "enqueue_copy", "enqueue_nd_range_kernel", "enqueue_marker")

    def __init__(self, cl, lock):
        self._cl, self._lock, self.calls = cl, lock, []

    def __getattr__(self, name):
        real = getattr(self._cl, name)
        if name not in self.CHECKED:
            return real

        def call(*args, **kwargs):
            self.calls.append((name, self._lock.locked()))
            return real(*args, **kwargs)

        return call


def test_runtime_calls_take_turns_under_the_device_lock(device, tmp_path, monkeypatch):
    """Creating kernels, buffers and programs and enqueueing commands happen under
    ``host_calls`` (PoCL crashed when a kernel was created during another thread's copy);
    a download waits for its copy after letting the lock go."""
    from graphexec.devices.opencl import open_device

    fresh = open_device(f"opencl:{device.info.index}", queues=2, cache_dir=tmp_path, profiling=True)
    checked = _CallsChecked(fresh._cl, fresh.host_calls)
    monkeypatch.setattr(fresh, "_cl", checked)
    monkeypatch.setattr(fresh.programs, "_cl", checked)
    layer = make_layer("nn.LeakyReLU", {"negative_slope": 0.5})
    x = np.arange(-8, 8, dtype=np.float32).reshape(4, 4)
    got = []

    def work(queue: int) -> None:
        (y,) = fresh.run(layer, [fresh.upload(x, queue)], queue)
        got.append(fresh.download(y, queue))

    threads = [threading.Thread(target=work, args=(q,)) for q in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    fresh.clock_offset_ns()
    names = {name for name, _ in checked.calls}
    assert {"Kernel", "Buffer", "Program", "enqueue_copy", "enqueue_nd_range_kernel", "enqueue_marker"} <= names
    assert [name for name, held in checked.calls if not held] == []
    assert not fresh.host_calls.locked()
    for y in got:
        np.testing.assert_array_equal(y, np.where(x > 0, x, x * 0.5))
# ------------------------------------------------------------------------------------------
# events
# ------------------------------------------------------------------------------------------
def test_two_queues_with_a_cross_queue_dependency(device):
    """Queue 1 runs after a kernel of queue 0 that is held back by a user event: run()
    returns at once (no host wait), queue 1's kernel does not start before queue 0's, and
    the result is the chained computation."""
    cl = device._cl
    gate = cl.UserEvent(device.context)
    x = data = np.linspace(-2, 2, 4096, dtype=np.float32).reshape(64, 64)
    t = device.upload(data, 0)
    t.event.wait()
    scale = make_layer("pnnx.Expression", {"expr": "mul(@0,3)"}, inputs=1)
    relu = make_layer("nn.ReLU", {})
    returned = []

    def enqueue() -> None:
        (a,) = device.run(scale, [t], 0, wait_for=[gate])      # queue 0, held by the gate
        (b,) = device.run(relu, [a], 1, wait_for=[a.event])     # queue 1, after queue 0's kernel
        returned.append((a, b))

    worker = threading.Thread(target=enqueue)
    worker.start()
    worker.join(timeout=60)
    assert not worker.is_alive(), "run() waited on the host"
    (a, b) = returned[0]
    time.sleep(0.2)
    status = cl.command_execution_status
    assert a.event.command_execution_status != status.COMPLETE
    assert b.event.command_execution_status != status.COMPLETE
    gate.set_status(status.COMPLETE)
    np.testing.assert_array_equal(device.download(b, 1), np.maximum(x * 3, 0))
    assert a.event.command_execution_status == status.COMPLETE


def test_outputs_carry_the_last_event(device):
    layer = make_layer("torch.cat", {"dim": 1}, inputs=3)
    parts = [device.upload(np.full((2, i + 1), i, np.float32)) for i in range(3)]
    (y,) = device.run(layer, parts, 0)
    assert y.event is not None and all(y.event is not p.event for p in parts)
    y.event.wait()
    np.testing.assert_array_equal(device.download(y), np.concatenate([np.full((2, i + 1), i) for i in range(3)], 1))


# ------------------------------------------------------------------------------------------
# the program cache
# ------------------------------------------------------------------------------------------
def _relu_once(device) -> np.ndarray:
    (y,) = device.run(make_layer("nn.ReLU", {}), [device.upload(np.float32([-1, 2]))])
    return device.download(y)


def test_building_programs_says_so_with_the_time_it_took(device, tmp_path):
    """A first run compiles for seconds: the log says what is happening, where the binaries
    go (or that the driver caches them, or that nothing keeps them), and how long each build
    took; a second process says nothing."""
    from loguru import logger

    from graphexec.devices.opencl import open_device
    from graphexec.devices.opencl.programs import caches_itself

    lines: list[str] = []
    sink = logger.add(lambda message: lines.append(str(message)), level="INFO", format="{message}")
    logger.enable("graphexec")
    try:
        _relu_once(open_device(f"opencl:{device.info.index}", cache_dir=tmp_path))
        built = list(lines)
        lines.clear()
        _relu_once(open_device(f"opencl:{device.info.index}", cache_dir=tmp_path))  # loads the binary
        loaded = list(lines)
        lines.clear()
        _relu_once(open_device(f"opencl:{device.info.index}", cache_dir=False))
    finally:
        logger.remove(sink)
        logger.disable("graphexec")
    assert len(built) == 2, built
    assert built[0].startswith("building OpenCL programs for ") and f"binaries cached in {tmp_path}" in built[0]
    assert re.fullmatch(r"built OpenCL kernels/elementwise.cl[^(]* in \d+\.\d s \(1 built, \d+\.\d s in all\)\n",
                        built[1]), built[1]
    assert loaded == []
    kept = ("which the driver caches" if caches_itself(device.info.platform) else "kept in memory only")
    assert kept in lines[0], lines


def test_programs_are_built_once_per_context(device):
    _relu_once(device)
    before = dict(device.programs.stats)
    first = device.program("elementwise")
    _relu_once(device)
    assert device.program("elementwise") is first
    assert device.programs.stats["built"] == before.get("built", 0)
    assert device.programs.stats["loaded"] == before.get("loaded", 0)
    assert device.programs.stats["reused"] > before.get("reused", 0)


def test_program_binaries_are_reused_from_disk(device, tmp_path):
    from graphexec.devices.opencl import open_device

    spec = f"opencl:{device.info.index}"
    first = open_device(spec, cache_dir=tmp_path)
    np.testing.assert_array_equal(_relu_once(first), [0, 2])
    assert first.programs.stats["built"] == 1 and len(list(tmp_path.glob("*.bin"))) == 1
    second = open_device(spec, cache_dir=tmp_path)  # a new context: as a new process would
    np.testing.assert_array_equal(_relu_once(second), [0, 2])
    assert second.programs.stats["loaded"] == 1 and second.programs.stats["built"] == 0
    # a damaged binary is rebuilt from source and replaced
    (binary,) = tmp_path.glob("*.bin")
    binary.write_bytes(b"not a program")
    third = open_device(spec, cache_dir=tmp_path)
    np.testing.assert_array_equal(_relu_once(third), [0, 2])
    assert third.programs.stats["built"] == 1 and binary.read_bytes() != b"not a program"
    # no cache directory: in memory only
    memory = open_device(spec, cache_dir=False)
    _relu_once(memory)
    assert memory.programs.cache_dir is None


def test_by_default_binaries_are_kept_where_the_driver_keeps_none_itself(device):
    from graphexec.devices.opencl import open_device
    from graphexec.devices.opencl.programs import caches_itself, default_cache_dir

    assert caches_itself("Portable Computing Language") and not caches_itself("NVIDIA CUDA")
    spec = f"opencl:{device.info.index}"
    assert open_device(spec).programs.cache_dir == (None if caches_itself(device.info.platform)
                                                    else default_cache_dir())
    assert open_device(spec, cache_dir=True).programs.cache_dir == default_cache_dir()


def test_a_second_process_loads_the_binaries(device, tmp_path):
    code = (
        "import numpy as np, graphexec\n"
        "from graphexec.devices.opencl import open_device\n"
        "from tests.devices.opencl.conftest import make_layer\n"
        f"d = open_device('opencl:{device.info.index}', cache_dir={str(tmp_path)!r})\n"
        "(y,) = d.run(make_layer('nn.ReLU', {}), [d.upload(np.float32([-1, 2]))])\n"
        "assert d.download(y).tolist() == [0, 2]\n"
        "print(d.programs.stats['built'], d.programs.stats['loaded'])\n"
    )
    first = python(code)
    assert first.returncode == 0, first.stderr
    assert first.stdout.split() == ["1", "0"]
    second = python(code)
    assert second.returncode == 0, second.stderr
    assert second.stdout.split() == ["0", "1"]


def test_warm_up_builds_ahead_of_the_run(device):
    layer = make_layer("nn.Conv2d", {"in_channels": 5, "out_channels": 11, "kernel_size": [3, 3], "bias": True,
                                         "padding_mode": "circular", "padding": [1, 1]},
                       {"weight": np.ones((11, 5, 3, 3), np.float32), "bias": np.zeros(11, np.float32)})
    device.warm_up(device.kernel(layer, [TensorSpec((1, 5, 9, 9), np.float32)], []))
    built = dict(device.programs.stats)
    (y,) = device.run(layer, [device.upload(np.ones((1, 5, 9, 9), np.float32))])
    np.testing.assert_array_equal(device.download(y), np.full((1, 11, 9, 9), 45, np.float32))
    assert device.programs.stats["built"] == built.get("built", 0)
    assert device.programs.stats["loaded"] == built.get("loaded", 0)
