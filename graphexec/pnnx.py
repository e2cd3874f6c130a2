"""Read and write pnnx's model format: ``model.pnnx.param`` (text) and ``model.pnnx.bin`` (zip).

The param file::

    7767517
    <operator count> <operand count>
    <type> <name> <n_in> <n_out> <in...> <out...> key=value ... @attr=(shape)dtype
        $argument=operand #operand=(shape)dtype

A value is ``None``, ``True``/``False``, an int, a float (``1.000000e-05``, ``inf``,
``-inf``, ``nan``), a complex (``1e+00+2e+00j``), a list in ``()`` or ``[]``, or a string.
An operand shape may hold ``?`` (unknown) and ``%name`` (a symbolic size).

The bin is a zip archive of *stored* (uncompressed) entries named ``<operator>.<attr>``,
each the raw little-endian data of one attribute. Entries are read as views into one
read-only memory map of the file, so loading weights copies nothing.
"""

from __future__ import annotations

import io
import math
import mmap
import os
import re
import struct
import zipfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from graphexec import dtypes
from graphexec.errors import GraphStructureError, ModelFormatError, WeightError
from graphexec.ir import Attribute, Dim, Graph, Operator, ParamValue

MAGIC = 7767517

_INT = re.compile(r"[+-]?\d+")
_FLOAT = re.compile(r"[+-]?(?:(?:\d+\.\d*|\.\d+|\d+)(?:[eE][+-]?\d+)?|inf|nan)", re.IGNORECASE)
_COMPLEX = re.compile(
    r"[+-]?(?:\d+\.?\d*(?:[eE][+-]?\d+)?|inf|nan)[+-](?:\d+\.?\d*(?:[eE][+-]?\d+)?|inf|nan)j",
    re.IGNORECASE,
)
_ATOM = re.compile(r"[^(),\[\]]*")
_SHAPE_VALUE = re.compile(r"\(([^()]*)\)([a-z0-9]+)")


# --------------------------------------------------------------------------------------
# values
# --------------------------------------------------------------------------------------
def _parse_scalar(text: str) -> ParamValue:
    if text == "None":
        return None
    if text in ("True", "False"):
        return text == "True"
    if _INT.fullmatch(text):
        return int(text)
    if _FLOAT.fullmatch(text) and text.lower().lstrip("+-") not in ("",):
        return float(text)
    if _COMPLEX.fullmatch(text):
        return complex(text)
    return text


def parse_value(text: str) -> ParamValue:
    """Parse the right-hand side of ``key=value`` the way pnnx writes it.

    A bracketed text is a list only if every element is a plain atom; anything with nested
    brackets (``[int(size(@0,0)),-1]`` in an expression) stays a string.
    """
    if "%" in text:
        return text
    if len(text) >= 2 and text[0] in "([" and text[-1] == {"(": ")", "[": "]"}[text[0]]:
        body = text[1:-1]
        if body == "":
            return []
        items = body.split(",")
        if all(_ATOM.fullmatch(item) and item for item in items):
            values = [_parse_scalar(item) for item in items]
            if any(isinstance(v, (bool, type(None))) for v in values):
                return text
            if any(isinstance(v, str) for v in values):
                return items
            if any(isinstance(v, complex) for v in values):
                return [complex(v) for v in values]
            if any(isinstance(v, float) for v in values):
                return [float(v) for v in values]
            return values
        return text
    return _parse_scalar(text)


def _format_float(value: float) -> str:
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    text = repr(float(value))
    return text if ("." in text or "e" in text) else text + ".0"


def _format_scalar(value: ParamValue) -> str:
    if value is None:
        return "None"
    if isinstance(value, bool):
        return "True" if value else "False"
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    if isinstance(value, (float, np.floating)):
        return _format_float(float(value))
    if isinstance(value, complex):
        imag = _format_float(value.imag)
        sign = "" if imag.startswith("-") else "+"
        return f"{_format_float(value.real)}{sign}{imag}j"
    if isinstance(value, str):
        return value
    raise TypeError(f"cannot write a param of type {type(value).__name__}")


def format_value(value: ParamValue) -> str:
    """The text pnnx would write for ``value``; raises if it would not read back the same."""
    if isinstance(value, (list, tuple)):
        text = "(" + ",".join(_format_scalar(v) for v in value) + ")"
    else:
        text = _format_scalar(value)
    if not text or any(c.isspace() for c in text) or not _same_value(parse_value(text), value):
        raise ValueError(f"the param value {value!r} cannot be written so that it reads back")
    return text


