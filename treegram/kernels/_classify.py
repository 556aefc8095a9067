"""Per-state token classification against the sorted vocabulary.

For an automaton state ``s`` of rule ``R``, every token is one of

* ACCEPTED: some path reads all of its bytes without leaving the current call of ``R``,
  so it is allowed whatever the parser stack below ``R`` holds;
* REJECTED: every path fails before the end of the token and none of them finishes
  ``R`` on the way;
* UNCERTAIN: otherwise - some path finishes ``R`` with bytes left over whose first byte
  may follow ``R`` (its LL(1) follow set), so the answer depends on the callers and is
  decided at mask time with the full chart. So is every token that would be ACCEPTED
  through a completion of a unique rule (``Rule.unique``): whether the completion counts
  depends on the text read before (``kernels._earley``), which a classification does not
  see. (A token rejected with every completion taken stays REJECTED: a repeat only takes
  paths away.)

The walk runs an Earley chart seeded with the single item ``(s, origin=0)`` where set 0
is an empty *virtual* set that stands for the unknown caller; an item with origin 0 that
reaches a final state therefore means "R has finished". A state may also be classified in
a *context* (``kernels._mask``): the states that call ``R`` in the item's origin set, or a
chain of tail callers and then the states that call the chain's top. Set 1 then holds the
top level, each item ``(c, origin=0)``, every chain state (outermost first) gets a set of
its own whose origin is the set before, and the seed comes last: ``R`` returns into its
callers, and "finished" means a top-level caller's rule finished.

The walk follows the token trie (``kernels._trie``) depth first, so a shared prefix is
scanned once, and a byte that fails decides the whole subtree below it in one step: most
states read only a few of the vocabulary's first bytes, and their walk touches a few hundred
nodes instead of every token.
"""

from __future__ import annotations

import threading

import numpy as np
from numba import njit

from ._clock import monotonic_ns
from ._earley import closure, scan_byte, unpack
from ._layout import OVER_BUDGET, OVERFLOW, PACK_N_CLASSES, REJECT, TIMEOUT, Chart
from ._slices import fill_loop_off, loops_below

_NO_CONTEXT = np.zeros(0, dtype=np.int32)
_NO_TEXT = np.zeros(0, dtype=np.int64)  # the scratch chart's: no text before the seed


def _read_only(array: np.ndarray) -> np.ndarray:
    array.flags.writeable = False
    return array


# No restricted slice: (subtree bits, subtree leads, excluded characters, reach); no byte
# loops: (bytes below each node, off-loop bytes per state, which are known). Read-only as
# the per-vocabulary arrays they stand for, so that numba compiles one specialization.
NO_SKIP = (
    _read_only(np.zeros((0, 4), dtype=np.uint64)),
    _read_only(np.zeros(0, dtype=np.int32)),
    np.zeros(4, dtype=np.uint64),
    0,
)
NO_LOOPS = (
    _read_only(np.zeros((0, 4), dtype=np.uint64)),
    np.zeros((0, 4), dtype=np.uint64),
    np.zeros(0, dtype=np.int8),
)
# A subtree of fewer tokens is walked as usual: the loop check would cost more than it saves.
_LOOP_MIN_TOKENS = 8


class DeadlineExceededError(Exception):
    """A classification walk stopped at its deadline (nothing was classified)."""


@njit(nogil=True, cache=True, _nrt=False)
def _rule_ends(state_final, chart, pos):
    for j in range(chart.set_starts[pos], chart.set_starts[pos + 1]):
        if chart.items_o[j] == 0 and state_final[chart.items_s[j]]:
            return True
    return False


@njit(nogil=True, cache=True, inline="always", _nrt=False)
def _read_whole(acc, unc, n_acc, n_unc, lo, hi, repeats):
    """Tokens ``lo .. hi - 1``, read whole: ACCEPTED, or UNCERTAIN through a unique rule's
    completion. Returns the new counts."""
    out, n = (unc, n_unc) if repeats else (acc, n_acc)
    for p in range(lo, hi):
        out[n] = p
        n += 1
    return (n_acc, n) if repeats else (n, n_unc)


