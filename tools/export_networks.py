"""Export whole torchvision networks with pnnx, with PyTorch's outputs, for the network
tests and benchmarks (needs ``pip install -e .[export]``; random weights, nothing downloaded).

The exports are large, so they go to ``artifacts/networks/<name>/`` (not committed)::

    python tools/export_networks.py                   # every network
    python tools/export_networks.py googlenet resnet50
    python tools/export_networks.py --peers-only googlenet   # add the peer formats alone
    python tools/export_networks.py --peers-only wide        # a bundled example's peers
    python tools/export_networks.py --shapes-only googlenet  # just shapes.npz, beside an export
    python tools/export_networks.py --no-peers               # pnnx files alone (as CI does)

Each folder holds ``model.pnnx.param``, ``model.pnnx.bin``, ``io.npz`` (``in0`` and
PyTorch's ``out0``) and ``shapes.npz``: PyTorch's outputs for the other input shapes of
:data:`OTHER_SHAPES` (batches 4 and 16, two other image sizes; for a video network
:data:`OTHER_VIDEO_SHAPES`), as ``<tag>_in0`` and ``<tag>_out0``, for the tests that run one
export at many shapes. Networks in :data:`FIXED_SHAPE` get none. BatchNorm statistics are randomised so that folding them is tested.
For benchmarks/peers.py the same model also goes out in the formats of the engines it is
compared with: ``model.ncnn.param``/``.bin`` (written by the same pnnx run, fp32 weights)
and ``model.onnx`` (``torch.onnx.export``). ``--peers-only`` writes just those and leaves
the pnnx files and ``io.npz`` alone, so tests reading them can run meanwhile; a bundled
example (``wide``, built as tools/export_examples.py builds it) gets its peer files in
``artifacts/peers/<name>/``. ``--no-peers`` writes no peer files at all.

A network needs a few times its weights in free disk while it is exported (VGG-11 about
1.1 GB, 2.1 GB with its peers). One that would not fit is skipped with a message, not left
half written, so the tests that need it skip and say how to export it.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
TARGET = ROOT / "artifacts" / "networks"

#: name -> (torchvision constructor, under torchvision.models, constructor kwargs, input
#: size: an image side, or a whole input shape)
NETWORKS: dict[str, tuple[str, dict, int | tuple[int, ...]]] = {
    "googlenet": ("googlenet", {"aux_logits": False, "init_weights": True}, 224),
    "inception_v3": ("inception_v3", {"aux_logits": False, "init_weights": True}, 299),
    "resnet50": ("resnet50", {}, 224),
    "densenet121": ("densenet121", {}, 224),
    "mobilenet_v3_small": ("mobilenet_v3_small", {}, 224),
    "shufflenet_v2": ("shufflenet_v2_x1_0", {}, 224),
    "efficientnet_b0": ("efficientnet_b0", {}, 224),
    "squeezenet1_1": ("squeezenet1_1", {}, 224),
    "resnext50": ("resnext50_32x4d", {}, 224),
    "mobilenet_v2": ("mobilenet_v2", {}, 224),
    "mobilenet_v3_large": ("mobilenet_v3_large", {}, 224),
    "mnasnet": ("mnasnet1_0", {}, 224),
    "regnet_y_400mf": ("regnet_y_400mf", {}, 224),
    "convnext_tiny": ("convnext_tiny", {}, 224),
    "vgg11": ("vgg11", {}, 224),
    "alexnet": ("alexnet", {}, 224),
    "swin_t": ("swin_t", {}, 224),
    "maxvit_t": ("maxvit_t", {}, 224),
    "r3d_18": ("video.r3d_18", {}, (1, 3, 4, 112, 112)),
}

#: Networks whose export fixes its input shape (window partitions and reshapes to constant
#: sizes in the graph): no other shapes are exported or tested for them.
FIXED_SHAPE = {"swin_t", "maxvit_t"}

#: tag -> input shape (channels first; ``size`` is the network's own image size).
OTHER_SHAPES: dict[str, tuple[int, int, int | str, int | str]] = {
    "b4": (4, 3, "size", "size"),
    "b16": (16, 3, "size", "size"),
    "h192w160": (1, 3, 192, 160),
    "b2h256w288": (2, 3, 256, 288),
}

#: tag -> input shape for the video networks (whole shapes: batch, channels, frames, H, W).
OTHER_VIDEO_SHAPES: dict[str, tuple[int, ...]] = {
    "b2": (2, 3, 4, 112, 112),
    "t8h96w80": (1, 3, 8, 96, 80),
}

#: The networks the foundation's acceptance names; the others are extra coverage.
CORE = ["googlenet", "inception_v3", "resnet50", "densenet121", "mobilenet_v3_small", "shufflenet_v2", "efficientnet_b0"]


def input_shape(name: str) -> tuple[int, ...]:
    size = NETWORKS[name][2]
    return size if isinstance(size, tuple) else (1, 3, size, size)


def build(name: str) -> torch.nn.Module:
    import importlib

    ctor, kwargs, _ = NETWORKS[name]
    where, _, function = ctor.rpartition(".")
    module = importlib.import_module("torchvision.models" + (f".{where}" if where else ""))
    torch.manual_seed(0)
    model = getattr(module, function)(weights=None, **kwargs).eval()
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, (torch.nn.BatchNorm1d, torch.nn.BatchNorm2d, torch.nn.BatchNorm3d)):
                m.running_mean.uniform_(-0.1, 0.1)
                m.running_var.uniform_(0.5, 1.5)
    return model


def build_example(name: str) -> tuple[torch.nn.Module, tuple[torch.Tensor, ...]]:
    """A bundled example model and its inputs, made exactly as tools/export_examples.py makes
    them (so the outputs match ``examples/models/<name>.io.npz``)."""
    from tools.example_models import MODELS

    make, shapes = MODELS[name]
    torch.manual_seed(0)
    model = make().eval()
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.uniform_(-0.2, 0.2)
                m.running_var.uniform_(0.5, 1.5)
    return model, tuple(torch.rand(*s) for s in shapes)


#: Free disk kept beyond an export's own files, for everything else on the machine.
DISK_MARGIN_BYTES = 512 << 20


class NoRoom(Exception):
    """Too little free disk to export a network whole."""


def weight_bytes(model: torch.nn.Module) -> int:
    """Bytes of the model's float32 parameters and buffers: the size of each weight file."""
    return sum(t.numel() * 4 for t in (*model.parameters(), *model.buffers()))


