"""OpenCL programs: built once per context, their binaries kept on disk between processes.

A program is its full source text plus build options. :class:`ProgramCache` keys it by
the SHA-256 of the source, the options and the device's identity (platform, device,
driver and pyopencl versions): in memory it is built once per context; on disk its binary
is stored under that key, so a second process (a new context) loads the binary instead of
compiling. A stale or unreadable binary is rebuilt from source and overwritten.

pyopencl has a binary cache of its own, but skips it for PoCL and NVIDIA (it assumes
their drivers cache); this one is explicit, keyed as above, and checked by the tests. By
default it is not kept for PoCL (:func:`caches_itself`).
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from loguru import logger

from graphexec.devices.opencl._runtime import load_pyopencl
from graphexec.errors import DeviceError

KERNEL_DIR = Path(__file__).resolve().parent / "kernels"


_INCLUDE = re.compile(r'^#include "([\w.]+)"$', re.MULTILINE)


@cache
def kernel_source(name: str) -> str:
    """The text of ``kernels/<name>.cl``, each ``#include "other.cl"`` line replaced by that
    file's text here, so that a program (and its cache key) is its whole source."""
    path = KERNEL_DIR / f"{name}.cl"
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise DeviceError(f"OpenCL kernel source {path} cannot be read: {exc}") from exc
    return _INCLUDE.sub(lambda match: kernel_source(match.group(1).removesuffix(".cl")), text)


def default_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/graphexec/opencl`` or ``~/.cache/graphexec/opencl``."""
    root = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(root) / "graphexec" / "opencl"


def caches_itself(platform: str) -> bool:
    """Whether the platform's driver keeps compiled programs on disk itself, so that a
    binary of ours only costs: PoCL, whose kernel cache (``POCL_CACHE_DIR``) makes a later
    build from source as fast as loading a binary, and which compiles every kernel of a
    program for any work-group size to export one (docs/guide/opencl.md, "The first run")."""
    return "Portable Computing Language" in platform


@dataclass(frozen=True)
class Built:
    """A built program and its cache key."""

    key: str
    program: Any  # pyopencl.Program
    options: tuple[str, ...]


class ProgramCache:
    """Programs of one context and device: in memory, and as binaries in ``cache_dir``.

    ``stats`` counts ``built`` (compiled from source), ``loaded`` (from a binary on disk)
    and ``reused`` (already in memory).
    """

    def __init__(self, context: Any, device: Any, cache_dir: Path | None,
                 host_calls: threading.Lock | None = None):
        self._cl = load_pyopencl()
        self.context = context
        self.device = device
        self.cache_dir = cache_dir
        self.stats: Counter[str] = Counter()
        #: Seconds spent compiling programs from source here.
        self.build_seconds = 0.0
        self._programs: dict[str, Built] = {}
        #: (source, options) -> key: hashing a kernel file again per launch took ~10 us.
        self._keys: dict[tuple[str, tuple[str, ...]], str] = {}
        self._lock = threading.Lock()
        #: The device's lock around runtime calls (see :mod:`graphexec.devices.opencl.device`).
        self._host_calls = host_calls if host_calls is not None else threading.Lock()
        platform = device.platform
        self._identity = (f"{platform.name}\0{platform.version}\0{device.name}\0{device.driver_version}\0"
                          f"{device.version}\0pyopencl {self._cl.VERSION_TEXT}")

    def key(self, source: str, options: Sequence[str]) -> str:
        digest = hashlib.sha256()
        for part in (self._identity, " ".join(options), source):
            digest.update(part.encode("utf-8"))
            digest.update(b"\0")
        return digest.hexdigest()

    def get(self, source: str, options: Sequence[str] = (), what: str = "program") -> Built:
        """The program for ``source`` built with ``options`` (built at most once here)."""
        options = tuple(options)
        key = self._keys.get((source, options))
        if key is None:
            key = self._keys.setdefault((source, options), self.key(source, options))
        with self._lock:
            built = self._programs.get(key)
            if built is not None:
                self.stats["reused"] += 1
                return built
            program = self._load(key, options)
            if program is None:
                if not self.stats["built"]:
                    logger.info("building OpenCL programs for {}: the first run with this device and driver "
                                "compiles them, {}", self.device.name.strip(), self._kept_where())
                started = time.perf_counter()
                program = self._build(source, options, what)
                took = time.perf_counter() - started
                self.stats["built"] += 1
                self.build_seconds += took
                logger.info("built OpenCL {} in {:.1f} s ({} built, {:.1f} s in all)", what.strip(), took,
                            self.stats["built"], self.build_seconds)
                self._store(key, program)
            else:
                self.stats["loaded"] += 1
            built = self._programs[key] = Built(key, program, options)
            return built

    # -- disk -------------------------------------------------------------------------------
    def _kept_where(self) -> str:
        if self.cache_dir is not None:
            return f"binaries cached in {self.cache_dir}: later runs load them"
        if caches_itself(self.device.platform.name):
            return "which the driver caches: later runs take them from there"
        return "kept in memory only: another process compiles them again"

    def _path(self, key: str) -> Path | None:
        return None if self.cache_dir is None else self.cache_dir / f"{key}.bin"

    def _load(self, key: str, options: tuple[str, ...]) -> Any:
        path = self._path(key)
        if path is None or not path.is_file():
            return None
        cl = self._cl
        try:
            binary = path.read_bytes()
            with self._host_calls:
                program = cl.Program(self.context, [self.device], [binary])
                return program.build(options=list(options), devices=[self.device])
        except (OSError, cl.Error):
            return None  # stale (another driver) or damaged: rebuilt from source below

    def _build(self, source: str, options: tuple[str, ...], what: str) -> Any:
        cl = self._cl
        try:
            with self._host_calls:
                program = cl.Program(self.context, source)
                return program.build(options=list(options), devices=[self.device], cache_dir=False)
        except cl.Error as exc:
            raise DeviceError(f"building the OpenCL {what} for {self.device.name.strip()} failed: {exc}") from exc

    def _store(self, key: str, program: Any) -> None:
        path = self._path(key)
        if path is None:
            return
        cl = self._cl
        try:
            binaries = program.get_info(cl.program_info.BINARIES)
            if not binaries or not binaries[0]:
                return
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=".program-", dir=path.parent)
        except (OSError, cl.Error):
            return  # a cache that cannot be written only costs the next process a build
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(bytes(binaries[0]))
            os.replace(tmp, path)  # atomic: a concurrent reader sees the old file or the new one
        except OSError:
            Path(tmp).unlink(missing_ok=True)
