"""Grammar-forced draft nodes: extend draft trees with the continuation the grammar decides.

At a matcher position where every continuation starts with the same bytes (the
jump-forward string), those bytes cost the model nothing to draft: they are cut into
tokens by greedy longest match over the token trie (each token lies inside the forced
bytes, so the grammar accepts it) and appended as a chain of draft nodes. Where no byte is
forced but the mask holds a single token (typically the stop token at the end of a
document), that token is appended too, and the walk goes on from there.

:func:`extend_op` walks one request's draft tree depth-first exactly like
``kernels._ops.traverse_op`` (a child is visited when the grammar accepts its token,
rolled back afterwards) and extends every *effective leaf*: a reached node none of whose
children the grammar accepts (a real leaf, a node whose drafted children are all invalid,
or the root of an empty tree). Nodes are appended after the input nodes, each after its
parent, so parent pointers stay smaller than child indices and a new chain is the last
child of its leaf (siblings stay in increasing index order). With ``with_masks`` it also
fills the mask row of every reached node, forced ones included.

Like the other matcher kernels these run without reference counting, never allocate
(scratch comes from the caller), and leave the matcher exactly where it started whatever
the status.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ._batch import _grammar, _matcher
from ._earley import can_end, waits_on_token
from ._jump import forced_bytes, mark_bytes
from ._layout import HIST_FULL, M_NO_STOP, M_STEPS, M_STOPPED, M_TOP, TokenTrie, Tree
from ._mask import fill_row
from ._ops import _allowed, accept_in, rollback_in


@njit(nogil=True, cache=True, inline="always", _nrt=False)
def longest_token(fb, p, n, trie, sv_ids):
    """The longest token whose bytes are a prefix of ``fb[p:n]``: ``(token id, length)``,
    or ``(-1, 0)``. Walks the preorder token trie (``TokenTrie``, ``kernels._trie``): the
    children of node ``k`` are ``k + 1`` and on through ``node_end``; bytes are
    ascending."""
    node_byte = trie.node_byte
    node_end = trie.node_end
    best = -1
    best_len = 0
    c = 0
    hi = node_byte.shape[0]
    depth = 0
    while p + depth < n:
        b = fb[p + depth]
        found = -1
        while c < hi:
            nb = node_byte[c]
            if nb == b:
                found = c
                break
            if nb > b:
                break
            c = node_end[c]
        if found < 0:
            break
        depth += 1
        if trie.node_tok_lo[found] < trie.node_tok_hi[found]:
            best = sv_ids[trie.node_tok_lo[found]]
            best_len = depth
        hi = node_end[found]
        c = found + 1
    return best, best_len


@njit(nogil=True, cache=True, inline="always", _nrt=False)
def _single_token(out, r, vocab_size):
    """The only token set in row ``r``, -1 if none, -2 if more than one."""
    only = -1
    for w in range(out.shape[1]):
        x = out[r, w]
        if x == 0:
            continue
        for bit in range(32):
            if (x >> bit) & 1:
                t = w * 32 + bit
                if t >= vocab_size:
                    break
                if only >= 0:
                    return -2
                only = t
    return only


@njit(nogil=True, cache=True, inline="always", _nrt=False)
def _append(draft_out, nt_out, ns_out, par_out, j, parent, token):
    """Make node ``j`` (holding ``token``) the last child of ``parent``."""
    draft_out[j] = token
    par_out[j] = parent
    nt_out[j] = -1
    ns_out[j] = -1
    c = nt_out[parent]
    if c < 0:
        nt_out[parent] = j
        return
    while ns_out[c] >= 0:
        c = ns_out[c]
    ns_out[c] = j


@njit(nogil=True, cache=True, inline="always", _nrt=False)
def _is_stop(stop_ids, token):
    for q in range(stop_ids.shape[0]):  # noqa: SIM110 - numba: no generators without NRT
        if stop_ids[q] == token:
            return True
    return False


@njit(nogil=True, cache=True, _nrt=False)
def copy_tree(nt_in, ns_in, draft_in, root, draft_out, nt_out, ns_out, par_out, stack):
    """Copy the tree of ``root`` (validated links) into the output arrays and derive its
    parents; nodes outside it keep their token and become isolated (links and parent -1),
    so the output links are exactly those of the output parents."""
    n_in = draft_in.shape[0]
    for j in range(draft_out.shape[0]):
        draft_out[j] = draft_in[j] if j < n_in else 0
        nt_out[j] = -1
        ns_out[j] = -1
        par_out[j] = -1
    stack[0] = root
    top = 1
    while top > 0:
        top -= 1
        u = stack[top]
        nt_out[u] = nt_in[u]
        c = nt_in[u]
        while c >= 0:
            par_out[c] = u
            stack[top] = c
            top += 1
            nxt = ns_in[c]
            ns_out[c] = nxt
            c = nxt


@njit(nogil=True, cache=True, _nrt=False)
def extend_op(G, M, S, trie, tree_in, root, tree_out, masks, budget, per_leaf, vocab_size, scratch):
    """Extend one request's draft tree with forced nodes (see the module docstring).

    ``G``, ``M``, ``S`` are the grammar and the matcher (``_layout`` bundles), ``trie`` a
    ``TokenTrie``. ``tree_in`` (a ``Tree`` of [N] arrays) is the validated input tree;
    ``tree_out`` = ``(draft, next_token, next_sibling, parent)`` [M] (M >= N + budget)
    receives the extended tree, forced nodes at ``N, N + 1, ...``. ``masks`` =
    ``(out, row_base, with_masks, scratch_row)``: with ``with_masks`` the rows
    ``out[row_base : row_base + M]`` receive every node's mask (zero when not reached);
    otherwise ``out`` is not touched and ``scratch_row`` [1, W] serves the rare
    single-token check that needs a mask. ``budget`` bounds the forced nodes of the tree,
    ``per_leaf`` those of one leaf. ``scratch`` = ``(stack, had_child, fb, seen)``:
    int32 [M + 1] twice, the forced bytes (uint8, longer than the longest token) and bool
    [256].

    Returns
    -------
    int
        The number of forced nodes appended (>= 0), or a negative status (``kernels._ops``);
        the matcher ends where it started either way.
    """
    A = G.automaton
    root_rule = G.root
    chart = M.chart
    meta = M.meta
    hist = M.hist
    stop_ids = M.stop_ids
    nt_in, ns_in, draft_in = tree_in
    draft_out, nt_out, ns_out, par_out = tree_out
    out, row_base, with_masks, scratch_row = masks
    stack, had_child, fb, seen = scratch
    max_len = trie.max_len
    n_in = draft_in.shape[0]
    copy_tree(nt_in, ns_in, draft_in, root, draft_out, nt_out, ns_out, par_out, stack)
    if with_masks:
        for j in range(draft_out.shape[0]):
            for w in range(out.shape[1]):
                out[row_base + j, w] = 0
    if meta[M_STOPPED]:
        return 0  # a stopped matcher allows nothing: no node is reached
    steps0 = meta[M_STEPS]
    top0 = meta[M_TOP]
    status = 0
    if with_masks:
        status = fill_row(G, M, S, out, row_base + root)
        if status < 0:
            return status
    added = 0
    sp = 0
    stack[0] = root
    had_child[0] = 0
    v = nt_in[root]
    while True:
        if v < 0:
            u = stack[sp]
            if had_child[sp] == 0 and added < budget and not meta[M_STOPPED]:
                # ---- extend the effective leaf u (the matcher is at u's position)
                cap = min(per_leaf, budget - added)
                prev = u
                taken = 0
                done = False
                while taken < cap and not done and not meta[M_STOPPED]:
                    # cap - taken tokens need at most this many bytes; a round looks at no
                    # more than the scratch holds
                    need = (cap - taken) * max_len
                    limit = min(fb.shape[0], need)
                    base = meta[M_TOP]
                    by_id = np.bool_(True)  # not a literal: jump_forward's specialization
                    n = forced_bytes(A, root_rule, chart, meta[M_TOP], fb, limit, seen, by_id)
                    if n < 0:
                        status = n
                        break
                    tok = -1
                    if n == 0:
                        # No forced byte: is one token the only choice?
                        top = meta[M_TOP]
                        ends = can_end(A, chart, top, root_rule)
                        n_stop = 0 if (not ends or meta[M_NO_STOP]) else stop_ids.shape[0]
                        byte_class = mark_bytes(A, chart, top, seen)
                        n_any = 0
                        n_single = 0
                        for b in range(256):
                            if seen[byte_class[b]]:
                                n_any += 1
                                if trie.single[b]:
                                    n_single += 1
                        if n_single + n_stop >= 2:
                            break  # at least two single tokens allowed: a real choice
                        # a token-id element waiting here allows tokens no byte shows:
                        # only the mask tells
                        waits = A.tokens[0] > 0 and waits_on_token(A, chart, top)
                        if n_any == 0 and n_stop == 0 and not waits:
                            break  # nothing allowed
                        if n_any == 0 and n_stop == 1 and not waits:
                            tok = stop_ids[0]
                        elif with_masks:
                            tok = _single_token(out, row_base + prev, vocab_size)
                            if tok < 0:
                                break
                        else:
                            # not a literal 0: one specialization of fill_row
                            status = fill_row(G, M, S, scratch_row, np.int64(0))
                            if status < 0:
                                break
                            tok = _single_token(scratch_row, 0, vocab_size)
                            if tok < 0:
                                break
                        n = 1  # one token to append, below
                    # Cut off by the scratch (not by a branch): leave the last max_len bytes
                    # to the next round, so no token is shortened by the cut.
                    cut = n >= limit and limit < need
                    p = 0
                    while p < n and taken < cap:
                        if cut and p > n - max_len:
                            break
                        ln = 0
                        if tok < 0:
                            t, ln = longest_token(fb, p, n, trie, G.vocab.sv_ids)
                        else:
                            t = tok
                            ln = n
                        if t < 0:
                            done = True
                            break
                        if tok < 0 and not with_masks and not _is_stop(stop_ids, t):
                            # The sets above the round's first top are the chart after each
                            # forced byte (forced_bytes built them and nothing has written
                            # above since, as no mask is filled): commit the token's last
                            # set instead of scanning its bytes again.
                            if meta[M_STEPS] >= hist.shape[0]:
                                status = HIST_FULL
                                break
                            hist[meta[M_STEPS]] = meta[M_TOP]
                            meta[M_STEPS] += 1
                            meta[M_TOP] = base + p + ln
                            acc = 1
                        else:
                            acc = accept_in(G, M, t)
                        if acc < 0:
                            status = acc
                            break
                        if acc == 0:
                            done = True
                            break
                        j = n_in + added + taken
                        _append(draft_out, nt_out, ns_out, par_out, j, prev, t)
                        taken += 1
                        prev = j
                        p += ln
                        if with_masks and not meta[M_STOPPED]:
                            status = fill_row(G, M, S, out, row_base + j)
                            if status < 0:
                                break
                    if status < 0:
                        break
                    if p < n and not (cut and p > n - max_len):
                        done = True  # stopped inside the forced bytes
                if status < 0:
                    break
                rollback_in(M, S, taken)
                added += taken
            if sp == 0:
                break
            rollback_in(M, S, 1)
            sp -= 1
            v = ns_in[u]
            continue
        token = draft_in[v]
        p = stack[sp]
        ok = 0
        if 0 <= token < vocab_size and (not with_masks or _allowed(out, row_base + p, token)):
            ok = accept_in(G, M, token)
            if ok < 0:
                status = ok
                break
        if ok == 1:
            had_child[sp] = 1
            if with_masks and not meta[M_STOPPED]:
                status = fill_row(G, M, S, out, row_base + v)
                if status < 0:
                    break
            sp += 1
            stack[sp] = v
            had_child[sp] = 0
            v = nt_in[v]
            continue
        v = ns_in[v]
    # Restore the starting position whatever happened (all steps above steps0 undone).
    rollback_in(M, S, meta[M_STEPS] - steps0)
    meta[M_TOP] = top0
    meta[M_STOPPED] = 0
    if status < 0:
        return status
    return added


@njit(nogil=True, cache=True, _nrt=False)
def batch_extend(
    gtab, mtab, gslots, mslots, trie, tree, outputs, jobs, vocab_size, scratch, start, stop
):
    """:func:`extend_op` for requests ``start .. stop - 1``.

    ``trie`` is the plain tuple of a ``TokenTrie``, ``tree`` that of a ``Tree``:
    ``next_token``/``next_sibling`` [T, N] (T = 1: one tree shared by every request),
    ``draft`` [B, N]. ``outputs`` = ``(trees_out, out, with_masks)``: ``trees_out`` int64
    [4, B, M] receives the extended draft tokens, next-token and next-sibling links and
    parents; request ``i`` writes rows ``i * M .. i * M + M - 1`` of ``out`` (with masks).
    ``jobs`` = ``(roots, budgets, per_leaf, result)``: request ``i``'s root, its budget of
    forced nodes, those of one leaf (for all), and ``result[i]`` (forced nodes appended, or
    a negative status). ``scratch`` = ``(walk, fb, seen, scratch_row)``: ``walk`` int32
    [2, M + 1] (stack, had_child), the forced bytes, bool [256] and the single-choice mask
    row int32 [1, W], this call's own.

    Returns
    -------
    int
        How many requests of the range ended with a negative status (0: all done).
    """
    next_token, next_sibling, draft = tree
    trees_out, out, with_masks = outputs
    roots, budgets, per_leaf, result = jobs
    walk, fb, seen, scratch_row = scratch
    t_trie = TokenTrie(*trie)
    shared = next_token.shape[0] == 1
    m_nodes = trees_out.shape[2]
    pending = 0
    for i in range(start, stop):
        t = 0 if shared else i
        state, mscratch = _matcher(mtab, mslots[i])
        r = extend_op(
            _grammar(gtab, gslots[i]),
            state,
            mscratch,
            t_trie,
            Tree(next_token[t], next_sibling[t], draft[i]),
            roots[i],
            (trees_out[0, i], trees_out[1, i], trees_out[2, i], trees_out[3, i]),
            (out, i * m_nodes, with_masks, scratch_row),
            budgets[i],
            per_leaf,
            vocab_size,
            (walk[0], walk[1], fb, seen),
        )
        result[i] = r
        if r < 0:
            pending += 1
    return pending
