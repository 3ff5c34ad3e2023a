"""The compile cache: compiled kernels, kept in memory and on disk.

Compiling a kernel takes far longer than loading one, so every compilation is
stored under a *key* that names everything the result depends on: the kernel
source, its compile-time arguments, the target, the versions of tilelab,
apache-tvm and Python, and a digest of the compiler's own code (an editable
install changes its passes without changing its version; a kernel the old passes
compiled must not come back). `cache_key(...)` hashes those parts into a hex string.

An entry is a small set of named files, for example ``kernel.so`` (or
``kernel.cubin``) and ``meta.json``. It lives in two places:

* in memory, a dict with least-recently-used eviction (256 entries), so that
  recompiling in the same notebook session costs nothing;
* on disk, one directory per entry, so that a new process starts warm::

      <cache_dir>/tilelab-v1/CACHEDIR.TAG
                             <key[:2]>/<key>/kernel.so
                                             meta.json
                                             MANIFEST.json   (each file's sha256 and size)

Everything tilelab writes lives in its own subfolder ``tilelab-v1``, because
``TILELAB_CACHE_DIR`` may name a folder that holds other things: `clear()`
removes only entries (and the temporary and lock files) inside that subfolder,
and the ``CACHEDIR.TAG`` that tells backup tools to skip a cache goes there,
never into a folder tilelab did not create.

Writing is crash-safe and safe between processes: an entry is written into a
temporary directory beside its final place and renamed in one step, so a reader
sees either a complete entry or none. A lock file (``<key>.lock``) keeps two
processes that compile the same kernel from writing it twice; if an entry
appears anyway, the first one stays. A writer removes its lock file when done,
and leftovers of killed writers (temporary directories, lock files) are swept
once they are stale. Reading checks every file against the
manifest; an entry that fails the check (a truncated file, an edited byte, a
broken manifest) is deleted with a warning and counts as a miss, so the caller
simply compiles again.

Environment variables: ``TILELAB_CACHE_DIR`` moves the cache (default
``$XDG_CACHE_HOME/tilelab`` or ``~/.cache/tilelab``); ``TILELAB_DISABLE_CACHE=1``
turns it off (every lookup misses, nothing is stored).

This module imports neither tvm nor torch: the runtime uses it to load kernels.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import re
import shutil
import sys
import tempfile
import threading
import time
import warnings
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from importlib import metadata
from pathlib import Path
from typing import Any

try:  # POSIX only; without it the cache still works, just without the cross-process lock.
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

__all__ = [
    "CacheCorruptionWarning",
    "CompileCache",
    "cache_dir",
    "cache_key",
    "clear",
    "default_cache",
    "info",
]

MANIFEST = "MANIFEST.json"
MANIFEST_FORMAT = 1
MEMORY_ENTRIES = 256
SUBDIR = "tilelab-v1"  # the folder under the cache directory that tilelab owns
STALE_SECONDS = 600  # a temporary directory or unlocked lock file this old is a leftover

# Keys become directory names, so they are restricted to characters that cannot
# escape the cache directory or collide with our ".lock" and ".tmp-" names.
_KEY_RE = re.compile(r"[0-9A-Za-z_-]{3,128}")
# File names inside an entry: plain names, no directories, nothing hidden.
_FILE_NAME_RE = re.compile(r"[0-9A-Za-z_][0-9A-Za-z_.-]*")


class CacheCorruptionWarning(UserWarning):
    """A cache entry on disk failed its manifest check (or failed to load) and was deleted."""


# --------------------------------------------------------------------------- where and what


def cache_dir() -> Path:
    """The directory of the on-disk cache (it need not exist yet)."""
    explicit = os.environ.get("TILELAB_CACHE_DIR")
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "tilelab"


def cache_disabled() -> bool:
    """True when the environment turns the cache off (``TILELAB_DISABLE_CACHE=1``)."""
    value = os.environ.get("TILELAB_DISABLE_CACHE", "").strip().lower()
    return value not in ("", "0", "false", "no", "off")


@functools.cache
def _package_version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "none"


@functools.cache
def _compiler_fingerprint(root: str) -> str:
    """A sha256 of the compiler's own code below `root`: tilelab's Python sources and the
    CUDA headers it puts into kernels, each with its path. Read once per process (about
    1.4 MB)."""
    base = Path(root)
    digest = hashlib.sha256()
    for path in sorted(base.rglob("*")):
        if path.suffix in (".py", ".h", ".cuh") and "__pycache__" not in path.parts and \
                path.is_file():
            digest.update(path.relative_to(base).as_posix().encode() + b"\0")
            digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()


def _canonical(value: Any) -> Any:
    """Check that `value` is plain data and return it with tuples as lists.

    Dict keys must be strings: JSON would turn ``{1: x}`` and ``{"1": x}`` into
    the same text, and two different programs must never share a key.
    """
    if value is None or isinstance(value, (str, bool, int, float)):
        return value
    if isinstance(value, (list, tuple)):
        return [_canonical(v) for v in value]
    if isinstance(value, dict):
        for k in value:
            if not isinstance(k, str):
                raise TypeError(f"cache_key: dict keys must be str, got {type(k).__name__} {k!r}")
        return {k: _canonical(v) for k, v in value.items()}
    raise TypeError(
        f"cache_key: cannot hash a {type(value).__name__}; pass str, int, float, bool, "
        "None, or lists/tuples/dicts of them"
    )


def cache_key(*parts: Any) -> str:
    """A sha256 hex digest naming a compilation.

    `parts` are plain data (str, int, float, bool, None, and lists, tuples and
    str-keyed dicts of them). The versions of tilelab, apache-tvm and Python and
    the digest of tilelab's code are mixed in, so upgrading any of them, or editing
    the compiler, starts from a cold cache. The encoding is canonical JSON (sorted
    keys, no whitespace), so the same parts give the same key in every process.
    """
    payload = {
        "parts": _canonical(list(parts)),
        "compiler": _compiler_fingerprint(str(Path(__file__).resolve().parent)),
        "tilelab": _package_version("tilelab"),
        "tvm": _package_version("apache-tvm"),
        "python": f"{sys.version_info.major}.{sys.version_info.minor}",
    }
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


# --------------------------------------------------------------------------- helpers


class _CorruptEntry(Exception):
    """Internal: an entry directory exists but does not match its manifest."""


def _check_key(key: str) -> str:
    if not isinstance(key, str) or not _KEY_RE.fullmatch(key):
        raise ValueError(f"invalid cache key {key!r}: expected 3-128 characters of [0-9A-Za-z_-]")
    return key


def _check_files(files: Mapping[str, bytes]) -> dict[str, bytes]:
    checked: dict[str, bytes] = {}
    for name, data in files.items():
        if not isinstance(name, str) or not _FILE_NAME_RE.fullmatch(name) or name == MANIFEST:
            raise ValueError(f"invalid file name {name!r} for a cache entry")
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError(f"cache entry file {name!r} must be bytes, got {type(data).__name__}")
        checked[name] = bytes(data)
    return checked


def _manifest(files: Mapping[str, bytes]) -> dict[str, Any]:
    return {
        "format": MANIFEST_FORMAT,
        "files": {
            name: {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}
            for name, data in sorted(files.items())
        },
    }


def _read_entry(entry: Path) -> dict[str, bytes] | None:
    """Read and verify one entry directory: None if absent, raise _CorruptEntry if bad."""
    if not entry.is_dir():
        return None
    try:
        manifest = json.loads((entry / MANIFEST).read_text(encoding="utf-8"))
    except FileNotFoundError:
        if not entry.exists():  # deleted by another process while we looked
            return None
        raise _CorruptEntry("MANIFEST.json is missing") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise _CorruptEntry(f"MANIFEST.json is unreadable ({exc})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != MANIFEST_FORMAT:
        raise _CorruptEntry("MANIFEST.json has an unknown format")
    listed = manifest.get("files")
    if not isinstance(listed, dict):
        raise _CorruptEntry("MANIFEST.json has no file list")

    files: dict[str, bytes] = {}
    for name, record in listed.items():
        if not isinstance(name, str) or not _FILE_NAME_RE.fullmatch(name):
            raise _CorruptEntry(f"MANIFEST.json lists an invalid file name {name!r}")
        if not isinstance(record, dict):
            raise _CorruptEntry(f"MANIFEST.json has a malformed record for {name!r}")
        try:
            data = (entry / name).read_bytes()
        except FileNotFoundError:
            raise _CorruptEntry(f"{name} is missing") from None
        except OSError as exc:
            raise _CorruptEntry(f"{name} is unreadable ({exc})") from None
        if len(data) != record.get("size"):
            raise _CorruptEntry(
                f"{name} has {len(data)} bytes, the manifest says {record.get('size')}"
            )
        if hashlib.sha256(data).hexdigest() != record.get("sha256"):
            raise _CorruptEntry(f"{name} does not match its sha256 in the manifest")
        files[name] = data
    return files


def _remove_tree(path: Path) -> None:
    """Delete a directory so that readers see it whole or not at all."""
    if not path.exists():
        return
    # Rename first (atomic), then delete at leisure under the hidden name.
    trash = path.with_name(f".trash-{path.name}-{os.getpid()}-{threading.get_ident()}")
    try:
        os.replace(path, trash)
    except OSError:
        trash = path
    shutil.rmtree(trash, ignore_errors=True)


def _open_locked(lock_path: Path, blocking: bool = True) -> int | None:
    """An open descriptor of `lock_path` holding its exclusive flock, or None (not blocking
    and someone else holds it).

    Lock files are deleted by their holder (see `_locked`), so after waiting we check that
    the path still names the file we locked; if not, we lock the new file instead. That
    is what makes deleting a lock file while others wait on it safe.
    """
    while True:
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
        except BlockingIOError:
            os.close(fd)
            return None
        except BaseException:
            os.close(fd)
            raise
        try:
            same = os.stat(lock_path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:
            return fd
        os.close(fd)  # deleted (and maybe re-created) while we waited: lock the new one


@contextlib.contextmanager
def _locked(lock_path: Path) -> Iterator[None]:
    """Hold an exclusive flock on `lock_path`; the file is deleted when released."""
    if fcntl is None:  # pragma: no cover - Windows
        yield
        return
    fd = _open_locked(lock_path)
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            os.unlink(lock_path)  # still ours: waiters see the new inode and retry
        os.close(fd)  # closing releases the flock


def _is_stale(path: Path, now: float) -> bool:
    """A leftover of a killed writer: `.tmp-<key>-<pid>-*` of a dead process, or too old."""
    try:
        age = now - path.lstat().st_mtime
    except OSError:
        return False
    if age > STALE_SECONDS:
        return True
    parts = path.name.rsplit("-", 2)  # .tmp-<key>-<pid>-<random, no dashes>
    if path.name.startswith(".tmp-") and len(parts) == 3 and parts[1].isdigit():
        return not _process_alive(int(parts[1]))
    return False


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # exists, owned by someone else
        return True
    return True


def _write_file(path: Path, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


# --------------------------------------------------------------------------- the cache


class CompileCache:
    """Compiled artifacts by key: an LRU dict in memory over a directory on disk.

    `root` defaults to `cache_dir()`. `disabled` defaults to following
    ``TILELAB_DISABLE_CACHE`` (read on every call, so it can be toggled).
    Safe to share between threads; processes coordinate through lock files.
    """

    def __init__(
        self,
        root: str | os.PathLike[str] | None = None,
        *,
        memory_entries: int = MEMORY_ENTRIES,
        disabled: bool | None = None,
    ) -> None:
        self.root = Path(root).expanduser() if root is not None else cache_dir()
        self.home = self.root / SUBDIR  # everything tilelab writes lives in here
        self.memory_entries = memory_entries
        self._disabled = disabled
        self._memory: OrderedDict[str, dict[str, bytes]] = OrderedDict()
        self._mutex = threading.Lock()

    def __repr__(self) -> str:
        return f"CompileCache(root={str(self.root)!r}, disabled={self.disabled})"

    @property
    def disabled(self) -> bool:
        return cache_disabled() if self._disabled is None else self._disabled

    def entry_dir(self, key: str) -> Path:
        """Where the entry for `key` lives on disk (whether or not it exists)."""
        _check_key(key)
        return self.home / key[:2] / key

    # ----------------------------------------------------------------- reading

    def get(self, key: str) -> dict[str, bytes] | None:
        """The files stored under `key`, or None on a miss (or a corrupt entry)."""
        _check_key(key)
        if self.disabled:
            return None
        with self._mutex:
            files = self._memory.get(key)
            if files is not None:
                self._memory.move_to_end(key)
                return dict(files)
        files = self._load_verified(key)
        if files is not None:
            self._remember(key, files)
            return dict(files)
        return None

    def get_path(self, key: str) -> Path | None:
        """The directory of the verified on-disk entry for `key`, or None.

        Use this to load a shared library, which needs a file path. The entry is
        checked against its manifest on every call.
        """
        _check_key(key)
        if self.disabled:
            return None
        files = self._load_verified(key)
        if files is None:
            return None
        self._remember(key, files)
        return self.entry_dir(key)

    def __contains__(self, key: str) -> bool:
        return self.get(key) is not None

    # ----------------------------------------------------------------- writing

    def put(self, key: str, files: Mapping[str, bytes]) -> None:
        """Store `files` (name → bytes) under `key`, in memory and on disk.

        If another process stored `key` first, its entry is kept: equal keys
        mean equal compilations. A disk that cannot be written (read-only,
        full) gives a warning, not an error; the entry stays in memory.
        """
        _check_key(key)
        files = _check_files(files)
        if self.disabled:
            return
        entry = self.entry_dir(key)
        try:
            entry.parent.mkdir(parents=True, exist_ok=True)
            self._write_cachedir_tag()
            self._sweep(entry.parent)
            with _locked(entry.parent / f"{key}.lock"):
                existing = self._load_verified(key, locked=True)
                if existing is not None:
                    files = existing  # someone else won; theirs is the entry
                else:
                    self._write_entry(entry, files)
        except OSError as exc:
            warnings.warn(
                f"tilelab: could not write compile cache entry {entry}: {exc}; "
                "the kernel stays cached in memory only",
                RuntimeWarning,
                stacklevel=2,
            )
        self._remember(key, files)

    def _write_entry(self, entry: Path, files: Mapping[str, bytes]) -> None:
        # the writer's pid in the name lets a sweep tell a killed writer's leftovers
        tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{entry.name}-{os.getpid()}-",
                                    dir=entry.parent))
        try:
            for name, data in files.items():
                _write_file(tmp / name, data)
            # The manifest goes last: an entry with a manifest is a complete entry.
            manifest = json.dumps(_manifest(files), indent=1, sort_keys=True)
            _write_file(tmp / MANIFEST, manifest.encode("utf-8"))
            try:
                # rename(2) moves a directory into place atomically, and fails if a
                # non-empty directory is already there: then that one stays.
                os.replace(tmp, entry)
            except OSError:
                if not entry.is_dir():
                    raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def _write_cachedir_tag(self) -> None:
        # Tells backup tools (and people) that this directory can be regenerated. It goes
        # into tilelab's own subfolder: the cache directory itself may hold other things.
        tag = self.home / "CACHEDIR.TAG"
        if not tag.exists():
            tag.write_text(
                "Signature: 8a477f597d28d172789f06886806bc55\n"
                "# This file marks the tilelab compile cache; see https://bford.info/cachedir/\n"
            )

    # ----------------------------------------------------------------- memory

    def _remember(self, key: str, files: dict[str, bytes]) -> None:
        with self._mutex:
            self._memory[key] = files
            self._memory.move_to_end(key)
            while len(self._memory) > self.memory_entries:
                self._memory.popitem(last=False)

    def _load_verified(self, key: str, *, locked: bool = False) -> dict[str, bytes] | None:
        """Read the disk entry for `key`; delete it (with a warning) if corrupt."""
        entry = self.entry_dir(key)
        try:
            return _read_entry(entry)
        except _CorruptEntry:
            pass
        # Look again under the lock: the entry may have been replaced or removed by
        # another process meanwhile, and a good entry must never be deleted.
        lock = contextlib.nullcontext() if locked else _locked(entry.parent / f"{key}.lock")
        try:
            with lock:
                try:
                    return _read_entry(entry)
                except _CorruptEntry as exc:
                    reason = str(exc)
                _remove_tree(entry)
        except OSError:  # the prefix directory vanished (a concurrent clear): a miss
            return None
        warnings.warn(
            f"tilelab: deleted a corrupt compile cache entry ({reason}): {entry}. "
            "The kernel will be compiled again.",
            CacheCorruptionWarning,
            stacklevel=3,
        )
        return None

    def evict(self, key: str, reason: str) -> None:
        """Delete the entry for `key` (memory and disk) because it failed to load, with a
        warning; the caller compiles again and stores a fresh entry."""
        _check_key(key)
        with self._mutex:
            self._memory.pop(key, None)
        entry = self.entry_dir(key)
        with contextlib.suppress(OSError):
            with _locked(entry.parent / f"{key}.lock"):
                _remove_tree(entry)
        warnings.warn(
            f"tilelab: deleted a compile cache entry that failed to load ({reason}): {entry}. "
            "The kernel will be compiled again.",
            CacheCorruptionWarning,
            stacklevel=3,
        )

    # ----------------------------------------------------------------- housekeeping

    def _sweep(self, prefix: Path) -> None:
        """Remove what killed writers left in one prefix directory: temporary entry
        directories and lock files that nobody holds, once they are stale."""
        now = time.time()
        try:
            names = list(prefix.iterdir())
        except OSError:
            return
        for path in names:
            if path.name.startswith((".tmp-", ".trash-")) and _is_stale(path, now):
                shutil.rmtree(path, ignore_errors=True)
            elif path.name.endswith(".lock") and fcntl is not None and _is_stale(path, now):
                fd = _open_locked(path, blocking=False)
                if fd is not None:  # nobody is writing: delete while holding it
                    with contextlib.suppress(OSError):
                        os.unlink(path)
                    os.close(fd)

    def sweep(self) -> None:
        """Sweep every prefix directory (see `_sweep`)."""
        for prefix in self._prefix_dirs():
            self._sweep(prefix)

    def _prefix_dirs(self) -> list[Path]:
        if not self.home.is_dir() or self.home.is_symlink():
            return []
        return [p for p in sorted(self.home.iterdir())
                if len(p.name) == 2 and p.is_dir() and not p.is_symlink()]

    def _entry_dirs(self) -> Iterator[Path]:
        for prefix in self._prefix_dirs():
            for entry in sorted(prefix.iterdir()):
                if entry.is_dir() and _KEY_RE.fullmatch(entry.name):
                    yield entry

    def clear(self) -> None:
        """Forget everything, in memory and on disk.

        Only what tilelab wrote goes: in its own subfolder, the entry directories
        (those with a manifest), temporary directories and lock files, then the
        prefix folders and the subfolder itself if nothing else is left in them.
        A file or folder someone else put there stays, and so does everything
        else in the cache directory. Do not clear while another process is
        writing to the same cache.
        """
        with self._mutex:
            self._memory.clear()
        _remove_entries(self._prefix_dirs())
        with contextlib.suppress(OSError):
            if [p.name for p in self.home.iterdir()] == ["CACHEDIR.TAG"]:
                (self.home / "CACHEDIR.TAG").unlink()
                self.home.rmdir()
        self._clear_before_v1()

    def _clear_before_v1(self) -> None:
        """Versions before `tilelab-v1` kept entries (and their CACHEDIR.TAG) in the cache
        directory itself. Those entries carry tilelab's manifest and the tag its comment, so
        they can be told from other files there; they go, and nothing else does."""
        if not self.root.is_dir() or self.root.is_symlink():
            return
        _remove_entries([p for p in sorted(self.root.iterdir())
                         if len(p.name) == 2 and p.is_dir() and not p.is_symlink()])
        tag = self.root / "CACHEDIR.TAG"
        with contextlib.suppress(OSError, UnicodeDecodeError):
            if tag.is_file() and not tag.is_symlink() and \
                    "marks the tilelab compile cache" in tag.read_text()[:200]:
                tag.unlink()

    def info(self) -> dict[str, Any]:
        """Entry count and bytes on disk, entries in memory, the directory."""
        entries = 0
        size = 0
        for entry in self._entry_dirs():
            entries += 1
            with contextlib.suppress(OSError):  # an entry removed while we count
                size += sum(f.stat().st_size for f in entry.iterdir() if f.is_file())
        with self._mutex:
            in_memory = len(self._memory)
        return {
            "dir": str(self.root),
            "entries": entries,
            "bytes": size,
            "memory_entries": in_memory,
            "disabled": self.disabled,
        }


def _remove_entries(prefixes) -> None:
    """In each two-character prefix folder: the entries (folders with tilelab's manifest),
    temporary folders and lock files; then the prefix folder, if nothing else is left."""
    for prefix in prefixes:
        for path in prefix.iterdir():
            name = path.name
            if path.is_symlink():
                continue
            if _KEY_RE.fullmatch(name) and (path / MANIFEST).is_file():
                _remove_tree(path)  # an entry: its manifest is tilelab's marker
            elif name.startswith((".tmp-", ".trash-")) and path.is_dir():
                shutil.rmtree(path, ignore_errors=True)
            elif name.endswith(".lock") and path.is_file():
                with contextlib.suppress(OSError):
                    path.unlink()
        with contextlib.suppress(OSError):
            prefix.rmdir()  # only if empty


# --------------------------------------------------------------------------- the default cache

_default: CompileCache | None = None
_default_lock = threading.Lock()


def default_cache() -> CompileCache:
    """The process-wide cache; made anew when TILELAB_CACHE_DIR changes."""
    global _default
    root = cache_dir()
    with _default_lock:
        if _default is None or _default.root != root:
            _default = CompileCache(root)
        return _default


def clear() -> None:
    """Clear the default cache, in memory and on disk."""
    default_cache().clear()


def info() -> dict[str, Any]:
    """`CompileCache.info()` of the default cache."""
    return default_cache().info()
