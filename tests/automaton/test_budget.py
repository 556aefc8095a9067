"""Every compile stays within the budget of treegram.ir._budget: languages whose automata
blow up are built another way (nested repetitions merged, counted repetitions made rules),
the rest is refused by name; the language never changes (checked against Python's ``re``
and hypothesis-generated nested repetitions)."""

from __future__ import annotations

import itertools
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from schema_matching import byte_compiler

import treegram
from treegram.automaton import build_automaton
from treegram.ir import (
    MAX_RULE_STATES,
    Bytes,
    CharClass,
    GrammarIR,
    Repeat,
    Rule,
    merge_nested_repeat,
)


def _matches(compiled: treegram.CompiledGrammar, text: str) -> bool:
    m = treegram.GrammarMatcher(compiled)
    return m.accept_string(text) and m.is_completed()


def _counts(expr: Repeat) -> set[int]:
    """The copy counts a nested repetition of ``a`` allows, by brute force (small bounds)."""
    inner = expr.item
    if not isinstance(inner, Repeat):
        return set(range(expr.min, expr.max + 1))
    allowed = _counts(inner)
    sums = {0}
    out = {0} if expr.min == 0 else set()
    for j in range(1, expr.max + 1):
        sums = {s + c for s in sums for c in allowed}
        if j >= expr.min:
            out |= sums
    return out


@st.composite
def _nested(draw) -> Repeat:
    expr: Bytes | Repeat = Bytes(b"a")
    for _ in range(draw(st.integers(1, 3))):
        lo = draw(st.integers(0, 4))
        expr = Repeat(expr, lo, lo + draw(st.integers(0, 4)))
    return expr  # type: ignore[return-value]


@settings(max_examples=300, deadline=None)
@given(_nested())
def test_merging_nested_repetitions_keeps_the_counts(expr):
    merged = merge_nested_repeat(expr)
    want = _counts(expr)
    assert _counts(merged) == want
    if not isinstance(merged.item, Repeat):  # merged down to the item: an interval
        assert want == set(range(merged.min, merged.max + 1))
    elif want == set(range(min(want), max(want) + 1)) and not isinstance(expr.item.item, Repeat):
        pytest.fail(f"{expr} allows an interval of counts but was not merged")


def test_nested_repetitions_compile_quickly_and_exactly():
    # 27,000 copies of "a" as nested repetitions: one counted repetition, built in blocks
    # (Python's re backtracks exponentially here: the oracle is the count itself)
    compiled = byte_compiler().compile_grammar(
        treegram.Grammar.from_regex("((a{1,30}){1,30}){1,30}")
    )
    assert compiled.automaton.n_states < 5000
    for n in (0, 1, 29, 31, 900, 901, 27000, 27001):
        assert _matches(compiled, "a" * n) == (1 <= n <= 27000), n


@pytest.mark.parametrize(
    "pattern, inputs",
    [
        # a deterministic automaton of 2**21 states: its counted repetition becomes a rule
        ("[ab]*a[ab]{20}", ["a" * 21, "b" * 3 + "a" + "ab" * 10, "a" * 20, "b" * 25 + "a" * 21]),
        # not mergeable (gaps), unrolled copies past the limit: the item becomes a rule
        ("(((ab){2,3}c){2,3}d){1,30}", ["ababcababcd", "ababcababababcd" * 5, "abcd"]),
    ],
)
def test_languages_that_blow_up_compile_quickly_and_exactly(pattern, inputs):
    compiled = byte_compiler().compile_grammar(treegram.Grammar.from_regex(pattern))
    assert compiled.automaton.n_states < 5000
    for text in inputs:
        assert _matches(compiled, text) == bool(re.fullmatch(pattern, text)), text


def test_an_explicit_blow_up_is_refused_by_name_and_limit():
    pattern = "(a|b)*a" + "(a|b)" * 20  # no counted repetition to turn into a rule
    with pytest.raises(treegram.GrammarError, match=rf"more than {MAX_RULE_STATES} states"):
        byte_compiler().compile_grammar(treegram.Grammar.from_regex(pattern))


def test_every_frontend_gets_the_budget():
    compiler = byte_compiler()
    for compiled in (
        compiler.compile_grammar('root ::= [ab]* "a" [ab]{20}'),
        compiler.compile_lark("start: /[ab]*a[ab]{20}/"),
        compiler.compile_json_schema({"type": "string", "pattern": "^[ab]*a[ab]{20}$"}),
    ):
        assert compiled.automaton.n_states < 5000
    json_text = '"' + "b" * 4 + "a" + "a" * 20 + '"'
    assert _matches(
        compiler.compile_json_schema({"type": "string", "pattern": "^[ab]*a[ab]{20}$"}), json_text
    )


def test_a_rule_over_the_budget_names_the_rule_and_its_text():
    body = Repeat(CharClass(((0x61, 0x62),)), 0, None)
    blow_up = GrammarIR(
        (Rule("root", treegram.Grammar.from_regex("(a|b)*a" + "(a|b)" * 20).ir.rules[0].body),),
        "root",
    )
    with pytest.raises(
        treegram.GrammarError, match=r"rule 'root'.*MAX_RULE_STATES.*\(\"a\" \| \"b\"\)"
    ):
        build_automaton(blow_up)
    assert build_automaton(GrammarIR((Rule("root", body),), "root")).n_states == 1


def test_long_string_characters_stay_inline_large_items_become_rules():
    # a block of 64 JSON string characters (each ~70 states with its escapes) stays inline,
    # so a string state reads its characters itself and keeps its string slice (as a rule
    # called per character, the first mask of a maxLength 1,000,000 string took 400 ms)
    from treegram.automaton import split_long_repeats

    def item_rules(grammar: treegram.Grammar) -> list[str]:
        return [r.name for r in split_long_repeats(grammar.ir).rules if "item" in r.name]

    string = treegram.Grammar.from_json_schema({"type": "string", "maxLength": 10**6})
    assert item_rules(string) == []
    big = treegram.Grammar.from_regex("(" + "abcdefgh" * 40 + "){0,100000}")
    assert item_rules(big)  # 64 copies of 321 states: the item is called


def test_kernel_compile_time_is_not_build_time(monkeypatch):
    # a fresh checkout's first compile waits for numba: that wait is not the build's time
    from types import SimpleNamespace

    from treegram.automaton import _build

    ticks = itertools.count(0, 100)  # every clock read: 100 s later, all of it numba's
    now = {"t": 0}

    def monotonic():
        now["t"] = next(ticks)
        return float(now["t"])

    monkeypatch.setattr(_build, "time", SimpleNamespace(monotonic=monotonic))
    monkeypatch.setattr(_build, "kernel_seconds", lambda: float(now["t"]))
    compiled = byte_compiler().compile_grammar(treegram.Grammar.from_regex("[ab]*a[ab]{3}"))
    assert compiled.automaton.n_states > 0
