"""Deterministic automata over Unicode code points, for exact string constraints.

A :class:`Dfa` reads *decoded* characters (code points, not bytes and not JSON escapes).
Each state has outgoing transitions labelled by disjoint inclusive code point intervals;
a missing transition goes to an implicit dead state. The JSON Schema frontend uses them
where one grammar expression cannot say it: a pattern *and* a length bound, a pattern
*and* a format, several patterns, the key language of additional properties (everything
but the declared names and the ``patternProperties`` patterns) and ``propertyNames``.

Building and operating
----------------------
- :meth:`Dfa.from_expr` -- from a decoded-character IR expression (what
  the regex frontend and the JSON Schema formats return): Thompson NFA,
  then subset construction on the interval partition refined per state;
- :meth:`Dfa.literal`, :meth:`Dfa.any`, :meth:`Dfa.nothing`, :meth:`Dfa.length`;
- :meth:`Dfa.intersect`, :meth:`Dfa.union`, :meth:`Dfa.difference`,
  :meth:`Dfa.complement` (with respect to all code points), :meth:`Dfa.with_length`,
  :meth:`Dfa.substitute` (each character replaced by a language, e.g. its spellings);
- :meth:`Dfa.is_empty`, :meth:`Dfa.accepts`, :meth:`Dfa.length_range`,
  :meth:`Dfa.minimize` (Hopcroft's algorithm on the trimmed, partial automaton, a
  numba kernel in :mod:`treegram.ir._minimize`).

Every construction stops with :class:`DfaLimitError` above :data:`MAX_STATES` states.

The JSON Schema frontend interprets string keywords over these automata
(:mod:`treegram.frontends.json_schema._string_dfa`) and writes them back as grammar IR
(:mod:`treegram.frontends.json_schema._dfa_expr`).
"""

from __future__ import annotations

from bisect import bisect_left
from collections import deque
from dataclasses import dataclass

import numpy as np

from treegram.ir._budget import merge_nested_repeat
from treegram.ir._graphs import cycles_of_two_or_more
from treegram.ir._minimize import canonical, product
from treegram.ir._nodes import MAX_CODEPOINT, Bytes, CharClass, Choice, Expr, Repeat, Seq
from treegram.ir._ranges import complement_ranges, normalize_ranges

__all__ = ["MAX_STATES", "LOOP_SPLIT_LENGTHS", "Dfa", "DfaLimitError", "LoopSplit"]

MAX_STATES = 50_000
# NFA states allowed while building (copies of counted repeats add up quickly).
_MAX_NFA = 200_000

_ALL = ((0, MAX_CODEPOINT),)
_Trans = tuple[tuple[int, int, int], ...]


class DfaLimitError(ValueError):
    """An automaton would need more than :data:`MAX_STATES` states."""


def _pack(items) -> _Trans:
    """Sorted ``(lo, hi, target)`` with adjacent intervals of one target merged."""
    out: list[list[int]] = []
    for lo, hi, t in sorted(items):
        if out and out[-1][2] == t and out[-1][1] + 1 == lo:
            out[-1][1] = hi
        else:
            out.append([lo, hi, t])
    return tuple((a, b, c) for a, b, c in out)


# ---------------------------------------------------------------------------------------
# NFA (Thompson) from decoded-character IR.


