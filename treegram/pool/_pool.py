"""The persistent worker pool shared by batch matchers and the grammar compiler.

Work is cut into contiguous chunks, at most one per worker; a chunk is a call
``fn(start, stop)`` that writes only its own rows of a caller-owned output, so hot paths need
no locks. The chunks call numba ``nogil`` kernels, which release the GIL, so the threads run in
parallel; pure-Python chunks still run correctly but one at a time.
"""

from __future__ import annotations

import os
import queue
import threading
import weakref
from collections.abc import Callable, Iterable
from typing import Any, TypeVar, cast

from treegram._checks import as_index
from treegram.errors import ArgumentError, ArgumentTypeError, WorkerError

__all__ = ["MAX_THREADS_LIMIT", "WorkerPool", "chunk_bounds"]

# The most threads one pool owner (a BatchGrammarMatcher, a GrammarCompiler) may ask for.
MAX_THREADS_LIMIT = max(256, 4 * (os.cpu_count() or 1))

T = TypeVar("T")
R = TypeVar("R")


def _check_count(value: Any, name: str, minimum: int) -> int:
    """``value`` as an int ``>= minimum``: ArgumentTypeError (a TypeError) for a non-int or
    a bool, ArgumentError (a ValueError) below ``minimum``."""
    count = as_index(value, name, ArgumentTypeError, "an int")
    if count < minimum:
        raise ArgumentError(f"{name} must be >= {minimum}, got {count}")
    return count


