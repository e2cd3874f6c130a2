"""Whole torchvision networks, exported by tools/export_networks.py (a detector by
tools/export_detectors.py), match PyTorch.

The exports are too large to commit; they are made on demand into artifacts/networks/
(CI makes them). A network that has not been exported is skipped, saying how to export it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from graphexec import Engine
from tests.golden import assert_matches, assert_same_detections, run_layers
from tests.paths import REPO

NETWORKS = REPO / "artifacts" / "networks"
NAMES = ["googlenet", "inception_v3", "resnet50", "densenet121", "mobilenet_v3_small", "shufflenet_v2",
         "efficientnet_b0", "squeezenet1_1", "resnext50", "mobilenet_v2", "mobilenet_v3_large", "mnasnet",
         "regnet_y_400mf", "convnext_tiny", "vgg11", "alexnet", "swin_t", "maxvit_t", "r3d_18"]
#: Exports whose graph fixes the input shape (window partitions reshaped to constant sizes).
FIXED_SHAPE = {"swin_t", "maxvit_t"}
VIDEO = {"r3d_18"}


def exported(name: str) -> Path:
    folder = NETWORKS / name
    if not (folder / "model.pnnx.param").exists():
        pytest.skip(f"{name} is not exported: run `python tools/export_networks.py {name}` (needs .[export])")
    return folder


@pytest.mark.parametrize("name", NAMES)
def test_network_matches_pytorch_and_concurrent_equals_sequential(name):
    folder = exported(name)
    with np.load(folder / "io.npz") as io:
        x, want = io["in0"], io["out0"]
    # Given threads, an engine runs one BLAS thread per worker and shares nothing out, so
    # every thread count gives the sequential bits (OpenBLAS itself rounds differently
    # with 1 and 2 threads, whatever the scheduler does).
    sequential = Engine.load(folder / "model.pnnx.param", threads=1)
    got = sequential.forward(x)
    scale = float(np.abs(want).max())
    diff = float(np.abs(got - want).max())
    assert got.dtype == np.float32
    assert diff <= 1e-4 * scale, f"{name}: max|diff| {diff:.3g} > 1e-4 x {scale:.3g}"
    for threads in (2, 4):
        with Engine.load(folder / "model.pnnx.param", threads=threads) as concurrent:
            assert np.array_equal(concurrent.forward(x), got), f"{name}: {threads} workers differ from sequential"


IMAGE_TAGS = ["b4", "b16", "h192w160", "b2h256w288"]
VIDEO_TAGS = ["b2", "t8h96w80"]
SHAPE_CASES = [(name, tag) for name in NAMES if name not in FIXED_SHAPE
               for tag in (VIDEO_TAGS if name in VIDEO else IMAGE_TAGS)]


@pytest.mark.parametrize(("name", "tag"), SHAPE_CASES)
def test_network_runs_other_batches_and_sizes_like_pytorch(name, tag):
    """One export, many input shapes: other batches and image (or clip) sizes are
    re-planned (shapes inferred again, a memory plan made) and match PyTorch."""
    folder = exported(name)
    if not (folder / "shapes.npz").exists():
        pytest.skip(f"no shapes.npz: run `python tools/export_networks.py --shapes-only {name}`")
    with np.load(folder / "shapes.npz") as io:
        x, want = io[f"{tag}_in0"], io[f"{tag}_out0"]
    engine = Engine.load(folder / "model.pnnx.param")
    got = engine.forward(x)
    assert got.shape == want.shape
    scale = float(np.abs(want).max())
    diff = float(np.abs(got - want).max())
    assert diff <= 1e-4 * scale, f"{name} at {x.shape}: max|diff| {diff:.3g} > 1e-4 x {scale:.3g}"
    # The cached plan and arena again. Not bit for bit: a default engine runs a batch in
    # parts once the process has made one call at a time for a minute, and on one thread
    # while the cores are busy, each rounding its own way; a stale arena would be far off.
    again = engine.forward(x)
    assert float(np.abs(again - got).max()) <= 1e-5 * scale, "the second call (cached plan and arena) differs"


# -- a detector: torchvision's Faster R-CNN (MobileNetV3-Large 320 FPN), exported by
# tools/export_detectors.py ----------------------------------------------------------------
def exported_detector(name: str) -> Path:
    folder = NETWORKS / name
    if not (folder / "model.pnnx.param").exists():
        pytest.skip(f"{name} is not exported: run `python tools/export_detectors.py {name}` (needs .[export])")
    return folder


def _io(folder: Path) -> tuple[np.ndarray, list[np.ndarray]]:
    with np.load(folder / "io.npz") as io:
        return io["in0"], [io[f"out{i}"] for i in range(len(io.files) - 1)]


def test_detector_regions_match_pytorch_and_concurrent_equals_sequential():
    """Backbone, FPN, RPN head, anchor decoding, each level's top proposals, multi-scale
    RoIAlign, box head and per-class box decoding: every size known before the run."""
    folder = exported_detector("fasterrcnn_regions")
    x, want = _io(folder)
    got = Engine.load(folder / "model.pnnx.param", threads=1).forward(x)
    assert len(got) == len(want) == 3
    for i, (g, w) in enumerate(zip(got, want)):
        assert_matches(g, w, what=f"fasterrcnn_regions out{i}")
    with Engine.load(folder / "model.pnnx.param", threads=2) as concurrent:
        assert all(np.array_equal(a, b) for a, b in zip(concurrent.forward(x), got)), "2 workers differ"


def test_whole_detector_layers_match_pytorch():
    """The whole detector (score thresholds, nms, the 100 best), run layer by layer: its
    boxes, scores and labels are PyTorch's."""
    folder = exported_detector("fasterrcnn_mobilenet_v3_320")
    x, want = _io(folder)
    got = run_layers(folder / "model.pnnx.param", [x])
    assert_same_detections(got, want, "fasterrcnn_mobilenet_v3_320 layer by layer")


def test_whole_detector_runs_through_an_engine_and_concurrent_equals_sequential():
    """The whole detector through engines, planned up to each value whose size the run
    decides (how many boxes pass the score thresholds and nms) and on from there: PyTorch's
    detections; a second run plans nothing new; two and four workers give the
    sequential engine's bits."""
    folder = exported_detector("fasterrcnn_mobilenet_v3_320")
    x, want = _io(folder)
    with Engine.load(folder / "model.pnnx.param", threads=1) as sequential:
        got = sequential.forward(x)
        assert_same_detections(list(got), want, "fasterrcnn_mobilenet_v3_320")
        assert sequential.plan().rest is not None  # the sizes are the run's to find
        built = sequential.planner.built
        assert all(np.array_equal(a, b) for a, b in zip(sequential.forward(x), got))
        assert sequential.planner.built == built, "the second run planned again"
    for threads in (2, 4):
        with Engine.load(folder / "model.pnnx.param", threads=threads) as concurrent:
            again = concurrent.forward(x)
            assert all(a.tobytes() == b.tobytes() for a, b in zip(again, got)), f"{threads} workers differ"
