"""How many threads an engine uses, decided once when it loads, from its plan and the machine.

Inter-op workers (branches side by side) times intra-op threads (BLAS inside a node) never
exceed the cores the process may use. Given ``threads`` (or an executor) and no
``intra_op_threads``, each node runs on one BLAS thread and nothing is shared out: every
such engine gives the sequential one's very bits, whatever the workers. Given neither,
the engine chooses both from the plan's regions (:mod:`graphexec.regions`): as many
workers as cores when some stretch of the plan is estimated faster with its branches side
by side than one node at a time with every core for BLAS, else one; cores // workers BLAS
threads each (one for one worker where BLAS threads are estimated to save less than
:data:`graphexec.regions.MIN_BLAS_GAIN`). Such an engine merges sibling convolutions only
where they run alone (:mod:`graphexec.passes.siblings`), gives a large node that runs alone
every core (BLAS threads, or pieces of its work on every core, ``share_nodes``), and agrees
with the sequential one to rounding, not bit for bit (OpenBLAS's results change with its
thread count). On the compiled kernels, where numba's threads may run a loop's parts, it
runs one worker and one BLAS thread, and its large nodes in compiled parts on every core
instead (:attr:`ThreadPolicy.parts`).

The policy holds for the engine's life; what a run of one plan follows (its serial units,
boosted and shared nodes) comes from :meth:`ThreadPolicy.regions`, once per plan. An
engine that chose several threads uses them only where the cores are free when a run
starts (:meth:`ThreadPolicy.room`, :mod:`graphexec.occupancy`); otherwise that run is the
one ``threads=1, intra_op_threads=1`` would make, with that engine's plan.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

from loguru import logger

from graphexec.blas import idle_threads_sleep
from graphexec.occupancy import occupancy
from graphexec.options import EngineOptions
from graphexec.plan import Analysis, Plan
from graphexec.program import Step
from graphexec.regions import (
    MIN_BLAS_GAIN, RegionChoice, blas_threads_gain, choose, parts_nodes, shared_nodes, worth_workers)


def cpu_count() -> int:
    """Cores this process may use: the CPUs it may run on (affinity), no more than its CPU
    quota (cgroup ``cpu.max``, or ``cpu.cfs_quota_us`` in cgroup v1, rounded up) and than
    ``OMP_NUM_THREADS`` or ``OPENBLAS_NUM_THREADS`` when the host sets them (Dask and Ray
    set ``OMP_NUM_THREADS=1`` in their workers, one core each)."""
    counts = [affinity_count(), *quota_count(), *env_count()]
    return max(1, min(counts))


def affinity_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


#: The environment variables a host sets to give a process a number of threads.
THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def env_count() -> list[int]:
    """The thread counts the host sets in :data:`THREAD_VARIABLES` (a list of an OpenMP
    nesting, ``4,2``, gives its first)."""
    found = []
    for name in THREAD_VARIABLES:
        text = os.environ.get(name, "").split(",")[0].strip()
        if text.isdigit() and int(text) > 0:
            found.append(int(text))
    return found


def quota_count(root: str = "/sys/fs/cgroup", proc: str = "/proc/self/cgroup") -> list[int]:
    """The CPU quotas of this process's cgroups, in cores rounded up (cgroup v2's
    ``cpu.max``, v1's ``cpu.cfs_quota_us`` over ``cpu.cfs_period_us``); none where no
    quota is set or the files cannot be read."""
    try:
        with open(proc) as lines:
            groups = [line.rstrip("\n").split(":", 2) for line in lines]
    except OSError:
        return []
    found = []
    for entry in groups:
        if len(entry) != 3:
            continue
        _, controllers, path = entry
        files: tuple[str, ...]
        if controllers == "":
            folders, files = [root], ("cpu.max",)
        elif "cpu" in controllers.split(","):
            folders = [os.path.join(root, name) for name in ("cpu", "cpu,cpuacct", "cpuacct,cpu")]
            files = ("cpu.cfs_quota_us", "cpu.cfs_period_us")
        else:
            continue
        for folder in folders:
            quota = _quota_in(folder, path, files)
            if quota is not None:
                found.append(quota)
                break
    return found


def _quota_in(folder: str, path: str, files: tuple[str, ...]) -> int | None:
    """The smallest quota on the way from ``folder``/``path`` up to ``folder`` (a container
    sees its own cgroup as the root), in cores rounded up; None if none is set."""
    best = None
    parts = [p for p in path.strip("/").split("/") if p]
    for depth in range(len(parts), -1, -1):
        here = os.path.join(folder, *parts[:depth])
        try:
            if len(files) == 1:
                with open(os.path.join(here, files[0])) as f:
                    quota, _, period = f.read().strip().partition(" ")
            else:
                with open(os.path.join(here, files[0])) as f:
                    quota = f.read().strip()
                with open(os.path.join(here, files[1])) as f:
                    period = f.read().strip()
        except OSError:
            continue
        if quota in ("max", "-1", "") or not period.isdigit() or not quota.lstrip("-").isdigit():
            continue
        cores = -(-int(quota) // max(1, int(period)))
        best = cores if best is None else min(best, cores)
    return best


def default_threads(analysis: Analysis | Plan, cores: int, mixing: bool, shared: frozenset[int] = frozenset()) -> int:
    """Inter-op workers by default: every core when some region of the plan runs faster
    with its branches side by side than one unit at a time with every core for BLAS and
    the ``shared`` nodes shared out (see :mod:`graphexec.regions`), else one. ``mixing``:
    whether a run may switch between the two (:func:`graphexec.blas.idle_threads_sleep`).

    One worker when nodes run on a device: there a node's host work is an enqueue (tens of
    microseconds of Python, under the GIL) and the device's command queues already run
    branches side by side; more workers only contend for the GIL (GoogLeNet on an H100
    through OpenCL: 12 ms a run on one worker, 20 ms on two)."""
    if cores < 2 or any(node.device != "cpu" for node in analysis.nodes):
        return 1
    return cores if worth_workers(analysis, cores, mixing, shared) else 1


def _parts(options: EngineOptions) -> bool:
    """Whether this engine's CPU kernels run nodes in compiled parts (the jit tier, where
    numba's threading layer allows it)."""
    if "jit" not in options.kernel_tiers():
        return False
    from graphexec.devices.cpu.jit import parts_supported

    return parts_supported()


