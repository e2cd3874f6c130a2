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

The arena is one aligned byte buffer per place tensors live (the host, and a device's
memory when nodes run there: one OpenCL buffer, tensors at offsets in it). On a device the
"happens before" above holds too: a kernel waits for the events of its inputs, so it
starts only after every node on a path to it has finished. :class:`ArenaPool` keeps a few
arenas so that concurrent ``forward`` calls each lease their own, and a later call with
the same shapes reuses one.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any

import numpy as np

from graphexec.layers.specs import TensorSpec

if TYPE_CHECKING:
    from graphexec.plan import Plan

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
        self._aliases = _view_closure(plan)
        self._handed_out = frozenset(plan.program.outputs)
        #: operand -> (the join output whose region holds it, byte offset there).
        self.hosted: dict[str, tuple[str, int]] = self._hosting()
        self.blocks: tuple[Block, ...] = self._blocks()
        #: Each block's group and byte offset inside the group's region.
        self.groups, self._inside = self._groups()
        descendants = _descendants(plan)
        #: For each group, the nodes that every one of its users reaches (run strictly after all of them).
        self._after: tuple[int, ...] = tuple(
            _intersection(descendants[u] for u in group.users) for group in self.groups
        )
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
        aliases = self._aliases
        grouped = set(self.hosted) | {host for host, _ in self.hosted.values()}
        readers: dict[str, set[int]] = {}
        for node in plan.nodes:
            for name in node.step.inputs:
                readers.setdefault(name, set()).add(node.index)

        def users_of(name: str) -> set[int]:
            return {u for alias in aliases[name] for u in readers.get(alias, ())}

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
        kernel = node.kernel
        if not (kernel.writes_into and kernel.fresh_outputs):
            return False
        for name in node.step.outputs:
            spec = self.plan.specs.get(name)
            if not (isinstance(spec, TensorSpec) and spec.dtype.kind in "biufc" and math.prod(spec.shape) > 0
                    and not (self._aliases[name] & self._handed_out)):
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
                places = [_outermost(hosted, n) for n in step.inputs]
                host, first = places[0]
                start = first - slots[0] * item
                if (all(h == host and off == start + slot * item for (h, off), slot in zip(places, slots))
                        and start >= 0 and start + spec.nbytes <= plan.specs[host].nbytes):
                    hosted[out] = (host, start)  # every input already lies there, in order
                    continue
            for name, slot in zip(step.inputs, slots):
                if (slot is not None and home.get(name) == place and name not in hosted
                        and step.inputs.count(name) == 1 and plan.specs[name].dtype == spec.dtype):
                    hosted[name] = (out, slot * item)
        return hosted

    def _groups(self) -> tuple[tuple[Group, ...], tuple[tuple[int, int], ...]]:
        """The groups (a host block and the blocks inside it), and for each block its
        group's index and its byte offset inside the group's region."""
        block_of = {name: b.index for b in self.blocks for name in b.operands}
        parent: dict[int, tuple[int, int]] = {}
        for name, (host, offset) in self.hosted.items():
            parent[block_of[name]] = (block_of[host], offset)
        members: dict[int, list[int]] = {}
        inside_root = [_outermost(parent, b.index) for b in self.blocks]
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
        ga, gb = self.groups[a], self.groups[b]
        if ga.home != gb.home:
            return True
        return (all(self._after[a] >> w & 1 for w in gb.writers)
                or all(self._after[b] >> w & 1 for w in ga.writers))

    def _place(self) -> tuple[int, ...]:
        """Greedy by size: largest groups first, each at the lowest offset that overlaps no
        placed group it may not share with."""
        offsets = [0] * len(self.groups)
        placed: list[int] = []
        for b in sorted(range(len(self.groups)), key=lambda k: (-self.groups[k].nbytes, k)):
            size = _aligned(self.groups[b].nbytes)
            taken = sorted(
                (offsets[p], offsets[p] + _aligned(self.groups[p].nbytes))
                for p in placed if not self.may_share(b, p)
            )
            offset = 0
            for start, end in taken:
                if offset + size <= start:
                    break
                offset = max(offset, end)
            offsets[b] = offset
            placed.append(b)
        return tuple(offsets)

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


class ArenaPool:
    """The arenas of one memory plan: each running ``forward`` leases one, so concurrent
    calls never share; up to ``keep`` are kept for later calls with the same shapes.
    ``replay``: the plan's device stretches prepared over these arenas (see
    :mod:`graphexec.replay`), or None."""

    def __init__(self, memory: MemoryPlan, keep: int = 4, replay: Any = None):
        self.memory = memory
        self.keep = keep
        self.replay = replay
        self._free: list[tuple[np.ndarray, ArenaViews]] = []
        self._lock = threading.Lock()
        #: How many arenas were ever made (a test reads it to see reuse).
        self.created = 0

    @contextmanager
    def lease(self) -> Iterator[ArenaViews]:
        """An arena's tensor views for the duration of one run."""
        with self._lock:
            arena = self._free.pop() if self._free else None
            if arena is None:
                self.created += 1
        if arena is None:
            arena = self.memory.new_arena()
        try:
            yield arena[1]
        except BaseException:
            if self.memory.device is not None:  # kernels of the failed run may still use it
                self.memory.device.finish()
            raise
        finally:
            with self._lock:
                if len(self._free) < self.keep:
                    self._free.append(arena)


def _outermost(hosts: dict[Any, tuple[Any, int]], key: Any) -> tuple[Any, int]:
    """Where ``key`` lies, following ``hosts`` (key -> (host, byte offset in it)) outwards:
    the outermost host and the summed offset (``key`` itself and 0 when it has no host)."""
    offset = 0
    while key in hosts:
        key, inside = hosts[key]
        offset += inside
    return key, offset


def _descendants(plan: Plan) -> list[int]:
    """For each node, a bitmask of the nodes reachable from it (itself excluded)."""
    reach = [0] * len(plan.nodes)
    for i in reversed(plan.order):
        mask = 0
        for j in plan.successors[i]:
            mask |= reach[j] | (1 << j)
        reach[i] = mask
    return reach


def _intersection(masks: Iterator[int]) -> int:
    result = -1
    for mask in masks:
        result &= mask
    return max(result, 0)


def _view_closure(plan: Plan) -> dict[str, set[str]]:
    """For each operand, itself and every operand that may share its memory through layers
    that can return views (``fresh_outputs`` False), transitively."""
    direct: dict[str, set[str]] = {}
    for node in plan.nodes:
        if not node.kernel.fresh_outputs:
            for name in node.step.inputs:
                direct.setdefault(name, set()).update(node.step.outputs)
    closure: dict[str, set[str]] = {}
    for i in reversed(plan.order):  # consumers first, so each view's closure is known
        for name in plan.nodes[i].step.outputs:
            closure[name] = {name}.union(*(closure.get(v, {v}) for v in direct.get(name, ())))
    for name in plan.program.inputs:
        closure[name] = {name}.union(*(closure.get(v, {v}) for v in direct.get(name, ())))
    return closure
