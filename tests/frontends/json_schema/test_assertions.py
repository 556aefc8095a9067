"""Word boundaries (``\\b``, ``\\B``) and lookaheads (``(?=X)``, ``(?!X)``) anywhere in a
``pattern``, compiled exactly through the pattern's automaton
(``frontends/json_schema/_assertions.py``).

The oracle is Python's ``re.search`` with ``re.ASCII``, which agrees with ECMA-262 on these
constructs over the alphabet used here (ASCII word characters, no line terminators), except
that before Python 3.14 ``\\B`` does not match the empty text, where ECMA-262's does (both
of its sides are non-word): that case is checked by hand.
"""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from schema_matching import accepts, compile_schema

from treegram.errors import UnsupportedSchemaError
from treegram.frontends.json_schema._assertions import split_assertions
from treegram.frontends.json_schema._string_dfa import StringConstraintError, pattern_dfa

ALPHABET = "ab_ -."

PATTERNS = [
    r"\bab\b",
    r"^a\Bb",
    r"\B-",
    r"(a|\bb)+\b",
    r"x(?!y)",
    r"a(?=b)",
    r"a(?=b)b",
    r"a(?=b)a",  # never holds
    r"^(?:[a-z](?:(?!.*--)[a-z-]*[a-z])?)$",  # a negative lookahead inside an optional group
    r"^@([\da-z](?:(?!.*--)[\da-z-]*[\da-z])?)/([\da-z](?:(?!.*--)[\da-z-]*[\da-z])?)$",
    r"b(?![ab]*$)",  # a lookahead reading the end of the text
    r"^(a|b(?=a))+$",  # a lookahead inside a repetition
    r"(?=a)\b",
    r"\b(?!_)\w+\b",
    r"[\b]a",  # a backspace inside a class, no assertion
]


@pytest.mark.parametrize("pattern", PATTERNS)
@settings(max_examples=40, deadline=None)
@given(st.lists(st.text(alphabet=ALPHABET + "@/-", max_size=7), min_size=1, max_size=25))
def test_pattern_automaton_matches_re_search(pattern, texts):
    dfa = pattern_dfa(pattern)
    for text in texts:
        if text or r"\B" not in pattern:
            assert dfa.accepts(text) == (re.search(pattern, text, re.ASCII) is not None), text


def test_non_boundary_holds_in_the_empty_text():
    assert pattern_dfa(r"^\B$").accepts("")
    assert not pattern_dfa(r"^\b$").accepts("")


_ATOMS = ["a", "b", "_", " ", "[ab]", ".", r"\w", r"\W"]
_ASSERTIONS = [r"\b", r"\B", "(?=a)", "(?!b)", "(?=[ab] )", "(?!a*$)", "(?=$)"]


@st.composite
def _patterns(draw) -> str:
    """Short patterns mixing atoms, quantifiers, groups, alternatives and assertions."""

    def piece(depth: int) -> str:
        kind = draw(st.integers(0, 4 if depth < 2 else 2))
        if kind <= 1:
            return draw(st.sampled_from(_ATOMS)) + draw(st.sampled_from(["", "*", "+", "?"]))
        if kind == 2:
            return draw(st.sampled_from(_ASSERTIONS))
        inner = "".join(piece(depth + 1) for _ in range(draw(st.integers(1, 3))))
        if kind == 3:
            return f"(?:{inner}){draw(st.sampled_from(['', '*', '?']))}"
        other = "".join(piece(depth + 1) for _ in range(draw(st.integers(1, 2))))
        return f"(?:{inner}|{other})"

    body = "".join(piece(0) for _ in range(draw(st.integers(1, 4))))
    return draw(st.sampled_from(["", "^"])) + body + draw(st.sampled_from(["", "$"]))


@settings(max_examples=150, deadline=None)
@given(_patterns(), st.lists(st.text(alphabet=ALPHABET, max_size=6), min_size=8, max_size=20))
def test_random_patterns_match_re_search(pattern, texts):
    dfa = pattern_dfa(pattern)
    for text in texts:
        if text or r"\B" not in pattern:
            assert dfa.accepts(text) == (re.search(pattern, text, re.ASCII) is not None), text


@pytest.mark.parametrize(
    "pattern",
    [
        r"^@([\da-z](?:(?!.*--)[\da-z-]*[\da-z])?)/([\da-z](?:(?!.*--)[\da-z-]*[\da-z])?)$",
        r"\bx-\w+\b",
    ],
)
def test_schemas_with_such_patterns_compile(pattern):
    cg = compile_schema({"type": "string", "pattern": pattern})
    for text in ("", "@a/b", "@a--b/c", "@ab-c/d-e", "x-y", "ax-y", "x-y z", "x-"):
        assert accepts(cg, json.dumps(text)) == (re.search(pattern, text, re.ASCII) is not None)


@pytest.mark.parametrize(
    "pattern, why",
    [
        (r"(?<=a)b", "lookbehind"),
        (r"(?=a(?!b))a", "assertion inside a lookahead"),
        (r"^^\ba", "several anchors of one kind beside assertions"),
        (r"a(?=^b)b", "with '\\^' or several '\\$'"),
        ("\ufdd0\\b", "U\\+FDD0"),
        # an obligation at each "a" of the last 17 characters: 2**17 subsets
        (r"^(?:a(?![ab]{16}b)|b)*$", "more than 20000 automaton states"),
    ],
)
def test_refused_assertions_name_the_reason(pattern, why):
    with pytest.raises(StringConstraintError, match=why):
        pattern_dfa(pattern)
    with pytest.raises(UnsupportedSchemaError, match=why):
        compile_schema({"type": "string", "pattern": pattern})


def test_split_assertions_keeps_classes_and_escapes():
    text, found = split_assertions(r"[\b(?=]\\b\b(?!x(y))z")
    assert [(a.kind, a.text) for a in found] == [("b", ""), ("!", "x(y)")]
    assert text == "[\\b(?=]\\\\b\ufdd0\ufdd1z"
