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

from treegram.ir._graphs import grouped_by_key

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
    into_ptr, by_dst = grouped_by_key(dst, n)
    into_cls = np.empty(m, dtype=np.int64)
    into_src = np.empty(m, dtype=np.int64)
    for j in range(m):
        into_cls[j] = cls[by_dst[j]]
        into_src[j] = src[by_dst[j]]
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


# ---------------------------------------------------------------------------------------
# Whole operations on flat automata: ``ptr`` [n + 1] row offsets into ``lo``/``hi``/``to``
# (each row sorted and disjoint), ``accept`` [n]; state 0 starts.


@njit(nogil=True, cache=True)
def _live(n, accept, ptr, to):
    """States reachable from the start that can reach an accepting state."""
    fwd = np.zeros(n, dtype=np.uint8)
    stack = np.empty(n, dtype=np.int64)
    fwd[0] = 1
    stack[0] = 0
    _mark_reachable(stack, np.int64(1), ptr, to, fwd)  # not a literal: one specialization
    m = ptr[n]
    src = np.empty(m, dtype=np.int64)
    for s in range(n):
        for e in range(ptr[s], ptr[s + 1]):
            src[e] = s
    # predecessors as CSR
    pred_ptr, by_to = grouped_by_key(to[:m], n)
    pred = np.empty(m, dtype=np.int64)
    for j in range(m):
        pred[j] = src[by_to[j]]
    live = np.zeros(n, dtype=np.uint8)
    top = 0
    for s in range(n):
        if fwd[s] and accept[s]:
            live[s] = 1
            stack[top] = s
            top += 1
    _mark_reachable(stack, top, pred_ptr, pred, live)
    return live


@njit(nogil=True, cache=True)
def _mark_reachable(stack, top, ptr, to, mark):
    """Mark every state reachable along the CSR edges ``ptr``/``to`` from the ``top``
    states on ``stack`` (already marked); ``stack`` has room for every state."""
    while top > 0:
        top -= 1
        s = stack[top]
        for e in range(ptr[s], ptr[s + 1]):
            t = to[e]
            if not mark[t]:
                mark[t] = 1
                stack[top] = t
                top += 1


@njit(nogil=True, cache=True)
def canonical(n, accept, ptr, lo, hi, to):
    """The minimal automaton of the language, trimmed and partial, numbered as
    :meth:`treegram.ir.Dfa.minimize` numbers it: breadth-first from the start, rows in
    ascending code point order, adjacent intervals with one target merged.

    Returns
    -------
    n_out : int
    accept_out : uint8 [n_out]
    ptr_out : int64 [n_out + 1]; lo_out, hi_out, to_out : int64 [n_out_edges]
    """
    live = _live(n, accept, ptr, to)
    if not live[0]:  # the empty language: one rejecting state
        return (
            1, np.zeros(1, dtype=np.uint8), np.zeros(2, dtype=np.int64),
            np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64),
            np.empty(0, dtype=np.int64),
        )  # fmt: skip
    # the live part, states renumbered densely
    new_id = np.full(n, -1, dtype=np.int64)
    k = np.int64(0)  # not a literal: one specialization of coarsest_partition
    for s in range(n):
        if live[s]:
            new_id[s] = k
            k += 1
    m = 0
    for s in range(n):
        if live[s]:
            for e in range(ptr[s], ptr[s + 1]):
                if live[to[e]]:
                    m += 1
    t_src = np.empty(m, dtype=np.int64)
    t_lo = np.empty(m, dtype=np.int64)
    t_hi = np.empty(m, dtype=np.int64)
    t_dst = np.empty(m, dtype=np.int64)
    l_acc = np.empty(k, dtype=np.uint8)
    l_ptr = np.zeros(k + 1, dtype=np.int64)
    m = 0
    for s in range(n):
        if live[s]:
            i = new_id[s]
            l_acc[i] = accept[s]
            for e in range(ptr[s], ptr[s + 1]):
                if live[to[e]]:
                    t_src[m], t_lo[m], t_hi[m], t_dst[m] = i, lo[e], hi[e], new_id[to[e]]
                    m += 1
            l_ptr[i + 1] = m
    block_of = coarsest_partition(k, l_acc, t_src, t_lo, t_hi, t_dst)
    # breadth-first over blocks, each row read from the block's first state found
    order = np.full(k, -1, dtype=np.int64)  # block -> new number
    reps = np.empty(k, dtype=np.int64)
    order[block_of[0]] = 0
    reps[0] = 0
    n_out = 1
    o_ptr = np.zeros(k + 1, dtype=np.int64)
    o_lo = np.empty(m, dtype=np.int64)
    o_hi = np.empty(m, dtype=np.int64)
    o_to = np.empty(m, dtype=np.int64)
    o_acc = np.empty(k, dtype=np.uint8)
    q = 0
    i = 0
    while i < n_out:
        s = reps[i]
        o_acc[i] = l_acc[s]
        row_start = q
        for e in range(l_ptr[s], l_ptr[s + 1]):
            b = block_of[t_dst[e]]
            if order[b] < 0:
                order[b] = n_out
                reps[n_out] = t_dst[e]
                n_out += 1
            t = order[b]
            if q > row_start and o_to[q - 1] == t and o_hi[q - 1] + 1 == t_lo[e]:
                o_hi[q - 1] = t_hi[e]
            else:
                o_lo[q], o_hi[q], o_to[q] = t_lo[e], t_hi[e], t
                q += 1
        o_ptr[i + 1] = q
        i += 1
    return (
        n_out,
        o_acc[:n_out].copy(),
        o_ptr[: n_out + 1].copy(),
        o_lo[:q].copy(),
        o_hi[:q].copy(),
        o_to[:q].copy(),
    )


