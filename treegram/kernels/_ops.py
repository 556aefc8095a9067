"""Matcher operations over a matcher's state arrays: accept, rollback, fill, traverse.

One matcher's state is two bundles (``_layout``): a ``MatcherState`` (the Earley chart;
``meta`` int64 [4]: top set, number of history steps, stopped flag,
terminate-without-stop-token flag; ``hist`` int32 [cap]: the top set before each accepted
step, which rollback pops; ``stop_ids`` int32) and a ``Scratch`` (``bufs`` int32 [2, cap],
the mask memo and ``cand`` int32 [cap], the uncertain-token scratch). A grammar is a
``Grammar`` bundle: the *unpacked* automaton ``A``, its root rule, its token classes and
the vocabulary. Entry points unpack the packed buffer once per call, since every slice
costs an atomic reference count, and build the bundles from their flat arguments or the
matcher's registry row (numba passes a bundle as one argument and folds its fields, so
bundles cost nothing inside; Python hands kernels flat arrays and plain tuples, which
numba types fastest).

Like the mask kernels they run without reference counting and never allocate.

The scalar API and the batch kernels call the same functions, so both behave alike.
Every function returns a status instead of raising: ``OVERFLOW`` (grow the chart),
``HIST_FULL`` (grow ``hist``), ``BUFS_FULL`` / ``CAND_FULL`` (grow a scratch),
``NEED_CLASSIFY - k`` (classify ``bufs[1, :k]``) or ``TIMEOUT``; the matcher state is then
exactly as before the call.
"""

from __future__ import annotations

from numba import njit

from ._clock import monotonic_ns
from ._earley import can_end, scan_bytes_inlined, scan_token, unpack
from ._layout import (
    HIST_FULL,
    M_NO_STOP,
    M_STEPS,
    M_STOPPED,
    M_TOP,
    PACK_ROOT_RULE,
    REJECT,
    TIMEOUT,
    Chart,
    MatcherState,
)
from ._mask import fill_traversal_row_inlined, memo_keep_row


@njit(nogil=True, cache=True, _nrt=False)
def accept_token_op(A, root, tok_offsets, tok_data, M, token):
    """Accept ``token`` (an id already checked to be in range) at matcher position ``M``,
    reading its bytes from the token table (``tok_offsets``, ``tok_data``).

    Returns 1 if accepted, 0 if rejected (state unchanged), or a negative status.
    """
    meta = M.meta
    hist = M.hist
    stop_ids = M.stop_ids
    if meta[M_STOPPED]:
        return 0
    if meta[M_STEPS] >= hist.shape[0]:
        return HIST_FULL
    top = meta[M_TOP]
    for q in range(stop_ids.shape[0]):
        if stop_ids[q] == token:
            if meta[M_NO_STOP] or not can_end(A, M.chart, top, root):
                return 0
            hist[meta[M_STEPS]] = top
            meta[M_STEPS] += 1
            meta[M_STOPPED] = 1
            return 1
    lo = tok_offsets[token]
    hi = tok_offsets[token + 1]
    if lo == hi:  # no text: a special token (token-id elements never hold one)
        return 0
    new_top = REJECT
    if lo < hi:  # the token's bytes, through the text elements
        new_top = scan_bytes_inlined(A, M.chart, top, tok_data, lo, hi)
        if new_top < 0 and new_top != REJECT:
            return new_top
    if A.tokens[0] > 0 and lo < hi:  # and its id, through the token-id elements at top
        new_top = scan_token(A, M.chart, top, new_top, token, hi - lo)
        if new_top < 0 and new_top != REJECT:
            return new_top
    if new_top == REJECT:
        return 0
    hist[meta[M_STEPS]] = top
    meta[M_STEPS] += 1
    meta[M_TOP] = new_top
    return 1


@njit(nogil=True, cache=True, inline="always", _nrt=False)
def accept_in(G, M, token):
    """``accept_token_op`` on grammar ``G`` (its automaton and token table)."""
    return accept_token_op(G.automaton, G.root, G.vocab.tok_offsets, G.vocab.tok_data, M, token)


@njit(nogil=True, cache=True, inline="always", _nrt=False)
def rollback_op(meta, hist, memo_meta, n):
    """Undo the last ``n`` steps. Returns 0, or -1 if fewer than ``n`` were taken."""
    if n > meta[M_STEPS]:
        return -1
    if n == 0:
        return 0
    meta[M_STEPS] -= n
    meta[M_TOP] = hist[meta[M_STEPS]]
    meta[M_STOPPED] = 0
    if meta[M_TOP] < memo_meta[1]:
        memo_meta[1] = meta[M_TOP]  # sets above the new top will be rewritten
    return 0


@njit(nogil=True, cache=True, inline="always", _nrt=False)
def rollback_in(M, S, n):
    """``rollback_op`` of the matcher whose position is ``M`` and scratch ``S``."""
    return rollback_op(M.meta, M.hist, S.memo_meta, n)


