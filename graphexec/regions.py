"""Which stretches of a plan run their branches side by side, and which run one unit at a
time with every core inside BLAS.

Two kinds of parallelism compete for the same cores. Branches on several workers (one BLAS
thread each) speed up everything, numpy's single-threaded elementwise code included, but
pay for each hand-over to a worker and lose some speed to running side by side. More BLAS
threads for one unit speed up only its matrix products, with no hand-over. Which wins
depends on the stretch of the plan: an Inception block of large convolutions is faster
one convolution at a time on every core; eight small equal branches are faster side by
side; a chain has nothing to run beside it.

A third way uses every core for one node's whole work, not only its matrix products: a
node that runs alone is *shared out* among threads, as pieces its CPU kernel cuts it into
(:meth:`~graphexec.devices.base.Kernel.pieces`: bands of a convolution's output rows, of a
depthwise convolution's channels, of an activation's elements), each on one BLAS thread.
That also speeds up the im2col copies, Winograd transforms, depthwise taps, bias and
activation passes that BLAS threads leave on one core. Which nodes split is the layer's
call (where that beats BLAS threads); the cost model only checks they are large enough.

A *region* is a stretch of units between two cuts: points in the topological order of
units that only the unit just before them reaches across (an Inception block between its
input and its concatenation; each node of a chain alone). The ways of running a region
are estimated from the plan's costs and the fastest one is kept.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import pairwise

from graphexec.cost import Cost
from graphexec.plan import Analysis, Plan

# The constants of the cost model below are calibrated by measurements on the project's
# 2-core machines, kept in docs/design/threads.md ("The cost model's constants").

#: Throughput each BLAS thread beyond the first adds to a large matrix product, relative to
#: the first.
BLAS_SCALING = 0.85
#: Products below this many FLOPs gain nothing from more threads (OpenBLAS keeps them on
#: one thread, and waking another costs about what it saves).
MIN_SCALING_FLOPS = 2e6
#: The speed of branches run side by side relative to the same branches alone.
SIDE_BY_SIDE_EFFICIENCY = 0.75
#: What handing a unit to a worker costs on top of its work (a thread wake-up each way,
#: the GIL passing).
HANDOFF_SECONDS = 40e-6
#: Workers are started only for an estimated gain of at least this fraction of the run: a
#: run through the scheduler costs a little more per unit than a plain loop, and the
#: estimates are rough.
MIN_WORKERS_GAIN = 0.05
#: Throughput each thread beyond the first adds to a node shared out, relative to the
#: first.
SPLIT_SCALING = 0.6
#: What sharing a node out costs on top of its work: waking a thread for each other piece
#: and waiting for it.
SPLIT_SECONDS = 40e-6
#: Throughput each thread beyond the first adds to a node run in compiled parts (one call,
#: its parts on numba's threads), relative to the first.
PARTS_SCALING = 0.8
#: What running a node in compiled parts costs on top of its work: waking numba's threads
#: and joining them.
PARTS_SECONDS = 20e-6


@dataclass(frozen=True)
class Region:
    """A stretch of units (indices, in topological order) and the estimates of its time."""

    units: tuple[int, ...]
    #: One unit at a time, its BLAS calls on every core (one worker).
    serial_seconds: float
    #: Its units on the workers, one BLAS thread each.
    parallel_seconds: float

    @property
    def serial(self) -> bool:
        return self.serial_seconds <= self.parallel_seconds


def _scales(cost: Cost) -> bool:
    """Whether a node's matrix products are large enough to gain from more BLAS threads."""
    return cost.blas_flops >= MIN_SCALING_FLOPS


def _boosted(cost: Cost, cores: int) -> float:
    """A node's estimated time when its large matrix products use ``cores`` BLAS threads."""
    saved = 1 - 1 / (1 + BLAS_SCALING * (cores - 1))
    return cost.seconds - (cost.blas_seconds * saved if _scales(cost) else 0.0)


#: An engine that chooses one worker gives it every core for BLAS only when that is
#: estimated to save at least this fraction of a run: below it, the products are too small
#: to pay for waking the second thread (docs/design/threads.md).
MIN_BLAS_GAIN = 0.1


def blas_threads_gain(plan: Analysis | Plan, cores: int) -> float:
    """The fraction of the plan's estimated time that ``cores`` BLAS threads save when every
    node runs one at a time (only large matrix products gain, see :func:`_boosted`)."""
    total = sum(node.cost.seconds for node in plan.nodes)
    saved = sum(node.cost.seconds - _boosted(node.cost, cores) for node in plan.nodes)
    return saved / total if total > 0 else 0.0


def _shared(cost: Cost, workers: int) -> float:
    """A node's estimated time when it is shared out among ``workers`` threads."""
    return cost.seconds / (1 + SPLIT_SCALING * (workers - 1)) + SPLIT_SECONDS


def splits(plan: Analysis | Plan, index: int) -> bool:
    """Whether node ``index``'s layer can share its work out for the plan's specs."""
    kernel = plan.nodes[index].kernel
    return kernel is not None and kernel.splits()


def shared_nodes(plan: Analysis | Plan, workers: int) -> frozenset[int]:
    """Nodes worth sharing out among ``workers`` threads when they run alone: their layers
    split them where that beats BLAS threads (see :meth:`graphexec.devices.base.Kernel.splits`), and
    they are large enough to pay for the hand-over."""
    if workers < 2:
        return frozenset()
    return frozenset(node.index for node in plan.nodes
                     if node.device == "cpu" and _shared(node.cost, workers) < node.cost.seconds
                     and splits(plan, node.index))


