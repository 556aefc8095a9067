"""BatchGrammarMatcher: one call for a whole batch of matchers, on a persistent pool."""

from __future__ import annotations

import os
import time
from typing import Literal

import numpy as np

from ..errors import ArgumentError, BitmaskError, DraftTreeError, MatcherStateError
from ..kernels import _batch
from ..kernels._ops import TIMEOUT
from ..pool import WorkerPool
from ._bitmask import as_bitmask_array
from ._matcher import GrammarMatcher, _is_token_id
from ._registry import GRAMMARS, MATCHERS, REGISTRY_LOCK
from ._tree_input import as_index_array, check_draft_trees

__all__ = ["BatchGrammarMatcher"]

# Below this many bitmask words of work a batch runs inline: handing chunks to threads
# costs tens of microseconds, more than small batches take in one kernel.
_INLINE_WORDS = 1 << 17


def _slots(matchers) -> tuple[np.ndarray, np.ndarray, int]:
    """Grammar and matcher slot ids of every matcher, and their common vocabulary size."""
    if not isinstance(matchers, (list, tuple)):
        raise ArgumentError(f"matchers must be a list of GrammarMatcher, got "
                            f"{type(matchers).__name__}")
    try:
        keys = np.fromiter((m._batch_key for m in matchers), dtype=np.int64,
                           count=len(matchers))
    except AttributeError:
        bad = next(i for i, m in enumerate(matchers) if not isinstance(m, GrammarMatcher))
        raise ArgumentError(
            f"matchers[{bad}] must be a GrammarMatcher, got {type(matchers[bad]).__name__}"
        ) from None
    if len(keys) and keys.min() < 0:  # first batch use of some matchers: register them
        for i in np.flatnonzero(keys < 0):
            keys[i] = matchers[int(i)]._register()
    gslots = keys >> 32
    mslots = keys & 0xFFFFFFFF
    if not len(keys):
        return gslots, mslots, 0
    vocab = GRAMMARS.tags[gslots]
    if (vocab != vocab[0]).any():
        bad = int(np.flatnonzero(vocab != vocab[0])[0])
        raise ArgumentError(
            f"matchers[{bad}] has vocab_size {int(vocab[bad])}, matchers[0] has "
            f"{int(vocab[0])}: one batch needs one vocabulary"
        )
    return gslots, mslots, int(vocab[0])


def _traverse_scratch(n: int) -> tuple[np.ndarray, np.ndarray]:
    """A traversal's own stack (int32 [n + 1]) and clock buffer (int64 [2])."""
    return np.empty(n + 1, dtype=np.int32), np.zeros(2, dtype=np.int64)


