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


def _expanded(expr, bodies: dict, hoisted: set):
    """``expr`` with every reference to a hoisted rule replaced by that rule's body, in
    turn expanded (plain recursion: the oracle for what ``share_rules`` rewrote)."""
    if type(expr) is RuleRef and expr.name in hoisted:
        return _expanded(bodies[expr.name], bodies, hoisted)
    if type(expr) is Seq:
        return Seq(tuple(_expanded(c, bodies, hoisted) for c in expr.items))
    if type(expr) is Choice:
        return Choice(tuple(_expanded(c, bodies, hoisted) for c in expr.items))
    if type(expr) is Repeat:
        return Repeat(_expanded(expr.item, bodies, hoisted), expr.min, expr.max)
    return expr


@pytest.mark.parametrize("seed", range(6))
def test_hoisted_rules_expand_back_to_the_input(seed):
    # a random DAG of shared nodes, large and small, several levels deep, some shared by
    # rule bodies and parents at once: expanding the hoisted rules gives every input body
    import random

    rng = random.Random(seed)
    pool = [Bytes(bytes([97 + i])) for i in range(6)] + [RuleRef("r1")]
    for level in range(40):
        k = rng.randint(2, 7)
        items = tuple(rng.choice(pool[-12:] if level % 3 else pool) for _ in range(k))
        pick = rng.random()
        if pick < 0.45:
            node = Seq(items)
        elif pick < 0.85:
            node = Choice(items)
        else:
            node = Repeat(items[0], rng.randint(0, 2), rng.choice([None, 3, 9]))
        pool.append(node)
    rules = {"root": Seq(tuple(pool[-6:])), "r1": pool[-9], "r2": pool[-20], "r3": pool[-9]}
    ir = share_rules(rules, "root")
    bodies = {r.name: r.body for r in ir.rules}
    hoisted = {r.name for r in ir.rules} - set(rules)
    assert hoisted  # the DAG shares large nodes
    assert list(bodies)[: len(rules)] == list(rules)
    for name, body in rules.items():
        assert _expanded(bodies[name], bodies, hoisted) == body
    recorded = ir.__dict__.pop("_facts")
    assert recorded == ir_facts(ir)
