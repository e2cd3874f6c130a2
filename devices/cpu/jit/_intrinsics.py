"""LLVM operations numba does not spell (imported only by the ``_loops_*`` modules).

* :func:`fma`: ``a * b + c`` rounded once. numba contracts nothing without ``fastmath``, so
  a polynomial written as products and sums costs two instructions a step; LLVM widens
  this intrinsic like any other arithmetic, to the CPU's fused instruction (a libm call on
  a CPU without one, with the same bits).
* :func:`pow2i`: ``2.0 ** k`` for an integer ``k`` of a normal float32's exponent, its bits
  shifted into place: one vector shift where a scaling array cost a second loop.
* :func:`sgemm_at`, :func:`sgemv_t_at`: calls of ``cblas_sgemm`` and ``cblas_sgemv`` at
  an address (numpy's OpenBLAS, see :mod:`graphexec.devices.cpu.jit.cblas`), so that a
  loop multiplies matrices without Python. The address is an argument, not a constant: a
  loop that holds none caches on disk.
* :func:`int_call_at`: a call of a C function of no argument at an address, returning an
  ``int`` (the address an argument, as above).
* :func:`enqueue_kernel_at`, :func:`enqueue_copy_at`, :func:`enqueue_write_at`,
  :func:`call_p_at`: OpenCL's enqueue calls, ``clFlush`` and ``clReleaseEvent`` at their
  addresses, for the loop that replays a device stretch without Python
  (:mod:`graphexec.devices.opencl.replay_compiled`).
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


_ROW_MAJOR, _NO_TRANS, _TRANS = 101, 111, 112


def _by_width(builder, ilp64, call) -> None:
    """``call(width)`` with the BLAS's integers 64 bits wide where ``ilp64``, else 32."""
    with builder.if_else(ilp64) as (wide, narrow):
        with wide:
            call(64)
        with narrow:
            call(32)


def _ints(builder, values, width: int) -> list:
    return [builder.trunc(v, ir.IntType(width)) if width < 64 else v for v in values]


@intrinsic
def sgemm_at(typingctx, address, ilp64, m, n, k, a, lda, b, ldb, c, ldc):  # noqa: ARG001
    """``C = A B`` of row-major float32 matrices (M x K times K x N), at byte addresses
    ``a``, ``b``, ``c`` with row strides ``lda``, ``ldb``, ``ldc`` in elements, by the
    ``cblas_sgemm`` at ``address`` (64-bit integers where ``ilp64``)."""
    sig = types.void(types.int64, types.boolean, *([types.int64] * 9))

    def codegen(context, builder, signature, args):
        address, ilp64, m, n, k, a, lda, b, ldb, c, ldc = args
        f32, pointer = ir.FloatType(), ir.IntType(8).as_pointer()
        a, b, c = (builder.inttoptr(v, pointer) for v in (a, b, c))

        def call(width: int) -> None:
            integer = ir.IntType(width)
            fnty = ir.FunctionType(ir.VoidType(), [_I32, _I32, _I32, integer, integer, integer, f32, pointer,
                                                    integer, pointer, integer, f32, pointer, integer])
            m_, n_, k_, lda_, ldb_, ldc_ = _ints(builder, (m, n, k, lda, ldb, ldc), width)
            builder.call(builder.inttoptr(address, fnty.as_pointer()), [
                ir.Constant(_I32, _ROW_MAJOR), ir.Constant(_I32, _NO_TRANS), ir.Constant(_I32, _NO_TRANS),
                m_, n_, k_, ir.Constant(f32, 1.0), a, lda_, b, ldb_, ir.Constant(f32, 0.0), c, ldc_])

        _by_width(builder, ilp64, call)
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def sgemv_t_at(typingctx, address, ilp64, m, n, a, lda, x, y):  # noqa: ARG001
    """``y = A^T x`` of a row-major float32 M x N matrix ``A`` (rows ``lda`` apart) and a
    vector ``x`` of M, into ``y`` of N (contiguous, at byte addresses), by the
    ``cblas_sgemv`` at ``address`` (64-bit integers where ``ilp64``)."""
    sig = types.void(types.int64, types.boolean, *([types.int64] * 6))

    def codegen(context, builder, signature, args):
        address, ilp64, m, n, a, lda, x, y = args
        f32, pointer = ir.FloatType(), ir.IntType(8).as_pointer()
        a, x, y = (builder.inttoptr(v, pointer) for v in (a, x, y))

        def call(width: int) -> None:
            integer = ir.IntType(width)
            fnty = ir.FunctionType(ir.VoidType(), [_I32, _I32, integer, integer, f32, pointer, integer, pointer,
                                                    integer, f32, pointer, integer])
            m_, n_, lda_ = _ints(builder, (m, n, lda), width)
            one = ir.Constant(integer, 1)
            builder.call(builder.inttoptr(address, fnty.as_pointer()), [
                ir.Constant(_I32, _ROW_MAJOR), ir.Constant(_I32, _TRANS), m_, n_, ir.Constant(f32, 1.0), a, lda_, x,
                one, ir.Constant(f32, 0.0), y, one])

        _by_width(builder, ilp64, call)
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def int_call_at(typingctx, address):  # noqa: ARG001
    """The ``int`` a C function of no argument at ``address`` returns (``gettid``, to learn
    which threads numba's are: :mod:`graphexec.devices.cpu.jit.team`)."""
    sig = types.int64(types.int64)

    def codegen(context, builder, signature, args):
        fnty = ir.FunctionType(_I32, [])
        return builder.sext(builder.call(builder.inttoptr(args[0], fnty.as_pointer()), []), ir.IntType(64))

    return sig, codegen