def chunk_bounds(n_items: int, max_chunks: int, *, min_chunk: int = 1) -> list[tuple[int, int]]:
    """Cut ``range(n_items)`` into balanced contiguous chunks.

    Parameters
    ----------
    n_items : int
        Number of items, ``>= 0``.
    max_chunks : int
        Most chunks to make, ``>= 1`` (a pool passes its number of workers).
    min_chunk : int, optional
        Fewest items per chunk, ``>= 1``; a smaller ``n_items`` still makes one chunk.

    Returns
    -------
    list of (int, int)
        ``(start, stop)`` pairs in increasing order that cover ``range(n_items)`` exactly once;
        chunk sizes differ by at most one. Empty when ``n_items == 0``.

    Raises
    ------
    TypeError, ValueError
        An argument is not an int or is out of range.
    """
    n_items = _check_count(n_items, "n_items", 0)
    max_chunks = _check_count(max_chunks, "max_chunks", 1)
    min_chunk = _check_count(min_chunk, "min_chunk", 1)
    if n_items == 0:
        return []
    k = max(1, min(max_chunks, n_items // min_chunk))
    base, extra = divmod(n_items, k)
    bounds = []
    start = 0
    for c in range(k):
        stop = start + base + (1 if c < extra else 0)
        bounds.append((start, stop))
        start = stop
    return bounds


class _Job:
    """The chunks of one call: any thread may claim the next unclaimed chunk and run it.

    The caller claims chunks too, so it never waits on a chunk that no thread has started:
    busy workers (another caller's job, a nested call from inside a chunk) cannot deadlock it.
    """

    __slots__ = ("fn", "bounds", "next", "pending", "cond", "failures")

    def __init__(self, fn: Callable[[int, int], Any], bounds: list[tuple[int, int]]) -> None:
        self.fn: Callable[[int, int], Any] | None = fn
        self.bounds = bounds
        self.next = 0
        self.pending = len(bounds)
        self.cond = threading.Condition(threading.Lock())
        self.failures: list[tuple[int, BaseException]] = []

    def work(self) -> None:
        """Claim and run chunks until none is left unclaimed."""
        cond = self.cond
        n = len(self.bounds)
        while True:
            with cond:
                i = self.next
                if i >= n:
                    return
                self.next = i + 1
                # Set until the last chunk is claimed, and chunk i is not yet claimed.
                fn = cast(Callable[[int, int], Any], self.fn)
            start, stop = self.bounds[i]
            failure = None
            try:
                fn(start, stop)
            except BaseException as exc:  # noqa: BLE001 - handed to the caller in wait()
                failure = exc
            with cond:
                if failure is not None:
                    self.failures.append((i, failure))
                self.pending -= 1
                if self.pending == 0:
                    cond.notify_all()
            del fn, failure

    def wait(self) -> None:
        """Block (without spinning) until every chunk has finished."""
        with self.cond:
            while self.pending:
                self.cond.wait()
            self.fn = None


def _worker_loop(jobs: queue.SimpleQueue) -> None:
    # Holds no reference to the pool, so an unreferenced pool can be collected and finalized.
    while True:
        job = jobs.get()
        if job is None:
            return
        job.work()
        del job


def _shutdown(jobs: queue.SimpleQueue, threads: list[threading.Thread]) -> None:
    # One stop sentinel per thread, queued after every job token already queued (FIFO).
    for _ in threads:
        jobs.put(None)
    current = threading.current_thread()
    for t in threads:
        if t is not current:
            t.join()


class WorkerPool:
    """A fixed set of persistent daemon threads that run chunked batch work.

    Parameters
    ----------
    max_workers : int
        Degree of parallelism, ``>= 1``: a call runs at most this many chunks at once. The
        calling thread is one of the workers (it runs chunks instead of idling), so the pool
        owns ``max_workers - 1`` threads, started on the first call that has more than one
        chunk; ``WorkerPool(1)`` never starts a thread.

    Notes
    -----
    Contract:

    * ``run_chunks`` and ``map`` wait for *all* of their chunks, even after one raised, and
      then raise :class:`~treegram.errors.WorkerError` once, for the failed chunk with the
      lowest start index, with the original exception as ``__cause__``; the pool stays
      usable and the next call starts clean. ``KeyboardInterrupt``/``SystemExit`` raised
      inside a chunk is re-raised as is, also after all chunks finished.
    * Using a closed pool raises :class:`~treegram.errors.WorkerError`; bad arguments raise
      ``TypeError``/``ValueError`` before any chunk runs. If the system cannot start the
      threads (the first multi-chunk call starts them), the call raises ``WorkerError``
      before any chunk runs, after stopping and joining the threads that did start.
    * GIL: the pool releases the GIL while it waits (no busy-waiting). Chunks run in
      parallel only if they release the GIL, as treegram's numba ``nogil`` kernels do.
    * Thread safety: one pool may be shared by any number of threads. Concurrent calls
      share its workers (their chunks interleave); each call waits only for its own chunks.
      A chunk may itself call the pool (nested calls cannot deadlock: a caller runs any of
      its chunks that no worker has claimed yet).
    * Lifetime: ``close()`` (or leaving a ``with`` block) stops and joins the threads; it is
      idempotent and lets calls already in flight finish. A pool that is no longer
      referenced stops its threads when garbage-collected.
    """

    def __init__(self, max_workers: int) -> None:
        self._num_workers = _check_count(max_workers, "max_workers", 1)
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._closed = False
        self._finalizer = weakref.finalize(self, _shutdown, self._jobs, self._threads)
        # At interpreter exit the daemon threads simply die; never block exit on a join.
        self._finalizer.atexit = False

    # -- properties ------------------------------------------------------------------------

    @property
    def num_workers(self) -> int:
        """Most chunks a call runs at once (the calling thread included)."""
        return self._num_workers

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` has been called."""
        return self._closed

    # -- work ------------------------------------------------------------------------------

    def run_chunks(
        self, fn: Callable[[int, int], Any], n_items: int, *, min_chunk: int = 1
    ) -> None:
        """Call ``fn(start, stop)`` over contiguous chunks that cover ``range(n_items)``.

        Parameters
        ----------
        fn : callable ``(start: int, stop: int) -> Any``
            Processes items ``start <= i < stop``; its return value is ignored. It should
            write only its own rows of any shared output.
        n_items : int
            Number of items, ``>= 0``; ``0`` calls nothing.
        min_chunk : int, optional
            Fewest items per chunk, ``>= 1``. Use it so that a chunk's work outweighs the
            thread hand-off (tens of µs).

        Notes
        -----
        The items are cut by :func:`chunk_bounds` into at most :attr:`num_workers` chunks.
        A single chunk runs inline in the calling thread with no hand-off; otherwise the
        calling thread runs chunks while the workers run the others.

        Raises
        ------
        WorkerError
            The pool is closed, or a chunk raised (after all chunks finished; ``__cause__``
            is the first failure by chunk index, the message names its range).
        TypeError, ValueError
            ``n_items`` or ``min_chunk`` is not an int or out of range.
        """
        bounds = chunk_bounds(n_items, self._num_workers, min_chunk=min_chunk)
        if self._closed:
            raise WorkerError("WorkerPool.run_chunks: the pool is closed")
        if not bounds:
            return
        if len(bounds) == 1:
            try:
                fn(0, bounds[0][1])
            except Exception as exc:
                raise WorkerError(
                    f"WorkerPool.run_chunks: chunk [0, {bounds[0][1]}) of {n_items} items "
                    f"raised {type(exc).__name__}: {exc}"
                ) from exc
            return
        job = _Job(fn, bounds)
        self._execute(job)
        self._raise_failures(job, lambda s, e: f"chunk [{s}, {e}) of {n_items} items", "run_chunks")

    def map(self, fn: Callable[[T], R], items: Iterable[T]) -> list[R]:
        """Return ``[fn(x) for x in items]``, computing the items in parallel.

        Each item is its own task, so uneven tasks balance across the workers.

        Parameters
        ----------
        fn : callable ``(item) -> result``
        items : iterable
            Consumed into a list before any task starts.

        Returns
        -------
        list
            Results in the order of ``items``.

        Raises
        ------
        WorkerError
            The pool is closed, or a task raised (after all tasks finished; ``__cause__``
            is the failure with the lowest item index, the message names the index).
        """
        if self._closed:
            raise WorkerError("WorkerPool.map: the pool is closed")
        items = list(items)
        n = len(items)
        results: list[Any] = [None] * n

        def run(start: int, stop: int) -> None:
            for i in range(start, stop):
                results[i] = fn(items[i])

        if n == 0:
            return results
        job = _Job(run, [(i, i + 1) for i in range(n)])
        self._execute(job)
        self._raise_failures(job, lambda s, e: f"item {s} of {n}", "map")
        return results

    def _execute(self, job: _Job) -> None:
        n_tokens = min(len(job.bounds), self._num_workers) - 1
        if n_tokens > 0:
            with self._lock:
                if self._closed:
                    raise WorkerError("WorkerPool: the pool is closed")
                self._start_threads()
                for _ in range(n_tokens):
                    self._jobs.put(job)
        job.work()
        job.wait()

    def _start_threads(self) -> None:
        # Called with self._lock held.
        if self._threads or self._num_workers == 1:
            return
        started: list[threading.Thread] = []
        try:
            for k in range(self._num_workers - 1):
                t = threading.Thread(
                    target=_worker_loop,
                    args=(self._jobs,),
                    name=f"treegram-pool-{id(self):x}-{k}",
                    daemon=True,
                )
                t.start()
                started.append(t)
        except RuntimeError as exc:  # the system refuses more threads
            # Stop what started, so a failed start leaves no thread behind; the pool
            # stays usable (a later call tries again).
            _shutdown(self._jobs, started)
            raise WorkerError(
                f"WorkerPool: could not start {self._num_workers - 1} worker threads "
                f"(started {len(started)}): {exc}"
            ) from exc
        self._threads.extend(started)

    @staticmethod
    def _raise_failures(job: _Job, describe: Callable[[int, int], str], method: str) -> None:
        if not job.failures:
            return
        job.failures.sort(key=lambda f: f[0])
        index, exc = job.failures[0]
        others = len(job.failures) - 1
        job.failures = []
        if not isinstance(exc, Exception):
            raise exc
        start, stop = job.bounds[index]
        more = f" ({others} other(s) also failed)" if others else ""
        raise WorkerError(
            f"WorkerPool.{method}: {describe(start, stop)} raised {type(exc).__name__}: {exc}{more}"
        ) from exc

    # -- lifetime --------------------------------------------------------------------------

    def close(self) -> None:
        """Stop and join the worker threads. Idempotent.

        Calls already in flight still finish (their callers run any chunk the workers did
        not take); later calls raise :class:`~treegram.errors.WorkerError`. Called from
        inside a chunk, it does not wait for the calling worker itself.
        """
        with self._lock:
            self._closed = True
        self._finalizer()
        current = threading.current_thread()
        for t in list(self._threads):
            if t is not current:
                t.join()

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"{len(self._threads)} threads started"
        return f"WorkerPool(max_workers={self._num_workers}, {state})"
