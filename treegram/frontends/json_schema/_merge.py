"""``allOf`` (and ``$ref`` with sibling keywords) merged into one schema.

Keywords combine by intersection: bounds tighten, ``required`` unites, shared properties
become ``allOf`` of both, types intersect, further patterns collect in the internal
keyword ``PATTERNS_KEY`` (the string compiler intersects them). Keywords whose
intersection cannot be written as one schema (two ``anyOf`` lists too large to
distribute) raise :class:`UnsupportedSchemaError` through the converter.
"""

from __future__ import annotations

from treegram.frontends.json_schema._context import ConversionContext
from treegram.frontends.json_schema._keywords import (
    CONTAINS_ALL,
    FRACTIONAL,
    HAS_MEMBER,
    KEY_SCHEMAS,
    NOT_MULTIPLE,
    NOT_STRING,
    OPEN,
    PATTERNS_KEY,
    is_annotation,
    same_value,
)
from treegram.frontends.json_schema._logic import (
    expand_logic,
    explicit_defaults,
    needs_logic,
)

__all__ = ["merge_all_of"]

_MAXED = ("minimum", "exclusiveMinimum", "minLength", "minItems", "minProperties")
_MINNED = ("maximum", "exclusiveMaximum", "maxLength", "maxItems", "maxProperties")
_SUBSCHEMA = (
    "additionalProperties",
    "items",
    "propertyNames",
    "unevaluatedProperties",
    "additionalItems",
)
_CONTAINS = ("contains", "minContains", "maxContains", CONTAINS_ALL)
_UNEVALUATED = ("unevaluatedProperties", "unevaluatedItems")
_MAX_DEPTH = 32
_SAME_PARTS = 256
"""Pairs of parts compared before two subschemas being merged count as different (see
:func:`same_value`): equal derived schemas built apart can be large."""
_SCHEMA_VALUED = frozenset(
    (*_SUBSCHEMA, "properties", "patternProperties", "not", "anyOf", "oneOf")
    + (KEY_SCHEMAS, NOT_STRING, NOT_MULTIPLE, HAS_MEMBER, PATTERNS_KEY, "required", "type")
)
"""Keywords whose values :func:`_merge` combines as a conjunction when they differ (so
"different" is a safe answer for them; ``const`` or an unknown keyword is not)."""
_MAX_ACTIVE_MERGES = 200


def merge_all_of(conv: ConversionContext, schema: dict, ptr: str, _depth: int = 0) -> dict | bool:
    """Flatten ``allOf`` and ``$ref``-with-siblings of ``schema`` into one schema.

    Returns
    -------
    dict or bool
        ``False`` when the parts contradict (no value fits).
    """
    out, derived = _merge_split(conv, schema, ptr, _depth)
    for part, where in derived:  # the conditions, once the user's parts are one schema
        if out is False:
            break
        part = merge_all_of(conv, part, where, _depth + 1)
        if part is False:
            return False
        if part is not True:
            out = _merge(conv, out, _scoped(part), where)
    return out


def _merge_split(
    conv: ConversionContext, schema: dict, ptr: str, _depth: int
) -> tuple[dict | bool, list]:
    """``schema`` merged but for the derived parts (:data:`OPEN`: negations, conditions)
    of its user-written parts, returned with their pointers to be merged last.

    ``strict_mode`` closes an object to the names all its ``allOf`` parts declare, and a
    derived part merged into a user's schema closes that schema first (see :func:`_merge`):
    merged before a sibling part, it would close the object to fewer names. Without
    ``strict_mode``, and for a part with ``unevaluated*`` (which sees only what it
    evaluates itself), everything merges in place.
    """
    # Merging never calls back into the converter's value(), so active merges only nest
    # through allOf / oneOf negation / $ref cycles; past the bound it is such a cycle.
    if conv.merging >= _MAX_ACTIVE_MERGES:
        conv.unsupported("allOf", ptr, "recursive reference inside allOf / oneOf")
        return True, []
    conv.merging += 1
    try:
        return _split(conv, schema, ptr, _depth)
    finally:
        conv.merging -= 1


def _defers(conv: ConversionContext, schema) -> bool:
    """Whether the derived parts of the user's ``schema`` may wait (see _merge_split)."""
    return (
        conv.strict
        and isinstance(schema, dict)
        and not schema.get(OPEN)
        and not any(k in schema for k in _UNEVALUATED)
    )


