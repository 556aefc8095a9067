"""ECMA-262 patterns whose anchors or lookaheads sit where a plain regular expression
cannot put them, as code point automata.

**Anchors anywhere.** ``^`` and ``$`` inside groups, alternatives and repetitions
(``^(a|$)``, ``^(x($|/))*$``) are exact through two marker symbols outside Unicode: the
text is read as ``⊢ w ⊣`` (``⊢`` = U+110000, ``⊣`` = U+110001, which no character class
contains), ``^`` is the symbol ``⊢`` and ``$`` the symbol ``⊣``, and the search language
``Σ'* p Σ'*`` is cut down to the words ``w`` with ``⊢ w ⊣`` in it. An anchor that can
only be reached away from the text's edge (``/^x$/``, a JavaScript literal's slashes)
matches nothing, as in ECMA-262.

**Lookaheads at the edges.** ``^(?=X)rest`` is ``^rest`` that also matches ``^X``;
``^(?!X)rest`` is ``^rest`` that does not; a lookahead at the end of an alternative
without ``$`` only needs its text to follow (``p(?=X)`` searches like ``pX``).
Lookaheads elsewhere and word boundaries take one more marker each (:mod:`._assertions`);
lookbehinds stay unsupported.
"""

from __future__ import annotations

from treegram.frontends._regex import regex_to_expr
from treegram.frontends.json_schema._assertions import (
    STAND_FIRST,
    look_dfa,
    read_assertions,
    split_assertions,
)
from treegram.frontends.json_schema._pattern import outside_chars, split_alternatives
from treegram.ir import MAX_CODEPOINT, Bytes, CharClass, Dfa, Expr, Repeat, Seq, map_leaves

__all__ = ["edge_lookaheads", "marked_pattern_dfa", "trailing_lookahead"]

BEGIN, END = MAX_CODEPOINT + 1, MAX_CODEPOINT + 2  # the markers around the text
# Stand-ins for the anchors in the text handed to the regex frontend (noncharacters; a
# pattern that contains them itself is refused).
_STAND_BEGIN, _STAND_END = "\U0010fffe", "\U0010ffff"


def marked_pattern_dfa(pattern: str) -> Dfa:
    """The strings containing a match of ``pattern``, whose anchors, word boundaries and
    lookaheads may sit anywhere.

    Raises
    ------
    ValueError
        The pattern contains U+10FFFE or U+10FFFF itself (or, with assertions, U+FDD0 to
        U+FDEF), or the regex frontend refuses it (lookbehind, backreference...).
    DfaLimitError
        Too many automaton states.
    """
    if _STAND_BEGIN in pattern or _STAND_END in pattern:
        raise ValueError("a pattern with anchors and the characters U+10FFFE / U+10FFFF")
    main, assertions = split_assertions(pattern)
    counts = _anchor_counts(main)
    if assertions and (counts["^"] > 1 or counts["$"] > 1):
        # the text has one edge marker of each kind then: an assertion's marker sits
        # only between them, where both neighbours are the text's own
        raise ValueError(f"several anchors of one kind beside assertions in {pattern!r}")
    first = END + 1  # the assertions' markers
    stand_ins = {_STAND_BEGIN: BEGIN, _STAND_END: END}
    stand_ins.update({chr(STAND_FIRST + k): first + k for k in range(len(assertions))})
    expr = _markers(regex_to_expr(_anchors_stood_in(main)), stand_ins)
    anything = Repeat(CharClass(((0, END),)), 0, None)
    search = Dfa.from_expr(Seq((anything, expr, anything)))
    # An anchor is zero-width: several may hold at one edge (^^a, (x|$)*$), so the edges
    # carry as many markers as the pattern has anchors of their kind (a match uses each
    # occurrence at most once per loop round, and rounds of markers alone repeat nothing).
    begins = min(max(counts["^"], 1), _MAX_MARKS)
    ends = min(max(counts["$"], 1), _MAX_MARKS)
    # assertions are zero-width too: their markers may sit anywhere in the text itself
    chars: tuple = ((0, MAX_CODEPOINT),)
    if assertions:
        chars += ((first, first + len(assertions) - 1),)
    parts = [CharClass(((BEGIN, BEGIN),))] * begins
    parts.append(Repeat(CharClass(chars), 0, None))
    parts += [CharClass(((END, END),))] * ends
    marked = search.intersect(Dfa.from_expr(Seq(tuple(parts))))
    if assertions:
        looks = [None if a.kind in "bB" else _look(a.text, stand_ins) for a in assertions]
        marked = read_assertions(marked, first, assertions, looks)
    return _between_markers(marked, begins, ends)


