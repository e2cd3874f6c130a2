"""Your own operator: a model uses torch.special.i0, which pnnx cannot convert, so the param
file keeps it as ``aten::i0``. Loading it fails with one error that lists every unsupported
type; one class and one ``@register`` line later it runs and matches PyTorch.

    python examples/custom_layer.py
"""

from __future__ import annotations

from common import bundled, check, enable_logging

from graphexec import Engine, UnsupportedOperatorError
from graphexec.layers import Layer, lookup, register
import numpy as np


def main() -> None:
    enable_logging("WARNING")
    param, inputs, expected = bundled("bessel_gate")
    types = [line.split()[0] for line in param.read_text().splitlines()[2:] if line.strip()]
    print(f"model: {param.name}: operator types {sorted(set(types))}")
    if lookup("aten::i0") is not None:
        raise SystemExit("graphexec now has aten::i0 built in: this example needs another unconverted operator")

    try:
        Engine.load(param)
    except UnsupportedOperatorError as exc:
        print(f"loading fails, as it should:\n{exc}")
        assert exc.unsupported == {"aten::i0": ["pnnx_0"]}, exc.unsupported
    else:
        raise SystemExit("loading should have failed: nothing computes aten::i0 yet")

    @register("aten::i0")  # the type pnnx left in the param file
    class BesselI0(Layer):
        """The modified Bessel function of the first kind, order 0, elementwise."""

        def infer_shapes(self, shapes):
            self.expect_inputs(shapes, 1)
            return [shapes[0]]

        def forward(self, inputs):
            x = inputs[0]
            return [np.i0(x).astype(x.dtype, copy=False)]  # np.i0 computes in float64

    print("registered BesselI0 for aten::i0")
    with Engine.load(param, threads=2, intra_op_threads=1) as engine:
        got = engine.forward(*inputs)
    check(got, expected, "with the custom layer vs PyTorch")


if __name__ == "__main__":
    main()
