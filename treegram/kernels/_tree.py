"""Draft-tree kernels: parent pointers, first-child/next-sibling links and tree masks.

Every kernel takes a batch of trees ``[B, N]`` (one request per row) whose inputs the caller
has already validated: parents satisfy ``-1 <= parents[b, i] < i``, links lie in ``[-1, N)``.
"""

from __future__ import annotations

from numba import njit

# Status codes of check_trees (report = [request, node, from_node]).
LINKS_OK = 0
LINKS_REVISIT_CHILD = 1  # node reached a second time through next_token[from_node]
LINKS_REVISIT_SIBLING = 2  # node reached a second time through next_sibling[from_node]
LINKS_ROOT_SIBLING = 3  # the root has a next sibling


@njit(nogil=True, cache=True)
def links_from_parents(parents, next_token, next_sibling):
    """Fill first-child and next-sibling links, children in increasing index order.

    ``parents`` int64 [B, N]; writes every entry of ``next_token`` and ``next_sibling``
    (int64 [B, N]). Visiting nodes from the last one down and pushing each onto its parent's
    child list leaves every list in increasing order, as the engines' GPU kernels do.
    """
    B = parents.shape[0]
    N = parents.shape[1]
    for b in range(B):
        for i in range(N):
            next_token[b, i] = -1
            next_sibling[b, i] = -1
        for i in range(N - 1, -1, -1):
            p = parents[b, i]
            if p >= 0:
                next_sibling[b, i] = next_token[b, p]
                next_token[b, p] = i


@njit(nogil=True, cache=True)
def parents_from_mask(mask, parents):
    """``parents[b, i]`` = the largest ``j < i`` with ``mask[b, i, j]``, else -1.

    ``mask`` bool [B, N, N]; ``parents`` int64 [B, N] (written).
    """
    B = mask.shape[0]
    N = mask.shape[1]
    for b in range(B):
        for i in range(N):
            p = -1
            for j in range(i - 1, -1, -1):
                if mask[b, i, j]:
                    p = j
                    break
            parents[b, i] = p


@njit(nogil=True, cache=True)
def depths_from_parents(parents, depth):
    """``depth[b, i]`` = number of ancestors of node i; parents precede their children."""
    B = parents.shape[0]
    N = parents.shape[1]
    for b in range(B):
        for i in range(N):
            p = parents[b, i]
            depth[b, i] = 0 if p < 0 else depth[b, p] + 1


@njit(nogil=True, cache=True)
def mask_from_parents(parents, mask):
    """Set ``mask[b, i, j]`` iff j is an ancestor-or-self of i; ``mask`` must be all False."""
    B = parents.shape[0]
    N = parents.shape[1]
    for b in range(B):
        for i in range(N):
            p = parents[b, i]
            if p >= 0:
                for j in range(p + 1):
                    mask[b, i, j] = mask[b, p, j]
            mask[b, i, i] = True


LINKS_RANGE = 4  # a link is outside [-1, N)
LINKS_ROOT_RANGE = 5  # a root is outside [0, N)
LINKS_TOKEN = 6  # a draft token is outside [0, vocab_size) (report = [request, node, -1])


@njit(nogil=True, cache=True, inline="always")
def _report(report, request, node, from_node, code):
    """Write ``(request, node, from_node)`` of a problem into ``report``; returns ``code``."""
    report[0] = request
    report[1] = node
    report[2] = from_node
    return code


