"""Device stretches recorded once and replayed (graphexec/replay.py, devices/opencl/replay.py).

A replayed run must give the bits of the node-by-node one (the same kernels with the same
arguments), set no kernel argument, wait only where a dependency crosses queues, keep
concurrent runs apart (each arena its own kernel objects), name a failing node, and leave
to the node-by-node path whatever it cannot record; it must hold through new input shapes,
timeouts and failures mid-run, engines sharing a device, plans completed at run time and
chains, and cost the host less per node than the node-by-node path. Runs once per OpenCL
device present (see conftest.py).
"""

from __future__ import annotations

import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pytest
from graphexec.devices.opencl.ops.pooling import WindowPoolOp
from graphexec.devices.opencl.replay import FLUSH_EVERY, BoundReplay, KernelCall, Recorder

from graphexec import DeviceError, Engine, RunTimeoutError, Trace
from graphexec.replay import Replay
from graphexec.transfers import Download, Upload, _Transfer
from tests.devices.opencl.conftest import break_op
from tests.devices.opencl.test_opencl_chains import CHAINS
from tests.devices.opencl.test_opencl_engine import as_tuple, assert_close, bundled
from tests.golden import OPS, assert_matches, load_io, more_io


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


def branchy_stretch(device):
    """The plan of the bundled Inception block on ``device``, and its one stretch."""
    param, _, _ = bundled("inception_mini")
    with Engine.load(param, device=device, threads=1) as engine:
        plan, replay = replay_of(engine)
    (stretch,) = replay.prepared._stretches
    return plan, stretch


def makers_in(plan, stretch):
    """``makers(name)``: the nodes of ``stretch`` whose commands wrote ``name`` (through nodes
    that enqueue none: views, joins whose inputs were written in place)."""
    commanded = {c.node for c in stretch.commands}
    producer = {name: n.index for n in plan.nodes for name in n.step.outputs}

    def makers(name: str) -> set[int]:
        if name not in producer or producer[name] not in stretch.nodes:
            return set()
        node = producer[name]
        if node in commanded:
            return {node}
        return set().union(*(makers(n) for n in plan.nodes[node].step.inputs))

    return makers


def test_only_a_dependency_that_crosses_queues_waits(device):
    plan, stretch = branchy_stretch(device)
    base = len(stretch.imports)
    first_command: dict[int, int] = {}
    for k, c in enumerate(stretch.commands):
        first_command.setdefault(c.node, k)
    makers = makers_in(plan, stretch)
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


def test_a_value_leaving_a_stretch_waits_for_every_command_that_wrote_it(device):
    """A join written in place by branches on two queues, read by a node on the CPU: its
    reader must wait for both branches' last commands, not the later one alone (waiting for
    one queue let the download read bytes the other had not written yet)."""
    param, ins, want = bundled("inception_mini")
    with Engine.load(param, device=device, threads=1, cpu_types={"nn.MaxPool2d"}) as engine:
        plan, replay = replay_of(engine)
        got = engine.forward(*ins)
    assert_close(got, want[0], "inception_mini with pools on the CPU, replayed")
    joined = 0
    for stretch in replay.prepared._stretches:
        base = len(stretch.imports)
        last = {c.node: base + k for k, c in enumerate(stretch.commands)}  # each node's last command
        makers = makers_in(plan, stretch)
        for export in stretch.exports:
            waited = {(stretch.commands[e - base].queue, e) for e in export.events if e >= base}
            for node in makers(export.name):
                queue = plan.nodes[node].queue
                assert any(q == queue and e >= last[node] for q, e in waited), (
                    f"{export.name} leaves the stretch before node {node} (queue {queue}) finishes writing it")
            joined += len({q for q, _ in waited}) > 1
    assert joined, "no value written on two queues leaves a stretch: the test checks nothing"


def test_queues_are_flushed_as_they_fill_and_before_another_queue_waits_on_them(device):
    _, stretch = branchy_stretch(device)
    base = len(stretch.imports)
    unflushed: dict[int, list[int]] = {}  # queue -> its events enqueued since its last flush
    seen: set[int] = set()
    for k, c in enumerate(stretch.commands):
        for q in c.flushes:
            assert unflushed.get(q), f"command {k} flushes queue {q}, which holds nothing new"
            unflushed[q] = []
            seen.add(q)
        pending = {e for events in unflushed.values() for e in events}
        assert not pending.intersection(c.waits), f"command {k} waits on an event its queue has not flushed"
        for q, events in unflushed.items():
            assert len(events) <= (FLUSH_EVERY if q in seen else 1), f"queue {q} held {len(events)} unflushed"
        unflushed.setdefault(c.queue, []).append(base + k)
    assert seen == {0, 1}


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