def _split(
    conv: ConversionContext, schema: dict, ptr: str, _depth: int
) -> tuple[dict | bool, list]:
    defer = _defers(conv, schema)
    if needs_logic(conv, schema):
        schema = expand_logic(conv, schema, ptr)
    if "allOf" not in schema and "$ref" not in schema:
        return schema, []
    if _depth > _MAX_DEPTH:
        conv.unsupported("allOf", ptr, "recursive reference inside allOf")
        return True, []
    parts = []
    base = {k: v for k, v in schema.items() if k not in ("allOf", "$ref")}
    if "$ref" in schema:
        target = conv.resolve(schema["$ref"], ptr)
        if schema.get(OPEN) and isinstance(target, dict) and not target.get(OPEN):
            target = {**target, OPEN: True}  # a condition through a reference: still one
        parts.append(target)
    parts.extend(schema.get("allOf", []))
    out: dict | bool = base
    derived: list = []
    for i, part in enumerate(parts):
        if part is True:
            continue
        if part is False:
            return False, []
        where = f"{ptr}/allOf/{i}"
        if isinstance(part, dict) and "oneOf" in part and base.get("required"):
            # the whole requires these members anyway: said inside the part too (the
            # conjunction is the same), they prove branches disjoint that tell objects
            # apart by a member's value (a "type" enum per branch), which a oneOf alone
            # in its part could not
            part = {
                **part,
                "required": list(dict.fromkeys([*base["required"], *part.get("required", [])])),
            }
        if defer and isinstance(part, dict) and part.get(OPEN):
            derived.append((part, where))
            continue
        if defer and _defers(conv, part):
            part, more = _merge_split(conv, part, where, _depth + 1)
            derived += more
        else:
            part = merge_all_of(conv, part, where, _depth + 1)
        if part is False:
            return False, []
        if part is True:
            continue
        part = _scoped(part)
        out = _merge(conv, out, part, where)
        if out is False:
            return False, []
    return out, derived


def _merge(conv: ConversionContext, a: dict, b: dict, ptr: str) -> dict | bool:
    conv.count_merge(ptr)  # bounded here, where the work is: raises past the bound
    if conv.strict and bool(a.get(OPEN)) != bool(b.get(OPEN)):
        # strict_mode's implicit defaults belong to the user's schema: write them out
        # before a derived (open) schema is merged into it.
        a, b = explicit_defaults(a), explicit_defaults(b)
    out = dict(a)
    if any(k in a or k in b for k in _CONTAINS):
        out = _merge_contains(conv, out, b, ptr)
        b = {k: v for k, v in b.items() if k not in _CONTAINS}
    handled = _merge_members(conv, a, b, out, ptr)
    for key, vb in b.items():
        if key in handled:
            continue
        if key not in out:
            out[key] = vb
            continue
        va = out[key]
        # subschemas may be compared in bounded time: "different" merges them as allOf
        if same_value(va, vb, _SAME_PARTS if key in _SCHEMA_VALUED else None):
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
        elif key in ("properties", "patternProperties"):
            merged = dict(va)
            for name, sub in vb.items():
                merged[name] = {"allOf": [merged[name], sub]} if name in merged else sub
            out[key] = merged
        elif key in _SUBSCHEMA:
            out[key] = {"allOf": [va, vb]}
        elif key in (NOT_STRING, NOT_MULTIPLE, HAS_MEMBER, KEY_SCHEMAS):  # conjunctions
            out[key] = list(va) + [x for x in vb if not any(same_value(x, y) for y in va)]
        elif key in ("uniqueItems", FRACTIONAL):
            out[key] = bool(va) or bool(vb)
        elif key == "nullable":
            out[key] = bool(va) and bool(vb)
        elif key == "not":
            out[key] = {"anyOf": [va, vb]}
        elif key == "multipleOf" and _positive_numbers(va, vb) and _lcm(va, vb) is not None:
            out[key] = _lcm(va, vb)
        elif key == "pattern":  # both must match: the string compiler intersects them
            out[PATTERNS_KEY] = list(dict.fromkeys([*out.get(PATTERNS_KEY, []), vb]))
        elif key == PATTERNS_KEY:
            out[key] = list(dict.fromkeys([*va, *vb]))
        elif key == "enum":
            out[key] = [x for x in va if any(same_value(x, y) for y in vb)]
        elif key == "const":
            return False
        elif key in ("anyOf", "oneOf"):
            # (x1 | x2) & (y1 | y2) as x1 & (y1 | y2) | x2 & (y1 | y2): no product blow-up
            # here; a oneOf left at this point has disjoint branches (overlapping ones were
            # rewritten by expand_logic), so the outer list stays disjoint too.
            out[key] = [{"allOf": [x, {key: vb}]} for x in va]
        elif is_annotation(key):
            continue  # annotations never constrain: the first part's value is kept
        else:
            conv.unsupported(key, ptr, "different values of this keyword inside allOf")
    return False if _contradictory(out) else out


