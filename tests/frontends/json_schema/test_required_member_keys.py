"""The key languages of required kinds of member (from negated objects: a ``oneOf`` of
closed objects) are built once per key schema text in a conversion, and the grammar is
the one built without keeping them."""

from __future__ import annotations

import json

import treegram.frontends.json_schema._objects as objects
from treegram.frontends.json_schema import json_schema_to_ir
from treegram.ir import grammar_to_ebnf


def _closed(key: str) -> dict:
    return {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            key: {"type": "string"},
            "title": {"type": "string"},
            "elements": {"type": "array", "items": {"$ref": "#/$defs/element"}},
        },
    }


SCHEMA = {
    "$defs": {"element": {"oneOf": [_closed("case"), _closed("sequence"), _closed("group")]}},
    "type": "array",
    "items": {"$ref": "#/$defs/element"},
}


def _spied(monkeypatch) -> list[str]:
    built = []
    plain = objects.string_dfa

    def spy(schema, conv=None, ptr="", _depth=0):
        built.append(json.dumps(schema))
        return plain(schema, conv, ptr, _depth)

    monkeypatch.setattr(objects, "string_dfa", spy)
    return built


def test_each_key_language_is_built_once(monkeypatch):
    built = _spied(monkeypatch)
    json_schema_to_ir(json.dumps(SCHEMA))
    assert len(built) == len(set(built)) == 3  # the keys outside each branch's names


def test_a_key_schema_with_a_format_is_built_where_it_is(monkeypatch):
    schema = json.loads(json.dumps(SCHEMA).replace('"title"', '"format"'))
    for branch in schema["$defs"]["element"]["oneOf"]:
        branch["propertyNames"] = {"format": "date"}
    built = _spied(monkeypatch)
    json_schema_to_ir(json.dumps(schema), unsupported="warn")
    with_format = [b for b in built if '"format"' in b]
    assert len(with_format) > len(set(with_format))


def test_the_grammar_is_the_plain_one(monkeypatch):
    kept = grammar_to_ebnf(json_schema_to_ir(json.dumps(SCHEMA)))
    monkeypatch.setattr(
        objects, "_key_language", lambda conv, schema, ptr: objects.string_dfa(schema, conv, ptr)
    )
    assert grammar_to_ebnf(json_schema_to_ir(json.dumps(SCHEMA))) == kept
