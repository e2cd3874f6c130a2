"""What the compiled kernels share: their tier, the loops they compile when prepared, and
the check that a run's arrays are of the types the loops were compiled for."""

from __future__ import annotations

import functools
import importlib
from collections.abc import Set
from types import ModuleType
from typing import Any

import numpy as np

from graphexec.devices.cpu.kernel import CpuKernel


@functools.cache
def _loaded(module: str) -> ModuleType:
    """A module of this package that imports numba, imported on first use: asked at every
    run of a node in parts, where an import statement costs about a microsecond a call."""
    return importlib.import_module(f"graphexec.devices.cpu.jit.{module}")


FLOAT32 = np.dtype(np.float32)
#: Parts of a flat run of float32 numbers start on multiples of this many (a cache line).
PARTS_ALIGN = 16
#: No activations: the chain of a kernel that has none.
NO_CODES = np.zeros(0, np.int64)
NO_PARAMS = np.zeros((0, 2), np.float32)


def fits(a: Any) -> bool:
    """Whether ``a`` is an array of the type the loops were compiled for: float32,
    C-contiguous, aligned and writeable (numpy's ``carray``); the loops' entry points take
    no other (see :meth:`graphexec.devices.cpu.jit.compiler.Loop.ready`)."""
    return type(a) is np.ndarray and a.dtype == FLOAT32 and a.flags.carray


def fitted(a: Any) -> np.ndarray:
    """``a`` as :func:`fits` wants it: itself, or a copy (a read-only or strided input)."""
    if fits(a):
        return a
    copy = np.empty(np.shape(a), FLOAT32)
    copy[...] = a
    return copy


