"""``format: "regex"``: ECMA-262 patterns as a context-free grammar over decoded characters.

Groups nest, so the valid patterns are not a regular language; they are a context-free one
but for three checks, which no grammar of this size can make (each compares two unbounded
parts of the pattern): a decimal backreference needs that many capturing groups, a
``\\k<name>`` needs a group of that name and no two groups share a name, and the bounds
of ``{n,m}`` and of a class range must be in order. The grammar is therefore a documented
subset that never accepts an invalid pattern (the oracle is ECMAScript's ``RegExp`` with
the ``u`` flag, as the JSON Schema Test Suite's cases have it: ``\\a`` and a lone ``]``
are errors there, as they are not in the legacy Annex B syntax):

- everything of the Unicode-mode syntax: alternatives, groups ``( )`` and ``(?: )``,
  lookahead and lookbehind (not quantified), ``^ $ \\b \\B``, quantifiers with their lazy
  form, ``.``, character classes (negated, empty), the escapes ``\\d \\D \\s \\S \\w \\W``,
  ``\\f \\n \\r \\t \\v``, ``\\cX``, ``\\xHH``, ``\\uHHHH``, ``\\u{H...}`` up to U+10FFFF,
  the identity escapes of syntax characters and ``/`` (and ``\\b``, ``\\-`` in a class),
  ``\\p{..}`` / ``\\P{..}`` of a General_Category value (``L``, ``Letter``, ``gc=Lu``,
  ``General_Category=Nd``) or of ``Any``, ``ASCII``, ``Assigned``, ``White_Space``;
- one named group ``(?<name>...)`` with an ASCII identifier for a name;
- left out (rejected though valid): decimal backreferences, ``\\k<name>``, two named
  groups or more, ``\\0``, other Unicode properties (scripts, most binary ones);
  ``{n,m}`` written with leading zeros in ``n`` or with ``n`` and ``m`` of three or more
  digits, of the same length and with the same first digit (``{100,150}``); class ranges
  other than between two printable ASCII characters written as themselves (``[a-z]``,
  ``[!-~]``, not ``[\\x00-\\x1f]`` or ``[а-я]``).

Python's ``re``, which the ``jsonschema`` package's checker compiles the pattern with, is
another dialect (it accepts ``(?P<n>x)``, ``\\a`` and ``(?i)``, rejects ``[]`` and
``\\cA``): treegram follows ECMA-262, which the JSON Schema specification names.
"""

from __future__ import annotations

from collections.abc import Callable

from treegram.frontends.json_schema._lex import EMPTY, alt, cls, encode_expr, lit, seq
from treegram.frontends.json_schema._pattern import _CATEGORIES
from treegram.ir import Expr, Repeat, RuleRef, map_leaves

__all__ = ["regex_format_body"]

SYNTAX = "^$\\.*+?()[]{}|"
"""ECMA-262's SyntaxCharacter: never a literal outside a class in Unicode mode."""


def _chars(text: str, negated: bool = False) -> Expr:
    return cls([(ord(c), ord(c)) for c in text], negated)


def _opt(e: Expr | None) -> Expr:
    return Repeat(e, 0, 1) if e is not None else EMPTY


def _star(e: Expr | None) -> Expr:
    return Repeat(e, 0, None) if e is not None else EMPTY


_RuleMaker = Callable[[str, Callable[[RuleRef], Expr]], RuleRef]
_BINARY_PROPERTIES = ("Any", "ASCII", "Assigned", "White_Space")
_HEX = cls([(0x30, 0x39), (0x41, 0x46), (0x61, 0x66)])
_DIGIT = cls([(0x30, 0x39)])


def _trie(words: list[str]) -> Expr:
    """The words as a prefix tree (shared prefixes once: far fewer automaton states)."""
    heads: dict[str, list[str]] = {}
    end = False
    for w in dict.fromkeys(words):
        if w:
            heads.setdefault(w[0], []).append(w[1:])
        else:
            end = True
    branches = [seq(lit(h), _trie(rest)) for h, rest in heads.items()]
    out = alt(*branches) if branches else EMPTY
    return Repeat(out, 0, 1) if end and branches else out


