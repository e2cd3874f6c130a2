"""Read and write pnnx's model format: ``model.pnnx.param`` (text) and ``model.pnnx.bin`` (zip).

The param file::

    7767517
    <operator count> <operand count>
    <type> <name> <n_in> <n_out> <in...> <out...> key=value ... @attr=(shape)dtype
        $argument=operand #operand=(shape)dtype

A value is ``None``, ``True``/``False``, an int, a float (``1.000000e-05``, ``inf``,
``-inf``, ``nan``), a complex (``1e+00+2e+00j``; pnnx writes ``1e+00+-2e+00j`` for a
negative imaginary part), a list in ``()`` or ``[]``, or a string (anything with ``%`` or
nested brackets stays one). An operand shape may hold ``?`` (unknown) and ``%name`` (a
symbolic size). An attribute of shape ``()`` has no data, as in pnnx.

The bin is a zip archive (classic or zip64 entries) of *stored* (uncompressed) entries named
``<operator>.<attr>``, each the raw little-endian data of one attribute. Entries are read as
read-only views into one read-only memory map of the file, so loading weights copies nothing
(``bf16``, which numpy cannot hold, is the one conversion). The directory is checked against
each entry's local header and layout, so a damaged archive raises instead of serving garbage.

Every problem with a file raises a :class:`~graphexec.errors.GraphexecError` subclass: a
ModelFormatError (``file:line`` for the param file), a WeightError for a missing or misfit
weight, a GraphStructureError for duplicate names, unproduced inputs or a cycle. The writer
refuses, with a ModelFormatError, any graph it cannot write so that it reads back the same.
"""

from __future__ import annotations

import io
import math
import mmap
import os
import re
import stat
import struct
import zipfile
import zlib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from graphexec import dtypes, footprint
from graphexec.errors import GraphStructureError, ModelFormatError, WeightError
from graphexec.ir import Attribute, Dim, Graph, Operand, Operator, ParamValue

MAGIC = 7767517

_INT = re.compile(r"[+-]?[0-9]+")
# pnnx writes NaN as "nan.0" (its float format adds ".0" to what has no point), inf as "inf"
_NUMBER = r"(?:(?:[0-9]+\.[0-9]*|\.[0-9]+|[0-9]+)(?:[eE][+-]?[0-9]+)?|(?:inf|nan)(?:\.0+)?)"
_FLOAT = re.compile(r"[+-]?" + _NUMBER, re.IGNORECASE)
# pnnx writes a complex as "%e+%ej", so a negative imaginary part reads "1.0e+00+-2.0e+00j".
_COMPLEX = re.compile(
    r"(?P<real>[+-]?" + _NUMBER + r")(?P<sign>\+[+-]?|-)(?P<imag>" + _NUMBER + r")j",
    re.IGNORECASE,
)
_ATOM = re.compile(r"[^(),\[\]]*")
_SHAPE_VALUE = re.compile(r"\(([^()]*)\)([a-z0-9]+)")
#: Longest integer text we read (Python refuses to convert more than 4300 digits).
_MAX_DIGITS = 100


# --------------------------------------------------------------------------------------
# values
# --------------------------------------------------------------------------------------
def _parse_int(text: str) -> int:
    if len(text) > _MAX_DIGITS:
        raise ValueError(f"the number {text[:20]}... has more than {_MAX_DIGITS} digits")
    return int(text)


def _parse_scalar(text: str) -> ParamValue:
    if text == "None":
        return None
    if text in ("True", "False"):
        return text == "True"
    if _INT.fullmatch(text):
        return _parse_int(text)
    if _FLOAT.fullmatch(text):
        return _float(text)
    match = _COMPLEX.fullmatch(text)
    if match:
        imag = _float(match["imag"])
        return complex(_float(match["real"]), -imag if match["sign"].endswith("-") else imag)
    return text


def _float(text: str) -> float:
    """A float as pnnx writes it, ``nan.0`` included."""
    return float(text.split(".")[0] if text.lstrip("+-")[:1] in "iInN" else text)


def parse_value(text: str) -> ParamValue:
    """Parse the right-hand side of ``key=value`` the way pnnx writes it.

    A bracketed text is a list only if every element is a plain atom; anything with nested
    brackets (``[int(size(@0,0)),-1]`` in an expression) stays a string. Raises
    ``ValueError`` for an integer too long to hold.
    """
    if "%" in text:
        return text
    if len(text) >= 2 and text[0] in "([" and text[-1] == {"(": ")", "[": "]"}[text[0]]:
        body = text[1:-1]
        if body == "":
            return []
        numbers = _long_number_list(body)
        if numbers is not None:
            return numbers
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


#: A list body at least this long that holds only plain numbers is read by numpy, not item
#: by item (a literal index list of 10^7 items: about a second, not minutes).
_LONG_LIST = 4096
_NUMBER_CHARS = re.compile(r"[0-9eE.,+-]*")
#: Integers this long may not fit an int64: such a list is read item by item.
_LONG_INTEGER = re.compile(r"[0-9]{19}")


