"""Export the example networks of tools/example_models.py into examples/models/ (needs torch).

For each model: ``<name>.pnnx.param``, ``<name>.pnnx.bin`` and ``<name>.io.npz`` (the inputs
``in0..`` it was run on and PyTorch's outputs ``out0..``), so the examples check themselves
without torch. Each export is made and checked by :func:`graphexec.export`. Usage::

    python tools/export_examples.py [name ...]
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import graphexec
from tools.example_models import MODELS

TARGET = ROOT / "examples" / "models"

#: Models that need a layer graphexec does not have built in: exported unchecked, since
#: their example registers the layer itself (examples/custom_layer.py).
NEEDS_CUSTOM_LAYER = {"bessel_gate"}


def export(name: str, target: Path = TARGET) -> Path:
    """Export example ``name`` into ``target``; return its param path."""
    build, shapes = MODELS[name]
    torch.manual_seed(0)
    model = build().eval()
    with torch.no_grad():  # give BatchNorm non-trivial statistics, as a trained net has
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.uniform_(-0.2, 0.2)
                m.running_var.uniform_(0.5, 1.5)
    inputs = tuple(torch.rand(*s) for s in shapes)
    param = graphexec.export(model, inputs, target / name, check=name not in NEEDS_CUSTOM_LAYER)
    print(f"{name}: {(target / f'{name}.pnnx.bin').stat().st_size / 1e3:.0f} kB of weights")
    return param


if __name__ == "__main__":
    for model_name in sys.argv[1:] or MODELS:
        export(model_name)