@njit(nogil=True, cache=True, _nrt=False)
def _unique_ends(state_final, chart, pos):
    """Whether a unique rule completes in set ``pos`` (an item in a final state marked 2)."""
    for j in range(chart.set_starts[pos], chart.set_starts[pos + 1]):
        if state_final[chart.items_s[j]] == 2:
            return True
    return False


# Without reference counting (it allocates nothing: its scratch comes in ``walk_arrays``),
# so the Earley scan is inlined into the walk's loop: a counted walk called it out of line,
# and every field of the automaton it read took a count (half of a walk's time).
@njit(nogil=True, cache=True, _nrt=False)
def classify_state(
    ab, state, context, n_top, follow, trie, chart_arrays, out, limits, skip, loops, walk_arrays
):
    """Classify every sorted-vocabulary token for ``state`` by a walk of the token trie.

    Parameters
    ----------
    ab : int32 array
        The packed automaton (``Automaton.packed``: one array to type per call, not ten).
    state : int
        Automaton state to classify.
    context : int32 [n_top + m]
        The context's states: the top level, then the chain from the outermost tail caller
        down to the one that calls the state's rule (empty: an unknown caller).
    n_top : int
        How many of ``context`` form the top level.
    follow : uint8 [256]
        Bytes that may be read right after the state's rule ends (with a context: after one
        of the top level's rules ends).
    trie : tuple
        The token trie (``kernels._trie.build_trie``: ``node_byte``, ``node_depth``,
        ``node_end``, ``node_first``, ``node_tok_lo``, ``node_tok_hi``).
    chart_arrays : tuple
        Scratch chart, the plain tuple of a ``_layout.Chart`` (int32 arrays holding at least
        the context and the seed, and an empty text); ``set_starts`` needs
        ``max_token_len + 4 + len(context)`` entries.
    out : (int32 [n_tokens], int32 [n_tokens])
        ``(acc, unc)``: receive the sorted positions of the ACCEPTED and of the UNCERTAIN
        tokens, in increasing order; every other token is REJECTED.
    limits : (int, int, int64 [2])
        ``(budget, deadline, clock)``: stop with OVER_BUDGET after scanning ``budget`` trie
        nodes (0: no limit), with TIMEOUT once the monotonic clock passes ``deadline``
        (nanoseconds, checked every 1,024 nodes; 0: none); ``clock`` is the clock's
        scratch.
    skip : (uint64 [n, 4], int32 [n], uint64 [4], int)
        ``(skip_bits, skip_leads, excluded, skip_reach)``: a restricted slice the state is
        known to read (``kernels.subtree_text_summary`` and ``subtree_max_leads`` of this
        trie, the lead bytes of the characters left out of the slice, and how many
        characters of its text the state reads; empty arrays: none). A subtree whose tokens
        are all such text of at most ``skip_reach`` characters is ACCEPTED whole, without a
        scan.
    loops : (uint64 [n, 4], uint64 [n_states, 4], int8 [n_states])
        ``(suffix_bits, loop_off, loop_known)``: byte loops met on the way (empty arrays:
        none): the bytes below each node of this trie (``kernels.subtree_suffix_bits``), and
        per automaton state the bytes it does not move back to itself on (filled on first
        need where ``loop_known`` is 0). When a state of the set read so far loops on every
        byte below a node, every token there is read staying in it: the subtree is ACCEPTED
        whole.
    walk_arrays : tuple
        Scratch of the walk (``new_walk_arrays`` for at least as many sets as
        ``set_starts`` has entries and as many byte classes as the automaton), any content.

    Returns
    -------
    (int, int, int)
        (status, n_acc, n_unc): status 0, OVERFLOW if the scratch chart is too small
        (retry with larger arrays), OVER_BUDGET or TIMEOUT.
    """
    A = unpack(ab)
    byte_class = A.byte_class
    n_classes = A.n_classes
    trans = A.trans
    state_final = A.state_final
    node_byte, node_depth, node_end, node_first, node_tok_lo, node_tok_hi = trie
    chart = Chart(*chart_arrays)
    items_s, items_o, set_starts, _ = chart
    unique = A.unique != 0
    acc, unc = out
    budget, deadline, clock = limits
    skip_bits, skip_leads, excluded, skip_reach = skip
    suffix_bits, loop_off, loop_known = loops
    # set 0 is the virtual caller set (empty); the context's levels follow (the top level
    # in set 1, then one chain state per set), then set `base` with the seed item.
    set_starts[0] = 0
    set_starts[1] = 0
    base = 1
    n = 0
    for i in range(context.shape[0]):
        if i == 0 or i >= n_top:  # a new level starts
            set_starts[base] = n
            base += 1
        items_s[n] = context[i]
        items_o[n] = base - 2
        n += 1
    set_starts[base] = n
    items_s[n] = state
    items_o[n] = base - 1
    n = closure(A, chart, np.int64(base), np.int64(n), n + 1)
    if n < 0:
        return n, 0, 0
    set_starts[base + 1] = n
    # The byte classes some seed item reads: a first byte outside them fails (REJECT, and
    # never UNCERTAIN: nothing has ended before it), so its whole subtree is skipped without
    # a scan. The root has a child per first byte; deeper nodes have few children.
    first, ends, unsure, repeats, parent, seen, built = walk_arrays
    first[:n_classes] = False
    for j in range(set_starts[base], n):
        row = items_s[j] * n_classes
        for c in range(n_classes):
            if trans[row + c] >= 0:
                first[c] = True
    # ends[d]: R can have finished after d bytes. ends[0] stays False: when R can finish
    # before any byte, Earley completion has already put the caller's items in the same set,
    # and their own classification covers every token read after R.
    # unsure[d]: on the path to depth d, R finished after some d' < d bytes and the byte
    # read next may follow R; a token that fails below such a node depends on the callers.
    n_sets = set_starts.shape[0]
    ends[:n_sets] = False
    unsure[:n_sets] = False
    # repeats[d]: a unique rule completed on the path to depth d: a token read through it
    # is UNCERTAIN where it would be ACCEPTED. A completion in the seed's own set was
    # checked on the real chart already, but in a context it stepped every caller, where
    # the chart may have stepped only some: there, it counts too.
    repeats[:n_sets] = False
    repeats[0] = unique and base > 1 and _unique_ends(state_final, chart, np.int64(base))
    # A scan depends on the byte's class only, so siblings of one class share its outcome.
    # parent[d] stamps the set the depth-d nodes are read from (a new stamp each time that
    # set is rebuilt); seen[d * n_classes + c] is +stamp after class c was read from it, and
    # -stamp after it was rejected; built[d] is the class whose set lies at depth d now.
    parent[:n_sets] = 0
    seen[: n_sets * n_classes] = 0
    built[:n_sets] = -1
    stamps = 1
    parent[1] = 1
    n_acc = 0
    n_unc = 0
    n_nodes = node_byte.shape[0]
    skipping = skip_leads.shape[0] > 0
    looping = suffix_bits.shape[0] > 0
    k = np.int64(0)  # not a literal: one specialization of _set_loops_below
    n_scanned = 0
    while k < n_nodes:
        n_scanned += 1
        if n_scanned == budget:
            return OVER_BUDGET, 0, 0
        if deadline > 0 and (n_scanned & 1023) == 0 and monotonic_ns(clock) > deadline:
            return TIMEOUT, 0, 0
        if (
            skipping
            and 0 <= skip_leads[k] <= skip_reach
            and (skip_bits[k, 0] & excluded[0]) == 0
            and (skip_bits[k, 1] & excluded[1]) == 0
            and (skip_bits[k, 2] & excluded[2]) == 0
            and (skip_bits[k, 3] & excluded[3]) == 0
        ):
            for p in range(node_first[k], node_first[node_end[k]]):
                acc[n_acc] = p
                n_acc += 1
            k = node_end[k]
            continue
        d = node_depth[k]
        b = node_byte[k]
        if d == 1 and not first[byte_class[b]]:
            k = node_end[k]
            continue
        u = unsure[d - 1] or (ends[d - 1] and follow[b] != 0)
        c = byte_class[b]
        memo = d * n_classes + c
        if seen[memo] == -parent[d]:
            st = REJECT
        elif seen[memo] == parent[d] and built[d] == c:
            st = 0  # the set at depth d is this class's already: keep it and its subtree memo
        else:
            st = scan_byte(A, chart, base - 1 + d, b)
            if st == OVERFLOW:
                return OVERFLOW, 0, 0
            if st == REJECT:
                seen[memo] = -parent[d]
            else:
                seen[memo] = parent[d]
                built[d] = c
                stamps += 1
                parent[d + 1] = stamps
                ends[d] = _rule_ends(state_final, chart, base + d)
                repeats[d] = repeats[d - 1] or (
                    unique and _unique_ends(state_final, chart, base + d)
                )
        if st == REJECT:
            # The whole subtree fails at this byte, with the same verdict.
            if u:
                for p in range(node_first[k], node_first[node_end[k]]):
                    unc[n_unc] = p
                    n_unc += 1
            k = node_end[k]
            continue
        unsure[d] = u
        if (
            looping
            and node_first[node_end[k]] - node_first[k] >= _LOOP_MIN_TOKENS
            and _set_loops_below(
                suffix_bits, loop_off, loop_known, byte_class, n_classes, trans,
                items_s, set_starts[base + d], set_starts[base + d + 1], k,
            )
        ):  # fmt: skip
            lo, hi = node_first[k], node_first[node_end[k]]
            n_acc, n_unc = _read_whole(acc, unc, n_acc, n_unc, lo, hi, repeats[d])
            k = node_end[k]
            continue
        lo, hi = node_tok_lo[k], node_tok_hi[k]
        n_acc, n_unc = _read_whole(acc, unc, n_acc, n_unc, lo, hi, repeats[d])
        k += 1
    return 0, n_acc, n_unc