def check_room(name: str, model: torch.nn.Module, peers: bool, target: Path) -> None:
    """Refuse an export the disk cannot hold: the TorchScript file and pnnx's weights are
    written side by side, and with peers ncnn's and ONNX's weights besides."""
    copies = 4 if peers else 2
    needed = copies * weight_bytes(model) + DISK_MARGIN_BYTES
    free = min(shutil.disk_usage(tempfile.gettempdir()).free, shutil.disk_usage(target).free)
    if free < needed:
        raise NoRoom(f"{name}: skipped, {needed >> 20} MiB of free disk needed and {free >> 20} MiB free")


def export(name: str, peers_only: bool = False, peers: bool = True) -> Path:
    """Export network ``name`` (or, with ``peers_only``, only its ncnn and ONNX files; with
    ``peers`` false, none of them)."""
    import pnnx

    if name in NETWORKS:
        model = build(name)
        generator = torch.Generator().manual_seed(1)
        inputs: tuple[torch.Tensor, ...] = (torch.rand(*input_shape(name), generator=generator),)
        target = TARGET / name
    else:  # a bundled example: its pnnx files live in examples/models already
        model, inputs = build_example(name)
        peers_only = True
        target = ROOT / "artifacts" / "peers" / name
    with torch.no_grad():
        y = model(*inputs)
    target.mkdir(parents=True, exist_ok=True)
    check_room(name, model, peers, target)
    # Files nobody reads go to the null device rather than filling the disk.
    unwanted = {} if peers else {key: os.devnull for key in ("pnnxonnx", "ncnnparam", "ncnnbin", "ncnnpy")}
    with tempfile.TemporaryDirectory() as tmp:
        try:  # fp16=False: ncnn's weights stay float32 (its default stores them as float16)
            pnnx.export(model, str(Path(tmp) / "model.pt"), inputs, fp16=False, **unwanted)
        except Exception as exc:  # pnnx may fail after writing the files we need
            if not (Path(tmp) / "model.pnnx.param").exists():
                raise
            print(f"  (pnnx raised after writing the model, kept it: {type(exc).__name__})")
        (Path(tmp) / "model.pt").unlink()  # no longer needed: free its space before the moves
        pnnx_files = () if peers_only else (".pnnx.param", ".pnnx.bin")
        keep = ((".ncnn.param", ".ncnn.bin") if peers else ()) + pnnx_files
        for suffix in keep:
            if (Path(tmp) / f"model{suffix}").exists():
                shutil.move(Path(tmp) / f"model{suffix}", target / f"model{suffix}")
            else:
                print(f"  (pnnx wrote no model{suffix})")
    if peers and importlib.util.find_spec("onnx") is not None:  # the onnxruntime peer's model
        export_onnx(model, inputs, target / "model.onnx")
    elif peers_only:
        print("  (no ONNX export: pip install onnx for the onnxruntime peer)")
    if not peers_only:
        np.savez(target / "io.npz", in0=inputs[0].numpy(), out0=y.numpy())
        if name not in FIXED_SHAPE:
            export_shapes(name, model)
    return target


