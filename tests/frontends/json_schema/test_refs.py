"""JSON Schema references: $id bases, anchors, pointers, remotes, drafts, $dynamicRef.

Each case's instances are checked against ``jsonschema`` (the draft named by ``$schema``,
default 2020-12, with a ``referencing`` registry holding the remote documents): the grammar
must accept an instance exactly when the validator does.
"""

from __future__ import annotations

import json

import jsonschema
import pytest
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT7, DRAFT202012
from schema_matching import accepts, byte_compiler

import treegram
from treegram.errors import GrammarError, UnsupportedSchemaError
from treegram.frontends.json_schema._convert import json_schema_to_ir

D7 = "http://json-schema.org/draft-07/schema#"


def _oracle(schema, remotes):
    legacy = isinstance(schema, dict) and schema.get("$schema") == D7
    spec = DRAFT7 if legacy else DRAFT202012
    registry = Registry().with_resources(
        (uri, Resource.from_contents(doc, default_specification=spec))
        for uri, doc in (remotes or {}).items()
    )
    cls = jsonschema.Draft7Validator if legacy else jsonschema.Draft202012Validator
    return cls(schema, registry=registry)


def check(schema, instances, remotes=None):
    """The grammar accepts exactly the instances jsonschema validates (some do, some not)."""
    cg = byte_compiler().compile_grammar(
        treegram.Grammar.from_ir(
            json_schema_to_ir(schema, strict_mode=False, remote_schemas=remotes)
        )
    )
    oracle = _oracle(schema, remotes)
    verdicts = [oracle.is_valid(inst) for inst in instances]
    assert any(verdicts) and not all(verdicts), verdicts  # the case discriminates
    for inst, valid in zip(instances, verdicts, strict=True):
        assert accepts(cg, json.dumps(inst)) == valid, (inst, valid)


def test_relative_refs_against_ids():
    check(
        {
            "$id": "http://example.com/root.json",
            "$defs": {
                "a": {"$id": "nested/a.json", "type": "integer", "minimum": 3},
                "b": {"$id": "nested/b.json", "$ref": "a.json"},
            },
            "type": "array",
            "items": {"$ref": "nested/b.json"},
        },
        [[3, 4], [2], ["x"], []],
    )


def test_id_resolved_against_nearest_parent():
    check(
        {
            "$id": "http://example.com/a/",
            "$defs": {
                "x": {"$id": "http://example.com/x.json", "type": "string"},
                "inner": {
                    "$id": "b/",
                    "$defs": {"x": {"$id": "x.json", "type": "integer"}},
                    "$ref": "x.json",
                },
            },
            "$ref": "b/",
        },
        [1, "s", None],
    )


def test_anchor_in_root_and_embedded_resource():
    check(
        {
            "$id": "http://example.com/root",
            "$defs": {
                "s": {"$anchor": "short", "type": "string", "maxLength": 2},
                "r": {"$id": "other.json", "$defs": {"x": {"$anchor": "short", "type": "boolean"}}},
            },
            "type": "object",
            "properties": {"a": {"$ref": "#short"}, "b": {"$ref": "other.json#short"}},
        },
        [{"a": "ab", "b": True}, {"a": "abc"}, {"b": "ab"}, {"a": True}],
    )


def test_draft7_plain_name_id_is_an_anchor():
    check(
        {
            "$schema": D7,
            "definitions": {"n": {"$id": "#num", "type": "number"}},
            "type": "array",
            "items": {"$ref": "#num"},
        },
        [[1, 2.5], ["x"], [None]],
    )


def test_escaped_and_percent_encoded_pointers():
    check(
        {
            "$defs": {
                "a%b": {"type": "integer"},
                "c/d": {"type": "string"},
                "e~f": {"type": "boolean"},
                'g"h': {"type": "null"},
            },
            "type": "object",
            "properties": {
                "p": {"$ref": "#/$defs/a%25b"},
                "q": {"$ref": "#/$defs/c~1d"},
                "r": {"$ref": "#/$defs/e~0f"},
                "s": {"$ref": "#/$defs/g%22h"},
            },
        },
        [{"p": 1, "q": "x", "r": True, "s": None}, {"p": "x"}, {"q": 1}, {"r": None}, {"s": 1}],
    )


