"""What loading a model costs in memory, estimated before anything of it is built, so that
``memory_limit`` refuses a model too large to load as it refuses inputs too large to run.

Loading holds, per operator, its parsed line, its layer, its node in the plan, its place
in the memory plan and its tensors' views: 1.6 to 4.6 kB at the peak on the synthetic
graphs of benchmarks/load_scaling.py (chains, fans, nested tuples, runs of views; see
docs/benchmarks.md), so :data:`BYTES_PER_OPERATOR` is about twice the most. A long list
param costs per character of the file instead (a list of 10^7 small ints: 80 MB of list
for 20 MB of text), hence :data:`BYTES_PER_CHARACTER`.
"""

from __future__ import annotations

from graphexec.errors import ModelFormatError

#: Bytes of the engine's own structures per operator, at most (see the module docstring).
BYTES_PER_OPERATOR = 8192
#: Bytes per character of the param file, for what its params become.
BYTES_PER_CHARACTER = 16
#: Bytes per byte of the weight archive's central directory: zipfile holds about 530 bytes
#: for each entry, which takes 46 bytes and its name there.
BYTES_PER_DIRECTORY_BYTE = 16
#: Bytes a plan (one per input shape) holds per node.
BYTES_PER_PLAN_NODE = 4096


def check_load(operators: int, characters: int, memory_limit: int | None, path: str | None = None) -> None:
    """A ModelFormatError where loading ``operators`` from ``characters`` of param text
    would take more than ``memory_limit`` bytes (None: no limit)."""
    need = BYTES_PER_OPERATOR * operators + BYTES_PER_CHARACTER * characters
    if memory_limit is not None and need > memory_limit:
        raise ModelFormatError(
            f"loading its {operators:,} operators ({characters:,} characters of params) would take about "
            f"{_size(need)}, more than the memory_limit of {_size(memory_limit)}", path=path)


def plans_kept(nodes: int, memory_limit: int, most: int) -> int:
    """How many plans (one per input shape) to keep for a program of ``nodes`` nodes: at most
    ``most``, and no more than a quarter of ``memory_limit`` holds (one at least)."""
    return max(1, min(most, memory_limit // 4 // (BYTES_PER_PLAN_NODE * max(nodes, 1))))


def check_directory(directory_bytes: int, memory_limit: int | None, path: str | None = None) -> None:
    """A ModelFormatError where reading a weight archive's central directory of
    ``directory_bytes`` would take more than ``memory_limit`` bytes."""
    need = BYTES_PER_DIRECTORY_BYTE * directory_bytes
    if memory_limit is not None and need > memory_limit:
        raise ModelFormatError(
            f"the weight archive's directory ({directory_bytes:,} bytes, many entries) would take about "
            f"{_size(need)} to read, more than the memory_limit of {_size(memory_limit)}", path=path)


def _size(count: int) -> str:
    """``count`` bytes for a message: in MiB, or in bytes below one."""
    return f"{count >> 20:,} MiB" if count >= 1 << 20 else f"{count:,} bytes"