def other_shapes(name: str) -> dict[str, tuple[int, ...]]:
    """The input shapes besides its own that network ``name`` is checked at, by tag."""
    size = NETWORKS[name][2]
    if isinstance(size, tuple):
        return OTHER_VIDEO_SHAPES
    return {tag: tuple(size if d == "size" else d for d in shape) for tag, shape in OTHER_SHAPES.items()}


def export_shapes(name: str, model: torch.nn.Module | None = None) -> Path:
    """PyTorch's outputs of network ``name`` for each of :func:`other_shapes`."""
    model = build(name) if model is None else model
    arrays = {}
    generator = torch.Generator().manual_seed(2)
    for tag, shape in other_shapes(name).items():
        x = torch.rand(*shape, generator=generator)
        with torch.no_grad():
            arrays[f"{tag}_in0"], arrays[f"{tag}_out0"] = x.numpy(), model(x).numpy()
    path = TARGET / name / "shapes.npz"
    np.savez(path, **arrays)
    return path


def export_onnx(model: torch.nn.Module, inputs: tuple[torch.Tensor, ...], path: Path) -> None:
    """``model`` as ONNX (opset 17), inputs ``in0..`` and outputs ``out0..`` as in pnnx."""
    import warnings

    with warnings.catch_warnings():  # the TorchScript exporter is deprecated, not gone
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.onnx.export(model, inputs, str(path), dynamo=False, opset_version=17,
                          input_names=[f"in{i}" for i in range(len(inputs))], output_names=["out0"])


if __name__ == "__main__":
    args = sys.argv[1:]
    only_peers = "--peers-only" in args
    only_shapes = "--shapes-only" in args
    with_peers = "--no-peers" not in args
    names = [a for a in args if not a.startswith("--")] or list(NETWORKS)
    skipped = []
    for network in names:
        start = time.perf_counter()
        if only_shapes and network in FIXED_SHAPE:
            print(f"{network}: its export fixes its input shape, so it has no other shapes")
            continue
        try:
            folder = export_shapes(network) if only_shapes else export(network, only_peers, with_peers)
        except NoRoom as exc:
            print(exc, flush=True)
            skipped.append(network)
            continue
        print(f"{network}: exported to {folder} in {time.perf_counter() - start:.0f} s", flush=True)
    if skipped:
        print(f"not exported for lack of disk (their tests skip): {' '.join(skipped)}")
