"""After a batch traversal: which rows it filled, for engines with other row conventions.

A traversal (``_ops.traverse_op``) writes every node's row: the mask of each node it
reaches and does not stop at, zero for the others. Engines that walk trees themselves
leave the rows they do not fill as they allocated them (SGLang's ``traverse_tree``: all
-1), and remember the last token their walk accepted. :func:`batch_unfilled_rows` walks
each tree again over the finished rows, without the grammar: a child is reached when its
parent was filled and the parent's row allows its token (exactly the traversal's rule),
and it is filled unless its token is one of the matcher's stop tokens (accepting one
stops the matcher; a matcher made with ``terminate_without_stop_token`` refuses them).
Nothing here allocates: scratch comes from the caller.

:func:`chain_trees` and :func:`chain_rejections` serve engines that draft linear chains
(vLLM): the chains as trees for the traversal, and the engine's rows after a rejected
draft.
"""

from __future__ import annotations

from numba import njit

from ._batch import _matcher
from ._layout import M_NO_STOP, M_STOPPED


@njit(nogil=True, cache=True, _nrt=False)
def batch_unfilled_rows(
    mtab, mslots, tree, out, jobs, vocab_size, value, last_nodes, scratch, start, stop
):
    """For each request ``i = requests[k]``, ``k`` in ``[start, stop)``: write ``value``
    into every word of the rows ``i * N + j`` the traversal did not fill (nothing
    when ``value`` is 0, what the traversal left there), and the last node it accepted,
    in depth-first order, into ``last_nodes[k]`` (-1 when none; ``last_nodes`` may be
    shorter than ``stop`` when not wanted: it is then not written).

    ``tree`` is the plain tuple of a ``_layout.Tree``: ``next_token``/``next_sibling``
    int64 [T, N] (T = 1: shared), ``draft`` int64 [B, N]; ``jobs`` = ``(requests, roots)``,
    int64 [K] each; ``scratch`` = ``(filled, stack)``: bool [>= N] and int64 [>= N + 1].
    The matchers must be where the traversal left them (where they started).
    """
    next_token, next_sibling, draft = tree
    requests, roots = jobs
    filled, stack = scratch
    n_nodes = draft.shape[1]
    shared = next_token.shape[0] == 1
    want_last = last_nodes.shape[0] >= stop
    n_words = out.shape[1]
    for k in range(start, stop):
        i = requests[k]
        t = 0 if shared else i
        state, _ = _matcher(mtab, mslots[i])
        meta = state.meta
        stops = state.stop_ids
        base = i * n_nodes
        for j in range(n_nodes):
            filled[j] = False
        last = -1
        if meta[M_STOPPED] == 0:
            root = roots[k]
            filled[root] = True
            sp = 0
            stack[0] = root
            v = next_token[t, root]
            while True:
                if v < 0:
                    if sp == 0:
                        break
                    v = next_sibling[t, stack[sp]]
                    sp -= 1
                    continue
                p = stack[sp]
                x = draft[i, v]
                if filled[p] and 0 <= x < vocab_size and (out[base + p, x >> 5] >> (x & 31)) & 1:
                    is_stop = False
                    for q in range(stops.shape[0]):
                        if stops[q] == x:
                            is_stop = True
                    if is_stop and meta[M_NO_STOP]:
                        v = next_sibling[t, v]  # such a matcher refuses stop tokens
                        continue
                    last = v
                    if not is_stop:  # a stop token's children are never reached
                        filled[v] = True
                        sp += 1
                        stack[sp] = v
                        v = next_token[t, v]
                        continue
                v = next_sibling[t, v]
        if want_last:
            last_nodes[k] = last
        if value != 0:
            for j in range(n_nodes):
                if not filled[j]:
                    for w in range(n_words):
                        out[base + j, w] = value


@njit(nogil=True, cache=True, _nrt=False)
def chain_trees(tokens, vocab_size, next_token, draft):
    """Linear drafts as trees for a batch traversal.

    ``tokens`` int64 [B, K]: request ``i``'s drafts, ``-1`` padded. Writes ``next_token``
    and ``draft`` int64 [B, K + 1]: node 0 is the root (token 0, never read), node ``j``
    holds ``tokens[i, j - 1]``; each node links to the next while the tokens are in
    ``[0, vocab_size)`` (the chain ends before the first that is not: padding, or an id
    no grammar accepts). Such tokens are stored as 0 (never reached).
    """
    K = tokens.shape[1]
    for i in range(tokens.shape[0]):
        draft[i, 0] = 0
        open_chain = True
        for j in range(K):
            t = tokens[i, j]
            ok = 0 <= t < vocab_size
            draft[i, j + 1] = t if ok else 0
            open_chain = open_chain and ok
            next_token[i, j] = j + 1 if open_chain else -1
        next_token[i, K] = -1


@njit(nogil=True, cache=True, _nrt=False)
def chain_rejections(tokens, positions, lens, last_nodes, out, stride, failed_at):
    """vLLM's rows after a draft its grammar does not take, once the chains are walked
    (``unfilled_rows=-1``).

    Request ``k`` sits at ``positions[k]`` (rows ``p * stride ..``) with ``lens[k]``
    drafts in ``tokens[p]``; its walk accepted ``c = max(last_nodes[k], 0)`` of them. When
    a draft follows that is not padding (``-1``: vLLM's loop fails there, a rejected token
    or one after termination), rows ``c + 1 .. lens[k]`` (the bonus row included) become
    copies of row ``c`` and ``failed_at[k] = c``; else ``failed_at[k] = -1``.
    """
    n_words = out.shape[1]
    for k in range(positions.shape[0]):
        p = positions[k]
        c = last_nodes[k]
        if c < 0:
            c = 0
        failed_at[k] = -1
        if c < lens[k] and tokens[p, c] != -1:
            failed_at[k] = c
            base = p * stride
            for j in range(c + 1, lens[k] + 1):
                for w in range(n_words):
                    out[base + j, w] = out[base + c, w]
