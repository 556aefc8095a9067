"""Rules with equal automata become one rule.

A frontend may write the same rule many times under different names: the JSON Schema
converter writes an object's member list once per place the object is reached (a
recursive ``$ref`` through ten ``oneOf`` branches gave 130 ``members_N`` rules, each
calling its own copies). The chart then holds one item per copy at the same text
position, and the mask store classifies each copy's state apart (a hundred full trie
walks for one mask, seconds). Two rules whose DFAs are equal array by array, and whose
calls go to rules that are equal in turn, read the same language the same way, so every
call of one can call the other instead.

Equality of callees is recursive (a member list calls itself), so the rules are split
Moore-style: first by their own arrays without the callee ids, then by the blocks of
their callees, until no block splits. That fixpoint is the coarsest partition closed
under calls; a grammar that does not reach it within :data:`MAX_ROUNDS` rounds keeps
every rule.
"""

from __future__ import annotations

import numpy as np

__all__ = ["MAX_ROUNDS", "merge_equal_rules"]

# Rounds of splitting before giving up (each is one pass over the rules' calls; a chain
# of n rules equal but for its end needs n rounds).
MAX_ROUNDS = 64

_MIX = np.uint64(0x9E3779B97F4A7C15)
_OWN = (0, 1, 2, 3, 4, 5, 7)  # a DFA's arrays but ``ref_rule`` (see the parameters below)


_WEIGHTS = np.zeros(0, dtype=np.uint64)


def _weights(n: int) -> np.ndarray:
    """The first ``n`` of the seeded random words that weigh call positions: what
    ``np.random.default_rng(0x5EED).integers(1, 2**63, n, dtype=np.uint64)`` draws (a
    longer draw begins with a shorter one). Drawn once and grown by doubling: a
    generator's construction cost ~30 us of every grammar's build."""
    global _WEIGHTS
    table = _WEIGHTS  # read once: another thread may replace it meanwhile
    if table.shape[0] < n:
        size = max(n, 2 * table.shape[0], 256)
        table = np.random.default_rng(0x5EED).integers(1, 2**63, size, dtype=np.uint64)
        table.flags.writeable = False  # shared by every build
        _WEIGHTS = table
    return table[:n]


def merge_equal_rules(
    parts: list[tuple], live: list[int], fixed: set[int], root: int
) -> np.ndarray | None:
    """Point every call at one representative per class of equal rules, in place.

    Parameters
    ----------
    parts : list of tuple
        Per rule its DFA ``(final, byte_ptr, lo, hi, to, ref_ptr, ref_rule, ref_to)``,
        states numbered from the rule's own start; replaced by new tuples where calls
        are redirected.
    live : list of int
        The rules built (reached from the root); the others are never called.
    fixed : set of int
        Rules that keep their identity (the matcher reads them by rule: captures,
        temperatures, token budgets, lookaheads); each is a class of its own.
    root : int
        The root rule; it represents its class.

    Returns
    -------
    numpy.ndarray or None
        int32 [rules]: per rule the rule its calls now go to (itself for most), or None
        when no call was redirected. The rules no longer called keep their arrays.
    """
    # Only rules of equal sizes can be equal: most grammars have no two, and stop here.
    by_size: dict[tuple[int, int, int], list[int]] = {}
    for r in live:
        if r not in fixed:
            p = parts[r]
            by_size.setdefault((p[0].shape[0], p[2].shape[0], p[6].shape[0]), []).append(r)
    n = len(parts)
    block = np.arange(n, dtype=np.int64)  # a rule alone keeps its own id (< n)
    seen: dict[object, int] = {}
    for group in by_size.values():
        if len(group) > 1:
            for r in group:
                # everything but the callee ids: finals, byte edges, call sites and returns
                key = tuple(parts[r][i].tobytes() for i in _OWN)
                block[r] = n + seen.setdefault(key, len(seen))
    shared = np.bincount(block, minlength=n + len(seen))
    alike = np.array([r for r in live if shared[block[r]] > 1], dtype=np.int64)
    if alike.shape[0] == 0:
        return None
    if root in alike:  # the root first: it represents its block
        alike = np.concatenate([[root], alike[alike != root]])
    own = block[alike]  # the blocks by own arrays, exact
    callees = [parts[r][6] for r in alike.tolist()]
    ptr = np.zeros(alike.shape[0] + 1, dtype=np.int64)
    np.cumsum([c.shape[0] for c in callees], out=ptr[1:])
    flat = np.concatenate(callees).astype(np.int64)
    # a random odd weight per call position, so that a rule's hash depends on the order
    # of its callees' blocks (the hash only proposes blocks: they are checked below)
    position = np.arange(ptr[-1]) - np.repeat(ptr[:-1], np.diff(ptr))
    weight = _weights(int(ptr[-1]) + 1)[position] | np.uint64(1)
    n_blocks = len(np.unique(own))
    for _ in range(MAX_ROUNDS):  # split the blocks by their callees' blocks
        cum = np.zeros(ptr[-1] + 1, dtype=np.uint64)
        np.cumsum(block[flat].astype(np.uint64) * weight, out=cum[1:])
        key = (block[alike].astype(np.uint64) * _MIX) ^ (cum[ptr[1:]] - cum[ptr[:-1]])
        uniq, first, ids = np.unique(key, return_index=True, return_inverse=True)
        block[alike] = n + ids
        if uniq.shape[0] == n_blocks:
            break
        n_blocks = uniq.shape[0]
    else:
        return None
    if n_blocks == alike.shape[0]:
        return None
    # The hash may have joined rules that differ: keep the blocks only if each member has
    # its representative's own arrays and calls the same blocks in the same order.
    rep = first[ids]  # per rule of ``alike`` its representative's index there
    if not np.array_equal(own, own[rep]):
        return None
    shift = np.repeat(ptr[rep] - ptr[:-1], np.diff(ptr))
    if not np.array_equal(block[flat], block[flat[np.arange(ptr[-1]) + shift]]):
        return None
    to_rep = np.arange(n, dtype=np.int32)
    to_rep[alike] = alike[rep]
    for r in live:
        p = parts[r]
        if p[6].shape[0]:
            parts[r] = (*p[:6], to_rep[p[6]], p[7])
    return to_rep
