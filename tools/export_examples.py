"""Export the example networks of tools/example_models.py into examples/models/ (needs torch).

For each model: ``<name>.pnnx.param``, ``<name>.pnnx.bin`` and ``<name>.io.npz`` (the inputs
``in0..`` it was run on and PyTorch's outputs ``out0..``), so the examples check themselves
without torch. Usage: ``python tools/export_examples.py [name ...]``.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tools.example_models import MODELS  # noqa: E402

TARGET = ROOT / "examples" / "models"


def export(name: str) -> None:
    import pnnx

    build, shapes = MODELS[name]
    torch.manual_seed(0)
    model = build().eval()
    with torch.no_grad():  # give BatchNorm non-trivial statistics, as a trained net has
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.uniform_(-0.2, 0.2)
                m.running_var.uniform_(0.5, 1.5)
    inputs = tuple(torch.rand(*s) for s in shapes)
    with torch.no_grad():
        outputs = model(*inputs)
    outputs = outputs if isinstance(outputs, tuple) else (outputs,)
    TARGET.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        pnnx.export(model, str(Path(tmp) / f"{name}.pt"), inputs)
        for suffix in (".pnnx.param", ".pnnx.bin"):
            shutil.copy(Path(tmp) / f"{name}{suffix}", TARGET / f"{name}{suffix}")
    arrays = {f"in{i}": t.numpy() for i, t in enumerate(inputs)}
    arrays.update({f"out{i}": t.numpy() for i, t in enumerate(outputs)})
    np.savez_compressed(TARGET / f"{name}.io.npz", **arrays)
    print(f"{name}: {(TARGET / f'{name}.pnnx.bin').stat().st_size / 1e3:.0f} kB of weights")


if __name__ == "__main__":
    for model_name in sys.argv[1:] or MODELS:
        export(model_name)
