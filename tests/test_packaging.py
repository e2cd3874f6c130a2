"""The wheel ships exactly the three import packages, so the registry never splits."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_the_wheel_holds_exactly_graphexec_layers_and_devices(tmp_path):
    pytest.importorskip("hatchling", reason="building the wheel needs hatchling (in the test extra)")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp_path)],
        check=True,
    )
    (wheel,) = tmp_path.glob("graphexec-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    top = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert top == {"graphexec", "layers", "devices"}
    assert "layers/conv.py" in names and "graphexec/engine.py" in names
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    assert "graphexec = graphexec.cli:main" in zipfile.ZipFile(wheel).read(entry_points).decode()
