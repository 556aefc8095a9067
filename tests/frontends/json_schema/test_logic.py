"""``not``, ``if``/``then``/``else``, overlapping ``oneOf`` and the dependency keywords.

The oracle is the ``jsonschema`` package: for each schema, every instance (serialized with
``json.dumps(sort_keys=True)``, matching the sorted property order of the schemas here) is
accepted exactly when the validator says it is valid. Complements that are not expressible
exactly must raise :class:`UnsupportedSchemaError` naming the keyword.
"""

from __future__ import annotations

import json

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schema_matching import (
    accepts,
    byte_compiler,
    compile_schema,
    exact_validator,
    json_values,
)

import treegram
from treegram.frontends.json_schema._convert import UnsupportedSchemaError, json_schema_to_ir


def compiled(schema, strict_mode: bool = False):
    return compile_schema(schema, strict_mode=strict_mode)


VALUES = [
    None,
    True,
    False,
    0,
    1,
    2,
    5,
    -3,
    1.5,
    -0.25,
    2.5,
    "",
    "a",
    "b",
    "ab",
    "then",
    "a\nb",
    [],
    [1],
    [3],
    ["a"],
    [{"a": 1}],
    [{"b": "x"}],
    [{"b": "x"}, {"a": 2}],
    ["a", 1],
    [1, "a", None],
    [1, 2],
    [1, "a", 2, 3],
    {},
    {"a": 1},
    {"b": "x"},
    {"a": "x", "b": 2},
    {"a": 2, "b": "then"},
    {"a": None, "b": 1, "c": True},
    {"a": 2, "b": "x"},
    {"a": 1, "c": 1},
    {"c": 1},
]


def _tagged(tag) -> dict:
    """Objects whose member ``a`` is ``tag`` (every other value too: no ``type``)."""
    return {"required": ["a"], "properties": {"a": {"const": tag}}}


