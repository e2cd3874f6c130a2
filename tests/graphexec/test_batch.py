"""batch.run over a dataset, in this process and on local Dask and Ray clusters, against a
plain loop over Engine.forward; faults (a worker killed mid-run, a bad file), out=, the
Predictor in Dask's and Ray Data's own pipelines, and the command line.

The Dask and Ray tests share one local cluster each (module fixtures: Ray takes seconds to
start) and skip where the extra is not installed."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
from loguru import logger

from graphexec import Engine, batch
from graphexec.batch.progress import progress_bar
from graphexec.batch.worker import cpu_allotment, worker_options
from graphexec.cli import main
from graphexec.errors import InputError, MissingExtraError, RowError, WorkerError
from tests.paths import REPO

MODELS = REPO / "examples" / "models"
INCEPTION = MODELS / "inception_mini.pnnx.param"  # takes any batch
TWO_HEADS = MODELS / "two_heads.pnnx.param"  # two inputs, two outputs
FIXED = MODELS / "wide.pnnx.param"  # a reshape to (1, ...): batch 1 only
ROWS, BATCH = 44, 8  # six chunks, the last one short
#: What a Dask nanny sets in the process that starts it, before spawning a worker.
DASK_ENVIRON = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MALLOC_TRIM_THRESHOLD_")


def loop_over_forward(model: Path, inputs: list[np.ndarray], batch_size: int) -> tuple[np.ndarray, ...]:
    """The reference: Engine.forward over the rows ``batch_size`` at a time, concatenated."""
    engine = Engine.load(model, threads=1, intra_op_threads=1)
    parts = []
    for start in range(0, len(inputs[0]), batch_size):
        out = engine.forward(*[x[start:start + batch_size] for x in inputs])
        parts.append(out if isinstance(out, tuple) else (out,))
    return tuple(np.concatenate(p) for p in zip(*parts))


@pytest.fixture(scope="module")
def xs() -> np.ndarray:
    return np.random.default_rng(7).standard_normal((ROWS, 3, 64, 64)).astype(np.float32)


@pytest.fixture(scope="module")
def expected(xs) -> np.ndarray:
    (ys,) = loop_over_forward(INCEPTION, [xs], BATCH)
    return ys


@pytest.fixture(scope="module")
def folder(tmp_path_factory, xs) -> Path:
    """One .npy per sample; every other one with a leading batch dimension of 1."""
    path = tmp_path_factory.mktemp("samples")
    for i, x in enumerate(xs):
        np.save(path / f"{i:03d}.npy", x[None] if i % 2 else x)
    return path


class Killer:
    """A reader that kills its own worker process (SIGKILL, no goodbye) the first ``times``
    times it reads ``victim``, counting them in the file ``marker``; then it reads normally."""

    def __init__(self, victim: str, marker: str, times: int = 1):
        self.victim, self.marker, self.times = victim, marker, times

    def __call__(self, path: str) -> np.ndarray:
        if path == self.victim:
            deaths = Path(self.marker).read_text() if os.path.exists(self.marker) else ""
            if len(deaths) < self.times:
                Path(self.marker).write_text(deaths + "x")
                os.kill(os.getpid(), signal.SIGKILL)
        return batch.read_sample(path)[0]


def bad_folder(tmp_path: Path, xs: np.ndarray, bad: int) -> Path:
    path = tmp_path / "with_a_bad_file"
    path.mkdir()
    for i, x in enumerate(xs[:20]):
        np.save(path / f"{i:03d}.npy", x)
    (path / f"{bad:03d}.npy").write_bytes(b"not an npy file at all")
    return path


def check_skipped(result, expected: np.ndarray, bad: int, folder: Path) -> None:
    assert isinstance(result, batch.BatchResult)
    assert [(e.index, e.source) for e in result.failed] == [(bad, str(folder / f"{bad:03d}.npy"))]
    assert "cannot read it as a sample" in result.failed[0].reason
    assert np.isnan(result.outputs[bad]).all() and not result.ok[bad]
    good = np.arange(20) != bad
    assert result.ok[good].all()
    np.testing.assert_allclose(result.outputs[good], expected[:20][good], rtol=1e-5, atol=1e-6)


# ----------------------------------------------------------------------------------------
# in this process
# ----------------------------------------------------------------------------------------
def test_an_array_of_samples_gives_what_a_loop_over_forward_gives(xs, expected):
    ys = batch.run(INCEPTION, xs, batch_size=BATCH, options={"threads": 1, "intra_op_threads": 1})
    assert ys.shape == (ROWS, 10)
    np.testing.assert_array_equal(ys, expected)  # same batches, same engine settings: same bits
    one_by_one = np.concatenate([loop_over_forward(INCEPTION, [x[None]], 1)[0] for x in xs[:6]])
    np.testing.assert_allclose(ys[:6], one_by_one, rtol=1e-5, atol=1e-6)


def test_a_folder_of_files_keeps_the_order_of_their_names(folder, xs, expected):
    shuffled = sorted(folder.iterdir(), key=lambda p: hash(p.name) % 97)
    ys = batch.run(INCEPTION, shuffled, batch_size=BATCH, workers=2)  # rows in the order given
    order = [int(p.stem) for p in shuffled]
    np.testing.assert_allclose(ys, expected[order], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(batch.run(INCEPTION, folder, batch_size=BATCH), expected, rtol=1e-5, atol=1e-6)


def test_several_inputs_and_outputs(tmp_path):
    rng = np.random.default_rng(1)
    images, vectors = rng.standard_normal((10, 3, 32, 32), np.float32), rng.standard_normal((10, 8), np.float32)
    want = loop_over_forward(TWO_HEADS, [images, vectors], 4)
    got = batch.run(TWO_HEADS, (images, vectors), batch_size=4, options={"threads": 1})
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)
    for i in range(10):  # .npz files hold in0, in1
        np.savez(tmp_path / f"{i}.npz", in0=images[i], in1=vectors[i][None])
    got = batch.run(TWO_HEADS, tmp_path, batch_size=4, options={"threads": 1}, out=tmp_path / "ys.npy")
    for name, a, b in zip(("out0", "out1"), got, want):
        np.testing.assert_array_equal(np.load(tmp_path / f"ys.{name}.npy"), b)
        np.testing.assert_array_equal(a, b)


def test_a_list_of_samples_of_two_sizes(xs, expected):
    """A list holds samples (not one array per input, as a tuple does); rows of another size
    run in a batch of their own, and the model's outputs keep one shape."""
    small = [x[:, :32, :32] for x in xs[:3]]
    ys = batch.run(INCEPTION, [xs[0], small[0], xs[1], small[1], small[2]], batch_size=BATCH)
    np.testing.assert_allclose(ys[[0, 2]], expected[:2], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ys[[1, 3, 4]], batch.run(INCEPTION, np.stack(small)), rtol=1e-5, atol=1e-6)