def _anchor_counts(pattern: str) -> dict[str, int]:
    """How many ``^`` and ``$`` ``pattern`` has outside escapes and classes."""
    counts = {"^": 0, "$": 0}
    for _, ch, _ in outside_chars(pattern):
        if ch in counts:
            counts[ch] += 1
    return counts


def _look(text: str, stand_ins: dict[str, int]) -> Dfa:
    """The automaton of a lookahead's pattern ``text``, read from inside the text: ``$``
    (once) reads the end marker, and ``^`` cannot hold there."""
    counts = _anchor_counts(text)
    if counts["^"] or counts["$"] > 1:
        raise ValueError(f"a lookahead {text!r} with '^' or several '$'")
    return look_dfa(_markers(regex_to_expr(_anchors_stood_in(text)), stand_ins), END)


def _anchors_stood_in(pattern: str) -> str:
    """``pattern`` with its anchors (outside escapes and classes) as stand-in characters."""
    chars = list(pattern)
    for i, ch, _ in outside_chars(pattern):
        if ch in "^$":
            chars[i] = _STAND_BEGIN if ch == "^" else _STAND_END
    return "".join(chars)


def _markers(expr: Expr, stand_ins: dict[str, int]) -> Expr:
    """``expr`` with the stand-in characters turned into their marker symbols."""
    return map_leaves(expr, lambda leaf: _marked(leaf, stand_ins))


def _marked(expr: Expr, stand_ins: dict[str, int]) -> Expr:
    """A leaf of :func:`_markers`."""
    if isinstance(expr, Bytes):
        text = expr.data.decode("utf-8")
        if not any(ch in stand_ins for ch in text):
            return expr
        items: list[Expr] = []
        run = ""
        for ch in text:
            if ch in stand_ins:
                if run:
                    items.append(Bytes(run.encode("utf-8")))
                    run = ""
                mark = stand_ins[ch]
                items.append(CharClass(((mark, mark),)))
            else:
                run += ch
        if run:
            items.append(Bytes(run.encode("utf-8")))
        return items[0] if len(items) == 1 else Seq(tuple(items))
    return expr


_MAX_MARKS = 8


def _between_markers(d: Dfa, begins: int, ends: int) -> Dfa:
    """The words ``w`` such that ``d`` accepts ``⊢^begins w ⊣^ends``."""
    start: int | None = 0
    for _ in range(begins):
        start = d.step(start, BEGIN) if start is not None else None
    if start is None:
        return Dfa.nothing()
    n = len(d)
    order = [start] + [s for s in range(n) if s != start]
    new = {s: i for i, s in enumerate(order)}
    rows, accept = [], []
    for s in order:
        # the text's code points only (a range may run on into the markers)
        top = MAX_CODEPOINT
        rows.append(tuple((lo, min(hi, top), new[t]) for lo, hi, t in d.trans[s] if lo <= top))
        after: int | None = s
        for _ in range(ends):
            after = d.step(after, END) if after is not None else None
        accept.append(after is not None and d.accept[after])
    return Dfa(rows, accept).trim().minimize()


def _closing(pattern: str, open_at: int) -> int | None:
    """The index of the ``)`` closing the group that opens at ``open_at``."""
    for i, ch, depth in outside_chars(pattern):
        if i > open_at and ch == ")" and depth == _depth_at(pattern, open_at):
            return i
    return None


def _depth_at(pattern: str, index: int) -> int:
    for i, _, depth in outside_chars(pattern):
        if i == index:
            return depth
    return 0


def edge_lookaheads(pattern: str) -> tuple[list[tuple[bool, str]], str] | None:
    """``^(?=X)(?!Y)rest`` as ``([(True, "^X"), (False, "^Y")], "^rest")``: the
    lookaheads right after a leading ``^`` of a pattern with one alternative, each as an
    anchored pattern, and the rest; ``None`` when the pattern has no such form."""
    if not pattern.startswith(("^(?=", "^(?!")) or len(split_alternatives(pattern)) != 1:
        return None
    found: list[tuple[bool, str]] = []
    rest = pattern
    while rest.startswith(("^(?=", "^(?!")):
        close = _closing(rest, 1)
        if close is None:
            return None
        found.append((rest[3] == "=", "^" + rest[4:close]))
        rest = "^" + rest[close + 1 :]
    return found, rest


def trailing_lookahead(pattern: str) -> str | None:
    """``p(?=X)`` (one alternative, no ``$``) as the pattern ``p(?:X)``, which a search
    matches in the same strings; ``None`` when the pattern has no such form."""
    if not pattern.endswith(")") or len(split_alternatives(pattern)) != 1:
        return None
    for i, ch, depth in outside_chars(pattern):
        if ch == "(" and depth == 0 and pattern.startswith(("(?=",), i):
            close = _closing(pattern, i)
            if close == len(pattern) - 1:
                return pattern[:i] + "(?:" + pattern[i + 3 :]
    return None