def bounds(total: int, count: int) -> list[tuple[int, int]]:
    """``range(total)`` cut into ``count`` (at most ``total``) runs of nearly equal length."""
    count = max(1, min(count, total))
    cuts = [total * k // count for k in range(count + 1)]
    return list(zip(cuts, cuts[1:]))


class JitKernel(CpuKernel):
    """A compiled kernel. Its loops are compiled by :meth:`prepare` (from
    :mod:`graphexec.devices.cpu.jit.compiler`, imported then and not before)."""

    tier = "jit"
    #: Whether :meth:`activations` applies activations within the kernel's own loops.
    fuses_activations = False
    #: The activations applied to the output as it is written (set by a fused kernel).
    codes: np.ndarray = NO_CODES
    params: np.ndarray = NO_PARAMS

    def activations(self, codes: np.ndarray, params: np.ndarray) -> bool:
        """Apply the activation chain ``codes`` to the output as it is written; whether this
        kernel can (where it :attr:`fuses_activations`: its loops take ``codes``)."""
        if not self.fuses_activations:
            return False
        self.codes, self.params = codes, params
        return True

    def crosses(self) -> bool:
        found = self.__dict__.get("_crosses")
        if found is None:  # asked at every run of a shared node: worked out once
            found = self.__dict__["_crosses"] = self._can_cross()
        return found

    def _can_cross(self) -> bool:
        """What :meth:`crosses` answers (by default, no)."""
        return False

    def _parts(self) -> bool:
        """Whether :meth:`prepare` readies the loops :meth:`across` runs (their parts on
        numba's threads, see :func:`~graphexec.devices.cpu.jit.compiler.parts_supported`): for a node that
        may be shared out in compiled parts (``hints.pieces``, ``hints.parts``), where numba's
        threads may run them."""
        if self.hints.pieces < 2 or not self.hints.parts:
            return False
        from graphexec.devices.cpu.jit.compiler import parts_supported

        if not parts_supported():
            return False
        from graphexec.devices.cpu.jit.team import prepare

        prepare()  # the loop that finds numba's threads, to place them (see place_helpers)
        return True

    def _bands(self) -> int:
        """How many parts a whole run of this node computes one after another: those of a
        node shared out in compiled parts (so that it gives one result however it runs),
        else one."""
        return max(1, self.hints.pieces) if self.hints.parts else 1

    def _crossing(self, count: int, outputs: list[Any], loop: Any) -> bool:
        """Whether :meth:`across` may run ``loop`` (its parts loop, None if not readied) on
        ``count`` threads into ``outputs`` now."""
        if loop is None or count < 2 or not fits(outputs[0]):
            return False
        return _loaded("compiler").parts_live()

    def place_helpers(self, core: int, cores: Set[int]) -> None:
        """numba's threads, which run the parts of :meth:`across`, go to the cores other
        than the caller's (:mod:`graphexec.devices.cpu.jit.team`)."""
        _loaded("team").keep_off(core, cores)

    def _target(self, outputs: list[Any] | None) -> np.ndarray:
        """Where the loops write output 0: the one given where they can (:func:`fits`),
        else a new array (see :meth:`_handed`)."""
        given = outputs[0] if outputs is not None else None
        return given if given is not None and fits(given) else np.empty(self.output_specs[0].shape, FLOAT32)

    @staticmethod
    def _handed(outputs: list[Any] | None, out: np.ndarray) -> list[Any]:
        """A run's result once the loops wrote ``out`` (from :meth:`_target`): the given
        outputs, ``out`` copied into the first where it is another array."""
        if outputs is None:
            return [out]
        if out is not outputs[0]:
            np.copyto(outputs[0], out)
        return outputs

    @staticmethod
    def loop(module: str, name: str, *example: Any) -> Any:
        """Loop ``name`` of ``_loops_<module>``, compiled for arguments like ``example``."""
        from graphexec.devices.cpu.jit.compiler import ready

        return ready(module, name, *example)


class BandKernel(JitKernel):
    """A compiled kernel of one float32 output whose loop runs a band ``[start, end)`` of
    an axis (:meth:`band`), on views of its input and output shaped ``shape`` and
    ``out_shape``: a run is the whole axis, a piece one band of it."""

    shape: tuple[int, ...]
    out_shape: tuple[int, ...]
    #: The axis of ``out_shape`` whose bands the loop runs.
    band_axis = 1

    #: The loop that runs bands of the axis as parts on numba's threads (readied by
    #: :meth:`prepare` where :meth:`_parts`; None otherwise).
    parts_loop: Any = None

    def band(self, x: np.ndarray, out: np.ndarray, start: int, end: int) -> None:
        raise NotImplementedError(f"{type(self).__name__} must implement band")

    def parts(self, x: np.ndarray, out: np.ndarray, count: int) -> None:
        """The whole axis as ``count`` bands on numba's threads, in one call of
        :attr:`parts_loop`."""
        raise NotImplementedError(f"{type(self).__name__} must implement parts")

    def _can_cross(self) -> bool:
        return self.out_shape[self.band_axis] >= 2 and self._parts()

    def across(self, inputs: list[Any], outputs: list[np.ndarray], count: int) -> bool:
        if not self._crossing(count, outputs, self.parts_loop):
            return False
        x, out, _ = self._views(inputs, outputs)
        self.parts(x, out, count)
        return True

    def _views(self, inputs: list[Any], outputs: list[Any] | None) -> tuple[np.ndarray, np.ndarray, list[Any]]:
        x = fitted(np.asarray(inputs[0]).reshape(self.shape))
        if outputs is not None and fits(outputs[0]):
            return x, outputs[0].reshape(self.out_shape), outputs
        out = np.empty(self.output_specs[0].shape, FLOAT32)
        return x, out.reshape(self.out_shape), [out]

    def run(self, inputs: list[Any], outputs: list[Any] | None = None) -> list[Any]:
        x, out, result = self._views(inputs, outputs)
        self.band(x, out, 0, self.out_shape[self.band_axis])
        if outputs is not None and result is not outputs:
            np.copyto(outputs[0], result[0])
            return outputs
        return result
