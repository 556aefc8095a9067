"""``oneOf`` shapes of real schemas (MaskBench) that used to be refused: branches keyed by a
required name (negated as one "if present, not S" alternative), branches proven disjoint
by closed key languages, patterns and a denied ``required`` list (left out of each other's
negations), a branch negated inside its own member (a recursion through derived schemas,
kept a recursion), and ``not not``.

The oracle is the ``jsonschema`` package on generated instances (valid and invalid);
where a ``oneOf`` is proven disjoint it is a plain choice, so the masks also match
xgrammar's (which compiles ``oneOf`` as ``anyOf``) on the DeepSeek-V4 vocabulary.
"""

from __future__ import annotations

import itertools
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schema_matching import accepts, compile_schema, exact_validator

from treegram.frontends.json_schema._convert import json_schema_to_ir

# MaskBench JsonSchemaStore component_spec: one required operator per branch, open objects
KEYED = {
    "$defs": {
        "pred": {
            "oneOf": [
                *(
                    {
                        "type": "object",
                        "required": [op],
                        "properties": {op: {"$ref": "#/$defs/two"}},
                    }
                    for op in ("==", "!=", ">", "<", ">=", "<=")
                ),
                {"type": "object", "required": ["and"], "properties": {"and": {"type": "array"}}},
                {"type": "object", "required": ["or"], "properties": {"or": {"type": "array"}}},
                {
                    "type": "object",
                    "required": ["not"],
                    "properties": {"not": {"$ref": "#/$defs/leaf"}},
                },
            ]
        },
        "two": {"type": "array", "items": {"type": "integer"}, "minItems": 2, "maxItems": 2},
        # component_spec's "not" holds the whole oneOf again: compiled in strict_mode (its
        # branches closed, so disjoint); with open branches the negated recursion is refused
        "leaf": {
            "type": "object",
            "required": ["=="],
            "properties": {"==": {"$ref": "#/$defs/two"}},
        },
    },
    "$ref": "#/$defs/pred",
}

# MaskBench Github_easy o37786 (colorSelector): closed branches, keyed by required names, by
# patternProperties and by ``not: {required}``; only branches 1 and 4 overlap ({"ref": "#aabbcc"}
# matches both), and branch 4 negates branch 1 inside its own members
COLORS = {
    "$defs": {
        "resource": {"oneOf": [{"$ref": "#/$defs/definition"}, {"$ref": "#/$defs/selector"}]},
        "definition": {
            "oneOf": [
                {"type": "array", "minItems": 3, "maxItems": 3, "items": {"type": "integer"}},
                {"type": "string", "pattern": "^#[0-9a-f]{6}$"},
                {"enum": ["red", "blue"]},
            ]
        },
        "selector": {
            "oneOf": [
                {
                    "type": "object",
                    "properties": {
                        "ios": {"$ref": "#/$defs/resource"},
                        "android": {"$ref": "#/$defs/resource"},
                    },
                    "required": ["ios", "android"],
                    "additionalProperties": False,
                },
                {
                    "type": "object",
                    "required": ["ref"],
                    "properties": {"ref": {"type": "string"}},
                    "additionalProperties": False,
                },
                {
                    "type": "object",
                    "properties": {"inherit": {"enum": [True]}},
                    "required": ["inherit"],
                    "additionalProperties": False,
                },
                {
                    "type": "object",
                    "patternProperties": {"^[0-9]x$": {"$ref": "#/$defs/resource"}},
                    "additionalProperties": False,
                    "minProperties": 1,
                },
                {
                    "type": "object",
                    "patternProperties": {"^[a-z]{2,3}$": {"$ref": "#/$defs/resource"}},
                    "additionalProperties": False,
                    "minProperties": 1,
                    "not": {"required": ["ios"]},
                },
            ]
        },
    },
    "$ref": "#/$defs/resource",
}

# MaskBench Synthesized draft4 oneOf id10: not not of an overlapping oneOf
NOT_NOT = {
    "allOf": [
        {"type": "object"},
        {
            "not": {
                "not": {
                    "oneOf": [
                        {"properties": {"bar": {}, "baz": {}}, "required": ["bar"]},
                        {"properties": {"foo": {}}, "required": ["foo"]},
                    ]
                }
            }
        },
    ]
}

