"""Pluggable stores for serialized compiled grammars, shared between processes.

A store maps a key (a lowercase hex string, see :func:`store_key`) to the bytes of
:meth:`CompiledGrammar.serialize`. It is a plain byte store: it neither parses nor trusts
what it holds. :class:`GrammarCompiler` validates every blob on load (the format is
checksummed and fully checked) and treats a bad entry as a miss: it logs a warning,
deletes the entry, recompiles and writes a fresh one. A store error (a full disk, a lost
connection) is never fatal either: the compiler warns and compiles.

:class:`DirectoryStore` is the embedded default (``cache_dir=`` or ``TREEGRAM_CACHE_DIR``);
:class:`~treegram.compiler._redis_store.RedisStore` shares entries between machines.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import re
import stat
import tempfile
import time
from typing import Any, Protocol, runtime_checkable

from .._checks import is_int
from ..errors import ArgumentError, CacheStoreError

__all__ = ["CacheStore", "DirectoryStore", "store_key", "CACHE_DIR_ENV"]

CACHE_DIR_ENV = "TREEGRAM_CACHE_DIR"

_KEY = re.compile(r"[0-9a-f]{16,128}\Z")


@runtime_checkable
class CacheStore(Protocol):
    """What :class:`GrammarCompiler` needs from a cache store.

    Implementations must be safe to call from several threads, and a ``put`` must be
    atomic for readers in any process: a ``get`` returns ``None``, the old complete value
    or the new complete value, never a mix.
    """

    def get(self, key: str) -> bytes | None:
        """The bytes stored under ``key``, or None."""

    def put(self, key: str, blob: bytes) -> None:
        """Store ``blob`` under ``key``, replacing any previous value atomically."""

    def delete(self, key: str) -> None:
        """Remove ``key``; no error when it is absent."""


def store_key(kind: str, parts: tuple, tokenizer_fingerprint: str, format_version: int) -> str:
    """The store key of one compile request: 64 lowercase hex digits.

    A SHA-256 over the grammar kind, its text and options, the tokenizer fingerprint and
    the serialization format version, so a new format (or another vocabulary) simply
    misses instead of reading entries it cannot load.
    """
    payload = json.dumps(
        ["treegram-compiled", format_version, tokenizer_fingerprint, kind, list(parts)],
        ensure_ascii=True,
        separators=(",", ":"),
    )
    return hashlib.sha256(payload.encode("ascii")).hexdigest()


def check_key(key: object, what: str = "store key") -> str:
    """Validate a store key (lowercase hex, 16 to 128 digits) and return it.

    ``what`` names the argument in the error message.
    """
    if not isinstance(key, str) or not _KEY.match(key):
        raise ArgumentError(f"{what} must be 16 to 128 lowercase hex digits, got {key!r}")
    return key


def open_regular_file(
    path: str,
    what: str,
    error: type[Exception],
    *,
    follow_symlinks: bool = True,
    max_bytes: int | None = None,
):
    """Open ``path`` for reading only if it is a regular file of at most ``max_bytes``.

    The file is opened non-blocking, so a FIFO or a device never blocks the open; it is
    then rejected by its type (a read from ``/dev/zero`` would never end). Returns the
    binary file object and the size read by ``fstat`` (read no more than that). Anything
    unusable raises ``error`` with a message naming ``what`` and the path;
    ``FileNotFoundError`` and other ``OSError`` pass through.
    """
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    if not follow_symlinks:
        flags |= getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if exc.errno == errno.ELOOP and not follow_symlinks:
            raise error(f"{what} {path!r} is a symbolic link (not followed)") from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise error(f"{what} {path!r} is not a regular file")
        if max_bytes is not None and st.st_size > max_bytes:
            raise error(
                f"{what} {path!r} has {st.st_size} bytes, more than the limit of {max_bytes}"
            )
        return os.fdopen(fd, "rb"), st.st_size
    except BaseException:
        os.close(fd)
        raise


def path_argument(path: Any) -> Any:
    """``os.fspath(path)``, or ArgumentError naming the type when ``path`` is not a str or
    an os.PathLike."""
    try:
        return os.fspath(path)
    except TypeError:
        raise ArgumentError(
            f"path must be a str or os.PathLike, got {type(path).__name__}"
        ) from None


def write_atomic(
    path, data: bytes, *, prefix: str = ".tgrm-", suffix: str = "", fsync: bool = True
) -> None:
    """Write ``data`` to ``path`` atomically.

    The bytes go to a temporary file (named ``prefix``...``suffix``) in the same directory,
    are flushed to disk (unless ``fsync`` is False), and the file is renamed over ``path``:
    readers see the old file or the complete new one, never a torn write. The temporary
    file is removed when anything fails.
    """
    path = os.fspath(path)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path) or ".", prefix=prefix, suffix=suffix)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            if fsync:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def _check_positive(value: Any, what: str) -> int:
    if not is_int(value, numpy=False) or value < 1:
        raise ArgumentError(f"{what} must be a positive int, got {value!r}")
    return value


class DirectoryStore:
    """Entries as files ``<key>.tgrm`` in one directory, shared by any number of processes.

    Parameters
    ----------
    path : str or os.PathLike
        The directory; created (with parents) if missing.
    fsync : bool, default False
        Flush each entry to disk before it becomes visible. Off by default: visibility is
        atomic either way (rename), and an entry torn by a power loss fails its checksum
        on load, is discarded and rebuilt like any other bad entry.
    max_entry_bytes : int, default 1 GiB
        Larger entries are neither read nor written (:class:`CacheStoreError`).
    stale_tmp_s : float, default 900
        Age (seconds since last modification) after which a temporary file of an
        interrupted ``put`` (``.tmp-*.tgrm``, from any process) is deleted. The sweep runs
        when the store is opened and then at most once per ``stale_tmp_s / 4`` inside
        ``put``; a live writer keeps touching its file, so it is never swept.

    Raises
    ------
    ArgumentError
        An argument has the wrong type or value.
    CacheStoreError
        ``path`` exists and is not a directory (a file, a dangling symbolic link), or it
        cannot be created (also an ``OSError``).

    Notes
    -----
    ``put`` writes a temporary file in the same directory and renames it over the entry
    (``os.replace``), so a reader, in this process or another, sees the old entry or the
    complete new one; concurrent writers of one key leave one complete entry (the last
    rename wins). ``get`` reads only regular files of at most ``max_entry_bytes``, never
    follows a symbolic link (an entry cannot point out of the directory) and never blocks
    on a FIFO: such an entry raises :class:`CacheStoreError`, and the compiler's next
    ``put`` replaces it. ``get`` returns None for a missing entry and raises ``OSError``
    for other I/O failures. Thread-safe.
    """

    suffix = ".tgrm"
    _tmp_prefix = ".tmp-"

    def __init__(
        self,
        path,
        *,
        fsync: bool = False,
        max_entry_bytes: int = 1 << 30,
        stale_tmp_s: float = 900.0,
    ) -> None:
        path = path_argument(path)
        if isinstance(path, bytes):
            raise ArgumentError("path must be a str or os.PathLike of str, got bytes")
        if not path:
            raise ArgumentError("path must not be empty")
        _check_positive(max_entry_bytes, "max_entry_bytes")
        if (
            not isinstance(stale_tmp_s, (int, float))
            or isinstance(stale_tmp_s, bool)
            or not 0 < stale_tmp_s < float("inf")
        ):
            raise ArgumentError(
                f"stale_tmp_s must be a positive finite number of seconds, got {stale_tmp_s!r}"
            )
        if os.path.lexists(path) and not os.path.isdir(path):
            kind = "a dangling symbolic link" if os.path.islink(path) else "not a directory"
            raise CacheStoreError(f"cache directory path {path!r} is {kind}")
        try:
            os.makedirs(path, exist_ok=True)
        except OSError as exc:
            raise CacheStoreError(
                f"cache directory path {path!r} cannot be created "
                f"({type(exc).__name__}: {exc.strerror})"
            ) from exc
        self.path = path
        self.fsync = bool(fsync)
        self.max_entry_bytes = max_entry_bytes
        self.stale_tmp_s = float(stale_tmp_s)
        self._last_sweep = time.monotonic()
        self.sweep_stale_tmp_files()

    def _file(self, key: str) -> str:
        return os.path.join(self.path, check_key(key) + self.suffix)

    def get(self, key: str) -> bytes | None:
        try:
            f, size = open_regular_file(
                self._file(key),
                "cache entry",
                CacheStoreError,
                follow_symlinks=False,
                max_bytes=self.max_entry_bytes,
            )
        except FileNotFoundError:
            return None
        with f:
            buf = bytearray(size)
            got = f.readinto(buf) or 0  # never more than fstat said: a growing file ends
        return bytes(buf) if got == size else bytes(buf[:got])

    def put(self, key: str, blob: bytes) -> None:
        target = self._file(key)
        try:
            size = memoryview(blob).nbytes
        except TypeError:
            raise ArgumentError(f"blob must be bytes-like, got {type(blob).__name__}") from None
        if size > self.max_entry_bytes:
            raise CacheStoreError(
                f"blob of {size} bytes for {target!r} is larger than "
                f"max_entry_bytes={self.max_entry_bytes}"
            )
        if time.monotonic() - self._last_sweep > self.stale_tmp_s / 4:
            self._last_sweep = time.monotonic()
            self.sweep_stale_tmp_files()
        write_atomic(target, blob, prefix=self._tmp_prefix, suffix=self.suffix, fsync=self.fsync)

    def delete(self, key: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self._file(key))

    def sweep_stale_tmp_files(self, max_age_s: float | None = None) -> int:
        """Delete temporary files of interrupted ``put`` calls (any process's) that were
        last modified more than ``max_age_s`` seconds ago (default ``stale_tmp_s``).

        Only regular files named ``.tmp-*.tgrm`` directly in the directory are touched.
        Errors (a file another sweeper removed first, a read-only directory) are ignored.

        Returns
        -------
        int
            How many files were deleted.
        """
        age = self.stale_tmp_s if max_age_s is None else float(max_age_s)
        cutoff = time.time() - age
        removed = 0
        try:
            entries = list(os.scandir(self.path))
        except OSError:
            return 0
        for entry in entries:
            name = entry.name
            if not (name.startswith(self._tmp_prefix) and name.endswith(self.suffix)):
                continue
            try:
                if entry.is_file(follow_symlinks=False) and (
                    entry.stat(follow_symlinks=False).st_mtime < cutoff
                ):
                    os.unlink(entry.path)
                    removed += 1
            except OSError:
                continue
        return removed

    def __repr__(self) -> str:
        return f"DirectoryStore({self.path!r})"
