"""``share_rules`` records the IR facts (depth, referenced rules, longest repetition) of
the grammar it builds; they must be exactly what a fresh walk finds."""

from __future__ import annotations

import pytest

from treegram.frontends.json_schema._convert import json_schema_to_ir
from treegram.frontends.json_schema._share import share_rules
from treegram.ir import Bytes, Choice, Repeat, RuleRef, Seq, ir_facts

_VALUE = {"type": "object", "properties": {f"q{i}": {"type": "string"} for i in range(12)}}


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object", "properties": {f"p{i}": _VALUE for i in range(8)}},
        {"type": "array", "items": {"type": "string", "maxLength": 300}, "maxItems": 90},
        {
            "$defs": {"node": {"type": "object", "properties": {"next": {"$ref": "#/$defs/node"}}}},
            "$ref": "#/$defs/node",
        },
        {
            "type": "object",
            "properties": {"id": {"type": "integer"}},
            "additionalProperties": {"type": "integer"},
            "propertyNames": {"pattern": "^[a-z]+$"},
        },
        {"anyOf": [{"type": "integer", "minimum": 3}, {"enum": ["x", None]}]},
        True,
    ],
)
def test_recorded_facts_equal_a_fresh_walk(schema):
    ir = json_schema_to_ir(schema, strict_mode=False)
    recorded = ir.__dict__.pop("_facts")
    assert recorded == ir_facts(ir)


def test_facts_of_hoisted_rules_and_rule_bodies_shared_by_two_rules():
    big = Seq(tuple(Bytes(bytes([97 + i % 26])) for i in range(60)))
    deep = Repeat(Choice((Seq((big, RuleRef("b"))), Bytes(b"z"))), 2, 700)
    rules = {"root": Seq((deep, deep)), "a": big, "b": big, "c": Seq((Bytes(b"k"), big))}
    ir = share_rules(rules, "root")
    recorded = ir.__dict__.pop("_facts")
    assert recorded == ir_facts(ir)
    assert recorded.longest_repeat == 700


_MARKED = [
    # undeclared keys: encoded classes whose \u escapes are marked small nodes
    {"type": "object", "properties": {"ab": {"type": "string"}, "\u00e9": {"type": "integer"}}},
    {"type": "string", "pattern": "^[^a-f]{2,4}x$", "maxLength": 12},
    {"type": "array", "items": {"type": "string", "format": "date-time"}, "maxItems": 3},
    {"properties": {"k": {"enum": ["\u2028", "\U0001f600"]}}, "propertyNames": {"maxLength": 4}},
]


@pytest.mark.parametrize("schema", _MARKED)
def test_marked_small_nodes_give_the_grammar_of_a_full_walk(schema, monkeypatch):
    # oracle: share_rules with no node marked (mark_small's attribute read under another
    # name), which walks every subtree; the rules, their bodies and the facts are the same
    from treegram.frontends.json_schema import _share
    from treegram.ir import GrammarIR

    def seen(ir: GrammarIR):
        facts = ir.__dict__.pop("_facts")
        assert facts == ir_facts(ir)
        return [(r.name, r.body) for r in ir.rules], facts

    got = seen(json_schema_to_ir(schema, strict_mode=False))
    monkeypatch.setattr(_share, "_SMALL_INFO", "_not_marked")
    want = seen(json_schema_to_ir(schema, strict_mode=False))
    assert got == want
