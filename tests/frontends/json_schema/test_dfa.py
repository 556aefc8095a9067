"""String intersections and key languages of the JSON Schema frontend (code point DFAs),
against the ``jsonschema`` package, with every JSON spelling of keys and values: raw
characters, short escapes and ``\\uXXXX`` (surrogate pairs above U+FFFF)."""

from __future__ import annotations

import json
from functools import cache

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from schema_matching import accepts as matcher_accepts
from schema_matching import compile_schema

from treegram.frontends.json_schema._convert import UnsupportedSchemaError, json_schema_to_ir

CHARS = 'ab1é😀"\\\n-'


@cache
def compiled(schema_json: str):
    return compile_schema(json.loads(schema_json), strict_mode=False)


def accepts(schema, text: str) -> bool:
    return matcher_accepts(compiled(json.dumps(schema)), text)


def _ecma(node):
    """ECMA-262 ``$`` (end of input) for Python's ``re``, where ``$`` also matches before a
    final newline: a pattern's trailing ``$`` becomes ``\\Z``."""

    def fix(p: str) -> str:
        return p[:-1] + "\\Z" if p.endswith("$") else p

    if isinstance(node, list):
        return [_ecma(x) for x in node]
    if not isinstance(node, dict):
        return node
    out = {k: _ecma(v) for k, v in node.items()}
    if isinstance(node.get("pattern"), str):
        out["pattern"] = fix(node["pattern"])
    if isinstance(node.get("patternProperties"), dict):
        out["patternProperties"] = {fix(k): _ecma(v) for k, v in node["patternProperties"].items()}
    return out


def valid(schema, instance) -> bool:
    cls = jsonschema.Draft202012Validator
    return cls(_ecma(schema), format_checker=cls.FORMAT_CHECKER).is_valid(instance)


def spell(text: str, escape: list[bool]) -> str:
    """``text`` as a JSON string literal; character ``i`` as ``\\uXXXX`` when
    ``escape[i % len(escape)]``, else as ``json.dumps`` writes it."""
    out = []
    for i, ch in enumerate(text):
        if escape and escape[i % len(escape)]:
            units = ch.encode("utf-16-be")
            out.extend(
                f"\\u{int.from_bytes(units[k : k + 2], 'big'):04x}" for k in range(0, len(units), 2)
            )
        else:
            out.append(json.dumps(ch, ensure_ascii=False)[1:-1])
    return '"' + "".join(out) + '"'


def _escapes_printable_ascii(text: str, escape: list[bool]) -> bool:
    return bool(escape) and any(
        escape[i % len(escape)] and " " <= ch <= "~" for i, ch in enumerate(text)
    )


def check_string(schema, text: str, escape: list[bool]) -> None:
    expected = valid(schema, text)
    if ("enum" in schema or "const" in schema) and _escapes_printable_ascii(text, escape):
        # docs/json_schema.md, "Spelling": const/enum strings write printable ASCII as
        # itself ("a", not "\u0061"), as json.dumps and xgrammar do
        expected = False
    assert accepts(schema, spell(text, escape)) == expected, (schema, text, escape)


strings = st.text(alphabet=CHARS, max_size=6)
escapes = st.lists(st.booleans(), max_size=3)

STRING_SCHEMAS = [
    {"type": "string", "pattern": "^[ab1é😀]+$", "maxLength": 3},
    {"type": "string", "pattern": "é|😀", "minLength": 2, "maxLength": 4},
    {"type": "string", "pattern": '"', "maxLength": 2},
    {"type": "string", "pattern": "\\\\|\\n", "minLength": 3},
    {"allOf": [{"pattern": "a"}, {"pattern": "b$"}, {"maxLength": 5}]},
    {
        "allOf": [{"type": "string", "pattern": "^a"}, {"pattern": "1"}],
        "enum": ["a1", "ab", "1a", 7],
    },
]