def test_recursion_through_an_id_resource():
    check(
        {
            "$id": "http://example.com/tree",
            "$defs": {
                "node": {
                    "$id": "node",
                    "type": "object",
                    "properties": {
                        "v": {"type": "integer"},
                        "kids": {"type": "array", "items": {"$ref": "node"}},
                    },
                    "required": ["v"],
                    "additionalProperties": False,
                }
            },
            "$ref": "node",
        },
        [
            {"v": 1, "kids": [{"v": 2, "kids": []}]},
            {"v": 1, "kids": [{"v": "x"}]},
            {"kids": []},
            {"v": 1, "w": 2},
        ],
    )


def test_one_target_two_spellings_share_a_rule():
    ir = json_schema_to_ir(
        {
            "$defs": {
                "a": {
                    "type": "object",
                    "properties": {"x": {"$ref": "#/$defs/a"}, "y": {"$ref": "#/%24defs/a"}},
                }
            },
            "$ref": "#/$defs/a",
        }
    )
    assert len([r for r in ir.rules if r.name.startswith("ref_")]) == 1


REMOTES = {
    "http://r.example/defs.json": {"$defs": {"pos": {"type": "integer", "minimum": 1}}},
    "http://r.example/item.json": {
        "$id": "http://r.example/sub/item.json",
        "type": "object",
        "properties": {"n": {"$ref": "../defs.json#/$defs/pos"}},
    },
}


def test_remote_refs():
    check(
        {"type": "array", "items": {"$ref": "http://r.example/item.json"}},
        [[{"n": 1}], [{"n": 0}], [{"n": "1"}], [1]],
        REMOTES,
    )
    check({"$ref": "http://r.example/sub/item.json#/properties/n"}, [2, 0], REMOTES)


def test_remote_refs_through_the_compiler_cache():
    schema = {"$ref": "http://r.example/defs.json#/$defs/pos"}
    other = {"http://r.example/defs.json": {"$defs": {"pos": {"type": "string"}}}}
    comp = byte_compiler()
    a = comp.compile_json_schema(schema, remote_schemas=REMOTES)
    b = comp.compile_json_schema(schema, remote_schemas=other)
    assert accepts(a, "5") and not accepts(a, '"x"')
    assert accepts(b, '"x"') and not accepts(b, "5")


def test_draft7_ref_overrides_siblings():
    refd = {
        "definitions": {"s": {"type": "string"}},
        "type": "object",
        "properties": {"a": {"$ref": "#/definitions/s", "maxLength": 2}},
    }
    instances = [{"a": "abcdef"}, {"a": 1}, {"a": "ab"}]
    check({"$schema": D7, **refd}, instances)  # maxLength is ignored
    check(refd, instances)  # 2020-12: maxLength applies


def test_draft7_ref_ignores_sibling_id():
    check(
        {
            "$schema": D7,
            "$id": "http://example.com/sib/base/",
            "definitions": {
                "s": {"$id": "http://example.com/sib/t.json", "type": "string"},
                "n": {"$id": "t.json", "type": "number"},
            },
            "allOf": [{"$id": "http://example.com/sib/", "$ref": "t.json"}],
        },
        [5, "a"],
    )


def test_draft4_id_inside_a_2020_12_schema_is_no_resource():
    # MaskBench's Github_medium o47944: subschemas carry a draft-4 "$schema" and "id", and
    # their refs point from the root. The root has no "$schema" (2020-12), whose resources
    # are marked by "$id": "id" is an unknown keyword, the subschema is no resource and its
    # "$schema" is not honoured, so the refs resolve against the root (as in jsonschema).
    d4 = "http://json-schema.org/draft-04/schema"
    check(
        {
            "definitions": {
                "resource": {
                    "$schema": d4,
                    "id": "schema/resource",
                    "definitions": {"flag": {"type": "boolean"}},
                    "properties": {"flag": {"$ref": "#/definitions/resource/definitions/flag"}},
                }
            },
            "properties": {"resource": {"$ref": "#/definitions/resource"}},
        },
        [{"resource": {"flag": True}}, {"resource": {"flag": "x"}}, {"resource": 1}],
    )


def test_draft7_root_ref_with_definitions():
    check(
        {"$schema": D7, "$ref": "#/definitions/a", "definitions": {"a": {"type": "integer"}}},
        [1, "x"],
    )


def test_ref_inside_enum_is_data():
    check(
        {"$defs": {"a": {"type": "string"}}, "enum": [{"$ref": "#/$defs/a"}]},
        [{"$ref": "#/$defs/a"}, "x"],
    )


