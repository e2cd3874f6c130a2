"""A network with two inputs (an image and a feature vector) and two heads (class
probabilities and a box): inputs by position or by name, outputs as a tuple or a dict,
and an intermediate tensor extracted by its operand name.

    python examples/multi_io.py
"""

from __future__ import annotations

from common import bundled, check, enable_logging
from graphexec import Engine
import numpy as np


def main() -> None:
    enable_logging("WARNING")
    param, (image, meta), expected = bundled("two_heads")
    engine = Engine.load(param)
    print("inputs:", engine.input_shapes)
    print("outputs:", engine.output_shapes)

    probs, box = engine.forward(image, meta)                     # positional in, tuple out
    check([probs, box], expected, "two heads vs PyTorch")
    named = engine.forward({"in0": image, "in1": meta})          # by name: dict in, dict out
    assert np.array_equal(named["out0"], probs) and np.array_equal(named["out1"], box)
    print("by name:", {k: v.shape for k, v in named.items()})

    concat = next(op for op in engine.graph.operators if op.type == "torch.cat")
    joint_name = concat.outputs[0].name
    _, extracted = engine.forward(image, meta, extract=[joint_name])
    print(f"extracted the joined features (operand {joint_name}): shape {extracted[joint_name].shape}")
    assert np.isclose(probs.sum(), 1.0, atol=1e-5), "softmax head must sum to 1"


if __name__ == "__main__":
    main()
