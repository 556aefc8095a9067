"""``allOf`` (and ``$ref`` with sibling keywords) merged into one schema.

Keywords combine by intersection: bounds tighten, ``required`` unites, shared properties
become ``allOf`` of both, types intersect, further patterns collect in the internal
keyword ``PATTERNS_KEY`` (the string compiler intersects them). Keywords whose
intersection cannot be written as one schema (two ``anyOf`` lists too large to
distribute) raise :class:`UnsupportedSchemaError` through the converter.
"""

from __future__ import annotations

import json

from treegram.grammar._charset_dfa import PATTERNS_KEY

__all__ = ["merge_all_of"]

_MAXED = ("minimum", "exclusiveMinimum", "minLength", "minItems", "minProperties")
_MINNED = ("maximum", "exclusiveMaximum", "maxLength", "maxItems", "maxProperties")
_SUBSCHEMA = ("additionalProperties", "items", "propertyNames", "unevaluatedProperties",
              "contains", "additionalItems")
_MAX_DEPTH = 32


def merge_all_of(conv, schema: dict, ptr: str, _depth: int = 0) -> dict | bool:
    """Flatten ``allOf`` and ``$ref``-with-siblings of ``schema`` into one schema.

    Returns
    -------
    dict or bool
        ``False`` when the parts contradict (no value fits).
    """
    if "allOf" not in schema and "$ref" not in schema:
        return schema
    if _depth > _MAX_DEPTH:
        conv.unsupported("allOf", ptr, "recursive reference inside allOf")
        return True
    parts = []
    base = {k: v for k, v in schema.items() if k not in ("allOf", "$ref")}
    if "$ref" in schema:
        parts.append(conv.resolve(schema["$ref"], ptr))
    parts.extend(schema.get("allOf", []))
    out: dict | bool = base
    for i, part in enumerate(parts):
        if part is True:
            continue
        if part is False:
            return False
        part = merge_all_of(conv, part, f"{ptr}/allOf/{i}", _depth + 1)
        if part is False:
            return False
        if part is True:
            continue
        out = _merge(conv, out, part, f"{ptr}/allOf/{i}")
        if out is False:
            return False
    return out


def _same(a, b) -> bool:
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def _merge(conv, a: dict, b: dict, ptr: str) -> dict | bool:
    out = dict(a)
    for key, vb in b.items():
        if key not in out:
            out[key] = vb
            continue
        va = out[key]
        if _same(va, vb):
            continue
        if key in _MAXED:
            out[key] = max(va, vb)
        elif key in _MINNED:
            out[key] = min(va, vb)
        elif key == "type":
            ta = {va} if isinstance(va, str) else set(va)
            tb = {vb} if isinstance(vb, str) else set(vb)
            both = _type_meet(ta, tb)
            if not both:
                return False
            out[key] = sorted(both)
        elif key == "required":
            out[key] = list(dict.fromkeys(list(va) + list(vb)))
        elif key in ("properties", "patternProperties", "$defs", "definitions"):
            merged = dict(va)
            for name, sub in vb.items():
                merged[name] = {"allOf": [merged[name], sub]} if name in merged else sub
            out[key] = merged
        elif key in _SUBSCHEMA:
            out[key] = {"allOf": [va, vb]}
        elif key == "pattern":  # both must match: the string compiler intersects them
            out[PATTERNS_KEY] = list(dict.fromkeys([*out.get(PATTERNS_KEY, []), vb]))
        elif key == PATTERNS_KEY:
            out[key] = list(dict.fromkeys([*va, *vb]))
        elif key == "enum":
            out[key] = [x for x in va if any(_same(x, y) for y in vb)]
        elif key == "const":
            return False
        elif key in ("anyOf", "oneOf"):
            if len(va) * len(vb) > 64 or key == "oneOf":
                conv.unsupported(key, ptr, f"two {key} lists inside allOf")
            out[key] = [{"allOf": [x, y]} for x in va for y in vb]
        elif key in ("title", "description", "default", "examples", "$comment", "$id",
                     "$schema"):
            continue
        else:
            conv.unsupported(key, ptr, "different values of this keyword inside allOf")
    return out


def _type_meet(ta: set, tb: set) -> set:
    out = ta & tb
    if "integer" in ta and "number" in tb or "number" in ta and "integer" in tb:
        out.add("integer")
    return out
