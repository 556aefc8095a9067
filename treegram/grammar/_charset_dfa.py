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
  :func:`~treegram.grammar._regex.regex_to_expr` and ``format_expr`` return): Thompson NFA,
  then subset construction on the interval partition refined per state;
- :meth:`Dfa.literal`, :meth:`Dfa.any`, :meth:`Dfa.nothing`, :meth:`Dfa.length`;
- :meth:`Dfa.intersect`, :meth:`Dfa.union`, :meth:`Dfa.difference`,
  :meth:`Dfa.complement` (with respect to all code points), :meth:`Dfa.with_length`;
- :meth:`Dfa.is_empty`, :meth:`Dfa.accepts`, :meth:`Dfa.length_range`,
  :meth:`Dfa.minimize` (Hopcroft's algorithm on the trimmed, partial automaton).

Every construction stops with :class:`DfaLimitError` above :data:`MAX_STATES` states, and
:func:`dfa_string_expr` above :data:`MAX_GRAMMAR_STATES`.

Schema-level API
----------------
- :func:`pattern_dfa` -- the strings containing a match of a JSON Schema ``pattern``
  (an ECMA-262 *search*: ``^``/``$`` anchor a top-level alternative, as
  :func:`~treegram.grammar._json_schema_strings.pattern_body` has it);
- :func:`string_dfa` -- the decoded strings a schema accepts, for schemas built from
  ``type``, ``minLength``, ``maxLength``, ``pattern``, ``format``, ``const``, ``enum``,
  ``allOf``, ``anyOf``, ``oneOf``, ``not``, ``if``/``then``/``else`` and ``$ref`` (keywords
  of other types are ignored, as JSON Schema does for strings); ``None`` when some other
  keyword could constrain a string. So ``{"not": S}`` over strings is
  ``string_dfa(S).complement()``;
- :func:`dfa_string_expr` -- the JSON string literal (quotes included, every encoding of
  every character: raw or escaped) whose decoded content the DFA accepts, as grammar IR;
  states that are shared or on a cycle become rules of the converter.

Errors that a caller reports as :class:`~treegram.errors.UnsupportedSchemaError` are raised
as :class:`StringConstraintError` carrying the keyword to name.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import deque

from treegram.grammar._graphs import cycles_of_two_or_more
from treegram.grammar._ir import MAX_CODEPOINT, Bytes, CharClass, Choice, Expr, Repeat, Seq
from treegram.grammar._ranges import complement, normalize

__all__ = [
    "MAX_STATES",
    "MAX_GRAMMAR_STATES",
    "Dfa",
    "DfaLimitError",
    "StringConstraintError",
    "pattern_dfa",
    "string_dfa",
    "dfa_string_expr",
    "PATTERNS_KEY",
]

MAX_STATES = 50_000
# States of a (minimal) automaton turned into grammar rules: beyond this the grammar
# compiles too slowly (10,000 states: about 4 s with a 128k vocabulary).
MAX_GRAMMAR_STATES = 10_000
# NFA states allowed while building (copies of counted repeats add up quickly).
_MAX_NFA = 200_000
# Internal keyword: further patterns the string must also match (``allOf`` merging).
PATTERNS_KEY = "$treegram:patterns"

_ALL = ((0, MAX_CODEPOINT),)
_Trans = tuple[tuple[int, int, int], ...]


class DfaLimitError(ValueError):
    """An automaton would need more than :data:`MAX_STATES` states."""


class StringConstraintError(ValueError):
    """A string constraint that cannot be compiled; ``keyword`` is the one to name."""

    def __init__(self, keyword: str, why: str) -> None:
        super().__init__(why)
        self.keyword = keyword


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
            ranges = complement(expr.ranges) if expr.negated else normalize(expr.ranges)
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

    __slots__ = ("trans", "accept")

    def __init__(self, trans: list[_Trans], accept: list[bool]) -> None:
        self.trans = trans
        self.accept = accept

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
        trans: list[dict[int, int]] = [{}]
        accept = [False]
        for text in texts:
            s = 0
            for ch in text:
                nxt = trans[s].get(ord(ch))
                if nxt is None:
                    nxt = trans[s][ord(ch)] = len(trans)
                    trans.append({})
                    accept.append(False)
                s = nxt
            accept[s] = True
        rows = [_pack((cp, cp, t) for cp, t in row.items()) for row in trans]
        return Dfa(rows, accept).minimize()

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
        return _product(self, other, lambda a, b: a and b, need_both=True)

    def union(self, other: Dfa) -> Dfa:
        """Strings accepted by either."""
        return _product(self, other, lambda a, b: a or b, need_both=False)

    def difference(self, other: Dfa) -> Dfa:
        """Strings accepted by ``self`` and not by ``other``."""
        return _product(self, other, lambda a, b: a and not b, need_both=False, left_only=True)

    def complement(self) -> Dfa:
        """Every string this automaton rejects (over all code points)."""
        n = len(self)
        trans = []
        for row in self.trans:
            gaps = complement([(lo, hi) for lo, hi, _ in row])
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
        d = self.trim()
        n = len(d)
        if n == 1:
            return d
        # Symbol classes: the coarsest partition of the code points that all labels respect.
        points = sorted({p for row in d.trans for lo, hi, _ in row for p in (lo, hi + 1)})
        into: list[list[tuple[int, int]]] = [[] for _ in range(n)]  # (class, source)
        for s, row in enumerate(d.trans):
            for lo, hi, t in row:
                for c in range(bisect_left(points, lo), bisect_left(points, hi + 1)):
                    into[t].append((c, s))
        block_of = [0 if a else 1 for a in d.accept]
        blocks = [{s for s in range(n) if d.accept[s]}, {s for s in range(n) if not d.accept[s]}]
        if not blocks[1]:
            blocks.pop()
        # Partial transitions: every initial block is a splitter (Valmari and Lehtinen).
        work = list(range(len(blocks)))
        pending = set(work)
        while work:
            b = work.pop()
            pending.discard(b)
            by_class: dict[int, set[int]] = {}
            for q in blocks[b]:
                for c, p in into[q]:
                    by_class.setdefault(c, set()).add(p)
            for sources in by_class.values():
                touched: dict[int, set[int]] = {}
                for p in sources:
                    touched.setdefault(block_of[p], set()).add(p)
                for y, part in touched.items():
                    whole = blocks[y]
                    if len(part) == len(whole):
                        continue
                    whole -= part
                    z = len(blocks)
                    blocks.append(part)
                    for p in part:
                        block_of[p] = z
                    if y in pending:
                        work.append(z)
                        pending.add(z)
                    else:
                        w = z if len(part) <= len(whole) else y
                        work.append(w)
                        pending.add(w)
        # Renumber blocks with the start block first, then breadth-first.
        new = {block_of[0]: 0}
        reps = [0]
        i = 0
        trans: list[_Trans] = []
        while i < len(reps):
            row = []
            for lo, hi, t in d.trans[reps[i]]:
                bt = block_of[t]
                if bt not in new:
                    new[bt] = len(reps)
                    reps.append(t)
                row.append((lo, hi, new[bt]))
            trans.append(_pack(row))
            i += 1
        return Dfa(trans, [d.accept[s] for s in reps])


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


def _segments(a: _Trans, b: _Trans):
    """Walk two transition rows together: ``(lo, hi, target_a, target_b)`` over the union
    of their intervals (``None`` where a row has no transition)."""
    points = sorted({p for row in (a, b) for lo, hi, _ in row for p in (lo, hi + 1)})
    i = j = 0
    for k in range(len(points) - 1):
        lo, hi = points[k], points[k + 1] - 1
        while i < len(a) and a[i][1] < lo:
            i += 1
        while j < len(b) and b[j][1] < lo:
            j += 1
        ta = a[i][2] if i < len(a) and a[i][0] <= lo else None
        tb = b[j][2] if j < len(b) and b[j][0] <= lo else None
        if ta is not None or tb is not None:
            yield lo, hi, ta, tb


def _product(a: Dfa, b: Dfa, final, need_both: bool, left_only: bool = False) -> Dfa:
    """Product automaton; a missing side is the dead state (``None``)."""
    ids = {(0, 0): 0}
    order = [(0, 0)]
    trans: list[_Trans] = []
    i = 0
    while i < len(order):
        p, q = order[i]
        i += 1
        row_a = a.trans[p] if p is not None else ()
        row_b = b.trans[q] if q is not None else ()
        out = []
        for lo, hi, ta, tb in _segments(row_a, row_b):
            if (need_both and (ta is None or tb is None)) or (left_only and ta is None):
                continue
            out.append((lo, hi, _state_id(ids, order, (ta, tb))))
        trans.append(_pack(out))
    accept = [final(p is not None and a.accept[p], q is not None and b.accept[q]) for p, q in order]
    return Dfa(trans, accept).minimize()


# ---------------------------------------------------------------------------------------
# JSON Schema string languages.

_ANY_STAR = Repeat(CharClass(_ALL), 0, None)
# Keywords that never constrain a string.
_OTHER_TYPES = frozenset(
    {
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "multipleOf",
        "items",
        "prefixItems",
        "additionalItems",
        "contains",
        "minItems",
        "maxItems",
        "uniqueItems",
        "minContains",
        "maxContains",
        "unevaluatedItems",
        "properties",
        "patternProperties",
        "additionalProperties",
        "required",
        "minProperties",
        "maxProperties",
        "propertyNames",
        "dependentRequired",
        "dependentSchemas",
        "dependencies",
        "unevaluatedProperties",
        "title",
        "description",
        "default",
        "examples",
        "$schema",
        "$id",
        "$comment",
        "$anchor",
        "readOnly",
        "writeOnly",
        "deprecated",
        "$defs",
        "definitions",
        "contentMediaType",
        "contentEncoding",
        "contentSchema",
        "discriminator",
        "example",
        "$vocabulary",
        "$dynamicAnchor",
        "nullable",
    }
)
_MAX_REF_DEPTH = 32
# Applied after the other keywords (lengths: to the smallest automaton; then/else: by if).
_LATER = frozenset({"minLength", "maxLength", "then", "else"})
_ANY_DFA_MARK = Dfa.any()


def pattern_dfa(pattern: str) -> Dfa:
    """The strings that contain a match of the ECMA-262 ``pattern`` (JSON Schema search).

    Raises
    ------
    StringConstraintError
        The pattern has an anchor inside a group, a syntax error or an unsupported
        construct, or needs too many states (keyword ``pattern``).
    """
    from treegram.grammar._json_schema_strings import (
        _has_inner_anchor,
        _strip_anchors,
        split_alternatives,
    )
    from treegram.grammar._regex import regex_to_expr

    # Alternatives grouped by their anchors: one Σ*(a|b|...)Σ* rather than a union of
    # searches, whose subsets would track every alternative separately.
    groups: dict[tuple[bool, bool], list[Expr]] = {}
    try:
        for alternative in split_alternatives(pattern):
            left, core, right = _strip_anchors(alternative)
            if _has_inner_anchor(core):
                raise StringConstraintError(
                    "pattern", f"anchor inside a group in pattern {pattern!r}"
                )
            body = regex_to_expr(core) if core else Seq(())
            groups.setdefault((left, right), []).append(body)
        parts = []
        for (left, right), bodies in groups.items():
            body = bodies[0] if len(bodies) == 1 else Choice(tuple(bodies))
            items = ([] if left else [_ANY_STAR]) + [body] + ([] if right else [_ANY_STAR])
            parts.append(Seq(tuple(items)))
        return Dfa.from_expr(parts[0] if len(parts) == 1 else Choice(tuple(parts)))
    except DfaLimitError as exc:
        raise StringConstraintError("pattern", f"pattern {pattern!r}: {exc}") from None
    except ValueError as exc:
        if isinstance(exc, StringConstraintError):
            raise
        raise StringConstraintError("pattern", str(exc)) from None


def _format_dfa(name: str) -> Dfa:
    from treegram.grammar._json_schema_formats import format_expr

    expr = format_expr(name)
    if expr is None:
        raise StringConstraintError("format", f"unknown format {name!r}")
    try:
        return Dfa.from_expr(expr)
    except DfaLimitError as exc:
        raise StringConstraintError("format", f"format {name!r}: {exc}") from None


def string_dfa(schema, conv=None, ptr: str = "", _depth: int = 0) -> Dfa | None:
    """The decoded strings that satisfy ``schema``, or ``None`` when the schema has a
    keyword outside the string subset this module handles (see the module docstring).

    Parameters
    ----------
    schema : dict or bool
        The schema.
    conv : Converter, optional
        Resolves ``$ref`` (without it a ``$ref`` gives ``None``).
    ptr : str
        JSON pointer of ``schema`` (for messages).

    Raises
    ------
    StringConstraintError
        An unknown format, a pattern that cannot be compiled, or too many states.
    """
    if schema is True:
        return Dfa.any()
    if schema is False:
        return Dfa.nothing()
    if not isinstance(schema, dict) or _depth > _MAX_REF_DEPTH:
        return None
    out = _ANY_DFA_MARK
    for key, val in schema.items():
        if key in _OTHER_TYPES or key in _LATER:
            continue
        try:
            part = _keyword_dfa(schema, key, val, conv, ptr, _depth)
            if part is None:
                return None
            out = part if out is _ANY_DFA_MARK else out.intersect(part)
        except DfaLimitError as exc:
            raise StringConstraintError(key, str(exc)) from None
        if out.is_empty():
            return out
    if out is _ANY_DFA_MARK:
        out = Dfa.any()
    if "minLength" in schema or "maxLength" in schema:
        lo, hi = schema.get("minLength", 0), schema.get("maxLength")
        span = out.length_range()
        if (
            hi is not None
            and span is not None
            and span[1] is None
            and hi >= MAX_GRAMMAR_STATES + len(out)
        ):
            # An infinite language has a string of every length up to len(out) apart, and an
            # automaton accepting a string of length n without cycles has n + 1 states.
            raise StringConstraintError(
                "maxLength",
                f"maxLength {hi} with a pattern or format "
                f"needs more than {MAX_GRAMMAR_STATES} automaton states",
            )
        try:
            out = out.with_length(lo, hi)
        except DfaLimitError as exc:
            raise StringConstraintError(
                "maxLength" if hi is not None else "minLength",
                f"length bounds with pattern or format: {exc}",
            ) from None
    return out


def _keyword_dfa(schema: dict, key: str, val, conv, ptr: str, depth: int) -> Dfa | None:
    if key == "type":
        types = [val] if isinstance(val, str) else list(val)
        return Dfa.any() if "string" in types else Dfa.nothing()
    if key == "pattern":
        return pattern_dfa(val)
    if key == PATTERNS_KEY:
        out = Dfa.any()
        for pat in val:
            out = out.intersect(pattern_dfa(pat))
        return out
    if key == "format":
        return _format_dfa(val)
    if key in ("const", "enum"):
        values = [val] if key == "const" else list(val)
        return Dfa.literals(v for v in values if isinstance(v, str))
    sub = lambda s, p: string_dfa(s, conv, p, depth + 1)  # noqa: E731
    if key in ("allOf", "anyOf", "oneOf"):
        parts = [sub(s, f"{ptr}/{key}/{i}") for i, s in enumerate(val)]
        if any(p is None for p in parts):
            return None
        if key == "allOf":
            out = Dfa.any()
            for p in parts:
                out = out.intersect(p)
            return out
        if key == "anyOf":
            out = Dfa.nothing()
            for p in parts:
                out = out.union(p)
            return out
        once, twice = Dfa.nothing(), Dfa.nothing()
        for p in parts:
            twice = twice.union(once.intersect(p))
            once = once.union(p)
        return once.difference(twice)
    if key == "not":
        inner = sub(val, f"{ptr}/not")
        return None if inner is None else inner.complement()
    if key == "if":
        cond = sub(val, f"{ptr}/if")
        then = sub(schema.get("then", True), f"{ptr}/then")
        other = sub(schema.get("else", True), f"{ptr}/else")
        if cond is None or then is None or other is None:
            return None
        return cond.intersect(then).union(other.difference(cond))
    if key == "$ref" and conv is not None:
        return sub(conv.resolve(val, ptr), val)
    return None


# ---------------------------------------------------------------------------------------
# Back to grammar IR.

_INLINE_DEPTH = 16
_WRITABLE = Dfa([((0, 0xD7FF, 0), (0xE000, MAX_CODEPOINT, 0))], [True])


def dfa_string_expr(conv, dfa: Dfa, base: str = "str") -> Expr | None:
    """A JSON string literal (quotes included) whose decoded content ``dfa`` accepts.

    Each character is matched in every encoding JSON allows (raw, short escape,
    ``\\uXXXX``, surrogate pair). States that are shared, on a cycle of more than one
    state, or deep in a chain become rules ``{base}_dfa...`` of ``conv``; a state's loop
    on itself becomes a repetition.

    Returns
    -------
    Expr or None
        ``None`` when the language is empty.

    Raises
    ------
    DfaLimitError
        The minimal automaton has more than :data:`MAX_GRAMMAR_STATES` states.
    """
    from treegram.grammar._json_schema_lex import encoded_class, string_of

    # Lone surrogates have no JSON spelling that decodes to one character.
    return string_of(dfa_expr(conv, dfa.intersect(_WRITABLE), base, encoded_class))


def dfa_expr(conv, d: Dfa, base: str, encode) -> Expr | None:
    """Grammar IR for the strings ``d`` accepts, each code point range written as
    ``encode(ranges)`` (an expression, or ``None`` when the range cannot be written).

    States that are shared, on a cycle of more than one state, or deep in a chain become
    rules ``{base}_dfa...`` of ``conv``; a state's loop on itself becomes a repetition.

    Raises
    ------
    DfaLimitError
        The automaton has more than :data:`MAX_GRAMMAR_STATES` states.
    """
    from treegram.grammar._json_schema_lex import EMPTY, alt, seq

    if d.is_empty():
        return None
    n = len(d)
    if n > MAX_GRAMMAR_STATES:
        raise DfaLimitError(
            f"the string automaton has {n} states, more than "
            f"{MAX_GRAMMAR_STATES} a grammar is built from"
        )
    # Group each state's transitions by target: target -> ranges.
    groups: list[dict[int, list[tuple[int, int]]]] = []
    indeg = [0] * n
    for row in d.trans:
        g: dict[int, list[tuple[int, int]]] = {}
        for lo, hi, t in row:
            g.setdefault(t, []).append((lo, hi))
        groups.append(g)
    for s, g in enumerate(groups):
        for t in g:
            if t != s:
                indeg[t] += 1
    cyclic = _on_cycles(groups)
    enc_cache: dict[tuple, Expr | None] = {}

    def enc(ranges) -> Expr | None:
        key = tuple(ranges)
        if key not in enc_cache:
            enc_cache[key] = encode(key)
        return enc_cache[key]

    names: dict[int, str] = {}

    def ref(s: int):
        from treegram.grammar._ir import RuleRef

        if s not in names:
            names[s] = conv.new_rule(f"{base}_dfa")
            pending.append(s)
        return RuleRef(names[s])

    def body(s: int, depth: int) -> Expr | None:
        g = groups[s]
        step = enc(g[s]) if s in g else None
        loop = Repeat(step, 0, None) if step is not None else None
        exits = [EMPTY] if d.accept[s] else []
        for t, ranges in g.items():
            if t == s or enc(ranges) is None:  # e.g. a surrogate code point in a string
                continue
            shared = indeg[t] > 1 or cyclic[t] or depth >= _INLINE_DEPTH
            nxt = ref(t) if shared else body(t, depth + 1)
            exits.append(seq(enc(ranges), nxt))
        rest = alt(*exits)
        return rest if loop is None else seq(loop, rest)

    pending: list[int] = []
    top = ref(0) if cyclic[0] else body(0, 0)
    while pending:
        s = pending.pop()
        conv.rules[names[s]] = body(s, 0)
    return top


def _on_cycles(groups: list[dict[int, list]]) -> list[bool]:
    """Per state, whether it lies on a cycle through another state."""
    out = [False] * len(groups)
    for comp in cycles_of_two_or_more([[t for t in g if t != v] for v, g in enumerate(groups)]):
        for w in comp:
            out[w] = True
    return out
