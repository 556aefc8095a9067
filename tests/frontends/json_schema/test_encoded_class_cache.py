"""``encoded_class`` is built once per class but every call gets new objects: the
converter shares expressions by identity on purpose (hoisted rules, deduplicated
alternatives), so a cached result must look exactly like a fresh build."""

from __future__ import annotations

import pytest

from treegram.frontends.json_schema import _lex
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
    shared = {id(n) for n in _nodes(first)} & {id(n) for n in _nodes(second)}
    constants = {id(n) for n in _nodes(built)} & {id(n) for n in _nodes(first)}
    assert shared == constants  # cached digit classes and module constants only
    assert first is not second


def test_empty_class_has_no_encoding():
    assert _lex.encoded_class((), False) is None