def _contradictory(schema: dict) -> bool:
    """Whether a merged schema plainly admits no value: bounds that cross, a required
    property that is forbidden. (Cheap checks only; the conversion finds the rest.)
    Pruning here keeps distributed ``anyOf`` combinations from being converted."""
    types = schema.get("type")
    t = {types} if isinstance(types, str) else set(types) if isinstance(types, list) else None
    only = (lambda name: t is not None and t <= {name}) if t is not None else (lambda _: False)
    for low, high, kind in (
        ("minLength", "maxLength", "string"),
        ("minItems", "maxItems", "array"),
        ("minProperties", "maxProperties", "object"),
    ):
        lo, hi = schema.get(low), schema.get(high)
        if _is_num(lo) and _is_num(hi) and lo > hi and only(kind):
            return True
    if only("object"):
        props = schema.get("properties", {})
        required = schema.get("required", ())
        closed = (
            schema.get("additionalProperties") is False
            and not schema.get("patternProperties")
            and not schema.get(KEY_SCHEMAS)
        )
        for name in required:
            if props.get(name, True) is False or (closed and name not in props):
                return True
    return False


def _is_num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _scoped(part: dict) -> dict:
    """A part's ``unevaluated*`` as ``additionalProperties`` / ``items``.

    Inside one ``allOf`` part they see only what that part evaluates, which after merging
    is no longer distinguishable; as "further members of this part" they are exact when
    the part declares everything itself and stricter otherwise (never looser). Items that
    the part's ``contains`` matches are evaluated by it.
    """
    out = part
    if "unevaluatedProperties" in part and "additionalProperties" not in part:
        out = {k: v for k, v in out.items() if k != "unevaluatedProperties"}
        out["additionalProperties"] = part["unevaluatedProperties"]
    if "unevaluatedItems" in part:
        items = part.get("items")
        further = part["unevaluatedItems"]
        # contains evaluates the items it matches (whatever its counts): the others must
        # satisfy unevaluatedItems
        contained = [
            *part.get(CONTAINS_ALL, []),
            *([part["contains"]] if "contains" in part else []),
        ]
        if contained and further is not True and further != {}:
            further = {"anyOf": [*contained, further]}
        if isinstance(items, list) and "additionalItems" not in part:
            out = {k: v for k, v in out.items() if k != "unevaluatedItems"}
            out["additionalItems"] = further
        elif items is None:
            out = {k: v for k, v in out.items() if k != "unevaluatedItems"}
            out["items"] = further
    return out


def _further(schema: dict, key: str):
    """The explicit schema for members beyond the declared ones, or ``None``."""
    if key == "additionalProperties":
        return schema.get(key)
    items = schema.get("items")
    if isinstance(items, list):
        return schema.get("additionalItems")
    return None if "prefixItems" not in schema and items is None else items


def _both(x, y):
    """``allOf`` of two subschemas, simplified (``None``: neither constrains)."""
    if x is None or x is True or x == {}:
        return True if x is not None and y is None else y
    if y is None or y is True or y == {}:
        return x
    if x is False or y is False:
        return False
    return x if same_value(x, y, _SAME_PARTS) else {"allOf": [x, y]}