CASES = {
    "not-type": {"not": {"type": "string"}},
    "not-types": {"not": {"type": ["null", "boolean", "array"]}},
    "not-integer": {"not": {"type": "integer"}},
    "not-number": {"not": {"type": "number"}},
    "not-const-string": {"not": {"const": "a"}},
    "not-enum-mixed": {"not": {"enum": [1, "b", None, True]}},
    "not-minimum": {"not": {"minimum": 1}},
    "not-exclusive-range": {"not": {"exclusiveMinimum": 0, "maximum": 2}},
    "not-length": {"not": {"minLength": 1, "maxLength": 1}},
    "not-required": {"not": {"required": ["a"]}},
    "not-properties": {"not": {"properties": {"a": {"type": "integer"}}}},
    "not-items": {"not": {"items": {"type": "integer"}}},
    "not-prefix": {"not": {"prefixItems": [{"type": "string"}], "items": False}},
    "not-contains": {"not": {"contains": {"type": "null"}}},
    "not-anyOf": {"not": {"anyOf": [{"type": "string"}, {"minimum": 2}]}},
    "not-not": {"not": {"not": {"type": "array", "minItems": 1}}},
    "not-sizes": {"not": {"minItems": 2, "maxProperties": 1}},
    "type-and-not": {"type": "integer", "not": {"enum": [1, 2]}},
    "if-then-else": {"if": {"type": "integer"}, "then": {"minimum": 2}, "else": {"type": "string"}},
    "if-then": {
        "if": {"properties": {"a": {"const": 2}}, "required": ["a"]},
        "then": {"required": ["b"]},
    },
    "if-else": {"if": {"maxLength": 1}, "else": {"const": "then"}},
    "oneOf-overlap": {"oneOf": [{"type": "integer"}, {"minimum": 2}]},
    "oneOf-three": {"oneOf": [{"type": "string"}, {"minLength": 2}, {"maxLength": 0}]},
    "oneOf-objects": {"oneOf": [{"required": ["a"]}, {"required": ["b"]}]},
    "dependentRequired": {"dependentRequired": {"b": ["a"]}},
    "dependentSchemas": {
        "properties": {"a": {}, "b": {}},
        "dependentSchemas": {"a": {"properties": {"b": {"type": "integer"}}}},
    },
    "dependencies-draft7": {"dependencies": {"c": ["a", "b"], "a": {"maxProperties": 2}}},
    "not-counted-contains": {
        "not": {"contains": {"type": "integer"}, "minContains": 2, "maxContains": 2}
    },
    "not-not-integer": {"not": {"not": {"type": "integer"}}},
    "not-pattern": {"not": {"pattern": "^a"}},
    "not-pattern-and-length": {"not": {"pattern": "b", "minLength": 2}},
    "not-enum-with-length": {"maxLength": 2, "not": {"enum": ["a", "ab"]}},
    "not-not-pattern": {"not": {"not": {"pattern": "b$"}}},
    "oneOf-patterns": {"oneOf": [{"pattern": "a"}, {"pattern": "b"}]},
    "not-array-values": {"not": {"enum": [["a", 1], [], [1, [2]]]}},
    "enum-and-not-array": {"allOf": [{"enum": [[1], [True]]}, {"not": {"enum": [[True]]}}]},
    "not-in-allOf": {"allOf": [{"not": {"type": "null"}}, {"not": {"const": 0}}]},
    "not-multipleOf": {"not": {"multipleOf": 3}},
    "not-decimal-multipleOf": {"not": {"multipleOf": 0.5}},
    "integer-not-multipleOf": {"type": "integer", "not": {"multipleOf": 2}},
    "not-additionalProperties": {"not": {"additionalProperties": {"type": "string"}}},
    "not-closed-object": {"not": {"properties": {"a": {}}, "additionalProperties": False}},
    "not-patternProperties": {"not": {"patternProperties": {"^a": {"type": "integer"}}}},
    "not-propertyNames": {"not": {"propertyNames": {"enum": ["a", "b"]}}},
    "not-const-object": {"not": {"const": {"a": 1}}},
    "not-enum-objects": {"type": "object", "not": {"enum": [{}, {"a": None, "b": 1, "c": True}]}},
    "oneOf-closed-objects": {
        "oneOf": [
            {"properties": {"a": {}}, "additionalProperties": False},
            {"properties": {"b": {}}, "additionalProperties": False},
        ]
    },
    "oneOf-open-and-closed": {
        "oneOf": [
            {"type": "object", "properties": {"a": {"type": "integer"}}},
            {"type": "object", "additionalProperties": {"type": "integer"}},
        ]
    },
    "not-has-member-required": {  # declared first, then further members (the layout)
        "required": ["c"],
        "properties": {"a": {}},
        "not": {"additionalProperties": {"type": "string"}},
    },
    "not-unevaluatedProperties": {"not": {"properties": {"a": {}}, "unevaluatedProperties": False}},
    "not-unevaluatedItems": {"not": {"unevaluatedItems": {"type": "string"}}},
    # a failed subschema evaluates nothing: the negations (of the if, of the other oneOf
    # branches) require or forbid members without making them evaluated
    "if-then-else-unevaluatedProperties": {
        "if": {"properties": {"a": {"const": 2}}, "required": ["a"]},
        "then": {"properties": {"b": {"type": "string"}}, "required": ["b"]},
        "else": {"properties": {"c": {}}},
        "unevaluatedProperties": False,
    },
    "if-then-unevaluatedProperties": {
        "if": {"properties": {"a": {"const": 2}}, "required": ["a"]},
        "then": {"properties": {"b": {}}},
        "unevaluatedProperties": False,
    },
    "oneOf-unevaluatedProperties": {
        "oneOf": [
            {"properties": {"a": {}}, "required": ["a"]},
            {"properties": {"b": {"type": "integer"}}, "required": ["b"]},
        ],
        "unevaluatedProperties": False,
    },
    # contains evaluates the items it matches: the others must satisfy unevaluatedItems,
    # inside an allOf part too (beside a negation, which evaluates nothing)
    "allOf-contains-unevaluatedItems-not": {
        "allOf": [
            {"type": "array", "contains": {"type": "integer"}, "unevaluatedItems": False},
            {"not": {"type": "array", "items": {"type": "string"}}},
        ]
    },
    "allOf-contains-unevaluatedItems-schema": {
        "allOf": [
            {"contains": {"type": "integer"}, "unevaluatedItems": {"type": "string"}},
            {"minItems": 2},
        ]
    },
    "allOf-additional-next-to-patterns": {
        "allOf": [
            {"properties": {"a": {}}, "additionalProperties": {"type": "integer"}},
            {"patternProperties": {"^[bc]": {"type": ["string", "integer"]}}},
        ]
    },
    # oneOf branches that overlap only on types each accepts whole (non-objects here):
    # those values match every branch, so oneOf rejects them; the rest is a plain choice
    "one-of-discriminated": {"oneOf": [_tagged(1), _tagged(2)]},
    "one-of-discriminated-many": {"oneOf": [_tagged(i) for i in range(20)]},
    "one-of-discriminated-absent": {
        "oneOf": [_tagged(1), _tagged(2), {"required": ["b"], "properties": {"a": False}}]
    },
    "one-of-discriminated-refs": {
        "$defs": {"one": _tagged(1), "two": {"allOf": [_tagged(2), {"minProperties": 1}]}},
        "oneOf": [{"$ref": "#/$defs/one"}, {"$ref": "#/$defs/two"}],
    },
    "one-of-discriminated-objects": {"type": "object", "oneOf": [_tagged(1), _tagged(2)]},
    "one-of-discriminated-number-or-object": {
        "type": ["number", "object"],
        "oneOf": [_tagged(1), {"minimum": 2, **_tagged(2)}],
    },
    "not-one-of-discriminated": {"not": {"oneOf": [_tagged(1), _tagged(2)]}},
    "not-one-of-discriminated-beside": {
        "required": ["b"],
        "not": {"required": ["c"], "oneOf": [_tagged(1), _tagged(2)]},
    },
    # arrays whose items are disjoint overlap only on []: oneOf rejects it when two
    # branches accept it
    "one-of-arrays-by-items": {
        "type": "array",
        "oneOf": [{"items": {"type": "integer"}}, {"items": {"type": "string"}}],
    },
    "one-of-arrays-by-items-many": {"oneOf": [{"items": {"const": i}} for i in range(20)]},
    "one-of-arrays-one-needs-an-item": {
        "oneOf": [{"items": {"type": "integer"}}, {"items": {"type": "string"}, "minItems": 1}]
    },
    # one branch asserts what the other denies (through references)
    "one-of-asserted-and-denied": {
        "$defs": {"kind": {"required": ["a"], "oneOf": [_tagged(1), _tagged(2)]}},
        "oneOf": [
            {"allOf": [{"$ref": "#/$defs/kind"}, {"maxProperties": 2}]},
            {"required": ["b"], "not": {"$ref": "#/$defs/kind"}},
        ],
    },
    "one-of-arrays-of-asserted-and-denied (MaskBench Github_medium o65942)": {
        "$defs": {
            "kind": {"required": ["a"], "oneOf": [_tagged(1), _tagged(2)]},
            "other": {"required": ["b"], "not": {"$ref": "#/$defs/kind"}},
        },
        "type": "array",
        "oneOf": [
            {"items": {"allOf": [{"type": "object"}, {"$ref": "#/$defs/other"}]}},
            {"items": {"allOf": [{"type": "object"}, {"$ref": "#/$defs/kind"}]}},
        ],
    },
    "allOf-patterns-both-sides": {
        "allOf": [
            {"patternProperties": {"^a": {"type": "integer"}}, "additionalProperties": False},
            {"properties": {"b": {}}, "patternProperties": {"^[ab]": {"minimum": 1}}},
        ]
    },
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_matches_jsonschema(name):
    schema = CASES[name]
    cg = compiled(schema)
    validator = exact_validator(schema, "7" if "dependencies" in schema else "2020-12")
    for value in VALUES:
        text = json.dumps(value, sort_keys=True)
        assert accepts(cg, text) == validator.is_valid(value), (name, text)


def test_non_integer_numbers_are_written_without_exponent():
    cg = compiled({"not": {"type": "integer"}})
    assert accepts(cg, "1.5") and accepts(cg, "-0.01")
    assert not accepts(cg, "1.0")  # an integer by JSON Schema
    assert not accepts(cg, "1.5e1")  # documented: exponent forms are not generated


def test_escaped_spelling_of_an_excluded_string_is_rejected_or_refused():
    # "a" spelled \u0061 is still "a": never accepted as "not a".
    cg = compiled({"not": {"const": "a"}})
    assert not accepts(cg, '"a"')
    assert accepts(cg, '"b"')


def test_strict_mode_defaults_survive_a_merged_negation():
    # strict_mode forbids further properties of the user's schema; the derived
    # schema of "not" must not lift that.
    schema = {"properties": {"a": {"type": "integer"}}, "not": {"required": ["a"]}}
    cg = compiled(schema, strict_mode=True)
    assert accepts(cg, "{}")
    assert not accepts(cg, '{"a": 1}')
    assert not accepts(cg, '{"b": 1}')
    assert accepts(compiled(schema), '{"b": 1}')


# strict_mode closes an object to the names its allOf parts list (properties, required
# names, the names its conditions declare or require): jsonschema checks the schema beside
# propertyNames limited to those names.
_NAMED = {"type": "object", "required": ["name"], "properties": {"name": {"type": "string"}}}
_STRICT_ALL_OF = {  # name: (schema, the names it lists)
    "negation beside a sibling part": (
        {
            "allOf": [
                _NAMED,
                {
                    "required": ["type"],
                    "properties": {"type": {"enum": ["file", "link"]}},
                    "not": {"required": ["user"]},
                },
            ]
        },
        ["name", "type"],
    ),
    "negation of a choice beside a sibling part (MaskBench Github_medium o65942)": (
        {
            "allOf": [
                _NAMED,
                {
                    "required": ["type"],
                    "properties": {"type": {"enum": ["file", "link"]}},
                    "not": {
                        "required": ["user"],
                        "properties": {"user": {"type": "string"}},
                        "oneOf": [{"required": ["type"]}, {"required": ["size"]}],
                    },
                },
            ]
        },
        ["name", "type"],
    ),
    "condition beside a sibling part": (
        {
            "allOf": [
                _NAMED,
                {
                    "properties": {"type": {}},
                    "if": {"required": ["type"]},
                    "then": {"required": ["user"]},
                },
            ]
        },
        ["name", "type", "user"],
    ),
    "dependency in the first part": (
        {
            "allOf": [
                {"properties": {"name": {}}, "dependentRequired": {"name": ["type"]}},
                {"properties": {"type": {"enum": ["file"]}}},
            ]
        },
        ["name", "type"],
    ),
}
_STRICT_VALUES = [
    {},
    {"name": "a"},
    {"type": "file"},
    {"name": "a", "type": "file"},
    {"name": "a", "type": "link"},
    {"name": "a", "type": "dir"},
    {"name": "a", "type": "file", "user": "u"},
    {"name": "a", "type": "file", "size": 1},
    {"name": "a", "user": "u"},
    {"name": "a", "other": 1},
    [],
    "a",
]


@pytest.mark.parametrize("name", sorted(_STRICT_ALL_OF))
def test_strict_mode_closes_all_of_parts_together(name):
    # A part with a condition used to be closed to its own names before its sibling was
    # merged: the object then admitted no name the sibling declares (a false negative, and
    # "admits no JSON value" for MaskBench's Github_medium o65942).
    schema, names = _STRICT_ALL_OF[name]
    cg = compiled(schema, strict_mode=True)
    closed = jsonschema.Draft202012Validator({"allOf": [schema], "propertyNames": {"enum": names}})
    assert any(closed.is_valid(v) for v in _STRICT_VALUES)
    for value in _STRICT_VALUES:  # members in the schemas' order
        text = json.dumps(value, sort_keys=True)
        assert accepts(cg, text) == closed.is_valid(value), text
    # an array of them needs one: before, no item fitted and the schema admitted nothing
    array = {"type": "array", "minItems": 1, "items": schema}
    cg = compiled(array, strict_mode=True)
    valid = [v for v in _STRICT_VALUES if isinstance(v, dict) and closed.is_valid(v)]
    assert accepts(cg, json.dumps(valid[-1:], sort_keys=True))


@pytest.mark.parametrize(
    "schema, keyword",
    [
        ({"not": {"type": "array", "uniqueItems": True}}, "not"),
        ({"oneOf": [{"minimum": i} for i in range(17)]}, "oneOf"),
        (  # not-not is the schema, but its members are not evaluated
            {
                "properties": {"a": {}},
                "not": {"not": {"properties": {"b": {"const": 1}}}},
                "unevaluatedProperties": False,
            },
            "unevaluatedProperties",
        ),
    ],
)
def test_inexact_complements_are_refused(schema, keyword):
    with pytest.raises(UnsupportedSchemaError, match=keyword):
        json_schema_to_ir(schema)


def test_one_of_over_types_every_branch_accepts_whole_admits_nothing():
    # null matches both branches (they constrain objects only): oneOf rejects it
    schema = {"type": "null", "oneOf": [{"required": ["a"]}, {"required": ["b"]}]}
    validator = jsonschema.Draft202012Validator(schema)
    assert not any(validator.is_valid(v) for v in VALUES)
    with pytest.raises(treegram.GrammarError, match="admits no JSON value"):
        json_schema_to_ir(schema)


def test_negated_member_is_not_evaluated():
    # "not properties b: const 1" needs a member b other than 1, which nothing evaluates:
    # with unevaluatedProperties false no value is valid (the jsonschema package agrees)
    schema = {
        "properties": {"a": {}},
        "not": {"properties": {"b": {"const": 1}}},
        "unevaluatedProperties": False,
    }
    validator = exact_validator(schema, "2020-12")
    assert not any(validator.is_valid(v) for v in VALUES)
    with pytest.raises(treegram.GrammarError, match="admits no JSON value"):
        json_schema_to_ir(schema)


# -- property ------------------------------------------------------------------------------

_leaf = st.one_of(
    st.builds(
        lambda t: {"type": t},
        st.sampled_from(["null", "boolean", "integer", "number", "string", "array", "object"]),
    ),
    st.builds(lambda v: {"const": v}, st.sampled_from([0, 1, "a", None, True])),
    st.builds(lambda lo: {"minimum": lo}, st.sampled_from([-1, 0, 1.5, 2])),
    st.builds(lambda hi: {"exclusiveMaximum": hi}, st.sampled_from([0, 1, 2.5])),
    st.builds(lambda n: {"maxLength": n}, st.integers(0, 2)),
    st.builds(lambda n: {"minItems": n}, st.integers(1, 2)),
    st.builds(lambda k: {"required": [k]}, st.sampled_from(["a", "b"])),
    st.builds(lambda m: {"multipleOf": m}, st.sampled_from([2, 0.5, 0.25, 1.5])),
    st.builds(
        lambda t: {"additionalProperties": {"type": t}}, st.sampled_from(["integer", "null"])
    ),
    st.just({"properties": {"a": {}}, "additionalProperties": False}),
    st.builds(
        lambda t: {"patternProperties": {"^[ab]": {"type": t}}}, st.sampled_from(["integer"])
    ),
    st.just({"propertyNames": {"enum": ["a", "b"]}}),
    st.builds(lambda v: {"const": v}, st.sampled_from([{"a": 1}, {}, {"b": None, "a": "x"}])),
    st.just(True),
    st.just(False),
)


def _logic(children):
    return st.one_of(
        st.builds(lambda c: {"not": c}, children),
        st.builds(lambda i, t, e: {"if": i, "then": t, "else": e}, children, children, children),
        st.builds(lambda xs: {"oneOf": xs}, st.lists(children, min_size=2, max_size=3)),
        st.builds(lambda xs: {"anyOf": xs}, st.lists(children, min_size=1, max_size=2)),
        st.builds(lambda xs: {"allOf": xs}, st.lists(children, min_size=1, max_size=2)),
        st.builds(lambda c: {"type": "object", "properties": {"a": c}}, children),
        st.builds(lambda c: {"type": "array", "items": c}, children),
        st.builds(
            lambda k, d: {"dependentRequired": {k: [d]}},
            st.sampled_from(["a", "b"]),
            st.sampled_from(["a", "b", "c"]),
        ),
    )


_schemas = st.recursive(_leaf, _logic, max_leaves=4)
_values = json_values(
    ints=(-2, 3), floats=[-0.5, 1.5, 2.5], alphabet="ab\n", max_chars=3, max_leaves=5
)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_schemas, st.lists(_values, min_size=1, max_size=8))
def test_property_matches_jsonschema(schema, instances):
    try:
        cg = compiled(schema)
    except UnsupportedSchemaError:
        return  # refusing is always allowed; accepting the wrong language is not
    except treegram.GrammarError as exc:
        assert "admits no JSON value" in str(exc)
        validator = jsonschema.Draft202012Validator(schema)
        assert not any(validator.is_valid(v) for v in instances)
        return
    validator = exact_validator(schema)
    for value in instances:
        text = json.dumps(value, sort_keys=True)
        assert accepts(cg, text) == validator.is_valid(value), (schema, text)


