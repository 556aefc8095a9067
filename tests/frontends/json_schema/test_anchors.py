"""Anchors anywhere in a ``pattern`` (inside groups, alternatives, repetitions) and
lookaheads at a pattern's edges, compiled exactly through the pattern's automaton.

The oracle is Python's ``re.search``, which agrees with ECMA-262 on these constructs over
the alphabet used here (no line terminators, so ``$`` is the end of the text in both).
"""

from __future__ import annotations

import json
import re

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


@pytest.mark.parametrize("pattern", [r"\p{Script=Greek}", r"[\P{L}]", r"[\S]"])
def test_unsupported_class_escapes_are_refused(pattern):
    from treegram.frontends.json_schema._string_dfa import StringConstraintError

    with pytest.raises(StringConstraintError):
        pattern_dfa(pattern)
