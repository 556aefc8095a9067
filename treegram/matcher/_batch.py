"""BatchGrammarMatcher: one call for a whole batch of matchers, on a persistent pool."""

from __future__ import annotations

import functools
import itertools
import operator
import os
import sys
import threading
import types
from collections import deque
from typing import Literal

import numpy as np

from ..errors import (
    ArgumentError,
    BitmaskError,
    DraftTreeError,
    InvalidTokenIdError,
    MatcherStateError,
    TemperatureError,
)
from ..kernels import GRAMMARS, MATCHERS, REGISTRY_LOCK, TIMEOUT, same_words
from ..kernels import batch as _batch
from ..kernels import rows as _rows
from ..pool import MAX_THREADS_LIMIT, WorkerPool
from ._bitmask import BitmaskViewCache, ContiguousRows
from ._matcher import (
    _BATCH_HELD,
    _TOKEN,
    KEY_COUNTED,
    KEY_SLOTS,
    KEY_TRACKS,
    GrammarMatcher,
    _encode_utf8,
    _get_ident,
    _held_here,
    _is_token_id,
)
from ._temperature import as_temperature_array
from ._tree_input import (
    IndexViewCache,
    as_index_array,
    check_draft_input,
    check_scratch,
    deadline_ns,
    link_arrays,
    past_deadline,
    raise_tree_input,
)

__all__ = ["BatchGrammarMatcher", "MAX_THREADS_LIMIT"]

"""The largest ``max_threads`` a BatchGrammarMatcher accepts: max(256, 4 x CPUs)."""

_INT64_MAX = int(np.iinfo(np.int64).max)

# Below this many bitmask words of work a batch runs inline: handing chunks to threads
# costs tens of microseconds, more than small batches take in one kernel.
_INLINE_WORDS = 1 << 17


def _hold(matchers) -> tuple:
    """A tuple of the caller's matchers: the strong references a batch call keeps for its
    whole duration. Kernels reach matchers by slot id only, and a slot is released when
    its matcher is collected; holding the matchers (and, through them, their grammars)
    keeps every slot the call hands to a kernel owned by the matcher it was read from,
    even if another thread edits or drops the caller's list meanwhile."""
    if type(matchers) is tuple:
        return matchers
    if not isinstance(matchers, (list, tuple)):
        raise ArgumentError(
            f"matchers must be a list of GrammarMatcher, got {type(matchers).__name__}"
        )
    return tuple(matchers)  # one atomic copy under the GIL


_KEY = operator.attrgetter("_batch_key")
_FREE = operator.attrgetter("_free")
_POP = list.pop
_APPEND = list.append
# The keys the running claim read, per thread, for the operation's _slot_arrays.
_CLAIMED = threading.local()


def _tuple_items_offset() -> int:
    """Where a tuple's item pointers start inside the tuple object (CPython: right after
    its header, ``tuple.__basicsize__`` bytes in), checked on a probe tuple; -1 when ids
    are not addresses or the layout is another (claims then compare ids in Python)."""
    if sys.implementation.name != "cpython" or tuple.__itemsize__ != 8:
        return -1
    probe = tuple(object() for _ in range(8))
    ids = np.array([id(x) for x in probe], dtype=np.int64)
    offset = tuple.__basicsize__  # the reads below stay inside the probe
    if offset % 8 or not same_words(id(probe) + offset, ids):
        return -1
    return offset


# _tuple_items_offset(), found when the first batch is kept below (not at import: the
# check runs a kernel)
_ITEMS: int | None = None
# The last batch claimed in full by the slow path: (matcher registry releases, keys, the
# matchers' claim lists, their ids as int64 [B] (a list where _ITEMS is -1)). While no
# matcher slot was released since (no matcher collected, so no object reused the id of
# one), equal ids name the same live matchers, all registered GrammarMatchers, whose keys
# never change; so the next claim of that batch compares the held tuple's item pointers
# with the ids in one kernel call and takes their tokens in one C-level pass over the kept
# lists, with no Python per matcher (at 96 matchers, 7.5 us -> 4 us with the release).
# Replaced whole (one store): threads share it safely.
_LAST_CLAIM: tuple = (-1, None, None, None)


def _same_batch(held: tuple, ids) -> bool:
    """Whether ``held`` holds the objects whose ids are ``ids`` (``_LAST_CLAIM``), in
    order."""
    if type(ids) is list:  # kept so where ids are not addresses (_ITEMS is -1)
        return list(map(id, held)) == ids
    # an array of ids is kept only once _ITEMS is found (an offset)
    return len(held) == len(ids) and same_words(id(held) + _ITEMS, ids)  # type: ignore[operator]


