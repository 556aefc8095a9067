"""``dfa_string_expr`` encodes each character class once per conversion: the automata of
many objects ("any key but the declared names") share one node per class, so the grammar
holds each class once (hoisted into one rule) instead of once per object."""

from __future__ import annotations

from ir_shapes import key_objects

from treegram.frontends.json_schema._convert import json_schema_to_ir
from treegram.frontends.json_schema._lex import encoded_class
from treegram.ir import Choice, Repeat, Seq, complement_ranges, intersect_ranges


def _count_equal(ir, target) -> int:
    """How often ``target`` occurs in the rule bodies (as a tree: shared nodes per path)."""
    count, stack = 0, [r.body for r in ir.rules]
    while stack:
        node = stack.pop()
        if node == target:
            count += 1
            continue
        if isinstance(node, (Seq, Choice)):
            stack.extend(node.items)
        elif isinstance(node, Repeat):
            stack.append(node.item)
    return count


def test_a_class_in_many_key_automata_is_encoded_once():
    # the first key character of an extra key: anything a JSON string may hold but "x"
    writable = [(0, 0xD7FF), (0xE000, 0x10FFFF)]  # lone surrogates have no spelling
    not_x = intersect_ranges(complement_ranges([(0x78, 0x78)]), writable)
    cls = encoded_class(tuple(not_x))
    few, many = json_schema_to_ir(key_objects(2)), json_schema_to_ir(key_objects(12))
    assert _count_equal(few, cls) == 1
    assert _count_equal(many, cls) == 1
    assert sum(r.body == cls for r in many.rules) == 1  # one rule, called by every object
