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
    fewest characters from the state to the rule's end (-1 where it cannot end). A call
    (of a rule that reads one character) counts one.

    Raises
    ------
    GrammarError
        The rule's text is no JSON string content: a byte no content reads, a state
        reached both between characters and inside one, a call inside a character, or an
        end inside a character.
    """
    final, byte_ptr, lo, hi, to, ref_ptr, _, ref_to = (x.tolist() for x in part[:8])
    n = len(final)
    pending = [-1] * n
    edges: list[list[tuple[int, int]]] = [[] for _ in range(n)]  # (target, counted)
    pending[0] = BOUNDARY
    queue = deque([0])

    def reach(s: int, t: int, x: int) -> None:
        if x < 0 or pending[t] not in (-1, x >> 1):
            raise GrammarError(
                f"rule {name!r} has max_string_chars but its text is not the content "
                "of a JSON string"
            )
        if pending[t] == -1:
            pending[t] = x >> 1
            queue.append(t)
        edges[s].append((t, x & 1))

    while queue:
        s = queue.popleft()
        for e in range(byte_ptr[s], byte_ptr[s + 1]):
            for b in _pieces(lo[e], hi[e]):
                reach(s, to[e], _STEP(pending[s], b))
        for e in range(ref_ptr[s], ref_ptr[s + 1]):  # a character's rule: one character
            reach(s, ref_to[e], 2 * BOUNDARY + 1 if pending[s] == BOUNDARY else -1)
    if any(final[s] and pending[s] != BOUNDARY for s in range(n)):
        raise GrammarError(f"rule {name!r} has max_string_chars but may end inside a character")
    assert max(pending) < N_PENDING
    need = _fewest_to_end(edges, final)
    out = np.full(n, -1, dtype=np.int32)
    for s in range(n):
        if need[s] is not None and need[s] <= bound:
            out[s] = min(bound - need[s], layout.NOT_COUNTED - 1)
    return out


def _pieces(lo: int, hi: int) -> list[int]:
    """One byte of each piece of ``lo..hi`` cut at ``_CUTS``."""
    out = [lo]
    for c in _CUTS:
        if lo < c <= hi:
            out.append(c)
    return out


def _fewest_to_end(edges: list[list[tuple[int, int]]], final) -> list[int | None]:
    """Per state, the fewest counted steps to a final state (0-1 breadth-first search
    backwards from the finals); None where none is reached."""
    n = len(edges)
    back: list[list[tuple[int, int]]] = [[] for _ in range(n)]
    for s, out in enumerate(edges):
        for t, w in out:
            back[t].append((s, w))
    dist: list[int | None] = [None] * n
    queue: deque[tuple[int, int]] = deque((0, s) for s in range(n) if final[s])
    while queue:
        d, t = queue.popleft()
        if dist[t] is not None and dist[t] <= d:  # type: ignore[operator]
            continue
        dist[t] = d
        for s, w in back[t]:
            if dist[s] is None or dist[s] > d + w:  # type: ignore[operator]
                if w:
                    queue.append((d + 1, s))
                else:
                    queue.appendleft((d, s))
    return dist