# next to unevaluatedProperties a keyed negation would declare its member: the negation
# keeps "absent" and "present and not S" apart there
UNEVALUATED = {
    "type": "object",
    "oneOf": [
        {"required": ["a"], "properties": {"a": {"type": "integer"}}},
        {"required": ["b"], "properties": {"b": {"type": "string"}}},
    ],
    "properties": {"c": {}},
    "unevaluatedProperties": False,
}

SCHEMAS = {"keyed": KEYED, "colors": COLORS, "not-not": NOT_NOT, "unevaluated": UNEVALUATED}

_ops = st.sampled_from(["==", "!=", ">", "and", "or", "not", "x"])
_leaf = st.one_of(
    st.integers(-1, 2),
    st.sampled_from(["", "#00aa11", "red", "green", "a"]),
    st.lists(st.integers(0, 3), max_size=4),
    st.booleans(),
    st.none(),
)


def _objects(children, keys):
    return st.dictionaries(keys, children, max_size=2)


_keys = st.sampled_from(
    ["==", "!=", ">", "and", "or", "not", "ios", "android", "ref", "inherit", "1x", "en", "abc"]
    + ["a", "b", "c", "bar", "baz", "foo"]
)
_values = st.recursive(
    _leaf, lambda c: st.one_of(_objects(c, _keys), st.lists(c, max_size=2)), max_leaves=5
)

# hand-picked instances: every branch alone, two branches at once, broken members
INSTANCES = [
    {"==": [1, 2]},
    {"==": [1, 2], "!=": [1, 2]},
    {"==": [1, 2], "!=": [1]},
    {"==": [1], "!=": [1, 2]},
    {"not": {"==": [1, 2]}},
    {"not": {"==": [1, 2], ">": [0, 0]}},
    {"not": {"not": {"or": []}}},
    {"not": {"x": 1}},
    {"and": [], "x": 1},
    {},
    {"ios": "red", "android": "#00aa11"},
    {"ios": "red"},
    {"ref": "green"},
    {"ref": "red"},
    {"ref": "#00aa11"},
    {"ref": {"ios": "red", "android": "blue"}},
    {"inherit": True},
    {"1x": "red", "2x": [1, 2, 3]},
    {"1x": "red", "en": "red"},
    {"en": "red", "abc": {"ref": "x"}},
    {"en": {"ref": {"ref": "#00aa11"}}},
    {"en": {"ref": {"ref": "plain"}}},
    {"ios": "red", "en": "blue"},
    {"bar": 1},
    {"bar": 1, "foo": 2},
    {"foo": 2, "baz": None},
    {"a": 1},
    {"a": 1, "b": "x"},
    {"a": "x", "b": "x"},
    {"a": 1, "c": 2},
    {"a": "x", "b": 1},
    {"b": "x", "d": 1},
    "red",
    [1, 2, 3],
]


def _orders(value, limit: int = 1000) -> list[str]:
    """``value`` as JSON texts with its members (at every level) in every order, at most
    ``limit`` of them: treegram writes declared properties in their order, further members
    after them, so a valid value is accepted in some order and an invalid one in none."""
    if isinstance(value, dict):
        out: list[str] = []
        for keys in itertools.permutations(value):
            parts = [[json.dumps(k) + ": " + t for t in _orders(value[k], limit)] for k in keys]
            for combo in itertools.product(*parts):
                out.append("{" + ", ".join(combo) + "}")
                if len(out) >= limit:
                    return out
        return out
    if isinstance(value, list):
        out = []
        for combo in itertools.product(*(_orders(v, limit) for v in value)):
            out.append("[" + ", ".join(combo) + "]")
            if len(out) >= limit:
                break
        return out
    return [json.dumps(value)]


def _matches(schema, values) -> None:
    cg = compile_schema(schema, strict_mode=False)  # JSON Schema's semantics, as jsonschema
    validator = exact_validator(schema)
    for value in values:
        got = any(accepts(cg, text) for text in _orders(value))
        assert got == validator.is_valid(value), json.dumps(value)


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_matches_jsonschema(name):
    _matches(SCHEMAS[name], INSTANCES)