def test_enum_next_to_a_ref_is_filtered_through_the_ref():
    check(
        {
            "$defs": {"s": {"type": "string"}},
            "enum": [{"a": "x"}, {"a": 1}],
            "properties": {"a": {"$ref": "#/$defs/s"}},
        },
        [{"a": "x"}, {"a": 1}],
    )


def test_dynamic_ref_to_plain_anchor_is_a_ref():
    check({"$defs": {"f": {"$anchor": "f", "type": "string"}}, "$dynamicRef": "#f"}, ["a", 1])


def test_dynamic_ref_with_pointer_is_a_ref():
    check({"$defs": {"f": {"type": "integer"}}, "$dynamicRef": "#/$defs/f"}, [1, "a"])


def test_dynamic_ref_to_the_only_dynamic_anchor():
    check(
        {
            "$id": "http://example.com/list",
            "type": "array",
            "items": {"$dynamicRef": "#item"},
            "$defs": {"item": {"$dynamicAnchor": "item", "type": "integer"}},
        },
        [[1, 2], ["x"]],
    )


def test_dynamic_ref_with_several_dynamic_anchors_is_refused():
    remotes = {
        "http://example.com/tree": {
            "$id": "http://example.com/tree",
            "$dynamicAnchor": "node",
            "type": "object",
            "properties": {"kids": {"type": "array", "items": {"$dynamicRef": "#node"}}},
        }
    }
    schema = {
        "$id": "http://example.com/strict",
        "$dynamicAnchor": "node",
        "$ref": "tree",
        "unevaluatedProperties": False,
    }
    with pytest.raises(UnsupportedSchemaError, match=r"\$dynamicRef"):
        json_schema_to_ir(schema, remote_schemas=remotes)


@pytest.mark.parametrize(
    "schema, uri",
    [
        ({"$ref": "#/$defs/missing"}, "urn:treegram:root#/$defs/missing"),
        ({"$ref": "http://r.example/nowhere.json"}, "http://r.example/nowhere.json"),
        (
            {"$ref": "https://json-schema.org/draft/2020-12/schema"},
            "https://json-schema.org/draft/2020-12/schema",
        ),
        ({"type": "array", "items": {"$ref": "#nope"}}, "urn:treegram:root#nope"),
    ],
)
def test_unresolved_ref_is_refused(schema, uri):
    with pytest.raises(UnsupportedSchemaError, match=r"'\$ref'") as info:
        json_schema_to_ir(schema, remote_schemas=REMOTES)
    assert uri in str(info.value)


@pytest.mark.parametrize(
    "remotes", [[("http://x/", {})], {"http://x/": "not a schema"}, {1: {}}, {"http://x/#frag": {}}]
)
def test_remote_schemas_type_is_checked(remotes):
    with pytest.raises(GrammarError, match="remote_schemas"):
        json_schema_to_ir({"type": "integer"}, remote_schemas=remotes)
    with pytest.raises(GrammarError, match="remote_schemas"):
        byte_compiler().compile_json_schema({"type": "integer"}, remote_schemas=remotes)


def test_ref_under_a_property_name_that_needs_escaping():
    # The escaped spelling of a declared name is that property, not an additional one.
    check(
        {
            "properties": {'a"b': {"$ref": "#/$defs/a%22b"}, "c\nd": {"type": "null"}},
            "$defs": {'a"b': {"type": "number"}},
        },
        [{'a"b': 1}, {'a"b': "1"}, {"c\nd": None}, {"c\nd": 1}, {"x": 1}],
    )


def test_pointer_into_an_unknown_keyword():
    check(
        {
            "$id": "http://example.com/u",
            "x-lib": {"int": {"type": "integer"}},
            "type": "array",
            "items": {"$ref": "#/x-lib/int"},
        },
        [[1], ["a"]],
    )


def test_id_inside_an_unknown_keyword_is_no_identifier():
    schema = {
        "$id": "http://example.com/u",
        "x-lib": {"$id": "http://example.com/inner.json", "type": "integer"},
        "$ref": "http://example.com/inner.json",
    }
    with pytest.raises(UnsupportedSchemaError, match="inner.json"):
        json_schema_to_ir(schema)
    with pytest.raises(Exception, match="inner.json"):  # jsonschema cannot resolve it either
        _oracle(schema, None).is_valid(1)


def test_unresolved_ref_next_to_enum_is_refused():
    with pytest.raises(UnsupportedSchemaError, match="nowhere.json"):
        json_schema_to_ir(
            {"enum": [{"a": 1}], "properties": {"a": {"$ref": "http://r.example/nowhere.json"}}}
        )
