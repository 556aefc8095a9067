"""Where treegram's numba kernels are cached, and the kernels a built wheel ships.

numba compiles a kernel the first time it runs in a process and, with ``cache=True``, keeps
the machine code on disk, next to the source by default. treegram routes every kernel of its
own package through one cache root instead:

1. ``$TREEGRAM_KERNEL_CACHE_DIR`` when it is set;
2. else numba's own ``$NUMBA_CACHE_DIR`` (under ``treegram/``) when it is set;
3. else ``treegram/_kernel_cache/`` inside the installed package, when it can be written;
4. else the user's cache directory (``$XDG_CACHE_HOME/treegram/kernels``, by default
   ``~/.cache/treegram/kernels``): an install directory that is read-only still gets a
   cache, in a documented place.

A wheel built from source compiles every kernel at build time (``setup.py``, through
:func:`treegram.warm_up`) into ``treegram/_kernel_cache/``, so a fresh install's first run
loads machine code instead of compiling it. When the root is elsewhere (cases 1, 2 and 4),
the files a module's kernels need are copied from that shipped folder the first time the
module's kernels are set up, unless ``TREEGRAM_KERNEL_CACHE_SEED=0``. numba itself decides
whether a cached kernel is usable: its index records the numba version and a stamp (here a
hash of every file of the kernel packages, since kernels inline their neighbours' functions
and constants), and each entry the kernel's bytecode, argument types and the CPU it was
built for, so a stale or foreign file is never loaded, only recompiled over.

numba has no lock between processes: processes that start together on an empty cache (the
test suite's workers, an engine's ranks) would each compile every kernel. A kernel that is
not in the cache is compiled under a file lock named after its index and argument types (in
the temporary folder, see :func:`_compile_locked`): a process that finds the lock taken waits,
then loads what the holder saved instead of compiling it again. Two processes that need
different specializations of one kernel compile them side by side.
"""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
import sys
import tempfile
import threading
import time

from numba.core import caching, config, event

__all__ = [
    "CACHE_DIR_ENV",
    "SEED_ENV",
    "SHIPPED_DIR",
    "install",
    "kernel_cache_dir",
    "kernel_seconds",
]

CACHE_DIR_ENV = "TREEGRAM_KERNEL_CACHE_DIR"
SEED_ENV = "TREEGRAM_KERNEL_CACHE_SEED"

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
SHIPPED_DIR = os.path.join(_PACKAGE_DIR, "_kernel_cache")

# numba renamed its cache classes (``_CacheImpl`` -> ``CacheImpl``); accept both spellings.
_CacheImpl = getattr(caching, "CacheImpl", None) or getattr(caching, "_CacheImpl")  # noqa: B009
_CacheLocator = caching._CacheLocator


def _writable_dir(path: str) -> bool:
    try:
        os.makedirs(path, exist_ok=True)
        tempfile.TemporaryFile(dir=path).close()
    except OSError:
        return False
    return True


def _user_cache_dir() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "treegram", "kernels")


@functools.lru_cache(maxsize=1)
def kernel_cache_dir() -> str | None:
    """The directory treegram's kernels are cached in, for this process.

    Returns
    -------
    str or None
        The first of the four places in the module docstring that can be written; None
        when none can (numba then falls back to its own locations, or does not cache).
    """
    numba_dir = getattr(config, "CACHE_DIR", "")
    chosen = os.environ.get(CACHE_DIR_ENV) or (
        os.path.join(numba_dir, "treegram") if numba_dir else None
    )
    candidates = [chosen] if chosen else [SHIPPED_DIR, _user_cache_dir()]
    for path in candidates:
        if _writable_dir(path):
            return os.path.abspath(path)
    return None


_seeded: set[str] = set()
_usable_dirs: set[str] = set()
_seed_lock = threading.Lock()


def _seed(module_file: str, rel_dir: str, cache_path: str) -> None:
    """Copy the shipped cache files of one module into ``cache_path`` where they are
    missing or older than the shipped ones (a newer install)."""
    shipped = os.path.join(SHIPPED_DIR, rel_dir)
    if os.path.abspath(cache_path) == os.path.abspath(shipped) or not os.path.isdir(shipped):
        return
    prefix = os.path.splitext(os.path.basename(module_file))[0] + "."
    with _seed_lock:
        if module_file in _seeded:
            return
        _seeded.add(module_file)
        for name in os.listdir(shipped):
            if not (name.startswith(prefix) and name.endswith((".nbi", ".nbc"))):
                continue
            src, dst = os.path.join(shipped, name), os.path.join(cache_path, name)
            try:
                if os.path.exists(dst) and os.path.getmtime(dst) >= os.path.getmtime(src):
                    continue
                tmp = f"{dst}.seed.{os.getpid()}"
                shutil.copyfile(src, tmp)
                os.replace(tmp, dst)  # atomic: a concurrent reader sees the old or new file
            except OSError:
                continue  # a file that cannot be copied is compiled instead


