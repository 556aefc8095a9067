"""Long bounded repetitions are built from helper rules without changing the language."""

from __future__ import annotations

import json

import pytest
from schema_matching import accepts, byte_compiler, compile_schema

import treegram
from treegram.automaton._repeats import BLOCK, split_long_repeats


def _regex(pattern: str) -> treegram.CompiledGrammar:
    return byte_compiler().compile_grammar(treegram.Grammar.from_regex(pattern))


def _lengths(lo: int, hi: int | None) -> list[int]:
    marks = {
        0,
        1,
        lo - 1,
        lo,
        lo + 1,
        BLOCK - 1,
        BLOCK,
        BLOCK + 1,
        2 * BLOCK - 1,
        2 * BLOCK,
        3 * BLOCK + 5,
        4 * BLOCK,
        7 * BLOCK + 63,
    }
    if hi is not None:
        marks |= {hi - 1, hi, hi + 1, hi + BLOCK}
    return sorted(n for n in marks if n >= 0)


@pytest.mark.parametrize(
    "lo, hi",
    [
        (0, 65),
        (0, 255),
        (3, 128),
        (64, 64),
        (65, 65),
        (100, 300),
        (0, 511),
        (130, None),
        (200, 201),
        (0, 7 * BLOCK + 63),
    ],
)
def test_counts_are_exact(lo, hi):
    upper = "" if hi is None else str(hi)
    cg = _regex(f"(ab|c){{{lo},{upper}}}")
    for n in _lengths(lo, hi):
        inside = n >= lo and (hi is None or n <= hi)
        text = "".join("ab" if i % 3 else "c" for i in range(n))
        assert accepts(cg, text) == inside, (lo, hi, n)


def test_only_long_repetitions_are_split():
    long = treegram.Grammar.from_regex("a{3,64}b{0,65}").ir
    assert len(split_long_repeats(long).rules) > len(long.rules)
    short = treegram.Grammar.from_regex("a{3,64}b{0,64}").ir
    assert split_long_repeats(short) is short


def test_long_string_lengths_count_decoded_characters():
    cg = compile_schema({"type": "string", "minLength": 70, "maxLength": 300})
    for n in (69, 70, 71, 128, 300, 301):
        text = json.dumps("é\n" * (n // 2) + "x" * (n % 2))
        assert accepts(cg, text) == (70 <= n <= 300), n
        assert accepts(cg, json.dumps("é" * n, ensure_ascii=False)) == (70 <= n <= 300), n


def test_long_repetition_of_an_optional_item_is_exact_and_linear():
    # (a?){2,300} is a{0,300}; built as blocks of a?, every block position could hold the
    # empty copies and accepting 300 bytes took seconds.
    cg = _regex("(a?){2,300}b")
    for n in (0, 1, 2, 299, 300, 301):
        assert accepts(cg, "a" * n + "b") == (n <= 300), n
    rules = split_long_repeats(treegram.Grammar.from_regex("(a?){2,300}b").ir).rules
    assert not any("min=0, max=1)" in str(r.body) for r in rules)  # no optional copies
