"""Device stretches recorded once and replayed (graphexec/replay.py, devices/opencl/replay.py).

A replayed run must give the bits of the node-by-node one (the same kernels with the same
arguments), set no kernel argument, wait only where a dependency crosses queues, keep
concurrent runs apart (each arena its own kernel objects), name a failing node, and leave
to the node-by-node path whatever it cannot record. Runs once per OpenCL device present
(see conftest.py).
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from graphexec.devices.opencl.ops.pooling import WindowPoolOp
from graphexec.devices.opencl.replay import KernelCall, Recorder

from graphexec import DeviceError, Engine
from graphexec.transfers import Download, Upload, _Transfer
from tests.devices.opencl.test_opencl_engine import assert_close, bundled


def replay_of(engine: Engine, *shapes):
    """The engine's replay for the plan of ``shapes`` (the exported ones by default)."""
    plan = engine.plan(*shapes)
    return plan, engine._arenas(plan).replay


def compute_nodes(plan) -> list[int]:
    return [n.index for n in plan.nodes if n.device != "cpu" and not isinstance(n.step.layer, _Transfer)]


def test_a_plan_all_on_the_device_is_one_stretch_with_the_node_by_node_bits(device):
    param, ins, want = bundled("inception_mini")
    with Engine.load(param, device=device, threads=1) as engine:
        plan, replay = replay_of(engine)
        uploads = [n.index for n in plan.nodes if isinstance(n.step.layer, Upload)]
        assert replay is not None and len(replay.prepared.stretches) == 1
        (stretch,) = replay.prepared.stretches
        assert list(stretch) == sorted(uploads + compute_nodes(plan))
        assert isinstance(plan.nodes[stretch[-1] + 1].step.layer, Download)
        got = [engine.forward(*ins) for _ in range(3)]
    with Engine.load(param, device=device, threads=1, reuse_memory=False) as apart:  # no arena: node by node
        reference = apart.forward(*ins)
    for g in got:
        assert np.array_equal(g, reference)
    assert_close(got[0], want[0], "inception_mini replayed vs PyTorch")


def test_a_replayed_run_sets_no_kernel_argument_and_enqueues_what_was_recorded(device, monkeypatch):
    import pyopencl as cl

    param, ins, _ = bundled("inception_mini")
    with Engine.load(param, device=device, threads=1) as engine:
        want = engine.forward(*ins)  # binds the arena: its kernel objects get their arguments
        _, replay = replay_of(engine)
        recorded = sum(len(s.commands) for s in replay.prepared._stretches)

        def refuse(*args, **kwargs):
            raise AssertionError("a replayed run set a kernel argument")

        monkeypatch.setattr(cl.Kernel, "set_arg", refuse)
        monkeypatch.setattr(cl.Kernel, "set_args", refuse)
        with device.collect_launches() as found:
            got = engine.forward(*ins)
    assert np.array_equal(got, want)
    assert len(found) == recorded
    kernels = [call for s in replay.prepared._stretches for c in s.commands if isinstance(call := c.call, KernelCall)]
    assert kernels and len(kernels) < recorded  # the upload is a recorded command too


def test_only_a_dependency_that_crosses_queues_waits(device):
    param, _, _ = bundled("inception_mini")
    with Engine.load(param, device=device, threads=1) as engine:
        plan, replay = replay_of(engine)
    (stretch,) = replay.prepared._stretches
    base = len(stretch.imports)
    first_command: dict[int, int] = {}
    for k, c in enumerate(stretch.commands):
        first_command.setdefault(c.node, k)
    producer = {name: n.index for n in plan.nodes for name in n.step.outputs}

    def makers(name: str) -> set[int]:
        """The nodes whose commands wrote ``name`` (through nodes that enqueue none: views,
        joins whose inputs were written in place)."""
        if name not in producer or producer[name] not in stretch.nodes:
            return set()
        node = producer[name]
        if node in first_command:
            return {node}
        return set().union(*(makers(n) for n in plan.nodes[node].step.inputs))

    crossing = 0
    for k, c in enumerate(stretch.commands):
        if k != first_command[c.node]:
            assert c.waits == (), "only a node's first command may wait"
            continue
        waited = {stretch.commands[w - base].queue for w in c.waits if w >= base}
        assert c.queue not in waited, "a command waits for its own queue"
        queues = {plan.nodes[m].queue for n in plan.nodes[c.node].step.inputs for m in makers(n)}
        assert waited == queues - {c.queue}, f"node {c.node} waits for queues {waited}, its inputs come from {queues}"
        crossing += bool(waited)
    assert {c.queue for c in stretch.commands} == {0, 1} and crossing > 0


def test_a_plan_mixing_the_cpu_in_replays_each_device_stretch(device):
    param, ins, want = bundled("inception_mini")
    with Engine.load(param, device=device, threads=1, cpu_types={"nn.MaxPool2d"}) as engine:
        plan, replay = replay_of(engine)
        assert len(replay.prepared.stretches) >= 2
        for stretch in replay.prepared.stretches:
            assert all(plan.nodes[i].device == "opencl" for i in stretch)
            assert list(stretch) == list(range(stretch[0], stretch[-1] + 1))
        got = engine.forward(*ins)
    with Engine.load(param, device=device, threads=1, cpu_types={"nn.MaxPool2d"}, reuse_memory=False) as apart:
        assert np.array_equal(got, apart.forward(*ins))
    assert_close(got, want[0], "inception_mini with pools on the CPU, replayed")