class _Nfa:
    def __init__(self) -> None:
        self.eps: list[list[int]] = []
        self.chars: list[list[tuple[tuple[tuple[int, int], ...], int]]] = []

    def state(self) -> int:
        if len(self.eps) >= _MAX_NFA:
            raise DfaLimitError(f"more than {_MAX_NFA} automaton states while building")
        self.eps.append([])
        self.chars.append([])
        return len(self.eps) - 1

    def build(self, expr: Expr, s: int) -> int:
        """Add ``expr`` starting at state ``s``; return its end state."""
        if isinstance(expr, Bytes):
            for ch in expr.data.decode("utf-8"):
                e = self.state()
                self.chars[s].append((((ord(ch), ord(ch)),), e))
                s = e
            return s
        if isinstance(expr, CharClass):
            ranges = (
                complement_ranges(expr.ranges) if expr.negated else normalize_ranges(expr.ranges)
            )
            e = self.state()
            if ranges:
                self.chars[s].append((ranges, e))
            return e
        if isinstance(expr, Seq):
            for item in expr.items:
                s = self.build(item, s)
            return s
        if isinstance(expr, Choice):
            e = self.state()
            for item in expr.items:
                a = self.state()
                self.eps[s].append(a)
                self.eps[self.build(item, a)].append(e)
            return e
        if isinstance(expr, Repeat):
            expr = merge_nested_repeat(expr)  # ((a{1,30}){1,30}){1,30}: 27,000 copies of a
            for _ in range(expr.min):
                s = self.build(expr.item, s)
            if expr.max is None:
                a = self.state()
                self.eps[s].append(a)
                self.eps[self.build(expr.item, a)].append(a)
                return a
            e = self.state()
            for _ in range(expr.max - expr.min):
                self.eps[s].append(e)
                s = self.build(expr.item, s)
            self.eps[s].append(e)
            return e
        raise TypeError(f"a string automaton cannot contain {type(expr).__name__} nodes")

    def closure(self, states) -> frozenset[int]:
        seen = set(states)
        stack = list(states)
        while stack:
            for t in self.eps[stack.pop()]:
                if t not in seen:
                    seen.add(t)
                    stack.append(t)
        return frozenset(seen)


def _state_id(ids: dict, order: list, key) -> int:
    """The state number of ``key`` in a construction, numbering new keys in order."""
    j = ids.get(key)
    if j is None:
        if len(order) >= MAX_STATES:
            raise DfaLimitError(f"more than {MAX_STATES} automaton states")
        j = ids[key] = len(order)
        order.append(key)
    return j


def _determinize(nfa: _Nfa, start: int, final: int) -> Dfa:
    first = nfa.closure([start])
    ids = {first: 0}
    order = [first]
    trans: list[_Trans] = []
    i = 0
    while i < len(order):
        cur = order[i]
        i += 1
        moves = [m for s in cur for m in nfa.chars[s]]
        points = sorted({p for ranges, _ in moves for lo, hi in ranges for p in (lo, hi + 1)})
        buckets: list[set[int]] = [set() for _ in points]
        for ranges, t in moves:
            for lo, hi in ranges:
                for k in range(bisect_left(points, lo), bisect_left(points, hi + 1)):
                    buckets[k].add(t)
        out = []
        for k, bucket in enumerate(buckets):
            if not bucket:
                continue
            j = _state_id(ids, order, nfa.closure(bucket))
            out.append((points[k], points[k + 1] - 1, j))
        trans.append(_pack(out))
    return Dfa(trans, [final in s for s in order])


# ---------------------------------------------------------------------------------------
# DFA.