@njit(nogil=True, cache=True, _nrt=False)
def _set_loops_below(
    suffix_bits, loop_off, loop_known, byte_class, n_classes, trans, items_s, lo, hi, k
):
    """Whether a state of the set ``items_s[lo:hi]`` moves back to itself on every byte
    below trie node ``k`` (its off-loop bytes filled in on first need)."""
    for j in range(lo, hi):
        x = items_s[j]
        if loop_known[x] == 0:
            fill_loop_off(loop_off, x, byte_class, n_classes, trans)
            loop_known[x] = 1
        if loops_below(suffix_bits, k, loop_off, x):
            return True
    return False


def new_walk_arrays(n_sets: int, n_classes: int) -> tuple:
    """Scratch of ``classify_state`` for a chart of ``n_sets`` sets and an automaton of
    ``n_classes`` byte classes: the seed's first byte classes, then per set whether the rule
    may have ended, whether a token failing there is uncertain, whether a unique rule
    completed, its parent stamp, the classes read from it (by stamp) and the class built
    there."""
    return (
        np.empty(n_classes, dtype=np.bool_),
        np.empty(n_sets, dtype=np.bool_),
        np.empty(n_sets, dtype=np.bool_),
        np.empty(n_sets, dtype=np.bool_),
        np.empty(n_sets, dtype=np.int32),
        np.empty(n_sets * n_classes, dtype=np.int32),
        np.empty(n_sets, dtype=np.int32),
    )


