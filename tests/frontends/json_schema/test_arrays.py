"""Counting array keywords of the JSON Schema frontend against the ``jsonschema`` oracle:
``contains`` with ``minContains``/``maxContains``, ``uniqueItems``, and count keywords
given as integral floats.

Every small array over a pool of values (and a few non-arrays) is run through a
byte-level matcher; the grammar must accept it exactly when ``jsonschema`` validates it.
Schemas compile with ``strict_mode=False`` (JSON Schema semantics for absent ``items``).
"""

from __future__ import annotations

import itertools
import json

import jsonschema
import pytest
from schema_matching import accepts, byte_compiler
from schema_matching import compile_schema as compiled

import treegram
from treegram.errors import GrammarError
from treegram.frontends.json_schema._convert import UnsupportedSchemaError, json_schema_to_ir

D7 = "http://json-schema.org/draft-07/schema#"


def _instances(pool: list, longest: int = 3) -> list:
    out = [None, 1, "x", {}]
    for n in range(longest + 1):
        out += [list(t) for t in itertools.product(pool, repeat=n)]
    out += [list(t) for t in itertools.product([1, "a", None], repeat=4)]
    return out


POOL = [0, 1, "a", "b", True, False, None]


def check_against_oracle(schema, instances) -> None:
    cg = compiled(schema, strict_mode=False)
    cls = jsonschema.validators.validator_for(schema, jsonschema.Draft202012Validator)
    validator = cls(schema)
    for inst in instances:
        want = validator.is_valid(inst)
        for text in (json.dumps(inst), json.dumps(inst, indent=1)):
            assert accepts(cg, text) == want, (schema, text, want)


CONTAINS = {
    "maxContains": {"contains": {"const": 1}, "maxContains": 2},
    "min-max-with-items": {
        "items": {"type": ["string", "integer"]},
        "contains": {"type": "string"},
        "minContains": 2,
        "maxContains": 3,
    },
    "zero-to-one-maxItems": {
        "contains": {"type": "boolean"},
        "minContains": 0,
        "maxContains": 1,
        "maxItems": 3,
    },
    "minContains-only": {"contains": {"type": "null"}, "minContains": 2},
    "exactly-one-minItems": {
        "contains": {"const": True},
        "minContains": 1,
        "maxContains": 1,
        "minItems": 2,
    },
    "prefixItems": {
        "prefixItems": [{"type": "integer"}, {"type": "string"}],
        "contains": {"type": "string"},
        "maxContains": 1,
    },
    "decimal-counts": {"contains": {"type": "string"}, "minContains": 2.0, "maxContains": 3.0},
    "max-below-min": {"contains": {"type": "integer"}, "minContains": 2, "maxContains": 1},
    "counts-without-contains": {"minContains": 3, "maxContains": 0},
    "allOf-same-contains": {
        "allOf": [
            {"contains": {"const": 1}, "minContains": 0},
            {"contains": {"const": 1}, "maxContains": 2},
        ]
    },
    "allOf-count-elsewhere": {"allOf": [{"contains": {"type": "string"}}, {"maxContains": 0}]},
    "negated-integer-contains": {
        "contains": {"type": "integer"},
        "maxContains": 1,
        "minContains": 1,
    },
    "negated-string-length": {"contains": {"type": "string", "minLength": 1}, "maxContains": 1},
    "plain-contains-maxItems": {"contains": {"type": "string"}, "maxItems": 2, "minItems": 2},
}


@pytest.mark.parametrize("name", sorted(CONTAINS))
def test_contains_counts(name):
    check_against_oracle(CONTAINS[name], _instances(POOL))


def test_contains_with_items_merges_multiple_of():
    # The match schema is allOf [items, contains]: multipleOf 2 and 3 merge to 6.
    schema = {"items": {"multipleOf": 2}, "contains": {"multipleOf": 3}, "maxItems": 3}
    check_against_oracle(schema, _instances([0, 2, 3, 4, 6, 9, 12, -6]))
    both = {"type": "integer", "allOf": [{"multipleOf": 0.5}, {"multipleOf": 0.75}]}
    check_against_oracle(both, [-3, 0, 1, 2, 3, 4, 6, 7, 9, 12])


UNIQUE = {
    "prefix-booleans": {
        "prefixItems": [{"type": "boolean"}, {"type": "boolean"}],
        "items": False,
        "uniqueItems": True,
    },
    "draft7-tuple": {
        "$schema": D7,
        "items": [{"type": "boolean"}, {"type": "boolean"}],
        "additionalItems": False,
        "uniqueItems": True,
    },
    "finite-items": {"items": {"type": ["boolean", "null"]}, "uniqueItems": True, "minItems": 2},
    "enum-filtered-by-type": {
        "items": {"enum": [1, "a", "b"], "type": "string"},
        "uniqueItems": True,
    },
    "disjoint-positions": {
        "prefixItems": [{"type": "string"}, {"type": "integer"}, {"type": "boolean"}],
        "items": False,
        "uniqueItems": True,
    },
    "maxItems-one": {"items": {"type": "integer"}, "maxItems": 1, "uniqueItems": True},
    "false": {"uniqueItems": False},
    "prefix-then-finite-items": {
        "prefixItems": [{"const": "a"}],
        "items": {"enum": ["a", "b", 0]},
        "uniqueItems": True,
    },
}


