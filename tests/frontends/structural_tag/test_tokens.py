"""Structural tags over whole tokens: the ``token``, ``exclude_token``, ``any_tokens``,
``token_triggered_tags`` and ``token_dispatch`` formats and token begins / ends of tags.

Tokens are named by id or by exact text (looked up when the grammar is compiled). Each
case walks treegram and xgrammar 0.2.8 in lock step on a small vocabulary, comparing the
full mask and every token's acceptance at every step.
"""

from __future__ import annotations

import numpy as np
import pytest
from xgrammar_diff import probe_alike

from treegram import Grammar, GrammarCompiler, GrammarMatcher, TokenizerInfo
from treegram.compiler import deserialize_compiled, serialize_compiled
from treegram.errors import GrammarError, InvalidStructuralTagError
from treegram.matcher import allowed_token_ids

VOCAB = [
    "<s>", "</s>", "<tool>", "<code>", "<end>", "<think>", "<think_end>", "hello", "world",
    "{", "}", "fn(", ")", "x", "y", ",", "<bad>",
]  # fmt: skip
STOP = 1


def _tok(t):
    return {"type": "token", "token": t}


def _tag(begin, content, end):
    return {"type": "tag", "begin": begin, "content": content, "end": end}


CASES = {
    "token_begin_end": _tag(_tok("<tool>"), {"type": "const_string", "value": "hello"}, _tok(4)),
    "exclude_token_sees_end": _tag(
        _tok(2), {"type": "exclude_token", "exclude_tokens": [16]}, _tok("<end>")
    ),
    "any_tokens_loop": _tag(
        _tok("<think>"), {"type": "any_tokens", "exclude_tokens": ["<bad>"]}, _tok(6)
    ),
    "any_tokens_string_end": _tag(
        _tok(2), {"type": "any_tokens", "exclude_tokens": [16, 3, "world"]}, "world"
    ),
    "token_triggered": {
        "type": "token_triggered_tags",
        "trigger_tokens": ["<tool>", 3],
        "tags": [
            _tag(_tok("<tool>"), {"type": "const_string", "value": "hello"}, _tok(4)),
            _tag(_tok(3), {"type": "any_tokens", "exclude_tokens": [16]}, _tok(4)),
        ],
        "exclude_tokens": [16],
    },
    "token_triggered_first": {
        "type": "token_triggered_tags",
        "trigger_tokens": [2],
        "tags": [_tag(_tok(2), {"type": "const_string", "value": "x"}, _tok(4))],
        "at_least_one": True,
        "stop_after_first": True,
    },
    "token_dispatch": {
        "type": "token_dispatch",
        "rules": [[2, {"type": "const_string", "value": "fn("}], ["<code>", _tok(13)]],
        "exclude_tokens": ["<bad>"],
        "loop": True,
    },
    "sequence_and_or": {
        "type": "sequence",
        "elements": [
            {"type": "or", "elements": [_tok(2), {"type": "const_string", "value": "hello"}]},
            {"type": "star", "content": {"type": "exclude_token", "exclude_tokens": [1, 4]}},
            _tok(4),
        ],
    },
}


def _stag(fmt) -> dict:
    return {"type": "structural_tag", "format": fmt}