@njit(nogil=True, cache=True)
def check_trees(next_token, next_sibling, roots, seen, stack, report):
    """Validate draft trees for a traversal in one pass.

    ``next_token``/``next_sibling`` int64 [T, N] (T = 1 for a tree shared by all
    requests); ``roots`` int64 [R], tree ``k`` of request ``k`` (or tree 0 when shared).
    Checks every link is in ``[-1, N)``, every root in ``[0, N)``, the root has no
    sibling, and no node is reached twice from its root. ``report`` int64 [3] receives
    ``(request, node, from_node)`` of the first problem. Returns a ``LINKS_*`` code.
    """
    T = next_token.shape[0]
    N = next_token.shape[1]
    for b in range(T):
        for i in range(N):
            for a in (next_token[b, i], next_sibling[b, i]):
                if a < -1 or a >= N:
                    return _report(report, b, a, i, LINKS_RANGE)
    for k in range(roots.shape[0]):
        b = 0 if T == 1 else k
        root = roots[k]
        if T == 1 and k > 0 and root == roots[k - 1]:
            continue  # the shared tree from the same root again: checked just now
        if root < 0 or root >= N:
            return _report(report, k, root, -1, LINKS_ROOT_RANGE)
        if next_sibling[b, root] != -1:
            return _report(report, k, next_sibling[b, root], root, LINKS_ROOT_SIBLING)
        for i in range(N):
            seen[i] = False
        seen[root] = True
        stack[0] = root
        top = 1
        while top > 0:
            top -= 1
            u = stack[top]
            c = next_token[b, u]
            if c >= 0:
                if seen[c]:
                    return _report(report, k, c, u, LINKS_REVISIT_CHILD)
                seen[c] = True
                stack[top] = c
                top += 1
            if u != root:
                s = next_sibling[b, u]
                if s >= 0:
                    if seen[s]:
                        return _report(report, k, s, u, LINKS_REVISIT_SIBLING)
                    seen[s] = True
                    stack[top] = s
                    top += 1
    return LINKS_OK


@njit(nogil=True, cache=True)
def check_tree_input(next_token, next_sibling, roots, draft, vocab_size, seen, stack, report):
    """:func:`check_trees`, then :func:`check_tokens` on ``draft`` [R, N] (row ``k`` is
    request ``k``): one call for a traversal's whole input. Returns a ``LINKS_*`` code."""
    code = check_trees(next_token, next_sibling, roots, seen, stack, report)
    if code != LINKS_OK:
        return code
    if check_tokens(draft, roots, vocab_size, report):
        report[2] = -1
        return LINKS_TOKEN
    return LINKS_OK


@njit(nogil=True, cache=True)
def check_tree_input_1d(next_token, next_sibling, roots, draft, vocab_size, seen, stack, report):
    """:func:`check_tree_input` of one tree given as int64 [N] arrays (a scalar traversal's
    input) and ``roots`` int64 [1]; the report names tree 0. Saves the caller three
    numpy views per call."""
    n = next_token.shape[0]
    return check_tree_input(
        next_token.reshape(1, n),
        next_sibling.reshape(1, n),
        roots,
        draft.reshape(1, n),
        vocab_size,
        seen,
        stack,
        report,
    )


@njit(nogil=True, cache=True)
def check_tokens(draft, roots, vocab_size, report):
    """Find the first token of ``draft`` int64 [K, N] outside ``[0, vocab_size)``, node
    ``roots[k]`` of row ``k`` excepted (it holds the last verified token, never read).

    Returns 1 and writes ``(row, node)`` to ``report`` int64 [>= 2] if there is one, else 0.
    """
    for k in range(draft.shape[0]):
        root = roots[k]
        for j in range(draft.shape[1]):
            t = draft[k, j]
            if (t < 0 or t >= vocab_size) and j != root:
                report[0] = k
                report[1] = j
                return 1
    return 0


@njit(nogil=True, cache=True)
def walk_target_paths(
    next_token, next_sibling, draft, target, roots, stops, nodes, tokens, lengths, ended
):
    """Walk every tree from its root along the children whose draft token is the target.

    ``next_token``/``next_sibling`` int64 [T, N] (T == 1: shared by every request),
    ``draft`` int64 [B, N], ``target`` int64 [B * N] (-1: no token), ``roots`` int64 [B],
    ``stops`` int64 [B, S] (-1 padded). Writes ``nodes``/``tokens`` int64 [B, N] (the path
    and the target token of each of its nodes), ``lengths`` int64 [B] and ``ended`` bool [B]
    (the path stops at a stop token). Links were validated: every path has at most N nodes.
    """
    n_req = draft.shape[0]
    n = draft.shape[1]
    shared = next_token.shape[0] == 1
    for b in range(n_req):
        t = 0 if shared else b
        node = roots[b]
        k = 0
        stop = False
        while True:
            tok = target[b * n + node]
            if tok < 0:
                break
            nodes[b, k] = node
            tokens[b, k] = tok
            k += 1
            for s in range(stops.shape[1]):
                if stops[b, s] == tok:
                    stop = True
            if stop:
                break
            child = next_token[t, node]
            while child != -1 and draft[b, child] != tok:
                child = next_sibling[t, child]
            if child == -1:
                break
            node = child
        lengths[b] = k
        ended[b] = stop