@pytest.mark.parametrize(
    "lo, lo_strict, hi, hi_strict",
    [
        (2, False, None, False),
        (None, False, 3, True),
        (-1.5, True, 2.25, False),
        (0, False, 0.5, False),
        (-3, False, -1, False),
        (1, False, 1, False),
    ],
)
def test_fractional_range_matches_arithmetic(lo, lo_strict, hi, hi_strict):
    from fractions import Fraction

    from treegram.frontends.json_schema._fraction import fractional_range

    expr = fractional_range(lo, lo_strict, hi, hi_strict)
    if expr is None:
        assert lo == hi
        return
    ir = treegram.Grammar.from_ir(
        treegram.grammar.GrammarIR((treegram.grammar.Rule("root", expr),), "root")
    )
    cg = byte_compiler().compile_grammar(ir)
    texts = [
        "0",
        "-0",
        "1",
        "2",
        "2.0",
        "2.5",
        "2.05",
        "-1.5",
        "-1.25",
        "-0.5",
        "0.5",
        "0.50",
        "1.000",
        "3",
        "2.999",
        "-2.5",
        "-3.0",
        "0.25",
        "10.5",
        "-10.5",
        "1e1",
    ]
    for text in texts:
        value = Fraction(text) if "e" not in text else None
        inside = (
            value is not None
            and value.denominator != 1
            and (
                lo is None
                or (value > Fraction(str(lo)) if lo_strict else value >= Fraction(str(lo)))
            )
            and (
                hi is None
                or (value < Fraction(str(hi)) if hi_strict else value <= Fraction(str(hi)))
            )
        )
        assert accepts(cg, text) == inside, text


