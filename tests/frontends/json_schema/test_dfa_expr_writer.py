"""``dfa_expr`` writes an automaton as the rules a plain writer makes: each state's exits
concatenated with ``seq`` and each group of ranges encoded once (the writer's own
shortcuts: a two-item ``seq`` and encodings found by the identity of the shape's
ranges)."""

from __future__ import annotations

import itertools

import pytest

from treegram.frontends.json_schema import _dfa_expr
from treegram.frontends.json_schema._dfa_expr import WRITABLE, dfa_expr
from treegram.frontends.json_schema._lex import EMPTY, alt, seq
from treegram.frontends.json_schema._string_dfa import pattern_dfa
from treegram.ir import Bytes, CharClass, Choice, Dfa, Repeat, RuleRef, Seq

_PARTS = [
    Bytes(b"a"),
    EMPTY,
    Seq((Bytes(b"b"), Bytes(b"c"))),
    Choice((Bytes(b"d"), Bytes(b"e"))),
    Repeat(Bytes(b"f"), 0, None),
    RuleRef("r"),
]


@pytest.mark.parametrize(("a", "b"), list(itertools.product(_PARTS, [*_PARTS, None])))
def test_two_item_seq_is_seq(a, b):
    got, want = _dfa_expr._seq2(a, b), seq(a, b)
    assert got == want
    assert type(got) is type(want)
    if not isinstance(want, Seq):  # an item handed back as it is
        assert got is want


class _Conv:
    def __init__(self) -> None:
        self.rules: dict = {}
        self.string_exprs: dict = {}
        self.n = 0

    def new_rule(self, base: str) -> str:
        self.n += 1
        return f"{base}_{self.n}"


def _encode(ranges):
    """A class per group of ranges; none for one that reaches a surrogate (the writer
    leaves such an exit out)."""
    if any(lo <= 0xDFFF and hi >= 0xD800 for lo, hi in ranges):
        return None
    return CharClass(tuple(ranges))


def _plain_expr(conv, d: Dfa, base: str, encode):
    """The writer without its shortcuts: every exit through ``seq``, each group of ranges
    encoded by value."""
    groups, indeg, cyclic = [], [0] * len(d.trans), None
    for row in d.trans:
        g: dict = {}
        for lo, hi, t in row:
            g.setdefault(t, []).append((lo, hi))
        groups.append(g)
    for s, g in enumerate(groups):
        for t in g:
            if t != s:
                indeg[t] += 1
    cyclic = _dfa_expr._on_cycles(groups)
    cache: dict = {}

    def enc(ranges):
        key = tuple(ranges)
        if key not in cache:
            cache[key] = encode(key)
        return cache[key]

    names, calls, pending = {}, {}, []

    def ref(s):
        if s not in calls:
            names[s] = conv.new_rule(f"{base}_dfa")
            g = groups[s]
            if d.accept[s] and set(g) == {s}:  # loops on itself alone: written at once
                conv.rules[names[s]] = Repeat(enc(g[s]), 0, None)
            else:
                pending.append(s)
            calls[s] = RuleRef(names[s])
        return calls[s]

    def body(s, depth):
        g = groups[s]
        step = enc(g[s]) if s in g else None
        loop = Repeat(step, 0, None) if step is not None else None
        exits = [EMPTY] if d.accept[s] else []
        for t, ranges in g.items():
            if t == s or enc(ranges) is None:
                continue
            shared = indeg[t] > 1 or cyclic[t] or depth >= _dfa_expr._INLINE_DEPTH
            exits.append(seq(enc(ranges), ref(t) if shared else body(t, depth + 1)))
        rest = alt(*exits)
        return rest if loop is None else seq(loop, rest)

    top = ref(0) if cyclic[0] else body(0, 0)
    while pending:
        s = pending.pop()
        conv.rules[names[s]] = body(s, 0)
    return top


def _automata():
    yield Dfa.all_but(["alpha", "beta", "alphabet", "b"], within=WRITABLE)
    yield Dfa.all_but([f"key{i}" for i in range(30)], within=WRITABLE)
    for pattern in (
        "^[a-z0-9-]+:[a-z]+$",
        "^([a-f0-9]{2}:){3}[a-f0-9]{2}$",
        "^(ab|c)*d?$",
        "é+\\d",
    ):
        yield pattern_dfa(pattern)
    yield Dfa([((0, 0x10FFFF, 0),)], [True])  # every code point, surrogates included


@pytest.mark.parametrize("d", list(_automata()))
def test_rules_are_those_of_the_plain_writer(d):
    got_conv, want_conv = _Conv(), _Conv()
    got = dfa_expr(got_conv, d, "k", _encode)
    want = _plain_expr(want_conv, d, "k", _encode)
    assert got == want
    assert got_conv.rules == want_conv.rules
    assert list(got_conv.rules) == list(want_conv.rules)  # names in the same order
