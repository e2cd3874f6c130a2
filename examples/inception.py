"""An Inception-style network: load the bundled pnnx export, run it sequentially and with
branches in parallel, compare both with PyTorch's output, and time them, beside the
engine's own choice of workers for this plan.

    python examples/inception.py
"""

from __future__ import annotations

from common import bundled, check, enable_logging, median_ms
from graphexec import Engine, Trace
from graphexec.regions import regions
import numpy as np


def main() -> None:
    enable_logging()
    param, inputs, expected = bundled("inception_mini")
    # Both with one BLAS thread per node: OpenBLAS itself rounds differently with 1 and 2
    # threads, and the comparison is about the scheduler.
    sequential = Engine.load(param, threads=1, intra_op_threads=1)
    concurrent = Engine.load(param, threads=2, intra_op_threads=1)
    plan = concurrent.plan()
    print(f"model: {param.name}: {len(plan.nodes)} nodes, {len(plan.units)} units, "
          f"plan width {plan.width}, ideal speedup on 2 cores {plan.ideal_speedup(2):.2f}x")

    out_seq = sequential.forward(*inputs)
    out_par = concurrent.forward(*inputs)
    check(out_seq, expected, "sequential vs PyTorch")
    check(out_par, expected, "concurrent vs PyTorch")
    assert np.array_equal(out_seq, out_par), "the concurrent run must equal the sequential one bit for bit"
    print("concurrent == sequential: bit-identical")

    t_seq = median_ms(lambda: sequential.forward(*inputs))
    t_par = median_ms(lambda: concurrent.forward(*inputs))
    print(f"median latency: sequential {t_seq:.2f} ms, 2 workers {t_par:.2f} ms, speedup {t_seq / t_par:.2f}x")
    default = Engine.load(param)
    found = regions(plan, 2, 2)
    side_by_side = [r for r in found if not r.serial]
    print(f"engine default here: {default.threads} worker(s) x {default.intra_op_threads} BLAS thread(s): "
          f"{len(side_by_side)} of {len(found)} regions of the plan are estimated faster with their branches "
          "side by side than one node at a time with every core for BLAS")

    trace = Trace()
    concurrent.forward(*inputs, trace=trace)
    print(trace.summary())
    print("top class:", int(np.argmax(out_par)))
    concurrent.close()


if __name__ == "__main__":
    main()
