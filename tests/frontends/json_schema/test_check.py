"""Shape check of a JSON Schema: a keyword whose value has the wrong JSON type is refused
with a GrammarError (a ValueError) that names the keyword's JSON pointer, never an
AttributeError or TypeError from inside the converter."""

from __future__ import annotations

import pytest
from schema_matching import byte_compiler

from treegram import Grammar
from treegram.errors import GrammarError
from treegram.frontends.json_schema._check import check_schema_shapes

MALFORMED = [
    ({"type": "object", "properties": "notadict"}, "properties at #/properties", "an object"),
    ({"properties": {"a": {"properties": []}}}, "/properties/a/properties", "an object"),
    ({"type": "array", "items": "x"}, "/items", "an object or a boolean"),
    ({"items": [{}, 3]}, "/items/1", "an object or a boolean"),
    ({"additionalProperties": 3}, "/additionalProperties", "an object or a boolean"),
    ({"anyOf": {}}, "#/anyOf", "an array of schemas"),
    ({"allOf": [{"not": "x"}]}, "/allOf/0/not", "an object or a boolean"),
    ({"prefixItems": {}}, "#/prefixItems", "an array of schemas"),
    ({"$defs": {"a": "b"}}, "/$defs/a", "an object or a boolean"),
    ({"patternProperties": {"^a": 1}}, "/patternProperties/^a", "an object or a boolean"),
    ({"required": "a"}, "#/required", "an array of strings"),
    ({"required": ["a", 3]}, "#/required", "an array of strings"),
    ({"dependentRequired": {"a": "b"}}, "#/dependentRequired", "an object of arrays of strings"),
    ({"dependencies": []}, "#/dependencies", "an object"),
    ({"enum": "ab"}, "#/enum", "an array"),
    ({"type": 5}, "#/type", "a string or an array of strings"),
    ({"pattern": 5}, "#/pattern", "a string"),
    ({"format": ["date"]}, "#/format", "a string"),
    ({"$ref": 5}, "#/$ref", "a string"),
    ({"$id": 5}, "#/$id", "a string"),
    ({"$anchor": {}}, "#/$anchor", "a string"),
    ({"uniqueItems": "yes"}, "#/uniqueItems", "a boolean"),
    ({"items": {"uniqueItems": 1}}, "/items/uniqueItems", "a boolean"),
    ({"nullable": "x"}, "#/nullable", "a boolean"),
    ({"minItems": 1.5}, "#/minItems", "a non-negative integer"),
    ({"maxProperties": "3"}, "#/maxProperties", "a non-negative integer"),
    ({"minimum": "0"}, "#/minimum", "a number"),
    ({"exclusiveMaximum": None}, "#/exclusiveMaximum", "a number"),
    ([1], "#", "an object or a boolean"),
]


@pytest.mark.parametrize("schema, where, expected", MALFORMED)
def test_malformed_keyword_values_name_their_pointer(schema, where, expected):
    with pytest.raises(GrammarError, match="must be " + expected) as err:
        check_schema_shapes(schema)
    assert where in str(err.value)
    assert isinstance(err.value, ValueError)
    if isinstance(schema, dict):  # through both public entry points
        with pytest.raises(GrammarError, match=expected):
            Grammar.from_json_schema(schema)
        with pytest.raises(GrammarError, match=expected):
            byte_compiler().compile_json_schema(schema)


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"]},
        {"id": 5, "examples": "x", "title": 3},  # not keywords in 2020-12: ignored
        {"uniqueItems": False, "nullable": True, "$id": "https://x/s", "exclusiveMinimum": 0},
        {"items": [True, {"type": "null"}], "dependencies": {"a": ["b"], "c": {}}},
        True,
    ],
)
def test_well_formed_schemas_pass(schema):
    check_schema_shapes(schema)