class _Buffers:
    """``classify``'s buffers of one thread, kept from call to call (allocating the token
    arrays and the walk's scratch cost a quick walk about as much as the walk itself): the
    ACCEPTED and UNCERTAIN positions, the chart's items and ``new_walk_arrays``, each grown
    to the largest call's needs. A walk reads none of their content."""

    def __init__(self) -> None:
        self.acc = self.unc = np.empty(0, dtype=np.int32)
        self.items_s = np.empty(1024, dtype=np.int32)
        self.items_o = np.empty(1024, dtype=np.int32)
        self.n_sets = self.n_classes = 0
        self.walk_arrays = new_walk_arrays(0, 0)


_THREAD = threading.local()  # .buffers: this thread's _Buffers (the walks release the GIL)


def _buffers(n_tokens: int, n_sets: int, n_classes: int) -> _Buffers:
    """This thread's buffers, grown for ``n_tokens`` tokens and a walk of ``n_sets`` sets
    over ``n_classes`` byte classes."""
    found = getattr(_THREAD, "buffers", None)
    if found is None:
        found = _THREAD.buffers = _Buffers()
    if found.acc.shape[0] < n_tokens:
        found.acc = np.empty(n_tokens, dtype=np.int32)
        found.unc = np.empty(n_tokens, dtype=np.int32)
    if found.n_sets < n_sets or found.n_classes < n_classes:
        found.n_sets = max(found.n_sets, n_sets)
        found.n_classes = max(found.n_classes, n_classes)
        found.walk_arrays = new_walk_arrays(found.n_sets, found.n_classes)
    return found


