"""When ``oneOf`` is just ``anyOf``: proving that no value satisfies two branches.

A ``oneOf`` whose branches are pairwise disjoint compiles as a plain choice; otherwise
:mod:`treegram.frontends.json_schema._logic` takes each branch with the negation of the
others, which is larger and not always expressible. Two branches are disjoint when:

- their ``const``/``enum`` values differ, or the other branch rejects every one of them
  (checked with treegram's own validator, :mod:`._validate`);
- their types do not meet (the parent's ``type`` applies to a branch without one);
- both are strings whose languages (code point automata) do not intersect;
- both are objects, one requires a property and the two schemas for its value are
  disjoint (``const``, ``enum``, types, string patterns; ``additionalProperties`` for a
  name one does not declare), or one requires a property the other forbids (``false``,
  or not declared next to ``additionalProperties: false``), or one requires more members
  than the other's ``maxProperties``. The parent's ``required`` counts for both;
- a branch that is itself an ``anyOf`` / ``oneOf`` (a ``$ref`` to a choice of kinds) is
  disjoint from another when each of its alternatives is;
- one asserts a schema (itself, its ``$ref`` targets, its ``allOf`` parts) that the other
  denies (``not`` of the same schema);
- both are arrays, one needs an item and their ``items`` are disjoint.

Anything not proven disjoint is treated as overlapping (never the other way round).
"""

from __future__ import annotations

import contextlib

from treegram.errors import UnsupportedSchemaError
from treegram.frontends.json_schema._context import ConversionContext
from treegram.frontends.json_schema._keywords import inside_parent, json_type, only_ref, same_value
from treegram.frontends.json_schema._merge import merge_all_of
from treegram.frontends.json_schema._string_dfa import StringConstraintError, string_dfa
from treegram.ir import DfaLimitError

__all__ = ["disjoint"]

_TYPES = frozenset({"null", "boolean", "integer", "number", "string", "array", "object"})
_MAX_DEREF = 8
_MAX_SPLIT = 16  # alternatives of a branch's own anyOf / oneOf taken one by one
_MAX_SPLIT_DEPTH = 2
_SMALL = 4  # keywords of a schema compared by value (larger ones by identity only)


def disjoint(conv: ConversionContext, branches: list, parent: dict | None = None) -> bool:
    """Whether the ``oneOf`` branches provably accept pairwise disjoint sets of values."""
    parent = parent or {}
    shapes = []
    raws = []
    for b in branches:
        got = _shape(conv, b, parent)
        if got is None:
            if any(_contradict(conv, b, other) for other in branches if other is not b):
                got = b  # cannot be merged, but proven disjoint from the others below
            else:
                return False
        if got is not False:
            shapes.append(got)
            raws.append(b)
    splits: dict[int, list | None] = {}  # branch index -> its alternatives, once

    def split(i: int) -> list | None:
        if i not in splits:
            splits[i] = _shapes(conv, shapes[i], 0)
        return splits[i]

    def pair(i: int, j: int) -> bool:
        """Disjoint as they are, or alternative by alternative where one is a choice."""
        if _contradict(conv, raws[i], raws[j]) or _pair_disjoint(conv, shapes[i], shapes[j]):
            return True
        a, b = split(i), split(j)
        if a is None or b is None or (len(a) == 1 and len(b) == 1):
            return False
        return all(_pair_disjoint(conv, x, y) for x in a for y in b)

    return all(pair(i, j) for i in range(len(shapes)) for j in range(i + 1, len(shapes)))


def _shape(conv: ConversionContext, b, parent: dict):
    """Branch ``b`` as one schema inside ``parent``'s ``type`` and ``required`` (``False``
    when it accepts nothing, ``None`` when that cannot be worked out)."""
    b = _deref(conv, b)
    if isinstance(b, dict) and ("allOf" in b or "$ref" in b):
        try:
            b = merge_all_of(conv, b, "")  # flattened: its parts' members count
        except UnsupportedSchemaError:
            return None
    if b is False:
        return False
    if not isinstance(b, dict):
        return None
    return inside_parent(b, parent)


def _shapes(conv: ConversionContext, b: dict, depth: int) -> list | None:
    """Schemas whose union holds every value of the shape ``b``: ``b`` itself, or the
    alternatives of its ``anyOf`` / ``oneOf``, each with ``b``'s type and required names
    (leaving out its other keywords only widens them); ``None`` when an alternative
    cannot be worked out."""
    key = "oneOf" if "oneOf" in b else "anyOf" if "anyOf" in b else None
    if key is None or depth >= _MAX_SPLIT_DEPTH or len(b[key]) > _MAX_SPLIT:
        return [b]
    outer = {k: b[k] for k in ("type", "required") if k in b}
    out: list = []
    for alt in b[key]:
        shape = _shape(conv, alt, outer)
        if shape is None:
            return None
        if shape is not False:
            got = _shapes(conv, shape, depth + 1)
            if got is None:
                return None
            out += got
    return out