def _same_value(read: ParamValue, written: ParamValue) -> bool:
    if isinstance(written, tuple):
        written = list(written)
    if isinstance(read, list) and isinstance(written, list):
        return len(read) == len(written) and all(
            _same_value(a, b) for a, b in zip(read, written)
        )
    if isinstance(written, (float, complex)) and isinstance(read, (float, complex)):
        return type(read) is type(written) and (read == written or (read != read and written != written) or (
            isinstance(read, complex)
            and all(
                x == y or (x != x and y != y)
                for x, y in ((read.real, written.real), (read.imag, written.imag))
            )
        ))
    return type(read) is type(written) and read == written


def _parse_dims(text: str, *, allow_symbols: bool) -> tuple[Dim, ...]:
    if text == "":
        return ()
    dims: list[Dim] = []
    for item in text.split(","):
        if allow_symbols and item == "?":
            dims.append(None)
        elif allow_symbols and item.startswith("%") and len(item) > 1:
            dims.append(item[1:])
        elif _INT.fullmatch(item) and int(item) >= 0:
            dims.append(int(item))
        else:
            raise ValueError(f"bad dimension {item!r}")
    return tuple(dims)


def _format_dims(dims: Iterable[Dim]) -> str:
    parts = []
    for d in dims:
        parts.append("?" if d is None else f"%{d}" if isinstance(d, str) else str(int(d)))
    return "(" + ",".join(parts) + ")"


# --------------------------------------------------------------------------------------
# the bin
# --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Entry:
    offset: int
    size: int


class WeightArchive:
    """The stored-zip bin, memory-mapped once; entries come back as views into it."""

    def __init__(self, path: str | os.PathLike[str] | None):
        self.path = None if path is None else str(path)
        self._entries: dict[str, _Entry] = {}
        self._map: mmap.mmap | bytes = b""
        if path is not None:
            self._open(self.path)

    def _open(self, path: str) -> None:
        try:
            with open(path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                self._map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if size else b""
        except OSError as exc:
            raise ModelFormatError(f"cannot open the weight file: {exc.strerror or exc}", path=path) from exc
        if not self._map:
            return  # pnnx writes an empty bin for a model without weights
        try:
            with zipfile.ZipFile(io.BytesIO(self._map) if isinstance(self._map, bytes) else _MapReader(self._map)) as archive:
                infos = archive.infolist()
        except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, EOFError, struct.error, OSError) as exc:
            raise ModelFormatError(f"not a pnnx weight archive (zip): {exc}", path=path) from exc
        for info in infos:
            if info.filename in self._entries:
                raise ModelFormatError(f"entry {info.filename!r} appears twice", path=path)
            if info.compress_type != zipfile.ZIP_STORED:
                raise ModelFormatError(
                    f"entry {info.filename!r} is compressed (method {info.compress_type}); "
                    "pnnx stores weights uncompressed",
                    path=path,
                )
            self._entries[info.filename] = _Entry(self._data_offset(info, path), info.file_size)

    def _data_offset(self, info: zipfile.ZipInfo, path: str) -> int:
        header = info.header_offset
        raw = self._map[header : header + 30]
        if len(raw) < 30 or raw[:4] != b"PK\x03\x04":
            raise ModelFormatError(f"entry {info.filename!r} has no local header", path=path)
        name_len, extra_len = struct.unpack("<HH", raw[26:30])
        start = header + 30 + name_len + extra_len
        if start + info.file_size > len(self._map):
            raise ModelFormatError(
                f"entry {info.filename!r} claims {info.file_size} bytes past the end of the file",
                path=path,
            )
        return start

    def __contains__(self, name: str) -> bool:
        return name in self._entries

    def names(self) -> list[str]:
        """The entry names, in archive order."""
        return list(self._entries)

    def size(self, name: str) -> int:
        """The byte size of entry ``name``."""
        return self._entries[name].size

    def view(self, name: str) -> memoryview:
        """The bytes of entry ``name``, as a view into the memory map (no copy)."""
        entry = self._entries[name]
        return memoryview(self._map)[entry.offset : entry.offset + entry.size]


class _MapReader(io.RawIOBase):
    """A seekable file over an mmap, so zipfile can read the directory without a copy."""

    def __init__(self, buffer: mmap.mmap):
        self._buffer = buffer
        self._pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: len(self._buffer)}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def readinto(self, target) -> int:  # type: ignore[override]
        chunk = self._buffer[self._pos : self._pos + len(target)]
        target[: len(chunk)] = chunk
        self._pos += len(chunk)
        return len(chunk)


# --------------------------------------------------------------------------------------
# reading
# --------------------------------------------------------------------------------------
def default_bin_path(param_path: str | os.PathLike[str]) -> Path:
    """``x.pnnx.param`` -> ``x.pnnx.bin`` (any ``.param`` -> ``.bin``)."""
    path = Path(param_path)
    return path.with_name(path.name[: -len(".param")] + ".bin") if path.name.endswith(".param") else path.with_suffix(".bin")


