"""Zero-width assertions anywhere in an ECMA-262 pattern: word boundaries (``\\b``,
``\\B``) and lookaheads (``(?=X)``, ``(?!X)``), as code point automata.

Regular languages are closed under both, so each such pattern is still one automaton:

1. every assertion of the pattern becomes a marker symbol of its own, outside Unicode
   (after the anchors' ``⊢``/``⊣`` of :mod:`._anchors`), and the marked search language is
   built as :func:`~._anchors.marked_pattern_dfa` builds it, with the markers free to sit
   anywhere in the text (they are zero-width);
2. a subset construction then reads the text without the markers: a thread of it is a
   state of the marked automaton and the lookaheads it still owes, and before each symbol
   a thread may cross a marker when its assertion holds there: a word boundary looks at the
   symbol before and the one after (``⊢`` and ``⊣`` are not word characters), a lookahead
   starts a run of its own automaton (``X`` followed by anything) on the rest of the
   text, which kills the thread (``(?!X)``) or discharges its debt (``(?=X)``) when ``X``
   matches, and the other way round when ``X`` can no longer match.

A lookahead's text has no assertions of its own; lookbehinds stay unsupported.
"""

from __future__ import annotations

from dataclasses import dataclass

from treegram.frontends.json_schema._pattern import outside_chars
from treegram.ir import MAX_CODEPOINT, CharClass, Dfa, DfaLimitError, Repeat, Seq

__all__ = [
    "STAND_FIRST",
    "Assertion",
    "has_assertions",
    "look_dfa",
    "read_assertions",
    "split_assertions",
]

# Stand-ins for the assertions in the text handed to the regex frontend (noncharacters).
STAND_FIRST = 0xFDD0
MAX_ASSERTIONS = 32  # U+FDD0 .. U+FDEF

# ECMA-262's word characters (``\w`` without the ``u`` and ``i`` flags together).
_WORD = ((0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A))

# Subset states built at most (each a set of threads): a pattern past it is refused.
MAX_ASSERTION_STATES = 20_000


@dataclass(frozen=True)
class Assertion:
    """One assertion of a pattern: ``kind`` is ``"b"``, ``"B"``, ``"="`` or ``"!"``;
    ``text`` is a lookahead's pattern (empty for the word boundaries)."""

    kind: str
    text: str = ""


def has_assertions(pattern: str) -> bool:
    """Whether ``pattern`` has a word boundary or a lookahead outside a class."""
    return any(_scan(pattern))


def _scan(pattern: str):
    """``(start, end, kind)`` of each assertion outside classes: ``\\b``/``\\B`` (two
    characters) and ``(?=``/``(?!`` groups (up to their closing parenthesis)."""
    for i, text, depth in outside_chars(pattern, escapes=True):
        if text in ("\\b", "\\B"):
            yield i, i + 2, text[1]
        elif text == "(" and pattern.startswith(("(?=", "(?!"), i):
            yield i, _group_end(pattern, i, depth), pattern[i + 2]


def _group_end(pattern: str, start: int, depth: int) -> int:
    """The index after the ``)`` at ``depth`` that closes the group opening at ``start``."""
    for i, ch, d in outside_chars(pattern):
        if i > start and ch == ")" and d == depth:
            return i + 1
    raise ValueError(f"unbalanced parenthesis in pattern {pattern!r}")


def split_assertions(pattern: str) -> tuple[str, list[Assertion]]:
    """``pattern`` with each assertion replaced by a stand-in character (U+FDD0 onwards,
    in order), and the assertions.

    Raises
    ------
    ValueError
        The pattern holds a stand-in character itself, more than :data:`MAX_ASSERTIONS`
        assertions, or a lookahead with an assertion inside.
    """
    if any(STAND_FIRST <= ord(ch) < STAND_FIRST + MAX_ASSERTIONS for ch in pattern):
        raise ValueError("a pattern with assertions and the characters U+FDD0 to U+FDEF")
    out: list[str] = []
    found: list[Assertion] = []
    at = 0
    for start, end, kind in _scan(pattern):
        if start < at:
            continue  # inside a lookahead already taken
        if len(found) == MAX_ASSERTIONS:
            raise ValueError(f"more than {MAX_ASSERTIONS} assertions in pattern {pattern!r}")
        text = pattern[start + 3 : end - 1] if kind in "=!" else ""
        if has_assertions(text):
            raise ValueError(f"an assertion inside a lookahead in pattern {pattern!r}")
        out.append(pattern[at:start])
        out.append(chr(STAND_FIRST + len(found)))
        found.append(Assertion(kind, text))
        at = end
    out.append(pattern[at:])
    return "".join(out), found