# The packages whose modules define kernels. A kernel inlines the functions and freezes the
# constants it imports from its neighbours (``kernels._layout``'s array orders, ``ir``'s
# limits), so its cached machine code is stale when any of these files changes, not only
# its own: the stamp hashes them all.
_KERNEL_PACKAGES = ("kernels", "automaton", "ir")


@functools.cache
def _source_hash(path: str, mtime: float, size: int) -> bytes:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).digest()


def _kernel_sources() -> list[str]:
    """The files of the kernel packages and treegram's top-level modules, sorted."""
    out = [os.path.join(_PACKAGE_DIR, f) for f in os.listdir(_PACKAGE_DIR) if f.endswith(".py")]
    for package in _KERNEL_PACKAGES:
        folder = os.path.join(_PACKAGE_DIR, package)
        out += [os.path.join(folder, f) for f in os.listdir(folder) if f.endswith(".py")]
    return sorted(out)


def _sources_stamp() -> bytes:
    """A hash of every kernel source file's contents (re-read when a file changes)."""
    digest = hashlib.sha256()
    for path in _kernel_sources():
        st = os.stat(path)
        digest.update(_source_hash(path, st.st_mtime, st.st_size))
    return digest.digest()


class KernelCacheLocator(_CacheLocator):
    """numba cache locator for functions defined in treegram's own source files.

    The source stamp is a hash of the contents of every file of the kernel packages, not a
    modification time, so a cache built into a wheel stays valid after pip writes the files
    anew, and a kernel is compiled again when a file it inlines or reads constants from
    changes.
    """

    def __init__(self, py_func, py_file: str, cache_path: str) -> None:
        self._py_file = py_file
        self._lineno = py_func.__code__.co_firstlineno
        self._cache_path = cache_path

    def get_cache_path(self) -> str:
        return self._cache_path

    def ensure_cache_path(self) -> None:
        # numba writes a temporary file to prove the folder writable for every kernel; one
        # check per folder and process is enough (a hundred kernels are defined at import)
        if self._cache_path not in _usable_dirs:
            super().ensure_cache_path()
            _usable_dirs.add(self._cache_path)

    def get_source_stamp(self) -> bytes:
        return _sources_stamp()

    def get_disambiguator(self) -> str:
        return str(self._lineno)

    @classmethod
    def from_function(cls, py_func, py_file: str):
        path = os.path.abspath(py_file)
        if not path.startswith(_PACKAGE_DIR + os.sep) or not os.path.exists(path):
            return None
        root = kernel_cache_dir()
        if root is None:
            return None
        rel_dir = os.path.relpath(os.path.dirname(path), _PACKAGE_DIR)
        cache_path = os.path.normpath(os.path.join(root, rel_dir))
        self = cls(py_func, path, cache_path)
        try:
            self.ensure_cache_path()
        except OSError:
            return None
        if os.environ.get(SEED_ENV, "1") != "0":
            _seed(path, rel_dir, cache_path)
        return self


class _CompilerLockClock(event.Listener):
    """Adds up the wall time during which some thread is in numba's compiler lock (waiting
    for it included): compiling kernels and loading them from the cache. Overlapping
    acquisitions count once: threads of a worker pool waiting for the lock together are
    one stall, not several, so the total never exceeds the process's wall time."""

    def __init__(self) -> None:
        self.total = 0.0
        self._active = 0
        self._since = 0.0
        self._mutex = threading.Lock()
        self._local = threading.local()

    def on_start(self, ev) -> None:
        depth = getattr(self._local, "depth", 0)
        self._local.depth = depth + 1
        if depth == 0:
            with self._mutex:
                if self._active == 0:
                    self._since = time.perf_counter()
                self._active += 1

    def on_end(self, ev) -> None:
        self._local.depth -= 1
        if self._local.depth == 0:
            with self._mutex:
                self._active -= 1
                if self._active == 0:
                    self.total += time.perf_counter() - self._since

    def seconds(self) -> float:
        """The total so far, a stall under way included up to now."""
        with self._mutex:
            if self._active:
                return self.total + time.perf_counter() - self._since
            return self.total


_clock = _CompilerLockClock()


def kernel_seconds() -> float:
    """Wall seconds during which this process was compiling numba code or loading it from
    the cache (in any thread, treegram's kernels and any other numba code alike)."""
    return _clock.seconds()


