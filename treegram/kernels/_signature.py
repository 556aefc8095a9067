"""Classification signatures: states that classify alike get the same 128-bit key.

A state's token classification (``kernels._classify``) only depends on what the Earley walk
seeded at that state can see while reading at most ``max_depth`` bytes (the longest token):
the states reachable within that many bytes, their byte transitions, rule calls, final
flags and rule membership, and the follow set of the state's rule. ``state_signature``
numbers those states canonically (breadth first by byte depth, rule calls at depth 0, edges
in byte order) and hashes that description, so two states with equal signatures have
isomorphic windows and therefore equal classifications, in the same grammar or in another
one compiled for the same vocabulary. Every position of a long length-bounded string whose
remaining length exceeds the longest token, and every unconstrained JSON string body, share
one signature.

The hash is keyed by the caller (two random 64-bit keys), so colliding inputs cannot be
crafted without knowing the keys.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ._earley import unpack

_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)


@njit(nogil=True, cache=True, inline="always")
def splitmix(h, v):
    """Fold the word ``v`` into the running hash ``h`` (a splitmix64 finaliser round; the
    automaton's node keys use it too)."""
    z = h ^ (np.uint64(v) + np.uint64(0x9E3779B97F4A7C15))
    z = (z ^ (z >> np.uint64(30))) * _M1
    z = (z ^ (z >> np.uint64(27))) * _M2
    return z ^ (z >> np.uint64(31))


@njit(nogil=True, cache=True, inline="always")
def _number(canon, order, depth, n, t, d):
    """Give state ``t`` the canonical number ``n`` (window position ``n``, ``d`` bytes
    from the start); returns the window's new size."""
    canon[t] = n
    order[n] = t
    depth[n] = d
    return n + 1


@njit(nogil=True, cache=True)
def state_signature(
    ab,
    state,
    chain_targets,
    top_targets,
    follow,
    class_keep,
    max_depth,
    cap,
    key0,
    key1,
    canon,
    rule_canon,
):
    """Canonical hash of the part of the automaton a classification of ``state`` can see.

    Parameters
    ----------
    ab : int32 array
        The packed automaton (``Automaton.packed``: one array to type per call, not ten).
    state : int
        The automaton state.
    chain_targets, top_targets : int64 [m], int64 [k]
        The return states of the classification context (``kernels._slices.slice_reach``;
        empty for none). Their windows join the state's, each marked as a return point.
    follow : uint8 [256]
        The follow set the classification tests.
    class_keep : uint8 [n_classes]
        The byte classes whose transitions count (0: taken as none): all of them for a
        classification; those of slice bytes for a slice walk, which reads no other
        (``MaskStore._slice_walk_key``).
    max_depth : int
        Bytes the classification may read (the longest token of the vocabulary).
    cap : int
        Give up when the window holds more states than this.
    key0, key1 : uint64
        Hash keys.
    canon : int32 [n_states]
        Scratch, all -1; returned all -1.
    rule_canon : int32 [n_rules]
        Scratch, all -1; returned all -1.

    Returns
    -------
    (bool, uint64, uint64)
        ``(True, h0, h1)``, or ``(False, 0, 0)`` when the window exceeds ``cap`` states.
    """
    A = unpack(ab)
    order = np.empty(cap + 1, dtype=np.int64)
    depth = np.empty(cap + 1, dtype=np.int64)
    # Byte runs of equal class, so a state's transitions are read per run, not per byte.
    run_lo = np.empty(256, dtype=np.int64)
    n_runs = 0
    for b in range(256):
        if b == 0 or A.byte_class[b] != A.byte_class[b - 1]:
            run_lo[n_runs] = b
            n_runs += 1
    n = 1
    order[0] = state
    depth[0] = 0
    canon[state] = 0
    ok = True
    for i in range(chain_targets.shape[0] + top_targets.shape[0]):
        m = chain_targets.shape[0]
        t = chain_targets[i] if i < m else top_targets[i - m]
        if canon[t] < 0:
            if n >= cap:
                ok = False
                break
            n = _number(canon, order, depth, n, t, 0)
    lo = 0
    d = 0
    while lo < n and ok:
        # close the level over rule calls (zero bytes)
        i = lo
        while i < n and ok:
            s = order[i]
            for e in range(A.ref_ptr[s], A.ref_ptr[s + 1]):
                for t in (A.rule_start[A.ref_rule[e]], A.ref_target[e]):
                    if canon[t] < 0:
                        if n >= cap:
                            ok = False
                            break
                        n = _number(canon, order, depth, n, t, d)
                if not ok:
                    break
            i += 1
        hi = n
        if d >= max_depth:
            break
        for i in range(lo, hi):
            if not ok:
                break
            s = order[i]
            for q in range(n_runs):
                cls = A.byte_class[run_lo[q]]
                t = A.trans[s * A.n_classes + cls] if class_keep[cls] else -1
                if t >= 0 and canon[t] < 0:
                    if n >= cap:
                        ok = False
                        break
                    n = _number(canon, order, depth, n, t, d + 1)
        lo = hi
        d += 1
    h0 = key0
    h1 = key1
    if ok:
        h0 = splitmix(h0, n)
        h1 = splitmix(h1, max_depth)
        # the return points: the chain in order, then the top level in canonical order
        h0 = splitmix(h0, chain_targets.shape[0])
        for i in range(chain_targets.shape[0]):
            h0 = splitmix(h0, canon[chain_targets[i]])
            h1 = splitmix(h1, canon[chain_targets[i]] + 5)
        marks = np.empty(top_targets.shape[0], dtype=np.int64)
        for i in range(top_targets.shape[0]):
            marks[i] = canon[top_targets[i]]
        marks.sort()
        h0 = splitmix(h0, marks.shape[0])
        for i in range(marks.shape[0]):
            h0 = splitmix(h0, marks[i])
            h1 = splitmix(h1, marks[i] + 3)
        for w in range(4):
            v = np.uint64(0)
            for b in range(64):
                if follow[64 * w + b]:
                    v |= np.uint64(1) << np.uint64(b)
            h0 = splitmix(h0, v)
            h1 = splitmix(h1, v ^ np.uint64(w))
        n_rules_seen = 0
        for i in range(n):
            s = order[i]
            if depth[i] > max_depth:
                h0 = splitmix(h0, -1)
                h1 = splitmix(h1, -1)
                continue
            r = A.state_rule[s]
            if rule_canon[r] < 0:
                rule_canon[r] = n_rules_seen
                n_rules_seen += 1
            h0 = splitmix(h0, rule_canon[r] * 2 + (1 if A.state_final[s] else 0))
            h1 = splitmix(h1, rule_canon[r] * 3 + (1 if A.state_final[s] else 0))
            if depth[i] < max_depth:
                prev = -2
                for q in range(n_runs):
                    cls = A.byte_class[run_lo[q]]
                    t = A.trans[s * A.n_classes + cls] if class_keep[cls] else -1
                    tc = canon[t] if t >= 0 else -1
                    if tc != prev:
                        h0 = splitmix(h0, run_lo[q] * 1000003 + tc)
                        h1 = splitmix(h1, tc * 257 + run_lo[q])
                        prev = tc
            h0 = splitmix(h0, A.ref_ptr[s + 1] - A.ref_ptr[s])
            for e in range(A.ref_ptr[s], A.ref_ptr[s + 1]):
                rr = A.ref_rule[e]
                if rule_canon[rr] < 0:
                    rule_canon[rr] = n_rules_seen
                    n_rules_seen += 1
                v = (
                    (rule_canon[rr] * 2 + (1 if A.rule_nullable[rr] else 0)) * 1000003
                    + canon[A.rule_start[rr]]
                ) * 1000003 + canon[A.ref_target[e]]
                h0 = splitmix(h0, v)
                h1 = splitmix(h1, v + 1)
    # reset the scratch for the next call
    for i in range(n):
        s = order[i]
        canon[s] = -1
        rule_canon[A.state_rule[s]] = -1
        for e in range(A.ref_ptr[s], A.ref_ptr[s + 1]):
            rule_canon[A.ref_rule[e]] = -1
    if not ok:
        return False, np.uint64(0), np.uint64(0)
    return True, h0, h1
