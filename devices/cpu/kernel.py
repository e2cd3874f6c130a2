"""CPU kernels: the faster ways the CPU device runs a layer, registered per layer class.

::

    @cpu_kernel(Conv2d, Conv1d)         the layer classes it can run (their subclasses too)
    class WinogradConv(CpuKernel):
        tier = "numpy"                  "numpy", or "jit" for compiled ones (the jit extra)
        @classmethod
        def accepts(cls, layer, inputs, outputs, hints) -> bool   for these specs?
        def __init__(...)               prepare everything a run needs (plan time)
        def run(inputs, outputs=None)   compute; never change the kernel's state

For a node, the CPU device takes the first registered kernel of the layer's class (then of
its parents) whose tier it uses and that accepts the node; a layer no kernel accepts runs
its own ``forward``, the reference every kernel is tested against.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Hashable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from graphexec.devices.base import Hints, Kernel
from graphexec.layers.base import Layer
from graphexec.layers.specs import Spec

if TYPE_CHECKING:
    from graphexec.devices.cpu.device import CpuDevice

#: The kernel tiers: numpy code, and kernels compiled with numba (the ``jit`` extra).
TIERS = ("numpy", "jit")


class CpuKernel(Kernel):
    """A registered CPU kernel (see the module docstring)."""

    tier = "numpy"

    def __init__(self, layer: Layer, inputs: Sequence[Spec], outputs: Sequence[Spec], hints: Hints,
                 device: CpuDevice):
        super().__init__(layer, inputs, outputs)
        self.hints = hints
        self.device = device

    @classmethod
    def accepts(cls, layer: Layer, inputs: Sequence[Spec], outputs: Sequence[Spec], hints: Hints) -> bool:
        return True

    def stopped(self) -> None:
        self.device.scratch.forget_kept()  # a slot may be claimed for content never written


K = TypeVar("K", bound=type[CpuKernel])

_KERNELS: dict[type[Layer], list[type[CpuKernel]]] = {}
_LOCK = threading.Lock()


def cpu_kernel(*layer_classes: type[Layer]) -> Callable[[K], K]:
    """Class decorator: the kernel may run layers of these classes (and their subclasses)."""
    if not layer_classes:
        raise ValueError("cpu_kernel() needs at least one layer class")

    def decorate(cls: K) -> K:
        with _LOCK:
            for layer_class in layer_classes:
                _KERNELS.setdefault(layer_class, []).append(cls)
        return cls

    return decorate


def registered(layer_class: type[Layer]) -> list[type[CpuKernel]]:
    """The kernels that may run a layer of ``layer_class``, in the order they are tried:
    those registered for the class itself first, then for its parents."""
    found: list[type[CpuKernel]] = []
    for klass in layer_class.__mro__:
        found.extend(k for k in _KERNELS.get(klass, ()) if k not in found)
    return found


class SharedState:
    """What kernels derive from one layer and share between the plans of several input
    shapes (a convolution's aligned and transformed weights), made once per layer and
    dropped with it."""

    def __init__(self) -> None:
        self._by_layer: weakref.WeakKeyDictionary[Layer, dict[Hashable, Any]] = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()

    def get(self, layer: Layer, key: Hashable, make: Callable[[], Any]) -> Any:
        with self._lock:
            held = self._by_layer.setdefault(layer, {})
            if key not in held:
                held[key] = make()
            return held[key]