def test_a_model_with_a_fixed_batch_runs_rows_one_at_a_time_and_says_so(xs):
    small = np.random.default_rng(2).standard_normal((5, 3, 32, 32)).astype(np.float32)
    lines: list[str] = []
    logger.enable("graphexec")
    sink = logger.add(lines.append, level="INFO", format="{message}")
    try:
        ys = batch.run(FIXED, small, batch_size=4, options={"threads": 1})
    finally:
        logger.remove(sink)
        logger.disable("graphexec")
    one_by_one = np.concatenate([loop_over_forward(FIXED, [x[None]], 1)[0] for x in small])
    np.testing.assert_array_equal(ys, one_by_one)
    assert sum("rows run one at a time" in line for line in lines) == 1, lines


def test_a_bad_file_is_named_or_skipped(tmp_path, xs, expected):
    folder = bad_folder(tmp_path, xs, bad=13)
    with pytest.raises(RowError, match=r"row 13 \(.*013\.npy\): InputError: .*cannot read it as a sample"):
        batch.run(INCEPTION, folder, batch_size=BATCH)
    check_skipped(batch.run(INCEPTION, folder, batch_size=BATCH, on_error="skip"), expected, 13, folder)


def test_a_sample_of_the_wrong_shape_is_named(tmp_path, xs):
    for i, x in enumerate(xs[:3]):
        np.save(tmp_path / f"{i}.npy", x if i != 1 else x[None, None])
    with pytest.raises(RowError, match=r"row 1 \(.*1\.npy\): InputShapeError: .*expected a sample of rank 3"):
        batch.run(INCEPTION, tmp_path)


