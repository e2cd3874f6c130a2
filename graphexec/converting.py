"""Models of other formats through pnnx: an ONNX file (or a TorchScript one) in,
``.pnnx.param`` and ``.pnnx.bin`` out.

::

    import graphexec
    param = graphexec.convert("model.onnx")                              # model.pnnx.param beside it
    param = graphexec.convert("model.onnx", input_shapes=[(8, 3, 224, 224)])  # sizes left dynamic, fixed
    engine = graphexec.Engine.load("model.onnx")                         # converted into a cache, reused

pnnx reads ONNX itself; graphexec only runs its tool (the ``pnnx`` package's executable, in
the export extra) and keeps the two files it needs. Nothing here imports torch.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from loguru import logger

from graphexec import dtypes
from graphexec.errors import GraphexecError, ModelFormatError

#: Suffixes read as ONNX models.
ONNX_SUFFIXES = (".onnx",)
#: Suffixes read as TorchScript files (their input shapes must be given).
TORCHSCRIPT_SUFFIXES = (".pt", ".pth", ".torchscript")
#: What pnnx writes besides the two files graphexec reads, by the option that names each.
_OTHER_OUTPUTS = {"pnnxpy": "_pnnx.py", "pnnxonnx": ".pnnx.onnx", "ncnnparam": ".ncnn.param",
                  "ncnnbin": ".ncnn.bin", "ncnnpy": "_ncnn.py"}


class ExportToolsMissing(ImportError):
    """torch or pnnx is not installed (they come with ``pip install 'graphexec[export]'``)."""


def convertible(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` names a model that :func:`convert` takes (by its suffix), and a
    ``.pnnx.param`` file does not."""
    name = Path(path).name.lower()
    return name.endswith(ONNX_SUFFIXES + TORCHSCRIPT_SUFFIXES) and not name.endswith((".pnnx.onnx", ".pnnxsim.onnx"))


def pnnx_tool() -> str:
    """The pnnx executable of the installed ``pnnx`` package (found without importing it,
    which would import torch)."""
    spec = importlib.util.find_spec("pnnx")
    folder = Path(spec.origin).parent if spec is not None and spec.origin else None
    for name in ("pnnx", "pnnx.exe"):
        if folder is not None and (folder / name).is_file():
            return str(folder / name)
    raise ExportToolsMissing("converting a model needs pnnx; install it with: pip install 'graphexec[export]'")


def default_cache_dir() -> Path:
    """Where converted models are kept: ``$XDG_CACHE_HOME/graphexec`` or ``~/.cache/graphexec``."""
    root = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(root) / "graphexec"


def _type_name(given: Any) -> str:
    """A pnnx type name (``i64``) from one, or from anything numpy reads as a dtype."""
    if isinstance(given, str) and dtypes.is_known(given):
        return given
    try:
        return dtypes.pnnx_name_of(np.dtype(given))
    except (TypeError, ValueError):
        known = ", ".join(sorted(dtypes.PNNX_TYPES))
        raise GraphexecError(f"input type {given!r} is neither a pnnx type name ({known}) nor a numpy dtype "
                             "pnnx has a name for") from None


def _shapes_argument(input_shapes: Sequence[Sequence[int]], input_types: Sequence[Any] | None = None) -> str:
    """pnnx's ``inputshape=[1,3,224,224]f32,[1,6]i64``: float32 unless ``input_types`` says."""
    for shape in input_shapes:
        if isinstance(shape, (str, bytes)) or not all(isinstance(d, int) and d >= 1 for d in shape):
            raise GraphexecError(f"input shapes are sequences of positive sizes such as (1, 3, 224, 224), "
                                 f"got {list(input_shapes)!r}")
    if input_types is not None and len(input_types) != len(input_shapes):
        raise GraphexecError(f"{len(input_types)} input types for {len(input_shapes)} input shapes: give one "
                             "type per shape")
    names = [_type_name(t) for t in input_types] if input_types is not None else ["f32"] * len(input_shapes)
    return ",".join("[" + ",".join(str(int(d)) for d in shape) + "]" + name
                    for shape, name in zip(input_shapes, names))


