"""Which nodes of a plan reach which, in about linear time and memory.

The memory plan asks whether every node that touches one tensor has a path in the DAG to
every node that writes another. A bitmask of descendants per node answers at once, but
takes n^2 bits and as many word operations to build (10^5 nodes: 1.2 GB). Here the
nodes are covered by *chains*, each a sequence of nodes every one of which reaches the
next, found in one pass in topological order: a node extends a chain whose last node is
among its ancestors (its predecessor's chain first), or starts a new one. Reachable
positions on a chain are all those from some position on, so each node keeps, per chain,
the first position on it that the node reaches: ``u`` reaches ``w`` exactly when ``u``'s
label on ``w``'s chain is at most ``w``'s position. That is n x k numbers for k chains, and
k is the width the cover needs, a handful for the networks we know (an Inception block
adds three chains while it runs, which end when it does).

Past :data:`MAX_CHAINS` chains the nodes left over get none, and "does anything reach
this node?" is answered no for them: the memory plan then shares fewer bytes, never
unsafely. Labels are numpy rows, made and dropped as the passes go, so the passes hold
labels only for the nodes whose neighbours are still to come.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np

#: Most chains a cover may use (each costs every label 4 bytes).
MAX_CHAINS = 32
#: "Reaches nothing on this chain".
NEVER = np.iinfo(np.int32).max


class Chains:
    """A cover of a DAG's nodes by chains: ``chain[v]`` (-1: none) and ``position[v]``."""

    def __init__(self, order: Sequence[int], predecessors: Sequence[Sequence[int]],
                 successors: Sequence[Sequence[int]], max_chains: int = MAX_CHAINS):
        n = len(order)
        self.chain: list[int] = [-1] * n
        self.position: list[int] = [0] * n
        lengths: list[int] = []
        last = np.full(max_chains, -2, np.int32)  # the position of each chain's last node
        below: dict[int, np.ndarray] = {}  # node -> per chain, the highest position of an ancestor (-1: none)
        waiting = [len(s) for s in successors]
        for v in order:
            preds = predecessors[v]
            seen = np.full(max_chains, -1, np.int32)
            for p in preds:
                np.maximum(seen, below[p], out=seen)
            for p in preds:
                c = self.chain[p]
                if c >= 0 and self.position[p] > seen[c]:
                    seen[c] = self.position[p]
            c = next((self.chain[p] for p in preds
                      if self.chain[p] >= 0 and lengths[self.chain[p]] - 1 == self.position[p]), -1)
            if c < 0:
                open_chains = np.flatnonzero(seen[:len(lengths)] == last[:len(lengths)])
                if open_chains.size:
                    c = int(open_chains[0])
                elif len(lengths) < max_chains:
                    c = len(lengths)
                    lengths.append(0)
            if c >= 0:
                self.chain[v], self.position[v] = c, lengths[c]
                last[c] = lengths[c]
                lengths[c] += 1
            if successors[v]:
                below[v] = seen
            for p in preds:
                waiting[p] -= 1
                if waiting[p] == 0:
                    del below[p]
        #: How many chains the cover uses.
        self.count = len(lengths)

    def reach(self, order: Sequence[int], predecessors: Sequence[Sequence[int]],
              successors: Sequence[Sequence[int]]) -> Iterator[tuple[int, np.ndarray]]:
        """Each node (``order`` backwards) with its label: per chain, the first position on it
        of a node it reaches (strictly: itself excluded), or :data:`NEVER`."""
        k = max(self.count, 1)
        labels: dict[int, np.ndarray] = {}
        waiting = [len(p) for p in predecessors]
        for u in reversed(order):
            succs = successors[u]
            label = np.full(k, NEVER, np.int32)
            for s in succs:
                np.minimum(label, labels[s], out=label)
            for s in succs:
                c = self.chain[s]
                if c >= 0 and self.position[s] < label[c]:
                    label[c] = self.position[s]
            yield u, label
            if predecessors[u]:
                labels[u] = label
            for s in succs:
                waiting[s] -= 1
                if waiting[s] == 0:
                    del labels[s]