def load(param_path: str | os.PathLike[str], bin_path: str | os.PathLike[str] | None = None) -> Graph:
    """Read a pnnx model into a validated :class:`~graphexec.ir.Graph`."""
    param_path = str(param_path)
    if bin_path is None:
        candidate = default_bin_path(param_path)
        bin_path = candidate if candidate.exists() else None
    archive = WeightArchive(bin_path)
    try:
        with open(param_path, "rb") as f:
            raw = f.read()
    except OSError as exc:
        raise ModelFormatError(f"cannot open the param file: {exc.strerror or exc}", path=param_path) from exc
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ModelFormatError(f"not a text file (byte {exc.start} is not UTF-8)", path=param_path) from exc
    return parse(text, archive, path=param_path)


def parse(text: str, archive: WeightArchive | None = None, *, path: str = "<param>") -> Graph:
    """Parse param-file ``text``, taking attribute data from ``archive``."""
    archive = archive or WeightArchive(None)
    lines = text.split("\n")
    reader = _LineReader(lines, path)
    magic = reader.header_ints(1, 1, "the magic number 7767517")[0]
    if magic != MAGIC:
        raise ModelFormatError(f"bad magic number {magic}, expected {MAGIC}", path=path, line=1)
    operator_count, operand_count = reader.header_ints(2, 2, "'<operator count> <operand count>'")
    graph = Graph()
    body = [(number, line) for number, line in enumerate(lines[2:], start=3) if line.strip()]
    if len(body) != operator_count:
        raise ModelFormatError(
            f"the header declares {operator_count} operators but {len(body)} lines follow",
            path=path,
            line=2,
        )
    for number, line in body:
        _parse_operator(graph, line, archive, path, number)
    if len(graph.operands) != operand_count:
        raise ModelFormatError(
            f"the header declares {operand_count} operands but the operators use {len(graph.operands)}",
            path=path,
            line=2,
        )
    try:
        graph.validate()
    except GraphStructureError as exc:
        raise GraphStructureError(f"{path}: {exc}") from None
    return graph


class _LineReader:
    def __init__(self, lines: list[str], path: str):
        self.lines = lines
        self.path = path

    def header_ints(self, number: int, count: int, what: str) -> list[int]:
        if len(self.lines) < number:
            raise ModelFormatError(f"the file ends before {what}", path=self.path, line=number)
        tokens = self.lines[number - 1].split()
        if len(tokens) != count or not all(_INT.fullmatch(t) and int(t) >= 0 for t in tokens):
            raise ModelFormatError(f"expected {what}, found {self.lines[number - 1][:80]!r}", path=self.path, line=number)
        return [int(t) for t in tokens]


def _parse_operator(graph: Graph, line: str, archive: WeightArchive, path: str, number: int) -> None:
    def fail(message: str) -> ModelFormatError:
        return ModelFormatError(message, path=path, line=number)

    tokens = line.split()
    if len(tokens) < 4:
        raise fail("an operator line needs '<type> <name> <inputs> <outputs>'")
    op_type, name, n_in, n_out = tokens[:4]
    if not (_INT.fullmatch(n_in) and _INT.fullmatch(n_out)) or int(n_in) < 0 or int(n_out) < 0:
        raise fail(f"operator {name}: input and output counts must be numbers, got {n_in!r} {n_out!r}")
    n_in, n_out = int(n_in), int(n_out)
    if len(tokens) < 4 + n_in + n_out:
        raise fail(f"operator {name} declares {n_in} inputs and {n_out} outputs but names fewer")
    ins = tokens[4 : 4 + n_in]
    outs = tokens[4 + n_in : 4 + n_in + n_out]
    try:
        op = graph.add_operator(op_type, name, ins, outs)
    except GraphStructureError as exc:
        raise fail(str(exc)) from None
    op.source = f"{path}:{number}"
    for token in tokens[4 + n_in + n_out :]:
        key, sep, value = token.partition("=")
        if not sep or len(key) < 1 or (key[0] in "@$#" and len(key) < 2):
            raise fail(f"operator {name}: expected key=value, found {token[:80]!r}")
        if key[0] == "@":
            _parse_attribute(op, key[1:], value, archive, fail)
        elif key[0] == "$":
            _bind_input(op, key[1:], value, fail)
        elif key[0] == "#":
            _annotate_operand(op, key[1:], value, fail)
        else:
            if key in op.params:
                raise fail(f"operator {name}: param {key!r} is given twice")
            op.params[key] = parse_value(value)


def _split_shape_value(value: str) -> tuple[str, str] | None:
    match = _SHAPE_VALUE.fullmatch(value)
    return (match.group(1), match.group(2)) if match else None


