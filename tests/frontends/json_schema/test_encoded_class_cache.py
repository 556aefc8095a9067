"""``encoded_class`` is built once per class. The converter shares expressions by identity
on purpose (``share_rules`` hoists a large node referenced twice into a rule), so a large
encoding is handed out as a fresh copy that looks exactly like a build; one smaller than
``share_rules`` hoists is the same node every time (it never becomes a rule), and the
grammars are the same as with fresh copies."""

from __future__ import annotations

import pytest

from treegram.frontends.json_schema import _lex, json_schema_to_ir
from treegram.frontends.json_schema._share import HOIST_SIZE
from treegram.ir import Choice, Repeat, Seq


def _nodes(expr) -> list:
    out, stack = [], [expr]
    while stack:
        node = stack.pop()
        out.append(node)
        if isinstance(node, (Seq, Choice)):
            stack.extend(node.items)
        elif isinstance(node, Repeat):
            stack.append(node.item)
    return out


@pytest.mark.parametrize(
    ("ranges", "negated"),
    [
        (((0x61, 0x7A),), False),
        (((0x61, 0x61), (0x63, 0x63)), True),
        (((0x0, 0x10FFFF),), False),
        (((0x22, 0x22), (0x5C, 0x5C), (0xD7FF, 0x10400)), False),
    ],
)
def test_cached_encodings_equal_a_build_and_share_only_its_constants(ranges, negated):
    built = _lex._encoded_class_build(ranges, negated)
    first = _lex.encoded_class(ranges, negated)
    second = _lex.encoded_class(list(ranges), negated)
    assert first == built and second == built
    if len(_nodes(built)) < HOIST_SIZE:  # too small to hoist: one shared node
        assert first is second
        return
    shared = {id(n) for n in _nodes(first)} & {id(n) for n in _nodes(second)}
    constants = {id(n) for n in _nodes(built)} & {id(n) for n in _nodes(first)}
    assert shared == constants  # cached digit classes and module constants only
    assert first is not second


def test_both_kinds_occur():
    sizes = [len(_nodes(_lex._encoded_class_build(r, n))) for r, n in _CLASSES]
    assert min(sizes) < HOIST_SIZE <= max(sizes)


_CLASSES = [(((0x61, 0x7A),), False), (((0x61, 0x61), (0x63, 0x63)), True)]


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "string", "pattern": "^[a-z]{2}-[0-9]+(x|yz)*$", "maxLength": 12},
        {"type": "object", "properties": {"when": {"type": "string", "format": "date-time"},
                                          "day": {"type": "string", "format": "date"}}},
        {"type": "object", "properties": {"é\"\\": {"enum": ["a\nb", "ü"]}},
         "patternProperties": {"^x-[a-f]+$": {"type": "integer"}}},
        {"type": "array", "items": {"type": "string", "pattern": "a.c", "minLength": 3}},
    ],
)  # fmt: skip
def test_grammars_equal_those_built_with_fresh_copies(schema, monkeypatch):
    shared = json_schema_to_ir(schema, any_whitespace=True, strict_mode=False)

    def fresh_template(ranges, negated):
        # as before sharing: always a fresh copy that shares only the constants
        first = _lex._encoded_class_build(ranges, negated)
        second = _lex._encoded_class_build(ranges, negated)
        return first, frozenset(_lex._node_ids(first) & _lex._node_ids(second))

    monkeypatch.setattr(_lex, "_encoded_class_template", fresh_template)
    fresh = json_schema_to_ir(schema, any_whitespace=True, strict_mode=False)
    assert shared.rules == fresh.rules  # the same rules, hoisted alike


def test_empty_class_has_no_encoding():
    assert _lex.encoded_class((), False) is None