def _index_vector(values, name: str, n: int | None = None) -> np.ndarray:
    arr = as_index_array(values, name)
    if arr.ndim != 1 or (n is not None and arr.shape[0] != n):
        want = f"({n},)" if n is not None else "1-D"
        raise ArgumentError(f"{name} must have shape {want}, got {arr.shape}")
    return arr


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
        Workers of the pool ("auto": the number of CPUs).

    Notes
    -----
    Every call validates all of its inputs before any kernel runs: a bad request leaves
    every matcher and every output row untouched. A matcher must not be used by two calls
    at once. A worker's exception reaches the caller after all chunks finished; the pool is
    reused by the next call.
    """

    def __init__(self, max_threads: int | Literal["auto"] = "auto") -> None:
        if max_threads == "auto":
            n = os.cpu_count() or 1
        elif _is_token_id(max_threads) and max_threads >= 1:
            n = int(max_threads)
        else:
            raise ArgumentError(f"max_threads must be 'auto' or an int >= 1, got {max_threads!r}")
        self._pool = WorkerPool(n)

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
    def _run(self, kernel, n_items: int, words_per_item: int) -> None:
        """Run ``kernel(start, stop)`` over ``range(n_items)`` under the registry read lock."""
        REGISTRY_LOCK.acquire_read()
        try:
            if n_items * words_per_item < _INLINE_WORDS or self._pool.num_workers == 1:
                kernel(0, n_items)
            else:
                self._pool.run_chunks(kernel, n_items)
        finally:
            REGISTRY_LOCK.release_read()

    @staticmethod
    def _retry(matchers, requests, status, rerun, extra_bytes: int | None = 0) -> None:
        """Resolve the requests whose kernel asked for room or classification, then rerun
        them one at a time until they finish."""
        for k in np.flatnonzero((status < 0) & (status != TIMEOUT)):
            matcher = matchers[int(requests[k])]
            while status[k] < 0 and status[k] != TIMEOUT:
                matcher._resolve(int(status[k]), extra_bytes)
                rerun(int(k))

    # ------------------------------------------------------------ operations
    def batch_fill_next_token_bitmask(self, matchers, bitmask, indices=None) -> None:
        """Fill ``bitmask[indices[k]]`` (default: row ``k``) for ``matchers[k]``.

        Raises
        ------
        BitmaskError
            Bad bitmask or rows; ArgumentError for bad matchers or indices;
            MatcherStateError if a matcher accepted a stop token.
        """
        gslots, mslots, vocab = _slots(matchers)
        b = len(mslots)
        if b == 0:
            return  # nothing to fill (as xgrammar: the bitmask is not inspected)
        out = as_bitmask_array(bitmask, vocab_size=vocab)
        if indices is None:
            rows = np.arange(b, dtype=np.int64)
        else:
            rows = _index_vector(indices, "indices", b)
        if rows.min() < 0 or rows.max() >= out.shape[0]:
            raise BitmaskError(f"indices must be rows in [0, {out.shape[0]}), got {rows}")
        self._check_not_stopped(matchers, mslots)
        status = np.zeros(b, dtype=np.int64)

        def kernel(start: int, stop: int) -> None:  # runs under the registry read lock
            _batch.batch_fill(GRAMMARS.table, MATCHERS.table, gslots, mslots, rows, out,
                              status, start, stop)

        self._run(kernel, b, out.shape[1])
        self._retry(matchers, np.arange(b), status, lambda k: self._run_one(
            _batch.batch_fill, (gslots, mslots, rows, out, status), k))

    def batch_accept_token(self, matchers, tokens) -> list[bool]:
        """Accept ``tokens[k]`` in ``matchers[k]``; returns whether each was accepted."""
        gslots, mslots, vocab = _slots(matchers)
        toks = _index_vector(tokens, "tokens", len(mslots))
        if len(toks) and (toks.min() < 0 or toks.max() >= vocab):
            bad = int(np.flatnonzero((toks < 0) | (toks >= vocab))[0])
            from ..errors import InvalidTokenIdError

            raise InvalidTokenIdError(
                f"tokens[{bad}] = {int(toks[bad])} is not a token id in [0, {vocab})"
            )
        status = np.zeros(len(mslots), dtype=np.int64)

        def kernel(start: int, stop: int) -> None:  # runs under the registry read lock
            _batch.batch_accept(GRAMMARS.table, MATCHERS.table, gslots, mslots, toks, status,
                                start, stop)

        if len(mslots):
            self._run(kernel, len(mslots), 1)
            self._retry(matchers, np.arange(len(mslots)), status, lambda k: self._run_one(
                _batch.batch_accept, (gslots, mslots, toks, status), k), extra_bytes=None)
        return (status == 1).tolist()

    @staticmethod
    def batch_accept_string(matchers, strings) -> list[bool]:
        """Accept ``strings[k]`` (str or bytes) in ``matchers[k]``, each as one step."""
        _slots(matchers)  # every entry must be a matcher
        if len(strings) != len(matchers):
            raise ArgumentError(
                f"strings has {len(strings)} entries for {len(matchers)} matchers"
            )
        for k, text in enumerate(strings):
            if not isinstance(text, (str, bytes, bytearray)):
                raise TypeError(
                    f"strings[{k}] must be str or bytes, got {type(text).__name__}; "
                    "no matcher was changed"
                )
        return [m.accept_string(s) for m, s in zip(matchers, strings, strict=True)]

    @staticmethod
    def batch_rollback(matchers, num_tokens=1) -> None:
        """Roll ``matchers[k]`` back by ``num_tokens`` (an int or one count per matcher).

        Raises
        ------
        MatcherStateError
            Some matcher has fewer steps than asked for; no matcher is changed then.
        """
        _, mslots, _ = _slots(matchers)
        if _is_token_id(num_tokens):
            counts = np.full(len(mslots), int(num_tokens), dtype=np.int64)
        else:
            counts = _index_vector(num_tokens, "num_tokens", len(mslots))
        if len(counts) and counts.min() < 0:
            raise ArgumentError(f"num_tokens must be >= 0, got {counts.min()}")
        steps = np.zeros((len(mslots), 2), dtype=np.int64)
        REGISTRY_LOCK.acquire_read()
        try:
            mlist = MATCHERS.table
            if len(mslots):
                _batch.batch_steps(mlist, mslots, steps)
            too_far = np.flatnonzero(counts > steps[:, 0])
            if len(too_far):
                k = int(too_far[0])
                raise MatcherStateError(
                    f"matchers[{k}]: cannot roll back {int(counts[k])} tokens, only "
                    f"{int(steps[k, 0])} accepted; no matcher was changed"
                )
            if len(mslots):
                _batch.batch_rollback(mlist, mslots, counts)
        finally:
            REGISTRY_LOCK.release_read()

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
            Seconds for the whole call; requests not finished in time return False.

        Returns
        -------
        list of bool
            One completion flag per selected request.

        Raises
        ------
        ArgumentError, DraftTreeError, BitmaskError
            Any malformed input; checked before any work starts (nothing is changed).
        """
        deadline = (time.monotonic_ns() + int(time_threshold * 1e9)) if time_threshold > 0 else 0
        gslots, mslots, vocab = _slots(matchers)
        b = len(mslots)
        draft = as_index_array(draft_tokens, "draft_tokens")
        if draft.ndim != 2 or draft.shape[0] != b:
            raise DraftTreeError(f"draft_tokens must have shape ({b}, N), got {draft.shape}")
        n = draft.shape[1]
        links = []
        for name, values in (("retrieve_next_token", retrieve_next_token),
                             ("retrieve_next_sibling", retrieve_next_sibling)):
            arr = as_index_array(values, name)
            if arr.ndim == 1:
                arr = arr[None]
            if arr.ndim != 2 or arr.shape[1] != n or arr.shape[0] not in (1, b):
                raise DraftTreeError(
                    f"{name} must have shape ({n},) or ({b}, {n}), got {arr.shape}"
                )
            links.append(arr)
        next_token, next_sibling = links
        if next_token.shape != next_sibling.shape:
            raise DraftTreeError("retrieve_next_token and retrieve_next_sibling differ in shape: "
                                 f"{next_token.shape} vs {next_sibling.shape}")
        if indices is None:
            requests = np.arange(b, dtype=np.int64)
        else:
            requests = _index_vector(indices, "indices")
            if len(requests) and (requests.min() < 0 or requests.max() >= b):
                raise ArgumentError(f"indices must be in [0, {b}), got {requests}")
            if len(np.unique(requests)) != len(requests):
                raise ArgumentError(f"indices must be distinct, got {requests}")
        k = len(requests)
        if root_positions is None:
            roots = np.zeros(k, dtype=np.int64)
        else:
            roots = _index_vector(root_positions, "root_positions", k)
        check_draft_trees(next_token if next_token.shape[0] == 1 else next_token[requests],
                          next_sibling if next_sibling.shape[0] == 1 else next_sibling[requests],
                          roots)
        out = as_bitmask_array(token_bitmask, vocab_size=vocab, name="token_bitmask")
        if out.shape[0] < b * n:
            raise BitmaskError(
                f"token_bitmask needs B * N = {b * n} rows, got {out.shape[0]}"
            )
        if k == 0:
            return []
        status = np.zeros(k, dtype=np.int64)
        args = (next_token, next_sibling, draft, out, requests, roots, n, vocab, deadline, status)

        def kernel(start: int, stop: int) -> None:  # runs under the registry read lock
            _batch.batch_traverse(GRAMMARS.table, MATCHERS.table, gslots, mslots, *args,
                                  *_traverse_scratch(n), start, stop)

        self._run(kernel, k, n * out.shape[1])
        self._retry(matchers, requests, status, lambda j: self._run_one(
            _batch.batch_traverse, (gslots, mslots, *args, *_traverse_scratch(n)), j),
            extra_bytes=None)
        return (status == 0).tolist()

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