def parts_nodes(plan: Analysis | Plan, workers: int) -> frozenset[int]:
    """Nodes worth running in compiled parts on ``workers`` threads when they run alone
    (:meth:`~graphexec.devices.base.Kernel.across`): their kernels can, and they are large
    enough to pay for waking the threads."""
    if workers < 2:
        return frozenset()
    return frozenset(node.index for node in plan.nodes
                     if node.device == "cpu" and _parted(node.cost, workers) < node.cost.seconds
                     and crosses(plan, node.index))


def _parted(cost: Cost, workers: int) -> float:
    """A node's estimated time when it runs in compiled parts on ``workers`` threads."""
    return cost.seconds / (1 + PARTS_SCALING * (workers - 1)) + PARTS_SECONDS


def crosses(plan: Analysis | Plan, index: int) -> bool:
    """Whether node ``index``'s kernel runs in compiled parts for the plan's specs."""
    kernel = plan.nodes[index].kernel
    return kernel is not None and kernel.crosses()


def regions(plan: Analysis | Plan, workers: int, cores: int, shared: frozenset[int] = frozenset()) -> tuple[Region, ...]:
    """The plan's regions with both estimates, for ``workers`` inter-op workers and
    ``cores`` threads for a unit that runs alone: BLAS threads, or pieces of its nodes in
    ``shared`` (see :func:`shared_nodes`)."""
    bounds = [0, *_cuts(plan), len(plan.units)]
    found = []
    for start, stop in pairwise(bounds):
        units = tuple(range(start, stop))
        seconds = [plan.unit_seconds[u] for u in units]
        serial = sum(_shared(plan.nodes[i].cost, cores) if i in shared else _boosted(plan.nodes[i].cost, cores)
                     for u in units for i in plan.units[u].nodes)
        if workers < 2:
            parallel = math.inf
        elif len(units) == 1:  # nothing beside it: it runs on the calling thread
            parallel = seconds[0]
        else:
            longest = _longest_path(plan, start, stop)
            parallel = max(longest, sum(s + HANDOFF_SECONDS for s in seconds) / (workers * SIDE_BY_SIDE_EFFICIENCY))
        found.append(Region(units, serial, parallel))
    return tuple(found)


def _cuts(plan: Analysis | Plan) -> list[int]:
    """Region boundaries: positions ``k`` in the unit order (units are numbered
    topologically) such that no unit before ``k - 1`` feeds a unit at ``k`` or later."""
    found = []
    reach = -1  # the furthest unit fed by a unit before k - 1
    for k in range(1, len(plan.units)):
        if reach < k:
            found.append(k)
        reach = max(reach, *plan.unit_successors[k - 1], -1)
    return found


def _longest_path(plan: Analysis | Plan, start: int, stop: int) -> float:
    """The costliest chain of units inside ``[start, stop)``."""
    longest: dict[int, float] = {}
    for u in reversed(range(start, stop)):
        tail = max((longest[s] for s in plan.unit_successors[u] if s < stop), default=0.0)
        longest[u] = plan.unit_seconds[u] + tail
    return max(longest.values(), default=0.0)


@dataclass(frozen=True)
class RegionChoice:
    """What the scheduler needs from the regions of one plan."""

    #: Units of serial regions: each runs once nothing else does, on the calling thread.
    serial: frozenset[int]
    #: Nodes whose matrix products are large enough to gain from every core: they get every
    #: core for BLAS whenever they run alone (and are not shared out).
    boosted: frozenset[int]
    #: Nodes of serial units shared out among the workers (see :func:`shared_nodes`). Only
    #: serial units: they always run alone, so a plan's nodes always run the same way and
    #: repeated runs give the same bits.
    shared: frozenset[int] = frozenset()


def choose(plan: Analysis | Plan, workers: int, cores: int, shared: frozenset[int] = frozenset()) -> RegionChoice:
    """Serial units, boosted and shared nodes of ``plan`` for ``workers`` workers on
    ``cores`` cores; ``shared``: the nodes that may be shared out (see :func:`shared_nodes`)."""
    serial = frozenset(u for r in regions(plan, workers, cores, shared) if r.serial for u in r.units)
    boosted = frozenset(node.index for node in plan.nodes if _scales(node.cost))
    in_serial = {i for u in serial for i in plan.units[u].nodes}
    return RegionChoice(serial, boosted, shared & in_serial if workers > 1 else shared)


def worth_workers(plan: Analysis | Plan, cores: int, mixing: bool, shared: frozenset[int] = frozenset()) -> bool:
    """Whether running branches on ``cores`` workers is estimated at least
    :data:`MIN_WORKERS_GAIN` faster than one worker with every core for BLAS (and the
    ``shared`` nodes shared out either way). With ``mixing`` (BLAS threads sleep soon
    after a call, see :func:`graphexec.blas.idle_threads_sleep`) only the regions that gain
    run side by side; without it a run is one or the other throughout."""
    found = regions(plan, cores, cores, shared)
    one_worker = sum(r.serial_seconds for r in found)
    if mixing:
        workers = sum(min(r.serial_seconds, r.parallel_seconds) for r in found)
    else:
        workers = sum(r.parallel_seconds if not r.serial else sum(plan.unit_seconds[u] for u in r.units)
                      for r in found)
    return workers < (1 - MIN_WORKERS_GAIN) * one_worker
