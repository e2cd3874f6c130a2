"""The registry that maps a pnnx operator type (``nn.Conv2d``, ``F.relu``) to its layer class.

Registration is explicit: a layer class says ``@register("nn.ReLU", "F.relu")`` and its
module is listed in :mod:`layers`; nothing scans globals. A miss names what *is* there.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from graphexec.layers.base import Layer

_LAYERS: dict[str, type[Layer]] = {}

L = TypeVar("L", bound="type[Layer]")


def register(*op_types: str) -> Callable[[L], L]:
    """Class decorator: the class computes every pnnx type in ``op_types``."""
    if not op_types:
        raise ValueError("register() needs at least one pnnx operator type")

    def decorate(cls: L) -> L:
        for op_type in op_types:
            existing = _LAYERS.get(op_type)
            if existing is not None and existing is not cls:
                raise ValueError(
                    f"{op_type} is already registered to {existing.__module__}.{existing.__qualname__}"
                )
            _LAYERS[op_type] = cls
        own = cls.__dict__.get("op_types", ())  # not a registered parent's types
        cls.op_types = tuple(own) + tuple(t for t in op_types if t not in own)
        return cls

    return decorate


def unregister(op_type: str) -> None:
    """Remove ``op_type`` (for tests and for users replacing a built-in layer)."""
    _LAYERS.pop(op_type, None)


def lookup(op_type: str) -> type[Layer] | None:
    """The layer class for ``op_type``, or ``None`` if nothing is registered."""
    return _LAYERS.get(op_type)


def registered_types() -> list[str]:
    """Every registered pnnx type, sorted."""
    return sorted(_LAYERS)
