"""Anchors anywhere in a ``pattern`` (inside groups, alternatives, repetitions) and
lookaheads at a pattern's edges, compiled exactly through the pattern's automaton.

The oracle is Python's ``re.search``, which agrees with ECMA-262 on these constructs over
the alphabet used here (no line terminators, so ``$`` is the end of the text in both).
"""

from __future__ import annotations

import json
import re
import unicodedata

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from schema_matching import accepts, compile_schema

from treegram.errors import GrammarError
from treegram.frontends.json_schema._string_dfa import pattern_dfa

PATTERNS = [
    r"^(\/?((\.{2})|([a-z0-9\-]*))($|\/))*$",  # a path: $ inside a repeated group
    r"^([^,]|$)",
    r"/^[0-9]{4}$/",  # a JavaScript literal's slashes: the anchors can never match
    r"^(\d{4}(-\d{2})?$)|(^\d{4}-\d{2}-\d{2}(T\d{2})?$)",
    r"a$|^b",
    r"(^a|b$)c",
    r"x(^|y)",
    r"^^a$$",
    r"^(?!@@)[@a-z0-9_-]+$",  # a leading negative lookahead
    r"^(?!pattern$).*$",
    r"^(?=.{1,5}$)(?!.*--)[a-z-]+$",  # two leading lookaheads, one with an anchor
    r"((?:[^/]*/)*)(?=\.(yaml|json))",  # a trailing lookahead in a search
]
ALPHABET = "ab/.,@-0129yamljsonpter$^"


@pytest.mark.parametrize("pattern", PATTERNS)
@settings(max_examples=60, deadline=None)
@given(st.lists(st.text(alphabet=ALPHABET, max_size=8), min_size=1, max_size=20))
def test_pattern_automaton_matches_re_search(pattern, texts):
    dfa = pattern_dfa(pattern)
    for text in texts:
        assert dfa.accepts(text) == (re.search(pattern, text) is not None), (pattern, text)


def test_an_anchor_that_never_holds_admits_no_string():
    with pytest.raises(GrammarError, match="admits no JSON value"):
        compile_schema({"type": "string", "pattern": PATTERNS[2]}, strict_mode=False)


@pytest.mark.parametrize("pattern", [*PATTERNS[:2], PATTERNS[3], *PATTERNS[8:10]])
def test_schemas_with_such_patterns_compile(pattern):
    cg = compile_schema({"type": "string", "pattern": pattern}, strict_mode=False)
    for text in ("", "a", "ab/..", "2024-01", "@@x", "pattern", "patterns", "/^1234$/"):
        assert accepts(cg, json.dumps(text)) == (re.search(pattern, text) is not None), text


@pytest.mark.parametrize(
    "pattern, good, bad",
    [
        (r"^\p{Letter}+$", ["abc", "αβγ", "Ab"], ["a1", "", "a b"]),
        (r"^\p{digit}+$", ["123", "١٢٣"], ["1a", "½"]),
        (r"\p{Lu}", ["aBc", "É"], ["abc"]),
        (r"^[\p{L}\d_]+$", ["ab_1", "ñ9"], ["a-b"]),
        (r"^\P{L}*$", ["12 -", ""], ["a"]),
        (r"^\s$", ["\u3000", "\u2028", "\ufeff", "\t"], ["a", "\u200b"]),
        (r"^.$", ["a", "\u00e9"], ["\n", "\r", "\u2028"]),
    ],
)
def test_ecma_classes_and_property_escapes(pattern, good, bad):
    import unicodedata

    dfa = pattern_dfa(pattern)
    for text in good:
        assert dfa.accepts(text), (pattern, text)
    for text in bad:
        assert not dfa.accepts(text), (pattern, text)
    # \p{L} is General_Category L of Python's unicodedata (its Unicode version)
    if pattern == r"^\p{Letter}+$":
        for cp in range(0, 0x3000, 7):
            ch = chr(cp)
            assert dfa.accepts(ch) == unicodedata.category(ch).startswith("L"), hex(cp)


def _ecma_space(ch: str) -> bool:
    """ECMA-262's WhiteSpace and LineTerminator (what \\s matches there)."""
    return ch in "\t\n\v\f\r \u00a0\u1680\u2028\u2029\u202f\u205f\u3000\ufeff" or (
        "\u2000" <= ch <= "\u200a"
    )


@pytest.mark.parametrize(
    "pattern, inside",
    [
        (r"^[\S]$", lambda c: not _ecma_space(c)),
        (r"^[\s\S]$", lambda c: True),
        (r"^[^\S]$", lambda c: _ecma_space(c)),
        (r"^[a\S]$", lambda c: c == "a" or not _ecma_space(c)),
        (r"^[\P{L}]$", lambda c: not unicodedata.category(c).startswith("L")),
        (r"^[^\P{Nd}x]$", lambda c: unicodedata.category(c) == "Nd"),
    ],
)
def test_complements_inside_a_class_are_their_ranges(pattern, inside):
    # every code point a JSON string can hold, sampled: ECMA-262's \s and Python's
    # General_Category decide (the regex package is not the oracle: its \s differs)
    dfa = pattern_dfa(pattern)
    for cp in [*range(0, 0x3100, 3), 0x3000, 0xFEFF, 0xD7FF, 0xE000, 0xFFFF, 0x10000, 0x10FFFF]:
        ch = chr(cp)
        assert dfa.accepts(ch) == inside(ch), (pattern, hex(cp))
    assert not dfa.accepts("ab")


@pytest.mark.parametrize("pattern", [r"\p{Script=Greek}"])
def test_unsupported_class_escapes_are_refused(pattern):
    from treegram.frontends.json_schema._string_dfa import StringConstraintError

    with pytest.raises(StringConstraintError):
        pattern_dfa(pattern)


ZONES = "|".join(
    f"({area}/[A-Za-z]+)" for area in ("Africa", "America", "Asia", "Europe", "Pacific", "Indian")
)
SEARCHES = [
    f"UTC|{ZONES}",  # MaskBench o47656: a search of many alternatives, each with a loop
    r"^a[0-9]+|b+$|c[xy]+|d|^e$",  # every kind of anchoring side by side
]


@pytest.mark.parametrize("pattern", SEARCHES)
def test_a_search_of_many_alternatives_compiles_exactly(pattern):
    """The alternatives of a search share one leading and one trailing run of any
    characters: as a union of separate searches, the automaton would track which of them
    matched already (2^k subsets; the first pattern was refused past the state limit)."""
    cg = compile_schema({"type": "string", "pattern": pattern}, strict_mode=False)
    texts = "|UTC|xUTCx|Asia/|Asia/Tokyo|in Europe/Paris!|Pacific/9|Indian/Z|America"
    texts += "|a1|xa1|bb|bbx|cx|acyz|d|e|xe"
    for text in texts.split("|"):
        assert accepts(cg, json.dumps(text)) == (re.search(pattern, text) is not None), text
