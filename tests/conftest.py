"""What every test shares."""

from __future__ import annotations

import pytest

from graphexec.occupancy import Occupancy


@pytest.fixture(autouse=True)
def _no_other_processes(request, monkeypatch):
    """A default engine uses its threads in a run only while other processes leave the cores
    free (graphexec.occupancy). On a shared test machine that would make every test that
    looks at those threads depend on the neighbours, so tests see no other process's load,
    unless marked ``other_processes`` (the tests of that measurement itself)."""
    if request.node.get_closest_marker("other_processes") is None:
        monkeypatch.setattr(Occupancy, "foreign_cores", lambda self: 0.0)
