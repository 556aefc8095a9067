"""The large character classes of a string automaton written as grammar IR (the ``\\u``
spellings of "any character but these few") are rules made up front, once per class and
conversion, so that ``share_rules`` has nothing to hoist below a key literal and keeps it
as written instead of rebuilding it; the small ones stay inline. The keys accepted are
unchanged."""

from __future__ import annotations

import json

import pytest
from ir_shapes import inner_nodes, key_objects

from treegram import Grammar
from treegram.frontends.json_schema._convert import json_schema_to_ir
from treegram.frontends.json_schema._lex import _tree_size, encoded_class
from treegram.frontends.json_schema._share import HOIST_SIZE
from treegram.ir import Repeat, RuleRef, complement_ranges, intersect_ranges
from treegram.testing import _is_grammar_accept_string

WRITABLE = [(0, 0xD7FF), (0xE000, 0x10FFFF)]  # lone surrogates have no spelling

SCHEMA = key_objects(2)


def _not(ch: str) -> tuple:
    return tuple(intersect_ranges(complement_ranges([(ord(ch), ord(ch))]), WRITABLE))


def _class_rules(ir) -> list:
    return [r for r in ir.rules if r.name.startswith("str_class")]


def test_a_large_class_is_one_rule_made_up_front():
    ir = json_schema_to_ir(SCHEMA)
    not_x = encoded_class(_not("x"))
    assert _tree_size(not_x, HOIST_SIZE) >= HOIST_SIZE  # large: hoisted if shared
    rules = _class_rules(ir)
    assert sum(r.body == not_x for r in rules) == 1
    # not hoisted again under another name, and every class rule is a large one
    assert not any(r.body == not_x for r in ir.rules if r not in rules)
    assert all(_tree_size(r.body, HOIST_SIZE) >= HOIST_SIZE for r in rules)


def test_small_classes_stay_inline():
    ir = json_schema_to_ir(SCHEMA)
    just_x = encoded_class(((ord("x"), ord("x")),))
    assert _tree_size(just_x, HOIST_SIZE) < HOIST_SIZE
    assert not any(r.body == just_x for r in ir.rules)
    assert any(node == just_x for node in inner_nodes(ir))


def test_key_literals_call_the_class_rules():
    ir = json_schema_to_ir(SCHEMA)
    names = {r.name for r in _class_rules(ir)}
    called = {
        item.name
        for node in inner_nodes(ir)
        for item in ((node.item,) if isinstance(node, Repeat) else node.items)
        if isinstance(item, RuleRef)
    }
    assert names and names <= called


@pytest.fixture(scope="module")
def grammar():
    return Grammar.from_json_schema(json.dumps(SCHEMA), any_whitespace=True, strict_mode=False)


@pytest.mark.parametrize(
    ("doc", "ok"),
    [
        ('{"o0":{"xa":1,"xc":"s"}}', True),
        ('{"o0":{"y":"s","x":"t"}}', True),
        ('{"o0":{"\\u0078c":"s"}}', True),  # "xc" spelled with an escape
        ('{"o1":{"xb0":"s"}}', True),  # o0's name is o1's extra key
        ('{"o0":{"xa":"s"}}', False),  # a declared key takes its own schema
        ('{"o0":{"\\u0078a":"s"}}', False),  # "xa" spelled with an escape
        ('{"o0":{"x\\u0061":"s"}}', False),
        ('{"o1":{"xb1":"s"}}', False),
    ],
)
def test_the_keys_accepted_are_unchanged(grammar, doc, ok):
    assert _is_grammar_accept_string(grammar, doc) is ok
