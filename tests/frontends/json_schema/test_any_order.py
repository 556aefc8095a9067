"""any_order=True (xgrammar's option): object members in any order, each value checked
against its key's schema, presence and repetition unchecked, the count bounded by
max(minProperties, len(required)) and maxProperties. Compared with xgrammar's own grammar."""

from __future__ import annotations

import pytest

import treegram as tg
from treegram.testing import _is_grammar_accept_string

SCHEMAS = [
    {
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "string"}},
        "required": ["a"],
        "maxProperties": 3,
    },
    {
        "type": "object",
        "properties": {"a": {"type": "integer"}},
        "required": ["a", "z"],
        "additionalProperties": {"type": "boolean"},
    },
    {
        "type": "object",
        "properties": {
            "a": {
                "type": "object",
                "properties": {"x": {"type": "integer"}, "y": {"type": "integer"}},
                "required": ["x", "y"],
            }
        },
        "minProperties": 1,
    },
]
DOCS = [
    '{"b":"x","a":1}',
    '{"a":1}',
    "{}",
    '{"a":1,"a":2}',
    '{"a":1,"a":2,"a":3,"a":4}',
    '{"c":1}',
    '{"c":true,"a":1}',
    '{"z":true,"a":1}',
    '{"a":{"y":1,"x":2}}',
    '{"a":{"y":1}}',
    '{"b":1}',
]
EXPECTED = [  # one row per schema, one entry per document
    [True, True, False, True, False, False, False, False, False, False, False],
    [False, False, False, True, True, False, True, True, False, False, False],
    [False, False, False, False, False, False, False, False, True, False, False],
]


def _grammar(module, schema):
    return module.Grammar.from_json_schema(
        schema, any_order=True, any_whitespace=False, separators=(",", ":")
    )


@pytest.mark.parametrize("index", range(len(SCHEMAS)))
def test_any_order_language(index):
    grammar = _grammar(tg, SCHEMAS[index])
    got = [_is_grammar_accept_string(grammar, doc) for doc in DOCS]
    assert got == EXPECTED[index]


@pytest.mark.parametrize("index", range(len(SCHEMAS)))
def test_any_order_matches_xgrammar(index):
    xgr = pytest.importorskip("xgrammar")
    xt = pytest.importorskip("xgrammar.testing")
    theirs = _grammar(xgr, SCHEMAS[index])
    assert [xt._is_grammar_accept_string(theirs, d) for d in DOCS] == EXPECTED[index]


def test_any_order_default_keeps_schema_order():
    ordered = tg.Grammar.from_json_schema(SCHEMAS[0], any_whitespace=False, separators=(",", ":"))
    assert _is_grammar_accept_string(ordered, '{"a":1,"b":"x"}')
    assert not _is_grammar_accept_string(ordered, '{"b":"x","a":1}')


def test_any_order_through_compiler_and_structural_tag():
    info = tg.TokenizerInfo([])
    compiler = tg.GrammarCompiler(info)
    a = compiler.compile_json_schema(SCHEMAS[0], any_order=True, any_whitespace=False)
    b = compiler.compile_json_schema(SCHEMAS[0], any_whitespace=False)
    assert a is not b  # any_order is part of the cache key
    matcher = tg.GrammarMatcher(a, terminate_without_stop_token=True)
    assert matcher.accept_string('{"b": "x", "a": 1}')
    tag = {
        "type": "structural_tag",
        "format": {"type": "json_schema", "json_schema": SCHEMAS[0], "any_order": True},
    }
    assert _is_grammar_accept_string(tg.Grammar.from_structural_tag(tag), '{"b": "x", "a": 1}')


def test_any_order_must_be_bool():
    with pytest.raises(tg.GrammarError, match="any_order must be a bool"):
        tg.Grammar.from_json_schema(SCHEMAS[0], any_order=1)  # type: ignore[arg-type]
    with pytest.raises(tg.GrammarError, match="any_order must be a bool"):
        tg.GrammarCompiler(tg.TokenizerInfo([])).compile_json_schema(SCHEMAS[0], any_order="y")
