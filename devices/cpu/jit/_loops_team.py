"""Which threads numba's are, as a numba loop (imported only by
:mod:`graphexec.devices.cpu.jit.team`)."""

from __future__ import annotations

from graphexec.devices.cpu.jit._intrinsics import int_call_at
from graphexec.devices.cpu.jit.compiler import parallel_loop

import numba  # isort: skip


@parallel_loop
def thread_ids(gettid, parts, out):
    """``out[t]`` = the system id of thread ``t`` of the calling thread's team of numba
    threads (``gettid`` at that address), for every thread that ran one of ``parts`` parts."""
    for k in numba.prange(parts):  # noqa: B007 - each part only says which thread ran it
        out[numba.get_thread_id()] = int_call_at(gettid)