def test_out_writes_the_outputs_as_they_arrive(tmp_path, xs, expected):
    seen = []

    def progress(done, total):  # after each chunk, the rows so far are on disk already
        seen.append((done, total, np.load(tmp_path / "ys.npy", mmap_mode="r")[:done].copy()))

    ys = batch.run(INCEPTION, xs, batch_size=BATCH, out=tmp_path / "ys.npy", progress=progress,
                   workers=1, options={"threads": 1, "intra_op_threads": 1})  # one chunk at a time: in order
    assert isinstance(ys, np.memmap)
    np.testing.assert_array_equal(np.load(tmp_path / "ys.npy"), expected)
    assert [s[:2] for s in seen] == [(min(n, ROWS), ROWS) for n in range(BATCH, ROWS + BATCH, BATCH)]
    for done, _, written in seen:
        np.testing.assert_array_equal(written, expected[:done])


def test_an_npy_of_samples_is_read_a_chunk_at_a_time(tmp_path, xs, expected):
    np.save(tmp_path / "xs.npy", xs)
    ys = batch.run(INCEPTION, tmp_path / "xs.npy", batch_size=BATCH, options={"threads": 1, "intra_op_threads": 1})
    np.testing.assert_array_equal(ys, expected)


def test_bad_arguments_are_refused_before_anything_runs(xs):
    with pytest.raises(InputError, match="engine must be one of local, dask, ray"):
        batch.run(INCEPTION, xs, engine="spark")
    with pytest.raises(InputError, match="batch_size must be a positive integer"):
        batch.run(INCEPTION, xs, batch_size=0)
    with pytest.raises(InputError, match="different numbers of samples"):
        batch.run(TWO_HEADS, (xs, xs[:3]))
    with pytest.raises(InputError, match="holds no .npy or .npz files"):
        batch.run(INCEPTION, REPO / "tests" / "fixtures")


def test_the_progress_line_without_tqdm(monkeypatch):
    monkeypatch.setitem(sys.modules, "tqdm", None)
    stream = io.StringIO()
    bar = progress_bar(True, 10, stream=stream)
    bar.update(4)
    bar.update(6)
    bar.close()
    assert "\rbatch: 4/10 rows" in stream.getvalue() and "\rbatch: 10/10 rows" in stream.getvalue()
    assert progress_bar(None, 10, stream=io.StringIO()).__class__.__name__ == "Silent"  # not a terminal