@dataclass(frozen=True)
class ThreadPolicy:
    """The threads of one engine (see the module docstring)."""

    #: Inter-op workers: how many independent nodes may run at once (1: sequential).
    threads: int
    #: BLAS threads inside one node during a run.
    intra_op_threads: int
    #: Cores this process may use, as seen when the engine loaded.
    cores: int
    #: Whether a large node that runs alone is shared out among threads.
    share: bool = False
    #: BLAS threads for a large node that runs alone in a concurrent run (None: never raised).
    boost: int | None = None
    #: Whether siblings merge only in the units a run takes one at a time (else all do).
    merge_where_alone: bool = False
    #: Whether nodes that run whole on several BLAS threads get kernels chosen for that.
    tune: bool = False
    #: Whether nodes run on an executor the caller gave (its workers are not ours).
    injected: bool = False
    #: Whether each run first checks that the cores are free, and runs as ``threads=1,
    #: intra_op_threads=1`` would where they are not (see :mod:`graphexec.occupancy`):
    #: engines that chose several threads themselves, or that may share nodes out though
    #: they chose one worker and one BLAS thread (measured in docs/benchmarks.md, "Threads
    #: under load").
    adapts: bool = False
    #: Whether the nodes shared out run in compiled parts on numba's threads (one call each,
    #: no hand-over between Python threads), with every product inside them on one BLAS
    #: thread (docs/design/threads.md, "Compiled parts").
    parts: bool = False

    def room(self, alone: bool | None = None) -> bool:
        """Whether a run may use this policy's threads now (always, unless it adapts);
        ``alone``: whether the run, already counted, began with no other in flight (see
        :meth:`~graphexec.occupancy.Occupancy.run`)."""
        threads = self.cores if self.parts else max(self.threads, self.intra_op_threads)
        return not self.adapts or occupancy().room_for(threads, self.cores, alone)

    @staticmethod
    def decide(options: EngineOptions, draft: Callable[[int], Analysis | Plan] | None, on_device: bool,
               cores: int | None = None, mixing: bool | None = None) -> ThreadPolicy:
        """The policy for ``options``. ``draft(pieces)``: the plan at the exported input
        shapes with sibling convolutions apart, its kernels chosen for nodes shared among
        ``pieces`` threads (None: the shapes are not known until a run)."""
        cores = cpu_count() if cores is None else cores
        mixing = idle_threads_sleep() if mixing is None else mixing
        chooses = options.chooses_threads
        share_nodes = options.share_nodes if options.share_nodes is not None else chooses
        # A node's pieces run on single-threaded BLAS beside BLAS threads that may still
        # spin on the other cores: unless asked, only where those sleep soon (numpy loaded
        # first, ResNet-50, GoogLeNet and Inception v3 ran 1.13-1.26x slower shared out).
        share = (share_nodes and options.executor is None and cores > 1
                 and (mixing or bool(options.share_nodes)) and not on_device)
        if (share_nodes and options.executor is None and cores > 1 and not on_device and options.threads in (None, 1)
                and options.intra_op_threads in (None, 1) and _parts(options)):
            # One worker, one BLAS thread: the nodes large enough run in compiled parts on
            # every core, their products included; numba's threads, spinning between
            # parts, would starve BLAS's own or the workers' (docs/design/threads.md).
            policy = ThreadPolicy(1, 1, cores, True, None, merge_where_alone=chooses, injected=False,
                                  adapts=True, parts=True)
            logger.debug("threads: 1 worker x 1 BLAS thread, nodes in compiled parts on {} threads when alone", cores)
            return policy
        analysis = draft(cores if share else 1) if draft is not None and options.threads is None else None
        threads = options.threads
        if threads is None:
            shared = shared_nodes(analysis, cores) if share and analysis is not None else frozenset()
            threads = default_threads(analysis, cores, mixing, shared) if analysis is not None else min(2, cores)
        intra = options.intra_op_threads or (max(1, cores // threads) if share_nodes else 1)
        if (options.intra_op_threads is None and share_nodes and options.threads is None and threads == 1
                and analysis is not None and blas_threads_gain(analysis, cores) < MIN_BLAS_GAIN):
            intra = 1  # small products only: waking BLAS threads costs what they save
        # Only where BLAS threads sleep soon after a call, else they would spin on the
        # cores the branches after the node need (see graphexec.blas.idle_threads_sleep).
        boost = (cores if share_nodes and options.intra_op_threads is None and threads > 1 and cores > intra
                 and mixing else None)
        policy = ThreadPolicy(threads, intra, cores, share, boost, merge_where_alone=chooses,
                              tune=not on_device and (intra > 1 or boost is not None),
                              injected=options.executor is not None,
                              adapts=chooses and not on_device and (threads > 1 or intra > 1 or share))
        logger.debug("threads: {} workers x {} BLAS threads{}{}", threads, intra,
                     ", nodes shared out when alone" if share else "", f", boost to {boost}" if boost else "")
        return policy

    def shared(self, analysis: Analysis | Plan) -> frozenset[int]:
        """The nodes of ``analysis`` shared out among threads when they run alone."""
        if not self.share:
            return frozenset()
        return parts_nodes(analysis, self.cores) if self.parts else shared_nodes(analysis, self.cores)

    def regions(self, analysis: Analysis | Plan) -> RegionChoice | None:
        """The regions a run of ``analysis`` follows; None: every node runs alike. With one
        worker, where nodes may be shared out; with several, only where BLAS threads may
        be raised (otherwise every unit goes to the workers); never on an injected executor."""
        if self.injected:
            return None
        if self.threads == 1 and not self.share or self.threads > 1 and not self.boost:
            return None
        choice = choose(analysis, self.threads, self.cores, self.shared(analysis))
        logger.debug("regions: {} of {} units run alone, {} nodes may get every core for BLAS, {} are shared out",
                     len(choice.serial), len(analysis.units), len(choice.boosted), len(choice.shared))
        return choice

    def blas_threads(self, analysis: Analysis | Plan, choice: RegionChoice | None) -> dict[int, int]:
        """The BLAS threads of each node that runs whole on more than one in every run of
        ``analysis``: every node but the shared ones gets ``intra_op_threads``; in a run
        with several workers, the boosted nodes of units that run alone get the boost.
        Nodes of other units get it only when nothing runs beside them, which changes from
        run to run, so they are left out."""
        found = {}
        for node in analysis.nodes:
            if choice is not None and node.index in choice.shared:
                continue
            count = self.intra_op_threads
            if (self.threads > 1 and choice is not None and node.index in choice.boosted
                    and analysis.unit_of[node.index] in choice.serial):
                count = self.boost or count
            if count > 1:
                found[node.index] = count
        return found

    def merges(self, analysis: Analysis | Plan) -> Callable[[Step], bool] | None:
        """The steps whose sibling convolutions may merge (None: every one). A merged
        product gains where it runs alone with every core for BLAS; siblings that run side
        by side on the workers are faster apart (the wide net, 8 branches: 0.87-0.94x the
        time apart on two workers, against merged on one worker with two BLAS threads).
        Given threads, BLAS threads or an executor, all merge, so that every such engine
        runs the sequential one's plan and gives its bits."""
        if not self.merge_where_alone or self.threads == 1:
            return None
        choice = self.regions(analysis)
        alone = set() if choice is None else {
            id(analysis.nodes[i].step) for u in choice.serial for i in analysis.units[u].nodes}
        return lambda step: id(step) in alone
