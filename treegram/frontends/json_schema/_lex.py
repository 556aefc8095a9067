"""Lexeme builders for the JSON Schema frontend: strings, escapes, numbers, literals.

Every function returns an IR expression (no rules), so a caller can inline the lexeme in
the rule that also reads the punctuation after it. Strings are described at the level of
*encoded* JSON text: a decoded character may be written raw (when JSON allows it) or as
an escape sequence, and every escape spells exactly one decoded character.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from treegram.frontends.json_schema._share import HOIST_SIZE, mark_small
from treegram.ir import (
    MAX_CODEPOINT,
    Bytes,
    CharClass,
    Choice,
    Expr,
    Repeat,
    Seq,
    complement_ranges,
    intersect_ranges,
    normalize_ranges,
)

__all__ = [
    "EMPTY",
    "seq",
    "alt",
    "lit",
    "cls",
    "string_char",
    "encoded_class",
    "encode_expr",
    "build_template",
    "copy_build",
    "encoded_text",
    "string_of",
    "int_range",
    "decimal_range",
    "NUMBER",
    "INTEGER",
]

EMPTY = Seq(())
# Code points JSON allows unescaped inside a string.
_RAW_OK = ((0x20, 0x21), (0x23, 0x5B), (0x5D, MAX_CODEPOINT))
_SHORT_ESCAPES = {
    0x22: '"',
    0x5C: "\\",
    0x2F: "/",
    0x08: "b",
    0x0C: "f",
    0x0A: "n",
    0x0D: "r",
    0x09: "t",
}
_HEX = CharClass(((0x30, 0x39), (0x41, 0x46), (0x61, 0x66)))
_DIGIT = CharClass(((0x30, 0x39),))
_DIGIT19 = CharClass(((0x31, 0x39),))


def seq(*items: Expr | None) -> Expr | None:
    """Concatenate, flattening nested sequences; ``None`` (no match) absorbs."""
    out: list[Expr] = []
    for it in items:
        if it is None:
            return None
        if isinstance(it, Seq):
            out.extend(it.items)
        else:
            out.append(it)
    return out[0] if len(out) == 1 else Seq(tuple(out))


def alt(*items: Expr | None) -> Expr | None:
    """Alternation without duplicates; ``None`` items are dropped (all ``None`` -> ``None``)."""
    out: list[Expr] = []
    seen: set[int] = set()
    for it in items:
        if it is None:
            continue
        for sub in it.items if isinstance(it, Choice) else (it,):
            if id(sub) not in seen:
                seen.add(id(sub))
                out.append(sub)
    if not out:
        return None
    return out[0] if len(out) == 1 else Choice(tuple(out))


def lit(text: str) -> Bytes:
    """A literal string (UTF-8 encoded)."""
    return Bytes(text.encode("utf-8"))


def cls(ranges, negated: bool = False) -> CharClass:
    """A character class from inclusive code point ranges (normalized here)."""
    return CharClass(normalize_ranges(ranges), negated)


# ---------------------------------------------------------------------------------------
# Fixed-width digit ranges (used for \uXXXX escapes and integer ranges).


def _fixed_range(lo: int, hi: int, width: int, base: int, digit) -> Expr | None:
    """Every ``width``-digit base-``base`` numeral whose value lies in ``[lo, hi]``.

    ``digit(position, a, b)`` returns the expression for one digit with value in
    ``[a, b]`` at ``position`` (0 = most significant).
    """
    if lo > hi:
        return None
    return _fixed_range_at(lo, hi, width, base, digit, 0)


def _fixed_range_at(lo, hi, width, base, digit, pos) -> Expr | None:
    if width == 0:
        return EMPTY
    unit = base ** (width - 1)
    a, b = lo // unit, hi // unit
    lo_rest, hi_rest = lo % unit, hi % unit
    if a == b:
        return seq(
            digit(pos, a, a), _fixed_range_at(lo_rest, hi_rest, width - 1, base, digit, pos + 1)
        )
    full = unit - 1
    parts = []
    start, stop = a, b
    if lo_rest != 0:
        parts.append(
            seq(digit(pos, a, a), _fixed_range_at(lo_rest, full, width - 1, base, digit, pos + 1))
        )
        start = a + 1
    if hi_rest != full:
        stop = b - 1
    if start <= stop:
        parts.append(
            seq(digit(pos, start, stop), _fixed_range_at(0, full, width - 1, base, digit, pos + 1))
        )
    if hi_rest != full:
        parts.append(
            seq(digit(pos, b, b), _fixed_range_at(0, hi_rest, width - 1, base, digit, pos + 1))
        )
    return alt(*parts)


def _hex_digit(_pos: int, a: int, b: int) -> Expr:
    return _hex_digit_class(a, b)


@functools.cache  # 136 digit ranges; every \\u escape asks for them
def _hex_digit_class(a: int, b: int) -> CharClass:
    ranges = []
    for v in range(a, b + 1):
        if v < 10:
            ranges.append((0x30 + v, 0x30 + v))
        else:
            ranges.extend([(0x41 + v - 10, 0x41 + v - 10), (0x61 + v - 10, 0x61 + v - 10)])
    return cls(ranges)


def _hex4(lo: int, hi: int) -> Expr | None:
    """``\\u`` followed by four hex digits (either case) with value in ``[lo, hi]``."""
    body = _fixed_range(lo, hi, 4, 16, _hex_digit)
    return None if body is None else seq(lit("\\u"), body)


def _surrogate_digit(pos: int, a: int, b: int) -> Expr:
    base = 0xD800 if pos == 0 else 0xDC00
    return _hex4(base + a, base + b)


def _unicode_escapes(ranges) -> Expr | None:
    """``\\uXXXX`` escapes (surrogate pairs above U+FFFF) spelling a code point in ``ranges``."""
    parts = []
    for lo, hi in ranges:
        for a, b in ((lo, min(hi, 0xD7FF)), (max(lo, 0xE000), min(hi, 0xFFFF))):
            if a <= b:
                parts.append(_hex4(a, b))
        a, b = max(lo, 0x10000), hi
        if a <= b:
            parts.append(_fixed_range(a - 0x10000, b - 0x10000, 2, 1024, _surrogate_digit))
    return alt(*parts)


# ---------------------------------------------------------------------------------------
# Encoded characters.


def encoded_class(ranges, negated: bool = False, *, once: bool = False) -> Expr | None:
    """Every encoding inside a JSON string of one decoded character from the class.

    Built once per class (:func:`_encoded_class_template`) and handed out as a fresh
    copy: callers share expressions by identity on purpose (rules hoisted from shared
    nodes, alternatives deduplicated by identity), so each call must get the new objects
    a build would give. A caller that asks for each class at most once per grammar (and
    shares the answer itself) passes ``once=True`` and gets the build itself: identity
    only matters inside one grammar, and the copy was most of a small schema's frontend
    (and of every later pass, which walked each copy again).

    Parameters
    ----------
    ranges : sequence of (int, int)
        Inclusive code point ranges.
    negated : bool
        Use the complement of ``ranges``.
    once : bool
        The caller takes this class at most once per grammar: no copy.

    Returns
    -------
    Expr or None
        Raw characters JSON allows, short escapes (``\\n``, ``\\"``...) and ``\\uXXXX``
        escapes; ``None`` when the class is empty.
    """
    template, constants = _encoded_class_template(tuple(map(tuple, ranges)), negated)
    if template is None or constants is None or once:
        return template
    return _fresh(template, constants, {})


@functools.lru_cache(maxsize=1024)
def _encoded_class_template(ranges, negated: bool) -> tuple[Expr | None, frozenset[int] | None]:
    """One build of :func:`encoded_class` and the ids of its nodes that every build
    shares (cached classes, module constants): the nodes that are not copied. An encoding
    smaller than ``share_rules`` hoists (``HOIST_SIZE`` nodes as a tree) is handed out as
    it is (``None`` for the ids): sharing it by identity makes no rule, and every later
    pass (hoisting, flattening, depth) walks it once instead of once per character."""
    first = _encoded_class_build(ranges, negated)
    if first is not None:
        first = _interned(first, {})
    if first is not None and _tree_size(first, HOIST_SIZE) < HOIST_SIZE:
        return first, None
    second = _encoded_class_build(ranges, negated)  # alive together: ids are distinct
    shared = _node_ids(first) & _node_ids(second)
    return first, frozenset(shared)


# Small subtrees of the encodings, one object per structure (see _interned); cleared when
# it grows past _SMALL_LIMIT (the encodings already built keep theirs).
_SMALL: dict[tuple, Expr] = {}
_SMALL_LIMIT = 200_000


def _interned(node: Expr, memo: dict[int, tuple[Expr, int]]) -> Expr:
    """``node`` with every subtree smaller than ``HOIST_SIZE`` nodes (as a tree) replaced by
    one object per structure, shared by all encodings: ``\\u`` escapes spell the same hex
    digit sequences for many characters, and every later pass (hoisting, flattening) walks
    each object once per grammar. A shared subtree this small is never hoisted into a rule,
    and every pass reads the grammar as a tree, so the grammar is the same."""
    return _intern_small(node, memo)[0]


def _intern_small(node: Expr, memo: dict[int, tuple[Expr, int]]) -> tuple[Expr, int]:
    got = memo.get(id(node))
    if got is not None:
        return got
    t = type(node)
    if t is Seq or t is Choice:
        kids = [_intern_small(c, memo) for c in node.items]  # type: ignore[union-attr]
        items = tuple(k for k, _ in kids)
        size = 1 + sum(n for _, n in kids)
        same = all(a is b for a, b in zip(items, node.items, strict=True))  # type: ignore[union-attr]
        new: Expr = node if same else t(items)  # type: ignore[operator]
        key: tuple = (t, *map(id, items))
    elif t is Repeat:
        item, n = _intern_small(node.item, memo)  # type: ignore[union-attr]
        size = 1 + n
        new = node if item is node.item else Repeat(item, node.min, node.max)  # type: ignore[union-attr]
        key = (t, id(item), node.min, node.max)  # type: ignore[union-attr]
    elif t is Bytes:
        new, size, key = node, 1, (t, node.data)  # type: ignore[union-attr]
    elif t is CharClass:
        new, size, key = node, 1, (t, node.ranges, node.negated)  # type: ignore[union-attr]
    else:  # pragma: no cover - encodings hold no other nodes
        raise TypeError(f"unexpected node {node!r}")
    if size < HOIST_SIZE:
        if len(_SMALL) > _SMALL_LIMIT:
            _SMALL.clear()
        new = _SMALL.setdefault(key, new)
        if t is not Bytes and t is not CharClass:
            mark_small(new)  # its inner children are interned, and marked, already
    memo[id(node)] = (new, size)
    return new, size


def _tree_size(expr: Expr, cap: int) -> int:
    """Nodes of ``expr`` counted as a tree (a shared node once per path), as ``share_rules``
    sizes them, up to ``cap``."""
    n = 0
    stack = [expr]
    while stack and n < cap:
        node = stack.pop()
        n += 1
        if isinstance(node, (Seq, Choice)):
            stack.extend(node.items)
        elif isinstance(node, Repeat):
            stack.append(node.item)
    return n


def _node_ids(expr: Expr | None) -> set[int]:
    out: set[int] = set()
    stack = [] if expr is None else [expr]
    while stack:
        node = stack.pop()
        if id(node) not in out:
            out.add(id(node))
            if isinstance(node, (Seq, Choice)):
                stack.extend(node.items)
            elif isinstance(node, Repeat):
                stack.append(node.item)
    return out


def build_template(build: Callable[[], Expr | None]) -> tuple[Expr | None, frozenset[int]]:
    """``build()`` once, to be handed out as copies (:func:`copy_build`), and the ids of
    its nodes that every build shares (cached classes, interned subtrees, module
    constants): the nodes a copy keeps. ``build`` must depend on nothing but what its
    caller keys the template by.

    Callers share expressions by identity on purpose (``share_rules`` hoists a large node
    referenced twice), so each use must get the new objects a build would give; a copy is
    that, for a fraction of a build (a format's encoding walks every character class of
    its language again)."""
    first = build()
    if first is None:
        return None, frozenset()
    second = build()  # alive together: ids are distinct
    return first, frozenset(_node_ids(first) & _node_ids(second))


def copy_build(template: tuple[Expr | None, frozenset[int]]) -> Expr | None:
    """A copy of a :func:`build_template` build, as a new build would be: new objects
    but for the shared ones, with the sharing between its nodes kept."""
    first, constants = template
    return None if first is None else _fresh(first, constants, {})


def _fresh(node: Expr, constants: frozenset[int], memo: dict[int, Expr]) -> Expr:
    """A copy of ``node`` with new objects for every node outside ``constants``, keeping
    the sharing between its nodes (the expressions are a few levels deep)."""
    if id(node) in constants:
        return node
    got = memo.get(id(node))
    if got is not None:
        return got
    t = type(node)
    if t is Seq:
        new: Expr = Seq(tuple(_fresh(c, constants, memo) for c in node.items))  # type: ignore[union-attr]
    elif t is Choice:
        new = Choice(tuple(_fresh(c, constants, memo) for c in node.items))  # type: ignore[union-attr]
    elif t is Repeat:
        new = Repeat(_fresh(node.item, constants, memo), node.min, node.max)  # type: ignore[union-attr]
    elif t is Bytes:
        new = Bytes(node.data)  # type: ignore[union-attr]
    elif t is CharClass:
        new = CharClass(node.ranges, node.negated)  # type: ignore[union-attr]
    else:  # pragma: no cover - encodings hold no other nodes
        raise TypeError(f"unexpected node {node!r}")
    memo[id(node)] = new
    return new


def _encoded_class_build(ranges, negated: bool) -> Expr | None:
    ranges = complement_ranges(ranges) if negated else normalize_ranges(ranges)
    raw = intersect_ranges(ranges, _RAW_OK)
    shorts = sorted(
        ch for cp, ch in _SHORT_ESCAPES.items() if any(lo <= cp <= hi for lo, hi in ranges)
    )
    short = None
    if shorts:
        short = seq(lit("\\"), cls([(ord(c), ord(c)) for c in shorts]))
    return alt(CharClass(raw) if raw else None, short, _unicode_escapes(ranges))


_ANY_CHAR_CACHE: list[Expr] = []


def string_char() -> Expr:
    """One decoded character of any JSON string, in any of its encodings."""
    if not _ANY_CHAR_CACHE:
        # \\uXXXX outside the surrogates, or a surrogate pair: one character each.
        escape = alt(
            seq(lit("\\"), cls([(ord(c), ord(c)) for c in '"\\/bfnrt'])),
            _unicode_escapes(((0, MAX_CODEPOINT),)),
        )
        _ANY_CHAR_CACHE.append(alt(CharClass(_RAW_OK), escape))
    return _ANY_CHAR_CACHE[0]


def json_string_unit() -> Expr:
    """One unit of an *unconstrained* JSON string, exactly as RFC 8259's grammar has it: a
    raw character or an escape, ``\\u`` followed by any four hex digits (lone surrogates
    included, as in xgrammar's grammars). Use :func:`string_char` where decoded characters
    are counted."""
    if not _JSON_UNIT_CACHE:
        escape = alt(seq(lit("\\"), cls([(ord(c), ord(c)) for c in '"\\/bfnrt'])), _hex4(0, 0xFFFF))
        _JSON_UNIT_CACHE.append(alt(CharClass(_RAW_OK), escape))
    return _JSON_UNIT_CACHE[0]


_JSON_UNIT_CACHE: list = []


def encoded_text(text: str) -> Expr:
    """Every encoding of the decoded string ``text`` (without the quotes)."""
    items = []
    for ch in text:
        cp = ord(ch)
        items.append(encoded_class(((cp, cp),)))
    return seq(*items) if items else EMPTY


def canonical_text(text: str) -> Expr:
    """The spellings of ``text`` that generation should produce, for property names and
    ``const``/``enum`` strings: printable ASCII other than ``"`` and ``\\`` only as itself
    (as ``json.dumps`` writes it, and as xgrammar's grammars do), every other character in
    any of its encodings (``json.dumps`` escapes them when ``ensure_ascii`` is set)."""
    items = []
    run = []
    for ch in text:
        cp = ord(ch)
        if 0x20 <= cp < 0x7F and ch not in '"\\':
            run.append(ch)
            continue
        if run:
            items.append(lit("".join(run)))
            run = []
        items.append(encoded_class(((cp, cp),)))
    if run:
        items.append(lit("".join(run)))
    return seq(*items) if items else EMPTY


def encode_expr(expr: Expr) -> Expr | None:
    """Map a regex expression over decoded characters to one over encoded JSON text.

    Literals and classes become :func:`encoded_text` / :func:`encoded_class`; the
    structure (sequence, choice, repetition) is kept.
    """
    if isinstance(expr, Bytes):
        return encoded_text(expr.data.decode("utf-8"))
    if isinstance(expr, CharClass):
        return encoded_class(expr.ranges, expr.negated)
    if isinstance(expr, Seq):
        return seq(*(encode_expr(e) for e in expr.items)) if expr.items else EMPTY
    if isinstance(expr, Choice):
        return alt(*(encode_expr(e) for e in expr.items))
    if isinstance(expr, Repeat):
        inner = encode_expr(expr.item)
        if inner is None:
            return EMPTY if expr.min == 0 else None
        return Repeat(inner, expr.min, expr.max)
    raise TypeError(f"regex expression contains an unexpected node {expr!r}")


def string_of(body: Expr | None) -> Expr | None:
    """A JSON string literal whose encoded content matches ``body``."""
    return None if body is None else seq(lit('"'), body, lit('"'))


# ---------------------------------------------------------------------------------------
# Numbers.

_FRACTION = seq(lit("."), Repeat(_DIGIT, 1, None))
_EXPONENT = seq(
    cls([(ord("e"), ord("e")), (ord("E"), ord("E"))]),
    Repeat(cls([(ord("+"), ord("+")), (ord("-"), ord("-"))]), 0, 1),
    Repeat(_DIGIT, 1, None),
)
INTEGER = alt(lit("0"), seq(Repeat(lit("-"), 0, 1), _DIGIT19, Repeat(_DIGIT, 0, None)))
NUMBER = seq(
    Repeat(lit("-"), 0, 1),
    alt(lit("0"), seq(_DIGIT19, Repeat(_DIGIT, 0, None))),
    Repeat(_FRACTION, 0, 1),
    Repeat(_EXPONENT, 0, 1),
)

ZERO_FRACTION = Repeat(seq(lit("."), Repeat(lit("0"), 1, None)), 0, 1)
"""An optional fraction of zeros (``1.0`` is the integer 1)."""

FRACTIONAL_NUMBER = seq(
    Repeat(lit("-"), 0, 1),
    alt(lit("0"), seq(_DIGIT19, Repeat(_DIGIT, 0, None))),
    lit("."),
    Repeat(_DIGIT, 0, None),
    _DIGIT19,
    Repeat(_DIGIT, 0, None),
)
"""Numbers with a non-zero fraction digit and no exponent: non-integers, written plainly."""


def _dec_digit(_pos: int, a: int, b: int) -> Expr:
    return CharClass(((0x30 + a, 0x30 + b),))


def _uint_range(lo: int, hi: int | None) -> Expr | None:
    """Canonical decimal numerals (no leading zeros) of the integers in ``[lo, hi]``."""
    if lo < 0 or (hi is not None and hi < lo):
        return None
    parts = []
    if lo == 0:
        parts.append(lit("0"))
        lo = 1
        if hi is not None and hi < 1:
            return parts[0]
    n_lo = len(str(lo))
    top = len(str(hi)) if hi is not None else n_lo
    for n in range(n_lo, top + 1):
        a = max(lo, 10 ** (n - 1))
        b = 10**n - 1 if hi is None else min(hi, 10**n - 1)
        parts.append(_fixed_range(a, b, n, 10, _dec_digit))
    if hi is None:
        parts.append(seq(_DIGIT19, Repeat(_DIGIT, n_lo, None)))
    return alt(*parts)


def int_range(lo: int | None, hi: int | None) -> Expr | None:
    """JSON integers (``0`` or ``-?[1-9][0-9]*``) in ``[lo, hi]``; ``None`` bounds are open.

    Returns
    -------
    Expr or None
        ``None`` when the range is empty.
    """
    if lo is not None and hi is not None and lo > hi:
        return None
    parts = []
    if hi is None or hi >= 0:
        parts.append(_uint_range(max(lo, 0) if lo is not None else 0, hi))
    if lo is None or lo < 0:
        mag_lo = max(1, -hi) if hi is not None else 1
        mag_hi = -lo if lo is not None else None
        parts.append(seq(lit("-"), _uint_range(mag_lo, mag_hi)))
    return alt(*parts)


def _split_decimal(value) -> tuple[int, str]:
    """Split a non-negative finite bound into its whole part and fraction digits."""
    from decimal import Decimal

    text = format(Decimal(str(value)).normalize(), "f")
    whole, _, frac = text.partition(".")
    return int(whole), frac.rstrip("0")


def _norm_low(low: str | None, strict: bool) -> str | None:
    return None if low == "" and not strict else low


def _zero_ok(low: str | None, lo_strict: bool, high: str | None, hi_strict: bool) -> bool:
    """Whether a fraction of value 0 satisfies the (remaining) bounds."""
    low = _norm_low(low, lo_strict)
    if low is not None:
        return False
    return not (high == "" and hi_strict)


def _frac_digits(low, lo_strict, high, hi_strict) -> Expr | None:
    """Non-empty digit strings ``f`` with ``0.low <(=) 0.f <(=) 0.high``.

    ``low``/``high`` are digit strings without trailing zeros (``""`` is zero) or ``None``
    for no bound on that side; ``*_strict`` make the bound exclusive.
    """
    low = _norm_low(low, lo_strict)
    if low is None and high is None:
        return Repeat(_DIGIT, 1, None)
    if high == "":
        return Repeat(lit("0"), 1, None) if low is None and not hi_strict else None
    if low == "" and high is None:  # some non-zero digit
        return seq(Repeat(lit("0"), 0, None), _DIGIT19, Repeat(_DIGIT, 0, None))
    groups: list[tuple[int, int, str | None, str | None]] = []
    for d in range(10):
        nxt = _next_bounds(d, low, high)
        if nxt is None:
            continue
        if groups and groups[-1][1] == d - 1 and groups[-1][2:] == nxt:
            groups[-1] = (groups[-1][0], d, *nxt)
        else:
            groups.append((d, d, *nxt))
    parts = []
    for a, b, nlow, nhigh in groups:
        tail = _frac_digits(nlow, lo_strict, nhigh, hi_strict)
        rest = alt(EMPTY if _zero_ok(nlow, lo_strict, nhigh, hi_strict) else None, tail)
        parts.append(seq(_dec_digit(0, a, b), rest))
    return alt(*parts)


def _next_bounds(d: int, low: str | None, high: str | None):
    """Bounds on the remaining digits after digit ``d``; ``None`` when ``d`` is excluded."""
    if low is None:
        nlow = None
    else:
        lo_d = int(low[0]) if low else 0
        if d < lo_d:
            return None
        nlow = low[1:] if d == lo_d else None
    if high is None:
        nhigh = None
    else:
        hi_d = int(high[0]) if high else 0
        if d > hi_d:
            return None
        nhigh = high[1:] if d == hi_d else None
    return nlow, nhigh


def _frac_opt(low, lo_strict, high, hi_strict) -> Expr | None:
    """The optional ``.digits`` part of a numeral under fraction bounds."""
    digits = _frac_digits(low, lo_strict, high, hi_strict)
    return alt(
        EMPTY if _zero_ok(low, lo_strict, high, hi_strict) else None,
        seq(lit("."), digits) if digits is not None else None,
    )


_ANY_FRAC = Repeat(_FRACTION, 0, 1)


def _magnitude(lo, lo_strict: bool, hi, hi_strict: bool) -> Expr | None:
    """Unsigned numerals without exponent whose value lies in the range (``None`` open)."""
    wl, low = (0, None) if lo is None else _split_decimal(lo)
    if hi is None:
        return alt(
            seq(_uint_range(wl, wl), _frac_opt(low, lo_strict, None, False)),
            seq(_uint_range(wl + 1, None), _ANY_FRAC),
        )
    wh, high = _split_decimal(hi)
    if wl > wh:
        return None
    if wl == wh:
        return seq(_uint_range(wl, wl), _frac_opt(low, lo_strict, high, hi_strict))
    return alt(
        seq(_uint_range(wl, wl), _frac_opt(low, lo_strict, None, False)),
        seq(_uint_range(wl + 1, wh - 1), _ANY_FRAC) if wh - wl > 1 else None,
        seq(_uint_range(wh, wh), _frac_opt(None, False, high, hi_strict)),
    )


def decimal_range(lo, lo_strict: bool, hi, hi_strict: bool) -> Expr | None:
    """JSON numbers without exponent whose value lies between the optional bounds.

    Parameters
    ----------
    lo, hi : int, float or None
        Bounds (``None`` is open).
    lo_strict, hi_strict : bool
        Exclusive bounds.

    Returns
    -------
    Expr or None
        ``None`` when no number fits. ``-0`` and ``-0.0`` are accepted where zero is.
    """
    parts = []
    if hi is None or hi > 0 or (hi == 0 and not hi_strict):
        if lo is None or lo < 0:
            parts.append(_magnitude(0, False, hi, hi_strict))
        else:
            parts.append(_magnitude(lo, lo_strict, hi, hi_strict))
    if lo is None or lo < 0 or (lo == 0 and not lo_strict):
        upper = None if lo is None else -lo
        if hi is not None and hi <= 0:
            mag = _magnitude(-hi, hi_strict, upper, lo_strict)
        else:
            mag = _magnitude(0, False, upper, lo_strict)
        parts.append(seq(lit("-"), mag))
    return alt(*parts)
