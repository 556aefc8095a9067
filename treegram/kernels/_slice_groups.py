"""``slice_dfa_walk`` over the token trie with its bytes grouped as the walk tells them apart.

The slice DFA walk (``kernels._slice_walk``) visits every node of the 128k vocabulary's
trie that a slice token passes (about 280k: 3-4 ms) when the state accepts most of the
slice: a long bounded string (a class per position, so every mask of it walks anew), a
union of unanchored patterns, a free-form key. But a walk only tells bytes apart by what
the states it may meet do with them: two byte classes whose transitions agree in every
such state step every pair set alike. Grouping the bytes so (``slice_byte_groups``: the
states a walk from the state may reach, then their transition columns compared) and
merging trie nodes whose paths read the same groups (``group_trie``) leaves a trie of a few
thousand nodes for a bounded string of any character (tens of thousands for letters that
patterns name), whose walk (``grouped_slice_walk``) gives every node its pair set in one
pass; a token's class is its grouped node's. The grouped trie depends only on the
vocabulary and the byte groups (numbered by first byte, so equal across grammars): the
vocabulary keeps the few it meets (``compiler._class_cache``).

The outcome is ``slice_dfa_walk``'s without its byte-loop shortcut: the same pair set at
every node, so the same accepted and undecided tokens, in the same (increasing) order.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ._clock import monotonic_ns
from ._layout import NOT_COUNTED, TIMEOUT, AutomatonArrays
from ._slice_walk import (
    _DEAD,
    _ENDS,
    _NO_CHARS,
    _NO_TOKENS,
    _UNDECIDED,
    _UNDECIDED_SET,
    _UNKNOWN,
    seed_set,
    step_set,
)

# grouped_slice_walk: the walk met more pair sets than its table holds (a set in a scratch
# row is only valid along one trie path, and this walk keeps every node's set): walk the
# whole trie instead
SETS_FULL = -7
# slice_byte_groups: the states found tell more classes apart than the caller takes
TOO_MANY_GROUPS = -2
_NO_GROUP = -1  # slice_byte_groups: a byte that no slice token reads
_OTHER = -2  # a class that holds no slice byte
_TEXT = -1  # a class that holds one, not grouped yet


@njit(nogil=True, cache=True, _nrt=False, inline="always")
def _distinct_text_keys(keys, class_group, nc):
    """The number of distinct ``keys[c]`` over the classes ``c`` marked ``_TEXT`` (sorted
    into ``keys[nc:2 * nc]``: an insertion sort of a few dozen)."""
    m = 0
    for c in range(nc):
        if class_group[c] == _TEXT:
            k = keys[c]
            j = nc + m
            while j > nc and keys[j - 1] > k:
                keys[j] = keys[j - 1]
                j -= 1
            keys[j] = k
            m += 1
    distinct = 0
    for j in range(nc, nc + m):
        if j == nc or keys[j] != keys[j - 1]:
            distinct += 1
    return distinct


@njit(nogil=True, cache=True, _nrt=False)
def slice_byte_groups(
    arrays,
    state,
    slice_bytes,
    follow,
    followed,
    seen,
    queue,
    keys,
    class_group,
    group,
    rep_class,
    rep_follow,
    max_work,
    max_groups,
):
    """Group the slice bytes as a slice DFA walk from ``state`` tells them apart.

    Two byte classes of the automaton step every pair set alike when every state the walk
    may meet moves alike on them; those states are found by the transitions on classes
    that hold a slice byte, the rules' starts that calls enter and the calls' return
    states (a superset of the walk's, so the grouping may be finer than needed, never
    coarser). Where a slice byte may follow the rule (``followed``), the walk also asks
    whether a byte is one of ``follow``: that splits a group. The grouping serves
    every state found, as the states any of them may meet are among them (the later
    positions of a string).

    Parameters
    ----------
    arrays : tuple
        The automaton's arrays (as ``slice_dfa_walk`` takes them).
    state : int
        The state a walk starts from.
    slice_bytes : bool [256]
        The bytes of slice text: no slice token reads another.
    follow : uint8 [256]
        The slice bytes that may follow the state's rule (``slice_dfa_walk``'s).
    followed : int
        ``slice_dfa_walk``'s (0: no slice byte may follow the rule).
    seen : int8 [n_states]
        All zero; receives 1 for every state found.
    queue : int32 [n_states]
        Receives the states found, first.
    keys : uint64 [2 * n_classes + 2]
        Scratch.
    class_group : int32 [n_classes]
        Scratch.
    group : int32 [256]
        Receives each byte's group (``_NO_GROUP`` for a byte outside the slice).
    rep_class, rep_follow : int32 [256], uint8 [256]
        Receive per group a class of its bytes and whether they may follow the rule.
    max_work : int
        Give up when the states found times the classes pass this (a walk of the whole
        trie is then the shorter one).
    max_groups : int
        Give up as soon as the states found so far tell more classes apart than this (more
        groups are of no use to the caller; the key states beside 108 optional properties
        spent 2 to 3 ms finding thousands of states that told 60 apart).

    Returns
    -------
    (int, int)
        (the number of groups, or -1 when given up on the work, ``TOO_MANY_GROUPS`` on the
        groups; the number of states found).
    """
    A = AutomatonArrays(*arrays, _NO_TOKENS, 0, _NO_CHARS, NOT_COUNTED)
    nc = A.n_classes
    trans = A.trans
    for c in range(nc):
        class_group[c] = _OTHER
    for b in range(256):
        if slice_bytes[b]:
            class_group[A.byte_class[b]] = _TEXT
    # the states a walk from `state` may meet (breadth first), with a hash of each text
    # class's column over them (in queue order) for the comparison below
    for c in range(nc):
        keys[c] = np.uint64(1469598103934665603)
    queue[0] = state
    seen[state] = 1
    n = 1
    h = 0
    check = 32
    while h < n:
        if n * nc > max_work:
            break
        if h == check:
            # distinct hashes are distinct columns, over these states and any more: a lower
            # bound on the class groups, so on the byte groups
            check *= 2
            if _distinct_text_keys(keys, class_group, nc) > max_groups:
                return TOO_MANY_GROUPS, n
        x = queue[h]
        h += 1
        row = x * nc
        for c in range(nc):
            if class_group[c] == _TEXT:
                t = trans[row + c]
                keys[c] = (keys[c] ^ np.uint64(t + 2)) * np.uint64(0x100000001B3)
                if t >= 0 and seen[t] == 0:
                    seen[t] = 1
                    queue[n] = t
                    n += 1
        for e in range(A.ref_ptr[x], A.ref_ptr[x + 1]):
            for t in (A.rule_start[A.ref_rule[e]], A.ref_target[e]):
                if seen[t] == 0:
                    seen[t] = 1
                    queue[n] = t
                    n += 1
    if h < n:
        return -1, n
    # exact comparison with the first class of equal hash
    n_class_groups = 0
    for c in range(nc):
        if class_group[c] != _TEXT:
            continue
        for r in range(c):
            if class_group[r] >= 0 and keys[r] == keys[c]:
                same = True
                for q in range(n):
                    row = queue[q] * nc
                    if trans[row + c] != trans[row + r]:
                        same = False
                        break
                if same:
                    class_group[c] = class_group[r]
                    break
        if class_group[c] == _TEXT:
            class_group[c] = n_class_groups
            n_class_groups += 1
    # byte groups: (class group, whether the byte may follow the rule), numbered by first
    # byte (keys reused: group + 1 per pair)
    for g in range(2 * n_class_groups):
        keys[g] = np.uint64(0)
    n_groups = 0
    for b in range(256):
        if not slice_bytes[b]:
            group[b] = _NO_GROUP
            continue
        f = 1 if followed > 0 and follow[b] else 0
        key = 2 * class_group[A.byte_class[b]] + f
        if keys[key] == 0:
            rep_class[n_groups] = A.byte_class[b]
            rep_follow[n_groups] = f
            n_groups += 1
            keys[key] = np.uint64(n_groups)
        group[b] = np.int64(keys[key]) - 1
    return n_groups, n


@njit(nogil=True, cache=True, _nrt=False)
def group_trie(trie, group, n_groups, out, scratch, token_node, stack, last):
    """The trie of the slice tokens' byte-group strings (``group`` as
    ``slice_byte_groups`` gives it), in preorder: node 0 the root, a node's subtree the
    nodes from it up to its end.

    Parameters
    ----------
    trie : tuple
        The vocabulary's token trie (``kernels._trie``), in sorted-token order.
    group : int32 [256]
        Each byte's group; a node whose byte has none (-1) is left out with its subtree.
    n_groups : int
        The number of groups.
    out : int32 [4, n_nodes + 1]
        Receives per grouped node its parent, group, depth and subtree end.
    scratch : int32 [5, n_nodes + 1]
        Scratch: the nodes as first met (group, depth, first child, next sibling), then
        their preorder numbers.
    token_node : int32 [n_tokens]
        Receives each token's grouped node (-1 for a token left out: not a slice token).
    stack : int32 [2, max_token_len + 2]
        Scratch.
    last : int32 [2, (max_token_len + 1) * n_groups]
        Scratch: per depth and group, the parent of the last grouped node found and that
        node (the siblings of a trie node mostly share a grouped parent and a group).

    Returns
    -------
    int
        The number of grouped nodes.
    """
    node_byte, node_depth, node_end, _, node_tok_lo, node_tok_hi = trie
    g_of, d_of, first_child, next_sibling, number = (
        scratch[0],
        scratch[1],
        scratch[2],
        scratch[3],
        scratch[4],
    )
    for t in range(token_node.shape[0]):
        token_node[t] = -1
    for q in range(last.shape[1]):
        last[0, q] = -1
    g_of[0] = -1
    d_of[0] = 0
    first_child[0] = -1
    stack[0, 0] = 0
    n = 1
    n_nodes = node_byte.shape[0]
    k = 0
    while k < n_nodes:
        d = node_depth[k]
        g = group[node_byte[k]]
        if g < 0:
            k = node_end[k]
            continue
        p = stack[0, d - 1]
        slot = d * n_groups + g
        if last[0, slot] == p:
            c = last[1, slot]
        else:
            c = first_child[p]
            while c >= 0 and g_of[c] != g:
                c = next_sibling[c]
            if c < 0:
                c = n
                n += 1
                g_of[c] = g
                d_of[c] = d
                first_child[c] = -1
                next_sibling[c] = first_child[p]
                first_child[p] = c
            last[0, slot] = p
            last[1, slot] = c
        stack[0, d] = c
        for t in range(node_tok_lo[k], node_tok_hi[k]):
            token_node[t] = c
        k += 1
    # number the nodes in preorder (depth first over the child lists)
    parent, node_group, depth, end = out[0], out[1], out[2], out[3]
    number[0] = 0
    parent[0] = -1
    node_group[0] = -1
    depth[0] = 0
    at = 1
    top = 0
    stack[0, 0] = 0  # the nodes on the path (as first met)
    stack[1, 0] = first_child[0]  # the next child of each
    while top >= 0:
        c = stack[1, top]
        if c < 0:
            end[number[stack[0, top]]] = at
            top -= 1
            continue
        stack[1, top] = next_sibling[c]
        number[c] = at
        parent[at] = number[stack[0, top]]
        node_group[at] = g_of[c]
        depth[at] = d_of[c]
        at += 1
        top += 1
        stack[0, top] = c
        stack[1, top] = first_child[c]
    for t in range(token_node.shape[0]):
        if token_node[t] >= 0:
            token_node[t] = number[token_node[t]]
    return n


@njit(nogil=True, cache=True, _nrt=False)
def grouped_slice_walk(
    arrays,
    followed,
    state,
    grouped,
    rep_class,
    rep_follow,
    leads,
    loops,
    acc,
    unk,
    max_unk,
    sets,
    frames,
    node_set,
    clock,
    deadline,
):
    """``slice_dfa_walk`` of ``state`` over a grouped trie (``group_trie``).

    Parameters
    ----------
    arrays, followed, leads, acc, unk, max_unk, frames, clock, deadline
        As ``slice_dfa_walk`` takes them.
    state : int
        The state to classify.
    grouped : tuple
        The grouped trie: (parent, group, depth, end, token_node) as ``group_trie`` gives
        them.
    rep_class, rep_follow : int32 [n_groups], uint8 [n_groups]
        A class of each group's bytes and whether they may follow the rule
        (``slice_byte_groups``).
    loops : tuple
        ``slice_dfa_walk``'s; only the per-state loop bytes are filled in (the pair sets
        note them), no subtree is read whole.
    sets : tuple
        ``slice_dfa_walk``'s scratch (``new_sets``); only the table's rows and the first
        scratch row are used.
    node_set : int32 [n_grouped_nodes]
        Scratch: each grouped node's pair set, or _DEAD / _UNDECIDED_SET (the walk, in
        preorder, skips the subtrees of those as ``slice_dfa_walk`` does).

    Returns
    -------
    (int, int, int)
        ``slice_dfa_walk``'s, or (SETS_FULL, 0, 0) when the table of pair sets is full or
        a slice token has no grouped node.
    """
    A = AutomatonArrays(*arrays, _NO_TOKENS, 0, _NO_CHARS, NOT_COUNTED)
    n_classes = A.n_classes
    rows, nxt, slots, _ = sets
    parent, node_group, depth, end, token_node = grouped
    _, loop_off, loop_known = loops
    scratch = slots.shape[0] // 2
    node_set[0], n_sets = seed_set(
        A, rows, frames, slots, nxt, state, followed, loop_off, loop_known
    )
    if node_set[0] == _UNDECIDED_SET:
        return _UNDECIDED, 0, 0
    if node_set[0] >= scratch:
        return SETS_FULL, 0, 0
    n_nodes = parent.shape[0]
    for c in range(1, n_nodes):
        node_set[c] = _DEAD  # (what a skipped subtree keeps)
    c = 1
    steps = 0
    while c < n_nodes:
        steps += 1
        if deadline > 0 and (steps & 4095) == 0 and monotonic_ns(clock) > deadline:
            return TIMEOUT, 0, 0
        i = node_set[parent[c]]  # (a live set: the subtrees of the others are skipped)
        g = node_group[c]
        if followed > 0 and depth[c] > 1 and rows[i, _ENDS] and rep_follow[g]:
            # the rule may have ended before this byte and a caller read it: the chart decides
            for q in range(c, end[c]):
                node_set[q] = _UNDECIDED_SET
            c = end[c]
            continue
        cl = rep_class[g]
        j = nxt[i * n_classes + cl]
        if j == _UNKNOWN:
            j, n_sets = step_set(
                A, rows, frames, slots, nxt, i, cl, scratch, n_sets, loop_off, loop_known
            )
            if j >= scratch:
                return SETS_FULL, 0, 0
            nxt[i * n_classes + cl] = j
        if j == _DEAD:  # nothing reads this byte: the subtree's slice tokens fail
            c = end[c]
            continue
        if j < 0:  # left to the chart
            for q in range(c, end[c]):
                node_set[q] = _UNDECIDED_SET
            c = end[c]
            continue
        node_set[c] = j
        c += 1
    # each slice token takes its grouped node's outcome, in increasing order
    n_acc = 0
    n_unk = 0
    for p in range(leads.shape[0]):
        if leads[p] >= 0:
            c = token_node[p]
            if c < 0:
                return SETS_FULL, 0, 0
            s = node_set[c]
            if s >= 0:
                acc[n_acc] = p
                n_acc += 1
            elif s == _UNDECIDED_SET:
                unk[n_unk] = p
                n_unk += 1
    if n_unk > max_unk:
        return _UNDECIDED, 0, 0
    return 0, n_acc, n_unk
