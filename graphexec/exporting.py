"""Export a PyTorch model with pnnx, with the outputs PyTorch gave, in one call.

::

    import graphexec
    param = graphexec.export(model, (x,), "out/net")
    # out/net.pnnx.param, out/net.pnnx.bin and out/net.io.npz (in0.., out0..), checked

torch and pnnx are imported inside the functions, so the runtime never needs them; without
them an :class:`ExportToolsMissing` (an ``ImportError``) says what to install.
:func:`pnnx_from_torchscript` turns a TorchScript ``.pt`` file into a pnnx model in a cache
folder (the command line uses it for ``graphexec info model.pt``).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from graphexec.errors import GraphexecError

#: The largest max|diff| / max|reference| a checked export accepts.
TOLERANCE = 1e-4

_SUFFIXES = (".pnnx.param", ".pnnx.bin", ".io.npz", ".param", ".pt")


class ExportToolsMissing(ImportError):
    """torch or pnnx is not installed (they come with ``pip install 'graphexec[export]'``)."""


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
    if isinstance(value, (tuple, list)):
        return [leaf for item in value for leaf in _flatten(item)]
    return [value]


def relative_error(got: Sequence[np.ndarray], want: Sequence[np.ndarray]) -> float:
    """The worst max|got - want| / max|want| over paired outputs."""
    worst = 0.0
    for g, w in zip(got, want, strict=True):
        g, w = np.asarray(g, dtype=np.float64), np.asarray(w, dtype=np.float64)
        if g.shape != w.shape:
            return float("inf")
        if g.size:
            worst = max(worst, float(np.abs(g - w).max()) / max(1e-12, float(np.abs(w).max())))
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
    outputs ``out0..`` (a tuple of outputs flattened, as graphexec returns them).

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
    base = _base(path)
    base.parent.mkdir(parents=True, exist_ok=True)
    module.eval()
    with torch.no_grad():
        outputs = _flatten(module(*inputs))
    with tempfile.TemporaryDirectory(prefix="graphexec-export-") as tmp:
        written = Path(tmp) / "model.pnnx.param"
        try:
            others = None
            if isinstance(dynamic_inputs, (tuple, list)):
                others = tuple(dynamic_inputs)
            elif dynamic_inputs is not None:
                others = (dynamic_inputs,)
            pnnx.export(module, str(Path(tmp) / "model.pt"), inputs, others, check_trace=check_trace)
        except Exception as exc:  # pnnx may fail after writing the files we need
            if not written.exists():
                hint = " (pass check_trace=False if the trace is right)" if "sanity" in str(exc) else ""
                raise GraphexecError(
                    f"pnnx could not export the model: {type(exc).__name__}: {exc}{hint}"
                ) from exc
        if not written.exists():
            raise GraphexecError("pnnx wrote no model (see its messages above)")
        param = base.with_name(base.name + ".pnnx.param")
        shutil.copyfile(written, param)
        if (Path(tmp) / "model.pnnx.bin").exists():
            shutil.copyfile(Path(tmp) / "model.pnnx.bin", base.with_name(base.name + ".pnnx.bin"))
    arrays = {f"in{i}": _as_numpy(t) for i, t in enumerate(inputs)}
    arrays.update({f"out{i}": _as_numpy(t) for i, t in enumerate(outputs)})
    np.savez_compressed(base.with_name(base.name + ".io.npz"), **arrays)
    if check:
        check_export(param, tolerance=tolerance)
    return param


def check_export(param: str | os.PathLike[str], *, tolerance: float = TOLERANCE) -> float:
    """Run the model at ``param`` on the inputs in its ``.io.npz``; return the relative error.

    Raises a GraphexecError if the outputs differ from the stored ones by more than
    ``tolerance`` (or whatever error loading or running the model raises).
    """
    from graphexec.engine import Engine

    base = _base(param)
    with np.load(base.with_name(base.name + ".io.npz")) as data:
        ins = [data[f"in{i}"] for i in range(sum(k.startswith("in") for k in data.files))]
        want = [data[f"out{i}"] for i in range(sum(k.startswith("out") for k in data.files))]
    with Engine.load(param, threads=1) as engine:
        got = engine.forward(*ins)
    got = list(got) if isinstance(got, tuple) else [got]
    if len(got) != len(want):
        raise GraphexecError(f"{param}: graphexec gives {len(got)} outputs, PyTorch gave {len(want)}")
    error = relative_error(got, want)
    if not error <= tolerance:
        raise GraphexecError(
            f"{param}: graphexec's outputs differ from PyTorch's by {error:.2e} "
            f"(max|diff| / max|reference|; the tolerance is {tolerance:.0e})"
        )
    return error


def default_cache_dir() -> Path:
    """Where converted TorchScript models are kept: ``$XDG_CACHE_HOME/graphexec`` or ``~/.cache/graphexec``."""
    root = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(root) / "graphexec"


def pnnx_from_torchscript(
    pt_path: str | os.PathLike[str],
    input_shapes: Sequence[Sequence[int]],
    cache_dir: str | os.PathLike[str] | None = None,
) -> Path:
    """Convert a TorchScript file with pnnx into ``cache_dir`` (reused); return the param path.

    The cache key is the file's content, the input shapes and pnnx's version, so a changed
    file is converted again. Only the ``.pnnx.param`` and ``.pnnx.bin`` are kept.
    """
    _, pnnx = _export_tools()
    pt_path = Path(pt_path)
    if not input_shapes:
        raise GraphexecError(f"{pt_path}: a TorchScript file does not say its input shapes; give them (e.g. 1,3,224,224)")
    try:
        content = pt_path.read_bytes()
    except OSError as exc:
        raise GraphexecError(f"{pt_path}: cannot read the TorchScript file: {exc.strerror or exc}") from exc
    shapes_arg = ",".join("[" + ",".join(str(int(d)) for d in shape) + "]f32" for shape in input_shapes)
    key = hashlib.sha256(content + shapes_arg.encode() + str(getattr(pnnx, "__version__", "")).encode()).hexdigest()[:16]
    cache = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    folder = cache / f"{pt_path.stem}-{key}"
    param = folder / "model.pnnx.param"
    if param.exists():
        return param
    cache.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".converting-", dir=cache))
    try:
        outputs = {name: tmp / f"model.{name}" for name in
                   ("pnnx.param", "pnnx.bin", "pnnx.py", "pnnx.onnx", "ncnn.param", "ncnn.bin", "ncnn.py")}
        command = [pnnx.EXEC_PATH, str(pt_path.resolve()), f"inputshape={shapes_arg}",
                   f"pnnxparam={outputs['pnnx.param']}", f"pnnxbin={outputs['pnnx.bin']}",
                   f"pnnxpy={outputs['pnnx.py']}", f"pnnxonnx={outputs['pnnx.onnx']}",
                   f"ncnnparam={outputs['ncnn.param']}", f"ncnnbin={outputs['ncnn.bin']}",
                   f"ncnnpy={outputs['ncnn.py']}"]
        done = subprocess.run(command, cwd=tmp, capture_output=True, text=True, check=False)
        if not outputs["pnnx.param"].exists():
            said = [line for line in (done.stderr + done.stdout).splitlines() if line.strip()]
            raise GraphexecError(
                f"{pt_path}: pnnx could not convert it (exit {done.returncode}"
                + (f": {said[-1].strip()}" if said else "") + ")"
            )
        for name, file in outputs.items():
            if name not in ("pnnx.param", "pnnx.bin") and file.exists():
                file.unlink()
        try:
            os.replace(tmp, folder)
        except OSError:  # another process converted it meanwhile
            if not param.exists():
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return param
