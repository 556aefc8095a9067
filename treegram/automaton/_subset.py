"""Subset construction of one rule's NFA, as a numba kernel over flat CSR arrays.

The NFA comes as three CSR edge lists per state (epsilon moves, byte ranges, rule calls).
A DFA state is the sorted set of *important* NFA states (those with a byte or call edge,
and the accepting one) reachable by epsilon moves; states that only pass epsilon moves on
decide nothing, so subsets that differ in them alone are one DFA state. DFA states are
numbered in discovery order (byte intervals in ascending order, then calls by rule id), so
the result does not depend on how the subsets are stored.

Subsets live back to back in one int32 pool and are found again through an
open-addressing hash table keyed by their contents. The kernel works in arrays of a fixed
size and starts again with larger ones when they run out (see :func:`determinize`).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from treegram.ir import MAX_RULE_STATES, MAX_SUBSET_MEMBERS, sort_unique

__all__ = ["determinize", "fill_transitions"]

_EMPTY = -1
# compile-time constants of the kernel (see treegram.ir._budget)
_MAX_STATES = MAX_RULE_STATES
_MAX_MEMBERS = MAX_SUBSET_MEMBERS


@njit(nogil=True, cache=True)
def _closure(targets, n_targets, gen, stamp, stack, members, important, eps_ptr, eps_to):
    """Write the sorted important states reachable by epsilon moves from
    ``targets[:n_targets]`` into ``members``; return how many there are. ``gen`` is a fresh
    stamp value (states stamped with it are visited)."""
    k = 0
    top = 0
    for t in range(n_targets):
        q = targets[t]
        if stamp[q] != gen:
            stamp[q] = gen
            stack[top] = q
            top += 1
    while top > 0:
        top -= 1
        u = stack[top]
        if important[u]:
            members[k] = u
            k += 1
        for x in range(eps_ptr[u], eps_ptr[u + 1]):
            v = eps_to[x]
            if stamp[v] != gen:
                stamp[v] = gen
                stack[top] = v
                top += 1
    if k > 32:
        members[:k].sort()
        return k
    for x in range(1, k):  # subsets are small: no slice, no general sort
        v = members[x]
        y = x - 1
        while y >= 0 and members[y] > v:
            members[y + 1] = members[y]
            y -= 1
        members[y + 1] = v
    return k


@njit(nogil=True, cache=True)
def _intern(members, k, pool, pool_len, sub_ptr, sub_hash, n_sub, table, table_mask):
    """The id of subset ``members[:k]``, added to the store if new, with the store's new
    ``pool_len`` and ``n_sub``; id -1 when the store is full (the caller retries with
    larger arrays). The table has room for every subset the store can hold."""
    h = np.uint64(1469598103934665603)
    for z in range(k):
        h = (h ^ np.uint64(members[z])) * np.uint64(1099511628211)
    slot = np.int64(h & np.uint64(table_mask))
    while table[slot] != _EMPTY:
        cand = table[slot]
        if sub_hash[cand] == h and sub_ptr[cand + 1] - sub_ptr[cand] == k:
            base = sub_ptr[cand]
            same = True
            for z in range(k):
                if pool[base + z] != members[z]:
                    same = False
                    break
            if same:
                return cand, pool_len, n_sub
        slot = (slot + 1) & table_mask
    if n_sub == sub_hash.shape[0] or pool_len + k > pool.shape[0]:
        return -1, pool_len, n_sub
    pool[pool_len : pool_len + k] = members[:k]
    pool_len += k
    sub_ptr[n_sub + 1] = pool_len
    sub_hash[n_sub] = h
    table[slot] = n_sub
    return n_sub, pool_len, n_sub + 1


@njit(nogil=True, cache=True)
def _order_by_key(key, n, order):
    """Write into ``order[:n]`` the indices of ``key[:n]`` in ascending key order (stable)."""
    if n > 64:
        order[:n] = np.argsort(key[:n], kind="mergesort")
        return
    for i in range(n):
        v = key[i]
        j = i - 1
        while j >= 0 and key[order[j]] > v:
            order[j + 1] = order[j]
            j -= 1
        order[j + 1] = i


@njit(nogil=True, cache=True)
def determinize(
    n_nfa, eps_ptr, eps_to, byte_ptr, byte_lo, byte_hi, byte_to, ref_ptr, ref_rule, ref_to,
    start, accept,
):  # fmt: skip
    """Subset construction of one rule's NFA.

    Parameters
    ----------
    n_nfa : int
        Number of NFA states.
    eps_ptr, byte_ptr, ref_ptr : int32 [n_nfa + 1]
        CSR offsets of each state's epsilon, byte-range and call edges.
    eps_to : int32 [n_eps]
        Epsilon targets.
    byte_lo, byte_hi, byte_to : int32 [n_byte]
        Inclusive byte range and target of each byte edge.
    ref_rule, ref_to : int32 [n_ref]
        Called rule and return target of each call edge.
    start, accept : int
        The rule's start and accepting NFA states.

    Returns
    -------
    A DFA of no state at all when it would need more than ``ir.MAX_RULE_STATES`` states or
    its subsets more than ``ir.MAX_SUBSET_MEMBERS`` NFA states in all; otherwise:

    final : uint8 [n_dfa]
    out_byte_ptr : int32 [n_dfa + 1]
    out_lo, out_hi, out_to : int32 [n_out_byte]
        Byte edges per DFA state: disjoint ranges in ascending order, adjacent ranges with
        the same target merged.
    out_ref_ptr : int32 [n_dfa + 1]
    out_rule, out_ref_to : int32 [n_out_ref]
        Call edges per DFA state, one per called rule, in ascending rule order.
    """
    n_byte = byte_lo.shape[0]
    n_ref = ref_rule.shape[0]
    important = np.zeros(n_nfa, dtype=np.uint8)
    for s in range(n_nfa):
        if byte_ptr[s + 1] > byte_ptr[s] or ref_ptr[s + 1] > ref_ptr[s] or s == accept:
            important[s] = 1
    # scratch at its largest: a subset holds each NFA state (and so each edge) once
    stamp = np.zeros(n_nfa, dtype=np.int64)
    stack = np.empty(n_nfa, dtype=np.int32)
    members = np.empty(n_nfa, dtype=np.int32)
    width = max(n_byte, n_ref, 1)
    e_lo = np.empty(width, dtype=np.int32)
    e_hi = np.empty(width, dtype=np.int32)
    e_to = np.empty(width, dtype=np.int32)
    targets = np.empty(width, dtype=np.int32)
    cuts = np.empty(2 * width, dtype=np.int32)
    order = np.empty(max(n_ref, 1), dtype=np.int64)
    # the DFA and the subset store at a guessed size, doubled where a run runs out (the
    # construction then starts again): arrays a loop may replace cost numba a reference
    # count update at every use (capacities: states, byte edges, call edges, the subset
    # pool, one state's byte-interval targets)
    cap = np.array(
        [max(16, n_nfa), max(16, n_byte), max(16, n_ref), max(64, 4 * n_nfa), max(16, 2 * n_byte)]
    )
    # the state and pool capacities stop one past the budget: a construction that needs
    # more than the budget runs out at exactly that capacity
    cap[0] = min(cap[0], _MAX_STATES + 1)
    cap[3] = min(cap[3], _MAX_MEMBERS + 1)
    cut_at = np.zeros(257, dtype=np.int64)
    span_ptr = np.zeros(258, dtype=np.int64)
    cursor = np.zeros(258, dtype=np.int64)
    single = np.empty(n_nfa, dtype=np.int64)  # per NFA state: the id of its closure
    while True:
        n_table = 64
        while n_table < 2 * cap[0]:
            n_table *= 2
        final = np.empty(cap[0], dtype=np.uint8)
        out_byte_ptr = np.zeros(cap[0] + 1, dtype=np.int32)
        out_ref_ptr = np.zeros(cap[0] + 1, dtype=np.int32)
        sub_ptr = np.zeros(cap[0] + 1, dtype=np.int64)
        sub_hash = np.empty(cap[0], dtype=np.uint64)
        table = np.full(n_table, _EMPTY, dtype=np.int64)
        out_lo = np.empty(cap[1], dtype=np.int32)
        out_hi = np.empty(cap[1], dtype=np.int32)
        out_to = np.empty(cap[1], dtype=np.int32)
        out_rule = np.empty(cap[2], dtype=np.int32)
        out_ref_to = np.empty(cap[2], dtype=np.int32)
        pool = np.empty(cap[3], dtype=np.int32)
        span_to = np.empty(cap[4], dtype=np.int32)
        stamp[:] = 0
        single[:] = -1
        full, n_sub, n_out, n_out_ref = _subsets(
            (eps_ptr, eps_to, byte_ptr, byte_lo, byte_hi, byte_to, ref_ptr, ref_rule, ref_to),
            start,
            accept,
            (important, stamp, stack, members, e_lo, e_hi, e_to, targets, cuts, order),
            (cut_at, span_ptr, cursor, span_to, single),
            (final, out_byte_ptr, out_ref_ptr, out_lo, out_hi, out_to, out_rule, out_ref_to),
            (sub_ptr, sub_hash, table, pool),
        )
        if full < 0:
            break
        if (full == 0 and cap[0] > _MAX_STATES) or (full == 3 and cap[3] > _MAX_MEMBERS):
            n_sub = n_out = n_out_ref = 0  # over the budget: no DFA
            break
        cap[full] *= 2
        cap[0] = min(cap[0], _MAX_STATES + 1)
        cap[3] = min(cap[3], _MAX_MEMBERS + 1)
    return (
        final[:n_sub].copy(),
        out_byte_ptr[: n_sub + 1].copy(),
        out_lo[:n_out].copy(),
        out_hi[:n_out].copy(),
        out_to[:n_out].copy(),
        out_ref_ptr[: n_sub + 1].copy(),
        out_rule[:n_out_ref].copy(),
        out_ref_to[:n_out_ref].copy(),
    )


@njit(nogil=True, cache=True)
def _subsets(nfa, start, accept, scratch, intervals, dfa, store):  # noqa: C901
    """The subset construction of :func:`determinize` into arrays of fixed size: the
    ``nfa``'s edge arrays (as :func:`determinize` takes them), per-subset ``scratch``, the
    byte ``intervals``' buckets, the ``dfa``'s arrays and the subset ``store`` (offsets,
    hashes, table, pool), each a tuple unpacked here into locals (a field read in a loop
    would cost a reference count update at every use). Returns ``(full, n_sub, n_out,
    n_out_ref)``: ``full`` is -1 when done, else which capacity ran out (0 states, 1 byte
    edges, 2 call edges, 3 the subset pool, 4 the interval buckets)."""
    eps_ptr, eps_to, byte_ptr, byte_lo, byte_hi, byte_to, ref_ptr, ref_rule, ref_to = nfa
    important, stamp, stack, members, e_lo, e_hi, e_to, targets, cuts, order = scratch
    cut_at, span_ptr, cursor, span_to, single = intervals
    final, out_byte_ptr, out_ref_ptr, out_lo, out_hi, out_to, out_rule, out_ref_to = dfa
    sub_ptr, sub_hash, table, pool = store
    table_mask = table.shape[0] - 1
    gen = np.int64(1)  # int64 from the start: literals would compile each callee twice
    pool_len = np.int64(0)
    n_sub = np.int64(0)
    n_out = 0
    n_out_ref = 0
    targets[0] = start
    k = _closure(targets, np.int64(1), gen, stamp, stack, members, important, eps_ptr, eps_to)
    tid, pool_len, n_sub = _intern(
        members, k, pool, pool_len, sub_ptr, sub_hash, n_sub, table, table_mask
    )
    if tid < 0:
        return (0 if n_sub == sub_hash.shape[0] else 3), 0, 0, 0
    i = 0
    while i < n_sub:
        final[i] = 0
        m = 0
        for p in range(sub_ptr[i], sub_ptr[i + 1]):
            s = pool[p]
            if s == accept:
                final[i] = 1
            for e in range(byte_ptr[s], byte_ptr[s + 1]):
                e_lo[m] = byte_lo[e]
                e_hi[m] = byte_hi[e]
                e_to[m] = byte_to[e]
                m += 1
        # byte edges: one target subset per elementary interval between the edges' ends
        for e in range(m):
            cuts[2 * e] = e_lo[e]
            cuts[2 * e + 1] = e_hi[e] + 1
        n_cuts = sort_unique(cuts, 2 * m)
        # the targets of each interval, bucketed by one pass over the edges (an edge covers
        # the intervals from its low cut to its high one), in edge order as a scan would:
        # a scan of every edge per interval is quadratic in a subset of many ranges
        for c in range(n_cuts):
            cut_at[cuts[c]] = c
            span_ptr[c + 1] = 0
        for e in range(m):
            for c in range(cut_at[e_lo[e]], cut_at[e_hi[e] + 1]):
                span_ptr[c + 1] += 1
        for c in range(n_cuts):
            span_ptr[c + 1] += span_ptr[c]
            cursor[c] = span_ptr[c]
        if span_ptr[n_cuts] > span_to.shape[0]:
            return 4, 0, 0, 0
        for e in range(m):
            for c in range(cut_at[e_lo[e]], cut_at[e_hi[e] + 1]):
                span_to[cursor[c]] = e_to[e]
                cursor[c] += 1
        for c in range(n_cuts - 1):
            a = cuts[c]
            b = cuts[c + 1]  # the interval [a, b)
            n_targets = span_ptr[c + 1] - span_ptr[c]
            if n_targets == 0:
                continue
            # most intervals lead to one NFA state: its subset is interned once (the same
            # id the lookup would find, so the DFA is the same)
            if n_targets == 1 and single[span_to[span_ptr[c]]] >= 0:
                tid = single[span_to[span_ptr[c]]]
            else:
                for t in range(n_targets):
                    targets[t] = span_to[span_ptr[c] + t]
                gen += 1
                k = _closure(
                    targets, n_targets, gen, stamp, stack, members, important, eps_ptr, eps_to
                )
                tid, pool_len, n_sub = _intern(
                    members, k, pool, pool_len, sub_ptr, sub_hash, n_sub, table, table_mask
                )
                if tid < 0:
                    return (0 if n_sub == sub_hash.shape[0] else 3), 0, 0, 0
                if n_targets == 1:
                    single[targets[0]] = tid
            if n_out > out_byte_ptr[i] and out_hi[n_out - 1] == a - 1 and out_to[n_out - 1] == tid:
                out_hi[n_out - 1] = b - 1  # extends the previous range of this state
            else:
                if n_out == out_lo.shape[0]:
                    return 1, 0, 0, 0
                out_lo[n_out] = a
                out_hi[n_out] = b - 1
                out_to[n_out] = tid
                n_out += 1
        out_byte_ptr[i + 1] = n_out
        # calls: one target subset per called rule, in ascending rule order
        m = 0
        for p in range(sub_ptr[i], sub_ptr[i + 1]):
            s = pool[p]
            for e in range(ref_ptr[s], ref_ptr[s + 1]):
                e_lo[m] = ref_rule[e]
                e_to[m] = ref_to[e]
                m += 1
        _order_by_key(e_lo, np.int64(m), order)
        g = 0
        while g < m:
            rid = e_lo[order[g]]
            n_targets = 0
            while g < m and e_lo[order[g]] == rid:
                targets[n_targets] = e_to[order[g]]
                n_targets += 1
                g += 1
            if n_targets == 1 and single[targets[0]] >= 0:
                tid = single[targets[0]]
            else:
                gen += 1
                k = _closure(
                    targets, n_targets, gen, stamp, stack, members, important, eps_ptr, eps_to
                )
                tid, pool_len, n_sub = _intern(
                    members, k, pool, pool_len, sub_ptr, sub_hash, n_sub, table, table_mask
                )
                if tid < 0:
                    return (0 if n_sub == sub_hash.shape[0] else 3), 0, 0, 0
                if n_targets == 1:
                    single[targets[0]] = tid
            if n_out_ref == out_rule.shape[0]:
                return 2, 0, 0, 0
            out_rule[n_out_ref] = rid
            out_ref_to[n_out_ref] = tid
            n_out_ref += 1
        out_ref_ptr[i + 1] = n_out_ref
        i += 1
    return -1, n_sub, n_out, n_out_ref


@njit(nogil=True, cache=True)
def fill_transitions(trans, n_classes, byte_class, byte_ptr, lo, hi, to):
    """Write each state's byte edges into its row of the dense transition table.

    Every edge's ends are class boundaries, so an edge covers the contiguous classes
    ``byte_class[lo] .. byte_class[hi]``.
    """
    for s in range(byte_ptr.shape[0] - 1):
        row = s * n_classes
        for e in range(byte_ptr[s], byte_ptr[s + 1]):
            for c in range(byte_class[lo[e]], byte_class[hi[e]] + 1):
                trans[row + c] = to[e]
