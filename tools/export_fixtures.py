"""Export the per-operator golden fixtures with pnnx (needs ``pip install -e .[export]``).

Each module in ``tools/cases/`` defines ``CASES``, a list of :class:`Case`. For each case
this script runs the module in PyTorch, exports it with ``pnnx.export`` and stores, under
``tests/fixtures/ops/<family>/<case>/``::

    model.pnnx.param   model.pnnx.bin   io.npz (in0.., out0.. as PyTorch computed them)

so the golden tests need no torch. Usage::

    python tools/export_fixtures.py                 # every family
    python tools/export_fixtures.py conv pooling    # some families
    python tools/export_fixtures.py conv -k depthwise   # cases whose name contains a word
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures" / "ops"
sys.path.insert(0, str(ROOT))

from tools.cases import Case  # noqa: E402


def _flatten(value) -> list[np.ndarray]:
    if isinstance(value, (tuple, list)):
        return [leaf for item in value for leaf in _flatten(item)]
    return [value.detach().cpu().numpy()]


def export_case(family: str, case: Case) -> Path:
    """Run and export one case; return the folder it was written to."""
    import pnnx

    torch.manual_seed(0)
    module = case.module.eval()
    inputs = tuple(case.inputs)
    with torch.no_grad():
        outputs = _flatten(module(*inputs))
    target = FIXTURES / family / case.name
    with tempfile.TemporaryDirectory() as tmp:
        pt = Path(tmp) / "model.pt"
        try:
            if case.inputs2 is None:
                pnnx.export(module, str(pt), inputs)
            else:
                pnnx.export(module, str(pt), inputs, tuple(case.inputs2))
        except Exception as exc:  # pnnx may fail after writing the files we need
            if not (Path(tmp) / "model.pnnx.param").exists():
                raise
            print(f"  (pnnx raised after writing the model, kept it: {type(exc).__name__}: {exc})")
        if target.exists():
            shutil.rmtree(target)
        target.mkdir(parents=True)
        for suffix in (".pnnx.param", ".pnnx.bin"):
            shutil.copy(Path(tmp) / f"model{suffix}", target / f"model{suffix}")
    arrays = {f"in{i}": t.detach().cpu().numpy() for i, t in enumerate(inputs)}
    arrays.update({f"out{i}": a for i, a in enumerate(outputs)})
    np.savez_compressed(target / "io.npz", **arrays)
    return target


def families() -> list[str]:
    return sorted(m.name for m in pkgutil.iter_modules([str(ROOT / "tools" / "cases")]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("families", nargs="*", help="families to export (default: all)")
    parser.add_argument("-k", dest="keyword", help="only cases whose name contains this")
    args = parser.parse_args()
    for family in args.families or families():
        cases = importlib.import_module(f"tools.cases.{family}").CASES
        names = [c.name for c in cases]
        if len(set(names)) != len(names):
            raise SystemExit(f"{family}: case names repeat")
        for case in cases:
            if args.keyword and args.keyword not in case.name:
                continue
            path = export_case(family, case)
            types = sorted({line.split()[0] for line in (path / "model.pnnx.param").read_text().splitlines()[2:] if line.strip()})
            print(f"{family}/{case.name}: {' '.join(t for t in types if t not in ('pnnx.Input', 'pnnx.Output'))}")


if __name__ == "__main__":
    main()
