"""Code point DFAs: construction and operations against Python ``re`` and brute force over
every short string of a small alphabet (ASCII, a two-byte and an astral character)."""

from __future__ import annotations

import itertools
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from treegram.frontends._regex import regex_to_expr
from treegram.frontends.json_schema._string_dfa import (
    StringConstraintError,
    pattern_dfa,
    string_dfa,
)
from treegram.ir import Dfa, DfaLimitError

ALPHABET = "abé😀z"  # "z" never appears in the generated patterns
UNIVERSE = ["".join(p) for n in range(5) for p in itertools.product(ALPHABET, repeat=n)]

_ATOMS = ["a", "b", "é", "😀", "[ab]", "[^a]", ".", "[é-😀]"]


@st.composite
def regexes(draw, depth: int = 2) -> str:
    if depth == 0 or draw(st.booleans()):
        out = draw(st.sampled_from(_ATOMS))
    elif draw(st.booleans()):
        out = "(" + "|".join(draw(st.lists(regexes(depth - 1), min_size=1, max_size=3))) + ")"
    else:
        out = "".join(draw(st.lists(regexes(depth - 1), min_size=1, max_size=3)))
        out = f"(?:{out})"
    return out + draw(st.sampled_from(["", "", "*", "+", "?", "{1,2}", "{2}", "{0,1}"]))


def full(pattern: str) -> Dfa:
    return Dfa.from_expr(regex_to_expr(pattern))


def lang(dfa: Dfa) -> set[str]:
    return {s for s in UNIVERSE if dfa.accepts(s)}


def re_lang(pattern: str, search: bool = False) -> set[str]:
    rx = re.compile(pattern, re.DOTALL)
    match = rx.search if search else rx.fullmatch
    return {s for s in UNIVERSE if match(s)}


@settings(max_examples=60, deadline=None)
@given(regexes())
def test_from_expr_matches_re(pattern):
    d = full(pattern)
    assert lang(d) == re_lang(pattern)
    assert len(d.minimize()) == len(d)  # already minimal


@settings(max_examples=60, deadline=None)
@given(regexes(), regexes())
def test_boolean_operations(p, q):
    a, b = full(p), full(q)
    la, lb = re_lang(p), re_lang(q)
    assert lang(a.intersect(b)) == la & lb
    assert lang(a.union(b)) == la | lb
    assert lang(a.difference(b)) == la - lb
    assert lang(a.complement()) == set(UNIVERSE) - la
    if la & lb:
        assert not a.intersect(b).is_empty()


@settings(max_examples=40, deadline=None)
@given(regexes(), st.integers(0, 3), st.one_of(st.none(), st.integers(0, 4)))
def test_length_bounds(p, lo, hi):
    d = full(p)
    want = {s for s in re_lang(p) if len(s) >= lo and (hi is None or len(s) <= hi)}
    assert lang(d.with_length(lo, hi)) == want
    assert lang(Dfa.length(lo, hi)) == {
        s for s in UNIVERSE if len(s) >= lo and (hi is None or len(s) <= hi)
    }


@settings(max_examples=40, deadline=None)
@given(st.lists(regexes(1), min_size=1, max_size=3), st.booleans(), st.booleans())
def test_pattern_search_semantics(alternatives, left, right):
    pattern = "|".join(("^" if left else "") + a + ("$" if right else "") for a in alternatives)
    assert lang(pattern_dfa(pattern)) == re_lang(pattern, search=True)


def test_literals_and_length_range():
    d = Dfa.literals(["ab", "a", "😀é", ""])
    assert lang(d) == {"ab", "a", "😀é", ""}
    assert d.length_range() == (0, 2)
    assert full("a+b?").length_range() == (1, None)
    assert Dfa.nothing().length_range() is None
    assert Dfa.literal("é😀").accepts("é😀") and not Dfa.literal("é😀").accepts("é")
    # The minimal automaton of a language is unique: (a|b)* written two ways.
    assert len(full("(a|b)*")) == len(full("(?:a*b*)*")) == 1


def test_string_dfa_keywords():
    d = string_dfa(
        {
            "type": "string",
            "pattern": "-02-",
            "format": "date",
            "maxLength": 10,
            "not": {"enum": ["2000-02-29", 3]},
        }
    )
    assert [d.accepts(s) for s in ("2000-02-28", "2000-02-29", "2000-03-01", "2000-02-30")] == [
        True,
        False,
        False,
        False,
    ]
    d = string_dfa({"anyOf": [{"const": "z"}, {"pattern": "^é+$", "minLength": 2}]})
    assert lang(d) == {"z"} | {s for s in UNIVERSE if re.fullmatch("é{2,}", s)}
    assert lang(string_dfa({"oneOf": [{"pattern": "a"}, {"pattern": "b"}]})) == re_lang(
        "a", True
    ) ^ re_lang("b", True)
    assert lang(
        string_dfa({"if": {"pattern": "a"}, "then": {"maxLength": 1}, "else": {"minLength": 4}})
    ) == {s for s in UNIVERSE if ("a" in s and len(s) <= 1) or ("a" not in s and len(s) >= 4)}
    assert string_dfa({"type": "integer"}).is_empty()
    assert string_dfa({"minimum": 3, "items": {}}).accepts("anything")
    # unknown keywords are annotations; a keyword that constrains strings in a way this
    # module does not read gives None
    assert string_dfa({"unknownKeyword": 1, "x-ext": {"a": 1}}).accepts("anything")
    assert string_dfa({"$dynamicRef": "#node"}) is None
    with pytest.raises(StringConstraintError) as err:
        string_dfa({"format": "no-such-format"})
    assert err.value.keyword == "format"
    with pytest.raises(StringConstraintError) as err:
        string_dfa({"pattern": "(a"})
    assert err.value.keyword == "pattern"


def test_state_limit():
    with pytest.raises(DfaLimitError):
        Dfa.length(0, 10**6)
    with pytest.raises(StringConstraintError) as err:
        string_dfa({"format": "email", "maxLength": 1000})
    assert err.value.keyword == "maxLength"
    with pytest.raises(StringConstraintError, match="maxLength 100000"):  # refused at once
        string_dfa({"pattern": "^[a-z]*$", "maxLength": 100000})


def test_format_automata_are_built_once_and_equal_a_fresh_build():
    # a format's automaton is kept per process (schemas repeat a format across
    # properties); the kept one is the automaton a fresh subset construction gives
    from treegram.frontends.json_schema._formats import format_expr
    from treegram.frontends.json_schema._string_dfa import _known_format_dfa

    kept = _known_format_dfa("uri-reference")
    assert _known_format_dfa("uri-reference") is kept
    fresh = Dfa.from_expr(format_expr("uri-reference"))
    assert fresh.trans == kept.trans and fresh.accept == kept.accept
    got = string_dfa({"format": "uri-reference"})
    for text in ["", "a/b?c#d", "http://x.org/%41", "a b", "%zz", "//h:1/p", "é"]:
        assert got.accepts(text) == fresh.accepts(text) == kept.accepts(text)