#: What pnnx says where an ONNX input's type is not the one given: the type the model declares.
_TYPE_EXPECTED = re.compile(r"input_shapes\[(\d+)\] expect \[[^\]]*\](\w+) but got")


@dataclass(frozen=True)
class Converted:
    """What :func:`conversion` did: the ``.pnnx.param`` it gives, and whether pnnx ran."""

    source: Path
    param: Path
    #: Found in the cache folder, converted before.
    reused: bool
    #: How long pnnx took (0 when reused).
    seconds: float

    def describe(self) -> str:
        """One line for a log or the command line."""
        if self.reused:
            return f"{self.source} was converted with pnnx before: {self.param}"
        return f"converted {self.source} with pnnx in {self.seconds:.1f} s: {self.param}"


def convert(
    model: str | os.PathLike[str],
    input_shapes: Sequence[Sequence[int]] | None = None,
    *,
    input_types: Sequence[Any] | None = None,
    other_shapes: Sequence[Sequence[int]] | None = None,
    output: str | os.PathLike[str] | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
) -> Path:
    """Convert ``model`` (``.onnx``, or TorchScript ``.pt``) with pnnx; return the ``.pnnx.param``.

    ``input_shapes``, one per input, fix the sizes an ONNX model leaves dynamic (pnnx
    takes 1 for each otherwise) and are required for TorchScript, which records none.
    ``other_shapes``, one per input shape, are the same inputs at other sizes: pnnx then
    keeps the sizes that differ dynamic (``?``), so the model runs at any of them rather
    than at ``input_shapes`` alone (pnnx's ``inputshape2``).
    ``input_types``, one per shape (``"i64"``, ``np.int64``), say what each input holds:
    float32 unless given; an ONNX model's own types are taken where pnnx names them. The
    files go beside the model (``model.onnx`` -> ``model.pnnx.param``, ``model.pnnx.bin``),
    or to ``output`` (``out/net`` -> ``out/net.pnnx.param``), or, with ``cache_dir``, into a
    folder there named by the file's content, the shapes and pnnx's version, reused while
    they stay the same. Only the two files graphexec reads are kept. Logs what it did.
    """
    return conversion(model, input_shapes, input_types=input_types, other_shapes=other_shapes, output=output,
                      cache_dir=cache_dir).param


def conversion(
    model: str | os.PathLike[str],
    input_shapes: Sequence[Sequence[int]] | None = None,
    *,
    input_types: Sequence[Any] | None = None,
    other_shapes: Sequence[Sequence[int]] | None = None,
    output: str | os.PathLike[str] | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
) -> Converted:
    """:func:`convert`, saying whether pnnx ran or a cached conversion was reused."""
    source = Path(model)
    if not convertible(source):
        raise ModelFormatError("not a model pnnx converts here: expected an .onnx file or a TorchScript .pt",
                               path=str(source))
    if not source.is_file():
        raise ModelFormatError("no such model file", path=str(source))
    torchscript = source.name.lower().endswith(TORCHSCRIPT_SUFFIXES)
    shapes = _shapes_argument(input_shapes or [], input_types)
    if other_shapes is not None and len(other_shapes) != len(input_shapes or []):
        raise GraphexecError(f"{len(other_shapes)} other shapes for {len(input_shapes or [])} input shapes: "
                             "give the input shapes, and one other shape for each")
    others = _shapes_argument(other_shapes, input_types) if other_shapes else ""
    if torchscript and not shapes:
        raise GraphexecError(f"{source}: a TorchScript file does not record its input shapes; give them "
                             f"(input_shapes=[(1, 3, 224, 224)], or --input-shape 1,3,224,224 once per input)")
    tool = pnnx_tool()
    if cache_dir is not None:
        key = hashlib.sha256(_digest(source).encode() + shapes.encode() + others.encode()
                             + _version(tool).encode()).hexdigest()[:16]
        folder = Path(cache_dir) / f"{source.stem}-{key}"
        param = folder / "model.pnnx.param"
        if param.is_file() and param.with_name("model.pnnx.bin").is_file():
            done = Converted(source, param, True, 0.0)
            logger.info(done.describe())
            return done
        base = folder / "model"
    elif output is not None:
        base = Path(output)
        for suffix in (".pnnx.param", ".pnnx.bin"):
            if base.name.endswith(suffix):
                base = base.with_name(base.name[: -len(suffix)])
    else:
        base = source.with_name(source.name[: -len(source.suffix)])
    base.parent.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    _run_pnnx(tool, source, shapes, base, others)
    done = Converted(source, base.with_name(base.name + ".pnnx.param"), False, time.perf_counter() - started)
    logger.info(done.describe())
    return done


