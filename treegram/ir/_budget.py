"""What one compile may build: the state and memory budget every frontend stays within.

A grammar is refused with a :class:`~treegram.errors.GrammarError` naming the construct and
the limit, rather than left to build for minutes, when it would need more than:

* :data:`MAX_RULE_STATES` byte-automaton states for one rule, after the rewrites below (a
  pattern such as ``[ab]*a[ab]{20}`` has a deterministic automaton of 2**21 states);
* :data:`MAX_AUTOMATON_STATES` states for the whole grammar;
* :data:`MAX_SUBSET_MEMBERS` NFA states held by the subsets of one rule's subset
  construction (its memory: 4 bytes each);
* :data:`MAX_BUILD_SECONDS` seconds building the automaton (a safety net: the state
  budgets above stop every known blow-up within a second or two).

Memory follows from the states: the transition table holds 4 bytes per state and byte
class (at most 256 classes: 1 GiB at MAX_AUTOMATON_STATES, about 100 MB for the grammars
that reach a rule's budget), and one rule's subsets at most 128 MiB.

Two rewrites keep languages that would blow up within these bounds, the language unchanged:

* nested repetitions whose counts form one interval merge: ``(x{a,b}){c,d}`` is
  ``x{ca,db}`` when ``a - 1 <= c(b - a)`` (``((a{1,30}){1,30}){1,30}`` is ``a{1,27000}``);
* a bounded repetition whose unrolled copies would exceed :data:`UNROLL_LIMIT` states
  repeats a call of its item, made a rule of its own, instead of the item's states; and a
  rule whose deterministic automaton passes :data:`MAX_RULE_STATES` is built again with
  every counted repetition in it made a rule: the Earley chart then follows the
  repetitions' alternatives (a few items per byte) instead of the automaton tracking them
  all (``[ab]*a[ab]{20}``: 2**21 states become three).
"""

from __future__ import annotations

from treegram.ir._nodes import Expr, Repeat, Seq

__all__ = [
    "MAX_AUTOMATON_STATES",
    "MAX_BUILD_SECONDS",
    "MAX_RULE_STATES",
    "MAX_SUBSET_MEMBERS",
    "UNROLL_LIMIT",
    "merge_nested_repeat",
]

MAX_RULE_STATES = 1 << 16
MAX_AUTOMATON_STATES = 1 << 20
MAX_SUBSET_MEMBERS = 1 << 25
MAX_BUILD_SECONDS = 30.0
UNROLL_LIMIT = 4096


def _unwrapped(expr: Expr) -> Expr:
    while isinstance(expr, Seq) and len(expr.items) == 1:
        expr = expr.items[0]
    return expr


def merge_nested_repeat(expr: Repeat) -> Repeat:
    """``expr`` with directly nested repetitions merged where the counts they allow form
    one interval, as one repetition of the innermost item (the language is the same:
    ``(x{a,b}){c,d}`` is ``x{n}`` for every ``n`` that is a sum of ``c..d`` counts in
    ``a..b``)."""
    while True:
        inner = _unwrapped(expr.item)
        if not isinstance(inner, Repeat):
            return expr
        merged = _merged_counts(inner.min, inner.max, expr.min, expr.max)
        if merged is None:
            return expr
        expr = Repeat(inner.item, *merged)


def _merged_counts(a: int, b: int | None, c: int, d: int | None) -> tuple[int, int | None] | None:
    """``(n, m)`` when the union over ``j`` in ``c..d`` of ``[j*a, j*b]`` is ``n..m``
    (``None`` bounds unbounded); None when it has gaps."""
    top = None if b is None or d is None else b * d
    if d == 0:  # no copy of the inner repetition at all
        return 0, 0
    if a == 0:  # every [0, j*b] holds 0, and 0 copies of the inner repetition give it too
        return 0, top
    if c == 0:
        # {0} and then [a, b], [2a, 2b], ...: no gap only if a == 1 (then 2a <= b + 1)
        return (0, top) if a == 1 and (b is None or b >= 1) else None
    # [j*a, j*b] and [(j+1)*a, (j+1)*b] touch when (j+1)*a <= j*b + 1; the gap shrinks as
    # j grows, so the first pair decides (one interval when c == d)
    if c != d and b is not None and a - 1 > c * (b - a):
        return None
    return c * a, top
