"""The C entry of the BLAS numpy itself uses, for compiled loops that multiply matrices
with no Python between their other work and the product: the loops a node runs on
several threads in one compiled call (:mod:`graphexec.devices.cpu.jit.compiler`,
``parallel_loop``) call ``cblas_sgemm`` from each thread.

Only OpenBLAS is looked up (the BLAS of numpy's wheels): its library's own thread count
is left alone, and the loops call it from threads that each keep to one BLAS thread (see
docs/design/threads.md, "Compiled parts"). With another BLAS, or where the symbol is not
found, :func:`sgemm` is None and the kernels multiply through numpy on one thread.
"""

from __future__ import annotations

import ctypes
import threading
from dataclasses import dataclass

from loguru import logger


@dataclass(frozen=True)
class Sgemm:
    """``cblas_sgemm`` of numpy's OpenBLAS: its address, and whether its integers are 64-bit
    (an ILP64 build, as numpy's wheels are); ``gemv``: the address of its ``cblas_sgemv``
    (one row times a matrix streams the matrix once, where a product packs it first)."""

    address: int
    ilp64: bool
    library: str
    gemv: int = 0


_FOUND: list[Sgemm | None] = []
_LOCK = threading.Lock()


def sgemm() -> Sgemm | None:
    """numpy's ``cblas_sgemm`` (looked up once a process); None where it is not OpenBLAS's."""
    with _LOCK:
        if not _FOUND:
            _FOUND.append(_look_up())
        return _FOUND[0]


def _look_up() -> Sgemm | None:
    try:
        import numpy  # noqa: F401 - loads its BLAS, which threadpoolctl then finds
        from threadpoolctl import ThreadpoolController

        found = ThreadpoolController().select(internal_api="openblas").lib_controllers
    except Exception as exc:  # noqa: BLE001 - no threadpoolctl, or one that cannot inspect this process
        logger.debug("no BLAS for compiled products: {}", exc)
        return None
    for controller in found:
        path = getattr(controller, "filepath", None)
        if not path:
            continue
        try:
            library = ctypes.CDLL(path)
        except OSError:
            continue
        prefixes = dict.fromkeys([getattr(controller, "_symbol_prefix", ""), "scipy_", ""])
        for prefix in prefixes:
            for suffix in ("64_", ""):
                try:
                    function = getattr(library, f"{prefix}cblas_sgemm{suffix}")
                    gemv = getattr(library, f"{prefix}cblas_sgemv{suffix}")
                    config = getattr(library, f"{prefix}openblas_get_config{suffix}")
                except AttributeError:
                    continue
                config.restype = ctypes.c_char_p
                # The width of its integers, as the build says (a suffix is only a convention).
                ilp64 = b"USE64BITINT" in (config() or b"")
                address = ctypes.cast(function, ctypes.c_void_p).value
                if address:
                    return Sgemm(address, ilp64, path, ctypes.cast(gemv, ctypes.c_void_p).value or 0)
    logger.debug("no cblas_sgemm found in numpy's OpenBLAS")
    return None
