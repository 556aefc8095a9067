"""The keyword vocabulary every JSON Schema module shares: annotation keywords, the internal
keywords the converter writes into derived schemas, and JSON value helpers.

This is the bottom of the frontend: it imports nothing from the other modules, so any of
them may import it.
"""

from __future__ import annotations

import json

__all__ = [
    "ANNOTATIONS",
    "CONSTRAINING",
    "TYPE_KEYWORDS",
    "INTERNAL",
    "COUNT_KEYWORDS",
    "is_annotation",
    "PATTERNS_KEY",
    "CONTAINS_ALL",
    "OPEN",
    "NOT_STRING",
    "FRACTIONAL",
    "NOT_MULTIPLE",
    "HAS_MEMBER",
    "KEY_SCHEMAS",
    "same_value",
    "json_type",
    "only_ref",
    "inside_parent",
]

ANNOTATIONS = frozenset(
    {
        "title",
        "description",
        "default",
        "examples",
        "$schema",
        "$id",
        "$comment",
        "$anchor",
        "readOnly",
        "writeOnly",
        "deprecated",
        "$defs",
        "definitions",
        "contentMediaType",
        "contentEncoding",
        "discriminator",
        "example",
        "$vocabulary",
        "$dynamicAnchor",
    }
)
"""Keywords that never constrain a value (annotations, identifiers, definitions)."""

PATTERNS_KEY = "$treegram:patterns"
"""Internal keyword: further patterns the string must also match (``allOf`` merging)."""
CONTAINS_ALL = "x-treegram-contains-all"
"""Internal keyword: a list of schemas each of which some item must match."""
OPEN = "x-treegram-open"
"""Marker: strict_mode's defaults do not apply to this (derived) schema."""
NOT_STRING = "x-treegram-not-string"
"""Internal keyword: a list of string-only schemas (pattern, format, lengths, enum) that a
string value must match none of."""
FRACTIONAL = "x-treegram-fractional"
"""Internal keyword: a number with a non-zero fraction digit (not an integer)."""
NOT_MULTIPLE = "x-treegram-not-multiple-of"
"""Internal keyword: a list of positive numbers the value must be a multiple of none of."""
HAS_MEMBER = "x-treegram-has-member"
"""Internal keyword: a list of requirements, each a list of ``[keys, value]`` alternatives;
for each requirement, the object has a member whose key the string schema ``keys`` of one
alternative accepts and whose value satisfies that alternative's ``value``."""
KEY_SCHEMAS = "x-treegram-key-schemas"
"""Internal keyword: a list of ``[keys, value]`` pairs; every member whose key the string
schema ``keys`` accepts has a value satisfying ``value`` (``patternProperties`` with a key
language in place of a pattern)."""

COUNT_KEYWORDS = (
    "minLength",
    "maxLength",
    "minItems",
    "maxItems",
    "minProperties",
    "maxProperties",
    "minContains",
    "maxContains",
)
"""The keywords whose value is a count (a non-negative integer)."""

INTERNAL = frozenset(
    {
        PATTERNS_KEY,
        CONTAINS_ALL,
        OPEN,
        NOT_STRING,
        FRACTIONAL,
        NOT_MULTIPLE,
        HAS_MEMBER,
        KEY_SCHEMAS,
    }
)
"""The keywords the converter writes into derived schemas."""

TYPE_KEYWORDS = {
    "object": (
        "properties",
        "required",
        "additionalProperties",
        "patternProperties",
        "propertyNames",
        "minProperties",
        "maxProperties",
        "dependentRequired",
        "dependentSchemas",
        "dependencies",
        "unevaluatedProperties",
    ),
    "array": (
        "items",
        "prefixItems",
        "additionalItems",
        "contains",
        "minContains",
        "maxContains",
        "minItems",
        "maxItems",
        "uniqueItems",
        "unevaluatedItems",
    ),
    "string": ("pattern", "format", "minLength", "maxLength"),
    "number": ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"),
}
"""The validation keywords that constrain the values of one JSON type only."""