def _long_number_list(body: str) -> list[int] | list[float] | None:
    """The list of ints (or of floats, if any item is one) a long ``a,b,c`` body holds, as
    :func:`parse_value` reads it item by item; None where it may hold anything else."""
    if len(body) < _LONG_LIST or not _NUMBER_CHARS.fullmatch(body) or _LONG_INTEGER.search(body):
        return None
    floats = "." in body or "e" in body or "E" in body
    try:
        values = np.fromstring(body, dtype=np.float64 if floats else np.int64, sep=",")
    except ValueError:  # an item numpy cannot read ("1e", "--1", ""): read item by item
        return None
    if len(values) != body.count(",") + 1:  # numpy stops early at a trailing comma
        return None
    return values.tolist()


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


def _plain(value: object) -> object:
    """``value`` with numpy scalars made Python scalars and tuples made lists."""
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def format_value(value: ParamValue) -> str:
    """The text pnnx would write for ``value``; raises ValueError if it would not read back the same."""
    value = _plain(value)  # type: ignore[assignment]
    try:
        if isinstance(value, list):
            text = "(" + ",".join(_format_scalar(v) for v in value) + ")"
        else:
            text = _format_scalar(value)
    except TypeError as exc:
        raise ValueError(f"the param value {value!r} cannot be written: {exc}") from None
    if any(c.isspace() for c in text) or not _same_value(parse_value(text), value):
        raise ValueError(f"the param value {value!r} cannot be written so that it reads back")
    return text


def _same_value(read: ParamValue, written: object) -> bool:
    if isinstance(read, list) and isinstance(written, list):
        return len(read) == len(written) and all(_same_value(a, b) for a, b in zip(read, written))
    if type(read) is not type(written):
        return False
    if isinstance(read, float):
        return read == written or (math.isnan(read) and math.isnan(written))  # type: ignore[arg-type]
    if isinstance(read, complex):
        return all(
            x == y or (math.isnan(x) and math.isnan(y))
            for x, y in ((read.real, written.real), (read.imag, written.imag))  # type: ignore[union-attr]
        )
    return read == written


#: The largest size one dimension may declare (what an int64 holds, as in PyTorch).
MAX_DIM = 2**63 - 1
#: The most dimensions a shape may declare (numpy's own limit); the byte count of a larger
#: one could be too long a number to print.
MAX_RANK = 64


def _parse_dims(text: str, *, allow_symbols: bool) -> tuple[Dim, ...]:
    if text == "":
        return ()
    if text.count(",") >= MAX_RANK:
        raise ValueError(f"a shape of {text.count(',') + 1:,} dimensions (at most {MAX_RANK})")
    dims: list[Dim] = []
    for item in text.split(","):
        if allow_symbols and item == "?":
            dims.append(None)
        elif allow_symbols and item.startswith("%") and len(item) > 1:
            dims.append(item[1:])
        elif _INT.fullmatch(item) and not item.startswith("-"):
            dim = _parse_int(item)
            if dim > MAX_DIM:
                raise ValueError(f"dimension {item} is larger than any tensor can have")
            dims.append(dim)
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
#: What can go wrong inside :mod:`zipfile` while it reads a damaged directory; all of it is
#: translated into ModelFormatError at this edge.
_ZIP_ERRORS = (
    zipfile.BadZipFile,
    zipfile.LargeZipFile,
    NotImplementedError,  # "zip file version 9.9" from a damaged version field
    ValueError,  # includes UnicodeDecodeError of a damaged UTF-8 entry name
    EOFError,
    OverflowError,
    struct.error,
    OSError,
)
_LOCAL_HEADER = struct.Struct("<4sHHHHHIIIHH")  # the 30 fixed bytes of a zip local file header
_ENCRYPTED = 0x1
#: What may follow an entry's data: the next local header or the central directory.
_NEXT_SIGNATURES = (b"PK\x03\x04", b"PK\x01\x02")


@dataclass(frozen=True)
class _Entry:
    offset: int
    size: int
    crc: int


