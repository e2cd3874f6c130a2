"""Export a PyTorch model with pnnx, with the outputs PyTorch gave, in one call.

::

    import graphexec
    param = graphexec.export(model, (x,), "out/net")
    # out/net.pnnx.param, out/net.pnnx.bin and out/net.io.npz (in0.., out0..), checked

torch and pnnx are imported inside the functions, so the runtime never needs them; without
them an :class:`ExportToolsMissing` (an ``ImportError``) says what to install.
:func:`pnnx_from_torchscript` turns a TorchScript ``.pt`` file into a pnnx model in a cache
folder (the command line uses it for ``graphexec info model.pt``; see :mod:`graphexec.converting`).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from graphexec.converting import ExportToolsMissing, convert, default_cache_dir
from graphexec.errors import GraphexecError

__all__ = ["ExportToolsMissing", "check_export", "default_cache_dir", "export", "pnnx_from_torchscript"]

#: The largest max|diff| / max|reference| a checked export accepts.
TOLERANCE = 1e-4

_SUFFIXES = (".pnnx.param", ".pnnx.bin", ".io.npz", ".param", ".pt")


def _export_tools() -> tuple[Any, Any]:
    try:
        import pnnx
        import torch
    except ImportError as exc:
        raise ExportToolsMissing(
            f"exporting needs torch and pnnx ({exc}); install them with: pip install 'graphexec[export]'"
        ) from exc
    return torch, pnnx


def _base(path: str | os.PathLike[str]) -> Path:
    """``out/net``, ``out/net.pt`` and ``out/net.pnnx.param`` all name the model ``out/net``."""
    path = Path(path)
    for suffix in _SUFFIXES:
        if path.name.endswith(suffix) and len(path.name) > len(suffix):
            return path.with_name(path.name[: -len(suffix)])
    return path


def _flatten(value: Any) -> list[Any]:
    """The tensors of a nested output in order: a mapping's values in its own order
    (segmentation models return ``{"out": ..., "aux": ...}``, Hugging Face a ``ModelOutput``);
    a None (an output a model leaves out) is skipped."""
    if isinstance(value, Mapping):
        return [leaf for item in value.values() for leaf in _flatten(item)]
    if isinstance(value, (tuple, list)):
        return [leaf for item in value for leaf in _flatten(item)]
    return [] if value is None else [value]


def _needs_flattening(value: Any) -> bool:
    """Whether a nested output holds what TorchScript's tracer refuses: a dict or a None."""
    if value is None or isinstance(value, Mapping):
        return True
    return isinstance(value, (tuple, list)) and any(_needs_flattening(item) for item in value)


