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
import hashlib
import json
import os
import re
import tempfile
from typing import Protocol, runtime_checkable

from ..errors import ArgumentError

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
        ensure_ascii=True, separators=(",", ":"),
    )
    return hashlib.sha256(payload.encode("ascii")).hexdigest()


def check_key(key: object) -> str:
    """Validate a store key (lowercase hex, 16 to 128 digits) and return it."""
    if not isinstance(key, str) or not _KEY.match(key):
        raise ArgumentError(f"store key must be 16 to 128 lowercase hex digits, got {key!r}")
    return key


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

    Notes
    -----
    ``put`` writes a temporary file in the same directory and renames it over the entry
    (``os.replace``), so a reader, in this process or another, sees the old entry or the
    complete new one; concurrent writers of one key leave one complete entry (the last
    rename wins). Thread-safe. ``get`` returns None for a missing entry and raises
    ``OSError`` for other I/O failures.
    """

    suffix = ".tgrm"

    def __init__(self, path, *, fsync: bool = False) -> None:
        try:
            path = os.fspath(path)
        except TypeError:
            raise ArgumentError(
                f"path must be a str or os.PathLike, got {type(path).__name__}") from None
        if not path:
            raise ArgumentError("path must not be empty")
        os.makedirs(path, exist_ok=True)
        self.path = path
        self.fsync = bool(fsync)

    def _file(self, key: str) -> str:
        return os.path.join(self.path, check_key(key) + self.suffix)

    def get(self, key: str) -> bytes | None:
        try:
            with open(self._file(key), "rb") as f:
                return f.read()
        except FileNotFoundError:
            return None

    def put(self, key: str, blob: bytes) -> None:
        target = self._file(key)
        fd, tmp = tempfile.mkstemp(dir=self.path, prefix=".tmp-", suffix=self.suffix)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(blob)
                if self.fsync:
                    f.flush()
                    os.fsync(f.fileno())
            os.replace(tmp, target)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise

    def delete(self, key: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self._file(key))

    def __repr__(self) -> str:
        return f"DirectoryStore({self.path!r})"