class WeightArchive:
    """The stored-zip bin, memory-mapped once; entries come back as views into it.

    ``WeightArchive(None)`` is an empty archive; ``missing`` names the bin that was looked
    for and not found, so that a weight asked of it says which file is missing.
    """

    def __init__(self, path: str | os.PathLike[str] | None, *, missing: str | os.PathLike[str] | None = None,
                 memory_limit: int | None = None):
        self.path = None if path is None else path_text(path, "weight file")
        self.missing = None if missing is None else str(missing)
        self._entries: dict[str, _Entry] = {}
        self._map: mmap.mmap | bytes = b""
        if self.path is not None:
            self._open(self.path, memory_limit)

    def _open(self, path: str, memory_limit: int | None = None) -> None:
        _require_regular_file(path, "weight file")
        try:
            with open(path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                self._map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if size else b""
        except (OSError, ValueError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            raise ModelFormatError(f"cannot open the weight file: {reason}", path=path) from exc
        if not self._map:
            return  # pnnx writes an empty bin for a model without weights
        footprint.check_directory(_directory_bytes(self._map), memory_limit, path)
        try:
            with zipfile.ZipFile(_MapReader(self._map)) as archive:  # type: ignore[arg-type]
                infos = archive.infolist()
        except _ZIP_ERRORS as exc:
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
            if info.flag_bits & _ENCRYPTED:
                raise ModelFormatError(f"entry {info.filename!r} is encrypted", path=path)
            if info.compress_size != info.file_size:
                raise ModelFormatError(
                    f"entry {info.filename!r} is stored but its sizes differ "
                    f"({info.compress_size} and {info.file_size} bytes)",
                    path=path,
                )
            self._entries[info.filename] = _Entry(self._data_offset(info, path), info.file_size, info.CRC)

    def _data_offset(self, info: zipfile.ZipInfo, path: str) -> int:
        """Where the data of ``info`` starts, after checking its local header agrees."""
        header = info.header_offset
        raw = self._map[header : header + _LOCAL_HEADER.size] if header >= 0 else b""
        if len(raw) < _LOCAL_HEADER.size or raw[:4] != b"PK\x03\x04":
            raise ModelFormatError(
                f"entry {info.filename!r} has no local header at offset {header}", path=path
            )
        fields = _LOCAL_HEADER.unpack(raw)
        compressed, uncompressed, name_len, extra_len = fields[7], fields[8], fields[9], fields[10]
        start = header + _LOCAL_HEADER.size + name_len + extra_len
        name = bytes(self._map[header + _LOCAL_HEADER.size : header + _LOCAL_HEADER.size + name_len])
        if name != info.orig_filename.encode("utf-8" if info.flag_bits & 0x800 else "cp437", "replace"):
            raise ModelFormatError(
                f"entry {info.filename!r}: its local header names {name[:80]!r}", path=path
            )
        # Sizes in the local header are zero with a data descriptor, 0xffffffff with zip64.
        for value in (compressed, uncompressed):
            if value not in (info.file_size, 0, 0xFFFFFFFF):
                raise ModelFormatError(
                    f"entry {info.filename!r}: its local header says {value} bytes, "
                    f"the directory {info.file_size}",
                    path=path,
                )
        end = start + info.file_size
        if end > len(self._map):
            raise ModelFormatError(
                f"entry {info.filename!r} claims {info.file_size} bytes past the end of the file",
                path=path,
            )
        # Entries lie back to back: right after the data comes the next entry or the
        # directory (unless a data descriptor sits between); pnnx's own reader walks the
        # entries that way, so it needs this layout too. Anything else means the header
        # fields that place the data were damaged, and the view would be garbage.
        if not info.flag_bits & 0x8 and self._map[end : end + 4] not in _NEXT_SIGNATURES:
            raise ModelFormatError(
                f"entry {info.filename!r}: its data is not followed by another entry or the "
                "directory; the archive is damaged",
                path=path,
            )
        return start

    def __contains__(self, name: str) -> bool:
        return name in self._entries

    def drop_pages(self) -> None:
        """Drop the map's resident pages (``madvise(MADV_DONTNEED)``; the map is read-only
        and backed by the file, so a later read faults them in again, unchanged)."""
        if isinstance(self._map, mmap.mmap) and hasattr(mmap, "MADV_DONTNEED"):
            try:
                self._map.madvise(mmap.MADV_DONTNEED)
            except (OSError, ValueError):  # an OS that will not: the pages stay, harmlessly
                pass

    def names(self) -> list[str]:
        """The entry names, in archive order."""
        return list(self._entries)

    def size(self, name: str) -> int:
        """The byte size of entry ``name``."""
        return self._entries[name].size

    def view(self, name: str) -> memoryview:
        """The bytes of entry ``name``, as a read-only view into the memory map (no copy).

        The entry's CRC-32 is checked, so a damaged weight never loads silently.
        """
        entry = self._entries[name]
        data = memoryview(self._map)[entry.offset : entry.offset + entry.size]
        if zlib.crc32(data) != entry.crc:
            raise WeightError(f"weight {name!r} is damaged (its CRC-32 does not match the archive's)", path=self.path)
        return data


def _directory_bytes(data: mmap.mmap | bytes) -> int:
    """The size the archive's end record gives its central directory (zip64's where the
    classic field is full); 0 where there is no end record (zipfile then says what is wrong)."""
    end = data.rfind(b"PK\x05\x06", max(0, len(data) - (1 << 16) - 22))
    if end < 0 or end + 22 > len(data):
        return 0
    size = int.from_bytes(data[end + 12:end + 16], "little")
    locator = end - 20
    if size == 0xFFFFFFFF and locator >= 0 and data[locator:locator + 4] == b"PK\x06\x07":
        record = int.from_bytes(data[locator + 8:locator + 16], "little")
        if 0 <= record <= len(data) - 56 and data[record:record + 4] == b"PK\x06\x06":
            size = int.from_bytes(data[record + 40:record + 48], "little")
    return min(size, len(data))


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
        if whence not in (io.SEEK_SET, io.SEEK_CUR, io.SEEK_END):
            raise ValueError(f"invalid whence {whence}")
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: len(self._buffer)}[whence]
        if base + offset < 0:
            raise OSError(22, "negative seek position")  # what a real file says
        self._pos = base + offset
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
    path = Path(path_text(param_path, "param file"))
    if path.name.endswith(".param"):
        return path.with_name(path.name[: -len(".param")] + ".bin")
    if path.name in ("", ".", ".."):
        raise ModelFormatError("the param file's path names a directory", path=str(path))
    return path.with_suffix(".bin")


def path_text(path: object, what: str) -> str:
    """``path`` (a str, bytes or os.PathLike) as text; a ModelFormatError for one that no
    file system can open (empty, holding a NUL byte, not a path at all)."""
    try:
        text = os.fsdecode(os.fspath(path))  # type: ignore[arg-type]
    except TypeError:
        raise ModelFormatError(f"the {what}'s path must be a str or os.PathLike, not {type(path).__name__}") from None
    if not text:
        raise ModelFormatError(f"the {what}'s path is empty")
    if "\0" in text:
        raise ModelFormatError(f"the {what}'s path holds a NUL byte", path=text.replace("\0", "\\0"))
    return text


def _bin_beside(param_path: str, memory_limit: int | None = None) -> WeightArchive:
    """The weights in the param file's sibling ``.bin``; none where it does not exist (a
    model that needs weights then says which file it looked for)."""
    candidate = default_bin_path(param_path)
    try:
        os.stat(candidate)
    except (FileNotFoundError, NotADirectoryError):
        if os.path.islink(candidate):
            raise ModelFormatError("cannot open the weight file: it is a symbolic link to nothing",
                                   path=str(candidate)) from None
        return WeightArchive(None, missing=candidate)
    except OSError as exc:  # a loop of symbolic links, a name too long, no permission
        raise ModelFormatError(f"cannot open the weight file: {exc.strerror or exc}", path=str(candidate)) from exc
    return WeightArchive(candidate, memory_limit=memory_limit)


#: A param file is text, a few kB per hundred operators; anything this big is not one.
MAX_PARAM_BYTES = 256 << 20


def _require_regular_file(path: str, what: str) -> None:
    """Refuse FIFOs, devices and the like before opening them (they can block or never end)."""
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        raise ModelFormatError(f"cannot open the {what}: {exc.strerror or exc}", path=path) from exc
    if not stat.S_ISREG(mode):
        raise ModelFormatError(f"the {what} is not a regular file", path=path)


def _read_at_most(f: io.BufferedReader, limit: int) -> bytes:
    """Up to ``limit`` bytes of ``f``, in pieces (``f.read(limit)`` sets aside all of
    ``limit`` at once, 256 MiB for every param file)."""
    pieces, count = [], 0
    while count < limit:
        piece = f.read(min(1 << 20, limit - count))
        if not piece:
            break
        pieces.append(piece)
        count += len(piece)
    return b"".join(pieces)


#: The other files pnnx writes beside ``x.pnnx.param``, and what each is.
_PNNX_SIBLINGS = {
    ".pnnx.onnx": "the ONNX file pnnx writes beside the model",
    ".ncnn.param": "ncnn's format, which pnnx writes beside the model",
    ".ncnn.bin": "ncnn's weights, which pnnx writes beside the model",
    ".pnnx.bin": "the model's weight file",
    ".pnnxsim.onnx": "the simplified ONNX file pnnx writes beside its input",
    "_pnnx.py": "the PyTorch script pnnx writes beside the model",
    "_ncnn.py": "the ncnn script pnnx writes beside the model",
}
#: Files of other formats, and how graphexec takes them.
_OTHER_FORMATS = {
    ".onnx": "an ONNX model: convert it with graphexec.convert(path), or pass it to Engine.load or the "
             "command line, which convert it through pnnx",
    ".pt": "a TorchScript file: export the module with graphexec.export, or give the command line its "
           "--input-shape to convert it",
    ".pth": "a PyTorch file: export the module with graphexec.export",
    ".torchscript": "a TorchScript file: give the command line its --input-shape to convert it",
}


def wrong_format(path: str | os.PathLike[str], role: str = "param file") -> ModelFormatError | None:
    """The error for a file of another format given as the ``role`` (``"param file"`` or
    ``"weight file"``), naming the file to pass instead (``x.ncnn.param`` -> ``x.pnnx.param``);
    None for a name that may be right."""
    name = Path(path).name
    wanted = ".pnnx.param" if role == "param file" else ".pnnx.bin"
    if name.endswith(wanted):
        return None
    for suffix, what in _PNNX_SIBLINGS.items():
        if name.endswith(suffix) and len(name) > len(suffix):
            base = Path(path).with_name(name[: -len(suffix)])
            return ModelFormatError(f"this is {what}, not a pnnx {role}: pass {base}{wanted} instead", path=str(path))
    suffix = Path(name).suffix.lower()
    if suffix in _OTHER_FORMATS:
        return ModelFormatError(f"this is {_OTHER_FORMATS[suffix]}", path=str(path))
    return None


def load(param_path: str | os.PathLike[str], bin_path: str | os.PathLike[str] | None = None, *,
         memory_limit: int | None = None) -> Graph:
    """Read a pnnx model into a validated :class:`~graphexec.ir.Graph`.

    Without ``bin_path`` the weights come from the param file's sibling ``.bin``; if there
    is none, a model that needs weights fails naming the file it looked for. A file of
    another format that pnnx writes (``x.pnnx.onnx``, ``x.ncnn.param``) is refused with
    the name of the file to pass instead. With ``memory_limit``, a file whose model would
    take more bytes to load is refused before its operators are read (see
    :mod:`graphexec.footprint`).
    """
    param_path = path_text(param_path, "param file")
    bin_path = None if bin_path is None else path_text(bin_path, "weight file")
    for given, role in ((param_path, "param file"), (bin_path, "weight file")):
        refused = None if given is None else wrong_format(given, role)
        if refused is not None:
            raise refused
    _require_regular_file(param_path, "param file")
    archive = (_bin_beside(param_path, memory_limit) if bin_path is None
               else WeightArchive(bin_path, memory_limit=memory_limit))
    try:
        with open(param_path, "rb") as f:
            raw = _read_at_most(f, MAX_PARAM_BYTES + 1)
    except OSError as exc:
        raise ModelFormatError(f"cannot open the param file: {exc.strerror or exc}", path=param_path) from exc
    if len(raw) > MAX_PARAM_BYTES:
        raise ModelFormatError(f"the param file is larger than {MAX_PARAM_BYTES >> 20} MiB", path=param_path)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        if raw.startswith(b"7767517\n"):  # a param file with a damaged line (pnnx has written such)
            raise ModelFormatError(f"the line holds bytes that are not UTF-8 text (byte {exc.start} of the file): "
                                   "a damaged export; export the model again", path=param_path,
                                   line=raw.count(b"\n", 0, exc.start) + 1) from exc
        raise ModelFormatError(f"not a text file (byte {exc.start} is not UTF-8)", path=param_path) from exc
    return parse(text, archive, path=param_path, memory_limit=memory_limit)


def parse(text: str, archive: WeightArchive | None = None, *, path: str = "<param>",
          memory_limit: int | None = None) -> Graph:
    """Parse param-file ``text``, taking attribute data from ``archive`` (``memory_limit``:
    see :func:`load`)."""
    archive = archive or WeightArchive(None)
    lines = text.removeprefix("\ufeff").split("\n")
    reader = _LineReader(lines, path)
    magic = reader.header_ints(1, 1, "the magic number 7767517")[0]
    if magic != MAGIC:
        raise ModelFormatError(f"bad magic number {magic}, expected {MAGIC}", path=path, line=1)
    operator_count, operand_count = reader.header_ints(2, 2, "'<operator count> <operand count>'")
    graph = Graph(weights=archive)
    body = [(number, line) for number, line in enumerate(lines[2:], start=3) if line.strip()]
    footprint.check_load(len(body), len(text), memory_limit, path)
    if len(body) != operator_count:
        raise ModelFormatError(
            f"the header declares {operator_count} operators but {len(body)} lines follow",
            path=path,
            line=2,
        )
    names: set[str] = set()
    for number, line in body:
        _parse_operator(graph, line, archive, path, number, names)
    _drop_restated_weights(graph)
    # pnnx counts operands that its passes left unconnected (a folded nn.EmbeddingBag
    # declares 8 and uses 5), so only a header that declares fewer than are used is wrong.
    if len(graph.operands) > operand_count:
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


def _drop_restated_weights(graph: Graph) -> None:
    """Undo how pnnx writes a module registered under two names (CoaT's shared convolutions):
    as ``nn.Conv2d`` with its weight and bias stored (``@weight``, ``@bias``) and also handed
    over as leading inputs from ``pnnx.Attribute`` operators, a call no PyTorch module takes
    (a shared ``nn.GRU`` given an initial state: the weights, then the sequence and h0).
    The leading inputs that each hold one of the operator's own attributes are dropped, at
    least one input kept, and so is each attribute operator that nothing reads then."""
    emptied: list[Operator] = []
    for op in graph.operators:
        if not op.type.startswith("nn.") or len(op.inputs) < 2:
            continue
        own = [a.data for a in op.attrs.values() if a.data is not None]
        count = 0
        while count < len(op.inputs) - 1 and _restates(op.inputs[count], own):
            count += 1
        if not count:
            continue
        for operand in op.inputs[:count]:
            operand.consumers.remove(op)
            if not operand.consumers:
                emptied.append(operand.producer)  # type: ignore[arg-type]
        op.inputs, op.input_names = op.inputs[count:], op.input_names[count:]
    for producer in emptied:
        graph.operators.remove(producer)
        for operand in producer.outputs:
            del graph.operands[operand.name]


def _restates(operand: Operand, attributes: list[np.ndarray]) -> bool:
    """Whether ``operand`` comes from a ``pnnx.Attribute`` whose data equals one of ``attributes``."""
    producer = operand.producer
    if producer is None or producer.type != "pnnx.Attribute" or len(producer.outputs) != 1:
        return False
    data = producer.attrs.get("data")
    if data is None or data.data is None:
        return False
    return any(a.dtype == data.data.dtype and np.array_equal(a, data.data) for a in attributes)


class _LineReader:
    def __init__(self, lines: list[str], path: str):
        self.lines = lines
        self.path = path

    def header_ints(self, number: int, count: int, what: str) -> list[int]:
        if len(self.lines) < number:
            raise ModelFormatError(f"the file ends before {what}", path=self.path, line=number)
        tokens = self.lines[number - 1].split()
        if (
            len(tokens) != count
            or not all(_INT.fullmatch(t) and not t.startswith("-") and len(t) <= _MAX_DIGITS for t in tokens)
        ):
            found = self.lines[number - 1][:80]
            raise ModelFormatError(f"expected {what}, found {found!r}", path=self.path, line=number)
        return [int(t) for t in tokens]


def _is_count(token: str) -> bool:
    return bool(_INT.fullmatch(token)) and not token.startswith("-") and len(token) <= _MAX_DIGITS


def _joined_name(tokens: list[str]) -> list[str]:
    """``tokens`` with an operator name that holds spaces joined back into one token.

    pnnx names an operator after its module's path, and a ``ModuleDict`` key may hold a
    space (MONAI's DiNTS keys cells by ``"(0, 1)"``), which splits the name. The name
    ends where two counts are followed by as many operand names (none with ``=``) and
    then only ``key=value`` tokens; a line that fits no such split is left as it was,
    for the caller to report."""
    if _is_count(tokens[2]) and _is_count(tokens[3]):
        return tokens
    for end in range(3, len(tokens) - 1):
        if not (_is_count(tokens[end]) and _is_count(tokens[end + 1])):
            continue
        operands_end = end + 2 + int(tokens[end]) + int(tokens[end + 1])
        if operands_end > len(tokens):
            continue
        if all("=" not in t for t in tokens[end + 2 : operands_end]) and all(
                "=" in t for t in tokens[operands_end:]):
            return [tokens[0], " ".join(tokens[1:end]), *tokens[end:]]
    return tokens


def _parse_operator(
    graph: Graph, line: str, archive: WeightArchive, path: str, number: int, names: set[str]
) -> None:
    def fail(message: str) -> ModelFormatError:
        return ModelFormatError(message, path=path, line=number)

    tokens = line.split()
    if len(tokens) < 4:
        raise fail("an operator line needs '<type> <name> <inputs> <outputs>'")
    tokens = _joined_name(tokens)
    op_type, name, n_in_text, n_out_text = tokens[:4]
    if not (_is_count(n_in_text) and _is_count(n_out_text)):
        raise fail(
            f"operator {name}: input and output counts must be numbers, got {n_in_text!r} {n_out_text!r}"
        )
    n_in, n_out = int(n_in_text), int(n_out_text)
    if len(tokens) < 4 + n_in + n_out:
        raise fail(f"operator {name} declares {n_in} inputs and {n_out} outputs but names fewer")
    if name in names:
        raise GraphStructureError(f"{path}:{number}: two operators are named {name!r}")
    names.add(name)
    ins = tokens[4 : 4 + n_in]
    outs = tokens[4 + n_in : 4 + n_in + n_out]
    for operand_name in ins + outs:
        if "=" in operand_name:
            raise fail(f"operator {name}: {operand_name!r} is not an operand name (it holds '=')")
    try:
        op = graph.add_operator(op_type, name, ins, outs)
    except GraphStructureError as exc:
        raise GraphStructureError(f"{path}:{number}: {exc}") from None
    op.source = f"{path}:{number}"
    # Per-line indexes keep the work linear in the line's length, however many operands.
    operands_here = {o.name: o for o in op.inputs + op.outputs}
    unbound: dict[str, list[int]] = {}
    for i in reversed(range(len(op.inputs))):
        unbound.setdefault(op.inputs[i].name, []).append(i)
    for token in tokens[4 + n_in + n_out :]:
        key, sep, value = token.partition("=")
        if not sep or len(key) < 1 or (key[0] in "@$#" and len(key) < 2):
            raise fail(f"operator {name}: expected key=value, found {token[:80]!r}")
        if key[0] == "@":
            _parse_attribute(op, key[1:], value, archive, fail)
        elif key[0] == "$":
            _bind_input(op, key[1:], value, unbound, fail)
        elif key[0] == "#":
            _annotate_operand(op, key[1:], value, operands_here, fail)
        else:
            if key in op.params:
                raise fail(f"operator {name}: param {key!r} is given twice")
            try:
                op.params[key] = parse_value(value)
            except ValueError as exc:
                raise fail(f"operator {name}: param {key}: {exc}") from None


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
    expected = math.prod(shape) * dtypes.file_itemsize(type_name)
    described = f"{_format_dims(shape)}{type_name}"
    if entry not in archive:
        if not shape:  # pnnx never stores data for an attribute of shape ()
            op.attrs[key] = Attribute(type_name, shape, None)
            return
        if expected == 0:  # pnnx reads an empty entry as a missing one, and so do we
            empty = np.empty(shape, dtypes.numpy_dtype(type_name))
            op.attrs[key] = Attribute(type_name, shape, _read_only(empty))
            return
        if archive.missing is not None:  # no bin at all: say so, not that one weight is missing
            raise WeightError(
                f"the weight file does not exist; the param file reads its weights from it (the first, "
                f"{entry!r}, for operator {op.name}): put the .bin beside the .param or pass its path",
                path=archive.missing,
            )
        raise WeightError(
            f"operator {op.name}: weight {entry!r} ({described}) is missing: it is not in the bin", path=archive.path
        )
    actual = archive.size(entry)
    if actual != expected:
        raise WeightError(
            f"operator {op.name}: weight {entry!r} should hold {expected} bytes for {described} "
            f"but holds {actual}",
            path=archive.path,
        )
    data = dtypes.decode(archive.view(entry), type_name, shape)
    op.attrs[key] = Attribute(type_name, shape, _read_only(data))


def _read_only(array: np.ndarray) -> np.ndarray:
    array.flags.writeable = False
    return array


def _bind_input(op: Operator, key: str, value: str, unbound: dict[str, list[int]], fail) -> None:
    """``$key=value``: name the first input reading ``value`` that has no name yet."""
    positions = unbound.get(value)
    if positions:
        op.input_names[positions.pop()] = key
        return
    raise fail(f"operator {op.name}: ${key}={value} names an operand that is not one of its inputs")


def _annotate_operand(op: Operator, key: str, value: str, operands: dict[str, Operand], fail) -> None:
    operand = operands.get(key)
    if operand is None:
        raise fail(f"operator {op.name}: #{key} names an operand it neither reads nor writes")
    parts = _split_shape_value(value)
    if parts is None:
        raise fail(f"operator {op.name}: #{key} should look like (1,3,?,%w)f32, found {value[:80]!r}")
    dims_text, type_name = parts
    if not (dtypes.is_known(type_name) or type_name in dtypes.ANNOTATION_ONLY):
        raise fail(f"operator {op.name}: #{key} has unknown type {type_name!r}")
    try:
        shape = _parse_dims(dims_text, allow_symbols=True)
    except ValueError as exc:
        raise fail(f"operator {op.name}: #{key}: {exc}") from None
    if operand.dtype is not None:  # annotated before, by its producer or another reader
        earlier = f"{_format_dims(operand.shape)}{operand.dtype}" if operand.shape is not None else operand.dtype
        if operand.dtype != type_name or not _same_dims(operand.shape, shape):
            raise fail(f"operator {op.name}: #{key}={value} contradicts the earlier annotation #{key}={earlier}")
        if operand.shape is not None:  # where one says ? or %symbol and the other a number, keep the number
            shape = tuple(b if isinstance(b, int) else a for a, b in zip(operand.shape, shape))
    operand.shape = shape
    operand.dtype = type_name


def _same_dims(a: tuple | None, b: tuple | None) -> bool:
    """Whether two annotated shapes can describe one tensor: same rank, and equal sizes
    wherever both give a number (``?`` and ``%symbol`` agree with anything)."""
    if a is None or b is None:
        return True
    return len(a) == len(b) and all(not (isinstance(x, int) and isinstance(y, int)) or x == y for x, y in zip(a, b))


# --------------------------------------------------------------------------------------
# writing
# --------------------------------------------------------------------------------------
_SYMBOL = re.compile(r"[^\s,()%]+")


def _check_name(what: str, name: object, *, forbidden: str = "") -> None:
    if not isinstance(name, str) or not name or any(c.isspace() or c in forbidden for c in name):
        extra = f" nor any of {forbidden!r}" if forbidden else ""
        raise ModelFormatError(
            f"cannot write {what} {name!r}: a name must be non-empty, hold no space{extra}"
        )


def _check_dims(what: str, dims: object, *, allow_symbols: bool) -> None:
    ok = isinstance(dims, (tuple, list)) and all(
        (isinstance(d, (int, np.integer)) and not isinstance(d, bool) and d >= 0)
        or (allow_symbols and (d is None or (isinstance(d, str) and _SYMBOL.fullmatch(d) is not None)))
        for d in dims
    )
    if not ok:
        kinds = "sizes >= 0, None for ? or symbol names" if allow_symbols else "sizes >= 0"
        raise ModelFormatError(f"cannot write {what}: its shape {dims!r} must be a tuple of {kinds}")


def _attribute_array(op: Operator, key: str, attr: Attribute) -> np.ndarray | None:
    """The array to store for ``op.attrs[key]``, or None where nothing is stored."""
    what = f"attribute {op.name}.{key}"
    if not dtypes.is_known(attr.dtype):
        raise ModelFormatError(f"cannot write {what}: unknown type {attr.dtype!r}")
    _check_dims(what, attr.shape, allow_symbols=False)
    if attr.data is None:
        if attr.shape and math.prod(attr.shape) != 0:  # shape () without data is pnnx's own habit
            raise ModelFormatError(f"cannot write {what}: it has the shape {attr.shape} but no data")
        return None
    data = np.asarray(attr.data)
    if data.size != math.prod(attr.shape):
        raise ModelFormatError(
            f"cannot write {what}: its data has {data.size} values, "
            f"its shape {attr.shape} needs {math.prod(attr.shape)}"
        )
    return data.reshape(attr.shape)


def _dump(graph: Graph) -> tuple[str, list[tuple[str, np.ndarray, str]]]:
    """The param text and, per bin entry, its name, array and pnnx type (not yet encoded)."""
    used = {o.name: o for op in graph.operators for o in op.inputs + op.outputs}
    lines = [str(MAGIC), f"{len(graph.operators)} {len(used)}"]
    entries: list[tuple[str, np.ndarray, str]] = []
    entry_names: set[str] = set()
    for op in graph.operators:
        _check_name("the operator type", op.type)
        _check_name("the operator name", op.name)
        fields = [f"{op.type:<24}", f"{op.name:<24}", str(len(op.inputs)), str(len(op.outputs))]
        for operand in op.inputs + op.outputs:
            _check_name(f"the operand name of {op.name}", operand.name, forbidden="=")
        fields += [o.name for o in op.inputs] + [o.name for o in op.outputs]
        for key, value in op.params.items():
            _check_name(f"the param key of {op.name}", key, forbidden="=")
            if key[0] in "@$#":
                raise ModelFormatError(
                    f"cannot write the param key {key!r} of {op.name}: it starts with {key[0]!r}"
                )
            try:
                fields.append(f"{key}={format_value(value)}")
            except ValueError as exc:
                raise ModelFormatError(f"cannot write param {key} of {op.name}: {exc}") from None
        for key, attr in op.attrs.items():
            _check_name(f"the attribute key of {op.name}", key, forbidden="=")
            fields.append(f"@{key}={_format_dims(attr.shape)}{attr.dtype}")
            array = _attribute_array(op, key, attr)
            if array is not None:
                name = f"{op.name}.{key}"
                if name in entry_names:
                    raise ModelFormatError(
                        f"cannot write attribute {name}: another attribute has the same entry name"
                    )
                entry_names.add(name)
                entries.append((name, array, attr.dtype))
        if len(op.input_names) not in (0, len(op.inputs)):
            raise ModelFormatError(
                f"cannot write {op.name}: {len(op.input_names)} input names for {len(op.inputs)} inputs"
            )
        unnamed: set[str] = set()
        for key, operand in zip(op.input_names, op.inputs):
            if not key:
                unnamed.add(operand.name)
                continue
            _check_name(f"the input name of {op.name}", key, forbidden="=")
            if operand.name in unnamed:  # "$key=x" binds the first unnamed reading of x
                raise ModelFormatError(
                    f"cannot write {op.name}: it reads {operand.name} twice and names the later reading "
                    f"{key!r} but not the earlier one, which the format cannot say"
                )
            fields.append(f"${key}={operand.name}")
        annotated = set()
        for operand in op.inputs + op.outputs:
            if operand.shape is not None and operand.dtype is not None and operand.name not in annotated:
                annotated.add(operand.name)
                what = f"the annotation of operand {operand.name}"
                _check_dims(what, operand.shape, allow_symbols=True)
                if not (dtypes.is_known(operand.dtype) or operand.dtype in dtypes.ANNOTATION_ONLY):
                    raise ModelFormatError(f"cannot write {what}: unknown type {operand.dtype!r}")
                fields.append(f"#{operand.name}={_format_dims(operand.shape)}{operand.dtype}")
        lines.append(" ".join(fields))
    return "\n".join(lines) + "\n", entries


def dumps(graph: Graph) -> tuple[str, list[tuple[str, bytes]]]:
    """The param text of ``graph`` and the ``(entry name, bytes)`` its bin must hold.

    Raises ModelFormatError for a graph that cannot be written so that it reads back the same.
    """
    text, entries = _dump(graph)
    return text, [(name, dtypes.encode(array, type_name)) for name, array, type_name in entries]


def save(
    graph: Graph,
    param_path: str | os.PathLike[str],
    bin_path: str | os.PathLike[str] | None = None,
    *,
    force_zip64: bool = False,
) -> None:
    """Write ``graph`` as a pnnx param file and its stored-zip bin (``force_zip64``: zip64 entries).

    Each file is written beside its destination and then renamed over it, so a model loaded
    earlier from the same path keeps reading its own (memory-mapped) weights.
    """
    try:
        text, entries = _dump(graph)
    except ModelFormatError as exc:
        raise ModelFormatError(exc.reason, path=str(param_path)) from None
    bin_path = default_bin_path(param_path) if bin_path is None else bin_path
    try:
        with _replacing(bin_path) as tmp:
            with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_STORED) as archive:
                for name, array, type_name in entries:
                    data = dtypes.encode_buffer(array, type_name)
                    info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
                    info.compress_type = zipfile.ZIP_STORED
                    info.file_size = data.nbytes  # lets zipfile choose zip64 itself for a huge entry
                    with archive.open(info, "w", force_zip64=force_zip64) as handle:
                        handle.write(data)
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise ModelFormatError(f"cannot write the weight file: {reason}", path=str(bin_path)) from exc
    try:
        with _replacing(param_path) as tmp:
            tmp.write_text(text, encoding="utf-8")
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise ModelFormatError(f"cannot write the param file: {reason}", path=str(param_path)) from exc


class _replacing:
    """A temporary path beside ``path`` that replaces it on success and vanishes on failure."""

    def __init__(self, path: str | os.PathLike[str]):
        self.path = Path(path)
        self.tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.{id(self)}.tmp")

    def __enter__(self) -> Path:
        return self.tmp

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            os.replace(self.tmp, self.path)
        else:
            self.tmp.unlink(missing_ok=True)
