"""The cache directory: one file per (function, signature), grouped by top-level module.

Writes go to a temporary file in the same directory, then `os.replace`: a reader sees the old
file or the new one, never a part. Read-modify-write of one file (adding a variant) holds a
lock on its module folder (filelock), so concurrent writers lose nothing. Reading a file
updates its modification time; when the directory grows past its size bound the least
recently used files are deleted.
"""
from __future__ import annotations

import math
import os
import re
import tempfile
import time
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from stat import S_ISREG

from ..envflags import env_flag
from .codec import CorruptEntry

ENV_ENABLE = "LAZYTRACE_CACHE"        # 1/true: graphs are stored and loaded by default
ENV_DIR = "LAZYTRACE_CACHE_DIR"       # where (default: the per-user cache directory)
ENV_MAX_MB = "LAZYTRACE_CACHE_MAX_MB"  # size bound in MiB (default 1024)
SUFFIX = ".lzt"
_TMP_PREFIX = ".tmp-"
_DEFAULT_MAX_BYTES = 1024 * 2**20
_NO_FOLLOW = getattr(os, "O_NOFOLLOW", 0)
_TOUCH_AFTER_S = 60          # a file read again within this time keeps its modification time


def default_directory() -> Path:
    """$LAZYTRACE_CACHE_DIR, else the per-user cache directory of lazytrace (platformdirs)."""
    configured = os.environ.get(ENV_DIR)
    if configured:
        return Path(configured).expanduser()
    import platformdirs
    return platformdirs.user_cache_path("lazytrace") / "graphs"


def enabled_by_env() -> bool:
    return env_flag(ENV_ENABLE)


def _max_bytes_from_env() -> int:
    text = os.environ.get(ENV_MAX_MB)
    if not text:
        return _DEFAULT_MAX_BYTES
    try:
        size = float(text)
    except ValueError:
        size = math.nan
    if not (0 < size < math.inf) or int(size * 2**20) <= 0:
        raise ValueError(f"{ENV_MAX_MB}={text!r}: expected a positive size in MiB such as 512")
    return int(size * 2**20)


@dataclass(frozen=True)
class StoredFile:
    path: Path
    module: str        # top-level module of the function
    function: str      # submodule and qualified name (as in the file name), e.g. color.gray.rgb_to_grayscale
    size: int
    last_used: float   # modification time: updated by each read


