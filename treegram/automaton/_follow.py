"""LL(1) follow sets of every rule, as a numba kernel over the automaton's CSR arrays.

Byte sets are 257-bit rows of five uint64 words: bits 0..255 are bytes, bit 256 (word 4,
bit 0) means "can end here". Both fixpoints below are least fixpoints of monotone
equations, so the worklist order does not change the result.
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["follow_sets"]

_WORDS = 5  # 256 byte bits + the end bit


@njit(nogil=True, cache=True)
def _csr_of(src, dst, n):
    """Edges ``src[i] -> dst[i]`` grouped by source: offsets [n + 1] and targets."""
    ptr = np.zeros(n + 1, dtype=np.int64)
    for i in range(src.shape[0]):
        ptr[src[i] + 1] += 1
    for i in range(n):
        ptr[i + 1] += ptr[i]
    fill = ptr[:-1].copy()
    out = np.empty(src.shape[0], dtype=np.int64)
    for i in range(src.shape[0]):
        out[fill[src[i]]] = dst[i]
        fill[src[i]] += 1
    return ptr, out


@njit(nogil=True, cache=True)
def follow_sets(
    rule_start, state_final, state_rule, byte_ptr, lo, hi, ref_ptr, ref_rule, ref_target,
    root, n_real,
):  # fmt: skip
    """For each rule, the bytes that can be read right after it ends.

    ``first[s]`` holds the bytes a path from state ``s`` can read first, plus the end bit
    when ``s`` can reach the end of its rule without reading anything. A call ``s -(r)-> t``
    adds ``first[start(r)]``'s bytes to ``first[s]``, and ``first[t]`` when ``r`` is
    nullable; it adds ``first[t]``'s bytes to ``follow[r]``, and the caller's follow set
    when ``t`` can end the caller. The root may end the input; lookahead pseudo-rules
    (ids from ``n_real``) are never called, so every byte may follow them.

    Parameters
    ----------
    rule_start : int [n_rules]
    state_final, state_rule : int [n_states]
    byte_ptr : int32 [n_states + 1]; lo, hi : int32 [n_byte_edges]
    ref_ptr : int32 [n_states + 1]; ref_rule, ref_target : int32 [n_ref_edges]
    root, n_real : int

    Returns
    -------
    uint8 [n_rules, 256]
    """
    n_states = state_final.shape[0]
    n_rules = rule_start.shape[0]
    first = np.zeros((n_states, _WORDS), dtype=np.uint64)
    one = np.uint64(1)
    for s in range(n_states):
        if state_final[s]:
            first[s, 4] = one
        for e in range(byte_ptr[s], byte_ptr[s + 1]):
            for b in range(lo[e], hi[e] + 1):
                first[s, b >> 6] |= one << np.uint64(b & 63)
    n_ref = ref_rule.shape[0]
    # first[s] depends on the start state of every callee and on every call's target.
    dep_src = np.empty(2 * n_ref, dtype=np.int64)
    dep_dst = np.empty(2 * n_ref, dtype=np.int64)
    caller_of = np.empty(n_ref, dtype=np.int64)
    for s in range(n_states):
        for e in range(ref_ptr[s], ref_ptr[s + 1]):
            caller_of[e] = s
            dep_src[2 * e] = rule_start[ref_rule[e]]
            dep_dst[2 * e] = s
            dep_src[2 * e + 1] = ref_target[e]
            dep_dst[2 * e + 1] = s
    dep_ptr, dep = _csr_of(dep_src, dep_dst, n_states)
    pending = np.empty(n_states, dtype=np.int64)
    queued = np.zeros(n_states, dtype=np.uint8)
    top = 0
    for s in range(n_states):
        if ref_ptr[s + 1] > ref_ptr[s]:
            pending[top] = s
            top += 1
            queued[s] = 1
    row = np.empty(_WORDS, dtype=np.uint64)
    while top > 0:
        top -= 1
        s = pending[top]
        queued[s] = 0
        row[:] = first[s]
        for e in range(ref_ptr[s], ref_ptr[s + 1]):
            callee = rule_start[ref_rule[e]]
            for w in range(4):
                row[w] |= first[callee, w]
            if first[callee, 4] & one:
                for w in range(_WORDS):
                    row[w] |= first[ref_target[e], w]
        changed = False
        for w in range(_WORDS):
            if row[w] != first[s, w]:
                changed = True
                first[s, w] = row[w]
        if changed:
            for d in range(dep_ptr[s], dep_ptr[s + 1]):
                u = dep[d]
                if not queued[u]:
                    queued[u] = 1
                    pending[top] = u
                    top += 1
    follow = np.zeros((n_rules, _WORDS), dtype=np.uint64)
    follow[root, 4] = one
    # The callee's follow set includes its caller's wherever the call can end the caller.
    inh_src = np.empty(n_ref, dtype=np.int64)
    inh_dst = np.empty(n_ref, dtype=np.int64)
    n_inh = 0
    for e in range(n_ref):
        rid = ref_rule[e]
        to = ref_target[e]
        for w in range(4):
            follow[rid, w] |= first[to, w]
        caller = state_rule[caller_of[e]]
        if first[to, 4] & one and rid != caller:
            inh_src[n_inh] = caller
            inh_dst[n_inh] = rid
            n_inh += 1
    inh_ptr, inh = _csr_of(inh_src[:n_inh], inh_dst[:n_inh], n_rules)
    pending_r = np.empty(n_rules, dtype=np.int64)
    queued_r = np.ones(n_rules, dtype=np.uint8)
    for r in range(n_rules):
        pending_r[r] = r
    top = n_rules
    while top > 0:
        top -= 1
        r = pending_r[top]
        queued_r[r] = 0
        for i in range(inh_ptr[r], inh_ptr[r + 1]):
            callee = inh[i]
            changed = False
            for w in range(_WORDS):
                v = follow[callee, w] | follow[r, w]
                if v != follow[callee, w]:
                    follow[callee, w] = v
                    changed = True
            if changed and not queued_r[callee]:
                queued_r[callee] = 1
                pending_r[top] = callee
                top += 1
    out = np.ones((n_rules, 256), dtype=np.uint8)
    for r in range(min(n_real, n_rules)):
        for b in range(256):
            out[r, b] = np.uint8((follow[r, b >> 6] >> np.uint64(b & 63)) & one)
    return out