def test_a_failing_launch_in_a_replay_names_its_node_and_kernel(python_device, monkeypatch):
    import pyopencl as cl

    device = python_device
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

    want = engine.forward(*ins)
    monkeypatch.setattr(cl, "enqueue_nd_range_kernel", enqueue)
    with pytest.raises(DeviceError) as raised:
        engine.forward(*ins)
    text = str(raised.value)
    assert f"node {node.name} ({node.type})" in text and f"kernel {target.call.name}" in text
    assert device.name in text and "OUT_OF_RESOURCES" in text
    assert count[0] == len(kernels) // 2 + 1, "the stretch went on after its failing launch"
    monkeypatch.setattr(cl, "enqueue_nd_range_kernel", real)
    for _ in range(2):  # the engine goes on working, on the arena the failed run held, once launches go through
        assert np.array_equal(engine.forward(*ins), want)
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
    break_op(monkeypatch, WindowPoolOp)
    param, ins, want = bundled("inception_mini")
    with Engine.load(param, device=device, threads=1, fallback=True) as engine:
        plan, replay = replay_of(engine)
        assert all(n.device == "cpu" for n in plan.nodes if n.type == "nn.MaxPool2d")
        assert len(replay.prepared.stretches) >= 2
        assert {i for s in replay.prepared.stretches for i in s} >= set(compute_nodes(plan))
        assert_close(engine.forward(*ins), want[0], "inception_mini, pools moved to the CPU, replayed")


# -- what replay must keep: the same bits through shape changes, timeouts, other engines and rests --
def node_by_node(monkeypatch) -> None:
    """Runs after this go node by node over the same plan and arena (no stretch is usable)."""
    monkeypatch.setattr(Replay, "usable", lambda self, keep: False)


def test_a_new_input_shape_gets_its_own_replay_with_the_node_by_node_bits(device):
    param, ins, _ = bundled("inception_mini")
    rng = np.random.default_rng(5)
    shapes = [ins[0].shape, (1, 3, 40, 48), ins[0].shape, (1, 3, 72, 56)]
    xs = [rng.standard_normal(shape).astype(np.float32) for shape in shapes]
    with Engine.load(param, device=device, threads=1) as engine, \
            Engine.load(param, device=device, threads=1, reuse_memory=False) as apart, \
            Engine.load(param, threads=1) as cpu:
        got = [engine.forward(x) for x in xs]
        replays = {shape: replay_of(engine, shape)[1] for shape in shapes}
        for x, g in zip(xs, got):
            assert np.array_equal(g, apart.forward(x)), f"replayed vs node by node at {x.shape}"
            assert_close(g, cpu.forward(x), f"replayed vs the CPU at {x.shape}")
    assert all(r is not None for r in replays.values()) and len({id(r) for r in replays.values()}) == 3


def test_a_timeout_stops_before_a_stretch_and_leaves_the_arena_giving_the_same_bits(device):
    """The deadline is checked as each stretch starts (a stretch is enqueued whole); a run that
    times out with stretches in flight leaves the engine, and the arena it held, as before."""
    from tests.graphexec.test_run_options import Ticks

    param, ins, _ = bundled("inception_mini")
    rng = np.random.default_rng(11)
    xs = [rng.standard_normal(ins[0].shape).astype(np.float32) for _ in range(2)]
    clock = Ticks(1.0)  # one second a read: the run reads it once, then before each node or stretch
    with Engine.load(param, device=device, threads=1, cpu_types={"nn.MaxPool2d"}, clock=clock) as engine:
        want = [engine.forward(x) for x in xs]
        _, replay = replay_of(engine)
        started: list[int] = []
        real = BoundReplay.run

        def run(self, k, values):
            started.append(k)
            return real(self, k, values)

        BoundReplay.run = run
        try:
            with pytest.raises(RunTimeoutError):
                engine.forward(xs[0], timeout=0.5)  # past the deadline at the first stretch's start
            assert started == []
            timed_out = 0
            for timeout in np.arange(1.5, 3 * len(replay.prepared.stretches) + 4, 1.0):
                started.clear()
                try:
                    engine.forward(xs[0], timeout=float(timeout))
                except RunTimeoutError:
                    timed_out += bool(started)
                for x, w in zip(xs, want):
                    assert np.array_equal(engine.forward(x), w), f"after a run timed out at {timeout} s"
        finally:
            BoundReplay.run = real
    assert timed_out >= 2  # runs stopped with one stretch or more enqueued