def test_concurrent_callers_replay_each_with_their_own_arena_and_kernel_objects(device):
    param, ins, _ = bundled("inception_mini")
    rng = np.random.default_rng(3)
    xs = [rng.standard_normal(ins[0].shape).astype(np.float32) for _ in range(6)]
    with Engine.load(param, device=device, threads=1) as engine:
        alone = [engine.forward(x) for x in xs]
        start = threading.Barrier(3)

        def call(k: int) -> list[np.ndarray]:
            start.wait()
            return [engine.forward(xs[(k + j) % len(xs)]) for j in range(8)]

        with ThreadPoolExecutor(3) as pool:
            results = list(pool.map(call, range(3)))
        plan, replay = replay_of(engine)
        pool_of_arenas = engine._arenas(plan)
        bound = [views.bound[replay] for _, views in pool_of_arenas._free if replay in views.bound]
    for k, runs in enumerate(results):
        for j, got in enumerate(runs):
            assert np.array_equal(got, alone[(k + j) % len(xs)]), f"caller {k}, run {j}"
    assert pool_of_arenas.created >= 2 and len(bound) >= 2
    kernels = [{id(entry[2]) for s in b.stretches for entry in s.program if entry[2] is not None} for b in bound]
    for a in range(len(kernels)):
        for b in range(a + 1, len(kernels)):
            assert not kernels[a] & kernels[b], "two arenas share a kernel object"


def test_a_failing_launch_in_a_replay_names_its_node_and_kernel(device, monkeypatch):
    import pyopencl as cl

    param, ins, _ = bundled("inception_mini")
    engine = Engine.load(param, device=device, threads=1)
    engine.forward(*ins)
    plan, replay = replay_of(engine)
    (stretch,) = replay.prepared._stretches
    kernels = [c for c in stretch.commands if isinstance(c.call, KernelCall)]
    target = kernels[len(kernels) // 2]  # a node in the middle of the stretch
    node = plan.nodes[target.node]
    count = [0]
    real = cl.enqueue_nd_range_kernel

    def enqueue(queue, kernel, *args, **kwargs):
        count[0] += 1
        if count[0] == len(kernels) // 2 + 1:
            raise cl.RuntimeError(cl._cl._ErrorRecord(
                msg="clEnqueueNDRangeKernel failed: OUT_OF_RESOURCES", code=-5, routine="clEnqueueNDRangeKernel"))
        return real(queue, kernel, *args, **kwargs)

    monkeypatch.setattr(cl, "enqueue_nd_range_kernel", enqueue)
    with pytest.raises(DeviceError) as raised:
        engine.forward(*ins)
    text = str(raised.value)
    assert f"node {node.name} ({node.type})" in text and f"kernel {target.call.name}" in text
    assert device.name in text and "OUT_OF_RESOURCES" in text
    monkeypatch.setattr(cl, "enqueue_nd_range_kernel", real)
    engine.forward(*ins)  # the engine goes on working once the launch goes through
    engine.close()


def test_a_node_that_cannot_be_recorded_runs_node_by_node_between_stretches(device, monkeypatch):
    param, ins, want = bundled("inception_mini")
    real = WindowPoolOp.run

    def not_while_recording(self, launch, layer, inputs):
        if isinstance(launch, Recorder):
            raise DeviceError("pretend this op cannot be recorded")
        return real(self, launch, layer, inputs)

    monkeypatch.setattr(WindowPoolOp, "run", not_while_recording)
    with Engine.load(param, device=device, threads=1) as engine:
        plan, replay = replay_of(engine)
        pools = {n.index for n in plan.nodes if n.type == "nn.MaxPool2d"}
        replayed = {i for s in replay.prepared.stretches for i in s}
        assert pools and not pools & replayed and len(replay.prepared.stretches) >= 2
        assert set(compute_nodes(plan)) - pools <= replayed
        got = engine.forward(*ins)
    assert_close(got, want[0], "inception_mini with its pools run node by node")


def test_fallback_moves_a_node_to_the_cpu_and_the_rest_still_replays(device, monkeypatch):
    def broken(self, launch, layer, inputs):
        raise DeviceError(f"pretend kernel failure in {layer.name}")

    monkeypatch.setattr(WindowPoolOp, "run", broken)
    param, ins, want = bundled("inception_mini")
    with Engine.load(param, device=device, threads=1, fallback=True) as engine:
        plan, replay = replay_of(engine)
        assert all(n.device == "cpu" for n in plan.nodes if n.type == "nn.MaxPool2d")
        assert len(replay.prepared.stretches) >= 2
        assert {i for s in replay.prepared.stretches for i in s} >= set(compute_nodes(plan))
        assert_close(engine.forward(*ins), want[0], "inception_mini, pools moved to the CPU, replayed")