def property_names() -> Expr:
    """``{name}`` of ``\\p{name}``: General_Category values (also after ``gc=`` or
    ``General_Category=``) and four binary properties."""
    values = _trie(list(_CATEGORIES))
    return seq(
        lit("{"),
        alt(
            seq(_opt(alt(lit("gc="), lit("General_Category="))), values),
            _trie(list(_BINARY_PROPERTIES)),
        ),
        lit("}"),
    )


def _decoded_pieces(rule: _RuleMaker) -> dict[str, Expr]:
    """The regular parts of the syntax, over decoded characters; the parts used more than
    once are rules of their own (``rule``, see :func:`regex_format_body`)."""

    def shared(base: str, e: Expr) -> RuleRef:
        return rule(base, lambda _ref: _encoded(e))

    prop = shared("regex_property", property_names())
    code_point = seq(  # \u{...}: any number of leading zeros, at most U+10FFFF
        _star(lit("0")), alt(Repeat(_HEX, 1, 5), seq(lit("10"), Repeat(_HEX, 4, 4)))
    )
    char_escape = alt(
        _chars("fnrtv"),
        seq(lit("c"), cls([(0x41, 0x5A), (0x61, 0x7A)])),
        seq(lit("x"), _HEX, _HEX),
        seq(lit("u"), Repeat(_HEX, 4, 4)),
        seq(lit("u{"), code_point, lit("}")),
        _chars(SYNTAX + "/"),  # identity escapes of Unicode mode
    )
    class_escape = alt(_chars("dDsSwW"), seq(_chars("pP"), prop))
    char_escape = shared("regex_escape", char_escape)
    single = shared(
        "regex_class_atom",  # a class atom that is not a range endpoint here
        alt(
            _chars("\\]-", negated=True),
            seq(lit("\\"), alt(char_escape, _chars("b-"), class_escape)),
        ),
    )
    dash = lit("-")
    printable = [c for c in range(0x20, 0x7F) if chr(c) not in "\\]"]
    ranges_from_dash = None
    other_ranges = []
    for lo in printable:  # lo-hi between printable ASCII characters, lo <= hi
        hi = cls([(c, c) for c in printable if c >= lo])
        item = seq(_chars(chr(lo)), dash, hi)
        if chr(lo) == "-":
            ranges_from_dash = item
        else:
            other_ranges.append(item)
    later_range = shared("regex_range", alt(*other_ranges))
    any_range = alt(ranges_from_dash, later_range)
    # A class atom followed by "-" and another atom is a range; a lone "-" only ends the
    # class or starts it (or follows a range): after a single atom, the next item is
    # a single atom, a range not starting with "-", a final "-", or the end.
    after_single = seq(alt(single, dash), _star(single))
    contents = seq(
        _star(seq(_star(any_range), after_single, later_range)),
        _star(any_range),
        _opt(seq(after_single, _opt(dash))),
    )
    atom = alt(
        _chars(SYNTAX, negated=True),
        lit("."),
        seq(lit("\\"), alt(char_escape, class_escape)),
        seq(lit("["), _opt(lit("^")), contents, lit("]")),
    )
    return {
        "atom": atom,
        "assertion": alt(lit("^"), lit("$"), lit("\\b"), lit("\\B")),
        "look": alt(lit("(?="), lit("(?!"), lit("(?<="), lit("(?<!")),
        "group": alt(lit("("), lit("(?:")),
        "named": seq(  # (?<name>: ASCII identifier names
            lit("(?<"),
            cls([(0x41, 0x5A), (0x61, 0x7A), (0x24, 0x24), (0x5F, 0x5F)]),
            _star(cls([(0x30, 0x39), (0x41, 0x5A), (0x61, 0x7A), (0x24, 0x24), (0x5F, 0x5F)])),
            lit(">"),
        ),
        "close": lit(")"),
        "bar": lit("|"),
        "simple_quantifier": _chars("*+?"),
        "open_brace": lit("{"),
        "close_brace": lit("}"),
        "lazy": lit("?"),
        "digits": Repeat(_DIGIT, 1, None),
        "comma": lit(","),
        "zeros": _star(lit("0")),
    }


