"""Counted rules (``Rule.max_string_chars``): one automaton per rule, each state labelled
with the characters it allows.

A counted rule reads the content of one JSON string and the matcher bounds the decoded
characters it holds (``kernels._earley``). The bound is checked on the rule's own items,
so the rule may only call rules that read one character (the matcher checks the bound
before it predicts one, and again when it returns): :func:`inline_calls` splices every
other callee's body into the rule's NFA before it is determinized. :func:`state_chars`
then gives each state of the rule's DFA the most characters an item entering it may have
read: the bound less the fewest characters still needed to reach the rule's end from
there, counted with the same byte machine the kernels count with
(``kernels._json_chars``). An item within that limit can always end within the bound, so
masks never lead into a dead end.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

import numpy as np
from numba import njit

from ..errors import GrammarError
from ..kernels import CHAR_BOUNDARY as BOUNDARY
from ..kernels import CHAR_N_PENDING as N_PENDING
from ..kernels import char_step, layout

__all__ = ["inline_calls", "one_character", "state_chars"]

# Bytes where the counting machine's step may change: each byte range of an edge is cut
# there, so that one byte stands for each piece (see ``kernels._json_chars``).
_CUTS = sorted(
    {0, 256, 0x80, 0xC0, 0xE0, 0xF0, 0xF8, ord("\\"), ord("\\") + 1, ord("u"), ord("u") + 1}
    | {ord(c) for c in "DdEe89ABabCc"}
    | {ord(c) + 1 for c in "Dd9Bb"}
    | {ord(":"), ord("C"), ord("c")}
)
_STEP = char_step.py_func


def inline_calls(
    nfa,
    accept: int,
    rid: int,
    splice: Callable[[int, int, int], None],
    only_ends: Callable,
    keeps: Callable[[int], bool],
    name: str,
    limit: int,
) -> None:
    """Replace the calls in counted rule ``rid``'s NFA that its items could not count
    through by the callee's body.

    A call in tail position jumps to one copy of the callee, spliced from a state of its
    own to the rule's end (the state rules of a string automaton call each other so):
    inside the callee, items would count from the wrong origin. Any other call stays when
    ``keeps(callee)`` (the callee reads exactly one character, :func:`one_character`: an
    encoded character class, shared with the rest of the grammar), else it gets a copy of
    the callee between its two states. Calls of the rule itself in tail position stay, for
    the builder to turn into loops. ``splice(callee, p, end)`` adds the callee's body from
    ``p`` to ``end``; ``only_ends(nfa, q, accept)`` tells a tail position.

    Raises
    ------
    GrammarError
        The rule calls itself other than in tail position, or grows past ``limit`` NFA
        states (a recursion through other rules).
    """
    starts: dict[int, int] = {}
    p = 0
    while p < len(nfa.eps):
        kept = []
        while nfa.ref_edges[p]:  # a splice from p may add calls at p: until none is left
            edges, nfa.ref_edges[p] = nfa.ref_edges[p], []
            for callee, q in edges:
                tail = only_ends(nfa, q, accept)
                if callee == rid:
                    if not tail:
                        raise GrammarError(
                            f"rule {name!r} has max_string_chars and calls itself "
                            "(a counted rule reads one string: no recursion)"
                        )
                    kept.append((callee, q))
                elif tail:
                    start = starts.get(callee)
                    if start is None:
                        start = starts[callee] = nfa.new_state()
                        splice(callee, start, accept)
                    nfa.eps[p].append(start)
                elif keeps(callee):
                    kept.append((callee, q))
                else:
                    splice(callee, p, q)
            if len(nfa.eps) > limit:
                raise GrammarError(
                    f"rule {name!r} has max_string_chars and grows past {limit} states "
                    "with the rules it calls inlined (a counted rule must be regular)"
                )
        nfa.ref_edges[p] = kept
        p += 1


def one_character(part: tuple) -> bool:
    """Whether the DFA ``part`` (the builder's rule kernel's) calls nothing and reads
    exactly one character of JSON string content on every way to an end."""
    final, byte_ptr, lo, hi, to = (x.tolist() for x in part[:5])
    if part[5][-1] > 0 or not any(final):
        return False
    label = {0: (BOUNDARY, 0)}  # state -> (pending, characters read)
    queue = deque([0])
    while queue:
        s = queue.popleft()
        pending, count = label[s]
        if final[s] and (pending, count) != (BOUNDARY, 1):
            return False
        for e in range(byte_ptr[s], byte_ptr[s + 1]):
            for b in _pieces(lo[e], hi[e]):
                x = _STEP(pending, b)
                if x < 0 or count + (x & 1) > 1:
                    return False
                got = (x >> 1, count + (x & 1))
                old = label.get(to[e])
                if old is None:
                    label[to[e]] = got
                    queue.append(to[e])
                elif old != got:
                    return False
    return True


def state_chars(part: tuple, bound: int, name: str) -> np.ndarray:
    """The most characters an item entering each state of counted rule ``name``'s DFA
    (``part``, as the builder's rule kernel returns it) may have read: ``bound`` less the
    fewest characters from the state to the rule's end (-1 where it cannot end); then, for
    each state, the least of those ahead of it (:func:`_least_ahead`): int32 [2 * states].
    A call (of a rule that reads one character) counts one.

    Raises
    ------
    GrammarError
        The rule's text is no JSON string content: a byte no content reads, a state
        reached both between characters and inside one, a call inside a character, or an
        end inside a character.
    """
    final, byte_ptr, lo, hi, to, ref_ptr, _, ref_to = part[:8]
    code, need, src, dst = _count_walk(
        final, byte_ptr, lo, hi, to, ref_ptr, ref_to, _step_table(), _CUT_ARRAY, BOUNDARY
    )
    if code == _NOT_CONTENT:
        raise GrammarError(
            f"rule {name!r} has max_string_chars but its text is not the content of a JSON string"
        )
    if code == _ENDS_INSIDE:
        raise GrammarError(f"rule {name!r} has max_string_chars but may end inside a character")
    assert code == 0, "the counting machine left its pending values"
    n = final.shape[0]
    out = np.full(2 * n, -1, dtype=np.int32)
    ok = (need >= 0) & (need <= bound)
    out[:n][ok] = np.minimum(bound - need[ok], layout.NOT_COUNTED - 1)
    out[n:] = _least_ahead(src, dst, out[:n])
    return out


def _step_table() -> np.ndarray:
    """``char_step`` for every pending value and byte, int64 [N_PENDING, 256] (computed on
    first use, once per process)."""
    if not _TABLE:
        rows = [[_STEP(p, b) for b in range(256)] for p in range(N_PENDING)]
        _TABLE.append(np.array(rows, dtype=np.int64))
    return _TABLE[0]


_TABLE: list[np.ndarray] = []
_CUT_ARRAY = np.array(_CUTS, dtype=np.int64)
# :func:`_count_walk`'s outcomes other than 0
_NOT_CONTENT, _ENDS_INSIDE, _PAST_PENDING = 1, 2, 3


@njit(nogil=True, cache=True)
def _count_walk(final, byte_ptr, lo, hi, to, ref_ptr, ref_to, table, cuts, boundary):
    """Label the DFA's states with the counting machine's pending value (breadth-first from
    state 0, one byte per piece of each edge's range, as :func:`_pieces` cuts it; a call
    reads one character), then the fewest counted steps from each state to a final one.

    Returns ``(code, need, src, dst)``: ``code`` 0, or ``_NOT_CONTENT`` / ``_ENDS_INSIDE``
    / ``_PAST_PENDING`` (the others then meaningless); ``need`` per state (-1: no end
    reached); ``src``/``dst`` the labelled steps, one per piece, in walk order. A Python
    walk of the same (thousands of edges of a 2,000-character string) took ~15 ms."""
    n = final.shape[0]
    n_pending = table.shape[0]
    pending = np.full(n, -1, dtype=np.int64)
    need = np.full(n, -1, dtype=np.int64)
    cap = lo.shape[0] * (cuts.shape[0] + 1) + ref_to.shape[0]
    src = np.empty(cap, dtype=np.int64)
    dst = np.empty(cap, dtype=np.int64)
    counted = np.empty(cap, dtype=np.int64)
    m = 0
    queue = np.empty(n, dtype=np.int64)
    queue[0] = 0
    pending[0] = boundary
    head, tail = 0, 1
    while head < tail:
        s = queue[head]
        head += 1
        p = pending[s]
        for e in range(byte_ptr[s], byte_ptr[s + 1]):
            t, a, b = to[e], lo[e], hi[e]
            for j in range(-1, cuts.shape[0]):  # lo itself, then each cut inside lo..hi
                if j == -1:
                    byte = a
                else:
                    byte = cuts[j]
                    if byte <= a or byte > b:
                        continue
                x = table[p, byte]
                if x < 0:
                    return _NOT_CONTENT, need, src[:m], dst[:m]
                q = pending[t]
                if q == -1:
                    if x >> 1 >= n_pending:
                        return _PAST_PENDING, need, src[:m], dst[:m]
                    pending[t] = x >> 1
                    queue[tail] = t
                    tail += 1
                elif q != x >> 1:
                    return _NOT_CONTENT, need, src[:m], dst[:m]
                src[m], dst[m], counted[m] = s, t, x & 1
                m += 1
        for e in range(ref_ptr[s], ref_ptr[s + 1]):  # a character's rule: one character
            t = ref_to[e]
            if p != boundary:
                return _NOT_CONTENT, need, src[:m], dst[:m]
            q = pending[t]
            if q == -1:
                pending[t] = boundary
                queue[tail] = t
                tail += 1
            elif q != boundary:
                return _NOT_CONTENT, need, src[:m], dst[:m]
            src[m], dst[m], counted[m] = s, t, 1
            m += 1
    for s in range(n):
        if final[s] and pending[s] != boundary:
            return _ENDS_INSIDE, need, src[:m], dst[:m]
    # the steps by target, then a 0-1 breadth-first search backwards from the finals: a
    # deque in one array, pushed at either end from its middle (at most one push per
    # step and per final: no end passes the array's)
    back_ptr = np.zeros(n + 1, dtype=np.int64)
    for k in range(m):
        back_ptr[dst[k] + 1] += 1
    for s in range(n):
        back_ptr[s + 1] += back_ptr[s]
    fill = back_ptr[:n].copy()
    back = np.empty(m, dtype=np.int64)
    for k in range(m):
        back[fill[dst[k]]] = k
        fill[dst[k]] += 1
    middle = m + n + 1
    node = np.empty(2 * middle, dtype=np.int64)
    dist = np.empty(2 * middle, dtype=np.int64)
    first = last = middle
    for s in range(n):
        if final[s]:
            node[last], dist[last] = s, 0
            last += 1
    while first < last:
        t, d = node[first], dist[first]
        first += 1
        if need[t] != -1 and need[t] <= d:
            continue
        need[t] = d
        for i in range(back_ptr[t], back_ptr[t + 1]):
            k = back[i]
            s, w = src[k], counted[k]
            if need[s] == -1 or need[s] > d + w:
                if w:
                    node[last], dist[last] = s, d + 1
                    last += 1
                else:
                    first -= 1
                    node[first], dist[first] = s, d
    return 0, need, src[:m], dst[:m]


def _least_ahead(src: np.ndarray, dst: np.ndarray, limits: np.ndarray) -> np.ndarray:
    """Per state, the least limit of a live state reachable from it (itself included)
    along the steps ``src -> dst``: a token read from the state passes no bound when what
    the item holds plus the token's bytes stays within it. -1 where no live state is
    reachable."""
    big = layout.NOT_COUNTED
    ahead = np.where(limits >= 0, limits, big).astype(np.int64)
    while src.shape[0]:  # to a fixed point: at most the longest path without a cycle
        before = ahead.copy()
        np.minimum.at(ahead, src, ahead[dst])
        if np.array_equal(before, ahead):
            break
    return np.where(ahead == big, -1, ahead).astype(np.int32)


def _pieces(lo: int, hi: int) -> list[int]:
    """One byte of each piece of ``lo..hi`` cut at ``_CUTS``."""
    out = [lo]
    for c in _CUTS:
        if lo < c <= hi:
            out.append(c)
    return out