def _parse_attribute(op: Operator, key: str, value: str, archive: WeightArchive, fail) -> None:
    if key in op.attrs:
        raise fail(f"operator {op.name}: attribute {key!r} is given twice")
    parts = _split_shape_value(value)
    if parts is None:
        raise fail(f"operator {op.name}: attribute @{key} should look like (2,3)f32, found {value[:80]!r}")
    dims_text, type_name = parts
    if not dtypes.is_known(type_name):
        raise fail(f"operator {op.name}: attribute @{key} has unknown type {type_name!r}")
    try:
        shape = tuple(int(d) for d in _parse_dims(dims_text, allow_symbols=False))  # type: ignore[arg-type]
    except ValueError as exc:
        raise fail(f"operator {op.name}: attribute @{key}: {exc}") from None
    entry = f"{op.name}.{key}"
    count = math.prod(shape) if shape else 0
    expected = count * dtypes.file_itemsize(type_name)
    if not shape:
        op.attrs[key] = Attribute(type_name, shape, None)
        return
    if entry not in archive:
        raise WeightError(
            f"operator {op.name}: weight {entry!r} ({_format_dims(shape)}{type_name}) is not in the bin",
            path=archive.path,
        )
    actual = archive.size(entry)
    if actual != expected:
        raise WeightError(
            f"operator {op.name}: weight {entry!r} should hold {expected} bytes for "
            f"{_format_dims(shape)}{type_name} but holds {actual}",
            path=archive.path,
        )
    op.attrs[key] = Attribute(type_name, shape, dtypes.decode(archive.view(entry), type_name, shape))


def _bind_input(op: Operator, key: str, value: str, fail) -> None:
    for i, operand in enumerate(op.inputs):
        if operand.name == value and not op.input_names[i]:
            op.input_names[i] = key
            return
    raise fail(f"operator {op.name}: ${key}={value} names an operand that is not one of its inputs")


def _annotate_operand(op: Operator, key: str, value: str, fail) -> None:
    operand = next((o for o in op.inputs + op.outputs if o.name == key), None)
    if operand is None:
        raise fail(f"operator {op.name}: #{key} names an operand it neither reads nor writes")
    parts = _split_shape_value(value)
    if parts is None:
        raise fail(f"operator {op.name}: #{key} should look like (1,3,?,%w)f32, found {value[:80]!r}")
    dims_text, type_name = parts
    if not (dtypes.is_known(type_name) or type_name in dtypes.ANNOTATION_ONLY):
        raise fail(f"operator {op.name}: #{key} has unknown type {type_name!r}")
    try:
        operand.shape = _parse_dims(dims_text, allow_symbols=True)
    except ValueError as exc:
        raise fail(f"operator {op.name}: #{key}: {exc}") from None
    operand.dtype = type_name


# --------------------------------------------------------------------------------------
# writing
# --------------------------------------------------------------------------------------
def dumps(graph: Graph) -> tuple[str, list[tuple[str, bytes]]]:
    """The param text of ``graph`` and the ``(entry name, bytes)`` its bin must hold."""
    lines = [str(MAGIC), f"{len(graph.operators)} {len(graph.operands)}"]
    entries: list[tuple[str, bytes]] = []
    for op in graph.operators:
        fields = [f"{op.type:<24}", f"{op.name:<24}", str(len(op.inputs)), str(len(op.outputs))]
        fields += [o.name for o in op.inputs] + [o.name for o in op.outputs]
        fields += [f"{k}={format_value(v)}" for k, v in op.params.items()]
        for key, attr in op.attrs.items():
            fields.append(f"@{key}={_format_dims(attr.shape)}{attr.dtype}")
            if attr.shape:
                if attr.data is None:
                    raise ValueError(f"attribute {op.name}.{key} has a shape but no data")
                entries.append((f"{op.name}.{key}", dtypes.encode(np.asarray(attr.data).reshape(attr.shape), attr.dtype)))
        fields += [f"${k}={o.name}" for k, o in zip(op.input_names, op.inputs) if k]
        annotated = set()
        for operand in op.inputs + op.outputs:
            if operand.shape is not None and operand.dtype is not None and operand.name not in annotated:
                annotated.add(operand.name)
                fields.append(f"#{operand.name}={_format_dims(operand.shape)}{operand.dtype}")
        lines.append(" ".join(fields))
    return "\n".join(lines) + "\n", entries


def save(
    graph: Graph,
    param_path: str | os.PathLike[str],
    bin_path: str | os.PathLike[str] | None = None,
    *,
    force_zip64: bool = False,
) -> None:
    """Write ``graph`` as a pnnx param file and its stored-zip bin."""
    text, entries = dumps(graph)
    bin_path = default_bin_path(param_path) if bin_path is None else bin_path
    Path(param_path).write_text(text, encoding="utf-8")
    with zipfile.ZipFile(bin_path, "w", compression=zipfile.ZIP_STORED) as archive:
        for name, data in entries:
            info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_STORED
            with archive.open(info, "w", force_zip64=force_zip64) as handle:
                handle.write(data)
