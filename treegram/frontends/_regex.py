"""Regex frontend: a regular expression -> :class:`GrammarIR`.

The dialect is the ECMA-262 one that JSON Schema ``pattern`` uses and that xgrammar's
``Grammar.from_regex`` accepts. A regex grammar matches the *whole* string (as
``re.fullmatch`` does), so ``^`` and ``$`` add nothing and are accepted only where they
cannot change the language: ``^`` where nothing can precede it and ``$`` where nothing
can follow it (the start and end of the pattern, of a top-level alternative, or of a
group in such a place). Anywhere else they raise :class:`RegexSyntaxError`.

Supported syntax
----------------
- literals, including any Unicode character but NUL (U+0000 must be written as an escape,
  as xgrammar requires); ``]``, ``}`` and a ``{`` that does not start a counted quantifier
  are literals (ECMA-262 Annex B, as in browsers), except a ``{`` that starts a malformed
  count (digits, commas and spaces up to ``}`` or the end: ``a{,3}``, ``a{2``,
  ``a{ 2}``), which is an invalid repetition count as in xgrammar (Python reads
  ``{,3}`` as ``{0,3}``, ECMA-262 as a literal: the dialects disagree);
- escapes: ``\\n \\t \\r \\f \\v \\0`` (not followed by a digit), ``\\a \\e`` (xgrammar
  extensions), ``\\xHH``, ``\\uHHHH`` (a surrogate pair ``\\uD83D\\uDE00`` is one code
  point), ``\\u{H...}``, ``\\cX`` (control letter) and ``\\`` followed by any character
  that is not an ASCII letter or digit (that character itself);
- ``.``: any code point, line terminators included (as xgrammar; ECMA-262 excludes
  ``\\n \\r \\u2028 \\u2029``);
- classes ``[...]`` and ``[^...]`` with ranges, escapes, ``\\b`` (backspace) and class
  escapes; a ``-`` next to a class escape is a literal (Annex B); ``[^]`` is any code
  point; ``[]`` (which can never match) is an error;
- class escapes (ASCII, as in ECMA-262 without the ``i``/``u`` flags): ``\\d`` is
  ``[0-9]``, ``\\w`` is ``[A-Za-z0-9_]``, ``\\s`` is ``[\\t\\n\\v\\f\\r \\u00a0]`` (xgrammar's
  set; ECMA-262 also counts U+1680, U+2000..U+200A, U+2028, U+2029, U+202F, U+205F,
  U+3000 and U+FEFF), and their complements ``\\D \\W \\S``;
- quantifiers ``* + ? {m} {m,} {m,n}`` and their lazy forms (``*?`` ...), which accept
  the same strings as the greedy ones; counted repeats stay compact :class:`Repeat`
  nodes;
- groups ``( )``, ``(?: )``, ``(?<name> )``, ``(?P<name> )`` and alternation ``|``.

Unsupported constructs (backreferences, lookaround, word boundaries, Unicode property
escapes, inline flags and comments, possessive quantifiers, octal escapes) raise
:class:`RegexSyntaxError` naming the construct and its position.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import NoReturn

from treegram.errors import ArgumentError, RegexSyntaxError
from treegram.ir import (
    MAX_CODEPOINT,
    Bytes,
    CharClass,
    Choice,
    Expr,
    GrammarIR,
    Ranges,
    Repeat,
    Rule,
    Seq,
    complement_ranges,
    normalize_ranges,
)

__all__ = ["regex_to_ir", "regex_to_expr", "RegexSyntaxError"]


_DIGIT: Ranges = ((0x30, 0x39),)
_WORD: Ranges = ((0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A))
# \t \n \v \f \r, space, no-break space: the set xgrammar 0.2.8 uses for \s.
_SPACE: Ranges = ((0x09, 0x0D), (0x20, 0x20), (0xA0, 0xA0))
_ANY: Ranges = ((0, MAX_CODEPOINT),)

# Class escapes: letter -> (ranges, complemented).
_CLASS_ESCAPES = {
    "d": (_DIGIT, False), "D": (_DIGIT, True),
    "w": (_WORD, False), "W": (_WORD, True),
    "s": (_SPACE, False), "S": (_SPACE, True),
}  # fmt: skip
_CONTROL_ESCAPES = {
    "n": 0x0A, "t": 0x09, "r": 0x0D, "f": 0x0C, "v": 0x0B, "0": 0x00,
    "a": 0x07, "e": 0x1B,
}  # fmt: skip

_COUNTED = re.compile(r"\{([0-9]+)(?:(,)([0-9]*))?\}")
# A '{' that tries to be a count but is not one: digits or commas (spaces allowed) up to '}'
# or the end of the pattern.
_BAD_COUNT = re.compile(r"\{[0-9 ]*[0-9,][0-9 ,]*(?:\}|$)")
_HEX2 = re.compile(r"[0-9A-Fa-f]{2}")
_HEX4 = re.compile(r"[0-9A-Fa-f]{4}")
_HEX_BRACED = re.compile(r"\{([0-9A-Fa-f]+)\}")
_GROUP_NAME = re.compile(r"[A-Za-z_$][A-Za-z0-9_$]*")
_INLINE_FLAGS = re.compile(r"[-a-zA-Z]+[:)]")

# Maximal nesting of groups (keeps recursion well below Python's limit).
_MAX_DEPTH = 100
# Repetition counts: at most 18 digits (Python refuses to parse 4,300 and more).
_MAX_COUNT_DIGITS = 18


@dataclass(frozen=True)
class _Anchor:
    """``^`` or ``$`` while parsing; checked and removed before the IR is returned."""

    kind: str
    pos: int


# ----------------------------------------------------------------------------- ranges


# ----------------------------------------------------------------------------- parser


class _Parser:
    """Recursive descent over the pattern; produces IR nodes plus :class:`_Anchor`."""

    def __init__(self, pattern: str, dot_all: bool = True, ignore_case: bool = False) -> None:
        self.text = pattern
        self.pos = 0
        self.depth = 0
        self.dot = _ANY if dot_all else complement_ranges(((0x0A, 0x0A),))
        self.ignore_case = ignore_case

    def error(self, message: str, pos: int | None = None) -> NoReturn:
        raise RegexSyntaxError(message, self.text, self.pos if pos is None else pos)

    def peek(self, k: int = 0) -> str:
        i = self.pos + k
        return self.text[i] if i < len(self.text) else ""

    # -- structure

    def parse(self) -> Expr:
        expr = self.parse_alternation()
        if self.pos < len(self.text):  # only a stray ')' stops the top level early
            self.error("unmatched ')'")
        return expr

    def parse_alternation(self) -> Expr:
        items = [self.parse_sequence()]
        while self.peek() == "|":
            self.pos += 1
            items.append(self.parse_sequence())
        return items[0] if len(items) == 1 else Choice(tuple(items))

    def parse_sequence(self) -> Expr:
        items: list[Expr] = []
        while self.pos < len(self.text) and self.peek() not in "|)":
            items.append(self.parse_quantified())
        return Seq(tuple(items))

    def parse_quantified(self) -> Expr:
        atom = self.parse_atom()
        quant = self.read_quantifier()
        if quant is None:
            return atom
        lo, hi, qpos = quant
        if isinstance(atom, _Anchor):
            self.error(f"quantifier after the anchor {atom.kind!r} repeats nothing", qpos)
        if self.peek() == "?":  # lazy: same strings as greedy
            self.pos += 1
        elif self.peek() == "+":
            self.error("possessive quantifiers (such as 'a*+') are not supported")
        nxt = self.read_quantifier()
        if nxt is not None:
            self.error("two quantifiers in a row (nothing to repeat)", nxt[2])
        if hi is not None and lo > hi:
            self.error(f"quantifier {{{lo},{hi}}} has its minimum above its maximum", qpos)
        return Repeat(atom, lo, hi)

    def read_quantifier(self) -> tuple[int, int | None, int] | None:
        """Consume a quantifier if one starts here; return (min, max, position)."""
        c, pos = self.peek(), self.pos
        if c == "*":
            self.pos += 1
            return 0, None, pos
        if c == "+":
            self.pos += 1
            return 1, None, pos
        if c == "?":
            self.pos += 1
            return 0, 1, pos
        if c == "{":
            m = _COUNTED.match(self.text, pos)
            if m is None and _BAD_COUNT.match(self.text, pos):
                self.error("invalid repetition count", pos)
            if m is None:
                return None  # a literal '{' (Annex B)
            if max(len(m.group(1)), len(m.group(3) or "")) > _MAX_COUNT_DIGITS:
                self.error(f"repetition count with more than {_MAX_COUNT_DIGITS} digits", pos)
            self.pos = m.end()
            lo = int(m.group(1))
            if m.group(2) is None:
                return lo, lo, pos
            return lo, (int(m.group(3)) if m.group(3) else None), pos
        return None

    def parse_atom(self) -> Expr | _Anchor:
        c, pos = self.peek(), self.pos
        if c in "*+?" or (c == "{" and _COUNTED.match(self.text, pos)):
            self.error(f"quantifier {c!r} has nothing to repeat")
        if c == "{" and _BAD_COUNT.match(self.text, pos):
            self.error("invalid repetition count")
        if c == "^" or c == "$":
            self.pos += 1
            return _Anchor(c, pos)
        if c == "(":
            return self.parse_group()
        if c == "[":
            return self.parse_class()
        if c == ".":
            self.pos += 1
            return _class_node(self.dot)
        if c == "\\":
            value = self.read_escape(in_class=False)
            if isinstance(value, int):
                return self.literal(value, pos)
            return _class_node(_fold(value) if self.ignore_case else value)
        self.pos += 1
        return self.literal(ord(c), pos)

    def literal(self, cp: int, pos: int) -> Bytes | CharClass:
        if 0xD800 <= cp <= 0xDFFF:
            self.error(f"lone surrogate U+{cp:04X} cannot occur in UTF-8 text", pos)
        if self.ignore_case and chr(cp).isascii() and chr(cp).isalpha():
            return CharClass(_fold(((cp, cp),)))
        return Bytes(chr(cp).encode("utf-8"))

    def parse_group(self) -> Expr:
        open_pos = self.pos
        self.pos += 1
        if self.peek() == "?":
            self.read_group_prefix(open_pos)
        self.depth += 1
        if self.depth > _MAX_DEPTH:
            self.error(f"groups nested more than {_MAX_DEPTH} deep", open_pos)
        expr = self.parse_alternation()
        self.depth -= 1
        if self.peek() != ")":
            self.error(f"unclosed group: '(' at position {open_pos} has no ')'")
        self.pos += 1
        return expr

    def read_group_prefix(self, open_pos: int) -> None:
        """Consume ``?:``, ``?<name>`` or ``?P<name>``; refuse every other ``(?`` form."""
        text, p = self.text, self.pos  # text[p] == "?"
        rest = text[p + 1 : p + 4]
        if rest.startswith(":"):
            self.pos = p + 2
            return
        unsupported = (
            ("<=", "lookbehind assertion '(?<='"),
            ("<!", "negative lookbehind assertion '(?<!'"),
            ("=", "lookahead assertion '(?='"),
            ("!", "negative lookahead assertion '(?!'"),
            ("P=", "named backreference '(?P='"),
            ("P>", "recursive pattern '(?P>'"),
            ("#", "inline comment '(?#'"),
        )
        for prefix, name in unsupported:
            if rest.startswith(prefix):
                self.error(f"{name} is not supported", open_pos)
        name_start = p + 2 if rest.startswith("<") else p + 3 if rest.startswith("P<") else -1
        if name_start < 0:
            if _INLINE_FLAGS.match(text, p + 1):
                self.error("inline flags such as '(?i)' are not supported", open_pos)
            self.error("invalid group syntax after '(?'", open_pos)
        m = _GROUP_NAME.match(text, name_start)
        if m is None or text[m.end() : m.end() + 1] != ">":
            self.error("invalid group name: expected an identifier followed by '>'", name_start)
        self.pos = m.end() + 1

    # -- escapes and classes

    def read_escape(self, in_class: bool) -> int | Ranges:
        """Decode the escape at ``pos`` (a backslash): a code point, or class ranges."""
        text, pos = self.text, self.pos
        if pos + 1 >= len(text):
            self.error("the pattern ends with a lone backslash '\\'")
        c = text[pos + 1]
        self.pos = pos + 2
        if c in _CLASS_ESCAPES:
            ranges, negate = _CLASS_ESCAPES[c]
            return complement_ranges(ranges) if negate else ranges
        if c == "0" and self.peek().isdigit():
            self.error("octal escapes (such as '\\01') are not supported", pos)
        if c in _CONTROL_ESCAPES:
            return _CONTROL_ESCAPES[c]
        if c == "b":
            if in_class:
                return 0x08
            self.error("word boundary assertion '\\b' is not supported", pos)
        if c == "B":
            self.error("word boundary assertion '\\B' is not supported", pos)
        if c in "123456789":
            self.error(f"backreference '\\{c}' is not supported", pos)
        if c == "k":
            self.error("named backreference '\\k' is not supported", pos)
        if c in "pP":
            self.error(f"Unicode property escape '\\{c}' is not supported", pos)
        if c == "x":
            m = _HEX2.match(text, self.pos)
            if m is None:
                self.error("invalid escape: '\\x' must be followed by two hex digits", pos)
            self.pos = m.end()
            return int(m.group(), 16)
        if c == "u":
            return self.read_unicode_escape(pos)
        if c == "c":
            letter = self.peek()
            if not ("a" <= letter <= "z" or "A" <= letter <= "Z"):
                self.error("invalid escape: '\\c' must be followed by an ASCII letter", pos)
            self.pos += 1
            return ord(letter) % 32
        if c.isascii() and c.isalnum():
            self.error(f"unknown escape '\\{c}'", pos)
        return ord(c)  # identity escape: '\.', '\/', '\-', ...

    def read_unicode_escape(self, pos: int) -> int:
        text = self.text
        m = _HEX_BRACED.match(text, self.pos)
        if m is not None:
            cp = int(m.group(1), 16)
            if cp > MAX_CODEPOINT:
                self.error(f"invalid escape: U+{cp:X} is above U+10FFFF", pos)
            self.pos = m.end()
            return cp
        m = _HEX4.match(text, self.pos)
        if m is None:
            self.error("invalid escape: '\\u' must be followed by 4 hex digits or {hex}", pos)
        self.pos = m.end()
        cp = int(m.group(), 16)
        if 0xD800 <= cp <= 0xDBFF and text.startswith("\\u", self.pos):
            low = _HEX4.match(text, self.pos + 2)
            if low is not None and 0xDC00 <= int(low.group(), 16) <= 0xDFFF:
                self.pos = low.end()
                return 0x10000 + ((cp - 0xD800) << 10) + (int(low.group(), 16) - 0xDC00)
        return cp

    def parse_class(self) -> CharClass:
        text, open_pos = self.text, self.pos
        self.pos += 1
        negated = self.peek() == "^"
        if negated:
            self.pos += 1
        ranges: list[tuple[int, int]] = []
        while True:
            if self.pos >= len(text):
                self.error(f"unclosed character class: '[' at position {open_pos} has no ']'")
            if self.peek() == "]":
                self.pos += 1
                break
            item_pos = self.pos
            lo = self.read_class_atom()
            if self.peek() == "-" and self.peek(1) not in ("]", ""):
                save = self.pos
                self.pos += 1
                hi = self.read_class_atom()
                if isinstance(lo, int) and isinstance(hi, int):
                    if lo > hi:
                        self.error(
                            f"character range out of order: U+{lo:04X} > U+{hi:04X}", item_pos
                        )
                    ranges.append((lo, hi))
                    continue
                # A class escape on either side: '-' is a literal (Annex B).
                self.pos = save
            if isinstance(lo, int):
                ranges.append((lo, lo))
            else:
                ranges.extend(lo)
        merged = normalize_ranges(ranges)
        if self.ignore_case:  # fold before negating: (?i)[^k] excludes 'K' too
            merged = _fold(merged)
        if not merged and not negated:
            self.error("empty character class '[]' can never match", open_pos)
        members = complement_ranges(merged) if negated else merged
        if not members:
            self.error("character class matches no character", open_pos)
        return _class_node(members)

    def read_class_atom(self) -> int | Ranges:
        if self.peek() == "\\":
            return self.read_escape(in_class=True)
        c = self.peek()
        self.pos += 1
        return ord(c)


def _fold(ranges: Ranges) -> Ranges:
    """``ranges`` plus the other case of every ASCII letter in them (the ``i`` flag folds
    ASCII only, as xgrammar 0.2.8 does)."""
    extra = []
    for lo, hi in ranges:
        for a, b, shift in ((0x41, 0x5A, 0x20), (0x61, 0x7A, -0x20)):
            s, e = max(lo, a), min(hi, b)
            if s <= e:
                extra.append((s + shift, e + shift))
    return normalize_ranges((*ranges, *extra)) if extra else ranges


def _class_node(ranges: Ranges) -> CharClass:
    """A class of the code points in ``ranges``, written as the set or as its negated
    complement, whichever has fewer ranges."""
    others = complement_ranges(ranges)
    if others and len(others) < len(ranges):
        return CharClass(others, True)
    return CharClass(ranges)


# ----------------------------------------------------------------------------- anchors


def _check_anchors(expr: Expr | _Anchor, at_start: bool, at_end: bool, text: str) -> None:
    """Raise unless every ``^`` is where nothing can precede it and every ``$`` where
    nothing can follow it (so both match the empty string there and can be dropped)."""
    if isinstance(expr, _Anchor):
        ok = at_start if expr.kind == "^" else at_end
        if not ok:
            where = "start" if expr.kind == "^" else "end"
            raise RegexSyntaxError(
                f"anchor {expr.kind!r} is only supported at the {where} of the pattern "
                f"(a regex grammar always matches the whole string)",
                text,
                expr.pos,
            )
    elif isinstance(expr, Seq):
        items = expr.items
        n = len(items)
        # first index that is not '^' / last index that is not '$'
        first = next((i for i in range(n) if not _is_anchor(items[i], "^")), n)
        last = next((i for i in range(n - 1, -1, -1) if not _is_anchor(items[i], "$")), -1)
        for i, item in enumerate(items):
            _check_anchors(item, at_start and i <= first, at_end and i >= last, text)
    elif isinstance(expr, Choice):
        for item in expr.items:
            _check_anchors(item, at_start, at_end, text)
    elif isinstance(expr, Repeat):
        _check_anchors(expr.item, False, False, text)


def _is_anchor(expr: Expr | _Anchor, kind: str) -> bool:
    return isinstance(expr, _Anchor) and expr.kind == kind


# ----------------------------------------------------------------------------- lowering


def _lower(expr: Expr | _Anchor) -> Expr:
    """Drop anchors, flatten sequences and alternations, and merge adjacent literals."""
    if isinstance(expr, _Anchor):
        return Bytes(b"")
    if isinstance(expr, Seq):
        out: list[Expr] = []
        for item in map(_lower, expr.items):
            parts = item.items if isinstance(item, Seq) else (item,)
            for part in parts:
                if isinstance(part, Bytes):
                    if not part.data:
                        continue
                    if out and isinstance(out[-1], Bytes):
                        out[-1] = Bytes(out[-1].data + part.data)
                        continue
                out.append(part)
        if not out:
            return Bytes(b"")
        return out[0] if len(out) == 1 else Seq(tuple(out))
    if isinstance(expr, Choice):
        alts: list[Expr] = []
        for item in map(_lower, expr.items):
            alts.extend(item.items if isinstance(item, Choice) else (item,))
        return alts[0] if len(alts) == 1 else Choice(tuple(alts))
    if isinstance(expr, Repeat):
        item = _lower(expr.item)
        if item == Bytes(b"") or expr.max == 0:
            return Bytes(b"")
        if expr.min == 1 and expr.max == 1:
            return item
        return Repeat(item, expr.min, expr.max)
    return expr


# ----------------------------------------------------------------------------- public


def regex_to_expr(pattern: str, *, dot_all: bool = True, ignore_case: bool = False) -> Expr:
    """Translate a regular expression into one IR expression.

    Parameters
    ----------
    pattern : str
        The regular expression (the dialect is described in the module docstring). The
        expression matches exactly the strings that ``pattern`` matches as a whole, as
        ``re.fullmatch`` would.
    dot_all : bool, default True
        Whether ``.`` matches a line feed (``False`` is the ``s`` flag turned off, as in
        Lark regex terminals and EBNF ``Regex(..., flags=...)``).
    ignore_case : bool, default False
        The ``i`` flag: an ASCII letter also matches its other case (in literals,
        classes and class escapes; a negated class is folded before it is negated).

    Returns
    -------
    Expr
        An expression without rule references: literals are UTF-8 :class:`Bytes`
        (adjacent literals merged), classes are :class:`CharClass` with merged ranges,
        counted quantifiers stay compact :class:`Repeat` nodes.

    Raises
    ------
    RegexSyntaxError
        If ``pattern`` is malformed or uses an unsupported construct; the message names
        the construct and its position.
    ArgumentError
        If ``pattern`` is not a ``str``.
    """
    if not isinstance(pattern, str):
        raise ArgumentError(f"pattern must be a str, got {type(pattern).__name__}")
    if "\0" in pattern:  # as xgrammar: a raw NUL is refused, the escape \0 / \x00 is not
        raise RegexSyntaxError(
            "the regex must not contain a NUL character (write it as \\x00)",
            pattern,
            pattern.index("\0"),
        )
    parser = _Parser(pattern, dot_all, ignore_case)
    raw = parser.parse()
    _check_anchors(raw, True, True, pattern)
    return _lower(raw)


def regex_to_ir(pattern: str) -> GrammarIR:
    """Translate a regular expression into a grammar whose root rule is ``"root"``.

    Parameters
    ----------
    pattern : str
        The regular expression; the grammar matches the strings that ``pattern`` matches
        as a whole (see :func:`regex_to_expr`).

    Returns
    -------
    GrammarIR
        One rule, ``root``, whose body is ``regex_to_expr(pattern)``.

    Raises
    ------
    RegexSyntaxError
        If ``pattern`` is malformed or uses an unsupported construct.
    ArgumentError
        If ``pattern`` is not a ``str``.
    """
    return GrammarIR((Rule("root", regex_to_expr(pattern)),), "root")