@pytest.mark.parametrize("name", sorted(SCHEMAS))
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(values=st.lists(_values, min_size=1, max_size=10))
def test_generated_instances_match_jsonschema(name, values):
    _matches(SCHEMAS[name], values)


def test_both_sides_of_the_checks_are_exercised():
    # the instances above are not all rejected (or all accepted) by any schema
    for name, schema in SCHEMAS.items():
        validator = exact_validator(schema)
        got = {validator.is_valid(v) for v in INSTANCES}
        assert got == {True, False}, name


def test_keyed_one_of_is_not_inlined():
    # one alternative per negated branch: the rules stay few (distributed, 9 branches
    # would combine 2 ** 8 ways per branch)
    ir = json_schema_to_ir(KEYED, strict_mode=False)
    assert len(ir.rules) < 200


# proven disjoint (a closed branch with patterns forbids the other's required name; key
# languages of two closed branches apart; a required list the other denies): a plain
# choice, whose masks equal xgrammar's anyOf
DISJOINT = [
    {
        "oneOf": [
            {
                "type": "object",
                "properties": {"ios": {"type": "integer"}},
                "required": ["ios"],
                "additionalProperties": False,
            },
            {
                "type": "object",
                "patternProperties": {"^[0-9]x$": {"type": "string"}},
                "additionalProperties": False,
            },
        ]
    },
    {
        "oneOf": [
            {
                "type": "object",
                "properties": {"ab": {"type": "integer"}},
                "additionalProperties": False,
                "minProperties": 1,
            },
            {
                "type": "object",
                "properties": {"1x": {"type": "integer"}},
                "additionalProperties": False,
                "minProperties": 1,
            },
        ]
    },
]
DISJOINT_DOCS = [
    ['{"ios": 3}', '{"1x": "a"}', "{}"],
    ['{"ab": 1}', '{"1x": 2}'],
]


@pytest.mark.parametrize("index", range(len(DISJOINT)))
def test_disjoint_branches_are_a_plain_choice(index):
    from treegram.frontends.json_schema import _logic

    seen = []
    real = _logic._exclusive
    _logic._exclusive = lambda *a: seen.append(a) or real(*a)
    try:
        json_schema_to_ir(DISJOINT[index], strict_mode=False)
    finally:
        _logic._exclusive = real
    assert seen == []  # never expanded with negations
    _matches(DISJOINT[index], INSTANCES + [json.loads(d) for d in DISJOINT_DOCS[index]])


def test_denied_required_list_is_disjoint():
    # the branches cannot be negated exactly (uniqueItems): this compiles only when the
    # pair is proven disjoint, by "not: {required: [a]}" against required [a, b]
    hard = {"type": "array", "items": {"enum": [1, 2]}, "uniqueItems": True}
    schema = {
        "type": "object",
        "oneOf": [
            {"required": ["a", "b"], "properties": {"xs": hard}},
            {"not": {"required": ["a"]}, "properties": {"ys": hard}},
        ],
    }
    _matches(
        schema,
        [
            {"a": 1, "b": 2},
            {"a": 1},
            {"b": 1},
            {"a": 1, "b": 2, "xs": [1, 1]},
            {"ys": [2, 2]},
            {"ys": [2]},
            {},
        ],
    )


@pytest.fixture(scope="module")
def env():
    pytest.importorskip("tokenizers")
    from xgrammar_diff import deepseek_env

    return deepseek_env(pytest.importorskip("xgrammar"))


# DISJOINT[0] accepts {} (its second branch has no member requirement); xgrammar 0.2.8
# rejects an empty object there, a difference of its own, so only [1] is compared
@pytest.mark.parametrize("index", [1])
def test_disjoint_masks_match_xgrammar(env, index):
    from xgrammar_diff import text_masks_match

    text = json.dumps(DISJOINT[index])
    ours = env["tc"].compile_json_schema(text, any_whitespace=False)
    theirs = env["xc"].compile_json_schema(text, any_whitespace=False)
    for doc in DISJOINT_DOCS[index]:
        text_masks_match(env, ours, theirs, doc, doc)