def _merge_members(conv: ConversionContext, a: dict, b: dict, out: dict, ptr: str) -> set[str]:
    """Merge declared and further members where one part limits the other's further ones.

    ``additionalProperties`` of one part applies to the properties declared only by the
    other part; ``items`` after one part's ``prefixItems`` applies to the other part's
    longer prefix. Returns the keys handled here.
    """
    handled: set[str] = set()
    xa, xb = _further(a, "additionalProperties"), _further(b, "additionalProperties")
    if xa is not None or xb is not None:
        pa, pb = a.get("properties", {}), b.get("properties", {})
        keyed = (
            "patternProperties" in a
            or "patternProperties" in b
            or KEY_SCHEMAS in a
            or KEY_SCHEMAS in b
        )
        if keyed:
            # Each part's further members are the keys it neither declares nor matches by a
            # pattern: as keyed schemas (every member with such a key), exact whatever the
            # other part declares or matches.
            for part, further in ((a, xa), (b, xb)):
                if further is not None and further is not True and further != {}:
                    lang = _not_keys(part)
                    out[KEY_SCHEMAS] = [*out.get(KEY_SCHEMAS, []), [lang, further]]
            out["properties"] = {}
            for name in dict.fromkeys([*pa, *pb]):
                both = _both(pa.get(name), pb.get(name))
                out["properties"][name] = True if both is None else both
            out["additionalProperties"] = True
        if not keyed:
            props = {}
            for name in dict.fromkeys([*pa, *pb]):
                both = _both(pa.get(name, xa), pb.get(name, xb))
                props[name] = True if both is None else both
            out["properties"] = props
            extra = _both(xa, xb)
            if extra is not None:
                out["additionalProperties"] = extra
        handled |= {"properties", "additionalProperties"}
    ta, tb = _tuple_of(a), _tuple_of(b)
    if ta is not None or tb is not None:
        ia, ib = _further(a, "items"), _further(b, "items")
        ta, tb = ta or [], tb or []
        prefix = [
            _both(ta[i] if i < len(ta) else ia, tb[i] if i < len(tb) else ib)
            for i in range(max(len(ta), len(tb)))
        ]
        for key in ("items", "prefixItems", "additionalItems"):
            out.pop(key, None)
        out["prefixItems"] = [True if p is None else p for p in prefix]
        further = _both(ia, ib)
        if further is not None:
            out["items"] = further
        handled |= {"items", "prefixItems", "additionalItems"}
    return handled


def _not_keys(part: dict) -> dict | bool:
    """The string schema of the keys ``part`` neither declares nor matches by a pattern or
    keyed schema (its further members)."""
    others: list = []
    if part.get("properties"):
        others.append({"enum": list(part["properties"])})
    others += [{"pattern": p} for p in part.get("patternProperties", {})]
    others += [k for k, _ in part.get(KEY_SCHEMAS, ())]
    if not others:
        return True
    return {"not": others[0] if len(others) == 1 else {"anyOf": others}}


def _tuple_of(schema: dict) -> list | None:
    items = schema.get("items")
    if isinstance(items, list):
        return items
    return schema.get("prefixItems")


def _positive_numbers(*vs) -> bool:
    return all(isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 for v in vs)


def _lcm(a, b):
    """The least common multiple of two positive decimals (a number is a multiple of both
    exactly when it is one of this), or ``None`` if a float cannot hold it exactly."""
    from fractions import Fraction
    from math import gcd, lcm

    fa, fb = Fraction(str(a)), Fraction(str(b))
    out = Fraction(lcm(fa.numerator, fb.numerator), gcd(fa.denominator, fb.denominator))
    if out.denominator == 1:
        return int(out)
    return float(out) if Fraction(str(float(out))) == out else None


def _merge_contains(conv: ConversionContext, out: dict, b: dict, ptr: str) -> dict:
    """``contains`` with its counts: a count without ``contains`` is ignored; two
    requirements on one schema merge their counts; plain requirements (at least one
    match) on different schemas collect into :data:`CONTAINS_ALL`."""

    def needs(s: dict) -> list:
        out = [(c, 1, None) for c in s.get(CONTAINS_ALL, [])]
        if "contains" in s:
            out.append((s["contains"], s.get("minContains", 1), s.get("maxContains")))
        return out

    merged: list[tuple] = []
    for need in needs(out) + needs(b):
        same = next((i for i, m in enumerate(merged) if same_value(m[0], need[0])), None)
        if same is None:
            merged.append(need)
            continue
        m = merged[same]
        highs = [h for h in (m[2], need[2]) if h is not None]
        merged[same] = (m[0], max(m[1], need[1]), min(highs) if highs else None)
    for key in _CONTAINS:
        out.pop(key, None)
    if len(merged) > 1:
        if any(m[1:] != (1, None) for m in merged):
            conv.unsupported(
                "contains", ptr, "two different contains schemas inside allOf, one of them counted"
            )
        out[CONTAINS_ALL] = [m[0] for m in merged]
    elif merged:
        out["contains"], out["minContains"] = merged[0][0], merged[0][1]
        if merged[0][2] is not None:
            out["maxContains"] = merged[0][2]
    return out


def _type_meet(ta: set, tb: set) -> set:
    out = ta & tb
    if "integer" in ta and "number" in tb or "number" in ta and "integer" in tb:
        out.add("integer")
    return out