_HARD = {"type": "array", "items": {"enum": [1, 2]}, "uniqueItems": True}


def test_disjoint_one_of_needs_no_negation():
    # The branches cannot be negated exactly (uniqueItems, patternProperties), so this only
    # compiles when oneOf is proven disjoint: by the parent's required "kind" with different
    # constants, and by string patterns that cannot both match.
    hard = {"type": "array", "items": {"enum": [1, 2]}, "uniqueItems": True}
    schema = {
        "type": "object",
        "required": ["kind"],
        "oneOf": [
            {"properties": {"kind": {"const": "a"}, "xs": hard}},
            {"properties": {"kind": {"pattern": "^b"}, "m": {"patternProperties": {"x": {}}}}},
            {"allOf": [{"properties": {"kind": {"type": "string", "pattern": "^c"}}}]},
        ],
    }
    cg = compiled(schema)
    validator = jsonschema.Draft202012Validator(schema)
    for value in [
        {"kind": "a"},
        {"kind": "a", "xs": [1, 2]},
        {"kind": "a", "xs": [1, 1]},
        {"kind": "b1"},
        {"kind": "c"},
        {"kind": "d"},
        {"kind": 1},
        {},
    ]:
        text = json.dumps(value)
        assert accepts(cg, text) == validator.is_valid(value), text