def _returning_tuple(torch: Any, module: Any) -> Any:
    """``module`` behind a wrapper that returns its outputs flattened into one tuple:
    TorchScript's tracer, which pnnx runs, refuses a dict or a None among the outputs."""

    class FlatOutputs(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = module

        def forward(self, *inputs: Any) -> tuple[Any, ...]:
            return tuple(_flatten(self.model(*inputs)))

    return FlatOutputs().eval()


@contextlib.contextmanager
def causal_masks_kept() -> Iterator[None]:
    """While tracing, PyTorch's transformer modules keep a causal mask they are given as a
    mask. They would otherwise recognise it and pass ``is_causal`` instead, which drops the
    mask from the traced attention; pnnx's ``nn.MultiheadAttention`` has no ``is_causal``,
    so the export would attend to every position. A mask applied as given is the same
    attention (PyTorch takes ``is_causal`` as a hint about the mask it is also given)."""
    from torch.nn.modules import transformer

    detect = getattr(transformer, "_detect_is_causal_mask", None)
    if detect is None:
        yield
        return

    def as_given(mask: Any, is_causal: Any = None, size: Any = None) -> bool:
        return False if mask is not None else detect(mask, is_causal, size)

    transformer._detect_is_causal_mask = as_given
    try:
        yield
    finally:
        transformer._detect_is_causal_mask = detect


#: Activation modules whose in-place form pnnx's converter crashes on, silently, in its
#: first pass (VNet's ``nn.ELU(inplace=True)``); ``nn.ReLU``, ``nn.ReLU6``, ``nn.SiLU`` and
#: the others convert in place.
CRASHING_IN_PLACE = ("ELU", "CELU", "Hardtanh", "Threshold", "RReLU")


@contextlib.contextmanager
def in_place_activations_apart(torch: Any, module: Any) -> Iterator[list[Any]]:
    """While tracing, the activation modules pnnx cannot convert in place compute out of
    place (the list it yields holds them). That is the same model wherever nothing reads an
    activation's input again; the check against the outputs PyTorch gave before says where
    something does."""
    kinds = tuple(kind for name in CRASHING_IN_PLACE if (kind := getattr(torch.nn, name, None)) is not None)
    changed = [m for m in module.modules() if isinstance(m, kinds) and getattr(m, "inplace", False) is True]
    for m in changed:
        m.inplace = False
    try:
        yield changed
    finally:
        for m in changed:
            m.inplace = True


def _refuse_half_precision(torch: Any, module: Any, inputs: Sequence[Any]) -> None:
    """Refuse a float16 or bfloat16 model or input before pnnx runs: its converter runs the
    traced model with float32 weights or inputs, so it stops on a dtype mismatch whose
    message says nothing of the cause."""
    halves = (torch.float16, torch.bfloat16)
    for name, tensor in [*module.named_parameters(), *module.named_buffers()]:
        if tensor.dtype in halves:
            raise GraphexecError(f"the model's {name!r} is {tensor.dtype}: pnnx converts float32 models "
                                 "only; export model.float() (pnnx's converter runs the traced model on "
                                 "float32 tensors and stops)")
    for i, tensor in enumerate(inputs):
        if tensor.dtype in halves:
            raise GraphexecError(f"example input {i} is {tensor.dtype}: pnnx converts float32 models only; "
                                 "export with float32 inputs")


def relative_error(got: Sequence[np.ndarray], want: Sequence[np.ndarray]) -> float:
    """The worst max|got - want| / max|want| over paired outputs (over want's finite
    values). A NaN or infinity where the other side holds something else is an infinite
    error, so that NaN outputs never pass; the same one on both sides is none."""
    worst = 0.0
    for g, w in zip(got, want, strict=True):
        g, w = np.asarray(g, dtype=np.float64), np.asarray(w, dtype=np.float64)
        if g.shape != w.shape:
            return float("inf")
        if not g.size:
            continue
        with np.errstate(invalid="ignore"):
            apart = np.where((g == w) | (np.isnan(g) & np.isnan(w)), 0.0, np.abs(g - w))
        if np.isnan(apart).any() or np.isinf(apart).any():
            return float("inf")
        finite = np.abs(w[np.isfinite(w)])
        worst = max(worst, float(apart.max()) / max(1e-12, float(finite.max()) if finite.size else 0.0))
    return worst


def _as_numpy(tensor: Any) -> np.ndarray:
    """A tensor's values; a lazily conjugated or negated view (``torch.fft.ihfft``'s result,
    ``x.conj()``) is materialised first, which ``Tensor.numpy`` refuses to do."""
    return tensor.detach().cpu().resolve_conj().resolve_neg().numpy()


def export(
    module: Any,
    example_inputs: Any,
    path: str | os.PathLike[str],
    *,
    check: bool = True,
    tolerance: float = TOLERANCE,
    dynamic_inputs: Any = None,
    check_trace: bool = True,
) -> Path:
    """Export ``module`` with pnnx and store PyTorch's answer beside it; return the param path.

    ``example_inputs`` is a tensor or a tuple of tensors (their shapes become the model's
    exported input shapes). ``path`` names the model without suffix (``out/net``; a
    ``.pt`` or ``.pnnx.param`` suffix is dropped). Written: ``<path>.pnnx.param``,
    ``<path>.pnnx.bin`` and ``<path>.io.npz`` holding the inputs ``in0..`` and PyTorch's
    outputs ``out0..`` (tuples, lists and dicts of outputs flattened in order, Nones left
    out, as graphexec returns them).

    With ``check`` (the default) the export is loaded with :class:`~graphexec.Engine` and
    run on the same inputs; it raises an error if graphexec cannot run it (for instance an
    :class:`~graphexec.UnsupportedOperatorError` when the model needs a layer not yet
    registered: register it first, or pass ``check=False``) or if its outputs differ from
    PyTorch's by more than ``tolerance`` relative to the largest reference value. The
    files stay written either way.

    ``dynamic_inputs``, example inputs of other shapes, makes pnnx export the sizes that
    differ as symbolic (``?``), so the model runs at any of them.

    ``check_trace=False`` skips TorchScript's check that tracing twice gives the same
    graph: modules whose eval-mode fast paths differ between calls (``nn.MultiheadAttention``,
    ``nn.TransformerEncoderLayer``) fail it although their trace is right.
    """
    torch, pnnx = _export_tools()
    inputs = tuple(example_inputs) if isinstance(example_inputs, (tuple, list)) else (example_inputs,)
    for i, tensor in enumerate(inputs):
        if not isinstance(tensor, torch.Tensor):
            raise TypeError(f"example input {i} is a {type(tensor).__name__}, expected a torch.Tensor")
    _refuse_half_precision(torch, module, inputs)
    base = _base(path)
    base.parent.mkdir(parents=True, exist_ok=True)
    module.eval()
    inputs = _untouched(inputs)
    with torch.no_grad():
        returned = module(*_untouched(inputs))
    outputs = _flatten(returned)
    if _needs_flattening(returned):
        module = _returning_tuple(torch, module)
    with tempfile.TemporaryDirectory(prefix="graphexec-export-") as tmp:
        written = Path(tmp) / "model.pnnx.param"
        apart: list[Any] = []  # the in-place activations traced out of place
        others = None
        if isinstance(dynamic_inputs, (tuple, list)):
            others = _untouched(dynamic_inputs)
        elif dynamic_inputs is not None:
            others = _untouched((dynamic_inputs,))
        try:
            with causal_masks_kept(), in_place_activations_apart(torch, module) as apart, \
                    _bool_inputs_typed(torch), _stderr_kept() as printed:
                pnnx.export(module, str(Path(tmp) / "model.pt"), _untouched(inputs),
                            None if others is None else _untouched(others), check_trace=check_trace)
        except Exception as exc:  # pnnx may fail after writing the files we need
            if not written.exists():
                traced = (Path(tmp) / "model.pt").exists()
                raise GraphexecError(_export_failure(exc, converter_stopped=traced, converter_said="".join(printed))
                                     ) from exc
        if not written.exists():
            raise GraphexecError("pnnx wrote no model (see its messages above)")
        param = base.with_name(base.name + ".pnnx.param")
        shutil.copyfile(written, param)
        if (Path(tmp) / "model.pnnx.bin").exists():
            shutil.copyfile(Path(tmp) / "model.pnnx.bin", base.with_name(base.name + ".pnnx.bin"))
    arrays = {f"in{i}": _as_numpy(t) for i, t in enumerate(inputs)}
    arrays.update({f"out{i}": _as_numpy(t) for i, t in enumerate(outputs)})
    np.savez_compressed(base.with_name(base.name + ".io.npz"), **arrays)  # type: ignore[arg-type]  # numpy's stub types **kwds as bool
    if check:
        try:
            check_export(param, tolerance=tolerance)
            if others is not None:
                _check_at_the_other_shapes(torch, module, others, param, tolerance)
        except GraphexecError as exc:
            if not apart:
                raise
            kinds = ", ".join(sorted({f"nn.{type(m).__name__}" for m in apart}))
            raise GraphexecError(f"{exc} (its in-place {kinds} modules were exported out of place, as pnnx "
                                 "cannot convert them in place: where the model reads such a module's input "
                                 "again, make it out of place)") from exc
    return param


def _untouched(tensors: Sequence[Any]) -> tuple[Any, ...]:
    """Copies of ``tensors`` for one call of the module: a model that writes into its input in
    place (``x *= 255``) would otherwise change the inputs the export stores, traces and checks
    against, and the caller's own tensors."""
    return tuple(t.detach().clone() for t in tensors)


#: How much of pnnx's (or TorchScript's) own message an export failure quotes; the whole of
#: it stays the error's ``__cause__``.
QUOTED_CHARS = 400


@contextlib.contextmanager
def _bool_inputs_typed(torch: Any) -> Iterator[None]:
    """pnnx's export names a boolean example input's type ``f32`` (its table of types has no
    bool), and its converter, which takes ``bool``, then stops on the traced graph's bool
    input: its table given a bool meanwhile."""
    try:
        from pnnx.utils import utils
    except ImportError:  # another pnnx: its own table
        yield
        return
    named = getattr(utils, "input_torch_type_to_str", None)
    if named is None:
        yield
        return

    def with_bool(tensor: Any) -> str:
        return "bool" if tensor.dtype == torch.bool else named(tensor)

    utils.input_torch_type_to_str = with_bool
    try:
        yield
    finally:
        utils.input_torch_type_to_str = named


@contextlib.contextmanager
def _stderr_kept() -> Iterator[list[str]]:
    """What the process writes to its standard error meanwhile (file descriptor 2, where
    pnnx's converter, a program of its own, prints why it stopped), in the list it yields;
    the text still reaches the standard error, once the block ends."""
    printed: list[str] = []
    sys.stderr.flush()
    try:
        saved = os.dup(2)
    except OSError:  # no standard error to borrow: nothing to keep
        yield printed
        return
    with tempfile.TemporaryFile() as kept:
        os.dup2(kept.fileno(), 2)
        try:
            yield printed
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            kept.seek(0)
            data = kept.read()
            with contextlib.suppress(OSError):
                os.write(2, data)
            printed.append(data.decode(errors="replace"))


def _last_words(text: str) -> str:
    """What the converter's output says of its end: its last error lines (``terminate
    called after ... what(): ...``, a TorchScript RuntimeError), or else the pass it was in
    when it stopped without a word (a crash), shortened to :data:`QUOTED_CHARS`."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    errors = [line for line in lines if re.search(r"error|what\(\)|terminate|exception|abort", line, re.IGNORECASE)]
    if errors:
        said = " / ".join(errors[-2:])
        said = said if len(said) <= QUOTED_CHARS else said[:QUOTED_CHARS].rstrip() + " ..."
        return f", its last words: {said!r}"
    passes = [line.strip("# ") for line in lines if line.startswith("#####")]
    return f", silently in {passes[-1]}" if passes else ""


def _export_failure(exc: BaseException, *, converter_stopped: bool = False, converter_said: str = "") -> str:
    """What to do first, then what failed: TorchScript's trace check quotes both graphs in
    full (tens of kilobytes), so the hint would otherwise come last. ``converter_stopped``:
    the module was traced, but pnnx's converter (a program pnnx runs, whose exit status it
    does not check) wrote no model, so what pnnx raises next (a missing ``model_pnnx.py``)
    says nothing of why: ``converter_said``, what it printed, does."""
    text = str(exc)
    said = text if len(text) <= QUOTED_CHARS else text[:QUOTED_CHARS].rstrip() + " ... (the rest in the cause)"
    failed = f"pnnx could not export the model: {type(exc).__name__}: {said}"
    if "sanity" in text or "TracerWarning" in text or "Graphs differed" in text:
        return ("pass check_trace=False if the trace is right (modules whose eval fast paths differ between "
                f"calls, such as nn.MultiheadAttention, fail TorchScript's trace check); {failed}")
    if converter_stopped:
        return ("pnnx's converter stopped without writing a model" + _last_words(converter_said)
                + " (known causes: a submodule whose output the forward never uses, so return that output or "
                "remove the call; with dynamic_inputs, a model that runs differently at the second shape, as one "
                f"that caches a size-dependent tensor from its first call; an operator pnnx crashes on); {failed}")
    return failed


def check_export(param: str | os.PathLike[str], *, tolerance: float = TOLERANCE) -> float:
    """Run the model at ``param`` on the inputs in its ``.io.npz``; return the relative error.

    Raises a GraphexecError if the outputs differ from the stored ones by more than
    ``tolerance`` (or whatever error loading or running the model raises).
    """
    base = _base(param)
    with np.load(base.with_name(base.name + ".io.npz")) as data:
        ins = [data[f"in{i}"] for i in range(sum(k.startswith("in") for k in data.files))]
        want = [data[f"out{i}"] for i in range(sum(k.startswith("out") for k in data.files))]
    return _compared(param, ins, want, tolerance)


def _check_at_the_other_shapes(torch: Any, module: Any, others: Sequence[Any], param: Path, tolerance: float
                               ) -> None:
    """A dynamic export is checked at ``dynamic_inputs`` too: pnnx can write a graph that is
    right at the exported shape alone (a size-dependent value folded, a slice on a dynamic
    dim dropped), which the first check cannot see."""
    with torch.no_grad():
        want = [_as_numpy(t) for t in _flatten(module(*_untouched(others)))]
    shapes = ", ".join(str(tuple(t.shape)) for t in others)
    _compared(param, [_as_numpy(t) for t in others], want, tolerance,
              at=f" at the dynamic_inputs' shapes {shapes}, not at the exported ones: pnnx's graph fits "
                 "the exported shapes alone (it folded a value that depends on a size, or dropped an "
                 "operator on a dynamic dim)")


def _compared(param: str | os.PathLike[str], ins: Sequence[np.ndarray], want: Sequence[np.ndarray],
              tolerance: float, at: str = "") -> float:
    """graphexec's outputs on ``ins`` against PyTorch's ``want``: the relative error, or a
    GraphexecError saying how they differ (``at``: where, when not at the stored inputs)."""
    from graphexec.engine import Engine

    with Engine.load(param, threads=1) as engine:
        got = engine.forward(*ins)
    got = list(got) if isinstance(got, tuple) else [got]
    if len(got) != len(want):
        raise GraphexecError(f"{param}: graphexec gives {len(got)} outputs, PyTorch gave {len(want)}{at}")
    for k, (g, w) in enumerate(zip(got, want)):
        if np.shape(g) != np.shape(w):
            raise GraphexecError(f"{param}: graphexec's output {k} has shape {np.shape(g)}, PyTorch's "
                                 f"{np.shape(w)}{at}")
    error = relative_error(got, want)
    if not error <= tolerance:
        raise GraphexecError(
            f"{param}: graphexec's outputs differ from PyTorch's by {error:.2e} "
            f"(max|diff| / max|reference|; the tolerance is {tolerance:.0e}){at}"
        )
    return error


def pnnx_from_torchscript(
    pt_path: str | os.PathLike[str],
    input_shapes: Sequence[Sequence[int]],
    cache_dir: str | os.PathLike[str] | None = None,
) -> Path:
    """Convert a TorchScript file with pnnx into ``cache_dir`` (reused); return the param path
    (see :func:`graphexec.converting.convert`)."""
    return convert(pt_path, input_shapes, cache_dir=cache_dir if cache_dir is not None else default_cache_dir())
