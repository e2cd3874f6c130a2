"""A griffe extension for the API reference: the docstrings' reStructuredText habits read
as Markdown. Roles (``:class:`~graphexec.trace.Trace```, ``:mod:`graphexec.regions```)
become code spans (``Trace``, ``graphexec.regions``), and a paragraph ending in ``::``
before an indented block ends in one colon (the block is code either way)."""

from __future__ import annotations

import re
from typing import Any

import griffe

_ROLE = re.compile(r":(?:class|func|meth|mod|data|attr|exc|obj):`(~?)([^`]+)`")
_LITERAL = re.compile(r"(?<=\S)::$", re.MULTILINE)


def _plain(match: re.Match[str]) -> str:
    short, target = match.group(1), match.group(2)
    return f"`{target.rsplit('.', 1)[-1] if short else target}`"


class SphinxRoles(griffe.Extension):
    """Rewrites the roles in every docstring griffe loads."""

    def on_object(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = _LITERAL.sub(":", _ROLE.sub(_plain, obj.docstring.value))