@pytest.mark.parametrize(
    "schema",
    [
        {  # a branch that is a choice itself: each alternative is disjoint from the other
            # branch, by its required "t" whose value the other's additionalProperties forbid
            "$defs": {
                "kinds": {
                    "type": "object",
                    "oneOf": [
                        {"required": ["t"], "properties": {"t": {"const": "a"}}},
                        {"required": ["t"], "properties": {"t": {"const": "b"}}},
                    ],
                }
            },
            "type": "object",
            "oneOf": [
                {"$ref": "#/$defs/kinds"},
                {"additionalProperties": {"enum": [False]}, "properties": {"ys": _HARD}},
            ],
        },
        {  # a branch with a choice inside is still disjoint by its own keywords ("t")
            "type": "object",
            "oneOf": [
                {
                    "required": ["t"],
                    "properties": {"t": {"const": "a"}, "xs": _HARD},
                    "anyOf": [{"required": ["x"]}, {"required": ["y"]}],
                },
                {"required": ["t"], "properties": {"t": {"const": "b"}, "ys": _HARD}},
            ],
        },
        {  # more required members than the other branch's maxProperties
            "type": "object",
            "oneOf": [
                {"required": ["a", "b"], "properties": {"xs": _HARD}},
                {"maxProperties": 1, "properties": {"ys": _HARD}},
            ],
        },
    ],
)
def test_disjoint_one_of_through_choices_member_schemas_and_counts(schema):
    # uniqueItems has no exact complement: these compile only when proven disjoint
    cg = compiled(schema)
    validator = jsonschema.Draft202012Validator(schema)
    for value in [
        {"t": "a"},
        {"t": "b"},
        {"t": "c"},
        {"t": "a", "xs": [1, 1]},
        {"t": "a", "xs": [1, 2]},
        {"x": False},
        {"x": False, "y": False},
        {"a": 1, "b": 2},
        {"a": 1},
        {"ys": [1, 1]},
        {"ys": [1]},
        {},
    ]:
        text = json.dumps(value)
        assert accepts(cg, text) == validator.is_valid(value), text