def _claim(held: tuple) -> tuple[list | tuple, list | None]:
    """Claim every matcher of ``held`` for the calling thread (``_matcher._exclusive``
    explains the claim; a matcher this thread already holds, or one listed twice, is
    taken once) and return what :func:`_release` gives back, with the matchers' batch
    keys (None when an entry is not a matcher). Entries that are not matchers are
    skipped (the operation's own validation names them).

    The batch claimed last (the same matchers, none collected since) is claimed by
    popping its kept claim lists in one pass, with no owner written: the thread's batch
    stack (``_matcher._BATCH_HELD``) lets its nested calls through instead. When a list
    is empty there (a matcher busy, or held by this thread), the tokens popped are put
    back and the per-matcher claim below decides.

    Raises
    ------
    MatcherStateError
        A matcher is in use by another thread (the first one, by position); nothing is
        claimed then.
    """
    global _LAST_CLAIM, _ITEMS
    releases = MATCHERS.releases  # read before the ids are compared
    last = _LAST_CLAIM
    if releases == last[0] and type(held) is tuple and _same_batch(held, last[3]):
        frees = last[2]
        it = iter(frees)
        try:
            deque(map(_POP, it), maxlen=0)
        except IndexError:  # put back what was taken; the per-matcher claim decides
            deque(map(_APPEND, frees[: len(frees) - operator.length_hint(it) - 1], _TOKENS), 0)
        else:
            stack = getattr(_BATCH_HELD, "stack", None)
            if stack is None:
                stack = _BATCH_HELD.stack = []
            entry = [held, None]
            stack.append(entry)
            return (entry, frees), last[1]  # the kept list: _slot_arrays compares identity
    try:
        keys: list | None = list(map(_KEY, held))
    except AttributeError:
        keys = None
    if all(issubclass(kind, GrammarMatcher) for kind in set(map(type, held))):
        matchers = held
    else:
        matchers = tuple(m if isinstance(m, GrammarMatcher) else None for m in held)
    me = _get_ident()
    taken: list[GrammarMatcher] = []
    for i, m in enumerate(matchers):
        if m is None:
            continue
        try:
            m._free.pop()
        except IndexError:
            if _held_here(m):
                continue
            _release(taken)
            raise MatcherStateError(
                f"matchers[{i}] is in use by another thread (a matcher serves one thread at a time)"
            ) from None
        m._owner = me
        taken.append(m)
    # every matcher registered and taken here (none listed twice): the next claim of this
    # batch takes one pass
    if matchers is held and keys and len(taken) == len(held) and min(keys) >= 0:
        if _ITEMS is None:
            _ITEMS = _tuple_items_offset()
        ids = list(map(id, held))
        _LAST_CLAIM = (
            releases,
            keys,
            list(map(_FREE, held)),
            ids if _ITEMS < 0 else np.array(ids, dtype=np.int64),
        )
    return taken, keys


_TOKENS = itertools.repeat(_TOKEN)


def _release(taken: list | tuple) -> None:
    """Give back the matchers :func:`_claim` took."""
    if type(taken) is tuple:  # the fast claim: its batch off the stack, every token back
        stack = _BATCH_HELD.stack
        entry, frees = taken
        for i in range(len(stack) - 1, -1, -1):
            if stack[i] is entry:
                del stack[i]
                break
        deque(map(_APPEND, frees, _TOKENS), maxlen=0)
        return
    for m in taken:
        m._owner = 0
        m._free.append(_TOKEN)


def _claiming(position: int):
    """Decorate a batch operation whose ``matchers`` is argument ``position``: hold the
    matchers (:func:`_hold`) and claim each one for the whole call, so that no other
    thread works on them meanwhile (MatcherStateError naming the first busy one). The
    operation receives the held tuple."""

    def decorate(method):
        @functools.wraps(method)
        def claiming(*args, **kwargs):
            if len(args) <= position:  # passed by keyword
                held = kwargs["matchers"] = _hold(kwargs["matchers"])
            else:
                held = args[position]
                if type(held) is not tuple:
                    held = _hold(held)
                    args = (*args[:position], held, *args[position + 1 :])
            taken, keys = _claim(held)
            claimed = _CLAIMED
            outer = getattr(claimed, "entry", None)  # a nested call puts it back
            claimed.entry = (held, keys)
            try:
                return method(*args, **kwargs)
            finally:
                claimed.entry = outer
                _release(taken)

        return claiming

    return decorate


def _close_spent_budgets(matchers: tuple, flags: np.ndarray | None) -> None:
    """Close the spent token budgets of the matchers that have budgets (see
    ``_budgets``) before a batch kernel reads their charts."""
    if flags is not None:
        for k in np.flatnonzero(flags & (KEY_COUNTED >> 61)).tolist():
            matchers[k]._close_spent()


def _check_distinct(mslots: np.ndarray, positions: np.ndarray | None = None) -> None:
    """Raise ArgumentError if one matcher appears twice (live matchers have distinct
    slots): its state would be changed twice, or by two workers at once."""
    if mslots is _LAST_SLOTS[3] and _LAST_SLOTS[6]:
        return  # the slot arrays of the last batch, whose slots are distinct
    if len(mslots) < 2 or np.bincount(mslots).max() < 2:  # slots are small ints: no sort
        return
    order = np.argsort(mslots, kind="stable")
    same = np.flatnonzero(mslots[order[1:]] == mslots[order[:-1]])
    if len(same):
        i, j = int(order[same[0]]), int(order[same[0] + 1])
        if positions is not None:
            i, j = int(positions[i]), int(positions[j])
        raise ArgumentError(
            f"matchers[{i}] and matchers[{j}] are the same GrammarMatcher: a matcher may "
            "appear only once in a batch call (fork it for independent copies); "
            "no matcher was changed"
        )


def _slots(matchers: tuple) -> tuple[np.ndarray, np.ndarray, int]:
    """Grammar and matcher slot ids of every matcher (a tuple from :func:`_hold`), and
    their common vocabulary size."""
    gslots, mslots, vocab, _ = _slot_arrays(matchers)
    return gslots, mslots, vocab


