"""EBNF printer: exact output for small cases, round trips, xgrammar agreement."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from treegram.errors import GrammarError
from treegram.grammar import (
    MAX_CODEPOINT,
    Bytes,
    CharClass,
    Choice,
    Grammar,
    GrammarIR,
    Repeat,
    Rule,
    RuleRef,
    Seq,
    grammar_to_ebnf,
    parse_ebnf,
)

DATA = Path(__file__).resolve().parents[1] / "data" / "xgrammar_ebnf_sources.json"
MACRO_RE = re.compile(r"\b(TagDispatch|TokenTagDispatch|Regex|Substring)\s*\(")
SOURCES = [
    e for e in json.loads(DATA.read_text(encoding="utf-8")) if not MACRO_RE.search(e["source"])
]


def one_rule(body: object, lookahead: object = None) -> GrammarIR:
    return GrammarIR((Rule("root", body, lookahead),), "root")


# (root body IR, expected printed body)
PRINTED = [
    (Bytes(b"abc"), '"abc"'),
    (Bytes(b""), '""'),
    (Seq(()), '""'),
    (Bytes('\n\r\t\\"é中😀'.encode()), r'"\n\r\t\\\"é中😀"'),
    (Bytes(b"\x00\x1f\x7f#'"), '"\\x00\\x1f\\x7f#\'"'),
    (Bytes(b"\x01A\x01g"), r'"\u0001A\x01g"'),  # \x is greedy: no hex digit after it
    (Bytes("\u00a0\u200b\U000e0001".encode()), r'"\u00a0\u200b\U000e0001"'),
    (Bytes("\ud800".encode("utf-8", "surrogatepass")), r'"\ud800"'),
    (CharClass(((97, 122),)), "[a-z]"),
    (CharClass(((9, 10), (13, 13), (32, 32))), r"[\t\n\r ]"),
    (CharClass(((45, 45), (93, 94), (92, 92))), r"[\-\]\^\\]"),
    (CharClass(((0, 31), (34, 34)), True), r'[^\x00-\x1f"]'),
    (CharClass(((1, 1), (65, 70))), r"[\u0001A-F]"),
    (CharClass((), True), "[^]"),
    (CharClass(()), "[]"),
    (CharClass(((0, MAX_CODEPOINT),)), r"[\x00-\U0010ffff]"),
    (Seq((RuleRef("a"), Bytes(b"b"))), 'a "b"'),
    (Choice((Seq((RuleRef("a"), Bytes(b"b"))), Bytes(b"c"))), 'a "b" | "c"'),
    (Seq((Choice((Bytes(b"a"), Bytes(b"b"))), Bytes(b"c"))), '("a" | "b") "c"'),
    (Choice((Bytes(b"a"), Choice((Bytes(b"b"), Bytes(b"c"))))), '"a" | ("b" | "c")'),
    (Seq((Seq((Bytes(b"a"), Bytes(b"b"))), Bytes(b"c"))), '("a" "b") "c"'),
    (Seq((Bytes(b"a"),)), '"a"'),
    (Choice((Bytes(b"a"),)), '"a"'),
    (Repeat(Bytes(b"ab"), 0, None), '"ab"*'),
    (Repeat(RuleRef("x"), 1, None), "x+"),
    (Repeat(CharClass(((48, 57),)), 0, 1), "[0-9]?"),
    (Repeat(Bytes(b"a"), 3, 3), '"a"{3}'),
    (Repeat(Bytes(b"a"), 2, None), '"a"{2,}'),
    (Repeat(Bytes(b"a"), 0, 0), '"a"{0}'),
    (Repeat(Bytes(b"a"), 2, 5), '"a"{2,5}'),
    (Repeat(Repeat(Bytes(b"a"), 0, 1), 0, None), '("a"?)*'),
    (Repeat(Seq((Bytes(b"a"), RuleRef("x"))), 1, None), '("a" x)+'),
    (Repeat(Choice((Bytes(b"a"), RuleRef("x"))), 1, 2), '("a" | x){1,2}'),
    (Seq((Repeat(Bytes(b"a"), 0, None), RuleRef("x"))), '"a"* x'),
]


@pytest.mark.parametrize("body, text", PRINTED, ids=[t for _, t in PRINTED])
def test_print_body(body: object, text: str) -> None:
    ir = GrammarIR((Rule("root", body), Rule("a", Bytes(b"")), Rule("x", Bytes(b""))), "root")
    printed = grammar_to_ebnf(ir)
    assert printed == f'root ::= {text}\na ::= ""\nx ::= ""\n'
    assert parse_ebnf(printed) == parse_ebnf(grammar_to_ebnf(parse_ebnf(printed)))


def test_root_first_and_lookahead() -> None:
    ir = GrammarIR(
        (
            Rule("a.b-c", Bytes(b"x"), Seq((Repeat(CharClass(((32, 32),)), 0, None), Bytes(b",")))),
            Rule("main", RuleRef("a.b-c"), Choice((Bytes(b"y"), Bytes(b"z")))),
        ),
        "main",
    )
    text = grammar_to_ebnf(ir)
    assert text == 'main ::= a.b-c (= "y" | "z")\na.b-c ::= "x" (= [ ]* ",")\n'
    back = parse_ebnf(text, "main")
    assert set(back.rules) == set(ir.rules)


def test_bytes_that_are_not_utf8_print_as_raw_byte_escapes() -> None:
    ir = one_rule(Bytes(b"a\xff\xc3\xa9\xe2\x82"))  # a lone byte, a whole char, a cut char
    text = grammar_to_ebnf(ir)
    assert text == 'root ::= "a\\x{FF}\u00e9\\x{E2}\\x{82}"\n'
    assert parse_ebnf(text) == ir


@pytest.mark.parametrize(
    "ir, fragment",
    [
        (GrammarIR((Rule("bad name", Bytes(b"")),), "bad name"), "'bad name'"),
        (GrammarIR((Rule("9a", Bytes(b"")),), "9a"), "'9a'"),
        (one_rule(RuleRef("Regex")), "'Regex'"),
        (one_rule(Choice(())), "no alternatives"),
        (one_rule(Repeat(Bytes(b"a"), 3, 2)), "min=3, max=2"),
        (one_rule(CharClass(((5, 2),))), "not a valid code-point range"),
        (one_rule(CharClass(((0, MAX_CODEPOINT + 1),))), "not a valid code-point range"),
    ],
)
def test_unprintable(ir: GrammarIR, fragment: str) -> None:
    with pytest.raises(GrammarError, match=re.escape(fragment)):
        grammar_to_ebnf(ir)


@pytest.mark.parametrize("entry", SOURCES, ids=lambda e: e["source"][:60])
def test_round_trip_xgrammar_sources(entry: dict) -> None:
    ir = parse_ebnf(entry["source"], entry["root_rule_name"])
    text = grammar_to_ebnf(ir)
    back = parse_ebnf(text, entry["root_rule_name"])
    assert back.root == ir.root
    assert dict((r.name, r) for r in back.rules) == dict((r.name, r) for r in ir.rules)
    assert text.splitlines()[0].startswith(f"{ir.root} ::= ")
    assert grammar_to_ebnf(back) == text
    g = Grammar.from_ebnf(entry["source"], root_rule_name=entry["root_rule_name"])
    assert Grammar.from_ebnf(str(g), root_rule_name=g.root_rule_name) == Grammar.from_ir(back)


def test_printed_sources_behave_the_same_in_xgrammar() -> None:
    """xgrammar reads our printed text and accepts the same sample inputs as the source."""
    xgr = pytest.importorskip("xgrammar")
    from xgrammar.testing import _is_grammar_accept_string as accepts

    checked = 0
    for entry in SOURCES:
        root = entry["root_rule_name"]
        printed = grammar_to_ebnf(parse_ebnf(entry["source"], root))
        original = xgr.Grammar.from_ebnf(entry["source"], root_rule_name=root)
        ours = xgr.Grammar.from_ebnf(printed, root_rule_name=root)
        for text, _expected in entry["inputs"]:
            assert accepts(ours, text) == accepts(original, text), (printed, text)
            checked += 1
    assert checked > 150


# Canonical IR (what the parser produces): Seq/Choice of >= 2 items, merged ranges.
NAMES = ["r0", "r1", "a.b", "_x-y"]
_names = st.sampled_from(NAMES)


@st.composite
def _char_classes(draw: st.DrawFn) -> CharClass:
    cps = st.integers(0, MAX_CODEPOINT)
    ranges = sorted(
        (min(a, b), max(a, b)) for a, b in draw(st.lists(st.tuples(cps, cps), max_size=3))
    )
    merged: list[list[int]] = []
    for lo, hi in ranges:
        if merged and lo <= merged[-1][1] + 1:
            merged[-1][1] = max(merged[-1][1], hi)
        else:
            merged.append([lo, hi])
    return CharClass(tuple((lo, hi) for lo, hi in merged), draw(st.booleans()))


_leaves = st.one_of(
    st.text(max_size=5).map(lambda s: Bytes(s.encode())),
    _char_classes(),
    _names.map(RuleRef),
)


def _extend(children: st.SearchStrategy) -> st.SearchStrategy:
    bounds = st.integers(0, 4).flatmap(
        lambda lo: st.tuples(st.just(lo), st.one_of(st.none(), st.integers(lo, lo + 3)))
    )
    return st.one_of(
        st.lists(children, min_size=2, max_size=3).map(lambda xs: Seq(tuple(xs))),
        st.lists(children, min_size=2, max_size=3).map(lambda xs: Choice(tuple(xs))),
        st.tuples(children, bounds).map(lambda t: Repeat(t[0], t[1][0], t[1][1])),
    )


_exprs = st.recursive(_leaves, _extend, max_leaves=12)


@settings(max_examples=200, deadline=None)
@given(body=_exprs, lookahead=st.one_of(st.none(), _exprs))
def test_round_trip_random_ir(body: object, lookahead: object) -> None:
    ir = GrammarIR(
        (Rule("root", body, lookahead),) + tuple(Rule(n, Bytes(b"")) for n in NAMES),
        "root",
    )
    assert parse_ebnf(grammar_to_ebnf(ir)) == ir