class Dfa:
    """A deterministic automaton over code points; state 0 is the start state.

    Parameters
    ----------
    trans : list of tuple of (int, int, int)
        Per state, sorted disjoint ``(lo, hi, target)`` transitions (inclusive bounds).
    accept : list of bool
        Per state, whether it accepts.
    """

    __slots__ = ("trans", "accept", "_arrays")

    def __init__(self, trans: list[_Trans], accept: list[bool]) -> None:
        self.trans = trans
        self.accept = accept
        self._arrays: tuple | None = None  # :func:`_flat`'s arrays, once asked for

    def __len__(self) -> int:
        return len(self.trans)

    def __repr__(self) -> str:
        return f"Dfa({len(self)} states)"

    # -- constructors -------------------------------------------------------------------
    @staticmethod
    def from_expr(expr: Expr) -> Dfa:
        """The strings (as a whole) that a decoded-character expression matches."""
        nfa = _Nfa()
        start = nfa.state()
        final = nfa.build(expr, start)
        return _determinize(nfa, start, final).minimize()

    @staticmethod
    def nothing() -> Dfa:
        """The empty language."""
        return Dfa([()], [False])

    @staticmethod
    def multiples(k: int) -> Dfa:
        """Decimal integers (``-?[0-9]+``, leading zeros allowed) divisible by ``k``:
        one state per remainder of the digits read so far."""
        digits = range(10)
        trans = [
            _pack([(0x2D, 0x2D, 1)] + [(0x30 + d, 0x30 + d, 2 + d % k) for d in digits]),
            _pack([(0x30 + d, 0x30 + d, 2 + d % k) for d in digits]),
        ]
        for r in range(k):
            trans.append(_pack([(0x30 + d, 0x30 + d, 2 + (10 * r + d) % k) for d in digits]))
        return Dfa(trans, [False, False] + [r == 0 for r in range(k)])

    @staticmethod
    def any() -> Dfa:
        """Every string."""
        return Dfa([((0, MAX_CODEPOINT, 0),)], [True])

    @staticmethod
    def literal(text: str) -> Dfa:
        """The single string ``text``."""
        n = len(text)
        trans = [((ord(ch), ord(ch), i + 1),) for i, ch in enumerate(text)] + [()]
        return Dfa(trans, [i == n for i in range(n + 1)])

    @staticmethod
    def literals(texts) -> Dfa:
        """The finite set of strings ``texts`` (a trie, minimized)."""
        return Dfa._trie(texts).minimize()

    @staticmethod
    def all_but(texts, within: Dfa | None = None) -> Dfa:
        """Every string (of ``within``, by default all) except those of ``texts``,
        minimized: the automaton of ``within.difference(Dfa.literals(texts))`` (the
        undeclared keys of an object), the product taken with the trie itself (minimizing
        the trie first is not needed)."""
        return (Dfa.any() if within is None else within).difference(Dfa._trie(texts))

    @staticmethod
    def _trie(texts) -> Dfa:
        """The trie of the strings ``texts`` (not minimized)."""
        trans: list[dict[int, int]] = [{}]
        accept = [False]
        for text in texts:
            s = 0
            for cp in map(ord, text):
                row = trans[s]
                nxt = row.get(cp)
                if nxt is None:
                    nxt = row[cp] = len(trans)
                    trans.append({})
                    accept.append(False)
                s = nxt
            accept[s] = True
        # every edge has a target of its own: sorted, the rows are already packed
        rows = [tuple(sorted([(cp, cp, t) for cp, t in row.items()])) for row in trans]
        return Dfa(rows, accept)

    @staticmethod
    def length(lo: int, hi: int | None) -> Dfa:
        """Strings of ``lo`` to ``hi`` characters (``None``: no upper bound)."""
        if hi is not None and hi < lo:
            return Dfa.nothing()
        top = lo if hi is None else hi
        if top + 1 > MAX_STATES:
            raise DfaLimitError(
                f"a length bound of {top} needs more than {MAX_STATES} automaton states"
            )
        trans: list[_Trans] = [((0, MAX_CODEPOINT, i + 1),) for i in range(top)]
        trans.append(((0, MAX_CODEPOINT, top),) if hi is None else ())
        return Dfa(trans, [i >= lo for i in range(top + 1)])

    # -- queries ------------------------------------------------------------------------
    def step(self, state: int, cp: int) -> int | None:
        """The state after reading ``cp`` (``None``: dead)."""
        trans = self.trans[state]
        k = bisect_left(trans, (cp + 1,)) - 1
        if k >= 0 and trans[k][0] <= cp <= trans[k][1]:
            return trans[k][2]
        return None

    def accepts(self, text: str) -> bool:
        """Whether the automaton accepts ``text``."""
        s: int | None = 0
        for ch in text:
            s = self.step(s, ord(ch))
            if s is None:
                return False
        return self.accept[s]

    def is_empty(self) -> bool:
        """Whether no string is accepted."""
        seen, stack = {0}, [0]
        while stack:
            s = stack.pop()
            if self.accept[s]:
                return False
            for _, _, t in self.trans[s]:
                if t not in seen:
                    seen.add(t)
                    stack.append(t)
        return True

    def length_range(self) -> tuple[int, int | None] | None:
        """Shortest and longest accepted length (``None`` longest: unbounded); ``None``
        when the language is empty."""
        d = self.trim()
        if d.is_empty():
            return None
        n = len(d)
        dist = [-1] * n
        dist[0] = 0
        queue = deque([0])
        while queue:
            s = queue.popleft()
            for _, _, t in d.trans[s]:
                if dist[t] < 0:
                    dist[t] = dist[s] + 1
                    queue.append(t)
        shortest = min(dist[s] for s in range(n) if d.accept[s])
        longest = _longest(d)
        return shortest, longest

    # -- operations ---------------------------------------------------------------------
    def intersect(self, other: Dfa) -> Dfa:
        """Strings accepted by both."""
        return _product(self, other, _INTERSECT)

    def union(self, other: Dfa) -> Dfa:
        """Strings accepted by either."""
        return _product(self, other, _UNION)

    def difference(self, other: Dfa) -> Dfa:
        """Strings accepted by ``self`` and not by ``other``."""
        return _product(self, other, _DIFFERENCE)

    def complement(self) -> Dfa:
        """Every string this automaton rejects (over all code points)."""
        n = len(self)
        trans = []
        for row in self.trans:
            gaps = complement_ranges([(lo, hi) for lo, hi, _ in row])
            trans.append(_pack(list(row) + [(lo, hi, n) for lo, hi in gaps]))
        trans.append(((0, MAX_CODEPOINT, n),))
        return Dfa(trans, [not a for a in self.accept] + [True]).minimize()

    def with_length(self, lo: int, hi: int | None) -> Dfa:
        """The accepted strings of ``lo`` to ``hi`` characters."""
        span = self.length_range()
        if span is None:
            return self
        shortest, longest = span
        if shortest >= lo and (hi is None or (longest is not None and longest <= hi)):
            return self
        return self.intersect(Dfa.length(lo, hi))

    def substitute(self, encode) -> Dfa:
        """The strings obtained from the accepted strings by writing each character as any
        string of ``encode(ranges)``, where ``ranges`` (a tuple of inclusive code point
        intervals) are the characters of one transition: a regular substitution.

        The JSON Schema frontend turns a language of decoded strings into the language of
        their JSON spellings this way (``encode`` gives every encoding of a character
        class), so that constraints on the written text can be applied exactly.

        Parameters
        ----------
        encode : callable
            ``ranges -> Expr or None``: a decoded-character IR expression (``None``: the
            characters cannot be written, the transition is dropped).

        Raises
        ------
        DfaLimitError
            The result needs more than :data:`MAX_STATES` states.
        """
        nfa = _Nfa()
        states = [nfa.state() for _ in self.trans]
        final = nfa.state()
        for s, row in enumerate(self.trans):
            if self.accept[s]:
                nfa.eps[states[s]].append(final)
            by_target: dict[int, list[tuple[int, int]]] = {}
            for lo, hi, t in row:
                by_target.setdefault(t, []).append((lo, hi))
            for t, ranges in by_target.items():
                expr = encode(tuple(ranges))
                if expr is not None:
                    nfa.eps[nfa.build(expr, states[s])].append(states[t])
        return _determinize(nfa, states[0], final).minimize()

    def loop_split(self) -> LoopSplit | None:
        """The language as ``avoid | prefix loop* suffix`` where the prefixes and suffixes
        have a few lengths, when this (minimal) automaton allows it; else ``None``.

        It does when exactly one state ``L`` loops on itself, no cycle passes through two
        or more states, and the paths from the start to ``L`` and from ``L`` to acceptance
        (without the loop) have at most :data:`LOOP_SPLIT_LENGTHS` distinct lengths each.
        Then a length bound on the whole string is a bound on the number of loop rounds
        for each pair of lengths, a counter instead of one state per length (JSON
        Schema's ``maxLength`` beside a ``pattern``).
        """
        n = len(self)
        loops = [s for s in range(n) if any(t == s for _, _, t in self.trans[s])]
        succ = [sorted({t for _, _, t in row if t != s}) for s, row in enumerate(self.trans)]
        if len(loops) != 1 or cycles_of_two_or_more(succ):
            return None
        (loop,) = loops
        before = _path_lengths(succ, 0, [s == loop for s in range(n)])
        after = _path_lengths(succ, loop, self.accept)
        if not before or not after:  # too many lengths (or the loop is not trimmed)
            return None
        ranges = tuple((lo, hi) for lo, hi, t in self.trans[loop] if t == loop)
        rows = [tuple(e for e in row if e[2] != loop) for row in self.trans]
        avoid = Dfa.nothing() if loop == 0 else Dfa(rows, list(self.accept)).trim()
        prefix = Dfa(
            [() if s == loop else row for s, row in enumerate(self.trans)],
            [s == loop for s in range(n)],
        ).trim()
        # the suffix starts at the loop's state: renumber it to 0
        order = [loop] + [s for s in range(n) if s != loop]
        new = {s: i for i, s in enumerate(order)}
        suffix = Dfa(
            [tuple((lo, hi, new[t]) for lo, hi, t in rows[s]) for s in order],
            [self.accept[s] for s in order],
        ).trim()
        return LoopSplit(avoid, prefix, ranges, suffix, before, after)

    def trim(self) -> Dfa:
        """The same language with only states reachable from the start that can reach an
        accepting state, numbered breadth-first."""
        n = len(self)
        preds: list[list[int]] = [[] for _ in range(n)]
        fwd = [False] * n
        fwd[0] = True
        stack = [0]
        while stack:
            s = stack.pop()
            for _, _, t in self.trans[s]:
                preds[t].append(s)
                if not fwd[t]:
                    fwd[t] = True
                    stack.append(t)
        live = [False] * n
        stack = [s for s in range(n) if fwd[s] and self.accept[s]]
        for s in stack:
            live[s] = True
        while stack:
            for p in preds[stack.pop()]:
                if not live[p]:
                    live[p] = True
                    stack.append(p)
        if not live[0]:
            return Dfa.nothing()
        new = {0: 0}
        order = [0]
        i = 0
        while i < len(order):
            for _, _, t in self.trans[order[i]]:
                if live[t] and t not in new:
                    new[t] = len(order)
                    order.append(t)
            i += 1
        trans = [_pack([(lo, hi, new[t]) for lo, hi, t in self.trans[s] if live[t]]) for s in order]
        return Dfa(trans, [self.accept[s] for s in order])

    def minimize(self) -> Dfa:
        """The minimal automaton of the same language (trimmed, partial)."""
        return _from_flat(*canonical(*_flat(self)))