@pytest.mark.parametrize("schema", STRING_SCHEMAS, ids=range(len(STRING_SCHEMAS)))
@settings(max_examples=60, deadline=None)
@given(text=strings, escape=escapes)
def test_string_intersections(schema, text, escape):
    check_string(schema, text, escape)


@pytest.mark.parametrize(
    "text", ["2020-01-31", "2020-02-30", "2021-01-31", "2020-1-31", "", "2020-12-01", "2020-01-3"]
)
def test_format_with_pattern_and_length(text):
    schema = {"type": "string", "format": "date", "pattern": "^2020", "minLength": 10}
    for escape in ([], [True], [False, True]):
        check_string(schema, text, escape)


def test_length_counts_decoded_characters():
    schema = {"type": "string", "pattern": "^[^a]*$", "minLength": 2, "maxLength": 2}
    assert accepts(schema, '"\\ud83d\\ude00\\n"')  # a surrogate pair and an escape: 2
    assert accepts(schema, '"😀\\""')
    assert not accepts(schema, '"\\ud83d\\ude00"')
    assert not accepts(schema, '"\\u0061b"')  # "ab" contains an "a"


OBJECT_SCHEMAS = [
    {
        "type": "object",
        "properties": {"a\nb": {"type": "integer"}},
        "additionalProperties": {"type": "string"},
    },
    {
        "type": "object",
        "properties": {"ab": {"maximum": 5}},
        "patternProperties": {"^a": {"type": "integer"}, "b$": {"minimum": 0}},
        "additionalProperties": {"type": "string"},
    },
    {
        "type": "object",
        "patternProperties": {"é": {"type": "integer"}, "1": {"maximum": 3}},
        "additionalProperties": False,
    },
    {
        "type": "object",
        "properties": {"a": {}},
        "propertyNames": {"pattern": "^[ab]", "maxLength": 2},
        "patternProperties": {"b": {"type": "string"}},
    },
    {
        "type": "object",
        "properties": {"b": {"type": "integer"}},
        "propertyNames": {"not": {"const": "a"}},
    },
]

values = st.one_of(st.integers(-2, 8), st.sampled_from(["", "x"]))


@pytest.mark.parametrize("schema", OBJECT_SCHEMAS, ids=range(len(OBJECT_SCHEMAS)))
@settings(max_examples=80, deadline=None)
@given(
    members=st.dictionaries(st.text(alphabet=CHARS, max_size=3), values, max_size=3), escape=escapes
)
def test_object_keys(schema, members, escape):
    # Declared properties come first, in schema order (the grammar's property order).
    declared = list(schema.get("properties", {}))
    ordered = sorted(
        members.items(),
        key=lambda kv: (kv[0] not in declared, declared.index(kv[0]) if kv[0] in declared else 0),
    )
    # A declared name must use its canonical spelling; any other key may be escaped.
    text = (
        "{"
        + ", ".join(
            f"{json.dumps(k) if k in declared else spell(k, escape)}: {json.dumps(v)}"
            for k, v in ordered
        )
        + "}"
    )
    assert accepts(schema, text) == valid(schema, dict(ordered)), (schema, text)


def test_escaped_declared_name_is_not_an_additional_property():
    schema = {
        "type": "object",
        "properties": {"foo\nbar": {"type": "integer"}, "a": {"type": "integer"}},
    }
    assert accepts(schema, '{"foo\\nbar": 1}')
    assert not accepts(schema, '{"foo\\u000abar": "x"}')
    assert not accepts(schema, '{"\\u0061": "x"}')
    assert accepts(schema, '{"\\u0062": "x"}')


def test_still_refused():
    # (maxLength beside a format is counted now, test_bounded_strings.py)
    with pytest.raises(UnsupportedSchemaError, match="minLength"):
        json_schema_to_ir({"type": "string", "format": "email", "minLength": 1000})
    with pytest.raises(UnsupportedSchemaError, match="propertyNames"):
        json_schema_to_ir(
            {
                "type": "object",
                "patternProperties": {"a": {}},
                "propertyNames": {"$dynamicRef": "#x"},
            }
        )
