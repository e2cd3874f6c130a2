"""The memory plan: one arena per run, each intermediate tensor a region of it, reused
between tensors whose lives cannot overlap under *any* schedule.

MNN and KuiperInfer plan memory for one sequential order; ONNX Runtime turns its reuse off
when branches run at once, because a reuse decided on one order breaks on another. Here
two tensors may share bytes only when every node that touches the first (its writer and
every reader, readers of views of it included) *happens before* the writer of the second:
a path in the DAG leads from each of them to it. The scheduler never starts a node before
its producers finish, so that order holds in every run, concurrent or not.

Which tensors get a region: the outputs of nodes whose kernels write into given memory
(``Kernel.writes_into``) and never return views (``Kernel.fresh_outputs``), unless a view
of them is handed to the caller; everything else is allocated by numpy as before. A kernel
marked ``in_place`` writes over its first input when it is that input's only reader, so
the two tensors form one *block*. Outputs handed to the user never live in the arena.

A join (``torch.cat``) need not copy: where a layer says an input could already lie inside
its output (``Layer.input_offsets``), the input's block is *hosted* there, its producer
writing straight into that part of the join's region, and the join skips it. A join whose
inputs all lie, in order, inside an enclosing join's region is hosted there too, so
DenseNet's growing concatenations of the same features copy nothing. A host and the blocks
it holds form one *group*: its bytes live from the first of their writers to the last of
their users, and no block is written in place over any of them.

Whether one group of tensors happens before another is read off chain labels of the plan's
nodes (:mod:`graphexec.reach`), in about linear time and memory. Groups are placed greedily,
largest first, each at the lowest offset clear of the placed groups it may not share with,
up to :data:`GREEDY_GROUPS` groups per place (every real network we know has a few hundred);
past that, a sweep in topological order hands each group bytes freed by a group that
happens before it, which shares less but takes linear time (docs/benchmarks.md).

The arena is one aligned byte buffer per place tensors live (the host, and a device's
memory when nodes run there: one OpenCL buffer, tensors at offsets in it). On a device the
"happens before" above holds too: a kernel waits for the events of its inputs, so it
starts only after every node on a path to it has finished. :class:`ArenaPool` keeps a few
arenas so that concurrent ``forward`` calls each lease their own, and a later call with
the same shapes reuses one; an arena goes back only once nothing can still write into it
(:class:`Lease`).
"""

from __future__ import annotations

import math
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any

import numpy as np

from graphexec.layers.specs import TensorSpec
from graphexec.reach import NEVER, Chains

if TYPE_CHECKING:
    from graphexec.plan import Plan
    from graphexec.replay import Replay

#: Every region starts on a multiple of this many bytes (a cache line; BLAS likes it).
ALIGN = 64


