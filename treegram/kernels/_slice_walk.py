"""The JSON string slice's tokens read by one rule DFA: a walk without a chart.

A state inside a string whose text is constrained (a pattern, a key that is none of the
declared names, a length bound) does not contain the whole slice (``kernels._slices``), so
its classification walked the whole trie through the Earley chart: a hundred milliseconds
or more per state for about 280k trie nodes. But when the state's rule reads slice text
only through its own transitions (no calls on the way) and no slice byte can follow the
rule (its follow set is ``"`` and the like), a slice token is ACCEPTED exactly when the
rule's DFA reads all of its bytes, and REJECTED otherwise: ending the rule inside such a
token leaves a slice byte that nothing after the rule reads. That is one transition per
trie node, about a hundred times cheaper than a chart step; only the tokens outside the
slice (their own small trie) still need the chart.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ._clock import monotonic_ns
from ._layout import TIMEOUT


@njit(nogil=True, cache=True)
def slice_dfa_walk(
    byte_class, n_classes, trans, ref_ptr, state_final, state, trie, leads, acc, unk, deadline
):
    """Classify the slice tokens (``leads >= 0``) of the token trie for ``state``.

    Parameters
    ----------
    byte_class, n_classes, trans, ref_ptr, state_final
        The automaton's byte classes, transitions, call edges and final states (``A_*`` in
        ``kernels._layout``), or an empty ``state_final`` when no slice byte can follow the
        state's rule.
    state : int
        A state without calls.
    trie : tuple
        The whole vocabulary's token trie (``kernels._trie``), in sorted-token order.
    leads : int32 [n_tokens]
        Per sorted token, its characters in the slice, -1 outside it (``StringSlice.leads``).
    acc, unk : int32 [n_tokens]
        Receive, in increasing order, the positions of the slice tokens the rule reads
        whole (ACCEPTED) and of those whose path reaches a state with calls (decided by the
        chart instead), or (with ``state_final``) that read on past a state where the rule
        may end. Every other slice token is REJECTED; tokens outside the slice are left to
        the caller.
    deadline : int
        Monotonic nanoseconds (0: none), checked every 4,096 nodes.

    Returns
    -------
    (int, int, int)
        (status, n_acc, n_unk): status 0, or TIMEOUT.
    """
    node_byte, node_depth, node_end, node_first, node_tok_lo, node_tok_hi = trie
    path = np.empty(node_depth.max() + 1, dtype=np.int32)  # the DFA state at each depth
    path[0] = state
    clock = np.zeros(2, dtype=np.int64)
    n_acc = 0
    n_unk = 0
    n_nodes = node_byte.shape[0]
    ending = state_final.shape[0] > 0
    k = 0
    steps = 0
    while k < n_nodes:
        steps += 1
        if deadline > 0 and (steps & 4095) == 0 and monotonic_ns(clock) > deadline:
            return TIMEOUT, 0, 0
        d = node_depth[k]
        t = trans[path[d - 1] * n_classes + byte_class[node_byte[k]]]
        if t < 0:  # the rule cannot read this byte: the subtree's slice tokens fail
            k = node_end[k]
            continue
        if ref_ptr[t + 1] > ref_ptr[t]:  # a call: the chart decides the subtree
            for p in range(node_first[k], node_first[node_end[k]]):
                if leads[p] >= 0:
                    unk[n_unk] = p
                    n_unk += 1
            k = node_end[k]
            continue
        path[d] = t
        for p in range(node_tok_lo[k], node_tok_hi[k]):
            if leads[p] >= 0:
                acc[n_acc] = p
                n_acc += 1
        if ending and state_final[t]:  # the rule may end here and a caller read on
            # the node's own tokens come first in its subtree, then the longer ones
            for p in range(
                node_first[k] + node_tok_hi[k] - node_tok_lo[k], node_first[node_end[k]]
            ):
                if leads[p] >= 0:
                    unk[n_unk] = p
                    n_unk += 1
            k = node_end[k]
            continue
        k += 1
    return 0, n_acc, n_unk