@njit(nogil=True, cache=True)
def product(a_ptr, a_lo, a_hi, a_to, a_acc, b_ptr, b_lo, b_hi, b_to, b_acc, mode, limit):  # noqa: C901
    """The product automaton of two flat automata (not minimized).

    ``mode`` 0: intersection (both sides must move); 1: union (a missing side is the
    dead state); 2: difference (the left side must move). States are pairs numbered in
    discovery order, one edge per elementary interval.

    Returns
    -------
    n, accept, ptr, lo, hi, to (as :func:`canonical` takes them); ``n`` is -1 when
    the product would have more than ``limit`` states.
    """
    dead = np.int64(-1)
    nb1 = np.int64(b_acc.shape[0] + 1)
    ids = dict()
    ids[np.int64(0)] = np.int64(0)  # the pair (0, 0)
    accept_none = np.zeros(0, dtype=np.uint8)
    pair_a = np.zeros(16, dtype=np.int64)
    pair_b = np.zeros(16, dtype=np.int64)
    n = 1
    ptr = np.zeros(17, dtype=np.int64)
    lo = np.empty(16, dtype=np.int64)
    hi = np.empty(16, dtype=np.int64)
    to = np.empty(16, dtype=np.int64)
    m = 0
    cuts = np.empty(16, dtype=np.int64)
    i = 0
    while i < n:
        p = pair_a[i]
        q = pair_b[i]
        a0 = a_ptr[p] if p >= 0 else 0
        a1 = a_ptr[p + 1] if p >= 0 else 0
        b0 = b_ptr[q] if q >= 0 else 0
        b1 = b_ptr[q + 1] if q >= 0 else 0
        n_cuts = 2 * (a1 - a0 + b1 - b0)
        if cuts.shape[0] < n_cuts:
            cuts = np.empty(2 * n_cuts, dtype=np.int64)
        c = 0
        for e in range(a0, a1):
            cuts[c] = a_lo[e]
            cuts[c + 1] = a_hi[e] + 1
            c += 2
        for e in range(b0, b1):
            cuts[c] = b_lo[e]
            cuts[c + 1] = b_hi[e] + 1
            c += 2
        n_pts = sort_unique(cuts, c)
        x = a0
        y = b0
        for z in range(n_pts - 1):
            s_lo = cuts[z]
            s_hi = cuts[z + 1] - 1
            while x < a1 and a_hi[x] < s_lo:
                x += 1
            while y < b1 and b_hi[y] < s_lo:
                y += 1
            ta = a_to[x] if x < a1 and a_lo[x] <= s_lo else dead
            tb = b_to[y] if y < b1 and b_lo[y] <= s_lo else dead
            if ta < 0 and tb < 0:
                continue
            if mode == 0 and (ta < 0 or tb < 0):
                continue
            if mode == 2 and ta < 0:
                continue
            key = ta * nb1 + tb  # unique: -1 <= tb < nb1 - 1
            t = ids.get(key, dead)
            if t < 0:
                if n >= limit:
                    return -1, accept_none, ptr, lo, hi, to
                t = n
                ids[key] = t
                if n >= pair_a.shape[0]:
                    pair_a = _grow(pair_a, n + 1)
                    pair_b = _grow(pair_b, n + 1)
                pair_a[n] = ta
                pair_b[n] = tb
                n += 1
            if m >= lo.shape[0]:
                lo = _grow(lo, m + 1)
                hi = _grow(hi, m + 1)
                to = _grow(to, m + 1)
            lo[m] = s_lo
            hi[m] = s_hi
            to[m] = t
            m += 1
        i += 1
        if ptr.shape[0] < i + 1:
            ptr = _grow(ptr, i + 1)
        ptr[i] = m
    accept = np.empty(n, dtype=np.uint8)
    for s in range(n):
        fa = pair_a[s] >= 0 and a_acc[pair_a[s]] != 0
        fb = pair_b[s] >= 0 and b_acc[pair_b[s]] != 0
        if mode == 0:
            accept[s] = fa and fb
        elif mode == 1:
            accept[s] = fa or fb
        else:
            accept[s] = fa and not fb
    return n, accept, ptr[: n + 1].copy(), lo[:m].copy(), hi[:m].copy(), to[:m].copy()


@njit(nogil=True, cache=True)
def sort_unique(a, n):
    """Sort ``a[:n]`` in place and drop repeats; return how many values remain. A state's
    cuts (here, and in ``automaton._subset``'s subset construction) are few, so insertion
    sort beats ``np.unique``'s sort and allocations."""
    if n > 64:
        u = np.unique(a[:n])
        a[: u.shape[0]] = u
        return u.shape[0]
    for i in range(1, n):
        v = a[i]
        j = i - 1
        while j >= 0 and a[j] > v:
            a[j + 1] = a[j]
            j -= 1
        a[j + 1] = v
    k = 0
    for i in range(n):
        if k == 0 or a[i] != a[k - 1]:
            a[k] = a[i]
            k += 1
    return k


@njit(nogil=True, cache=True)
def _grow(a, need):
    if need <= a.shape[0]:
        return a
    out = np.zeros(max(need, 2 * a.shape[0]), dtype=a.dtype)
    out[: a.shape[0]] = a
    return out