def test_one_of_negation_within_a_closed_branch_is_dropped():
    # Within a closed branch that does not declare "b", "not {required: [b]}" always holds:
    # the negation is true there (no alternatives to distribute), and the rest stays exact.
    schema = {
        "type": "object",
        "oneOf": [
            {"properties": {"a": {"type": "integer"}}, "additionalProperties": False},
            {"required": ["b"]},
            {"required": ["a"], "properties": {"a": {"type": "integer", "minimum": 2}}},
        ],
    }
    cg = compiled(schema)
    validator = jsonschema.Draft202012Validator(schema)
    for value in [{}, {"a": 1}, {"a": 3}, {"b": 1}, {"a": 1, "b": 1}, {"a": 3, "b": 1}, {"c": 1}]:
        text = json.dumps(value)
        assert accepts(cg, text) == validator.is_valid(value), text


def test_strict_mode_closes_to_listed_names_and_keeps_conditions_open():
    # strict_mode forbids the names a schema does not list; a required name is listed
    listed = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a", "b"]}
    cg = compiled(listed, strict_mode=True)
    assert accepts(cg, '{"a": 1, "b": [2]}')
    assert not accepts(cg, '{"a": 1, "b": 2, "c": 3}')
    assert not accepts(cg, '{"a": 1}')
    # if/then/else constrain the object around them; they are not closed shapes of it
    conditional = {
        "type": "object",
        "properties": {"member": {"type": "boolean"}, "number": {"type": "string"}},
        "required": ["member"],
        "if": {"properties": {"member": {"const": True}}},
        "then": {"properties": {"number": {"minLength": 2, "maxLength": 2}}},
        "else": {"properties": {"number": {"minLength": 3}}},
    }
    cg = compiled(conditional, strict_mode=True)
    validator = jsonschema.Draft202012Validator(conditional)
    for text in (
        '{"member": true, "number": "12"}',
        '{"member": true, "number": "123"}',
        '{"member": false, "number": "123"}',
        '{"member": false, "number": "12"}',
        '{"member": false}',
        '{"member": true, "other": 1}',
    ):
        expected = validator.is_valid(json.loads(text)) and "other" not in text
        assert accepts(cg, text) == expected, text


