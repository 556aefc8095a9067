"""Shape check of a JSON Schema before compiling it.

The converter reads keywords as the meta-schema types them (``properties`` is an object
of schemas, ``required`` an array of strings...). This pass walks every subschema once,
without recursion, and refuses a keyword of the wrong JSON type with a
:class:`GrammarError` that names its JSON pointer, so no malformed schema reaches the
converter as an ``AttributeError`` or ``TypeError``.
"""

from __future__ import annotations

from treegram.errors import GrammarError
from treegram.frontends.json_schema._keywords import COUNT_KEYWORDS

__all__ = ["check_schema_shapes"]

# keyword -> how its value holds subschemas
_SCHEMA = (
    "not",
    "if",
    "then",
    "else",
    "contains",
    "additionalProperties",
    "propertyNames",
    "additionalItems",
    "unevaluatedProperties",
    "unevaluatedItems",
)
_SCHEMA_MAP = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
_SCHEMA_LIST = ("allOf", "anyOf", "oneOf", "prefixItems")
_NUMBERS = ("minimum", "maximum", "multipleOf")
_STRINGS = (
    "pattern",
    "format",
    "$ref",
    "$dynamicRef",
    "$recursiveRef",
    "$id",
    "$anchor",
    "$dynamicAnchor",
    "$schema",
)
_BOOLEANS = ("uniqueItems", "nullable", "$recursiveAnchor")


def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _string_list(v) -> bool:
    return isinstance(v, list) and all(isinstance(x, str) for x in v)


def check_schema_shapes(root, what: str = "schema") -> None:
    """Raise :class:`GrammarError` for a keyword whose value has the wrong JSON type.

    Parameters
    ----------
    root : dict or bool
        A parsed schema.
    what : str
        How to name the document in messages (``"schema"`` or a remote's key).
    """
    stack = [(root, "")]
    while stack:
        node, ptr = stack.pop()
        if isinstance(node, bool):
            continue
        if not isinstance(node, dict):
            raise GrammarError(
                f"{what}: the schema at {ptr or '#'} must be an object or a "
                f"boolean, got {_kind(node)}"
            )

        def bad(key: str, expected: str, node=node, ptr=ptr) -> GrammarError:
            return GrammarError(
                f"{what}: {key} at {ptr or '#'}/{key} must be {expected}, got {_kind(node[key])}"
            )

        for key in _SCHEMA:
            if key in node:
                stack.append((node[key], f"{ptr}/{key}"))
        for key in _SCHEMA_MAP:
            if key in node:
                if not isinstance(node[key], dict):
                    raise bad(key, "an object of schemas")
                stack.extend((v, f"{ptr}/{key}/{_esc(k)}") for k, v in node[key].items())
        for key in _SCHEMA_LIST:
            if key in node:
                if not isinstance(node[key], list):
                    raise bad(key, "an array of schemas")
                stack.extend((v, f"{ptr}/{key}/{i}") for i, v in enumerate(node[key]))
        if "items" in node:
            items = node["items"]
            if isinstance(items, list):  # draft 7 tuple form
                stack.extend((v, f"{ptr}/items/{i}") for i, v in enumerate(items))
            else:
                stack.append((items, f"{ptr}/items"))
        if "dependencies" in node:
            deps = node["dependencies"]
            if not isinstance(deps, dict):
                raise bad("dependencies", "an object")
            for k, v in deps.items():
                if not _string_list(v):
                    stack.append((v, f"{ptr}/dependencies/{_esc(k)}"))
        if "dependentRequired" in node:
            deps = node["dependentRequired"]
            if not isinstance(deps, dict) or not all(_string_list(v) for v in deps.values()):
                raise bad("dependentRequired", "an object of arrays of strings")
        if "required" in node and not _string_list(node["required"]):
            raise bad("required", "an array of strings")
        if "enum" in node and not isinstance(node["enum"], list):
            raise bad("enum", "an array")
        if "type" in node and not (isinstance(node["type"], str) or _string_list(node["type"])):
            raise bad("type", "a string or an array of strings")
        for key in _STRINGS:
            if key in node and not isinstance(node[key], str):
                raise bad(key, "a string")
        for key in _BOOLEANS:
            if key in node and not isinstance(node[key], bool):
                raise bad(key, "a boolean")
        for key in COUNT_KEYWORDS:
            v = node.get(key)
            if key in node and not (
                _is_number(v) and v >= 0 and (isinstance(v, int) or v.is_integer())
            ):
                raise bad(key, "a non-negative integer")
        for key in _NUMBERS:
            if key in node and not _is_number(node[key]):
                raise bad(key, "a number")
        for key in ("exclusiveMinimum", "exclusiveMaximum"):
            if key in node and not (_is_number(node[key]) or isinstance(node[key], bool)):
                raise bad(key, "a number")


def _esc(name: str) -> str:
    return name.replace("~", "~0").replace("/", "~1")


def _kind(v) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "a boolean"
    if isinstance(v, (int, float)):
        return f"the number {v!r}" if len(repr(v)) < 40 else "a number"
    if isinstance(v, str):
        return f"the string {v!r}" if len(v) < 40 else "a string"
    return "an array" if isinstance(v, list) else "an object"