@pytest.mark.parametrize("name", sorted(UNIQUE))
def test_unique_items(name):
    check_against_oracle(UNIQUE[name], _instances(POOL))


def test_unique_items_uses_json_equality():
    # 1 and 1.0 are one value; objects are equal whatever their key order.
    schema = {"items": {"enum": [1, 1.0, {"x": 1, "y": 2}, {"y": 2, "x": 1}]}, "uniqueItems": True}
    instances = [
        [1],
        [1.0],
        [1, 1.0],
        [1.0, 1],
        [{"x": 1, "y": 2}, 1.0],
        [{"x": 1, "y": 2}, {"y": 2, "x": 1}],
        [1, 2],
    ]
    check_against_oracle(schema, instances)


@pytest.mark.parametrize(
    "schema, keyword",
    [
        ({"uniqueItems": True}, "uniqueItems"),
        ({"items": {"type": "integer"}, "maxItems": 3, "uniqueItems": True}, "uniqueItems"),
        ({"contains": {"const": 1}, "uniqueItems": True}, "uniqueItems"),
        ({"items": {"enum": list(range(11))}, "uniqueItems": True}, "uniqueItems.*more than"),
        (
            {
                "allOf": [{"contains": {"const": 1}}, {"contains": {"const": 2}}],
                "prefixItems": [True],
            },
            "contains",
        ),
        ({"contains": {"const": 1}, "unevaluatedItems": False}, "unevaluatedItems"),
    ],
)
def test_refused_array_keywords(schema, keyword):
    with pytest.raises(UnsupportedSchemaError, match=keyword):
        json_schema_to_ir(schema, strict_mode=False)


def test_unique_items_warn_drops_only_uniqueness():
    with pytest.warns(UserWarning, match="uniqueItems"):
        ir = json_schema_to_ir(
            {"items": {"type": "integer"}, "uniqueItems": True}, unsupported="warn"
        )
    cg = byte_compiler().compile_grammar(treegram.Grammar.from_ir(ir))
    assert accepts(cg, "[1, 1]")
    assert not accepts(cg, '["a"]')


@pytest.mark.parametrize(
    "schema, good, bad",
    [
        ({"type": "string", "minLength": 2.0}, ["ab"], ["a"]),
        ({"type": "string", "maxLength": 2.0}, ["ab"], ["abc"]),
        ({"type": "array", "maxItems": 1.0}, [[1]], [[1, 2]]),
        ({"type": "object", "minProperties": 1.0}, [{"a": 1}], [{}]),
    ],
)
def test_integral_float_counts(schema, good, bad):
    cg = compiled(schema)
    assert all(accepts(cg, json.dumps(x)) for x in good)
    assert not any(accepts(cg, json.dumps(x)) for x in bad)


@pytest.mark.parametrize(
    "schema", [{"minLength": 1.5}, {"maxItems": -1}, {"contains": {}, "minContains": True}]
)
def test_malformed_counts(schema):
    with pytest.raises(GrammarError, match="non-negative integer"):
        json_schema_to_ir(schema)


@pytest.mark.parametrize(
    "schema",
    [
        {"allOf": [{"contains": {"const": 1}}, {"contains": {"type": "string"}}]},
        {
            "items": {"type": ["integer", "string"]},
            "allOf": [
                {"contains": {"minimum": 5}},
                {"contains": {"maximum": 0}},
                {"contains": {"const": "a"}},
            ],
        },
        {
            "contains": {"const": 1},
            "allOf": [
                {"contains": {"const": 1}, "maxContains": 2},
                {"contains": {"type": "boolean"}},
            ],
        },
        {"not": {"allOf": [{"contains": {"const": 1}}, {"contains": {"const": 2}}]}},
        {"allOf": [{"contains": {"const": 1}}, {"contains": {"const": 2}}], "minItems": 3},
        {"allOf": [{"contains": {"const": 1}}, {"contains": {"const": 2}}], "maxItems": 2},
        {
            "oneOf": [
                {"items": {"const": 1}},
                {"items": {"type": "integer"}},
                {"items": {"enum": [1, "a"]}},
            ],
            "minItems": 2,
        },
    ],
)
def test_several_contains_in_all_of(schema):
    pool = [1, 2, 5, -1, "a", True, None]
    if "maxContains" in json.dumps(schema):
        with pytest.raises(UnsupportedSchemaError, match="contains"):
            json_schema_to_ir(schema, strict_mode=False)
        return
    check_against_oracle(schema, _instances(pool))