def _parts(conv: ConversionContext, schema, depth: int = 0) -> tuple[list, list]:
    """What ``schema`` asserts (itself, its ``$ref`` targets and ``allOf`` parts) and what
    it denies (the ``not`` of each of those), as the schemas written (through references)."""
    schema = _deref(conv, schema)
    if not isinstance(schema, dict) or depth > _MAX_DEREF:
        return [schema], []
    yes, no = [schema], []
    if "not" in schema:
        no.append(_deref(conv, schema["not"]))
    subs = list(schema.get("allOf", [])) if isinstance(schema.get("allOf"), list) else []
    if isinstance(schema.get("$ref"), str):
        with contextlib.suppress(UnsupportedSchemaError):
            subs.append(conv.resolve(schema["$ref"], ""))
    for sub in subs:
        y, n = _parts(conv, sub, depth + 1)
        yes += y
        no += n
    return yes, no


def _contradict(conv: ConversionContext, a, b) -> bool:
    """Whether one schema asserts a subschema the other denies (``allOf [S, ...]`` against
    ``not S``, through references): no value satisfies both. The same subschema of the
    document (one object, as references resolve to) or equal small schemas."""
    ya, na = _parts(conv, a)
    yb, nb = _parts(conv, b)
    for xs, ys in ((ya, nb), (yb, na)):
        ids = {id(y) for y in ys if isinstance(y, dict)}
        small = [y for y in ys if isinstance(y, dict) and len(y) <= _SMALL]
        for x in xs:
            if not isinstance(x, dict):
                continue
            if id(x) in ids:
                return True
            if len(x) <= _SMALL and any(same_value(x, y) for y in small):
                return True
    return False


def _deref(conv: ConversionContext, schema):
    for _ in range(_MAX_DEREF):  # a chain of plain references
        if isinstance(schema, dict) and "$ref" in schema and only_ref(schema):
            schema = conv.resolve(schema["$ref"], "")
        else:
            break
    return schema


def _values(schema, conv: ConversionContext | None = None, depth: int = 0) -> list | None:
    """A finite list holding every value ``schema`` accepts (perhaps more), or ``None``:
    ``const``, ``enum``, booleans and null, and ``anyOf`` / ``oneOf`` of such."""
    if conv is not None:
        schema = _deref(conv, schema)
    if schema is False:
        return []
    if not isinstance(schema, dict) or depth > _MAX_DEREF:
        return None
    if "const" in schema:
        return [schema["const"]]
    if "enum" in schema:
        return list(schema["enum"])
    for key in ("anyOf", "oneOf"):
        if key in schema:
            out: list = []
            for branch in schema[key]:
                got = _values(branch, conv, depth + 1)
                if got is None:
                    break
                out += got
            else:
                return out
    t = schema.get("type")
    types = {t} if isinstance(t, str) else set(t) if isinstance(t, list) else None
    if types and types <= {"boolean", "null"}:
        return ([True, False] if "boolean" in types else []) + ([None] if "null" in types else [])
    return None


def _types(schema: dict) -> set[str]:
    t = schema.get("type")
    types = set(_TYPES) if t is None else ({t} if isinstance(t, str) else set(t))
    if "number" in types:
        types.add("integer")
    return types


def _pair_disjoint(conv: ConversionContext, a, b) -> bool:
    a, b = _deref(conv, a), _deref(conv, b)
    if a is False or b is False:
        return True
    if not isinstance(a, dict) or not isinstance(b, dict):
        return False
    va, vb = _values(a, conv), _values(b, conv)
    if va is not None and vb is not None and not any(same_value(x, y) for x in va for y in vb):
        return True
    if va is not None or vb is not None:
        vals, other = (va, b) if va is not None else (vb, a)
        return not any(_may_accept(conv, other, v) for v in vals)
    common = _types(a) & _types(b)
    if not common:
        return True
    if common == {"string"}:
        return _strings_disjoint(conv, a, b)
    if common == {"object"}:
        return _objects_disjoint(conv, a, b)
    if common == {"array"}:
        return _arrays_disjoint(conv, a, b)
    return False


def _arrays_disjoint(conv: ConversionContext, a: dict, b: dict) -> bool:
    """Both need an item, and every item of one is outside the other's items."""
    if not any(_count(s.get("minItems")) >= 1 for s in (a, b)):
        return False
    if any("prefixItems" in s or isinstance(s.get("items"), list) for s in (a, b)):
        return False
    ia, ib = a.get("items", True), b.get("items", True)
    return _contradict(conv, ia, ib) or _pair_disjoint(conv, ia, ib)


def _count(v) -> int:
    return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else 0


