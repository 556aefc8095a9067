"""Dfa.substitute: each character of an accepted string replaced by a language."""

from __future__ import annotations

import pytest

from treegram.ir import Bytes, CharClass, Choice, Dfa, DfaLimitError, Repeat, Seq


def _spell(ranges):
    # 'a' may be written 'a' or 'AA'; 'b' as 'b'; every other character cannot be written.
    parts = []
    for lo, hi in ranges:
        if lo <= ord("a") <= hi:
            parts += [Bytes(b"a"), Bytes(b"AA")]
        if lo <= ord("b") <= hi:
            parts.append(Bytes(b"b"))
    return Choice(tuple(parts)) if parts else None


def test_substitute_replaces_each_character():
    d = Dfa.literals(["ab", "b", "c"]).substitute(_spell)
    for text, accepted in (
        ("ab", True),
        ("AAb", True),
        ("b", True),
        ("c", False),
        ("AAAb", False),
        ("a", False),
    ):
        assert d.accepts(text) == accepted, text


def test_substitute_keeps_cycles_and_the_empty_string():
    d = Dfa.from_expr(Repeat(CharClass(((ord("a"), ord("b")),)), 0, None)).substitute(_spell)
    for text in ("", "AAbaAA", "bbb"):
        assert d.accepts(text)
    assert not d.accepts("A")


def test_substitute_with_nothing_writable_is_empty_or_epsilon():
    assert Dfa.literal("z").substitute(_spell).is_empty()
    d = Dfa.from_expr(Seq(())).substitute(_spell)
    assert d.accepts("") and not d.accepts("a")


def test_substitute_state_limit():
    big = Dfa.length(0, 40_000)
    with pytest.raises(DfaLimitError):
        big.substitute(lambda r: Repeat(Bytes(b"xy"), 1, 3))