def test_engines_on_one_device_and_on_a_device_of_their_own_replay_at_once(device, tmp_path):
    """Three engines share the device's two queues (all on the device, pools on the CPU, the
    concurrent scheduler) beside one on a second device object of one queue; each call gives
    what it gives alone."""
    from graphexec.devices.opencl import open_device

    param, ins, _ = bundled("inception_mini")
    other = open_device(f"opencl:{device.info.index}", queues=1, cache_dir=tmp_path)
    rng = np.random.default_rng(13)
    xs = [rng.standard_normal(ins[0].shape).astype(np.float32) for _ in range(5)]
    engines = [Engine.load(param, device=device, threads=1),
               Engine.load(param, device=device, threads=1, cpu_types={"nn.MaxPool2d"}),
               Engine.load(param, device=device, threads=2),
               Engine.load(param, device=other, threads=1)]
    try:
        alone = [[e.forward(x) for x in xs] for e in engines]
        start = threading.Barrier(len(engines) * 2)

        def call(k: int) -> list[np.ndarray]:
            start.wait()
            engine = engines[k % len(engines)]
            return [engine.forward(xs[(k + j) % len(xs)]) for j in range(6)]

        with ThreadPoolExecutor(len(engines) * 2) as pool:
            results = list(pool.map(call, range(len(engines) * 2)))
        assert replay_of(engines[0])[1] is not None and replay_of(engines[3])[1] is not None
    finally:
        for e in engines:
            e.close()
        other.release()
    for k, runs in enumerate(results):
        for j, got in enumerate(runs):
            assert np.array_equal(got, alone[k % len(engines)][(k + j) % len(xs)]), f"caller {k}, run {j}"


def test_the_rests_planned_at_run_time_replay_their_stretches(device):
    """A plan completed at run time replays its device stretches too (those with tensors in
    the device arena: empty rows have none and run node by node): the same bits as the
    traced (node by node) run and PyTorch's answer, for every saved input set."""
    folder = OPS / "dynamic" / "after_a_threshold"
    replayed: list[Any] = []
    rests_replayed = 0
    real = Replay.bind

    def bind(self, views):
        replayed.append(self)
        return real(self, views)

    with Engine.load(folder / "model.pnnx.param", device=device, threads=1) as engine:
        Replay.bind = bind
        try:
            for ins, want in [load_io(folder), *more_io(folder)]:
                trace = Trace()
                traced = as_tuple(engine.forward(*ins, trace=trace))  # a traced run goes node by node
                replayed.clear()
                got = as_tuple(engine.forward(*ins))
                for plan in trace.stages[1:]:
                    pool = engine._arenas(plan)
                    if "opencl" in pool.memory.homes.values():
                        assert pool.replay is not None and pool.replay in replayed, \
                            f"t={ins[3]}: {plan.placement}"
                        rests_replayed += 1
                for k, (g, t, w) in enumerate(zip(got, traced, want, strict=True)):
                    assert g.tobytes() == t.tobytes(), f"t={ins[3]} out{k}: replayed vs node by node"
                    assert_matches(g, w, what=f"t={ins[3]} out{k}")
        finally:
            Replay.bind = real
    assert rests_replayed >= 4


def test_chains_replayed_give_the_bits_of_chains_run_node_by_node(device, monkeypatch):
    ins, want = load_io(CHAINS)
    with Engine.load(CHAINS / "model.pnnx.param", device=device, threads=1) as engine:
        plan, replay = replay_of(engine)
        chains = {n.index for n in plan.nodes if n.type.count("+") >= 2}
        assert chains and chains <= {i for s in replay.prepared.stretches for i in s}
        got = [as_tuple(engine.forward(*ins)) for _ in range(2)]
        node_by_node(monkeypatch)
        apart = as_tuple(engine.forward(*ins))
    for run in got:
        for k, (g, a, w) in enumerate(zip(run, apart, want, strict=True)):
            assert np.array_equal(g, a), f"out{k}"
            assert_matches(g, w, what=f"conv2d_elementwise_chains out{k}, replayed")