def _may_accept(conv: ConversionContext, schema: dict, value) -> bool:
    """Whether ``schema`` might accept ``value`` (``True`` when it cannot be decided)."""
    if json_type(value) not in _types(schema):
        return False
    try:
        return bool(conv.is_valid(schema, value))
    except Exception:  # noqa: BLE001 - undecidable here: assume it may
        return True


def _strings_disjoint(conv: ConversionContext, a: dict, b: dict) -> bool:
    try:
        da, db = string_dfa(a, conv), string_dfa(b, conv)
        return da is not None and db is not None and da.intersect(db).is_empty()
    except (StringConstraintError, DfaLimitError):
        return False


def _objects_disjoint(conv: ConversionContext, a: dict, b: dict) -> bool:
    # a member one requires is present, so its value must meet both member schemas
    for key in set(a.get("required", [])) | set(b.get("required", [])):
        sa, sb = _member_schema(conv, a, key), _member_schema(conv, b, key)
        if sa is not None and sb is not None and _pair_disjoint(conv, sa, sb):
            return True
    return (
        _too_many(a, b)
        or _too_many(b, a)
        or _forbids(conv, a, b)
        or _forbids(conv, b, a)
        or _denies_required(conv, a, b)
        or _denies_required(conv, b, a)
        or _closed_keys_apart(conv, a, b)
    )


def _member_schema(conv: ConversionContext, schema: dict, key: str):
    """A schema the value of member ``key`` meets in ``schema`` (``None``: unknown): its
    declared schema, else that of a pattern matching ``key``, else ``additionalProperties``."""
    props = schema.get("properties", {})
    if key in props:
        return props[key]
    matched = _pattern_match(conv, schema, key)
    if matched is None:
        return None
    if matched:
        return matched[0]
    return schema.get("additionalProperties", True)


def _pattern_match(conv: ConversionContext, schema: dict, key: str) -> list | None:
    """The schemas of the ``patternProperties`` whose pattern matches ``key`` (``None``
    when a pattern cannot be worked out)."""
    out = []
    for pattern, sub in schema.get("patternProperties", {}).items():
        lang = _key_dfa(conv, pattern)
        if lang is None:
            return None
        if lang.accepts(key):
            out.append(sub)
    return out


def _key_dfa(conv: ConversionContext, pattern: str):
    """The keys ``pattern`` matches, or ``None`` when it cannot be compiled here."""
    try:
        return string_dfa({"pattern": pattern}, conv)
    except (StringConstraintError, DfaLimitError):
        return None


def _too_many(a: dict, b: dict) -> bool:
    """Whether ``a`` needs more members than ``b`` allows."""
    most = b.get("maxProperties")
    least = max(len(set(a.get("required", []))), a.get("minProperties", 0))
    return isinstance(most, (int, float)) and not isinstance(most, bool) and least > most


def _forbids(conv: ConversionContext, a: dict, b: dict) -> bool:
    """Whether ``b`` forbids a property that ``a`` requires (``false``, or in a closed
    object neither declared nor matched by a pattern)."""
    props = b.get("properties", {})
    closed = b.get("additionalProperties") is False
    for key in a.get("required", []):
        if _deref(conv, props.get(key)) is False:
            return True
        if closed and key not in props and _pattern_match(conv, b, key) == []:
            return True
    return False


def _denies_required(conv: ConversionContext, a: dict, b: dict) -> bool:
    """Whether ``b`` denies (``not``) a ``required`` list that ``a`` requires whole."""
    denied = _deref(conv, b.get("not"))
    if not isinstance(denied, dict) or set(denied) != {"required"}:
        return False
    names = denied["required"]
    return isinstance(names, list) and set(names) <= set(a.get("required", []))


def _least(schema: dict) -> int:
    return max(len(set(schema.get("required", []))), _count(schema.get("minProperties")))


def _closed_keys_apart(conv: ConversionContext, a: dict, b: dict) -> bool:
    """Both closed (``additionalProperties: false``), one needs a member, and no key is
    allowed by both (declared names and patterns)."""
    if a.get("additionalProperties") is not False or b.get("additionalProperties") is not False:
        return False
    if _least(a) < 1 and _least(b) < 1:
        return False
    for x, y in ((a, b), (b, a)):
        for name, sub in x.get("properties", {}).items():
            if _deref(conv, sub) is False:
                continue
            if name in y.get("properties", {}):
                if _deref(conv, y["properties"][name]) is not False:
                    return False
                continue
            if _pattern_match(conv, y, name) != []:
                return False  # matched (or unknown)
    langs_a = [_key_dfa(conv, p) for p in a.get("patternProperties", {})]
    langs_b = [_key_dfa(conv, p) for p in b.get("patternProperties", {})]
    if any(lang is None for lang in langs_a + langs_b):
        return False
    return all(x.intersect(y).is_empty() for x in langs_a for y in langs_b)