@dataclass(frozen=True)
class LoopSplit:
    """A language as ``avoid | prefix loop* suffix`` (see :meth:`Dfa.loop_split`).

    Attributes
    ----------
    avoid : Dfa
        The accepted strings that never reach the looping state (a finite language).
    prefix, suffix : Dfa
        The strings that lead to the looping state, and from it (without looping) to
        acceptance, of the lengths ``prefix_lengths``, resp. ``suffix_lengths``.
    loop : tuple of (int, int)
        The code point ranges the looping state reads and stays.
    prefix_lengths, suffix_lengths : tuple of int
        The lengths, ascending.
    """

    avoid: Dfa
    prefix: Dfa
    loop: tuple[tuple[int, int], ...]
    suffix: Dfa
    prefix_lengths: tuple[int, ...]
    suffix_lengths: tuple[int, ...]


# Distinct prefix (and suffix) lengths a loop split takes: each pair of lengths is one
# counted repetition in the grammar.
LOOP_SPLIT_LENGTHS = 4


def _path_lengths(succ: list[list[int]], source: int, target: list[bool]) -> tuple[int, ...]:
    """The lengths of the paths from ``source`` to a ``target`` state in the acyclic graph
    ``succ`` (a path may end at any target it meets), ascending; empty when none is
    reachable or when there are more than :data:`LOOP_SPLIT_LENGTHS`."""
    too_many = frozenset((-1,))
    best: dict[int, frozenset[int]] = {}
    stack = [(source, False)]
    while stack:
        s, expanded = stack.pop()
        if s in best:
            continue
        if not expanded:
            stack.append((s, True))
            stack.extend((t, False) for t in succ[s] if t not in best)
            continue
        got: set[int] = {0} if target[s] else set()
        for t in succ[s]:
            if best[t] is too_many:
                got = set(too_many)
                break
            got.update(k + 1 for k in best[t])
        best[s] = too_many if -1 in got or len(got) > LOOP_SPLIT_LENGTHS else frozenset(got)
    out = best[source]
    return () if out is too_many else tuple(sorted(out))


