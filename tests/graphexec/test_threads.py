"""The cores a process may use (graphexec.threads.cpu_count): its affinity, its cgroup's CPU
quota and the thread counts a host sets in the environment, whichever is smallest."""

from __future__ import annotations

import numpy as np
import pytest

from graphexec import Engine
from graphexec import threads as threads_module
from graphexec.threads import cpu_count, env_count, quota_count
from tests.paths import REPO


@pytest.mark.parametrize("variable", ["OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS"])
def test_a_hosts_thread_count_caps_the_cores(monkeypatch, variable):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv("OPENBLAS_NUM_THREADS", raising=False)
    monkeypatch.setattr(threads_module, "affinity_count", lambda: 8)
    monkeypatch.setattr(threads_module, "quota_count", lambda: [])
    assert cpu_count() == 8
    monkeypatch.setenv(variable, "3")
    assert cpu_count() == 3
    monkeypatch.setenv(variable, "4,2")  # an OpenMP nesting: its outer level
    assert env_count() == [4]
    monkeypatch.setenv(variable, "lots")
    assert cpu_count() == 8


def write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_a_cgroup_v2_quota_rounds_up_and_the_tightest_ancestor_counts(tmp_path):
    write(tmp_path / "proc", "0::/jobs/one\n")
    write(tmp_path / "fs" / "jobs" / "one" / "cpu.max", "150000 100000\n")
    write(tmp_path / "fs" / "jobs" / "cpu.max", "max 100000\n")
    assert quota_count(str(tmp_path / "fs"), str(tmp_path / "proc")) == [2]
    write(tmp_path / "fs" / "jobs" / "cpu.max", "100000 100000\n")
    assert quota_count(str(tmp_path / "fs"), str(tmp_path / "proc")) == [1]


def test_a_cgroup_v1_quota_and_no_quota(tmp_path):
    write(tmp_path / "proc", "5:cpu,cpuacct:/docker/abc\n3:memory:/docker/abc\n")
    folder = tmp_path / "fs" / "cpu,cpuacct"
    write(folder / "cpu.cfs_quota_us", "-1\n")
    write(folder / "cpu.cfs_period_us", "100000\n")
    assert quota_count(str(tmp_path / "fs"), str(tmp_path / "proc")) == []  # the container's own view: none
    write(folder / "docker" / "abc" / "cpu.cfs_quota_us", "50000\n")
    write(folder / "docker" / "abc" / "cpu.cfs_period_us", "100000\n")
    assert quota_count(str(tmp_path / "fs"), str(tmp_path / "proc")) == [1]
    assert quota_count(str(tmp_path / "fs"), str(tmp_path / "nowhere")) == []


def test_an_engine_in_a_worker_given_one_thread_uses_one(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    engine = Engine.load(REPO / "examples" / "models" / "wide.pnnx.param")
    assert (engine.threads, engine.intra_op_threads) == (1, 1) and not engine.policy.adapts
    x = np.load(REPO / "examples" / "models" / "wide.io.npz")["in0"]
    assert engine.forward(x).shape == np.load(REPO / "examples" / "models" / "wide.io.npz")["out0"].shape