def _allowed(m: GrammarMatcher, n: int) -> set[int]:
    row = np.zeros((1, (n + 31) // 32), dtype=np.int32)
    m.fill_next_token_bitmask(row)
    return set(allowed_token_ids(row[0], n).tolist())


@pytest.mark.parametrize("name", sorted(CASES))
def test_masks_match_xgrammar(name):
    xgr = pytest.importorskip("xgrammar")
    stag = _stag(CASES[name])
    n = len(VOCAB)
    ours = GrammarMatcher(GrammarCompiler(TokenizerInfo(VOCAB)).compile_structural_tag(stag))
    xinfo = xgr.TokenizerInfo(VOCAB)
    theirs = xgr.GrammarMatcher(xgr.GrammarCompiler(xinfo).compile_structural_tag(stag))
    xmask = xgr.allocate_token_bitmask(1, n)
    rng = np.random.default_rng(sum(map(ord, name)))
    for step in range(60):
        theirs.fill_next_token_bitmask(xmask)
        expected = set(allowed_token_ids(xmask.numpy()[0], n).tolist())
        assert _allowed(ours, n) == expected, f"step {step}"
        for t in range(n):  # every token is accepted alike
            if t != STOP:
                probe_alike(ours, theirs, t, step)
        choices = sorted(expected - {STOP})
        if not choices:
            break
        t = int(rng.choice(choices))
        assert ours.accept_token(t) and theirs.accept_token(t)


def test_a_token_read_as_any_token_or_as_end_text_keeps_both_parses():
    # "world" is any token and the end text: after <tool> world hello world the tag may
    # end. (xgrammar 0.2.8 loses that parse once "world" was read twice: it refuses the
    # stop token after [2, 8, 7, 8] though it allows it after [2, 7, 8].)
    fmt = _tag(_tok(2), {"type": "any_tokens", "exclude_tokens": [16]}, "world")
    m = GrammarMatcher(GrammarCompiler(TokenizerInfo(VOCAB)).compile_structural_tag(_stag(fmt)))
    for t in (2, 8, 7, 8):
        assert m.accept_token(t)
    assert STOP in _allowed(m, len(VOCAB))
    assert m.accept_token(STOP)


PRINTED = {
    "token": _tok(42),
    "tag": _tag(_tok(10), {"type": "const_string", "value": "X"}, _tok(20)),
    "exclude_in_tag": _tag(_tok(1), {"type": "exclude_token", "exclude_tokens": [5]}, _tok(99)),
    "any_tokens_budget": {"type": "any_tokens", "exclude_tokens": [5, 10], "max_tokens": 3},
    "any_tokens_in_tag": _tag(_tok(1), {"type": "any_tokens", "exclude_tokens": [5]}, _tok(9)),
    "triggered": {
        "type": "token_triggered_tags",
        "trigger_tokens": [10, 20],
        "tags": [
            _tag(_tok(10), {"type": "const_string", "value": "A"}, _tok(99)),
            _tag(_tok(20), {"type": "const_string", "value": "B"}, _tok(99)),
        ],
        "exclude_tokens": [50],
    },
    "dispatch": {
        "type": "token_dispatch",
        "rules": [[10, {"type": "const_string", "value": "A"}], [20, _tok(3)]],
        "loop": False,
    },
}


@pytest.mark.parametrize("name", sorted(PRINTED))
def test_prints_xgrammars_text_which_parses_back(name):
    stag = _stag(PRINTED[name])
    text = str(Grammar.from_structural_tag(stag))
    xgr = pytest.importorskip("xgrammar")
    assert text == str(xgr.Grammar.from_structural_tag(stag))
    # the text is EBNF that compiles to the same masks on a vocabulary with these ids
    vocab = [f"t{i}" for i in range(100)]
    info = TokenizerInfo(vocab, stop_token_ids=[0])
    a = GrammarMatcher(GrammarCompiler(info).compile_structural_tag(stag))
    b = GrammarMatcher(GrammarCompiler(info).compile_grammar(Grammar.from_ebnf(text)))
    for t in (1, 10, 20, 42, 7, 99):
        assert _allowed(a, 100) == _allowed(b, 100)
        if t in _allowed(a, 100):
            assert a.accept_token(t) and b.accept_token(t)


def test_token_names_are_looked_up_at_compile():
    g = Grammar.from_structural_tag(_stag(CASES["token_begin_end"]))
    text = str(g)
    assert 'Token("<tool>")' in text and "Token(4)" in text
    # a vocabulary without the token named cannot compile the grammar
    with pytest.raises(
        GrammarError, match="unknown special token <tool>: no token of the vocabulary"
    ):
        GrammarCompiler(TokenizerInfo(["a", "</s>", "b", "c", "d"])).compile_grammar(g)
    # the printed grammar parses back to the same language, and serializes
    info = TokenizerInfo(VOCAB)
    compiled = GrammarCompiler(info).compile_grammar(Grammar.from_ebnf(text))
    m = GrammarMatcher(compiled)
    assert all(m.accept_token(t) for t in (2, 7, 4, STOP))
    loaded = deserialize_compiled(serialize_compiled(compiled), info)
    m = GrammarMatcher(loaded)
    assert _allowed(m, len(VOCAB)) == {2}
    assert all(m.accept_token(t) for t in (2, 7, 4, STOP))


@pytest.mark.parametrize(
    ("fmt", "match"),
    [
        ({"type": "token", "token": -1}, r"format\.token must be a non-negative token id"),
        ({"type": "token", "token": ""}, r"format\.token must be a non-empty token string"),
        (
            {"type": "token", "token": 1.5},
            r"format\.token must be an integer token id or a token string",
        ),
        ({"type": "exclude_token", "exclude_tokens": 3}, r"exclude_tokens must be a list"),
        (
            {"type": "token_triggered_tags", "trigger_tokens": [2], "tags": []},
            r"format\.tags must be non-empty",
        ),
        (
            {
                "type": "token_triggered_tags",
                "trigger_tokens": [2],
                "tags": [_tag(_tok(3), {"type": "const_string", "value": "a"}, _tok(4))],
            },
            r"format\.tags\[0\]\.begin must be a token format begin whose token is one",
        ),
        (
            {
                "type": "triggered_tags",
                "triggers": ["<"],
                "tags": [_tag(_tok(3), {"type": "const_string", "value": "a"}, "b")],
            },
            r"format\.tags\[0\]\.begin must be a string begin",
        ),
        (_tag({"type": "const_string", "value": "a"}, _tok(1), "b"), r"format\.begin must be"),
    ],
)
def test_malformed_token_formats(fmt, match):
    with pytest.raises(InvalidStructuralTagError, match=match):
        Grammar.from_structural_tag(_stag(fmt))


def test_token_ids_outside_the_vocabulary():
    g = Grammar.from_structural_tag(_stag(_tok(99)))
    with pytest.raises(GrammarError, match=r"token id 99 of Token\(99\)"):
        GrammarCompiler(TokenizerInfo(VOCAB)).compile_grammar(g)