@pytest.mark.parametrize(
    "schema",
    [
        {"if": {"patternProperties": {"foo": {"type": "string"}}}, "unevaluatedProperties": False},
        {
            "if": {"properties": {"foo": {"type": "string"}}, "required": ["foo"]},
            "properties": {"bar": {"type": "integer"}},
            "unevaluatedProperties": False,
        },
        # its negation would declare items: left out (rejects ["a"], never a wrong value)
        {"if": {"prefixItems": [{"const": "a"}]}, "unevaluatedItems": False},
    ],
)
def test_if_without_then_or_else_evaluates_members_where_it_holds(schema):
    cg = compiled(schema)
    validator = jsonschema.Draft202012Validator(schema)
    exact = "prefixItems" not in schema["if"]
    for value in [*VALUES, {"foo": "a"}, {"foo": 1}, {"foo": "a", "bar": 1}, ["a"], ["a", 1]]:
        got, want = accepts(cg, json.dumps(value, sort_keys=True)), validator.is_valid(value)
        assert got == want if exact else (not got or want), value


@pytest.mark.parametrize("kinds", [7, 10])
def test_many_negated_members_track_every_requirement(kinds):
    # each ``not`` of a property schema asks for a member of its own kind (present, with a
    # value the property schema rejects); more than six used to be refused outright, now
    # only the (requirements met, count) state bound limits them
    schema = {"allOf": [{"not": {"properties": {f"a{i}": {"const": 1}}}} for i in range(kinds)]}
    cg = compiled(schema)
    validator = exact_validator(schema)
    every = {f"a{i}": 2 for i in range(kinds)}
    values = [every, {**every, "a0": 1}, {k: v for k, v in every.items() if k != "a3"}, {}, 5]
    values += [{**every, "b": None}, {**every, f"a{kinds - 1}": "x"}]
    for value in values:
        text = json.dumps(value, sort_keys=True)
        assert accepts(cg, text) == validator.is_valid(value), text