# The scalar entry points and the traversal inline the body (a call costs about 70 ns of
# its 1.9 us on DeepSeek-V4, and more than a whole one-byte accept on a small grammar);
# the batch and forced kernels call the one compiled copy, which saves compiling it into
# each of them (about 25 s of a cold start's JIT).
_accept_token_inlined = njit(nogil=True, cache=True, inline="always", _nrt=False)(
    accept_token_op.py_func
)


@njit(nogil=True, cache=True, _nrt=False)
def accept_token_entry(
    ab, tok_offsets, tok_data, items_s, items_o, set_starts, text, meta, hist, stop_ids, token
):
    """``accept_token_op`` on a packed automaton and flat matcher arrays (scalar entry
    point, for a matcher without a registry slot)."""
    return _accept_token_inlined(
        unpack(ab),
        ab[PACK_ROOT_RULE],
        tok_offsets,
        tok_data,
        MatcherState(Chart(items_s, items_o, set_starts, text), meta, hist, stop_ids),
        token,
    )


@njit(nogil=True, cache=True, inline="always", _nrt=False)
def _allowed(out, r, token):
    return (out[r, token >> 5] >> (token & 31)) & 1


# Inlined into its two callers (the scalar and the batch traversal kernels): as a call of
# its own it takes the grammar, state and scratch bundles field by field (some 200 words),
# about 45 ns per request of a batch, as much as a small tree's root mask.
@njit(nogil=True, cache=True, inline="always", _nrt=False)
def traverse_op(G, M, S, tree, out, row_base, root, vocab_size, walk):
    """Fill the masks of every reachable node of one draft tree.

    Rows ``out[row_base + j]`` of all ``N`` nodes of ``tree`` (``_layout.Tree``) are
    zeroed first; node ``root`` gets the current mask; a child whose token its parent's
    mask allows is accepted, its mask filled unless the matcher stopped, its children
    visited, then it is rolled back. Depth-first with an explicit ``walk.stack`` (int32
    [N + 1]), so depth is unbounded. ``root`` is the root *node* (``G.root`` the grammar's
    root rule). The matcher ends exactly where it started, whatever the status.

    The per-node work is a handful of loads on small grammars, so the loop keeps calls
    out of it: the mask and the accept are inlined, each at one site (the root's mask is
    the first node "entered"), and going up the tree only counts levels: the rollback
    they add up to is applied at once, before the next accept or at the end (a chain's
    whole walk back is one rollback).

    Returns
    -------
    int
        0 when complete, TIMEOUT when ``walk.deadline_ns`` (> 0) passed, or a negative
        status.
    """
    meta = M.meta
    next_token, next_sibling, draft = tree
    stack = walk.stack
    n = draft.shape[0]
    for j in range(n):
        for w in range(out.shape[1]):
            out[row_base + j, w] = 0
    steps0 = meta[M_STEPS]
    top0 = meta[M_TOP]
    stopped0 = meta[M_STOPPED]
    if stopped0:
        return 0  # a stopped matcher allows nothing: every row stays zero
    A = G.automaton
    tok_offsets = G.vocab.tok_offsets
    tok_data = G.vocab.tok_data
    status = 0
    sp = -1
    v = root  # entering v: its token is accepted (the root's is the current position)
    entering = True
    pending = 0  # levels gone up since the last accept: steps still to roll back
    visits = 0
    memo_src = -1  # the row of out that holds the memo's row (-1: S.memo_row)
    while True:
        if entering:
            entering = False
            if not meta[M_STOPPED]:
                status = fill_traversal_row_inlined(G, M, S, out, row_base + v, memo_src)
                if status < 0:
                    break
                if status == 0:
                    memo_src = row_base + v
                status = 0
            sp += 1
            stack[sp] = v
            v = next_token[v]
            continue
        if v < 0:
            if sp == 0:
                break
            parent = stack[sp]
            pending += 1
            sp -= 1
            v = next_sibling[parent]
            continue
        visits += 1
        if (
            walk.deadline_ns > 0
            and (visits & 15) == 0
            and monotonic_ns(walk.clock) > walk.deadline_ns
        ):
            status = TIMEOUT
            break
        token = draft[v]
        if 0 <= token < vocab_size and _allowed(out, row_base + stack[sp], token):
            if pending:
                rollback_in(M, S, pending)
                pending = 0
            acc = _accept_token_inlined(A, G.root, tok_offsets, tok_data, M, token)
            if acc < 0:
                status = acc
                break
            if acc == 1:
                entering = True
                continue
        v = next_sibling[v]
    memo_keep_row(S, out, memo_src)
    # Restore the starting position whatever happened (all steps above steps0 undone).
    rollback_in(M, S, meta[M_STEPS] - steps0)
    meta[M_TOP] = top0
    meta[M_STOPPED] = stopped0
    return status