def test_a_replayed_run_costs_the_host_a_fraction_of_a_node_by_node_one(python_device, monkeypatch):
    """The same plan and arena, replayed and node by node: the same kernels enqueued, and
    per device node no kernel argument set and under a fifth of the Python and C calls."""
    import pyopencl as cl

    device = python_device
    param, ins, _ = bundled("inception_mini")
    counts = {"enqueue": 0, "set_args": 0}
    enqueue, set_args = cl.enqueue_nd_range_kernel, cl.Kernel.set_args

    def counted_enqueue(*args, **kwargs):
        counts["enqueue"] += 1
        return enqueue(*args, **kwargs)

    def counted_set_args(self, *args):
        counts["set_args"] += 1
        return set_args(self, *args)

    def measured(engine: Engine) -> tuple[int, int, int, np.ndarray]:
        engine.forward(*ins)  # binds what a first run binds
        for key in counts:
            counts[key] = 0
        calls = [0]

        def profile(frame, event, arg):
            if event in ("call", "c_call"):
                calls[0] += 1

        sys.setprofile(profile)
        try:
            out = engine.forward(*ins)
        finally:
            sys.setprofile(None)
        return calls[0], counts["enqueue"], counts["set_args"], out

    monkeypatch.setattr(cl, "enqueue_nd_range_kernel", counted_enqueue)
    monkeypatch.setattr(cl.Kernel, "set_args", counted_set_args)
    with Engine.load(param, device=device, threads=1) as engine:
        nodes = len([n for n in engine.plan().nodes if n.device != "cpu"])
        replayed = measured(engine)
        node_by_node(monkeypatch)
        apart = measured(engine)
    assert np.array_equal(replayed[3], apart[3])
    assert replayed[1] == apart[1] > 0, "the same kernels are enqueued either way"
    assert replayed[2] == 0 and apart[2] >= apart[1]
    assert replayed[0] / nodes < apart[0] / nodes / 5, (
        f"calls a device node: replayed {replayed[0] / nodes:.1f}, node by node {apart[0] / nodes:.1f}")


# -- the compiled loop (replay_compiled.py): pyopencl's commands, without Python a command --
def compiled_stretches(engine: Engine) -> list[Any]:
    """The compiled tables of the engine's free arenas, for the plan of the exported shapes."""
    plan, replay = replay_of(engine)
    return [s.compiled for _, views in engine._arenas(plan)._free if replay in views.bound
            for s in views.bound[replay].stretches]


@pytest.mark.parametrize("cpu_types", [frozenset(), frozenset({"nn.MaxPool2d"})],
                         ids=["all-on-device", "pools-on-cpu"])
def test_the_compiled_loop_gives_the_bits_pyopencl_gives(python_device, compiled_device, cpu_types):
    param, ins, want = bundled("inception_mini")
    rng = np.random.default_rng(17)
    xs = [rng.standard_normal(ins[0].shape).astype(np.float32) for _ in range(3)]
    with Engine.load(param, device=python_device, threads=1, cpu_types=cpu_types) as slow, \
            Engine.load(param, device=compiled_device, threads=1, cpu_types=cpu_types) as fast:
        for x in xs:
            assert np.array_equal(fast.forward(x), slow.forward(x))
        assert all(s is not None for s in compiled_stretches(fast))
        assert all(s.compiled is None for _, views in slow._arenas(slow.plan())._free
                   for b in views.bound.values() for s in b.stretches)
        assert_close(fast.forward(*ins), want[0], "inception_mini, compiled enqueue")
    ins, _ = load_io(CHAINS)
    with Engine.load(CHAINS / "model.pnnx.param", device=python_device, threads=1) as slow, \
            Engine.load(CHAINS / "model.pnnx.param", device=compiled_device, threads=1) as fast:
        for g, s in zip(as_tuple(fast.forward(*ins)), as_tuple(slow.forward(*ins)), strict=True):
            assert np.array_equal(g, s)


def test_the_compiled_loop_makes_an_event_only_where_another_queue_waits_or_a_value_leaves(compiled_device):
    from graphexec.devices.cpu.jit._loops_enqueue import EVENT, KEPT, NO_EVENT, RELEASED

    param, ins, _ = bundled("inception_mini")
    with Engine.load(param, device=compiled_device, threads=1) as engine:
        engine.forward(*ins)
        (compiled,) = compiled_stretches(engine)
    bound = compiled.bound
    base = len(bound.imports)
    waited = {w - base for *_, waits, _ in bound.program for w in waits if w >= base}
    exported = {e - base for _, _, made_by, _ in bound.exports for e in made_by if e >= base}
    marks = compiled._table[:, EVENT]
    assert {int(i) for i in np.flatnonzero(marks == KEPT)} == exported
    assert {int(i) for i in np.flatnonzero(marks == RELEASED)} == waited - exported
    assert waited and exported and (marks == NO_EVENT).sum() > len(marks) / 2