def test_one_of_inside_all_of_is_disjoint_by_the_parents_required_member():
    # 18 branches told apart by the value of "kind", which only the schema around the
    # allOf requires: without it every branch accepts {} (18 overlapping branches, refused)
    branches = [
        {
            "properties": {
                "kind": {"enum": [f"k{i}"]},
                "v": {"type": "integer" if i % 2 else "string"},
            }
        }
        for i in range(18)
    ]
    schema = {
        "type": "object",
        "required": ["kind"],
        "allOf": [{"properties": {"id": {}}}, {"oneOf": branches}],
    }
    cg = compiled(schema)
    validator = exact_validator(schema)
    values = [{"kind": "k3", "v": 1}, {"kind": "k3", "v": "x"}, {"kind": "k4", "v": "x"}, {}]
    values += [{"kind": "k9"}, {"kind": "k20"}, {"id": 1, "kind": "k0", "v": "a"}, {"v": 1}]
    for value in values:
        text = json.dumps(value, sort_keys=True)
        assert accepts(cg, text) == validator.is_valid(value), text


def test_strict_mode_lists_the_names_of_an_overlapping_one_of():
    # taken apart with each other's negations, the branches of an overlapping oneOf still
    # list their names for strict_mode, as a plain choice's branches do: each branch is
    # closed to its names and the schema's (the object was closed to its own names before
    # the branches were merged, so {"country": ...} admitted nothing). The branches here
    # list the same names, so the oracle closes the object to all of them.
    schema = {
        "type": "object",
        "properties": {"street": {"type": "string"}},
        "oneOf": [
            {"properties": {"country": {"enum": ["BRA"]}, "state": {"enum": ["AC", "AL"]}}},
            {"properties": {"country": {"enum": ["ITA"]}, "state": {"enum": ["AG", "AL"]}}},
        ],
    }
    cg = compiled(schema, strict_mode=True)
    closed = {**schema, "properties": {**schema["properties"], "country": {}, "state": {}}}
    validator = jsonschema.Draft202012Validator({**closed, "additionalProperties": False})
    for value in (
        {"street": "x", "country": "BRA"},
        {"country": "ITA", "state": "AG"},
        {"country": "BRA", "state": "AG"},
        {"state": "AL"},
        {"state": "AC"},
        {"street": "x"},
        {},
        {"country": "BRA", "zip": 1},
    ):
        text = json.dumps(value)  # written in the declared order, as treegram writes keys
        assert accepts(cg, text) == validator.is_valid(value), text
