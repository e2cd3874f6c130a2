"""Export the per-operator golden fixtures with pnnx (needs ``pip install -e .[export]``, and
torchaudio for its spectrogram cases).

Each module in ``tools/cases/`` defines ``CASES``, a list of :class:`Case`. For each case
this script runs the module in PyTorch, exports it with ``pnnx.export`` and stores, under
``tests/fixtures/ops/<family>/<case>/``::

    model.pnnx.param   model.pnnx.bin   io.npz (in0.., out0.. as PyTorch computed them)
    more.npz           (only for cases with ``more_inputs``: s<k>_in<i>, s<k>_out<j> per set)

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
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures" / "ops"
sys.path.insert(0, str(ROOT))

import graphexec
from tools.cases import Case


def export_case(family: str, case: Case) -> Path:
    """Run and export one case (``graphexec.export``); return the folder it was written to."""
    torch.manual_seed(0)
    target = FIXTURES / family / case.name
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    graphexec.export(case.module, tuple(case.inputs), target / "model", check=False, dynamic_inputs=case.inputs2,
                     check_trace=case.check_trace)
    (target / "model.io.npz").rename(target / "io.npz")
    if case.more_inputs:
        np.savez_compressed(target / "more.npz", **more_arrays(case))
    return target


def more_arrays(case: Case) -> dict[str, np.ndarray]:
    """PyTorch's outputs for each of the case's extra input sets, keyed s<k>_in<i> / s<k>_out<j>."""
    arrays = {}
    case.module.eval()
    for k, inputs in enumerate(case.more_inputs):
        with torch.no_grad():
            outputs = case.module(*inputs)
        outputs = flattened(outputs)
        arrays.update({f"s{k}_in{i}": t.numpy() for i, t in enumerate(inputs)})
        arrays.update({f"s{k}_out{j}": t.resolve_conj().resolve_neg().numpy() for j, t in enumerate(outputs)})
    return arrays


def flattened(value) -> list:
    """A module's outputs as one list, nested tuples flattened as graphexec returns them."""
    if isinstance(value, (tuple, list)):
        return [leaf for item in value for leaf in flattened(item)]
    return [value]


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
