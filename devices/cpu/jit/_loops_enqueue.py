"""A replayed OpenCL stretch enqueued in one call, as a numba loop (imported only by
:mod:`graphexec.devices.opencl.replay_compiled`, which lays out the table it reads)."""

from __future__ import annotations

from graphexec.devices.cpu.jit._intrinsics import (call_p_at, enqueue_copy_at, enqueue_kernel_at,
                                                  enqueue_write_at)
from graphexec.devices.cpu.jit.compiler import loop

# The table's columns (replay_compiled.py writes them): what the command is, its queue,
# five operands by kind (A-E: a kernel's handle, dimensions and the addresses of its global
# and local sizes; a copy's source, destination, their offsets and its size; a write's
# buffer, offset, size and host address), its waits and flushes as ranges of ``waits`` and
# ``flushes``, and what becomes of its event.
KIND, QUEUE, A, B, C, D, E, WAIT_START, WAIT_COUNT, EVENT, FLUSH_START, FLUSH_COUNT = range(12)
COLUMNS = 12
KERNEL, COPY, WRITE = 0, 1, 2
NO_EVENT, RELEASED, KEPT = -1, 0, 1
ENQUEUE_KERNEL, ENQUEUE_COPY, ENQUEUE_WRITE, FLUSH, RELEASE = range(5)


@loop
def enqueue(calls, table, waits, flushes, final, slots, wait_list, every_event, failed):
    """Enqueue ``table``'s commands in order through the OpenCL functions at ``calls``
    (``native.NAMES``' order). ``slots`` holds the events the waits index: the stretch's
    imports first, as the caller set them (0: none), then one per command, where a command
    whose ``EVENT`` is not ``NO_EVENT`` (every one, where ``every_event``) writes its own;
    those ``RELEASED`` are released once every command is enqueued, the others left to the
    caller. A failure stops the loop: ``failed`` holds the command's index (the table's
    length for the final flushes) and the status, and every event made is released."""
    n = table.shape[0]
    base = slots.shape[0] - n
    failed[0] = -1
    for i in range(n):
        status = 0
        for f in range(table[i, FLUSH_START], table[i, FLUSH_START] + table[i, FLUSH_COUNT]):
            if status == 0:
                status = call_p_at(calls[FLUSH], flushes[f])
        count = 0
        for w in range(table[i, WAIT_START], table[i, WAIT_START] + table[i, WAIT_COUNT]):
            made = slots[waits[w]]
            if made != 0:
                wait_list[count] = made
                count += 1
        listed = wait_list.ctypes.data if count else 0
        event = 0
        if every_event or table[i, EVENT] != NO_EVENT:
            event = slots.ctypes.data + 8 * (base + i)
        else:
            slots[base + i] = 0  # a handle of an earlier run's, the caller's since
        if status == 0:  # no flush before it failed
            status = _enqueue_one(calls, table, i, count, listed, event)
        if status != 0:
            failed[0], failed[1] = i, status
            _release(calls, table, slots, base, i, True)
            return
    for f in range(final.shape[0]):
        status = call_p_at(calls[FLUSH], final[f])
        if status != 0:
            failed[0], failed[1] = n, status
            _release(calls, table, slots, base, n, True)
            return
    if not every_event:
        _release(calls, table, slots, base, n, False)


@loop
def _enqueue_one(calls, table, i, count, listed, event):
    """Enqueue command ``i`` after the ``count`` events at address ``listed``, its own
    event written at address ``event`` (0: none); the OpenCL status."""
    kind = table[i, KIND]
    if kind == KERNEL:
        return enqueue_kernel_at(calls[ENQUEUE_KERNEL], table[i, QUEUE], table[i, A], table[i, B], 0,
                                 table[i, C], table[i, D], count, listed, event)
    if kind == COPY:
        return enqueue_copy_at(calls[ENQUEUE_COPY], table[i, QUEUE], table[i, A], table[i, B], table[i, C],
                               table[i, D], table[i, E], count, listed, event)
    return enqueue_write_at(calls[ENQUEUE_WRITE], table[i, QUEUE], table[i, A], 0, table[i, B],
                            table[i, C], table[i, D], count, listed, event)


@loop
def _release(calls, table, slots, base, end, every):
    """Release the events of commands ``0 .. end - 1`` marked ``RELEASED`` (``every``: all
    that were made), their slots cleared."""
    for i in range(end):
        if slots[base + i] != 0 and (every or table[i, EVENT] == RELEASED):
            call_p_at(calls[RELEASE], slots[base + i])
            slots[base + i] = 0