class GraphStore:
    """Files of stored graphs under `directory`, at most `max_bytes` in all."""

    def __init__(self, directory, max_bytes: int | None = None):
        self.directory = Path(directory).expanduser()
        self.max_bytes = _max_bytes_from_env() if max_bytes is None else int(max_bytes)
        if self.max_bytes <= 0:
            raise ValueError(f"max_bytes must be positive, got {self.max_bytes}")
        self._listings: dict = {}       # folder -> (its modification time, listing)

    def path(self, module: str, function: str, digest: str) -> Path:
        """module/qualified name of a function and its key's digest -> the file of that key."""
        return self.directory / _safe_module(module) / f"{file_stem(module, function)}-{digest[:40]}{SUFFIX}"

    def has_files(self, fn) -> bool:
        """Whether files are stored under the name of this function (one stat when none changed)."""
        module, qualname = getattr(fn, "__module__", None), getattr(fn, "__qualname__", None)
        if type(module) is not str or type(qualname) is not str or not module.partition(".")[0].isidentifier():
            return False
        return file_stem(module, qualname) in self.listing(module)

    def listing(self, module: str) -> dict[str, list[Path]]:
        """{file stem: paths, most recently used first} of a top-level module's folder. Read again
        only when the folder changed (its modification time): one stat for each LazyGraph made."""
        folder = self.directory / _safe_module(module)
        try:
            stamp = folder.stat().st_mtime_ns
        except OSError:
            return {}
        cached = self._listings.get(folder)
        if cached is not None and cached[0] == stamp:
            return cached[1]
        found = []
        try:
            with os.scandir(folder) as entries:
                for entry in entries:
                    if entry.name.endswith(SUFFIX) and not entry.name.startswith(_TMP_PREFIX):
                        try:
                            found.append((-entry.stat().st_mtime_ns, entry.name, Path(entry.path)))
                        except FileNotFoundError:
                            continue
        except OSError:
            return {}
        out: dict[str, list[Path]] = {}
        for _, name, path in sorted(found):
            out.setdefault(name.rsplit("-", 1)[0], []).append(path)
        self._listings[folder] = (stamp, out)
        return out

    def read(self, path: Path, touch: bool = True) -> bytes | None:
        """The file's bytes (None if there is none); its modification time is set to now (least
        recently used goes first) unless it was already set in the last minute. CorruptEntry for
        what lazytrace never writes there: a symbolic link (to /dev/zero, a FIFO, a huge file: read
        whole, it exhausts memory or blocks), anything but a regular file, a file over the bound."""
        try:
            fd = os.open(path, os.O_RDONLY | _NO_FOLLOW | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
        except FileNotFoundError:
            return None
        except OSError:
            if _NO_FOLLOW and os.path.islink(path):
                raise CorruptEntry("it is a symbolic link, which lazytrace never writes") from None
            raise
        with open(fd, "rb", buffering=0) as f:
            stat = os.fstat(fd)
            if not S_ISREG(stat.st_mode):
                raise CorruptEntry("it is not a regular file")
            if stat.st_size > self.max_bytes:
                raise CorruptEntry(f"it is larger ({stat.st_size} bytes) than the cache's bound")
            data = f.readall()
            if touch and stat.st_mtime < time.time() - _TOUCH_AFTER_S:
                try:
                    os.utime(fd if os.utime in os.supports_fd else path)
                except OSError:
                    pass
        return data

    def update(self, path: Path, change) -> None:
        """Write change(current bytes or None) -> new bytes (or None: leave as is) atomically,
        holding the module folder's lock."""
        from filelock import FileLock
        path.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(str(path.parent / ".lock")):
            try:
                current = self.read(path, touch=False)
            except CorruptEntry:
                current = None          # replaced
            data = change(current)
            if data is None:
                return
            fd, tmp = tempfile.mkstemp(prefix=_TMP_PREFIX, dir=path.parent)
            try:
                if hasattr(os, "fchmod"):       # mkstemp's 0600 would hide it from other users of a shared cache
                    os.fchmod(fd, 0o666 & ~_umask())
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
                os.replace(tmp, path)
            except BaseException:
                _remove(Path(tmp))
                raise
        if self.size() > self.max_bytes:
            self.evict()

    def remove(self, path: Path) -> None:
        _remove(path)

    # ---- inspection and pruning --------------------------------------------------------------
    def files(self, module: str | None = None) -> list[StoredFile]:
        """Stored files (least recently used first), of one top-level module or all."""
        folders = [self.directory / _safe_module(module)] if module else \
            [p for p in self.directory.iterdir() if p.is_dir()] if self.directory.is_dir() else []
        out = []
        for folder in folders:
            if not folder.is_dir():
                continue
            for path in folder.glob(f"*{SUFFIX}"):
                try:
                    stat = path.stat()
                except FileNotFoundError:
                    continue
                stem = path.name.rsplit("-", 1)[0]
                out.append(StoredFile(path, folder.name, stem.removeprefix(folder.name + "."), stat.st_size,
                                      stat.st_mtime))
        return sorted(out, key=lambda f: f.last_used)

    def size(self) -> int:
        return sum(f.size for f in self.files())

    def evict(self) -> list[StoredFile]:
        """Delete least recently used files until the directory is within its bound; also
        temporary files left by killed writers (older than an hour)."""
        files = self.files()
        total = sum(f.size for f in files)
        removed = []
        for f in files:
            if total <= self.max_bytes:
                break
            _remove(f.path)
            total -= f.size
            removed.append(f)
        for tmp in self.directory.glob(f"*/{_TMP_PREFIX}*"):
            try:
                if tmp.stat().st_mtime < time.time() - 3600:
                    _remove(tmp)
            except FileNotFoundError:
                pass
        return removed

    def clear(self, module: str | None = None) -> int:
        """Delete the stored files of one top-level module (or all); return how many."""
        files = self.files(module)
        for f in files:
            _remove(f.path)
        return len(files)


def file_stem(module: str, function: str) -> str:
    """The name part of a function's files: its module and qualified name, in characters safe in
    file names (a longer name is cut; the key in the file tells such names apart)."""
    return re.sub(r"[^\w.]", "_", f"{module}.{function}")[:150]


def _safe_module(module: str) -> str:
    name = module.partition(".")[0]
    if not name.isidentifier():
        raise ValueError(f"not a module name: {module!r}")
    return name


@lru_cache(maxsize=1)
def _umask() -> int:
    """The process's file-creation mask (read once: setting it back at once is the only way to read it)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _remove(path: Path) -> None:
    try:
        path.unlink()
    except FileNotFoundError:
        pass


@lru_cache(maxsize=None)
def _store_at(directory: Path, max_bytes: int) -> GraphStore:
    return GraphStore(directory, max_bytes)


def store_for(setting) -> GraphStore | None:
    """The store a `cache=` setting asks for: None follows $LAZYTRACE_CACHE; True: the default
    directory; False: none; a path: that directory; a GraphStore: itself."""
    if isinstance(setting, GraphStore):
        return setting
    if setting is None:
        setting = enabled_by_env()
    if setting is False:
        return None
    if setting is True:
        return _store_at(default_directory(), _max_bytes_from_env())
    if isinstance(setting, (str, os.PathLike)):
        return _store_at(Path(setting).expanduser(), _max_bytes_from_env())
    raise TypeError(f"cache= takes True, False, None or a directory, got {type(setting).__name__}")
