"""The undeclared-key automata of many objects share their tail: the final state that
loops on every character (a key that has left the declared names) is one rule per
conversion, and a step into it on a given class one node, instead of one of each per
object and state. The keys accepted are unchanged."""

from __future__ import annotations

import json

import pytest
from ir_shapes import inner_nodes, key_objects

from treegram import Grammar
from treegram.frontends.json_schema._convert import json_schema_to_ir
from treegram.ir import Repeat, RuleRef, Seq
from treegram.testing import _is_grammar_accept_string


def _loop_rules(ir) -> list[str]:
    """The key rules that are one class repeated: the "any further characters" state."""
    return [
        r.name
        for r in ir.rules
        if r.name.startswith("key_dfa") and isinstance(r.body, Repeat) and r.body.max is None
    ]


@pytest.mark.parametrize("n", [2, 6])
def test_one_loop_rule_for_allkey_objects(n):
    assert len(_loop_rules(json_schema_to_ir(key_objects(n)))) == 1


def test_a_step_into_the_loop_is_one_node():
    ir = json_schema_to_ir(key_objects(6))
    (loop,) = _loop_rules(ir)
    steps = [
        node
        for node in inner_nodes(ir)
        if isinstance(node, Seq)
        and len(node.items) == 2
        and node.items[1] == RuleRef(loop)
        and isinstance(node.items[0], RuleRef)
    ]
    assert steps  # the steps on the large classes ("anything but x"...)
    assert len(steps) == len({s.items for s in steps})  # each once, by identity


@pytest.fixture(scope="module")
def grammar():
    return Grammar.from_json_schema(
        json.dumps(key_objects(3)), any_whitespace=True, strict_mode=False
    )


@pytest.mark.parametrize(
    ("doc", "ok"),
    [
        ('{"o0":{"xc":"s","q":"t","xaa":"u","x":"v"}}', True),
        ('{"o1":{"xb0":"s","xb2":"t"}}', True),  # the other objects' names
        ('{"o2":{"\\u00e9t\\u00e9":"s"}}', True),
        ('{"o0":{"":"s"}}', True),
        ('{"o1":{"xb1":"s"}}', False),  # its own name takes its own schema
        ('{"o2":{"x\\u0062\\u0032":"s"}}', False),
        ('{"o0":{"xa":"s"}}', False),
        ('{"o0":{"q":1}}', False),  # further keys take strings
    ],
)
def test_the_keys_accepted_are_unchanged(grammar, doc, ok):
    assert _is_grammar_accept_string(grammar, doc) is ok