def _aligned(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


@dataclass(frozen=True)
class Block:
    """Bytes shared by one tensor and the tensors written over it in place."""

    index: int
    #: The tensor written first, then each one written over it in place, in order.
    operands: tuple[str, ...]
    nbytes: int
    #: The node that writes the first operand.
    writer: int
    #: Every node that writes or reads any of the operands or a view of one.
    users: frozenset[int]
    #: Where the tensors live: ``"cpu"`` or a device's kind (each has its own arena).
    home: str = "cpu"


@dataclass(frozen=True)
class Group:
    """A block and the blocks hosted inside its bytes: the unit the arena places."""

    index: int
    #: The host block first, then the blocks inside it.
    blocks: tuple[int, ...]
    nbytes: int
    #: The nodes that write any of the blocks.
    writers: frozenset[int]
    #: Every node that writes or reads any of the blocks' operands or a view of one.
    users: frozenset[int]
    home: str = "cpu"


class MemoryPlan:
    """Where each arena tensor of one :class:`~graphexec.plan.Plan` lives."""

    def __init__(self, plan: Plan):
        self.plan = plan
        self.specs: dict[str, TensorSpec] = {}
        self._aliases = _Aliases(plan)
        self._arena_nodes: dict[int, bool] = {}
        #: operand -> (the join output whose region holds it, byte offset there).
        self.hosted: dict[str, tuple[str, int]] = self._hosting()
        self.blocks: tuple[Block, ...] = self._blocks()
        #: Each block's group and byte offset inside the group's region.
        self.groups, self._inside = self._groups()
        self._order = _GroupOrder(plan, self.groups)
        #: Byte offset of each group in its arena.
        self.group_offsets: tuple[int, ...] = self._place()
        #: Byte offset of each block in its arena.
        self.offsets: tuple[int, ...] = tuple(
            self.group_offsets[g] + inside for g, inside in self._inside
        )
        #: Bytes of the arena in each place tensors live (``"cpu"``, a device's kind).
        self.bytes_on: dict[str, int] = {}
        for offset, group in zip(self.group_offsets, self.groups):
            self.bytes_on[group.home] = max(self.bytes_on.get(group.home, 0), offset + _aligned(group.nbytes))
        #: Bytes of the host's arena.
        self.arena_bytes: int = self.bytes_on.get("cpu", 0)
        #: The device whose arena holds the blocks not on the host (None: all on the host).
        self.device = getattr(plan.placement, "device", None)
        block_of = {name: b.index for b in self.blocks for name in b.operands}
        #: operand name -> (byte offset, spec) for every tensor that lives in an arena.
        self.regions: dict[str, tuple[int, TensorSpec]] = {
            name: (self.offsets[block_of[name]], self.specs[name]) for name in block_of
        }
        #: operand name -> where it lives.
        self.homes: dict[str, str] = {name: self.blocks[block_of[name]].home for name in block_of}
        #: Operands written over their producer's input (in place).
        self.in_place: frozenset[str] = frozenset(n for b in self.blocks for n in b.operands[1:])

    # -- which tensors, in which blocks ----------------------------------------------------
    def _blocks(self) -> tuple[Block, ...]:
        plan = self.plan
        grouped = set(self.hosted) | {host for host, _ in self.hosted.values()}
        users_of = self._aliases.users

        blocks: list[dict] = []
        owner: dict[str, int] = {}
        for i in plan.order:
            node = plan.nodes[i]
            kernel = node.kernel
            if not self._in_arena(node):
                continue  # forward_into writes every output or none
            for k, name in enumerate(node.step.outputs):
                spec = plan.specs[name]
                self.specs[name] = spec
                source = node.step.inputs[0] if node.step.inputs else None
                home = kernel.home
                if (
                    k == 0 and kernel.in_place and source in owner and source not in grouped
                    and blocks[owner[source]]["home"] == home
                    and node.step.inputs.count(source) == 1
                    and plan.specs[source] == spec
                    and users_of(source) == {i}
                    and blocks[owner[source]]["operands"][-1] == source
                ):
                    block = blocks[owner[source]]
                    block["operands"].append(name)
                    block["users"] |= users_of(name) | {i}
                    owner[name] = owner[source]
                    continue
                owner[name] = len(blocks)
                blocks.append({
                    "operands": [name], "writer": i, "users": users_of(name) | {i},
                    "nbytes": math.prod(spec.shape) * spec.dtype.itemsize, "home": home,
                })
        return tuple(
            Block(k, tuple(b["operands"]), b["nbytes"], b["writer"], frozenset(b["users"]), b["home"])
            for k, b in enumerate(blocks)
        )

    def _in_arena(self, node) -> bool:
        """Whether ``node``'s outputs get arena regions: a kernel that writes into given
        memory and returns fresh arrays, none of them handed to the caller (or viewed by
        something that is)."""
        found = self._arena_nodes.get(node.index)
        if found is None:
            found = self._arena_nodes[node.index] = self._arena_outputs(node)
        return found

    def _arena_outputs(self, node) -> bool:
        kernel = node.kernel
        if not (kernel.writes_into and kernel.fresh_outputs):
            return False
        for name in node.step.outputs:
            spec = self.plan.specs.get(name)
            if not (isinstance(spec, TensorSpec) and spec.dtype.kind in "biufc" and math.prod(spec.shape) > 0
                    and self._aliases.known(name) and not self._aliases.handed_out(name)):
                return False
        return True

    def _hosting(self) -> dict[str, tuple[str, int]]:
        """Which inputs of joins are written straight into the join's region, and where.

        Joins are visited consumers first, so a join already inside an enclosing one
        places its inputs inside that one too. A join qualifies when its kernel leaves
        inputs that lie in place alone (``Kernel.joins_in_place``); an input, when its
        producer's outputs get arena regions in the join's place (the host, a device), it
        is not hosted yet (a tensor read by several joins lies in the latest one) and the
        join reads it once."""
        plan = self.plan
        home = {name: node.kernel.home
                for node in plan.nodes if self._in_arena(node) for name in node.step.outputs}
        hosted: dict[str, tuple[str, int]] = {}
        outermost: dict[str, tuple[str, int]] = {}  # where each hosted operand lies in the end (final when set)

        def host(name: str, where: tuple[str, int]) -> None:
            hosted[name] = where
            root, inside = outermost.get(where[0], (where[0], 0))
            outermost[name] = (root, inside + where[1])

        for i in reversed(plan.order):
            step = plan.nodes[i].step
            place = home.get(step.outputs[0]) if len(step.outputs) == 1 else None
            if place is None or not plan.nodes[i].kernel.joins_in_place:
                continue
            out = step.outputs[0]
            spec = plan.specs[out]
            slots = step.layer.input_offsets([plan.specs[n] for n in step.inputs], [spec])
            if not slots:
                continue
            item = spec.dtype.itemsize
            if out not in hosted and all(n in hosted for n in step.inputs) and None not in slots:
                places = [outermost[n] for n in step.inputs]
                root, first = places[0]
                start = first - slots[0] * item
                if (all(h == root and off == start + slot * item for (h, off), slot in zip(places, slots))
                        and start >= 0 and start + spec.nbytes <= plan.specs[root].nbytes):
                    host(out, (root, start))  # every input already lies there, in order
                    continue
            reads = Counter(step.inputs)
            for name, slot in zip(step.inputs, slots):
                if (slot is not None and home.get(name) == place and name not in hosted
                        and reads[name] == 1 and plan.specs[name].dtype == spec.dtype):
                    host(name, (out, slot * item))
        return hosted

    def _groups(self) -> tuple[tuple[Group, ...], tuple[tuple[int, int], ...]]:
        """The groups (a host block and the blocks inside it), and for each block its
        group's index and its byte offset inside the group's region."""
        block_of = {name: b.index for b in self.blocks for name in b.operands}
        parent: dict[int, tuple[int, int]] = {}
        for name, (host, offset) in self.hosted.items():
            parent[block_of[name]] = (block_of[host], offset)
        members: dict[int, list[int]] = {}
        inside_root = _roots(parent, len(self.blocks))
        for b, (r, _) in enumerate(inside_root):
            members.setdefault(r, []).append(b)
        groups: list[Group] = []
        group_of: dict[int, int] = {}
        for r in sorted(members):
            blocks = [r] + [b for b in members[r] if b != r]
            group_of[r] = len(groups)
            groups.append(Group(
                len(groups), tuple(blocks), self.blocks[r].nbytes,
                frozenset(self.blocks[b].writer for b in blocks),
                frozenset().union(*(self.blocks[b].users for b in blocks)), self.blocks[r].home,
            ))
        inside = tuple((group_of[r], offset) for r, offset in inside_root)
        return tuple(groups), inside

    # -- where each group goes ---------------------------------------------------------------
    def may_share(self, a: int, b: int) -> bool:
        """Whether groups ``a`` and ``b`` may use the same bytes: one's users all happen
        before every writer of the other (groups in different places never meet)."""
        if self.groups[a].home != self.groups[b].home:
            return True
        return self._order.before(a, b) or self._order.before(b, a)

    def _place(self) -> tuple[int, ...]:
        """Each place's groups: greedy by size where there are at most :data:`GREEDY_GROUPS`
        (every real network we know), else by a sweep in topological order."""
        offsets = [0] * len(self.groups)
        homes: dict[str, list[int]] = {}
        for group in self.groups:
            homes.setdefault(group.home, []).append(group.index)
        for members in homes.values():
            place = self._greedy if len(members) <= GREEDY_GROUPS else self._sweep
            for g, offset in zip(members, place(members)):
                offsets[g] = offset
        return tuple(offsets)

    def _greedy(self, members: list[int]) -> list[int]:
        """Largest groups first, each at the lowest offset that overlaps no placed group it
        may not share with (the conflicts of one group with all placed ones at once)."""
        sizes = np.array([_aligned(self.groups[g].nbytes) for g in members], np.int64)
        starts = np.zeros(len(members), np.int64)
        placed: list[int] = []
        for k in sorted(range(len(members)), key=lambda k: (-self.groups[members[k]].nbytes, members[k])):
            if placed:
                at = np.array(placed)
                clash = ~self._order.ordered_with(members[k], [members[p] for p in placed])
                first, ends = starts[at[clash]], starts[at[clash]] + sizes[at[clash]]
                starts[k] = _lowest_gap(first, ends, int(sizes[k]))
            placed.append(k)
        return starts.tolist()

    def _sweep(self, members: list[int]) -> list[int]:
        """Groups in the order their first writers run (topological), each taking bytes
        freed by a group ordered before it (the smallest that fit of the last few freed
        of about its size), else the arena's top. Freed bytes keep the group that last
        held them; a group placed on part of them leaves the rest with that one. Linear in
        the groups, with at most :data:`SWEEP_TRIES` candidates tried per group."""
        position = {node: p for p, node in enumerate(self.plan.order)}
        starts = [0] * len(members)
        born: dict[int, list[int]] = {}
        dies: dict[int, list[int]] = {}
        for k, g in enumerate(members):
            group = self.groups[g]
            born.setdefault(min(position[w] for w in group.writers), []).append(k)
            dies.setdefault(max(position[u] for u in group.users), []).append(k)
        free: dict[int, list[tuple[int, int, int]]] = {}  # size class -> [(start, size, last holder)]
        top = 0
        for p in range(len(self.plan.order)):
            for k in sorted(born.get(p, ()), key=lambda k: -self.groups[members[k]].nbytes):
                size = _aligned(self.groups[members[k]].nbytes)
                starts[k], top = self._take(free, top, members[k], size, members)
            for k in dies.get(p, ()):
                size = _aligned(self.groups[members[k]].nbytes)
                free.setdefault(size.bit_length(), []).append((starts[k], size, k))
        return starts

    def _take(self, free: dict[int, list[tuple[int, int, int]]], top: int, g: int, size: int,
              members: list[int]) -> tuple[int, int]:
        """Where group ``g`` goes (and the arena's new top): freed bytes it may reuse (the
        latest freed first), or the top."""
        tries = 0
        for size_class in range(size.bit_length(), max(free, default=0) + 1):
            bucket = free.get(size_class, [])
            for j in range(len(bucket) - 1, max(len(bucket) - 1 - SWEEP_TRIES, -1), -1):
                start, room, holder = bucket[j]
                tries += 1
                if room >= size and self._order.before(members[holder], g):
                    bucket[j] = bucket[-1]
                    bucket.pop()
                    if room > size:
                        free.setdefault((room - size).bit_length(), []).append((start + size, room - size, holder))
                    return start, top
                if tries >= SWEEP_TRIES:
                    return top, top + size
        return top, top + size

    # -- figures ---------------------------------------------------------------------------
    @cached_property
    def unshared_bytes(self) -> int:
        """Bytes the host's arena tensors would take with no reuse at all."""
        return sum(_aligned(g.nbytes) for g in self._host_groups)

    @cached_property
    def sequential_bytes(self) -> int:
        """The most bytes of arena tensors alive at once in the best sequential order found
        (the plan's Kahn order and a greedy order that runs first whatever frees most):
        what a planner bound to one order could reach at best."""
        return min(self.live_peak(self.plan.order), self.live_peak(self._frugal_order()))

    @cached_property
    def floor_bytes(self) -> int:
        """A true lower bound for any order: the groups one node touches must coexist."""
        touching: dict[int, int] = {}
        for g in self._host_groups:
            for u in g.users:
                touching[u] = touching.get(u, 0) + _aligned(g.nbytes)
        return max(touching.values(), default=0)

    @cached_property
    def _host_groups(self) -> tuple[Group, ...]:
        return tuple(g for g in self.groups if g.home == "cpu")

    def live_peak(self, order: tuple[int, ...] | list[int]) -> int:
        """Most bytes of host groups alive at once when nodes run one at a time in ``order``."""
        position = {node: k for k, node in enumerate(order)}
        delta = [0] * (len(order) + 1)
        for g in self._host_groups:
            delta[min(position[w] for w in g.writers)] += _aligned(g.nbytes)
            delta[max(position[u] for u in g.users) + 1] -= _aligned(g.nbytes)
        peak = live = 0
        for d in delta[:-1]:
            live += d
            peak = max(peak, live)
        return peak

    def _frugal_order(self) -> list[int]:
        """A topological order that, among ready nodes, runs first the one that leaves the
        fewest bytes alive (frees the most, allocates the least)."""
        plan = self.plan
        pending_writers = [len(g.writers) for g in self.groups]
        writes: dict[int, list[int]] = {}
        for g in self._host_groups:
            for w in g.writers:
                writes.setdefault(w, []).append(g.index)
        pending_users = [len(g.users) for g in self.groups]
        groups_of: dict[int, list[int]] = {}
        for g in self._host_groups:
            for u in g.users:
                groups_of.setdefault(u, []).append(g.index)
        waiting = [len(p) for p in plan.predecessors]
        ready = {i for i, w in enumerate(waiting) if w == 0}
        order: list[int] = []
        while ready:
            def gain(i: int) -> tuple[int, int]:
                allocates = sum(_aligned(self.groups[g].nbytes) for g in writes.get(i, ())
                                if pending_writers[g] == len(self.groups[g].writers))
                frees = sum(_aligned(self.groups[g].nbytes) for g in groups_of.get(i, ()) if pending_users[g] == 1)
                return allocates - frees, i

            i = min(ready, key=gain)
            ready.remove(i)
            order.append(i)
            for g in writes.get(i, ()):
                pending_writers[g] -= 1
            for g in groups_of.get(i, ()):
                pending_users[g] -= 1
            for j in plan.successors[i]:
                waiting[j] -= 1
                if waiting[j] == 0:
                    ready.add(j)
        return order

    # -- arenas ------------------------------------------------------------------------------
    def views(self, arena: np.ndarray, device_arena: Any = None) -> ArenaViews:
        """Each arena tensor over its arena: an array over ``arena`` (a uint8 buffer of
        ``arena_bytes``), or a device tensor over ``device_arena`` (a device buffer)."""
        views = ArenaViews()
        for name, (offset, spec) in self.regions.items():
            if self.homes[name] == "cpu":
                views[name] = arena[offset:offset + spec.nbytes].view(spec.dtype).reshape(spec.shape)
            else:
                views[name] = self.device.region(device_arena, offset, spec.shape, spec.dtype)
        return views

    def new_arena(self) -> tuple[np.ndarray, ArenaViews]:
        """A fresh host arena (aligned to :data:`ALIGN`), a device arena where blocks live
        on a device, and the tensor views over them."""
        raw = np.empty(self.arena_bytes + ALIGN, dtype=np.uint8)
        start = (-raw.ctypes.data) % ALIGN
        arena = raw[start:start + self.arena_bytes]
        device_bytes = sum(n for home, n in self.bytes_on.items() if home != "cpu")
        device_arena = self.device.alloc((device_bytes,), np.uint8) if device_bytes else None
        return arena, self.views(arena, device_arena)


class ArenaViews(dict):
    """One arena's tensors by operand name, and in ``bound`` what was prepared over this
    arena alone (a device's launches with their arguments set to its buffers: see
    :mod:`graphexec.replay`), made on first use and gone with the arena."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.bound: dict[Any, Any] = {}


class Lease:
    """One run's hold on an arena, shared with the work that may still write into it.

    The run holds it from the start, and so does each piece of work it hands to another
    thread (a unit on a worker, a piece of a shared node) until that work is over. The
    arena goes back to its pool when the last of them lets go: a run that ends early (a
    timeout, Ctrl-C, a failing node, ``close()``) returns to its caller at once, and the
    units it leaves behind finish writing into an arena no later run has been given. Only
    a holder calls :meth:`hold`, so the count never climbs back from zero."""

    def __init__(self, pool: ArenaPool, arena: tuple[np.ndarray, ArenaViews]):
        self._pool = pool
        self._arena = arena
        #: The arena's tensor views (see :meth:`MemoryPlan.views`).
        self.views: ArenaViews = arena[1]
        self._holders = 1
        self._lock = threading.Lock()

    def hold(self) -> None:
        """One more holder: call it before handing work that writes into the arena over."""
        with self._lock:
            self._holders += 1

    def let_go(self) -> None:
        """One holder fewer; the last one gives the arena back to its pool."""
        with self._lock:
            self._holders -= 1
            last = self._holders == 0
        if last:
            self._pool._give_back(self._arena)


class ArenaPool:
    """The arenas of one memory plan: each running ``forward`` leases one, so concurrent
    calls never share; up to ``keep`` are kept for later calls with the same shapes.
    ``replay``: the plan's device stretches prepared over these arenas (see
    :mod:`graphexec.replay`), or None."""

    def __init__(self, memory: MemoryPlan, keep: int = 4, replay: Replay | None = None):
        self.memory = memory
        self.keep = keep
        self.replay = replay
        self._free: list[tuple[np.ndarray, ArenaViews]] = []
        self._lock = threading.Lock()
        #: How many arenas were ever made (a test reads it to see reuse).
        self.created = 0

    @contextmanager
    def lease(self) -> Iterator[Lease]:
        """A lease on an arena for one run; the run lets go of it on leaving (see
        :class:`Lease` for when the arena is free again)."""
        with self._lock:
            arena = self._free.pop() if self._free else None
            if arena is None:
                self.created += 1
        if arena is None:
            arena = self.memory.new_arena()
        lease = Lease(self, arena)
        try:
            yield lease
        except BaseException:
            if self.memory.device is not None:  # kernels of the failed run may still use it
                self.memory.device.finish()
            raise
        finally:
            lease.let_go()

    def _give_back(self, arena: tuple[np.ndarray, ArenaViews]) -> None:
        with self._lock:
            if len(self._free) < self.keep:
                self._free.append(arena)


def _roots(parent: dict[int, tuple[int, int]], count: int) -> list[tuple[int, int]]:
    """For each of ``count`` keys, the outermost one it lies in following ``parent`` (key ->
    (enclosing key, byte offset in it)) and the summed offset; each step is walked once."""
    found: dict[int, tuple[int, int]] = {}
    for key in range(count):
        path = []
        while key in parent and key not in found:
            path.append(key)
            key = parent[key][0]
        root, offset = found.get(key, (key, 0))
        for inner in reversed(path):  # outermost first
            offset += parent[inner][1]
            found[inner] = (root, offset)
    return [found.get(key, (key, 0)) for key in range(count)]


def _lowest_gap(starts: np.ndarray, ends: np.ndarray, size: int) -> int:
    """The lowest offset where ``size`` bytes overlap none of the ranges [starts, ends)."""
    if not len(starts):
        return 0
    by_start = np.argsort(starts, kind="stable")
    first, last = starts[by_start], ends[by_start]
    reached = np.concatenate(([0], np.maximum.accumulate(last)))  # where a gap may start before each range
    fits = np.flatnonzero(reached[:-1] + size <= first)
    return int(reached[fits[0]]) if fits.size else int(reached[-1])


#: Groups per place up to which the arena is placed greedily by size (tighter; each group is
#: checked against every placed one).
GREEDY_GROUPS = 2048
#: Freed regions a group of a sweep tries before it goes to the arena's top.
SWEEP_TRIES = 8


class _GroupOrder:
    """Whether one group of the memory plan happens before another: every user of the
    first reaches every writer of the second (see :mod:`graphexec.reach`).

    ``after[g]``: per chain, the first position every user of ``g`` reaches; ``g`` happens
    before ``h`` when each writer of ``h`` lies on a chain at or past that position."""

    def __init__(self, plan: Plan, groups: tuple[Group, ...]):
        args = (plan.order, plan.predecessors, plan.successors)
        self.chains = chains = Chains(*args)
        k = max(chains.count, 1)
        self.after = np.full((len(groups), k), -1, np.int32)
        used_by: dict[int, list[int]] = {}
        for group in groups:
            for u in group.users:
                used_by.setdefault(u, []).append(group.index)
        for u, label in chains.reach(*args):
            for g in used_by.get(u, ()):
                np.maximum(self.after[g], label, out=self.after[g])
        #: Per group, the writers' chains and positions; a writer on no chain is never reached.
        self.writers: list[tuple[tuple[int, int], ...] | None] = []
        for group in groups:
            places = tuple((chains.chain[w], chains.position[w]) for w in group.writers)
            self.writers.append(None if any(c < 0 for c, _ in places) else places)

    @cached_property
    def lowest(self) -> np.ndarray:
        """Per group, per chain, the lowest position of a writer on it (NEVER: none); for
        :meth:`ordered_with`, made when the greedy placement first asks."""
        lowest = np.full(self.after.shape, NEVER, np.int32)
        for g, places in enumerate(self.writers):
            for c, at in places or ():
                lowest[g, c] = min(lowest[g, c], at)
        return lowest

    def before(self, a: int, b: int) -> bool:
        """Whether group ``a`` happens before group ``b``."""
        places = self.writers[b]
        return places is not None and all(self.after[a, c] <= at for c, at in places)

    def ordered_with(self, b: int, others: list[int]) -> np.ndarray:
        """For each of ``others``, whether it happens before ``b`` or after it."""
        rows = np.array(others)
        places = self.writers[b]
        if places is None:
            earlier = np.zeros(len(rows), bool)
        else:
            chains, at = np.array([c for c, _ in places]), np.array([p for _, p in places])
            earlier = (self.after[rows][:, chains] <= at).all(axis=1)
        labelled = np.array([self.writers[o] is not None for o in others], bool)
        later = (self.after[b] <= self.lowest[rows]).all(axis=1) & labelled
        return earlier | later


class _Aliases:
    """Which operands may share memory through layers that can return views (``fresh_outputs``
    False), and who reads that memory, asked for one operand at a time and remembered.

    A long run of views is walked once from the tensor it starts at (keeping, for every
    operand, every later view of it took memory quadratic in the run). Should the walks
    together pass :data:`MAX_ALIAS_STEPS` per node (many tensors viewed by one long run),
    the tensors still unasked are left out of the arena (``known`` False)."""

    def __init__(self, plan: Plan):
        self.direct: dict[str, list[str]] = {}
        self.readers: dict[str, list[int]] = {}
        for node in plan.nodes:
            for name in node.step.inputs:
                self.readers.setdefault(name, []).append(node.index)
            if not node.kernel.fresh_outputs:
                for name in node.step.inputs:
                    self.direct.setdefault(name, []).extend(node.step.outputs)
        self.outputs = frozenset(plan.program.outputs)
        self.budget = MAX_ALIAS_STEPS * (len(plan.nodes) + 1)
        self.found: dict[str, tuple[frozenset[int], bool] | None] = {}

    def _walk(self, name: str) -> tuple[frozenset[int], bool] | None:
        if name not in self.found:
            seen, stack, users, out = {name}, [name], set(), False
            while stack and self.budget > 0:
                alias = stack.pop()
                self.budget -= 1
                users.update(self.readers.get(alias, ()))
                out = out or alias in self.outputs
                for view in self.direct.get(alias, ()):
                    if view not in seen:
                        seen.add(view)
                        stack.append(view)
            self.found[name] = None if stack else (frozenset(users), out)
        return self.found[name]

    def known(self, name: str) -> bool:
        return self._walk(name) is not None

    def handed_out(self, name: str) -> bool:
        """Whether ``name`` or a view of it is handed to the caller."""
        return self._walk(name)[1]  # type: ignore[index]

    def users(self, name: str) -> set[int]:
        """The nodes that read ``name`` or a view of it."""
        return set(self._walk(name)[0])  # type: ignore[index]


#: Alias steps walked per node of the plan at most (see :class:`_Aliases`).
MAX_ALIAS_STEPS = 8