def test_a_failing_command_in_the_compiled_loop_names_its_node_and_kernel(compiled_device):
    from graphexec.devices.cpu.jit._loops_enqueue import B

    param, ins, _ = bundled("inception_mini")
    with Engine.load(param, device=compiled_device, threads=1) as engine:
        want = engine.forward(*ins)
        plan, _ = replay_of(engine)
        (compiled,) = compiled_stretches(engine)
        kernels = [k for k, entry in enumerate(compiled.bound.program) if entry[2] is not None]
        target = kernels[len(kernels) // 2]
        command = compiled.bound.stretch.commands[target]
        node = plan.nodes[command.node]
        dims = compiled._table[target, B]
        compiled._table[target, B] = 4  # a kernel's dimensions: no OpenCL device has four
        with pytest.raises(DeviceError) as raised:
            engine.forward(*ins)
        compiled._table[target, B] = dims
        base = len(compiled.bound.imports)
        assert not compiled._slots[base:base + target].any(), "the failed run left its events unreleased"
        for _ in range(2):  # the engine goes on working, on the arena the failed run held
            assert np.array_equal(engine.forward(*ins), want)
    text = str(raised.value)
    assert f"node {node.name} ({node.type})" in text and f"kernel {command.call.name}" in text
    assert compiled_device.name in text and "CL_INVALID_WORK_DIMENSION" in text


def test_launches_collected_from_the_compiled_loop_carry_their_profiled_times(device, tmp_path):
    from graphexec.devices.opencl import open_device
    from graphexec.devices.opencl.replay_compiled import available

    if not available():
        pytest.skip("the compiled enqueue loop needs numba (the jit extra)")
    profiled = open_device(f"opencl:{device.info.index}", cache_dir=tmp_path, profiling=True,
                           enqueue="compiled")
    param, ins, _ = bundled("inception_mini")
    with Engine.load(param, device=profiled, threads=1) as engine:
        want = engine.forward(*ins)
        _, replay = replay_of(engine)
        with profiled.collect_launches() as found:
            got = engine.forward(*ins)
        profiled.finish()
        assert np.array_equal(got, want)
        assert len(found) == sum(len(s.commands) for s in replay.prepared._stretches)
        assert all(e.profile.end >= e.profile.start > 0 for _, _, e in found)
        assert np.array_equal(engine.forward(*ins), want)  # and the runs after it, which keep fewer events


def test_the_compiled_loop_makes_a_handful_of_python_calls_where_pyopencl_makes_one_a_command(
        python_device, compiled_device):
    param, ins, _ = bundled("inception_mini")

    def replay_calls(device) -> tuple[int, int]:
        """Python and C calls made from the replay's own modules in one warm run, and the
        stretches' commands."""
        with Engine.load(param, device=device, threads=1) as engine:
            for _ in range(2):  # bound; and past the first run's one-off checks
                engine.forward(*ins)
            _, replay = replay_of(engine)
            calls = [0]

            def profile(frame, event, arg):
                if event in ("call", "c_call") and frame.f_code.co_filename.endswith(
                        ("opencl/replay.py", "opencl/replay_compiled.py")):
                    calls[0] += 1

            sys.setprofile(profile)
            try:
                engine.forward(*ins)
            finally:
                sys.setprofile(None)
        return calls[0], sum(len(s.commands) for s in replay.prepared._stretches)

    slow, commands = replay_calls(python_device)
    fast, _ = replay_calls(compiled_device)
    assert slow >= commands > 2 * fast, f"{commands} commands: {slow} calls through pyopencl, {fast} compiled"


def test_the_enqueue_mode_is_checked_and_auto_needs_numba_for_the_compiled_loop(device, monkeypatch):
    from graphexec.devices.opencl import open_device, replay_compiled

    with pytest.raises(DeviceError, match="enqueue='fast'"):
        open_device(f"opencl:{device.info.index}", enqueue="fast")
    monkeypatch.setattr(replay_compiled, "available", lambda: False)
    assert replay_compiled.enqueue_mode("auto") == "python"
    with pytest.raises(DeviceError, match="needs numba"):
        replay_compiled.enqueue_mode("compiled")