def _digest(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _version(tool: str) -> str:
    """The pnnx package's version (the tool prints none), as part of the cache key."""
    try:
        from importlib.metadata import version

        return version("pnnx")
    except Exception:  # noqa: BLE001  (no metadata: the tool's size and time stand in)
        info = os.stat(tool)
        return f"{info.st_size}-{info.st_mtime_ns}"


def _run_pnnx(tool: str, source: Path, shapes: str, base: Path, others: str = "") -> None:
    """Run pnnx on ``source`` in a scratch folder (it writes several files, some beside its
    input), then move ``.pnnx.param`` and ``.pnnx.bin`` to ``base`` + suffix; ``others``:
    pnnx's ``inputshape2``."""
    with tempfile.TemporaryDirectory(prefix=".converting-", dir=base.parent) as tmp:
        scratch = Path(tmp).resolve()  # pnnx runs in it: a relative path would be read from there
        link = scratch / ("model" + source.suffix)
        try:
            link.symlink_to(source.resolve())
        except OSError:  # no symlinks here: a copy
            shutil.copyfile(source, link)
        outputs = {"pnnxparam": scratch / "model.pnnx.param", "pnnxbin": scratch / "model.pnnx.bin"}
        outputs.update({option: scratch / f"model{suffix}" for option, suffix in _OTHER_OUTPUTS.items()})
        options = [f"{option}={path}" for option, path in outputs.items()]
        def run() -> subprocess.CompletedProcess[str]:
            given = [f"inputshape={shapes}"] if shapes else []
            given += [f"inputshape2={others}"] if others else []
            return subprocess.run([tool, str(link), *given, *options], cwd=scratch, capture_output=True, text=True,
                                  check=False)

        done = run()
        for _ in range(shapes.count("]")):  # an ONNX input of another type than given: pnnx names it
            expected = _TYPE_EXPECTED.search(done.stderr + done.stdout) if done.returncode != 0 else None
            if expected is None:
                break
            shapes = _retyped(shapes, int(expected.group(1)), expected.group(2))
            others = _retyped(others, int(expected.group(1)), expected.group(2)) if others else others
            done = run()
        if done.returncode != 0 or not outputs["pnnxparam"].is_file():
            said = [line.strip() for line in (done.stderr + done.stdout).splitlines() if line.strip()]
            raise GraphexecError(f"{source}: pnnx could not convert it (exit {done.returncode}"
                                 + (f": {said[-1]}" if said else "") + ")")
        if not outputs["pnnxbin"].is_file():  # a model without weights: pnnx may write no bin
            outputs["pnnxbin"].write_bytes(b"")
        os.replace(outputs["pnnxbin"], base.with_name(base.name + ".pnnx.bin"))
        os.replace(outputs["pnnxparam"], base.with_name(base.name + ".pnnx.param"))


def _retyped(shapes: str, index: int, name: str) -> str:
    """pnnx's ``inputshape`` argument with input ``index`` given type ``name``."""
    parts = re.findall(r"\[[^\]]*\]\w+", shapes)
    if index < len(parts):
        parts[index] = parts[index][: parts[index].index("]") + 1] + name
    return ",".join(parts)


def loadable(path: str | os.PathLike[str]) -> str | os.PathLike[str]:
    """The pnnx model to load for ``path``: an ONNX model converted into the cache folder
    (reused; see :func:`convert`), anything else as it is."""
    if Path(path).name.lower().endswith(ONNX_SUFFIXES) and convertible(path):
        return convert(path, cache_dir=default_cache_dir())
    return path
