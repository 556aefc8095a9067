"""Per-rule sampling temperature (xgrammar's ``[temperature=T]`` rule attribute):
``GrammarMatcher.temperature``, ``default_temperature``, ``batch_fill_temperature`` and
``traverse_draft_tree(temperatures=)``. Each walk is compared with xgrammar 0.2.8's."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import treegram as tg
from treegram.errors import GrammarSyntaxError, LarkSyntaxError, TemperatureError

VOCAB = ["a", "b", "x", "z", " "]

# (frontend, grammar, default, [(text to accept, temperature after it)]), the first
# entry's text is "" (the temperature before anything is accepted).
WALKS = [
    ("ebnf", 'root ::= "a" value "z"\nvalue[temperature=0.6] ::= "x"+', 0.1,
     [("", 0.1), ("a", 0.6), ("xx", 0.6), ("z", 0.1)]),
    ("ebnf", 'root ::= "a" value "z"\nvalue[lazy, temperature=0.6] ::= "x"+', 0.1,
     [("", 0.1), ("a", 0.6), ("xz", 0.1)]),
    ("lark", 'start: left | right\nleft[temperature=0.2]: "a"+\nright[temperature=0.9]: "a" "b"',
     0.1, [("", 0.9), ("a", 0.9), ("a", 0.2)]),
    ("lark", '%import common.WS\n%ignore WS\nstart: hot "z"\nhot[temperature=0.6]: "x"', 0.1,
     [("", 0.6), ("x", 0.1), (" ", 0.1)]),
    ("lark", 'start: "a" value "z"\nvalue[temperature=0.6]: %json {"type": "integer"}', 0.1,
     [("", 0.1), ("a", 0.6), ("1z", 0.1)]),
    ("lark", 'start: "a" value "z"\nvalue[temperature=0.6]: %lark { start: "x" }', 0.1,
     [("", 0.1), ("a", 0.6), ("xz", 0.1)]),
    ("lark", 'start[temperature=0.125]: "a"', 0.5, [("", 0.125)]),
    # a rule's temperature wins over a higher default on another live path
    ("ebnf", 'root ::= "a" value "y"\nvalue[temperature=0.6] ::= "x"+', 0.9,
     [("", 0.9), ("a", 0.6), ("xx", 0.6), ("y", 0.9)]),
    # deep nesting: the call path is walked without recursion
    ("ebnf", 'root ::= "(" root ")" | hot\nhot[temperature=0.5] ::= "x"', 0.1,
     [("", 0.5), ("(" * 3000, 0.5), ("x", 0.1), (")" * 3000, 0.1)]),
    ("lark", 'start: "a"', 0.25, [("", 0.25), ("a", 0.25)]),
    ("lark", 'start: "a"', None, [("", None), ("a", None)]),
]  # fmt: skip


def _compile(module, frontend: str, text: str):
    info = module.TokenizerInfo(VOCAB, vocab_size=len(VOCAB), stop_token_ids=[])
    grammar = (
        module.Grammar.from_ebnf(text) if frontend == "ebnf" else module.Grammar.from_lark(text)
    )
    return module.GrammarCompiler(info).compile_grammar(grammar)


def _walk(module, frontend, text, default):
    matcher = module.GrammarMatcher(_compile(module, frontend, text), default_temperature=default)
    out = []
    for step, _ in WALKS_BY_TEXT[text]:
        if step:
            assert matcher.accept_string(step)
        got = matcher.temperature
        out.append(None if got is None else round(got, 6))
    return out


WALKS_BY_TEXT = {text: steps for _, text, _, steps in WALKS}


@pytest.mark.filterwarnings("ignore:several live parses")
@pytest.mark.parametrize("index", range(len(WALKS)))
def test_temperature_walk(index):
    frontend, text, default, steps = WALKS[index]
    assert _walk(tg, frontend, text, default) == [t for _, t in steps]


@pytest.mark.parametrize("index", range(len(WALKS)))
def test_temperature_walk_matches_xgrammar(index):
    xgr = pytest.importorskip("xgrammar")
    frontend, text, default, steps = WALKS[index]
    assert _walk(xgr, frontend, text, default) == [t for _, t in steps]


def test_inner_temperature_wins_and_rollback_restores():
    item = tg.Grammar.from_lark('start[temperature=0.3]: "x"')
    grammar = tg.Grammar.from_lark(
        'start: "a" value "z"\nvalue[temperature=0.6]: @item', named_grammars={"item": item}
    )
    info = tg.TokenizerInfo(VOCAB)
    matcher = tg.GrammarMatcher(
        tg.GrammarCompiler(info).compile_grammar(grammar), default_temperature=0.1
    )
    assert matcher.accept_string("a")
    assert matcher.temperature == pytest.approx(0.3)
    assert matcher.accept_string("x")
    assert matcher.temperature == pytest.approx(0.1)
    matcher.rollback(1)
    assert matcher.temperature == pytest.approx(0.3)
    matcher.reset()
    assert matcher.temperature == pytest.approx(0.1)


def test_ambiguous_paths_warn_once():
    frontend, text, default, _ = WALKS[2]
    matcher = tg.GrammarMatcher(_compile(tg, frontend, text), default_temperature=default)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert matcher.temperature == pytest.approx(0.9)
        assert matcher.accept_string("a")
        assert matcher.temperature == pytest.approx(0.9)
    assert [str(w.message) for w in caught] == [
        "several live parses name different rule temperatures; the highest is used"
    ]


def test_temperature_prints_parses_back_and_survives_serialization():
    grammar = tg.Grammar.from_lark('start[temperature=0.75]: "a"')
    assert "root[temperature=0.75] ::=" in str(grammar)  # Lark's start is the root rule
    restored = tg.Grammar.deserialize_json(grammar.serialize_json())
    assert restored == grammar and tg.Grammar.from_ebnf(str(grammar)) == grammar
    info = tg.TokenizerInfo(VOCAB)
    compiled = tg.GrammarCompiler(info, cache_enabled=True).compile_grammar(restored)
    again = tg.CompiledGrammar.deserialize_json(compiled.serialize_json(), info)
    assert tg.GrammarMatcher(again).temperature == pytest.approx(0.75)
    # a different temperature is a different grammar (and cache entry)
    other = tg.Grammar.from_lark('start[temperature=0.5]: "a"')
    assert other != grammar


@pytest.mark.parametrize("module_name", ["treegram", "xgrammar"])
def test_temperature_rule_in_a_tail_cycle(module_name):
    # root and b call each other in tail position (treegram's builder inlines such calls,
    # except a callee with a temperature); root called from b runs inside b
    module = tg if module_name == "treegram" else pytest.importorskip("xgrammar")
    grammar = module.Grammar.from_ebnf('root ::= "x" b\nb[temperature=0.7] ::= "y" root | "y"')
    matcher = module.GrammarMatcher(
        module.GrammarCompiler(module.TokenizerInfo(["x", "y"])).compile_grammar(grammar),
        default_temperature=0.2,
    )
    temps = []
    for ch in "xyxy":
        temps.append(matcher.temperature)
        assert matcher.accept_string(ch)
    assert temps == pytest.approx([0.2, 0.7, 0.7, 0.7])


def test_batch_fill_temperature():
    torch = pytest.importorskip("torch")
    hot = tg.GrammarMatcher(
        _compile(tg, "lark", 'start[temperature=0.2]: "a"'), default_temperature=0.8
    )
    warm = tg.GrammarMatcher(_compile(tg, "lark", 'start: "a"'), default_temperature=0.4)
    plain = tg.GrammarMatcher(_compile(tg, "lark", 'start: "a"'))
    out = torch.zeros(3, dtype=torch.float32)
    tg.BatchGrammarMatcher.batch_fill_temperature([hot, warm, plain], out)
    assert out.tolist() == pytest.approx([0.2, 0.4, -1.0])
    out = np.zeros(3, dtype=np.float32)
    tg.BatchGrammarMatcher.batch_fill_temperature([hot, plain], out, indices=[2, 0])
    assert out.tolist() == pytest.approx([-1.0, 0.0, 0.2])  # entry 1 untouched
    before = out.copy()
    for kwargs, match in (
        (dict(indices=[0]), "indices size"),
        (dict(indices=[0, 3]), "out of bounds"),
    ):
        with pytest.raises(TemperatureError, match=match):
            tg.BatchGrammarMatcher.batch_fill_temperature([hot, plain], out, **kwargs)
    np.testing.assert_array_equal(out, before)  # nothing written on error
    for bad in (np.zeros(3, dtype=np.float64), np.zeros((3, 1), dtype=np.float32), [0.0] * 3):
        with pytest.raises(TemperatureError, match="temperatures tensor"):
            tg.BatchGrammarMatcher.batch_fill_temperature([hot], bad)
    with pytest.raises(TemperatureError, match="temperatures tensor"):
        tg.BatchGrammarMatcher.batch_fill_temperature([hot, warm], np.zeros(1, dtype=np.float32))


def _tree_temperatures(module, compiled, default, tokens, next_token, temps):
    n = len(tokens)
    matcher = module.GrammarMatcher(compiled, default_temperature=default)
    bitmask = module.allocate_token_bitmask(n, len(VOCAB))
    import torch

    done = matcher.traverse_draft_tree(
        torch.tensor(next_token, dtype=torch.int64),
        torch.full((n,), -1, dtype=torch.int64),
        torch.tensor(tokens, dtype=torch.int64),
        bitmask,
        temperatures=temps,
    )
    return done, matcher


@pytest.mark.parametrize("module_name", ["treegram", "xgrammar"])
def test_traverse_draft_tree_fills_temperatures(module_name):
    torch = pytest.importorskip("torch")
    module = tg if module_name == "treegram" else pytest.importorskip("xgrammar")
    text = 'root ::= "a" value "z"\nvalue[temperature=0.6] ::= "x"+'
    compiled = _compile(module, "ebnf", text)
    temps = torch.empty(5, dtype=torch.float32)
    # root (already accepted: nothing), a, x, z, then a rejected b
    done, matcher = _tree_temperatures(
        module, compiled, 0.1, [0, 0, 2, 3, 1], [1, 2, 3, 4, -1], temps
    )
    assert done
    assert temps.tolist() == pytest.approx([0.1, 0.6, 0.6, 0.1, -1.0])
    assert matcher.temperature == pytest.approx(0.1)  # the matcher is left as it was


def test_traverse_draft_tree_validates_temperatures():
    compiled = _compile(tg, "lark", 'start: "a"')
    matcher = tg.GrammarMatcher(compiled)
    links = np.array([1, -1], dtype=np.int64)
    none = np.full(2, -1, dtype=np.int64)
    draft = np.array([0, 0], dtype=np.int64)
    bitmask = tg.allocate_token_bitmask(2, len(VOCAB), backend="numpy")
    for bad in (
        np.empty(2, dtype=np.float64),
        np.empty((2, 1), dtype=np.float32),
        np.empty(1, dtype=np.float32),
    ):
        with pytest.raises(TemperatureError, match="temperatures tensor"):
            matcher.traverse_draft_tree(links, none, draft, bitmask, temperatures=bad)


@pytest.mark.parametrize("bad", [-0.1, float("inf"), float("-inf"), float("nan"), True, "0.5"])
def test_invalid_default_temperature(bad):
    compiled = _compile(tg, "lark", 'start: "a"')
    with pytest.raises(TemperatureError, match="finite non-negative") as info:
        tg.GrammarMatcher(compiled, default_temperature=bad)
    assert isinstance(info.value, RuntimeError) and isinstance(info.value, ValueError)


@pytest.mark.parametrize(
    "text,match",
    [
        ('root[temperature=-0.1] ::= "a"', "finite non-negative"),
        ('root[temperature=1e999] ::= "a"', "finite non-negative"),
        ('root[temperature=abc] ::= "a"', "expected a number after temperature="),
        ('root[temperature=0.1, temperature=0.2] ::= "a"', "given twice"),
    ],
)
def test_invalid_ebnf_temperature(text, match):
    with pytest.raises(GrammarSyntaxError, match=match):
        tg.Grammar.from_ebnf(text)


@pytest.mark.parametrize(
    "text,match",
    [
        ('start[temperature=-0.1]: "a"', "finite non-negative"),
        ('start[temperature=1e999]: "a"', "finite non-negative"),
        ('start[temperature=abc]: "a"', "expected a number after temperature="),
        ('start[temperature=0.1, temperature=0.2]: "a"', "specified more than once"),
        (
            'start: complex\ncomplex[temperature=0.5]: "a" child\nchild: "b"',
            "temperature applies to rules made of terminals and sub-grammars only",
        ),
    ],
)
def test_invalid_lark_temperature(text, match):
    with pytest.raises(LarkSyntaxError, match=match):
        tg.Grammar.from_lark(text)
