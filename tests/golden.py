"""Helpers for golden tests: where fixtures live and how results are compared."""

from __future__ import annotations

from pathlib import Path

import numpy as np

FIXTURES = Path(__file__).resolve().parent / "fixtures"
OPS = FIXTURES / "ops"


def op_cases() -> list[Path]:
    """Every exported per-operator case folder (holding model.pnnx.param and io.npz)."""
    return sorted(p.parent for p in OPS.glob("*/*/model.pnnx.param"))


#: Fixtures holding an operator whose output size the data decides (named here): an engine
#: plans them up to that value and the rest once the run has computed it. Each has further
#: input sets in more.npz whose outputs have other sizes; tests/graphexec/test_dynamic_ops.py
#: runs them all through engines, and layer by layer.
RUNTIME_SIZED = {
    "dynamic/after_a_threshold": "Tensor.index",
    "dynamic/arange_between_computed_floats": "torch.arange",
    "dynamic/arange_to_a_computed_end": "torch.arange",
    "dynamic/argwhere": "aten::argwhere",
    "dynamic/bincount": "aten::bincount",
    "dynamic/bincount_to_a_computed_minlength": "aten::bincount",
    "dynamic/bincount_weights_minlength": "aten::bincount",
    "dynamic/batched_nms": "pnnx.custom_op.torchvision.nms",
    "dynamic/index_bool_mask": "Tensor.index",
    "dynamic/index_bool_mask_on_dim1": "Tensor.index",
    "dynamic/masked_select": "torch.masked_select",
    "dynamic/masked_select_broadcast_mask": "torch.masked_select",
    "dynamic/nms": "pnnx.custom_op.torchvision.nms",
    "dynamic/nms_threshold_0_2_equal_scores": "pnnx.custom_op.torchvision.nms",
    "dynamic/nonzero": "aten::nonzero",
    "dynamic/nonzero_as_tuple": "aten::nonzero_numpy",
    "dynamic/nonzero_of_a_scalar": "aten::nonzero",
    "dynamic/repeat_interleave_by_computed_counts": "torch.repeat_interleave",
    "dynamic/repeat_interleave_indices_of_counts": "aten::repeat_interleave",
    "dynamic/slice_to_a_computed_end": "Tensor.slice",
    "dynamic/unique_consecutive": "aten::unique_consecutive",
    "dynamic/unique_dim": "aten::unique_dim",
    "dynamic/unique_floats": "aten::_unique2",
    "dynamic/unique_inverse_counts": "aten::_unique2",
    "dynamic/unique_nan_and_signed_zero": "aten::_unique2",
    "dynamic/where_of_a_condition": "aten::where",
    "recurrent/packed_lstm_two_layers_bidirectional": "aten::_pack_padded_sequence",
    "recurrent/packed_gru_padded_to_the_input_length": "aten::_pack_padded_sequence",
    "recurrent/packed_rnn_last_state": "aten::_pack_padded_sequence",
    "recurrent/pack_sequence_of_words": "aten::_pack_padded_sequence",
}
#: The runtime-sized fixtures whose outputs are of one size whatever the data (a packed
#: sequence padded back to the input's length, or only its last states returned, or its
#: lengths fixed in the model).
SIZED_INSIDE = {"recurrent/packed_gru_padded_to_the_input_length", "recurrent/packed_rnn_last_state",
                "recurrent/pack_sequence_of_words"}


def case_id(folder: Path) -> str:
    return str(folder.relative_to(OPS))


def engine_cases() -> list:
    """:func:`op_cases` as pytest params."""
    import pytest

    return [pytest.param(folder, id=case_id(folder)) for folder in op_cases()]


def more_io(folder: Path) -> list[tuple[list[np.ndarray], list[np.ndarray]]]:
    """The extra input sets of a fixture and PyTorch's outputs for them (``more.npz``)."""
    path = folder / "more.npz"
    if not path.exists():
        return []
    sets = []
    with np.load(path) as data:
        k = 0
        while f"s{k}_in0" in data.files:
            ins = [data[f"s{k}_in{i}"] for i in range(sum(f.startswith(f"s{k}_in") for f in data.files))]
            outs = [data[f"s{k}_out{j}"] for j in range(sum(f.startswith(f"s{k}_out") for f in data.files))]
            sets.append((ins, outs))
            k += 1
    return sets


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


def assert_same_detections(got: list[np.ndarray], want: list[np.ndarray], what: str) -> None:
    """Detections (boxes, scores, labels, best first) are PyTorch's: as many; the scores,
    in order, within 1e-4 relative; each detection one of PyTorch's with the same label, box
    and score (floats within 1e-4 x their largest). Only detections whose scores are that
    close may have traded places: PyTorch's order of two proposals that tie to an ulp
    depends on how their convolutions summed (see docs/design/runtime-sizes.md)."""
    boxes, scores, labels = got
    want_boxes, want_scores, want_labels = want
    assert [g.shape for g in got] == [w.shape for w in want], f"{what}: shapes differ"
    assert labels.dtype.kind == want_labels.dtype.kind == "i"
    assert_matches(scores, want_scores, what=f"{what} scores")
    box_tolerance = 1e-4 * max(1.0, float(np.abs(want_boxes).max()))
    score_tolerance = 1e-4 * max(1.0, float(np.abs(want_scores).max()))
    unpaired = set(range(len(want_scores)))
    for i in range(len(scores)):
        pair = next((j for j in sorted(unpaired, key=lambda j: abs(j - i))
                     if labels[i] == want_labels[j] and abs(scores[i] - want_scores[j]) <= score_tolerance
                     and np.abs(boxes[i] - want_boxes[j]).max() <= box_tolerance), None)
        assert pair is not None, (f"{what}: detection {i} (label {labels[i]}, score {scores[i]}, box {boxes[i]}) "
                                  f"is none of PyTorch's")
        unpaired.remove(pair)


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


def run_layers(param: Path, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """The graph at ``param`` run layer by layer, in order, with no plan, each layer through
    the kernel the CPU device gives it for the specs of the values it is given (as an
    engine's plan would run it, without rewrites): for graphs whose sizes are known only at
    run time. Each output is checked against the spec its layer inferred from those specs
    (a :class:`DynamicSpec` must admit it)."""
    from graphexec.devices.cpu import CpuDevice
    from graphexec.layers.specs import DynamicSpec, TensorSpec, spec_of
    from graphexec.pnnx import load
    from graphexec.program import Program

    device = CpuDevice()
    program = Program.from_graph(load(param))
    values = dict(zip(program.inputs, inputs, strict=True))
    for step in program.steps:
        given = [values[name] for name in step.inputs]
        specs = [spec_of(v) for v in given]
        inferred = step.layer.infer(specs)
        kernel = device.kernel(step.layer, specs, inferred)
        kernel.prepare()
        produced = kernel.run(given)
        assert len(produced) == len(step.outputs), f"{step.name}: {len(produced)} outputs"
        for name, spec, value in zip(step.outputs, inferred, produced):
            if isinstance(spec, DynamicSpec):
                spec.resolve(value)
            elif type(spec) is TensorSpec:  # not a sequence, nor a constant inference knows
                assert spec_of(value) == spec, f"{step.name}: output {name} is {spec_of(value)}, inferred {spec}"
        values.update(zip(step.outputs, produced))
    return [values[name] for name in program.outputs]
