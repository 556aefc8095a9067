"""Batch kernels: one call runs an operation for a range of requests.

Each request ``i`` names a grammar slot ``gslots[i]`` and a matcher slot ``mslots[i]``
in the typed-list registries (``treegram.matcher._registry``):

* grammar entry: (packed automaton, state_class, cls_meta, acc_pool, unc_pool, sv_ids,
  sv_offsets, sv_data, tok_offsets, tok_data);
* matcher entry: (items_s, items_o, set_starts, meta, hist, stop_ids, bufs, memo_key,
  memo_meta, memo_row, cand).

A worker thread runs one contiguous range ``[start, stop)`` and writes only the rows and
status entries of its requests; statuses are those of ``kernels._ops``. The loops take
their scratch from the caller; the reference-count-free ops they call do the work.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ._earley import unpack
from ._ops import M_STEPS, M_STOPPED, accept_token_op, fill_op, rollback_op, traverse_op


@njit(nogil=True, cache=True, )
def batch_fill(glist, mlist, gslots, mslots, rows, out, status, start, stop):
    """Fill ``out[rows[i]]`` with the mask of request ``i``."""
    for i in range(start, stop):
        g = glist[gslots[i]]
        m = mlist[mslots[i]]
        ab = g[0]
        status[i] = fill_op(unpack(ab), ab[3], g[1], g[2], g[3], g[4], g[5], g[6], g[7],
                            m[0], m[1], m[2], m[3], m[5], m[6], m[7], m[8], m[9], m[10], out,
                            rows[i])


@njit(nogil=True, cache=True, )
def batch_accept(glist, mlist, gslots, mslots, tokens, status, start, stop):
    """Accept ``tokens[i]`` in request ``i``; status 1 accepted, 0 rejected, < 0 retry."""
    for i in range(start, stop):
        g = glist[gslots[i]]
        m = mlist[mslots[i]]
        ab = g[0]
        status[i] = accept_token_op(unpack(ab), ab[3], g[8], g[9], m[0], m[1], m[2], m[3], m[4],
                                    m[5], tokens[i])


@njit(nogil=True, cache=True)
def batch_steps(mlist, mslots, out):
    """Steps taken (``out[i, 0]``) and stopped flag (``out[i, 1]``) of each request."""
    for i in range(mslots.shape[0]):
        meta = mlist[mslots[i]][3]
        out[i, 0] = meta[M_STEPS]
        out[i, 1] = meta[M_STOPPED]


@njit(nogil=True, cache=True)
def batch_rollback(mlist, mslots, counts):
    """Roll request ``i`` back by ``counts[i]`` steps (counts checked by the caller)."""
    for i in range(mslots.shape[0]):
        m = mlist[mslots[i]]
        rollback_op(m[3], m[4], m[8], counts[i])


@njit(nogil=True, cache=True, )
def batch_traverse(glist, mlist, gslots, mslots, next_token, next_sibling, draft, out,
                   requests, roots, n_nodes, vocab_size, deadline_ns, status, scratch, start,
                   stop):
    """Traverse the draft tree of each request in ``requests[start:stop]``.

    ``next_token``/``next_sibling`` are [T, N] (T = 1: one tree shared by all requests);
    ``draft`` is [B, N]; request ``i`` writes rows ``i * N .. i * N + N - 1`` of ``out``.
    ``roots[k]`` is the root of ``requests[k]``; ``status[k]`` receives its status.
    ``scratch`` int32 [n_nodes + 5] is this call's own traversal stack and clock buffer.
    """
    shared = next_token.shape[0] == 1
    stack = scratch[: n_nodes + 1]
    clock = scratch[n_nodes + 1 :].view(np.int64)
    for k in range(start, stop):
        i = requests[k]
        t = 0 if shared else i
        g = glist[gslots[i]]
        m = mlist[mslots[i]]
        ab = g[0]
        status[k] = traverse_op(
            unpack(ab), ab[3], g[1], g[2], g[3], g[4], g[5], g[6], g[7], g[8], g[9],
            m[0], m[1], m[2], m[3], m[4], m[5], m[6], m[7], m[8], m[9], m[10],
            next_token[t], next_sibling[t], draft[i], out, i * n_nodes, roots[k],
            vocab_size, deadline_ns, clock, stack,
        )
