"""The coarsest partition of a partial DFA's states into equivalent ones, as a numba
kernel (Hopcroft's algorithm with Valmari and Lehtinen's splitter rule for partial
transition functions).

The coarsest stable partition is unique, so :meth:`treegram.ir.Dfa.minimize` gives the
same automaton whichever correct algorithm computes it; this one is
``O(m log n)`` over flat arrays instead of Python sets and dicts.
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["coarsest_partition"]


@njit(nogil=True, cache=True)
def _by_class(t_src, t_lo, t_hi, t_dst):
    """Split interval transitions at every interval end: one transition per (state,
    symbol class), where the classes are the coarsest partition of the code points that
    all labels respect."""
    cuts = np.unique(np.concatenate((t_lo, t_hi + 1)))
    first_cls = np.searchsorted(cuts, t_lo)
    stop_cls = np.searchsorted(cuts, t_hi + 1)
    m = 0
    for e in range(t_src.shape[0]):
        m += stop_cls[e] - first_cls[e]
    src = np.empty(m, dtype=np.int64)
    cls = np.empty(m, dtype=np.int64)
    dst = np.empty(m, dtype=np.int64)
    k = 0
    for e in range(t_src.shape[0]):
        for c in range(first_cls[e], stop_cls[e]):
            src[k] = t_src[e]
            cls[k] = c
            dst[k] = t_dst[e]
            k += 1
    return src, cls, dst, max(cuts.shape[0] - 1, 0)


@njit(nogil=True, cache=True)
def coarsest_partition(n, accept, t_src, t_lo, t_hi, t_dst):  # noqa: C901
    """Block of every state under language equivalence.

    Parameters
    ----------
    n : int
        Number of states (all reachable and co-reachable: a trimmed automaton).
    accept : uint8 [n]
    t_src, t_lo, t_hi, t_dst : int64 [n_transitions]
        The transitions: ``t_src`` reads a code point in ``[t_lo, t_hi]`` to ``t_dst``.

    Returns
    -------
    int64 [n]
        Block ids (numbered in no particular order).
    """
    src, cls, dst, n_classes = _by_class(t_src, t_lo, t_hi, t_dst)
    m = src.shape[0]
    # transitions grouped by target, then by class: the predecessors of a state per class
    into_ptr = np.zeros(n + 1, dtype=np.int64)
    for e in range(m):
        into_ptr[dst[e] + 1] += 1
    for s in range(n):
        into_ptr[s + 1] += into_ptr[s]
    fill = into_ptr[:-1].copy()
    into_cls = np.empty(m, dtype=np.int64)
    into_src = np.empty(m, dtype=np.int64)
    for e in range(m):
        at = fill[dst[e]]
        into_cls[at] = cls[e]
        into_src[at] = src[e]
        fill[dst[e]] += 1
    # partition: block b holds elems[first[b]:end[b]]; loc[s] is s's index in elems
    elems = np.empty(n, dtype=np.int64)
    loc = np.empty(n, dtype=np.int64)
    block_of = np.empty(n, dtype=np.int64)
    first = np.empty(n + 1, dtype=np.int64)
    end = np.empty(n + 1, dtype=np.int64)
    k = 0
    n_blocks = 0
    for want in (1, 0):
        start = k
        for s in range(n):
            if (accept[s] != 0) == (want == 1):
                elems[k] = s
                loc[s] = k
                block_of[s] = n_blocks
                k += 1
        if k > start:
            first[n_blocks] = start
            end[n_blocks] = k
            n_blocks += 1
    work = np.empty(n + 1, dtype=np.int64)
    pending = np.zeros(n + 1, dtype=np.uint8)
    top = 0
    for b in range(n_blocks):  # partial transitions: every initial block is a splitter
        work[top] = b
        top += 1
        pending[b] = 1
    # per class: the predecessors found for the current splitter
    cls_ptr = np.zeros(n_classes + 1, dtype=np.int64)
    cls_fill = np.zeros(n_classes, dtype=np.int64)
    preds = np.empty(m, dtype=np.int64)
    marked = np.zeros(n + 1, dtype=np.int64)  # per block: marked members (moved to its front)
    touched = np.empty(n + 1, dtype=np.int64)
    members = np.empty(n, dtype=np.int64)
    while top > 0:
        top -= 1
        b = work[top]
        pending[b] = 0
        # the splitter's members now (it may be split while we use it)
        n_mem = end[b] - first[b]
        for i in range(n_mem):
            members[i] = elems[first[b] + i]
        cls_ptr[:] = 0
        for i in range(n_mem):
            q = members[i]
            for e in range(into_ptr[q], into_ptr[q + 1]):
                cls_ptr[into_cls[e] + 1] += 1
        for c in range(n_classes):
            cls_ptr[c + 1] += cls_ptr[c]
        cls_fill[:] = cls_ptr[:-1]
        for i in range(n_mem):
            q = members[i]
            for e in range(into_ptr[q], into_ptr[q + 1]):
                c = into_cls[e]
                preds[cls_fill[c]] = into_src[e]
                cls_fill[c] += 1
        for c in range(n_classes):
            n_touched = 0
            for i in range(cls_ptr[c], cls_ptr[c + 1]):
                p = preds[i]
                y = block_of[p]
                j = first[y] + marked[y]
                if loc[p] >= j:  # not marked yet: swap p to the marked front of y
                    if loc[p] > j:
                        other = elems[j]
                        elems[loc[p]] = other
                        loc[other] = loc[p]
                        elems[j] = p
                        loc[p] = j
                    if marked[y] == 0:
                        touched[n_touched] = y
                        n_touched += 1
                    marked[y] += 1
            for t in range(n_touched):
                y = touched[t]
                size = end[y] - first[y]
                part = marked[y]
                marked[y] = 0
                if part == size:
                    continue
                z = n_blocks
                n_blocks += 1
                first[z] = first[y]
                end[z] = first[y] + part
                first[y] = end[z]
                for i in range(first[z], end[z]):
                    block_of[elems[i]] = z
                if pending[y]:
                    work[top] = z
                    top += 1
                    pending[z] = 1
                else:
                    w = z if part <= size - part else y
                    work[top] = w
                    top += 1
                    pending[w] = 1
    return block_of