# The last batch's slot arrays: (grammar registry generation, keys, gslots, mslots, vocab,
# flags, whether the slots are distinct). An engine passes the same requests step after
# step; their keys (compared as one list) then give the same arrays, as long as no grammar
# slot changed owner (the generation), which could change the vocabulary a slot's tag
# gives. Replaced whole (one store), so threads share it safely; the arrays are never
# written after they are built.
_LAST_SLOTS: tuple = (-1, None, None, None, 0, None, False)


def _slot_arrays(matchers: tuple) -> tuple[np.ndarray, np.ndarray, int, np.ndarray | None]:
    """:func:`_slots` and the matchers' key flags (``KEY_* >> 61`` per matcher; None when
    no matcher has any, the common case). Callers must not write the arrays."""
    global _LAST_SLOTS
    claimed = getattr(_CLAIMED, "entry", None)
    try:
        if claimed is not None and claimed[0] is matchers and claimed[1] is not None:
            keys = claimed[1]  # read by this call's claim (never changed)
        else:
            keys = list(map(_KEY, matchers))
    except AttributeError:
        bad = next(i for i, m in enumerate(matchers) if not isinstance(m, GrammarMatcher))
        raise ArgumentError(
            f"matchers[{bad}] must be a GrammarMatcher, got {type(matchers[bad]).__name__}"
        ) from None
    last = _LAST_SLOTS
    if keys is last[1] and GRAMMARS.generation == last[0]:
        return last[2], last[3], last[4], last[5]
    if keys == last[1] and GRAMMARS.generation == last[0]:
        # equal keys in another list (the claim's kept one, say): keep this list, so the
        # next call of this batch compares identity
        _LAST_SLOTS = (last[0], keys, *last[2:])
        return last[2], last[3], last[4], last[5]
    generation = GRAMMARS.generation  # read before the tags
    gslots, mslots, vocab, flags, keys = _split(matchers, keys)
    if len(keys) and min(keys) >= 0:
        distinct = len(mslots) < 2 or bool(np.bincount(mslots).max() < 2)
        _LAST_SLOTS = (generation, keys, gslots, mslots, vocab, flags, distinct)
    return gslots, mslots, vocab, flags


def _split(
    matchers: tuple, keys: list
) -> tuple[np.ndarray, np.ndarray, int, np.ndarray | None, list]:
    """The work of :func:`_slot_arrays` for ``keys``, the matchers' batch keys; also
    returns the keys after registering the matchers that had none."""
    b = len(keys)
    gslots = np.empty(b, dtype=np.int64)
    mslots = np.empty(b, dtype=np.int64)
    if not b:
        return gslots, mslots, 0, None, keys
    if min(keys) < 0:  # some matchers never used yet: register them
        keys = [m._register() for m in matchers]
    arr = np.array(keys, dtype=np.int64)
    flags = None
    if max(keys) >= KEY_TRACKS:
        flags = arr >> 61
        arr &= KEY_SLOTS
    tags = GRAMMARS.tags
    bad = _batch.split_keys(arr, tags, gslots, mslots)
    if bad >= 0:
        raise ArgumentError(
            f"matchers[{bad}] has vocab_size {int(tags[gslots[bad]])}, matchers[0] has "
            f"{int(tags[gslots[0]])}: one batch needs one vocabulary"
        )
    return gslots, mslots, int(tags[gslots[0]]), flags, keys


_NO_LAST = np.empty(0, dtype=np.int64)  # last_nodes not wanted (never written)


def _last_nodes_array(values, k: int) -> np.ndarray:
    """A caller's ``last_nodes`` output, checked: a writable int64 [K] numpy array (or
    CPU torch tensor) that the kernel can write through."""
    if (
        type(values) is np.ndarray
        and values.dtype == np.int64
        and values.shape == (k,)
        and values.flags.c_contiguous
        and values.flags.writeable
    ):
        return values
    arr = as_index_array(values, "last_nodes")
    if arr.shape != (k,) or not arr.flags.writeable or arr.dtype != np.int64:
        raise ArgumentError(
            f"last_nodes must be a writable int64 array of shape ({k},), got "
            f"{type(values).__name__} of shape {getattr(values, 'shape', None)}"
        )
    if hasattr(values, "data_ptr") and k and arr.ctypes.data != values.data_ptr():
        raise ArgumentError("last_nodes must be contiguous int64 (a copy would be written)")
    if isinstance(values, np.ndarray) and arr is not values:
        raise ArgumentError("last_nodes must be a C-contiguous int64 array")
    return arr


def _rows_scratch(n: int) -> tuple[np.ndarray, np.ndarray]:
    """The unfilled-rows pass's own flags (bool [n]) and stack (int64 [n + 1])."""
    return np.empty(n, dtype=np.bool_), np.empty(n + 1, dtype=np.int64)


# Per thread: the walk scratch of the traversals it runs (a chunk runs in one thread, and a
# kernel never calls back into Python, so one thread's walks never overlap).
_WALKS = threading.local()


def _traverse_walk(n: int, deadline: int) -> tuple:
    """A traversal's own stack (int32 [>= n + 1]) and clock buffer (int64 [2]), the calling
    thread's, and its deadline: the plain tuple of a ``kernels.layout.Walk``."""
    walk = getattr(_WALKS, "walk", None)
    if walk is None or walk[0].shape[0] <= n:
        walk = _WALKS.walk = (np.empty(max(n + 1, 64), dtype=np.int32), np.zeros(2, np.int64))
    return walk[0], walk[1], deadline


