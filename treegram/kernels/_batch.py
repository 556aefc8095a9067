"""Batch kernels: one call runs an operation for a range of requests.

Each request ``i`` names a grammar slot ``gslots[i]`` and a matcher slot ``mslots[i]``:
rows of the registry tables (``treegram.kernels._registry``) of (address, length) pairs,

* grammar row (``_layout.GRAMMAR_ROW``): packed automaton, state_class, cls_meta [n, 5],
  acc_pool, unc_pool, sv_ids, sv_offsets, sv_data, sv_by_length, tok_offsets, tok_data;
* matcher row (``_layout.MATCHER_ROW``): items_s, items_o, set_starts, text, meta, hist, stop_ids,
  bufs [2, cap], memo_key [2, cap], memo_meta, memo_row, cand,

which :func:`_grammar` / :func:`_matcher` turn back into arrays without reference counts
(``kernels/_views.py``), as the bundles of ``_layout`` (``Grammar``; ``MatcherState`` and
``Scratch``). The scalar entry points here (``*_slot``) find the matcher's own arrays the
same way: fewer arguments for numba to type per call. A worker thread runs one
contiguous range ``[start, stop)`` and writes only the rows and status entries of its
requests; statuses are those of ``kernels._layout``. Nothing here allocates: scratch
comes from the caller.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ._earley import unpack
from ._jump import row_allows_all
from ._layout import (
    M_STEPS,
    M_STOPPED,
    PACK_ROOT_RULE,
    Chart,
    Classes,
    Grammar,
    MatcherState,
    Scratch,
    Tree,
    Vocab,
    Walk,
)
from ._layout import N_GRAMMAR_ARRAYS as _G
from ._layout import N_MATCHER_ARRAYS as _M
from ._mask import fill_row
from ._ops import _accept_token_inlined, accept_in, rollback_in, traverse_op
from ._tree import LINKS_OK, check_tree_input
from ._views import (
    view_bool,
    view_i32,
    view_i32_2d,
    view_i32_ro,
    view_i64,
    view_i64_2d,
    view_i64_ro,
    view_u8,
    view_u8_ro,
)


@njit(nogil=True, cache=True, inline="always", _nrt=False)
def _grammar(gtab, g):
    """The ``Grammar`` bundle of grammar slot ``g`` (its packed automaton unpacked)."""
    r = gtab[g]
    ab = view_i32(r[0], r[_G], 0)
    return Grammar(
        unpack(ab),
        ab[PACK_ROOT_RULE],
        Classes(
            view_i32(r[1], r[_G + 1], 0),
            view_i64_2d(r[2], r[_G + 2], 5),
            view_i32(r[3], r[_G + 3], 0),
            view_i32(r[4], r[_G + 4], 0),
        ),
        Vocab(
            view_i32_ro(r[5], r[_G + 5], 0),  # the sorted vocabulary: read-only, as in
            view_i64_ro(r[6], r[_G + 6], 0),  # the scalar calls
            view_u8_ro(r[7], r[_G + 7], 0),
            view_i32_ro(r[8], r[_G + 8], 0),
            view_i64(r[9], r[_G + 9], 0),
            view_u8(r[10], r[_G + 10], 0),
        ),
    )


@njit(nogil=True, cache=True, inline="always", _nrt=False)
def _matcher(mtab, m):
    """The ``MatcherState`` and ``Scratch`` bundles of matcher slot ``m``."""
    r = mtab[m]
    state = MatcherState(
        Chart(
            view_i32(r[0], r[_M], 0),
            view_i32(r[1], r[_M + 1], 0),
            view_i32(r[2], r[_M + 2], 0),
            view_i64(r[3], r[_M + 3], 0),
        ),
        view_i64(r[4], r[_M + 4], 0),
        view_i32(r[5], r[_M + 5], 0),
        view_i32(r[6], r[_M + 6], 0),
    )
    scratch = Scratch(
        view_i32_2d(r[7], 2, r[_M + 7]),
        view_i32_2d(r[8], 2, r[_M + 8]),
        view_i64(r[9], r[_M + 9], 0),
        view_i32(r[10], r[_M + 10], 0),
        view_i32(r[11], r[_M + 11], 0),
    )
    return state, scratch


@njit(nogil=True, cache=True, inline="always", _nrt=False)
def _matcher_own(mtab, m):
    """What only the scalar entry points read from matcher slot ``m``: the vocabulary it
    holds (a ``Vocab``) and its traversal scratch (stack, clock, root, then the tree
    check's seen flags, stack and report)."""
    r = mtab[m]
    vocab = Vocab(
        view_i32_ro(r[12], r[_M + 12], 0),  # read-only, as in the grammar row's views
        view_i64_ro(r[13], r[_M + 13], 0),
        view_u8_ro(r[14], r[_M + 14], 0),
        view_i32_ro(r[15], r[_M + 15], 0),
        view_i64(r[16], r[_M + 16], 0),
        view_u8(r[17], r[_M + 17], 0),
    )
    walk = (
        view_i32(r[18], r[_M + 18], 0),
        view_i64(r[19], r[_M + 19], 0),
        view_i64(r[20], r[_M + 20], 0),
        view_bool(r[21], r[_M + 21], 0),
        view_i64(r[22], r[_M + 22], 0),
        view_i64(r[23], r[_M + 23], 0),
    )
    return vocab, walk


@njit(nogil=True, cache=True, _nrt=False)
def accept_token_slot(ab, mtab, m, token):
    """``accept_token_op`` of the matcher in slot ``m`` (its own row of ``mtab``: its
    state and its token table) on a packed automaton: the scalar ``accept_token`` with 4
    arguments instead of 10 (numba charges each array argument). Only the matcher that
    owns the slot may call it, while it holds itself: its row changes only through that
    matcher, so the row (and the table, which a registration in another thread may
    replace by a copy) needs no lock."""
    state, _ = _matcher(mtab, m)
    vocab, _ = _matcher_own(mtab, m)
    return _accept_token_inlined(
        unpack(ab), ab[PACK_ROOT_RULE], vocab.tok_offsets, vocab.tok_data, state, token
    )


@njit(nogil=True, cache=True, _nrt=False)
def fill_slot(ab, state_class, cls_meta, acc_pool, unc_pool, mtab, m, out, r):
    """``fill_row`` of the matcher in slot ``m`` into row ``r`` of ``out`` (the scalar
    mask); the grammar's token classes come flat (``Classes`` order: they are
    re-allocated as they grow, by any matcher of the grammar). As
    :func:`accept_token_slot`, only the matcher that owns the slot may call it, while it
    holds itself.

    Returns ``fill_row``'s status, except that a written row gives 1 when it leaves some
    token of the vocabulary out (``need_apply``) and 0 when it allows every one: the
    caller needs no second look at the row."""
    state, scratch = _matcher(mtab, m)
    vocab, _ = _matcher_own(mtab, m)
    G = Grammar(
        unpack(ab), ab[PACK_ROOT_RULE], Classes(state_class, cls_meta, acc_pool, unc_pool), vocab
    )
    st = fill_row(G, state, scratch, out, r)
    if st != 0:
        return st
    return 0 if row_allows_all(out[r], vocab.tok_offsets.shape[0] - 1) else 1


@njit(nogil=True, cache=True, _nrt=False)
def traverse_slot(
    ab, state_class, cls_meta, acc_pool, unc_pool, mtab, m, tree, out, root, vocab_size, deadline_ns
):
    """A scalar traversal in one call: ``kernels._tree.check_tree_input`` of one tree,
    then, when the input is valid, ``traverse_op`` of the matcher in slot ``m``.

    ``tree`` is the plain tuple of a ``Tree`` (C-contiguous int64 [N] links and tokens);
    the classes come as in :func:`fill_slot`; the scratch of the walk and of the check
    (large enough, its root entry holding ``root``) is the matcher's, in its row. As
    :func:`accept_token_slot`, only the matcher that owns the slot may call it, while it
    holds itself.

    Returns
    -------
    int
        A ``LINKS_*`` code (> 0, nothing written) for invalid input, else the status of
        ``traverse_op``.
    """
    next_token, next_sibling, draft = tree
    vocab, own = _matcher_own(mtab, m)
    stack, clock, roots, seen, check_stack, report = own
    n = draft.shape[0]
    code = check_tree_input(
        view_i64_2d(next_token.ctypes.data, 1, n),
        view_i64_2d(next_sibling.ctypes.data, 1, n),
        roots,
        view_i64_2d(draft.ctypes.data, 1, n),
        vocab_size,
        seen,
        check_stack,
        report,
    )
    if code != LINKS_OK:
        return code
    state, scratch = _matcher(mtab, m)
    G = Grammar(
        unpack(ab), ab[PACK_ROOT_RULE], Classes(state_class, cls_meta, acc_pool, unc_pool), vocab
    )
    return traverse_op(
        G,
        state,
        scratch,
        Tree(next_token, next_sibling, draft),
        out,
        np.int64(0),  # as the batch's row bases: one specialization, not a literal's
        root,
        vocab_size,
        Walk(stack, clock, deadline_ns),
    )


@njit(nogil=True, cache=True, _nrt=False)
def batch_fill(gtab, mtab, gslots, mslots, rows, out, status, start, stop):
    """Fill ``out[rows[i]]`` with the mask of request ``i``."""
    for i in range(start, stop):
        state, scratch = _matcher(mtab, mslots[i])
        status[i] = fill_row(_grammar(gtab, gslots[i]), state, scratch, out, rows[i])


@njit(nogil=True, cache=True, _nrt=False)
def batch_accept(gtab, mtab, gslots, mslots, tokens, status, start, stop):
    """Accept ``tokens[i]`` in request ``i``; status 1 accepted, 0 rejected, < 0 retry."""
    for i in range(start, stop):
        state, _ = _matcher(mtab, mslots[i])
        status[i] = accept_in(_grammar(gtab, gslots[i]), state, tokens[i])


@njit(nogil=True, cache=True, _nrt=False)
def batch_steps(mtab, mslots, out):
    """Steps taken (``out[i, 0]``) and stopped flag (``out[i, 1]``) of each request."""
    for i in range(mslots.shape[0]):
        meta = _matcher(mtab, mslots[i])[0].meta
        out[i, 0] = meta[M_STEPS]
        out[i, 1] = meta[M_STOPPED]


@njit(nogil=True, cache=True, _nrt=False)
def batch_rollback(mtab, mslots, counts):
    """Roll request ``i`` back by ``counts[i]`` steps (counts checked by the caller)."""
    for i in range(mslots.shape[0]):
        state, scratch = _matcher(mtab, mslots[i])
        rollback_in(state, scratch, counts[i])


@njit(nogil=True, cache=True, _nrt=False)
def batch_traverse(
    gtab, mtab, gslots, mslots, tree, out, jobs, vocab_size, walk, check, checked, start, stop
):
    """Traverse the draft tree of each request in ``requests[start:stop]``.

    ``tree`` is the plain tuple of a ``Tree`` whose arrays are [T, N] (T = 1: one tree
    shared by all requests), ``draft`` [B, N]; request ``i`` writes rows
    ``i * N .. i * N + N - 1`` of ``out``. ``jobs`` is ``(requests, roots, status)``:
    ``roots[k]`` is the root of ``requests[k]``, ``status[k]`` receives its status.
    ``walk`` is the plain tuple of a ``Walk``: ``stack`` int32 [N + 1] and ``clock`` int64
    [2] are this call's own scratch.

    With ``checked`` (a call that runs every request, ``requests`` being ``0..B-1``), the
    whole input is first validated by ``kernels._tree.check_tree_input`` with ``check``
    (its ``seen``, ``stack`` and ``report`` scratch, for at least N nodes): one kernel call
    instead of two for a batch that runs inline. Nothing is written when it fails.

    Returns
    -------
    int
        The ``LINKS_*`` code of invalid input (> 0, nothing written), else minus the
        number of requests whose status is not 0 (0: every walk finished).
    """
    next_token, next_sibling, draft = tree
    requests, roots, status = jobs
    if checked:
        seen, check_stack, report = check
        code = check_tree_input(
            next_token, next_sibling, roots, draft, vocab_size, seen, check_stack, report
        )
        if code != LINKS_OK:
            return code
    if start >= stop:
        return LINKS_OK
    shared = next_token.shape[0] == 1
    n_nodes = draft.shape[1]
    w = Walk(*walk)
    unfinished = 0
    # requests of one grammar in a row share its bundle (unpacked once)
    g = gslots[requests[start]]
    G = _grammar(gtab, g)
    for k in range(start, stop):
        i = requests[k]
        t = 0 if shared else i
        if gslots[i] != g:
            g = gslots[i]
            G = _grammar(gtab, g)
        state, scratch = _matcher(mtab, mslots[i])
        st = traverse_op(
            G,
            state,
            scratch,
            Tree(next_token[t], next_sibling[t], draft[i]),
            out,
            i * n_nodes,
            roots[k],
            vocab_size,
            w,
        )
        status[k] = st
        if st != 0:
            unfinished += 1
    return -unfinished


@njit(nogil=True, cache=True, _nrt=False)
def split_keys(keys, tags, gslots, mslots):
    """Split batch keys ``(grammar slot << 32) | matcher slot`` (int64 [B]) into
    ``gslots``/``mslots`` (int64 [B]) and compare the grammars' tags (vocabulary sizes).

    Returns the first request whose grammar's tag differs from request 0's, or -1.
    """
    bad = -1
    for i in range(keys.shape[0]):
        g = keys[i] >> 32
        gslots[i] = g
        mslots[i] = keys[i] & 0xFFFFFFFF
        if bad < 0 and tags[g] != tags[gslots[0]]:
            bad = i
    return bad