CONSTRAINING = (
    frozenset(
        {
            "type",
            "enum",
            "const",
            *(key for keys in TYPE_KEYWORDS.values() for key in keys),
            "allOf",
            "anyOf",
            "oneOf",
            "not",
            "if",
            "then",
            "else",
            "$ref",
            "$dynamicRef",
            "$recursiveRef",
            "nullable",
        }
    )
    | INTERNAL
)
"""Keywords that constrain a value (validation, applicators, references, OpenAPI's
``nullable``, the internal keywords). Every other keyword is an annotation as far as the
language goes: ``title``, ``description``, ``examples``, ``x-*`` extensions, definitions,
keywords of other vocabularies, typos."""


def is_annotation(key: str) -> bool:
    """Whether ``key`` never constrains a value (see :data:`CONSTRAINING`)."""
    return key not in CONSTRAINING


def same_value(a, b, parts: int | None = None) -> bool:
    """Whether two JSON values are equal as JSON (key order does not matter).

    Equal as :func:`json.dumps` writes them (``1``, ``1.0`` and ``true`` differ; a tuple
    is an array), compared part by part: a part shared by both is equal by identity, and
    a pair of parts is compared once however often it is reached. Derived schemas share
    their parts, so written out they can be exponentially larger than in memory.

    With ``parts``, past that many pairs of parts compared the answer is ``False``: for
    callers to which "different" is always a safe answer (two subschemas merged as an
    ``allOf`` of both instead of one), so that comparing large derived schemas built
    apart never costs more than a bounded amount.
    """
    try:
        return _same(a, b, set(), [parts if parts is not None else -1])
    except _TooLarge:
        return False


class _TooLarge(Exception):  # noqa: N818 - control flow inside same_value
    pass


def _same(a, b, done: set, left: list) -> bool:
    if a is b:
        return True
    if isinstance(a, dict):
        if not isinstance(b, dict) or len(a) != len(b) or a.keys() != b.keys():
            return False
        pair = (id(a), id(b))
        if pair in done:  # compared already (equal, or the walk would have stopped)
            return True
        _count(done, pair, left)
        return all(_same(v, b[k], done, left) for k, v in a.items())
    if isinstance(a, list | tuple):
        if not isinstance(b, list | tuple) or len(a) != len(b):
            return False
        pair = (id(a), id(b))
        if pair in done:
            return True
        _count(done, pair, left)
        return all(_same(x, y, done, left) for x, y in zip(a, b, strict=True))
    if isinstance(b, dict | list | tuple):
        return False
    if type(a) is float or type(b) is float:  # as json.dumps writes them: 1.0 is not 1
        return type(a) is type(b) and repr(a) == repr(b)
    if a is None or b is None or isinstance(a, bool | str) or isinstance(b, bool | str):
        return type(a) is type(b) and a == b
    if type(a) is int and type(b) is int:
        return a == b
    return json.dumps(a) == json.dumps(b)  # anything else: as written (or TypeError)


def _count(done: set, pair: tuple, left: list) -> None:
    done.add(pair)
    left[0] -= 1
    if left[0] == 0:  # (unbounded: starts below zero and never reaches it)
        raise _TooLarge


def json_type(v) -> str:
    """The JSON Schema type name of a JSON value (an integral float is an ``integer``)."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, int) or (isinstance(v, float) and v.is_integer()):
        return "integer"
    if isinstance(v, float):
        return "number"
    if isinstance(v, str):
        return "string"
    return "array" if isinstance(v, list) else "object"


def only_ref(schema: dict) -> bool:
    """Whether ``schema`` is a ``$ref`` with nothing but annotations beside it."""
    return all(k == "$ref" or k in ANNOTATIONS for k in schema)


def inside_parent(branch: dict, parent: dict) -> dict:
    """A branch of ``parent``'s ``anyOf`` / ``oneOf`` as one schema: with ``parent``'s
    ``type`` where it has none, ``parent``'s ``required`` names before its own and
    ``parent``'s ``minItems`` where it is larger."""
    if "type" in parent and "type" not in branch:
        branch = {**branch, "type": parent["type"]}
    if parent.get("required"):
        branch = {**branch, "required": [*parent["required"], *branch.get("required", [])]}
    least = parent.get("minItems")
    if isinstance(least, int) and not isinstance(least, bool) and least > 0:
        own = branch.get("minItems", 0)
        if not isinstance(own, (int, float)) or isinstance(own, bool) or own < least:
            branch = {**branch, "minItems": least}
    return branch