# The request ids 0..b-1 and b zero roots of the last whole-batch traversal: kernels and
# checks only read them (never written once built), so calls and threads share them;
# replaced whole.
_LAST_IDS: tuple = (-1, None, None)


def _ids_and_roots(b: int) -> tuple[np.ndarray, np.ndarray]:
    """``arange(b)`` and ``zeros(b)`` (int64), shared; callers must not write them."""
    global _LAST_IDS
    last = _LAST_IDS
    if last[0] != b:
        last = _LAST_IDS = (b, np.arange(b, dtype=np.int64), np.zeros(b, dtype=np.int64))
    return last[1], last[2]


def _index_vector(values, name: str, n: int | None = None) -> np.ndarray:
    arr = as_index_array(values, name)
    if arr.ndim != 1 or (n is not None and arr.shape[0] != n):
        want = f"({n},)" if n is not None else "1-D"
        raise ArgumentError(f"{name} must have shape {want}, got {arr.shape}")
    return arr


class _StaticOrBound:
    """A batch operation callable on an instance (its pool runs the work) and, as
    xgrammar's static method of that name, on the class (inline in the calling thread).
    ``BatchGrammarMatcher.op(instance, ...)``, the explicit unbound form, uses ``instance``."""

    def __init__(self, func) -> None:
        self.func = func
        self.__doc__ = func.__doc__

    def __set_name__(self, owner, name: str) -> None:
        self.owner = owner

    def __get__(self, obj, objtype=None):
        if obj is not None:
            return types.MethodType(self.func, obj)
        func, owner = self.func, objtype or self.owner

        @functools.wraps(func)
        def static(*args, **kwargs):
            if args and isinstance(args[0], owner):
                return func(*args, **kwargs)
            return func(None, *args, **kwargs)

        return static