def _longest(d: Dfa) -> int | None:
    """Longest path from the start in a trimmed automaton (``None`` on a cycle)."""
    n = len(d)
    indeg = [0] * n
    for row in d.trans:
        for _, _, t in row:
            indeg[t] += 1
    order, stack = [], [s for s in range(n) if indeg[s] == 0]
    while stack:
        s = stack.pop()
        order.append(s)
        for _, _, t in d.trans[s]:
            indeg[t] -= 1
            if indeg[t] == 0:
                stack.append(t)
    if len(order) < n:
        return None
    far = [-1] * n
    far[0] = 0
    for s in order:
        if far[s] < 0:
            continue
        for _, _, t in d.trans[s]:
            far[t] = max(far[t], far[s] + 1)
    return max(far[s] for s in range(n) if d.accept[s])


def _flat(d: Dfa) -> tuple:
    """``d`` as flat arrays: n, accept [n], ptr [n + 1], lo, hi, to [n_edges]; kept on
    ``d`` (automata are not changed after they are made; the kernels only read them)."""
    got = d._arrays
    if got is None:
        got = d._arrays = _flat_arrays(d)
    return got


def _flat_arrays(d: Dfa) -> tuple:
    ptr = [0]
    lo: list[int] = []
    hi: list[int] = []
    to: list[int] = []
    for row in d.trans:
        for a, b, t in row:
            lo.append(a)
            hi.append(b)
            to.append(t)
        ptr.append(len(lo))
    i64 = np.int64
    return (
        len(d.trans),
        np.array(d.accept, dtype=np.uint8),
        np.array(ptr, dtype=i64),
        np.array(lo, dtype=i64),
        np.array(hi, dtype=i64),
        np.array(to, dtype=i64),
    )


