"""Annotations (``title``, ``description``, ``examples``, ``x-*`` extensions, unknown
keywords) never constrain a value, so they never block a merge, a negation or a string
automaton: the grammar accepts exactly what ``jsonschema`` validates."""

from __future__ import annotations

import json

import pytest
from schema_matching import accepts, compile_schema, exact_validator

ANNOTATED = {
    "allOf-extensions": {
        "type": "object",
        "allOf": [
            {
                "x-intellij-html-description": "<b>first</b>",
                "title": "one",
                "properties": {"a": {"type": "integer"}},
            },
            {
                "x-intellij-html-description": "<i>second</i>",
                "title": "two",
                "description": "other",
                "examples": [{"b": "x"}],
                "default": {},
                "deprecated": True,
                "properties": {"b": {"type": "string"}},
            },
        ],
    },
    "allOf-unknown-keywords": {
        "allOf": [
            {"headerTemplate": "A", "options": {"x": 1}, "minimum": 1},
            {"headerTemplate": "B", "options": {"x": 2}, "maximum": 3},
        ]
    },
    "ref-beside-annotations": {
        "$defs": {"n": {"type": "integer", "title": "n", "x-order": 1}},
        "$ref": "#/$defs/n",
        "title": "other",
        "x-order": 2,
        "maximum": 2,
    },
    "not-with-annotations": {"not": {"pattern": "^a", "x-note": "no a", "title": "t"}},
    "oneOf-with-annotations": {
        "oneOf": [
            {"type": "string", "x-kind": 1, "maxLength": 1},
            {"type": "string", "x-kind": 2, "minLength": 1},
        ]
    },
}

VALUES = [None, 0, 1, 2, 3, 4, -1, "", "a", "b", "ab", "ba", {}, {"a": 1}, {"a": 1, "b": "x"}]


@pytest.mark.parametrize("name", sorted(ANNOTATED))
def test_annotations_never_constrain(name):
    schema = ANNOTATED[name]
    cg = compile_schema(schema, strict_mode=False)
    validator = exact_validator(schema)
    for value in VALUES:
        text = json.dumps(value)
        assert accepts(cg, text) == validator.is_valid(value), (name, text)
