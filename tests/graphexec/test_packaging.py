"""The wheel ships one top-level package, ``graphexec``, with ``layers/`` and ``devices/``
inside it; from the wheel and from the source tree alike, graphexec imports them under its
own name, beside a user's own ``layers`` and ``devices`` packages, with one registry."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.paths import REPO

ROOT = REPO

#: Run in a directory holding a user's own ``layers`` and ``devices`` packages: graphexec
#: must load its own, the user's stay importable, and the registry is the one graphexec uses.
PROBE = """
import sys
import graphexec
from graphexec import Engine
import graphexec.layers as ours, graphexec.devices as our_devices
from graphexec.layers.registry import lookup
import layers, devices
assert layers.USER and devices.USER, "the user's packages were shadowed"
assert ours.__file__.startswith(sys.argv[1]), ours.__file__
assert our_devices.__file__.startswith(sys.argv[1]), our_devices.__file__
assert lookup("nn.Conv2d") is ours.lookup("nn.Conv2d") is not None
engine = Engine.load(sys.argv[2])
import numpy as np
print(engine.forward(np.zeros((1, 3, 32, 32), np.float32)).shape)
"""


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    pytest.importorskip("hatchling", reason="building the wheel needs hatchling (in the test extra)")
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps", "--no-build-isolation", "-q", "-w", str(out)],
        check=True,
    )
    (built,) = out.glob("graphexec-*.whl")
    return built


def _user_project(tmp_path: Path) -> Path:
    """A working directory with a user's own ``layers`` and ``devices`` packages."""
    project = tmp_path / "project"
    for name in ("layers", "devices"):
        (project / name).mkdir(parents=True)
        (project / name / "__init__.py").write_text("USER = True\n")
    return project


def _probe(cwd: Path, python_path: list[str], graphexec_home: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(python_path)}
    model = ROOT / "examples" / "models" / "inception_mini.pnnx.param"
    return subprocess.run([sys.executable, "-c", PROBE, str(graphexec_home), str(model)], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300, check=False)


def test_the_wheel_holds_one_top_level_package(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    top = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert top == {"graphexec"}
    assert {"graphexec/layers/conv.py", "graphexec/devices/opencl/kernels/conv_activation.cl",
            "graphexec/engine.py"} <= set(names)
    assert not any("__pycache__" in n for n in names)
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    assert "graphexec = graphexec.cli:main" in zipfile.ZipFile(wheel).read(entry_points).decode()


def test_the_wheel_is_typed_licensed_and_versioned_from_one_place(wheel):
    import graphexec

    archive = zipfile.ZipFile(wheel)
    names = archive.namelist()
    assert "graphexec/py.typed" in names
    assert any(n.endswith(".dist-info/licenses/LICENSE") or n.endswith(".dist-info/LICENSE") for n in names), names
    metadata = archive.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    assert f"\nVersion: {graphexec.__version__}\n" in metadata  # from graphexec/__init__.py, read by hatch
    assert wheel.name.startswith(f"graphexec-{graphexec.__version__}-")


def test_the_version_is_written_once():
    text = (ROOT / "pyproject.toml").read_text()
    assert 'dynamic = ["version"]' in text and "\nversion =" not in text
    assert (ROOT / "CHANGELOG.md").read_text().count(f"## {__import__('graphexec').__version__}") == 1


def test_the_installed_wheel_imports_beside_a_users_layers_and_devices(wheel, tmp_path):
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site), str(wheel)],
                   check=True)
    # the user's project first on the path, as a script's own folder is
    result = _probe(_user_project(tmp_path), [str(tmp_path / "project"), str(site)], site / "graphexec")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "(1, 10)"


def test_the_source_tree_imports_beside_a_users_layers_and_devices(tmp_path):
    project = _user_project(tmp_path)
    result = _probe(project, [str(project), str(ROOT)], ROOT)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "(1, 10)"


def test_the_folders_refuse_a_second_import_under_their_bare_names():
    code = "import sys; sys.path.insert(0, sys.argv[1]); import layers"
    result = subprocess.run([sys.executable, "-c", code, str(ROOT)], cwd=ROOT.parent, capture_output=True,
                            text=True, timeout=120, check=False)
    assert result.returncode != 0
    assert "import graphexec.layers, not layers" in result.stderr
