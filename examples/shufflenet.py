"""A ShuffleNet-v2-style network: every unit splits its channels in two (torch.chunk),
transforms one half while the other passes through, concatenates and shuffles the
channels (nn.ChannelShuffle). Shows the plan's two paths per unit and checks the result.

    python examples/shufflenet.py
"""

from __future__ import annotations

from common import bundled, check, enable_logging, median_ms
from graphexec import Engine
import numpy as np


def main() -> None:
    enable_logging("WARNING")
    param, inputs, expected = bundled("shuffle_mini")
    engine = Engine.load(param, threads=2, intra_op_threads=1)
    plan = engine.plan()
    split = [n for n in plan.nodes if n.type == "torch.chunk"]
    shuffle = [n for n in plan.nodes if n.type == "nn.ChannelShuffle"]
    print(f"{len(split)} channel splits, {len(shuffle)} channel shuffles, {len(plan.nodes)} nodes in all")
    first = split[0]
    paths = [plan.nodes[j].name for j in plan.successors[first.index]]
    print(f"after {first.name}: the halves go to {paths}")
    got = engine.forward(*inputs)
    check(got, expected, "ShuffleNet vs PyTorch")
    reference = Engine.load(param, threads=1, intra_op_threads=1).forward(*inputs)
    assert np.array_equal(got, reference), "concurrent must equal sequential bit for bit"
    print(f"median latency, 2 workers: {median_ms(lambda: engine.forward(*inputs)):.2f} ms")
    engine.close()


if __name__ == "__main__":
    main()
