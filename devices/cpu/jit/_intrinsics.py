"""Two LLVM operations numba does not spell, for the loops' hand-written exp (imported only
by the ``_loops_*`` modules).

* :func:`fma`: ``a * b + c`` rounded once. numba contracts nothing without ``fastmath``, so
  a polynomial written as products and sums costs two instructions a step; LLVM widens
  this intrinsic like any other arithmetic, to the CPU's fused instruction (a libm call on
  a CPU without one, with the same bits).
* :func:`pow2i`: ``2.0 ** k`` for an integer ``k`` of a normal float32's exponent, its bits
  shifted into place: one vector shift where a scaling array cost a second loop.
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.extending import intrinsic

_I32 = ir.IntType(32)


@intrinsic
def fma(typingctx, a, b, c):  # noqa: ARG001 - numba's signature for intrinsics
    sig = types.float32(types.float32, types.float32, types.float32)

    def codegen(context, builder, signature, args):
        return builder.fma(*args)

    return sig, codegen


@intrinsic
def pow2i(typingctx, k):  # noqa: ARG001
    sig = types.float32(types.int32)

    def codegen(context, builder, signature, args):
        biased = builder.add(args[0], ir.Constant(_I32, 127))
        return builder.bitcast(builder.shl(biased, ir.Constant(_I32, 23)), ir.FloatType())

    return sig, codegen
