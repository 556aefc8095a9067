"""``Dfa.loop_split``: a language as ``avoid | prefix loop* suffix`` with fixed-length
prefix and suffix (what lets a length bound become a counted repetition), checked against
the automaton it came from on every short string over a small alphabet."""

from __future__ import annotations

import itertools

import pytest

from treegram.frontends._regex import regex_to_expr
from treegram.ir import Dfa

ALPHABET = "abxy019"


def _dfa(regex: str) -> Dfa:
    return Dfa.from_expr(regex_to_expr(regex))


def _in_split(split, text: str) -> bool:
    """Whether ``text`` is in ``avoid | prefix loop* suffix``."""
    if split.avoid.accepts(text):
        return True
    for a in split.prefix_lengths:
        for b in split.suffix_lengths:
            if len(text) < a + b:
                continue
            middle = text[a : len(text) - b]
            looped = all(any(lo <= ord(ch) <= hi for lo, hi in split.loop) for ch in middle)
            if (
                looped
                and split.prefix.accepts(text[:a])
                and split.suffix.accepts(text[len(text) - b :])
            ):
                return True
    return False


@pytest.mark.parametrize(
    ("regex", "lengths"),
    [
        ("[a-z0-9 ]*", ((0,), (0,))),
        ("x[0-9]*y", ((1,), (1,))),
        ("(ab|xy)[01]*", ((2,), (0,))),
        ("a[0-9]*(xy|ab)", ((1,), (2,))),
        ("b|a[0-9]*", ((1,), (0,))),  # "b" never reaches the loop
        ("xy|x1*y0", ((2,), (2,))),  # the loop starts after "x1"; "xy" and "xy0" avoid it
        ("(a|bx)[0-9]*", ((1, 2), (0,))),
        ("[0-9]*(a|bx|)", ((0,), (0, 1, 2))),
        ("(a|bx|yyy|0000)1*", ((1, 2, 3, 4), (0,))),
    ],
)
def test_split_is_the_same_language(regex, lengths):
    d = _dfa(regex)
    split = d.loop_split()
    assert split is not None
    assert (split.prefix_lengths, split.suffix_lengths) == lengths
    for n in range(6):
        for chars in itertools.product(ALPHABET, repeat=n):
            text = "".join(chars)
            assert _in_split(split, text) == d.accepts(text), (regex, text)


@pytest.mark.parametrize(
    "regex",
    [
        "(ab)*",  # a cycle through two states
        "a*b*",  # two looping states
        "(a|bx|yyy|0000|11111)[0-9]*",  # prefixes of more than LOOP_SPLIT_LENGTHS lengths
        "ab|x",  # no loop: a finite language
        ".*abc.*",  # a search: cycles through several states
    ],
)
def test_no_split_where_lengths_would_not_count(regex):
    assert _dfa(regex).loop_split() is None
