"""Export whole torchvision networks with pnnx, with PyTorch's outputs, for the network
tests and benchmarks (needs ``pip install -e .[export]``; random weights, nothing downloaded).

The exports are large, so they go to ``artifacts/networks/<name>/`` (not committed)::

    python tools/export_networks.py                   # every network
    python tools/export_networks.py googlenet resnet50

Each folder holds ``model.pnnx.param``, ``model.pnnx.bin`` and ``io.npz`` (``in0`` and
PyTorch's ``out0``). BatchNorm statistics are randomised so that folding them is tested.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parent.parent
TARGET = ROOT / "artifacts" / "networks"

#: name -> (torchvision constructor name, constructor kwargs, input size)
NETWORKS: dict[str, tuple[str, dict, int]] = {
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
}

#: The networks the foundation's acceptance names; the others are extra coverage.
CORE = ["googlenet", "inception_v3", "resnet50", "densenet121", "mobilenet_v3_small", "shufflenet_v2", "efficientnet_b0"]


def build(name: str) -> torch.nn.Module:
    import torchvision.models as tvm

    ctor, kwargs, _ = NETWORKS[name]
    torch.manual_seed(0)
    model = getattr(tvm, ctor)(weights=None, **kwargs).eval()
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, (torch.nn.BatchNorm2d, torch.nn.BatchNorm1d)):
                m.running_mean.uniform_(-0.1, 0.1)
                m.running_var.uniform_(0.5, 1.5)
    return model


def export(name: str) -> Path:
    import pnnx

    model = build(name)
    size = NETWORKS[name][2]
    x = torch.rand(1, 3, size, size, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        y = model(x)
    target = TARGET / name
    target.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        try:
            pnnx.export(model, str(Path(tmp) / "model.pt"), (x,))
        except Exception as exc:  # pnnx may fail after writing the files we need
            if not (Path(tmp) / "model.pnnx.param").exists():
                raise
            print(f"  (pnnx raised after writing the model, kept it: {type(exc).__name__})")
        for suffix in (".pnnx.param", ".pnnx.bin"):
            shutil.copy(Path(tmp) / f"model{suffix}", target / f"model{suffix}")
    np.savez(target / "io.npz", in0=x.numpy(), out0=y.numpy())
    return target


if __name__ == "__main__":
    for network in sys.argv[1:] or NETWORKS:
        start = time.perf_counter()
        folder = export(network)
        print(f"{network}: exported to {folder} in {time.perf_counter() - start:.0f} s", flush=True)
