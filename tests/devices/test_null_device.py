"""The null device computes nothing and records what it is asked: the placement, the
transfers and the scheduler, tested without a real device."""

from __future__ import annotations

import numpy as np

from graphexec import Engine
from graphexec.devices.null import NullDevice
from graphexec.transfers import Download, Upload
from tests.paths import REPO

MODEL = REPO / "examples" / "models" / "inception_mini.pnnx.param"


def test_nodes_it_takes_run_there_and_those_it_refuses_stay_on_the_cpu():
    device = NullDevice(refuse={"nn.MaxPool2d"})
    engine = Engine.load(MODEL, device=device, threads=1)
    placement = engine.placement
    pools = [row for row in placement.rows if row.type == "nn.MaxPool2d"]
    assert pools and all(row.device == "cpu" and "refuse" in row.reason for row in pools)
    assert all(row.device == "null" for row in placement.rows if row.type.startswith("nn.Conv2d"))
    plan = engine.plan()
    transfers = [type(node.step.layer) for node in plan.nodes if isinstance(node.step.layer, (Upload, Download))]
    assert transfers.count(Upload) >= 1 and transfers.count(Download) >= 1
    assert ("warm_up", plan.nodes[1].name) in device.calls or any(c[0] == "warm_up" for c in device.calls)
    device.calls.clear()
    x = np.ones(engine.input_shapes["in0"], np.float32)
    out = engine.forward(x)
    assert out.shape == engine.output_shapes["out0"]
    ran = [name for what, name in device.calls if what == "run"]
    on_device = [node.name for node in plan.nodes if node.device == "null" and not node.type.startswith("graphexec.")]
    assert sorted(ran) == sorted(on_device), "every device node ran once, and nothing else"
    assert [what for what, _ in device.calls].count("upload") == transfers.count(Upload)


def test_concurrent_runs_on_it_run_every_node_once_each():
    device = NullDevice()
    engine = Engine.load(MODEL, device=device, threads=1)
    x = np.ones(engine.input_shapes["in0"], np.float32)
    engine.forward(x)
    device.calls.clear()
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda _: engine.forward(x), range(8)))
    runs = [name for what, name in device.calls if what == "run"]
    per_node = {name: runs.count(name) for name in set(runs)}
    assert set(per_node.values()) == {8}


def test_a_run_whose_nodes_all_run_on_the_device_leaves_blas_alone(monkeypatch):
    import graphexec.engine as engine_module

    turns = []
    real = engine_module.blas_run

    def counted(*args, **kwargs):
        turns.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(engine_module, "blas_run", counted)
    x = np.ones((1, 3, 32, 32), np.float32)
    whole = Engine.load(MODEL, device=NullDevice(), threads=1)
    assert not whole.plan().host_work, "uploads, downloads and device nodes compute nothing on the host"
    whole.forward(x)
    assert turns == []
    mixed = Engine.load(MODEL, device=NullDevice(refuse={"nn.MaxPool2d"}), threads=1)
    assert mixed.plan().host_work
    mixed.forward(x)
    assert len(turns) == 1, "a pool on the cpu may call BLAS: the run takes its turn"
