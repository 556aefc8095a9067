"""Recursion stays a recursion: a schema that refers to itself through ``allOf``, a
``$ref`` with sibling keywords or a negation compiles to rules that call each other
instead of being inlined level after level up to the nesting limit. The oracle is
``jsonschema`` on generated trees."""

from __future__ import annotations

import json

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from schema_matching import accepts, compile_schema

from treegram.errors import UnsupportedSchemaError
from treegram.frontends.json_schema import json_schema_to_ir

ITEM = {
    "type": "object",
    "properties": {  # in sorted order: instances are written with sorted keys
        "children": {"type": "array", "items": {"allOf": [{"$ref": "#/$defs/item"}]}},
        "value": {"type": "string", "maxLength": 3},
    },
    "required": ["value", "children"],
    "additionalProperties": False,
}
SCHEMAS = {
    "allOf-ref": {"$defs": {"item": ITEM}, "$ref": "#/$defs/item"},
    "ref-with-siblings": {
        "$defs": {
            "node": {
                "type": "object",
                "properties": {"next": {"$ref": "#/$defs/node", "description": "the rest"}},
                "additionalProperties": False,
            }
        },
        "$ref": "#/$defs/node",
        "title": "a chain",
    },
    "two-refs-in-allOf": {
        "$defs": {
            "base": {"type": "object"},
            "foo": {
                "type": "object",
                "properties": {
                    "kids": {"allOf": [{"$ref": "#/$defs/foo"}, {"$ref": "#/$defs/base"}]}
                },
            },
        },
        "$ref": "#/$defs/foo",
    },
    "not-recursive": {
        "$defs": {
            "tree": {
                "type": "object",
                "properties": {"kid": {"$ref": "#/$defs/tree"}, "n": {"type": "integer"}},
            }
        },
        "not": {"$ref": "#/$defs/tree"},
    },
}


def _trees(depth: int):
    leaf = st.fixed_dictionaries(
        {"value": st.sampled_from(["", "a", "abcd"]), "children": st.just([])}
    )
    return st.recursive(
        leaf,
        lambda kids: st.fixed_dictionaries(
            {"value": st.sampled_from(["a", "bb"]), "children": st.lists(kids, max_size=2)}
        ),
        max_leaves=depth,
    )


# per schema, keys its objects declare, and one further key that sorts after them
# (declared properties come first in the layout; instances are written with sorted keys)
KEYS = {
    "allOf-ref": ["children", "value", "zz"],
    "ref-with-siblings": ["next", "zz"],
    "two-refs-in-allOf": ["kids", "zz"],
    "not-recursive": ["kid", "n", "zz"],
}


def _values(keys):
    return st.recursive(
        st.one_of(st.none(), st.integers(-2, 2), st.sampled_from(["a", "abcd"])),
        lambda c: st.dictionaries(st.sampled_from(keys), c, max_size=2),
        max_leaves=8,
    )


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_recursion_is_rules_not_copies(name):
    ir = json_schema_to_ir(SCHEMAS[name], strict_mode=False)
    assert len(ir.rules) < 40  # inlined to the nesting limit it was a GrammarError


@pytest.mark.parametrize("name", sorted(SCHEMAS))
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_matches_jsonschema(name, data):
    schema = SCHEMAS[name]
    values = data.draw(st.lists(st.one_of(_trees(12), _values(KEYS[name])), min_size=1, max_size=6))
    cg = _compiled(name)
    validator = jsonschema.Draft202012Validator(schema)
    for value in values:
        text = json.dumps(value, sort_keys=True)
        assert accepts(cg, text) == validator.is_valid(value), (name, text)


_CACHE: dict = {}


def _compiled(name):
    if name not in _CACHE:
        _CACHE[name] = compile_schema(SCHEMAS[name], strict_mode=False)
    return _CACHE[name]


def test_deep_instances():
    cg = _compiled("allOf-ref")
    doc = {"children": [], "value": "a"}
    for _ in range(200):
        doc = {"children": [doc], "value": "b"}
    assert accepts(cg, json.dumps(doc))


def test_a_oneof_past_the_budget_is_refused_or_widened(monkeypatch):
    # six object branches that overlap: each branch with the negations of the five others
    # needs about 20,000 subschemas; widened to anyOf, about 50
    from treegram.frontends.json_schema import _convert

    monkeypatch.setattr(_convert, "MAX_SUBSCHEMAS", 1000)
    branches = [
        {
            "type": "object",
            "properties": {f"p{j}": {"type": "integer", "minimum": i + j} for j in range(6)},
            "required": [f"p{i}"],
        }
        for i in range(6)
    ]
    schema = {"type": "array", "items": {"oneOf": branches}, "maxItems": 3}
    with pytest.raises(UnsupportedSchemaError, match="oneOf.*more than 1000 subschemas"):
        json_schema_to_ir(schema, strict_mode=False)
    with pytest.warns(UserWarning, match="oneOf"):
        cg = compile_schema(schema, strict_mode=False, unsupported="warn")
    validator = jsonschema.Draft202012Validator(schema)
    anyof = jsonschema.Draft202012Validator({**schema, "items": {"anyOf": branches}})
    for value in ([{"p0": 1}], [{"p1": 1, "p2": 5}], [{"p0": 0, "p3": 9}], [{"p5": 20}]):
        text = json.dumps(value, sort_keys=True)
        assert accepts(cg, text) == anyof.is_valid(value), text  # widened to anyOf
        if validator.is_valid(value):
            assert accepts(cg, text)  # so every valid instance is accepted