def _call_at(builder, address, kinds: str, values) -> ir.Value:
    """The ``int`` the C function at ``address`` returns for ``values`` (int64s), passed as
    ``kinds`` says, one letter each: ``p`` a pointer, ``z`` a ``size_t``, ``u`` a 32-bit
    integer."""
    pointer = ir.IntType(8).as_pointer()
    width = {"p": pointer, "z": ir.IntType(64), "u": _I32}
    fnty = ir.FunctionType(_I32, [width[k] for k in kinds])
    passed = [builder.inttoptr(v, pointer) if k == "p" else builder.trunc(v, _I32) if k == "u" else v
              for k, v in zip(kinds, values)]
    return builder.sext(builder.call(builder.inttoptr(address, fnty.as_pointer()), passed), ir.IntType(64))


def _c_function(kinds: str):
    """An intrinsic's signature and code for a call of the C function at its first argument,
    with the others passed as ``kinds`` says (see :func:`_call_at`), every one an int64."""
    sig = types.int64(*([types.int64] * (len(kinds) + 1)))

    def codegen(context, builder, signature, args):
        return _call_at(builder, args[0], kinds, args[1:])

    return sig, codegen


@intrinsic
def call_p_at(typingctx, address, handle):  # noqa: ARG001
    """``f(handle)`` for the C function ``int f(void *)`` at ``address`` (``clFlush``,
    ``clReleaseEvent``)."""
    return _c_function("p")


@intrinsic
def enqueue_kernel_at(typingctx, address, queue, kernel, dims, offset, global_size, local_size, waits,
                      wait_list, event):  # noqa: ARG001
    """``clEnqueueNDRangeKernel`` at ``address``, its pointers and handles as int64s."""
    return _c_function("ppuppppup")


@intrinsic
def enqueue_copy_at(typingctx, address, queue, src, dst, src_offset, dst_offset, size, waits, wait_list,
                    event):  # noqa: ARG001
    """``clEnqueueCopyBuffer`` at ``address``, its pointers and handles as int64s."""
    return _c_function("pppzzzupp")


@intrinsic
def enqueue_write_at(typingctx, address, queue, buffer, blocking, offset, size, host, waits, wait_list,
                     event):  # noqa: ARG001
    """``clEnqueueWriteBuffer`` at ``address``, its pointers and handles as int64s."""
    return _c_function("ppuzzpupp")