def test_workers_keep_to_the_cpus_they_were_given(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert worker_options(None, 2) == {"threads": 1, "intra_op_threads": 1}
    monkeypatch.delenv("OMP_NUM_THREADS")
    assert worker_options({"device": "cpu"}, 1) == {"device": "cpu", "threads": 1, "intra_op_threads": 1}
    assert cpu_allotment(64) == len(os.sched_getaffinity(0))
    assert worker_options({"threads": 2}, 1) == {"threads": 2}  # the user's choice holds
    assert worker_options(None, None) == {}  # no framework: the engine chooses


def test_the_extras_are_imported_only_when_asked_for(monkeypatch, xs):
    probe = ("import sys, graphexec, graphexec.batch; from graphexec.cli import main; "
             "print(sorted(m for m in ('dask', 'distributed', 'ray', 'tqdm') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
    for module, extra in (("distributed", "dask"), ("ray", "ray")):
        monkeypatch.setitem(sys.modules, module, None)  # as if not installed
        monkeypatch.delitem(sys.modules, f"graphexec.batch.on_{extra}", raising=False)
        with pytest.raises(MissingExtraError, match=rf'pip install "graphexec\[{extra}\]"'):
            batch.run(INCEPTION, xs, engine=extra)


def test_the_command_line(tmp_path, folder, expected, capsys):
    out = tmp_path / "ys.npy"
    assert main(["batch", str(INCEPTION), str(folder), "--batch-size", str(BATCH), "--out", str(out)]) == 0
    np.testing.assert_allclose(np.load(out), expected, rtol=1e-5, atol=1e-6)
    assert f"saved {out}: ({ROWS}, 10) float32" in capsys.readouterr().out
    assert main(["batch", str(INCEPTION), str(tmp_path / "nothing_here.npy")]) == 1
    assert "cannot read it as an array of samples" in capsys.readouterr().err


# ----------------------------------------------------------------------------------------
# Dask: one local cluster of two worker processes for the module
# ----------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def dask_cluster():
    distributed = pytest.importorskip("distributed")
    import logging

    import dask

    # A nanny sets OMP_NUM_THREADS=1 and the like in the process that starts it; left there,
    # every later test's engine would count one core (graphexec.threads.cpu_count).
    before = {key: os.environ.get(key) for key in DASK_ENVIRON}
    with dask.config.set({"distributed.scheduler.allowed-failures": 1}):  # a task survives one death
        cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                           dashboard_address=":0", silence_logs=logging.ERROR)
    try:
        with cluster:
            yield cluster
    finally:
        for key, value in before.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def test_dask_on_an_existing_cluster(dask_cluster, folder, expected):
    ys = batch.run(INCEPTION, folder, engine="dask", address=dask_cluster.scheduler_address, batch_size=BATCH)
    np.testing.assert_allclose(ys, expected, rtol=1e-5, atol=1e-6)


def test_dask_survives_a_worker_killed_mid_run(dask_cluster, folder, expected, tmp_path):
    marker = tmp_path / "killed"
    victim = str(folder / f"{ROWS // 2:03d}.npy")
    ys = batch.run(INCEPTION, folder, engine="dask", address=dask_cluster.scheduler_address, batch_size=BATCH,
                   reader=Killer(victim, str(marker)))
    assert marker.read_text() == "x"  # a worker did die, once
    np.testing.assert_allclose(ys, expected, rtol=1e-5, atol=1e-6)  # every row, once, in order


def test_dask_gives_up_on_a_row_that_kills_every_worker_it_meets(dask_cluster, folder, tmp_path):
    victim = str(folder / "003.npy")
    with pytest.raises(WorkerError, match="died too often"):
        batch.run(INCEPTION, folder, engine="dask", address=dask_cluster.scheduler_address, batch_size=BATCH,
                  reader=Killer(victim, str(tmp_path / "deaths"), times=100))
    assert (tmp_path / "deaths").read_text() == "xx"  # allowed-failures=1: the second death stops it


def test_dask_names_a_bad_file_or_skips_it(dask_cluster, tmp_path, xs, expected):
    folder = bad_folder(tmp_path, xs, bad=5)
    with pytest.raises(RowError, match=r"row 5 \(.*005\.npy\)"):
        batch.run(INCEPTION, folder, engine="dask", address=dask_cluster.scheduler_address, batch_size=BATCH)
    result = batch.run(INCEPTION, folder, engine="dask", address=dask_cluster.scheduler_address, batch_size=BATCH,
                       on_error="skip")
    check_skipped(result, expected, 5, folder)


def test_dask_starts_and_stops_its_own_cluster(tmp_path, xs, expected, monkeypatch):
    pytest.importorskip("distributed")
    for key in DASK_ENVIRON:
        monkeypatch.delenv(key, raising=False)
    ys = batch.run(INCEPTION, xs, engine="dask", workers=1, batch_size=BATCH, out=tmp_path / "ys.npy")
    np.testing.assert_array_equal(np.load(tmp_path / "ys.npy"), expected)  # a one-CPU worker: 1 x 1 threads
    np.testing.assert_array_equal(ys, expected)
    assert not any(key in os.environ for key in DASK_ENVIRON)  # this process's environment as it was


def test_predictor_in_dask_map_partitions_and_map_blocks(dask_cluster, xs, expected):
    import dask.array as da
    import dask.bag as db
    from distributed import Client

    with Client(dask_cluster) as client:
        bag = db.from_sequence(list(xs), npartitions=3)
        rows = bag.map_partitions(batch.Predictor(INCEPTION)).compute(scheduler=client)
        np.testing.assert_allclose(np.stack(rows), expected, rtol=1e-5, atol=1e-6)
        blocks = da.from_array(xs, chunks=(BATCH, 3, 64, 64))
        ys = blocks.map_blocks(batch.Predictor(INCEPTION), dtype=np.float32, chunks=(BATCH, 10),
                               drop_axis=(2, 3)).compute(scheduler=client)
        np.testing.assert_array_equal(ys, expected)


def engine_threads(model: str) -> tuple[int, int]:
    """The threads of the engine a Predictor loads where this runs (a task on a worker)."""
    engine = batch.Predictor(model).runner().engine
    return engine.threads, engine.intra_op_threads


def test_a_dask_worker_runs_its_engine_on_one_thread(dask_cluster):
    from distributed import Client

    with Client(dask_cluster) as client:
        assert client.submit(engine_threads, str(INCEPTION), pure=False).result() == (1, 1)


# ----------------------------------------------------------------------------------------
# Ray: one local instance (two CPUs) for the module
# ----------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def ray_instance():
    ray = pytest.importorskip("ray")
    if ray.is_initialized():
        ray.shutdown()
    # Ray's workers inherit this process's environment: none of a Dask nanny's settings
    # (the Dask fixture gives them back, but a cluster of the user's kind may not).
    left = {key: os.environ.pop(key) for key in DASK_ENVIRON if key in os.environ}
    ray.init(num_cpus=2, include_dashboard=False, logging_level="error", log_to_driver=False)
    os.environ.update(left)
    yield ray
    ray.shutdown()


def test_ray_gives_what_a_loop_over_forward_gives(ray_instance, xs, expected):
    ys = batch.run(INCEPTION, xs, engine="ray", batch_size=BATCH)
    np.testing.assert_array_equal(ys, expected)  # one CPU per actor: 1 x 1 threads, the reference's bits
    assert ray_instance.is_initialized()  # an instance the caller started stays up


def test_ray_runs_on_the_actors_the_cluster_has_room_for(ray_instance, xs, expected):
    done: list[np.ndarray] = []
    job = threading.Thread(daemon=True, target=lambda: done.append(  # two CPUs: the third actor never starts
        batch.run(INCEPTION, xs, engine="ray", workers=3, batch_size=BATCH)))
    job.start()
    job.join(timeout=90)
    assert done, "the job waited for an actor that the cluster had no CPU for"
    np.testing.assert_array_equal(done[0], expected)


def test_ray_survives_a_worker_killed_mid_run(ray_instance, folder, expected, tmp_path):
    marker = tmp_path / "killed"
    victim = str(folder / f"{ROWS // 2:03d}.npy")
    ys = batch.run(INCEPTION, folder, engine="ray", batch_size=BATCH, reader=Killer(victim, str(marker)))
    assert marker.read_text() == "x"
    np.testing.assert_allclose(ys, expected, rtol=1e-5, atol=1e-6)


def test_ray_names_a_bad_file_or_skips_it(ray_instance, tmp_path, xs, expected):
    folder = bad_folder(tmp_path, xs, bad=17)
    with pytest.raises(RowError, match=r"row 17 \(.*017\.npy\)"):
        batch.run(INCEPTION, folder, engine="ray", batch_size=BATCH)
    check_skipped(batch.run(INCEPTION, folder, engine="ray", batch_size=BATCH, on_error="skip"), expected, 17, folder)


def test_a_ray_task_runs_its_engine_on_the_cpus_it_was_given(ray_instance):
    probe = ray_instance.remote(engine_threads)
    assert ray_instance.get(probe.options(num_cpus=1).remote(str(INCEPTION))) == (1, 1)
    assert ray_instance.get(probe.options(num_cpus=2).remote(str(INCEPTION))) == (2, 1)


def test_predictor_in_ray_data_map_batches(ray_instance, xs, expected):
    data = pytest.importorskip("ray.data")
    ds = data.from_items([{"id": i, "image": x} for i, x in enumerate(xs)])
    out = ds.map_batches(batch.Predictor, fn_constructor_args=(str(INCEPTION),),
                         fn_constructor_kwargs={"input_columns": ["image"], "output_columns": ["logits"]},
                         batch_size=BATCH, concurrency=1, num_cpus=1, batch_format="numpy")
    rows = sorted(out.take_all(), key=lambda r: r["id"])  # Ray Data does not keep the order
    assert [r["id"] for r in rows] == list(range(ROWS)) and "image" not in rows[0]
    np.testing.assert_allclose(np.stack([r["logits"] for r in rows]), expected, rtol=1e-5, atol=1e-6)