def classify(
    packed: np.ndarray,
    state: int,
    follow: np.ndarray,
    trie: tuple,
    n_tokens: int,
    max_len: int,
    budget: int = 0,
    context: np.ndarray = _NO_CONTEXT,
    n_top: int = 0,
    deadline: int = 0,
    skip: tuple = NO_SKIP,
    loops: tuple = NO_LOOPS,
) -> tuple[np.ndarray, np.ndarray] | None:
    """Classify the ``n_tokens`` tokens of ``trie`` for ``state`` of the packed automaton
    ``packed`` (``Automaton.packed``; in ``context``, see ``classify_state``); grows the
    scratch chart as needed. Returns None when the walk would scan more than ``budget``
    trie nodes (0: no limit). ``skip`` is a restricted
    slice the state reads and ``loops`` the byte-loop arrays (see ``classify_state``; with
    either, ``trie`` must be the whole vocabulary's).

    Raises
    ------
    DeadlineExceededError
        The monotonic clock passed ``deadline`` (nanoseconds, 0: none) during the walk.

    Returns
    -------
    accepted : int32 [n_acc]
        Positions (in the trie's token order) of the ACCEPTED tokens, increasing.
    uncertain : int32 [n_unc]
        Positions of the UNCERTAIN tokens, increasing. Every other token is REJECTED.
    """
    clock = np.zeros(2, dtype=np.int64)
    set_starts = np.zeros(int(max_len) + 4 + context.shape[0], dtype=np.int32)
    buffers = _buffers(n_tokens, set_starts.shape[0], int(packed[PACK_N_CLASSES]))
    acc, unc, walk_arrays = buffers.acc, buffers.unc, buffers.walk_arrays
    while True:
        items_s, items_o = buffers.items_s, buffers.items_o
        st, n_acc, n_unc = classify_state(
            packed,
            state,
            context,
            n_top,
            follow,
            trie,
            (items_s, items_o, set_starts, _NO_TEXT),
            (acc, unc),
            (budget, deadline, clock),
            skip,
            loops,
            walk_arrays,
        )
        if st == OVER_BUDGET:
            return None
        if st == TIMEOUT:
            raise DeadlineExceededError
        if st != OVERFLOW:
            return acc[:n_acc].copy(), unc[:n_unc].copy()
        buffers.items_s = np.empty(4 * items_s.shape[0], dtype=np.int32)
        buffers.items_o = np.empty(4 * items_o.shape[0], dtype=np.int32)
