"""``dfa_string_expr`` writes the JSON string literal of one automaton once per conversion:
an inline subschema met again (a copy under each parent) and objects with equal property
lists ask for the same key language, and the literal written the first time serves them all.
The key is the automaton itself (transitions *and* accepting states), never its identity
alone, and the grammars accept exactly what they accept when every literal is written anew."""

from __future__ import annotations

import json

import pytest
from schema_matching import accepts, compile_schema

from treegram.frontends.json_schema import _convert
from treegram.frontends.json_schema._convert import json_schema_to_ir
from treegram.ir import Choice, Repeat, RuleRef, Seq


class _Forgetful(dict):
    """A memo that keeps nothing: every literal written anew (the plain conversion)."""

    def __setitem__(self, key, value) -> None:
        pass


def _plain(monkeypatch) -> None:
    init = _convert.Converter.__init__

    def patched(self, *args, **kwargs):
        init(self, *args, **kwargs)
        self.string_exprs = _Forgetful()

    monkeypatch.setattr(_convert.Converter, "__init__", patched)


# "ab" is declared in both objects, "a" only in the second: the two automata of undeclared
# keys have the same transitions and differ in whether "a" is accepted
_ACCEPTING = {
    "type": "object",
    "properties": {
        "x": {"type": "object", "properties": {"ab": {"type": "integer"}}},
        "y": {
            "type": "object",
            "properties": {"ab": {"type": "integer"}, "a": {"type": "integer"}},
        },
    },
}
_ITEM = {"type": "object", "properties": {"name": {"type": "string"}, "n": {"type": "integer"}}}
_REPEATED = {
    "type": "object",
    "properties": {
        **{f"p{i}": _ITEM for i in range(4)},
        "q": {"type": "array", "items": _ITEM},
        "s": {"type": "string", "pattern": "^[a-c]+$", "maxLength": 5},
        "t": {"type": "string", "pattern": "^[a-c]+$", "maxLength": 5},
    },
}
_CASES = [
    (_ACCEPTING, '{"y": {"a": 1}}', True),
    (_ACCEPTING, '{"y": {"a": "text"}}', False),
    (_ACCEPTING, '{"x": {"a": "text"}}', True),
    (_ACCEPTING, '{"x": {"ab": "text"}}', False),
    (_ACCEPTING, '{"y": {"ab": 2, "abc": []}}', True),
    (_REPEATED, '{"p1": {"name": "k", "other": null}, "q": [{"n": 3, "nam": true}]}', True),
    (_REPEATED, '{"p3": {"n": "3"}}', False),
    (_REPEATED, '{"q": [{"n": 1}, {"name": 2}]}', False),
    (_REPEATED, '{"s": "abcab", "t": "c"}', True),
    (_REPEATED, '{"s": "abcabc"}', False),
    (_REPEATED, '{"t": "abd"}', False),
]


@pytest.mark.parametrize(("schema", "text", "want"), _CASES)
def test_shared_literals_accept_what_written_ones_do(schema, text, want, monkeypatch):
    assert accepts(compile_schema(schema, strict_mode=False), text) is want
    _plain(monkeypatch)
    assert accepts(compile_schema(schema, strict_mode=False), text) is want


def _rules_named(ir, part: str) -> int:
    return sum(part in r.name for r in ir.rules)


def _expanded_size(ir) -> int:
    """Nodes of the root as a tree, references to rules inlined once (a DAG measure)."""
    seen, stack, n = set(), [ir.rule(ir.root).body], 0
    while stack:
        node = stack.pop()
        n += 1
        if isinstance(node, (Seq, Choice)):
            stack.extend(node.items)
        elif isinstance(node, Repeat):
            stack.append(node.item)
        elif isinstance(node, RuleRef) and node.name not in seen:
            seen.add(node.name)
            stack.append(ir.rule(node.name).body)
    return n


def test_equal_automata_are_written_once(monkeypatch):
    shared = json_schema_to_ir(_REPEATED, strict_mode=False)
    _plain(monkeypatch)
    plain = json_schema_to_ir(_REPEATED, strict_mode=False)
    # the item's key language once, not once per parent (the copies share nothing)
    assert 0 < _rules_named(shared, "key_dfa") < _rules_named(plain, "key_dfa")
    assert _expanded_size(shared) < _expanded_size(plain)


def test_the_memo_lives_for_one_conversion():
    schema = json.dumps(_REPEATED)
    first = json_schema_to_ir(schema, strict_mode=False)
    second = json_schema_to_ir(schema, strict_mode=False)
    assert [(r.name, r.body) for r in first.rules] == [(r.name, r.body) for r in second.rules]


# a format and a pattern each named by several properties, and a pattern that spells a
# format's name: each literal is kept under its kind and text
_NAMED = {
    "type": "object",
    "properties": {
        "a": {"type": "string", "format": "date"},
        "b": {"type": "string", "format": "date"},
        "c": {"type": "string", "pattern": "date"},
        "d": {"type": "string", "pattern": "date"},
        "e": {"type": "string", "format": "uuid"},
        "f": {"type": "string", "pattern": "^x+$"},
        "g": {"type": "string", "pattern": "^x+$"},
    },
}
_NAMED_CASES = [
    ('{"a": "2024-02-29", "b": "2023-12-31"}', True),
    ('{"b": "2023-02-29"}', False),
    ('{"c": "a date", "d": "update"}', True),
    ('{"d": "2024-02-29"}', False),
    ('{"e": "123e4567-e89b-12d3-a456-426614174000", "f": "xx", "g": "x"}', True),
    ('{"g": "xy"}', False),
]


@pytest.mark.parametrize(("text", "want"), _NAMED_CASES)
def test_format_and_pattern_literals_accept_what_written_ones_do(text, want, monkeypatch):
    assert accepts(compile_schema(_NAMED, strict_mode=False), text) is want
    init = _convert.Converter.__init__

    def patched(self, *args, **kwargs):
        init(self, *args, **kwargs)
        self._string_literals = _Forgetful()

    monkeypatch.setattr(_convert.Converter, "__init__", patched)
    assert accepts(compile_schema(_NAMED, strict_mode=False), text) is want


def test_an_unknown_format_warns_at_each_property():
    schema = {
        "type": "object",
        "properties": {"a": {"format": "no-such"}, "b": {"format": "no-such"}},
    }
    with pytest.warns(UserWarning) as seen:
        json_schema_to_ir(schema, strict_mode=False, unknown_format="warn")
    where = " ".join(str(w.message) for w in seen)
    assert "/properties/a" in where and "/properties/b" in where
