"""Grammar.union / Grammar.concat: languages combined as in xgrammar 0.2.8."""

from __future__ import annotations

import pytest

import treegram as tg
from treegram.errors import ArgumentError
from treegram.testing import _is_grammar_accept_string as accepts

A = tg.Grammar.from_ebnf('root ::= "a" x\nx ::= "b"*')  # a b*
C = tg.Grammar.from_regex("c+")
J = tg.Grammar.from_json_schema({"type": "integer"})


@pytest.mark.parametrize(
    "grammar, passing, failing",
    [
        (tg.Grammar.union(A, C), ["a", "abb", "ccc"], ["", "ac", "b"]),
        (tg.Grammar.union(A), ["ab"], ["c"]),
        (tg.Grammar.union(A, C, J), ["a", "c", "-12"], ["1.0", "ca"]),
        (tg.Grammar.concat(A, C, A), ["aca", "abbcab", "acccabbb"], ["ac", "ca", "abcbba"]),
        (tg.Grammar.concat(C, J), ["c0", "cc42"], ["c", "42", "c 1"]),
        (tg.Grammar.concat(A, A), ["aa", "abab"], ["a", "ba"]),
    ],
)
def test_union_and_concat_languages(grammar, passing, failing):
    for text in passing:
        assert accepts(grammar, text), text
    for text in failing:
        assert not accepts(grammar, text), text


def test_rules_keep_apart_and_print_back():
    # the same grammar twice: its rules are renamed per position, never merged
    g = tg.Grammar.concat(A, A)
    names = [r.name for r in g.ir.rules]
    assert names[0] == "root" and len(set(names)) == len(names)
    assert {"g0_root", "g0_x", "g1_root", "g1_x"} <= set(names)
    assert tg.Grammar.from_ebnf(g.to_ebnf()) == g
    # a source rule called "root" or named like a renamed one does not collide
    tricky = tg.Grammar.from_ebnf('root ::= g1_x\ng1_x ::= "q"')
    both = tg.Grammar.union(tricky, A)
    assert accepts(both, "q") and accepts(both, "abb")


@pytest.mark.parametrize("op", [tg.Grammar.union, tg.Grammar.concat])
def test_bad_arguments(op):
    with pytest.raises(ArgumentError, match="at least one grammar"):
        op()
    with pytest.raises(ArgumentError, match=r"grammars\[1\] must be a Grammar, got str"):
        op(A, 'root ::= "a"')