def _encoded(e: Expr) -> Expr:
    """``encode_expr`` that keeps rule references (rules hold encoded text already)."""
    return map_leaves(e, _encoded_leaf)


def _encoded_leaf(e: Expr) -> Expr:
    if isinstance(e, RuleRef):
        return e
    out = encode_expr(e)
    if out is None:  # every piece here has a string
        raise AssertionError("an empty regex-format piece")
    return out


def regex_format_body(rule: _RuleMaker) -> Expr:
    """Encoded JSON string content (without the quotes) that is a pattern of the subset.

    Parameters
    ----------
    rule : callable
        ``rule(base, build)`` makes a new rule named after ``base`` whose body is
        ``build(ref)`` (``ref`` refers to the rule itself, for recursion) and returns a
        reference to it.
    """
    p = {k: _encoded(v) for k, v in _decoded_pieces(rule).items()}

    def e(text: str) -> Expr:
        return _encoded(lit(text))

    def digit(lo: int, hi: int = 9) -> Expr:
        return _encoded(cls([(0x30 + lo, 0x30 + hi)]))

    any_digit = digit(0)
    # {n,m} with n <= m, n written without leading zeros (or as zeros)
    more_digits = rule(
        "regex_longer",  # n's further digits, each paired with one of m's last digits
        lambda ref: alt(
            seq(any_digit, ref, any_digit),
            seq(p["comma"], p["zeros"], digit(1), Repeat(any_digit, 1, None)),
        ),
    )
    pairs = [
        seq(Repeat(e("0"), 1, None), p["comma"], p["digits"]),
        seq(digit(1), more_digits),
    ]
    for v in range(1, 9):  # same length, a smaller first digit
        tail = rule(
            f"regex_below_{v}",
            lambda ref, v=v: alt(
                seq(any_digit, ref, any_digit), seq(p["comma"], p["zeros"], digit(v + 1))
            ),
        )
        pairs.append(seq(digit(v, v), tail))
    for v in range(1, 10):  # same first digit: one digit, or two in order
        pairs.append(seq(digit(v, v), p["comma"], p["zeros"], digit(v, v)))
        for a in range(10):
            pairs.append(
                seq(digit(v, v), digit(a, a), p["comma"], p["zeros"], digit(v, v), digit(a))
            )
    bounds = alt(p["digits"], seq(p["digits"], p["comma"]), *pairs)
    # shared rules: each term of both variants refers to them
    quantifier = rule(
        "regex_quantifier",
        lambda _ref: seq(
            alt(p["simple_quantifier"], seq(p["open_brace"], bounds, p["close_brace"])),
            _opt(p["lazy"]),
        ),
    )
    atom = rule("regex_atom", lambda _ref: p["atom"])

    def term(ref: RuleRef) -> Expr:  # (a group holding ref)
        return alt(
            p["assertion"],
            seq(p["look"], ref, p["close"]),
            seq(alt(atom, seq(p["group"], ref, p["close"])), _opt(quantifier)),
        )

    # without a named group; with exactly one (two could share a name: refused)
    plain = rule(
        "regex_pattern", lambda ref: seq(_star(term(ref)), _star(seq(p["bar"], _star(term(ref)))))
    )
    others = _star(term(plain))

    def named(ref: RuleRef) -> Expr:
        one = alt(
            seq(p["look"], ref, p["close"]),
            seq(
                alt(seq(p["group"], ref, p["close"]), seq(p["named"], plain, p["close"])),
                _opt(quantifier),
            ),
        )
        return seq(_star(seq(others, p["bar"])), others, one, others, _star(seq(p["bar"], others)))

    return alt(plain, rule("regex_named", named))