# A kernel missing from the cache is compiled under an exclusive lock on a file named after
# its index and argument types; the lock is kept from the failed load to the save (or to the
# compile's failure). Another process waits at most this long for it, then compiles alone.
_LOCK_WAIT_SECONDS = 600.0
_LOCK_POLL_SECONDS = 0.05

if sys.platform != "win32":
    import fcntl
else:  # pragma: no cover - no flock: every process compiles for itself, as numba does
    fcntl = None


class _FileLocks:
    """Exclusive ``flock`` locks on files, counted per path within this process (a lock is
    taken again while a kernel's compile reaches the same kernel: flock locks of two open
    files conflict, even in one process)."""

    def __init__(self) -> None:
        self._held: dict[str, tuple[int, int]] = {}  # path -> (fd, count)

    def acquire(self, path: str, wait: float) -> bool:
        """Take the lock on ``path`` (created if missing); False when another process held
        it for ``wait`` seconds or the file cannot be opened."""
        held = self._held.get(path)
        if held is not None:
            self._held[path] = (held[0], held[1] + 1)
            return True
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        except OSError:
            return False
        deadline = time.monotonic() + wait
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    os.close(fd)
                    return False
                time.sleep(_LOCK_POLL_SECONDS)
            except OSError:  # a file system without locks
                os.close(fd)
                return False
        self._held[path] = (fd, 1)
        return True

    def release(self, path: str) -> None:
        fd, count = self._held.pop(path)
        if count > 1:
            self._held[path] = (fd, count - 1)
            return
        os.close(fd)  # closing the file drops its lock


_file_locks = _FileLocks()
# (id of a kernel's numba cache, its argument types) -> the lock, held until saved
_pending: dict[tuple[int, str], str] = {}


def _lock_path(cache, sig) -> str:
    """The lock file of one specialization of a kernel: in the temporary folder, named by a
    hash of the cache index's path and the argument types (never in the cache folder, which
    a built wheel ships)."""
    index = os.path.abspath(cache._cache_file._index_path)
    key = f"{index}\0{sig}".encode()
    folder = os.path.join(tempfile.gettempdir(), f"treegram-kernel-locks-{os.getuid()}")
    os.makedirs(folder, exist_ok=True)
    return os.path.join(folder, hashlib.sha256(key).hexdigest()[:32] + ".lock")


def _compile_locked(load_overload, save_overload):
    """numba's ``Cache.load_overload`` and ``save_overload`` with a lock between processes
    around a compile, for treegram's kernels only: a load that misses takes the lock of
    the kernel's specialization and loads again (the holder may have saved meanwhile); on a
    second miss the lock is kept while numba compiles, and let go once the result is saved.
    numba calls both in its compiler lock, so one thread of the process is between them at
    a time."""

    def load(self, sig, target_context):
        got = load_overload(self, sig, target_context)
        if got is not None or not isinstance(self._impl.locator, KernelCacheLocator):
            return got
        key = (id(self), str(sig))
        if key in _pending:
            return None
        try:
            path = _lock_path(self, sig)
        except OSError:  # no temporary folder to write: compiled without the lock
            return None
        if not _file_locks.acquire(path, _LOCK_WAIT_SECONDS):
            return None  # compiled without the lock
        got = load_overload(self, sig, target_context)
        if got is None:
            _pending[key] = path
        else:
            _file_locks.release(path)
        return got

    def save(self, sig, data):
        try:
            save_overload(self, sig, data)
        finally:
            path = _pending.pop((id(self), str(sig)), None)
            if path is not None:
                _file_locks.release(path)

    return load, save


class _FailedCompileUnlock(event.Listener):
    """Lets go of a kernel's locks when its compile raises (numba then never saves)."""

    def on_start(self, ev) -> None:
        pass

    def on_end(self, ev) -> None:
        if not ev.is_failed or not isinstance(ev.data, dict):
            return
        cache = getattr(ev.data.get("dispatcher"), "_cache", None)
        for key in [key for key in _pending if key[0] == id(cache)]:
            _file_locks.release(_pending.pop(key))


def install() -> None:
    """Put :class:`KernelCacheLocator` first in numba's list of cache locators.

    Runs when ``treegram`` is imported, before any kernel is defined (numba picks a kernel's
    locator when the ``@njit(cache=True)`` decorator runs). Idempotent.
    """
    locators = _CacheImpl._locator_classes
    if KernelCacheLocator not in locators:
        locators.insert(0, KernelCacheLocator)
        event.register("numba:compiler_lock", _clock)
        if fcntl is not None:
            cache = caching.Cache  # numba's base class: every function cache reads these
            load, save = _compile_locked(cache.load_overload, cache.save_overload)
            cache.load_overload = load  # type: ignore[method-assign]
            cache.save_overload = save  # type: ignore[method-assign]
            event.register("numba:compile", _FailedCompileUnlock())


install()
