"""Helpers for golden tests: where fixtures live and how results are compared."""

from __future__ import annotations

from pathlib import Path

import numpy as np

FIXTURES = Path(__file__).resolve().parent / "fixtures"
OPS = FIXTURES / "ops"


def op_cases() -> list[Path]:
    """Every exported per-operator case folder (holding model.pnnx.param and io.npz)."""
    return sorted(p.parent for p in OPS.glob("*/*/model.pnnx.param"))


def load_io(folder: Path) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """The inputs and PyTorch's outputs saved beside a fixture."""
    with np.load(folder / "io.npz") as data:
        ins = [data[f"in{i}"] for i in range(sum(k.startswith("in") for k in data.files))]
        outs = [data[f"out{i}"] for i in range(sum(k.startswith("out") for k in data.files))]
    return ins, outs


def assert_matches(got: np.ndarray, want: np.ndarray, *, rel: float = 1e-4, what: str = "") -> None:
    """Exact for integers and booleans; for floats max|diff| <= rel * max(1, max|want|)."""
    got = np.asarray(got)
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    if want.dtype.kind in "biu":
        assert got.dtype.kind == want.dtype.kind or (got.dtype.kind in "iu" and want.dtype.kind in "iu"), (
            f"{what}: dtype {got.dtype} != {want.dtype}"
        )
        np.testing.assert_array_equal(got, want, err_msg=what)
        return
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype} != {want.dtype}"
    if want.dtype.kind == "c":
        assert_matches(got.real, want.real, rel=rel, what=f"{what} (real part)")
        assert_matches(got.imag, want.imag, rel=rel, what=f"{what} (imaginary part)")
        return
    finite = np.isfinite(want)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=f"{what}: NaN positions differ")
    np.testing.assert_array_equal(got[~finite & ~np.isnan(want)], want[~finite & ~np.isnan(want)], err_msg=what)
    if finite.any():
        scale = max(1.0, float(np.abs(want[finite]).max()))
        diff = float(np.abs(got[finite].astype(np.float64) - want[finite]).max())
        assert diff <= rel * scale, f"{what}: max|diff| {diff:.3g} > {rel} x {scale:.3g}"


def assert_rewritten_runs_agree(param: Path, threads: int, option: str, *, atol: float) -> None:
    """An engine that rewrites part of the plan (``option`` on, as by default), on ``threads``
    workers, gives the sequential engine's bits, and PyTorch's outputs and those of an engine
    with ``option`` off within float32 rounding, run after run."""
    from graphexec import Engine

    inputs, outputs = load_io(param.parent)
    with Engine.load(param, threads=threads, intra_op_threads=1) as engine, \
            Engine.load(param, threads=1, intra_op_threads=1, **{option: False}) as plain:
        sequential = Engine.load(param, threads=1, intra_op_threads=1).forward(*inputs)
        unrewritten = plain.forward(*inputs)
        for _ in range(3):
            got = engine.forward(*inputs)
            for g, s, p, want in zip(got, sequential, unrewritten, outputs):
                assert np.array_equal(g, s)  # concurrent == sequential, bit for bit
                np.testing.assert_allclose(g, want, rtol=1e-5, atol=atol)
                np.testing.assert_allclose(g, p, rtol=1e-5, atol=atol)