def _from_flat(n, accept, ptr, lo, hi, to) -> Dfa:
    edges = list(zip(lo.tolist(), hi.tolist(), to.tolist(), strict=True))
    bounds = ptr.tolist()
    trans = [tuple(edges[a:b]) for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
    d = Dfa(trans, list(map(bool, accept.tolist())))
    # the arrays it was read from are what _flat would make of it
    d._arrays = (n, accept.astype(np.uint8, copy=False), ptr, lo, hi, to)
    return d


_INTERSECT, _UNION, _DIFFERENCE = 0, 1, 2


def _product(a: Dfa, b: Dfa, mode: int) -> Dfa:
    """The minimal automaton of the product of ``a`` and ``b`` (``mode``: intersection,
    union or difference; a missing side is the dead state)."""
    _, a_acc, a_ptr, a_lo, a_hi, a_to = _flat(a)
    _, b_acc, b_ptr, b_lo, b_hi, b_to = _flat(b)
    n, acc, ptr, lo, hi, to = product(
        a_ptr, a_lo, a_hi, a_to, a_acc, b_ptr, b_lo, b_hi, b_to, b_acc, mode, MAX_STATES
    )
    if n < 0:
        raise DfaLimitError(f"more than {MAX_STATES} automaton states")
    return _from_flat(*canonical(n, acc, ptr, lo, hi, to))