def read_assertions(
    marked: Dfa, first_marker: int, assertions: list[Assertion], looks: list[Dfa | None]
) -> Dfa:
    """The automaton ``marked`` (over code points, the anchors' markers and one marker per
    assertion from ``first_marker`` on) read without the assertion markers, each crossed
    only where its assertion holds (see the module's docstring).

    ``looks[k]`` is lookahead ``k``'s automaton over the same symbols: the texts that start
    with a match of its pattern (``None`` for a word boundary). The result is over code
    points and the anchors' markers, trimmed.

    Raises
    ------
    DfaLimitError
        More than :data:`MAX_ASSERTION_STATES` states.
    """
    last_marker = first_marker + len(assertions) - 1
    words = any(a.kind in "bB" for a in assertions)

    def crossings(s: int):
        """``(assertion, target)`` of each marker transition of ``marked``'s state ``s``."""
        for lo, hi, t in marked.trans[s]:
            for m in range(max(lo, first_marker), min(hi, last_marker) + 1):
                yield m - first_marker, t

    def closure(threads, prev_word: bool, next_word: bool) -> frozenset:
        """The threads, and those that cross markers whose assertions hold before a symbol
        (``next_word``: whether it is a word character) that follows ``prev_word``'s."""
        out: set = set()
        stack = list(threads)
        while stack:
            thread = stack.pop()
            if thread in out:
                continue
            out.add(thread)
            s, owed = thread
            for k, t in crossings(s):
                kind = assertions[k].kind
                if kind == "b" and prev_word == next_word:
                    continue
                if kind == "B" and prev_word != next_word:
                    continue
                if kind in "=!":
                    debt = _owe(looks[k], kind, k, 0)  # type: ignore[arg-type]
                    if debt is _DEAD:
                        continue
                    stack.append((t, owed if debt is _PAID else owed | {debt}))
                else:
                    stack.append((t, owed))
        return frozenset(out)

    def advance(threads: frozenset, symbol: int) -> frozenset:
        out = set()
        for s, owed in threads:
            t = marked.step(s, symbol)
            if t is None:
                continue
            kept = set()
            for k, kind, x in owed:
                debt = _owe(looks[k], kind, k, looks[k].step(x, symbol))  # type: ignore[union-attr]
                if debt is _DEAD:
                    break
                if debt is not _PAID:
                    kept.add(debt)
            else:
                out.add((t, frozenset(kept)))
        return frozenset(out)

    def accepting(threads: frozenset, prev_word: bool) -> bool:
        # the end of the text: nothing after it is a word character, every ``(?=X)``
        # still owed fails, every ``(?!X)`` still open holds
        return any(
            marked.accept[s] and all(kind == "!" for _, kind, _ in owed)
            for s, owed in closure(threads, prev_word, False)
        )

    start = (frozenset({(0, frozenset())}), False)
    index = {start: 0}
    order = [start]
    rows: list[tuple] = []
    accept: list[bool] = []
    i = 0
    while i < len(order):
        threads, prev_word = order[i]
        i += 1
        before = {False: closure(threads, prev_word, False)}
        if words:
            before[True] = closure(threads, prev_word, True)
        cuts = {0, MAX_CODEPOINT + 1, first_marker}
        for group in before.values():
            for s, owed in group:
                for lo, hi, _ in marked.trans[s]:
                    cuts.update((lo, hi + 1))
                for k, _, x in owed:
                    for lo, hi, _ in looks[k].trans[x]:  # type: ignore[union-attr]
                        cuts.update((lo, hi + 1))
        if words:
            for lo, hi in _WORD:
                cuts.update((lo, hi + 1))
        bounds = sorted(c for c in cuts if c <= first_marker)
        row = []
        for lo, nxt in zip(bounds, bounds[1:], strict=False):
            word = words and _is_word(lo)
            after = advance(before[word], lo)
            if not after:
                continue
            key = (after, word if words else False)
            if key not in index:
                if len(order) >= MAX_ASSERTION_STATES:
                    raise DfaLimitError(
                        f"more than {MAX_ASSERTION_STATES} automaton states "
                        "(assertions read on the text)"
                    )
                index[key] = len(order)
                order.append(key)
            row.append((lo, nxt - 1, index[key]))
        rows.append(tuple(row))  # (trim below merges adjacent ranges of one target)
        accept.append(accepting(threads, prev_word))
    return Dfa(rows, accept).trim()


def look_dfa(expr, end_marker: int) -> Dfa:
    """The texts (code points and both anchor markers) that start with a match of the
    lookahead expression ``expr`` (its anchors already markers)."""
    anything = Repeat(CharClass(((0, end_marker),)), 0, None)
    return Dfa.from_expr(Seq((expr, anything)))


_DEAD = object()
_PAID = object()


def _owe(look: Dfa, kind: str, k: int, x: int | None):
    """What a thread owes after lookahead ``k``'s automaton reached ``x``: ``_DEAD`` (the
    thread fails), ``_PAID`` (nothing more) or the debt ``(k, kind, x)``."""
    if x is None:  # X can no longer match here
        return _PAID if kind == "!" else _DEAD
    if look.accept[x]:  # X matched (and anything may follow)
        return _DEAD if kind == "!" else _PAID
    return (k, kind, x)


def _is_word(cp: int) -> bool:
    return any(lo <= cp <= hi for lo, hi in _WORD)