class BatchGrammarMatcher:
    """Runs matcher operations for many requests in one call.

    Requests may use different compiled grammars (one schema each). The per-request work
    runs in numba kernels that reach every matcher through slot registries, so a call pays
    no Python work per request beyond collecting slot ids; large batches are cut into at
    most one contiguous chunk per worker of a persistent :class:`~treegram.pool.WorkerPool`
    (the kernels release the GIL), small ones run inline.

    Parameters
    ----------
    max_threads : int or "auto", default "auto"
        Workers of the pool ("auto": the number of CPUs), at most
        :data:`MAX_THREADS_LIMIT` (max(256, 4 x CPUs)).

    Raises
    ------
    ArgumentError
        ``max_threads`` is not "auto" or an int in ``[1, MAX_THREADS_LIMIT]``.

    Notes
    -----
    Every call validates all of its inputs before any kernel runs: a bad request leaves
    every matcher and every output row untouched. One matcher may appear only once per
    call (ArgumentError otherwise).

    Thread safety: one instance may be used by any number of threads at once; concurrent
    calls share its pool. Each call copies the ``matchers`` list it is given and holds
    those matchers (and their grammars) until it returns, so another thread may edit the
    list or drop matchers meanwhile; what it must not do is use a matcher of a running
    call (scalar or batch) at the same time. A worker's exception reaches the caller after
    all chunks finished; the pool is reused by the next call. If the system refuses to
    start the pool's threads, the call raises :class:`~treegram.errors.WorkerError` and
    the threads already started are stopped. ``copy.copy``/``copy.deepcopy`` give a new
    instance with its own pool.
    """

    def __init__(self, max_threads: int | Literal["auto"] = "auto") -> None:
        if isinstance(max_threads, str) and max_threads == "auto":
            n = min(os.cpu_count() or 1, MAX_THREADS_LIMIT)
        elif _is_token_id(max_threads) and 1 <= max_threads <= MAX_THREADS_LIMIT:
            n = int(max_threads)
        else:
            raise ArgumentError(
                f"max_threads must be 'auto' or an int in [1, {MAX_THREADS_LIMIT}], "
                f"got {max_threads!r}"
            )
        self._pool = WorkerPool(n)
        self._views = BitmaskViewCache()  # the engine's output buffer, validated once
        self._tree_views = IndexViewCache(3)  # the engine's tree tensors, viewed once
        self._local = threading.local()  # per-thread scratch of the input checks

    def __copy__(self) -> BatchGrammarMatcher:
        """A new instance with its own pool of the same size (pools are not shared)."""
        return BatchGrammarMatcher(self.max_threads)

    def __deepcopy__(self, memo: dict) -> BatchGrammarMatcher:
        return self.__copy__()

    @property
    def max_threads(self) -> int:
        """Number of workers (the calling thread counts as one)."""
        return self._pool.num_workers

    def close(self) -> None:
        """Stop the worker threads (idempotent)."""
        self._pool.close()

    def __enter__(self) -> BatchGrammarMatcher:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------ execution
    def _inline(self, n_items: int, words_per_item: int) -> bool:
        """Whether :meth:`_run` would run this much work in the calling thread."""
        return n_items * words_per_item < _INLINE_WORDS or self._pool.num_workers == 1

    def _run(self, kernel, n_items: int, words_per_item: int) -> None:
        """Run ``kernel(start, stop)`` over ``range(n_items)`` under the registry read lock."""
        REGISTRY_LOCK.acquire_read()
        try:
            if self._inline(n_items, words_per_item):
                kernel(0, n_items)
            else:
                self._pool.run_chunks(kernel, n_items)
        finally:
            REGISTRY_LOCK.release_read()

    @staticmethod
    def _retry(
        matchers, requests, status, rerun, extra_bytes: int | None = 0, deadline: int = 0
    ) -> None:
        """Resolve the requests whose kernel asked for room or classification, then rerun
        them one at a time until they finish. Past ``deadline`` (a traversal's budget,
        which classification between kernel runs spends too) the rest time out."""
        for k in np.flatnonzero((status < 0) & (status != TIMEOUT)):
            matcher = matchers[int(requests[k])]
            while status[k] < 0 and status[k] != TIMEOUT:
                if past_deadline(deadline):
                    status[k] = TIMEOUT
                    break
                matcher._resolve(int(status[k]), extra_bytes, deadline)
                rerun(int(k))

    # ------------------------------------------------------------ operations
    @_claiming(1)
    def batch_fill_next_token_bitmask(self, matchers, bitmask, indices=None) -> None:
        """Fill ``bitmask[indices[k]]`` (default: row ``k``) for ``matchers[k]``.

        Raises
        ------
        BitmaskError
            Bad bitmask or rows; ArgumentError for bad matchers or indices;
            MatcherStateError if a matcher accepted a stop token.
        """
        matchers = _hold(matchers)
        gslots, mslots, vocab, flags = _slot_arrays(matchers)
        b = len(mslots)
        if b == 0:
            return  # nothing to fill (as xgrammar: the bitmask is not inspected)
        _check_distinct(mslots)
        out = self._views.view(bitmask, vocab)
        if indices is None:
            rows = np.arange(b, dtype=np.int64)
        else:
            rows = _index_vector(indices, "indices", b)
        if rows.min() < 0 or rows.max() >= out.shape[0]:
            raise BitmaskError(f"indices must be rows in [0, {out.shape[0]}), got {rows}")
        self._check_not_stopped(matchers, mslots)
        _close_spent_budgets(matchers, flags)
        status = np.zeros(b, dtype=np.int64)
        with ContiguousRows(out, out.shape[0]) as words:

            def kernel(start: int, stop: int) -> None:  # runs under the registry read lock
                _batch.batch_fill(
                    GRAMMARS.table, MATCHERS.table, gslots, mslots, rows, words, status, start, stop
                )

            self._run(kernel, b, words.shape[1])
            self._retry(
                matchers,
                np.arange(b),
                status,
                lambda k: self._run_one(
                    _batch.batch_fill, (gslots, mslots, rows, words, status), k
                ),
            )

    @_StaticOrBound
    @_claiming(1)
    def batch_accept_token(self, matchers, tokens, debug_print: bool = False) -> list[bool]:
        """Accept ``tokens[k]`` in ``matchers[k]``; returns whether each was accepted.

        Callable on an instance (large batches run on its pool) or, as xgrammar's static
        method, on the class: ``BatchGrammarMatcher.batch_accept_token(matchers, tokens)``
        runs in the calling thread. ``debug_print`` is accepted for xgrammar's signature
        and ignored.

        Raises
        ------
        InvalidTokenIdError
            Some token is outside ``[0, vocab_size)``; ArgumentError for bad matchers
            (a matcher listed twice included). Nothing is changed then.
        """
        matchers = _hold(matchers)
        gslots, mslots, vocab, flags = _slot_arrays(matchers)
        toks = _index_vector(tokens, "tokens", len(mslots))
        _check_distinct(mslots)
        if len(toks) and (toks.min() < 0 or toks.max() >= vocab):
            bad = int(np.flatnonzero((toks < 0) | (toks >= vocab))[0])
            raise InvalidTokenIdError(
                f"tokens[{bad}] = {int(toks[bad])} is not a token id in [0, {vocab})"
            )
        _close_spent_budgets(matchers, flags)
        status = np.zeros(len(mslots), dtype=np.int64)

        def kernel(start: int, stop: int) -> None:  # runs under the registry read lock
            _batch.batch_accept(
                GRAMMARS.table, MATCHERS.table, gslots, mslots, toks, status, start, stop
            )

        if len(mslots) and self is None:  # called on the class: inline
            REGISTRY_LOCK.acquire_read()
            try:
                kernel(0, len(mslots))
            finally:
                REGISTRY_LOCK.release_read()
        elif len(mslots):
            self._run(kernel, len(mslots), 1)
        if len(mslots):
            BatchGrammarMatcher._retry(
                matchers,
                np.arange(len(mslots)),
                status,
                lambda k: BatchGrammarMatcher._run_one(
                    _batch.batch_accept, (gslots, mslots, toks, status), k
                ),
                extra_bytes=None,
            )
            # matchers of grammars with captures or budgets keep the text and steps
            if flags is not None:
                for k in np.flatnonzero((flags != 0) & (status == 1)).tolist():
                    matchers[k]._after_token(int(toks[k]))
        return (status == 1).tolist()

    @staticmethod
    @_claiming(0)
    def batch_accept_string(matchers, strings, debug_print: bool = False) -> list[bool]:
        """Accept ``strings[k]`` (str or bytes) in ``matchers[k]``, each as one step.

        A static method, as xgrammar's (an instance works too); ``debug_print`` is
        accepted for xgrammar's signature and ignored.

        Raises
        ------
        ArgumentError
            Bad matchers (one listed twice included), a count mismatch, or a str with no
            UTF-8 form (a lone surrogate); TypeError (plain) for an entry that is neither
            str nor bytes. Every string is checked and encoded before any matcher changes.
        """
        matchers = _hold(matchers)
        _, mslots, _ = _slots(matchers)  # every entry must be a matcher
        if isinstance(strings, (str, bytes, bytearray)) or not isinstance(strings, (list, tuple)):
            raise ArgumentError(
                f"strings must be a list of str or bytes, got {type(strings).__name__}"
            )
        strings = tuple(strings)
        if len(strings) != len(matchers):
            raise ArgumentError(f"strings has {len(strings)} entries for {len(matchers)} matchers")
        _check_distinct(mslots)
        data = []
        for k, text in enumerate(strings):
            if isinstance(text, str):
                data.append(_encode_utf8(text, f"strings[{k}]"))
            elif isinstance(text, (bytes, bytearray)):
                data.append(bytes(text))
            else:
                raise TypeError(
                    f"strings[{k}] must be str or bytes, got {type(text).__name__}; "
                    "no matcher was changed"
                )
        return [m.accept_string(s) for m, s in zip(matchers, data, strict=True)]

    @staticmethod
    def batch_fill_temperature(matchers, temperatures, indices=None) -> None:
        """Write each matcher's :attr:`GrammarMatcher.temperature` into ``temperatures``
        (``-1`` where it is ``None``), as xgrammar's static method of that name.

        Parameters
        ----------
        matchers : list of GrammarMatcher
        temperatures : float32 [M] (numpy or CPU torch)
            Output; entries no matcher writes are left as they are.
        indices : list of int, optional
            The entry of each matcher (default: ``matchers[k]`` writes entry ``k``).

        Raises
        ------
        TemperatureError
            A bad ``temperatures`` tensor, ``indices`` of another length than
            ``matchers``, or an index outside ``temperatures``; nothing is written then.
        ArgumentError
            An entry of ``matchers`` is not a matcher.
        """
        matchers = _hold(matchers)
        _slots(matchers)  # every entry must be a matcher
        out = as_temperature_array(temperatures)
        if indices is None:
            rows = list(range(len(matchers)))
        else:
            if not isinstance(indices, (list, tuple)) and not hasattr(indices, "tolist"):
                raise TemperatureError(
                    f"indices must be a list of ints, got {type(indices).__name__}"
                )
            rows = list(indices.tolist() if hasattr(indices, "tolist") else indices)
            if len(rows) != len(matchers):
                raise TemperatureError(
                    f"indices size ({len(rows)}) must equal the number of matchers "
                    f"({len(matchers)})"
                )
        if len(rows) > out.shape[0] and indices is None:
            raise TemperatureError(
                f"temperatures tensor has {out.shape[0]} entries for {len(rows)} matchers"
            )
        for k, row in enumerate(rows):
            if not _is_token_id(row) or not 0 <= row < out.shape[0]:
                raise TemperatureError(
                    f"indices[{k}] = {row!r} is out of bounds for temperatures of size "
                    f"{out.shape[0]}"
                )
        values = [m._temperature_value() for m in matchers]
        for row, value in zip(rows, values, strict=True):
            out[row] = value

    @staticmethod
    @_claiming(0)
    def batch_rollback(matchers, num_tokens=1) -> None:
        """Roll ``matchers[k]`` back by ``num_tokens`` (an int or one count per matcher).

        Raises
        ------
        MatcherStateError
            Some matcher has fewer steps than asked for; no matcher is changed then.
        ArgumentError
            Bad matchers (one listed twice included) or negative counts.
        """
        matchers = _hold(matchers)
        _, mslots, _, flags = _slot_arrays(matchers)
        if _is_token_id(num_tokens):
            if num_tokens < 0:
                raise ArgumentError(f"num_tokens must be >= 0, got {num_tokens}")
            # Beyond int64 it exceeds every history: the check below reports it.
            counts = np.full(len(mslots), min(int(num_tokens), _INT64_MAX), dtype=np.int64)
        else:
            counts = _index_vector(num_tokens, "num_tokens", len(mslots))
        if len(counts) and counts.min() < 0:
            raise ArgumentError(f"num_tokens must be >= 0, got {counts.min()}")
        _check_distinct(mslots)  # [m, m] would check each count alone, then apply both
        steps = np.zeros((len(mslots), 2), dtype=np.int64)
        REGISTRY_LOCK.acquire_read()
        try:
            mlist = MATCHERS.table
            if len(mslots):
                _batch.batch_steps(mlist, mslots, steps)
            too_far = np.flatnonzero(counts > steps[:, 0])
            if len(too_far):
                k = int(too_far[0])
                asked = num_tokens if _is_token_id(num_tokens) else int(counts[k])
                raise MatcherStateError(
                    f"matchers[{k}]: cannot roll back {asked} tokens, only "
                    f"{int(steps[k, 0])} accepted; no matcher was changed"
                )
            if len(mslots):
                _batch.batch_rollback(mlist, mslots, counts)
        finally:
            REGISTRY_LOCK.release_read()
        if flags is not None:
            for k in np.flatnonzero(flags).tolist():
                matchers[k]._after_rollback()

    @_claiming(1)
    def batch_traverse_draft_tree(
        self,
        matchers,
        retrieve_next_token,
        retrieve_next_sibling,
        draft_tokens,
        token_bitmask,
        *,
        indices=None,
        root_positions=None,
        time_threshold: float = -1.0,
        unfilled_rows: int = 0,
        last_nodes=None,
    ) -> list[bool]:
        """Fill the masks of every node of every request's draft tree in one call.

        Parameters
        ----------
        matchers : list of GrammarMatcher, length B
        retrieve_next_token, retrieve_next_sibling : int [N] (shared) or [B, N]
            First child / next sibling of each node, -1 for none.
        draft_tokens : int [B, N]
            Token of each node of each request.
        token_bitmask : int32 [>= B * N, ceil(vocab_size / 32)]
            Row ``i * N + j`` receives node ``j`` of request ``i``.
        indices : int [K], optional
            Traverse only these requests (distinct positions in ``matchers``); other rows
            are left untouched.
        root_positions : int [K], optional
            Root node of each selected request (default 0).
        time_threshold : float, default -1
            Seconds for the whole call; requests not finished in time return False, with
            their root's row filled all the same when its classes are known (as the
            scalar call).
        unfilled_rows : {0, -1}, default 0
            The word written across the rows of the selected requests that get no mask:
            nodes never reached, nodes whose token is a stop token, every node of a
            matcher that has stopped. 0 is treegram's and xgrammar's convention; -1 (every
            token allowed) leaves those rows as an engine that allocates its masks all -1
            and walks the tree itself leaves them (SGLang's ``traverse_tree``).
        last_nodes : int64 [K], optional
            Output: the last node each selected request's walk accepted, in depth-first
            order (-1 when none), the node whose token an engine's own walk accepted last
            (SGLang's grammar objects keep it as ``current_token``).

        Returns
        -------
        list of bool
            One completion flag per selected request.

        Raises
        ------
        ArgumentError, DraftTreeError, InvalidTokenIdError, BitmaskError
            Any malformed input: bad matchers (one selected twice included), links out
            of range or beyond int64 (uint64 included), a draft token outside
            ``[0, vocab_size)`` (the roots' excepted), a NaN or non-numeric
            ``time_threshold`` (``inf``: no limit), ``unfilled_rows`` other than 0 and
            -1, ``last_nodes`` that is not a writable int64 array of K entries. Checked
            before any work starts.
        """
        # no time limit, the default: skip the clock
        deadline = (
            0
            if type(time_threshold) is float and time_threshold == -1.0
            else deadline_ns(time_threshold)
        )
        if type(unfilled_rows) is not int or unfilled_rows not in (0, -1):
            raise ArgumentError(f"unfilled_rows must be 0 or -1, got {unfilled_rows!r}")
        if type(matchers) is not tuple:  # held already when called through _claiming
            matchers = _hold(matchers)
        gslots, mslots, vocab, flags = _slot_arrays(matchers)
        b = len(mslots)
        views = self._tree_views
        kept = views.tree(draft_tokens, retrieve_next_token, retrieve_next_sibling, b)
        if kept is not None:  # the engine's tensors of the last call, checked then
            draft, next_token, next_sibling = kept
        else:
            draft = views.view(2, draft_tokens, "draft_tokens")
            if draft.ndim != 2 or draft.shape[0] != b:
                raise DraftTreeError(f"draft_tokens must have shape ({b}, N), got {draft.shape}")
            next_token, next_sibling = link_arrays(
                retrieve_next_token, retrieve_next_sibling, b, draft.shape[1], views=views
            )
            views.keep_tree(
                draft_tokens,
                retrieve_next_token,
                retrieve_next_sibling,
                b,
                (draft, next_token, next_sibling),
            )
        n = draft.shape[1]
        zeros = None
        if indices is None:
            requests, zeros = _ids_and_roots(b)
        else:
            requests = _index_vector(indices, "indices")
            if len(requests) and (requests.min() < 0 or requests.max() >= b):
                raise ArgumentError(f"indices must be in [0, {b}), got {requests}")
            if len(np.unique(requests)) != len(requests):
                raise ArgumentError(f"indices must be distinct, got {requests}")
        if indices is None:
            _check_distinct(mslots)
        else:
            _check_distinct(mslots[requests], requests)
        k = len(requests)
        if root_positions is None:
            roots = zeros if zeros is not None else np.zeros(k, dtype=np.int64)
        else:
            roots = _index_vector(root_positions, "root_positions", k)
        check = self._check_scratch(n)
        words = n * ((vocab + 31) // 32)  # a request's words of output (a valid bitmask's)
        # A whole batch run inline has its trees and tokens checked by the traversal kernel
        # itself, before any work (one kernel call instead of two); otherwise here. Its tree
        # and token errors then come after the bitmask's and last_nodes' (checked below).
        fused = indices is None and k > 0 and self._inline(k, words)
        if not fused:
            check_draft_input(
                next_token if next_token.shape[0] == 1 or indices is None else next_token[requests],
                next_sibling
                if next_sibling.shape[0] == 1 or indices is None
                else next_sibling[requests],
                roots,
                draft if indices is None else draft[requests],
                vocab,
                scratch=check,
            )
        out = self._views.view(token_bitmask, vocab, "token_bitmask")
        if out.shape[0] < b * n:
            raise BitmaskError(f"token_bitmask needs B * N = {b * n} rows, got {out.shape[0]}")
        # rows apart in memory are written through a contiguous copy (see ContiguousRows)
        with ContiguousRows(out, b * n) as out:
            if last_nodes is not None:
                last_nodes = _last_nodes_array(last_nodes, k)
            if k == 0:
                return []
            status = np.zeros(k, dtype=np.int64)
            tree = (next_token, next_sibling, draft)  # a kernels.layout.Tree
            args = (tree, out, (requests, roots, status), vocab)
            post = None  # the unfilled-rows pass, run in the same chunks as the traversal
            if unfilled_rows or last_nodes is not None:
                post = (
                    MATCHERS.table,
                    mslots,
                    tree,
                    out,
                    (requests, roots),
                    vocab,
                    unfilled_rows,
                    _NO_LAST if last_nodes is None else last_nodes,
                )

            code = 0  # a fused call's: minus its unfinished walks, or a tree input error
            if fused:  # the kernel called here, not through a closure (a frame less)
                walk = _traverse_walk(n, deadline)
                REGISTRY_LOCK.acquire_read()
                try:
                    code = _batch.batch_traverse(
                        GRAMMARS.table,
                        MATCHERS.table,
                        gslots,
                        mslots,
                        *args,
                        walk,
                        check,
                        True,
                        0,
                        k,
                    )
                    if code == 0 and post is not None:
                        _rows.batch_unfilled_rows(MATCHERS.table, *post[1:], _rows_scratch(n), 0, k)
                finally:
                    REGISTRY_LOCK.release_read()
                if code > 0:
                    raise_tree_input(code, check[2], draft, vocab)
            else:

                def kernel(start: int, stop: int) -> None:  # runs under the registry read lock
                    _batch.batch_traverse(
                        GRAMMARS.table,
                        MATCHERS.table,
                        gslots,
                        mslots,
                        *args,
                        _traverse_walk(n, deadline),
                        check,
                        False,
                        start,
                        stop,
                    )
                    if post is not None:
                        _rows.batch_unfilled_rows(*post, _rows_scratch(n), start, stop)

                self._run(kernel, k, words)
            # the common case: every walk finished in the kernel (a fused call counts the
            # others; count_nonzero costs a third of any())
            if flags is None and (code == 0 if fused else not np.count_nonzero(status)):
                return [True] * k
            # these get the unfilled-rows pass (again): the unfinished ones, and all of them
            # after a fused call that left some unfinished (it ran the pass for none)
            redo = np.arange(k) if fused and code != 0 else np.flatnonzero(status)
            self._retry(
                matchers,
                requests,
                status,
                lambda j: self._run_one(
                    _batch.batch_traverse,
                    (gslots, mslots, *args, _traverse_walk(n, deadline), check, False),
                    j,
                ),
                extra_bytes=None,
                deadline=deadline,
            )
            counted = None
            if flags is not None:
                counted = (flags[requests] & (KEY_COUNTED >> 61)) != 0
            # a request that timed out still gets its root's row, the current mask, when that
            # needs no classification past the deadline (GrammarMatcher._fill_root_row);
            # budgeted matchers are walked again below
            timed_out = status == TIMEOUT
            if counted is not None:
                timed_out &= ~counted
            for j in np.flatnonzero(timed_out).tolist():
                r = int(requests[j])
                matchers[r]._fill_root_row(out, r * n + int(roots[j]), deadline)
            # token budgets close occurrences between the nodes of a tree, which the batch
            # kernel does not do: those matchers walk their trees node by node
            if counted is not None and counted.any():
                redo = np.union1d(redo, np.flatnonzero(counted))
                for j in np.flatnonzero(counted).tolist():
                    r = int(requests[j])
                    m = matchers[r]
                    t = r if next_token.shape[0] > 1 else 0
                    rows = out[r * n : (r + 1) * n]
                    rows[:] = 0
                    done = m._traverse_by_steps(
                        next_token[t], next_sibling[t], draft[r], rows, int(roots[j]), deadline
                    )
                    status[j] = 0 if done else 1
            if post is not None:
                for j in redo.tolist():
                    self._run_one_rows(post, n, j)
            return (status == 0).tolist()

    def _check_scratch(self, n: int) -> tuple:
        """This thread's scratch for the tree checks (kept per thread: an instance serves
        many threads at once)."""
        local = self._local
        scratch = getattr(local, "check", None)
        if scratch is None or scratch[0].shape[0] < n:
            scratch = local.check = check_scratch(max(n, 64))
        return scratch

    @staticmethod
    def _run_one_rows(post: tuple, n: int, j: int) -> None:
        """The unfilled-rows pass for request ``j`` alone (after its walk was redone)."""
        REGISTRY_LOCK.acquire_read()
        try:
            _rows.batch_unfilled_rows(MATCHERS.table, *post[1:], _rows_scratch(n), j, j + 1)
        finally:
            REGISTRY_LOCK.release_read()

    @staticmethod
    def _run_one(kernel, args: tuple, k: int) -> None:
        """Run one request of a batch kernel (after its matcher made room)."""
        REGISTRY_LOCK.acquire_read()
        try:
            kernel(GRAMMARS.table, MATCHERS.table, *args, k, k + 1)
        finally:
            REGISTRY_LOCK.release_read()

    @staticmethod
    def _check_not_stopped(matchers, mslots) -> None:
        steps = np.zeros((len(mslots), 2), dtype=np.int64)
        REGISTRY_LOCK.acquire_read()
        try:
            _batch.batch_steps(MATCHERS.table, mslots, steps)
        finally:
            REGISTRY_LOCK.release_read()
        stopped = np.flatnonzero(steps[:, 1])
        if len(stopped):
            raise MatcherStateError(
                f"matchers[{int(stopped[0])}] accepted a stop token; no mask was filled"
            )
