"""Non-integer numbers within bounds: a number expression intersected with "has a non-zero
fraction digit".

``not {type: integer}`` next to bounds needs the numbers of a range that are not integers.
The range's expression (:func:`decimal_range`, no exponent, no rules) is run through a
three-state automaton — before the point, after it with only zeros, after a non-zero
digit — and rebuilt per final state; the result keeps the third. The automaton only moves
forward, so an unbounded repetition has a closed form over at most three states.
"""

from __future__ import annotations

from treegram.frontends.json_schema._lex import EMPTY, alt, decimal_range, seq
from treegram.ir import Bytes, CharClass, Choice, Expr, Repeat, Seq

__all__ = ["fractional_range"]

_BEFORE, _ZEROS, _NONZERO = 0, 1, 2
_POINT, _ZERO = ord("."), ord("0")


def fractional_range(lo, lo_strict: bool, hi, hi_strict: bool) -> Expr | None:
    """Numbers between the optional bounds that are not integers (written without exponent).

    Returns
    -------
    Expr or None
        ``None`` when no such number exists.
    """
    expr = decimal_range(lo, lo_strict, hi, hi_strict)
    if expr is None:
        return None
    return _run(expr, _BEFORE).get(_NONZERO)


def _step(state: int, cp: int) -> int:
    if state == _BEFORE:
        return _ZEROS if cp == _POINT else _BEFORE
    if state == _ZEROS and 0x31 <= cp <= 0x39:
        return _NONZERO
    return state


def _split(state: int, ranges) -> dict[int, list[tuple[int, int]]]:
    """The code point ranges of a class grouped by the state they lead to."""
    cuts = (_POINT, _POINT + 1, 0x31, 0x3A)  # where _step can change its answer
    out: dict[int, list[tuple[int, int]]] = {}
    for lo, hi in ranges:
        start = lo
        for cut in sorted(c for c in cuts if lo < c <= hi) + [hi + 1]:
            out.setdefault(_step(state, start), []).append((start, cut - 1))
            start = cut
    return out


def _union(into: dict[int, Expr | None], state: int, expr: Expr | None) -> None:
    if expr is not None:
        into[state] = alt(into.get(state), expr)


def _run(expr: Expr, state: int) -> dict[int, Expr]:
    """``{final state: the part of expr that leads there from state}``."""
    if isinstance(expr, Bytes):
        for b in expr.data.decode("utf-8"):
            state = _step(state, ord(b))
        return {state: expr}
    if isinstance(expr, CharClass):
        ranges = expr.ranges
        if expr.negated:
            raise ValueError("negated classes do not occur in number expressions")
        return {s: CharClass(tuple(r)) for s, r in _split(state, ranges).items()}
    if isinstance(expr, Seq):
        cur: dict[int, Expr | None] = {state: EMPTY}
        for item in expr.items:
            nxt: dict[int, Expr | None] = {}
            for s, pre in cur.items():
                for t, part in _run(item, s).items():
                    _union(nxt, t, seq(pre, part))
            cur = nxt
        return {s: e for s, e in cur.items() if e is not None}
    if isinstance(expr, Choice):
        out: dict[int, Expr | None] = {}
        for item in expr.items:
            for t, part in _run(item, state).items():
                _union(out, t, part)
        return {s: e for s, e in out.items() if e is not None}
    if isinstance(expr, Repeat):
        head = Seq(tuple([expr.item] * expr.min))
        if expr.max is not None:
            optional = Choice((EMPTY, expr.item))
            return _run(Seq((head, *[optional] * (expr.max - expr.min))), state)
        out = {}
        for s, pre in _run(head, state).items():
            for t, part in _star(expr.item, s).items():
                _union(out, t, seq(pre, part))
        return {s: e for s, e in out.items() if e is not None}
    raise ValueError(f"unexpected node in a number expression: {type(expr).__name__}")


def _star(item: Expr, state: int) -> dict[int, Expr]:
    """``item*`` from ``state``: stay with loops, move forward one step at a time."""
    moves = {s: _run(item, s) for s in (_BEFORE, _ZEROS, _NONZERO)}

    def loop(s: int) -> Expr:
        body = moves[s].get(s)
        return Repeat(body, 0, None) if body is not None else EMPTY

    def reach(s: int, t: int) -> Expr | None:
        if s == t:
            return loop(s)
        parts = [seq(loop(s), moves[s][m], reach(m, t)) for m in moves[s] if s < m <= t]
        return alt(*parts)

    return {
        t: e
        for t in (_BEFORE, _ZEROS, _NONZERO)
        if t >= state
        for e in [reach(state, t)]
        if e is not None
    }
