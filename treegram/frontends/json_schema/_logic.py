"""Boolean keywords of the JSON Schema frontend: ``not``, ``if``/``then``/``else``,
overlapping ``oneOf`` and the dependency keywords, rewritten into ``anyOf``/``allOf``.

Every rewrite is an equivalence, so the converter compiles the result with the machinery
it already has (merging by intersection, ``anyOf`` as a choice):

- ``not S`` becomes :func:`negate` of ``S``: a schema is a conjunction of keywords, each of
  which constrains one JSON type, so its complement is the ``anyOf`` of the keywords'
  complements, each restricted to the keyword's type (``not {minimum: 5}`` is
  ``{type: number, exclusiveMaximum: 5}``);
- ``if I then T else E`` is ``anyOf [allOf [I, T], allOf [not I, E]]``;
- ``oneOf [A, B, C]`` whose branches may overlap is ``anyOf`` over ``allOf [A, not B, not C]``
  and its rotations;
- ``dependentRequired {a: [b]}`` is ``anyOf [a absent, required [a, b]]``;
  ``dependentSchemas {a: S}`` is ``anyOf [a absent, allOf [required [a], S]]``; draft 7's
  ``dependencies`` holds either form.

A keyword whose complement is not expressible exactly (``pattern``, ``uniqueItems``,
``additionalProperties`` schemas, ...) raises :class:`UnsupportedSchemaError` through the
converter. Schemas produced here carry :data:`OPEN`: ``strict_mode``'s defaults (no further
properties or items) apply to the schemas users write, not to these derived ones, so a
parent's strict defaults are made explicit before anything is merged into it.
"""

from __future__ import annotations

import math

from treegram.errors import UnsupportedSchemaError
from treegram.frontends.json_schema._context import ConversionContext
from treegram.frontends.json_schema._keywords import (
    ANNOTATIONS,
    CONTAINS_ALL,
    COUNT_KEYWORDS,
    FRACTIONAL,
    HAS_MEMBER,
    KEY_SCHEMAS,
    NOT_MULTIPLE,
    NOT_STRING,
    OPEN,
    PATTERNS_KEY,
    TYPE_KEYWORDS,
    inside_parent,
    is_annotation,
    same_value,
)

__all__ = [
    "NEGATION_PREFIX",
    "declare_names",
    "expand_logic",
    "explicit_defaults",
    "needs_logic",
    "negate",
]

_LOGIC = ("not", "if", "then", "else", "dependentRequired", "dependentSchemas", "dependencies")
_TYPES = ("null", "boolean", "integer", "number", "string", "array", "object")
# A negation leaves these alone (they never constrain a value).
_IGNORED = ANNOTATIONS | {"contentSchema", OPEN}
_MAX_DEPTH = 16
NEGATION_PREFIX = "treegram:not/"
"""``$ref`` prefix of a negated document subschema (see ``Converter.negation_ref``)."""
_MAX_BRANCHES = 16
_UNEVALUATED = ("unevaluatedProperties", "unevaluatedItems")
_MAX_COMBINATIONS = 256  # branch-and-negation combinations an overlapping oneOf expands to


def needs_logic(conv: ConversionContext, schema: dict) -> bool:
    """Whether ``schema`` holds a keyword that :func:`expand_logic` rewrites."""
    if any(k in schema for k in _LOGIC):
        return True
    return "oneOf" in schema and not conv.disjoint(schema["oneOf"], schema)


def expand_logic(conv: ConversionContext, schema: dict, ptr: str) -> dict:
    """``schema`` with its boolean keywords rewritten as an ``allOf`` of plain parts.

    The caller merges the result again (``allOf`` flattening distributes the ``anyOf``s).
    """
    rest = {k: v for k, v in schema.items() if k not in _LOGIC}
    parts: list = []
    negations: list = []
    # no unevaluated* keyword sees the members the negations declare (see negate's keyed)
    keyed = not any(rest.get(k, True) not in (True, {}) for k in _UNEVALUATED)
    if "not" in schema:
        negations.append(negate(conv, schema["not"], f"{ptr}/not", keyed=keyed))
        parts.append(negations[-1])
    if "if" in schema and ("then" in schema or "else" in schema):
        # conditions on the object, not shapes of it: strict_mode's defaults belong to
        # the schema around them (made explicit below), not to these parts
        cond = _opened(schema["if"])
        then, other = _opened(schema.get("then", True)), _opened(schema.get("else", True))
        negations.append(negate(conv, cond, f"{ptr}/if", keyed=keyed))
        parts.append(_any_of([_all_of(cond, then), _all_of(negations[-1], other)]))
    elif "if" in schema and any(schema.get(k, True) not in (True, {}) for k in _UNEVALUATED):
        parts.extend(_lone_if(conv, _opened(schema["if"]), f"{ptr}/if"))
    deps = dict(schema.get("dependentRequired", {}))
    dep_schemas = dict(schema.get("dependentSchemas", {}))
    for name, dep in schema.get("dependencies", {}).items():
        (deps if isinstance(dep, list) else dep_schemas)[name] = dep
    for name, needed in deps.items():
        parts.append(
            _any_of([_absent(name), {"required": list(dict.fromkeys([name, *needed])), OPEN: True}])
        )
    for name, sub in dep_schemas.items():
        opened = _opened(sub)
        parts.append(_any_of([_absent(name), _all_of({"required": [name], OPEN: True}, opened)]))
    overlapping = "oneOf" in rest and not conv.disjoint(rest["oneOf"], rest)
    if overlapping:
        # values of a type every branch accepts whole match them all; so does [] where
        # the items of the branches are disjoint: oneOf rejects those (where two or more
        # branches accept them), and may be a plain choice on the rest
        narrowed = _narrowed_types(conv, rest["oneOf"], rest)
        inside = rest if narrowed is None else {**rest, "type": narrowed}
        empty = None
        if narrowed is None or not conv.disjoint(rest["oneOf"], inside):
            empty = _empty_array_overlap(conv, rest["oneOf"], inside)
        if narrowed is not None and (empty is not None or conv.disjoint(rest["oneOf"], inside)):
            parts.append({"type": narrowed, OPEN: True} if narrowed else False)
            overlapping = False
        if empty is not None:
            if empty >= 2:
                parts.append({"minItems": 1, OPEN: True})
            overlapping = False
    listed: list = []  # strict_mode: the names an overlapping oneOf's branches declare
    if overlapping:
        branches = rest.pop("oneOf")
        conv.expanded.append(f"{ptr}/oneOf")
        shown = branches  # each branch where it is taken (its negations use it as written)
        if conv.strict and keyed:  # (keyed: no unevaluated* keyword)
            # Taken apart, a branch is merged beside derived parts (the others'
            # negations), which closes it to its own names, and the object around it is
            # closed before it: closed here to its names and the object's, with the object
            # listing every branch's names, each branch allows what a plain choice of it
            # would (a branch that is not a plain shape, an allOf or a $ref, stays as is)
            listed = _names_of(conv, branches)
            own = _own_names(rest)
            shown = [_closed_with(b, own) for b in branches]
        if conv.widen_one_of:  # a second try after the first grew too large: widened
            conv.unsupported("oneOf", f"{ptr}/oneOf", "overlapping branches, compiled as anyOf")
            parts.append(_any_of(list(shown)))
        else:
            if not keyed:  # the unevaluated* check below looks at these negations
                negations.extend(
                    negate(conv, b, f"{ptr}/oneOf/{i}") for i, b in enumerate(branches)
                )
            parts.append(_exclusive(conv, branches, f"{ptr}/oneOf", rest, keyed, shown))
    for key in _UNEVALUATED:
        if rest.get(key, True) not in (True, {}) and any(_evaluates(n) for n in negations):
            # A failed subschema evaluates nothing, but once merged, a negation's members
            # would look evaluated to the parent's unevaluated* keyword.
            conv.unsupported(
                key,
                f"{ptr}/{key}",
                "next to not, if/else or overlapping oneOf that constrain members",
            )
            rest.pop(key)  # widened: without it
    if conv.strict:
        # the names the conditions declare are the object's too (strict_mode closes it to
        # every name the schema lists, wherever it lists it); the closing itself waits for
        # the sibling allOf parts (merge_all_of merges them before these derived parts)
        names = _condition_names(conv, schema) + listed
        rest = declare_names(rest, list(dict.fromkeys(names)))
    # rest stays the base: its unevaluated* keywords see what the parts evaluate
    return {**rest, "allOf": [*rest.get("allOf", []), *parts]}


def negate(
    conv: ConversionContext,
    schema,
    ptr: str,
    _depth: int = 0,
    within: dict | None = None,
    keyed: bool = False,
) -> dict | bool:
    """A schema accepting exactly the JSON values that ``schema`` rejects.

    With ``within`` (a merged schema the result will be intersected with), alternatives
    that provably contradict it are left out: the intersection is the same, with fewer
    alternatives to distribute (a type it excludes, a property it requires being absent,
    a property it forbids or declares with the same schema being present).

    With ``keyed``, a required property and its declared schema ``S`` are negated together
    as one alternative, a keyed schema (:data:`KEY_SCHEMAS`) ``{name: not S}`` (absent, or
    present and not ``S``), instead of two (absent; present and not ``S``). That
    alternative evaluates the member, so it is only for a result merged where no
    ``unevaluated*`` keyword sees it (a failed subschema evaluates nothing).

    Raises
    ------
    UnsupportedSchemaError
        Through the converter, when a keyword's complement is not expressible exactly.
    """
    if schema is True:
        return False
    if schema is False:
        return True
    if not isinstance(schema, dict):
        raise UnsupportedSchemaError(f"schema at {ptr or '#'} is not an object or boolean")
    if set(schema) == {"$ref"} and conv.negation_target(schema["$ref"]) is not None:
        return conv.negation_target(schema["$ref"])  # not not S is S
    if "not" in schema and all(k == "not" or k in _IGNORED for k in schema):
        return _opened(schema["not"])  # not not S is S (a condition: no strict defaults)
    if _depth > 0 and conv.in_document(schema) and within is None:
        # a nested negation of a document subschema: a reference, computed once, so a
        # negated recursive schema stays a recursion
        return {"$ref": conv.negation_ref(schema, keyed)}
    if _depth > _MAX_DEPTH:
        conv.unsupported("not", ptr, "negation nested too deeply (recursive reference?)")
        return True
    widened = conv.widenings
    schema = conv.merge_all_of(schema, ptr)
    if isinstance(schema, dict) and conv.widenings == widened:
        split = _negate_one_of(conv, schema, ptr, _depth, within, keyed)
        if split is not None:
            return split
    if not isinstance(schema, bool) and needs_logic(conv, schema):
        schema = conv.merge_all_of(expand_logic(conv, schema, ptr), ptr)
    if conv.widenings > widened:
        # a keyword inside was widened while merging or expanding (a negation in an
        # overlapping oneOf, an if): the schema is now a superset of itself, and its
        # complement would be a subset of the true one, so the complement is widened too
        conv.unsupported("not", ptr, "the negated schema has a widened keyword inside")
        return True
    if isinstance(schema, bool):
        return not schema
    out: list = []
    keys = {k: v for k, v in schema.items() if k not in _IGNORED}
    if "type" in keys or "nullable" in keys:
        out.append(_negate_type(conv, keys, ptr))
    if keys.get(FRACTIONAL):
        out.append({"type": "integer", OPEN: True})
    if "const" in keys:
        out.append(_negate_values(conv, [keys["const"]], f"{ptr}/const"))
    if "enum" in keys:
        out.append(_negate_values(conv, list(keys["enum"]), f"{ptr}/enum"))
    if NOT_STRING in keys:
        out.append(_any_of([{"type": "string", **sub, OPEN: True} for sub in keys[NOT_STRING]]))
    regular = [k for k in ("pattern", "format", PATTERNS_KEY) if k in keys]
    if regular:
        # strings outside an intersection of regular languages: a complement automaton
        spec = {k: keys[k] for k in (*regular, "minLength", "maxLength") if k in keys}
        out.append({"type": "string", NOT_STRING: [spec], OPEN: True})
    out.extend(_negate_numeric(conv, keys, ptr))
    if "multipleOf" in keys:  # numbers that are not multiples (written without exponent)
        out.append({"type": "number", NOT_MULTIPLE: [keys["multipleOf"]], OPEN: True})
    for m in keys.get(NOT_MULTIPLE, ()):
        out.append({"type": "number", "multipleOf": m, OPEN: True})
    out.extend(_negate_counts(keys, strings=not regular))
    within_props = within.get("properties", {}) if within is not None else {}
    within_required = set(within.get("required", ())) if within is not None else set()
    props = keys.get("properties", {})
    required = list(dict.fromkeys(keys.get("required", [])))
    for name in required if keyed else ():
        # absent, or present with a value its declared schema rejects: one alternative
        # ("if present, not S"), not two, so a oneOf keyed by required names (each branch
        # one name) distributes nothing
        if (
            name in props
            and name in within_required
            and name in within_props
            and same_value(within_props[name], props[name])
        ):
            continue  # within, the property is present and satisfies its schema
        neg = False
        if name in props:
            neg = negate(conv, props[name], f"{ptr}/properties/{name}", _depth + 1, keyed=keyed)
        # a keyed schema, not a property: a member of the negation is not declared, so it
        # keeps no place in the order of the declared properties (any position, as before)
        keyed_member = {KEY_SCHEMAS: [[{"enum": [name]}, neg]]} if neg is not False else None
        out.append(_typed("object", keyed_member or _absent(name)))
    if not keyed:
        out.extend(_typed("object", _absent(name)) for name in required)
    # a member that breaks the member keywords: one requirement, one alternative each
    breaks = []
    for name, sub in props.items():
        if keyed and name in required:
            continue  # with its requirement above
        if within is not None and (
            _forbidden(within, name)
            or (name in within_props and same_value(within_props[name], sub))
        ):
            continue  # within, the property is absent or satisfies sub
        neg = negate(conv, sub, f"{ptr}/properties/{name}", _depth + 1, keyed=keyed)
        if neg is not False:
            breaks.append([{"enum": [name]}, neg])
    breaks += _member_breaks(conv, keys, ptr, _depth, within, keyed)
    if breaks:
        out.append(_typed("object", {HAS_MEMBER: [breaks]}))
    for requirement in keys.get(HAS_MEMBER, ()):  # no member meets it
        key_schemas = [[k, negate(conv, v, ptr, _depth + 1, keyed=keyed)] for k, v in requirement]
        out.append(_typed("object", {KEY_SCHEMAS: key_schemas}))
    out.extend(_negate_arrays(conv, keys, ptr, _depth, keyed))
    if "anyOf" in keys:
        out.append(
            _conjoin(
                conv,
                [
                    negate(conv, b, f"{ptr}/anyOf/{i}", _depth + 1, keyed=keyed)
                    for i, b in enumerate(keys["anyOf"])
                ],
            )
        )
    if "oneOf" in keys:  # disjoint here: expand_logic rewrote overlapping ones
        out.append(
            _conjoin(
                conv,
                [
                    negate(conv, b, f"{ptr}/oneOf/{i}", _depth + 1, keyed=keyed)
                    for i, b in enumerate(keys["oneOf"])
                ],
            )
        )
    handled = {
        "type",
        "nullable",
        "const",
        "enum",
        NOT_STRING,
        "pattern",
        "format",
        PATTERNS_KEY,
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        *COUNT_KEYWORDS,
        "required",
        "properties",
        "items",
        "prefixItems",
        "additionalItems",
        "contains",
        "anyOf",
        "oneOf",
        "uniqueItems",
        FRACTIONAL,
        CONTAINS_ALL,
        "multipleOf",
        NOT_MULTIPLE,
        "additionalProperties",
        "patternProperties",
        "propertyNames",
        HAS_MEMBER,
        KEY_SCHEMAS,
    }
    if not any(k in keys for k in ("anyOf", "oneOf", "additionalProperties")):
        handled.add("unevaluatedProperties")  # as additionalProperties (see _negate_members)
    if not any(k in keys for k in ("anyOf", "oneOf", "contains", CONTAINS_ALL)):
        handled.add("unevaluatedItems")  # as items (see _negate_arrays)
    if "additionalProperties" in keys:
        handled.add("unevaluatedProperties")  # every member is evaluated: it says nothing
    for key, value in keys.items():
        if key in handled:
            continue
        if key in (
            "additionalProperties",
            "unevaluatedProperties",
            "unevaluatedItems",
            "propertyNames",
        ) and (value is True or value == {}):
            continue
        if key == "patternProperties" and all(v is True or v == {} for v in value.values()):
            continue
        if key in _KNOWN:
            conv.unsupported(
                "not", f"{ptr}/{key}", f"the complement of {key!r} is not expressible exactly"
            )
            # widened: every value the keyword could reject
            out.append(_typed(_KNOWN[key], {}) if _KNOWN[key] else True)
        # Unknown keywords are annotations: they constrain nothing, so nothing to negate.
    out = [o for o in out if o is not False]
    if within is not None:
        out = [o for o in _flat(out) if not _contradicts(within, o)]
        if any(_implied(within, o) for o in out):
            return True  # within, every value already breaks the schema
    if any(o is True for o in out):
        return True
    if not out:
        return False
    return out[0] if len(out) == 1 else {"anyOf": out}


_MISSING = object()


def _negate_one_of(
    conv: ConversionContext, schema: dict, ptr: str, depth: int, within, keyed: bool
) -> dict | bool | None:
    """The complement of a schema with an overlapping ``oneOf``, as "the rest fails, or no
    branch holds, or two branches hold": ``not rest``, ``allOf`` of the branches'
    negations, and ``allOf [A, B]`` for each pair of branches not proven disjoint.

    The complement of its expansion (:func:`_exclusive`, each branch with the others'
    negations) would negate negations and distribute them, which grows exponentially;
    this one has one alternative per overlapping pair. ``None`` where it does not apply:
    no ``oneOf``, a disjoint one (negated as a plain choice), more than
    :data:`_MAX_BRANCHES` branches, or an ``unevaluated*`` keyword beside it (which sees
    the members the branch that holds evaluates, so the rest is not independent of it).
    """
    branches = schema.get("oneOf")
    if not isinstance(branches, list) or len(branches) > _MAX_BRANCHES:
        return None
    if any(schema.get(k, True) not in (True, {}) for k in _UNEVALUATED):
        return None
    rest = {k: v for k, v in schema.items() if k != "oneOf"}
    n = len(branches)
    pairs = [
        _all_of(_opened(branches[i]), _opened(branches[j]))
        for i in range(n)
        for j in range(i + 1, n)
        if not conv.disjoint([branches[i], branches[j]], rest)
    ]
    if not pairs:
        return None  # disjoint: the plain path negates it as a choice
    none_holds = _conjoin(
        conv,
        [
            negate(conv, b, f"{ptr}/oneOf/{i}", depth + 1, keyed=keyed)
            for i, b in enumerate(branches)
        ],
    )
    rest_fails = negate(conv, {**rest, OPEN: True}, ptr, depth, within, keyed)
    out = [rest_fails, none_holds, *(_typed_like(rest, p) for p in pairs)]
    if any(o is True for o in out):
        return True
    out = [o for o in out if o is not False]
    if not out:
        return False
    return out[0] if len(out) == 1 else {"anyOf": out, OPEN: True}


def _typed_like(rest: dict, pair):
    """Two branches that hold together, inside ``rest``'s ``type`` (values of another
    type fail ``rest``, an alternative of their own)."""
    if pair is False or "type" not in rest:
        return pair
    return _all_of({"type": rest["type"], OPEN: True}, pair)


def _flat(alternatives: list) -> list:
    """Nested derived ``anyOf`` alternatives as one list."""
    out = []
    for o in alternatives:
        if isinstance(o, dict) and set(o) == {"anyOf", OPEN}:
            out.extend(_flat(o["anyOf"]))
        else:
            out.append(o)
    return out


def _forbidden(within: dict, name: str) -> bool:
    """Whether ``within`` forbids property ``name`` (plainly: ``false``, or not declared in
    a closed object without patterns)."""
    props = within.get("properties", {})
    if props.get(name, _MISSING) is False:
        return True
    closed = within.get("additionalProperties") is False and not within.get("patternProperties")
    return closed and name not in props and not within.get(KEY_SCHEMAS)


def _contradicts(within: dict, alt) -> bool:
    """Whether a derived alternative provably accepts no value ``within`` accepts (cheap,
    syntactic checks only; ``False`` when in doubt)."""
    if not isinstance(alt, dict):
        return False
    if "type" in within and "type" in alt:
        ta = _type_set(within["type"])
        tb = _type_set(alt["type"])
        if ta is not None and tb is not None and not _types_meet(ta, tb):
            return True
    required = set(within.get("required", ()))
    for name, sub in alt.get("properties", {}).items():
        if sub is False and name in required:
            return True
    for name in alt.get("required", ()):
        if _forbidden(within, name):
            return True
    if _closed(within):
        names = set(within.get("properties", {}))
        for requirement in alt.get(HAS_MEMBER, ()):
            if all(_outside(lang, names) for lang, _ in requirement):
                return True  # its member would have to be one within forbids
    return False


def _implied(within: dict, alt) -> bool:
    """Whether every value ``within`` accepts meets a derived alternative (cheap, syntactic
    checks only; ``False`` when in doubt): a type that covers ``within``'s, or a property
    that ``within`` forbids being absent."""
    if not isinstance(alt, dict) or "type" not in within or "type" not in alt:
        return False
    inner, outer = _type_set(within["type"]), _type_set(alt["type"])
    if inner is None or outer is None or not inner <= outer:
        return False
    rest = {k: v for k, v in alt.items() if k not in ("type", OPEN)}
    if not rest:
        return True
    if outer != {"object"}:
        return False
    if set(rest) == {KEY_SCHEMAS}:
        # members named by a required name's keyed schema (negate's keyed): absent where
        # within forbids them, so the alternative holds whatever their schema
        keys = [k for k, _ in rest[KEY_SCHEMAS]]
        if not all(isinstance(k, dict) and set(k) == {"enum"} for k in keys):
            return False
        return all(_forbidden(within, n) for k in keys for n in k["enum"])
    if set(rest) != {"properties"}:
        return False
    return all(sub is False and _forbidden(within, n) for n, sub in rest["properties"].items())


def _closed(within: dict) -> bool:
    """Whether ``within`` allows only its declared properties (plainly)."""
    return (
        within.get("additionalProperties") is False
        and not within.get("patternProperties")
        and not within.get(KEY_SCHEMAS)
    )


def _outside(lang, names: set) -> bool:
    """Whether the key schema ``lang`` (from :func:`_not_names` or a name) provably
    accepts none of ``names``."""
    if isinstance(lang, dict) and set(lang) == {"enum"}:
        return not (set(lang["enum"]) & names)
    excluded = _names_outside(lang)
    return excluded is not None and names <= excluded


def _names_outside(lang) -> set | None:
    """The declared names a key language from :func:`_not_names` excludes, when it is
    exactly "none of these names" (``None`` otherwise)."""
    if isinstance(lang, dict) and set(lang) == {"not"}:
        inner = lang["not"]
        if isinstance(inner, dict) and set(inner) == {"enum"}:
            return set(inner["enum"])
    return None


def _type_set(t) -> set | None:
    types = {t} if isinstance(t, str) else set(t) if isinstance(t, list) else None
    if types is None or not types <= set(_TYPES):
        return None
    return types


def _types_meet(a: set, b: set) -> bool:
    if a & b:
        return True
    return ("integer" in a and "number" in b) or ("number" in a and "integer" in b)


# Keywords whose complement is not compiled, with the JSON type they constrain (None: any).
_KNOWN = {
    "uniqueItems": "array",
    "unevaluatedProperties": "object",
    "unevaluatedItems": "array",
    "$dynamicRef": None,
    "$recursiveRef": None,
}


# -- helpers ------------------------------------------------------------------------------

# the keywords of one JSON type, internal ones included
_OF_TYPE = {
    "object": (*TYPE_KEYWORDS["object"], HAS_MEMBER, KEY_SCHEMAS),
    "array": (*TYPE_KEYWORDS["array"], CONTAINS_ALL),
    "string": (*TYPE_KEYWORDS["string"], PATTERNS_KEY, NOT_STRING),
    "number": (*TYPE_KEYWORDS["number"], NOT_MULTIPLE),
}
_KEYWORD_TYPE = {k: t for t, keys in _OF_TYPE.items() for k in keys}
_MAX_FREE_DEPTH = 8


def _whole_types(conv: ConversionContext, schema, depth: int = 0) -> set[str]:
    """JSON types of which ``schema`` accepts every value (``number`` standing for
    ``integer`` too); when unsure, fewer."""
    if schema is True:
        return {"null", "boolean", "number", "string", "array", "object"}
    if not isinstance(schema, dict) or depth > _MAX_FREE_DEPTH:
        return set()
    out = {"null", "boolean", "number", "string", "array", "object"}
    for key, value in schema.items():
        if key in _KEYWORD_TYPE:
            out.discard(_KEYWORD_TYPE[key])
        elif key == "$ref" and isinstance(value, str):
            try:
                target = conv.resolve(value, "")
            except UnsupportedSchemaError:
                return set()
            out &= _whole_types(conv, target, depth + 1)
        elif key == "allOf" and isinstance(value, list):
            for part in value:
                out &= _whole_types(conv, part, depth + 1)
        elif key == "anyOf" and isinstance(value, list):
            whole: set[str] = set()
            for branch in value:
                whole |= _whole_types(conv, branch, depth + 1)
            out &= whole
        elif key not in _IGNORED and not is_annotation(key):
            return set()  # type, const, not, oneOf, if...: may constrain any type
    return out


def _empty_array_overlap(conv: ConversionContext, branches: list, parent: dict) -> int | None:
    """How many branches accept ``[]`` when they are disjoint once arrays need an item (the
    items of one are outside the other's), or ``None``."""
    least = parent.get("minItems", 0)
    if isinstance(least, (int, float)) and not isinstance(least, bool) and least >= 1:
        return None  # the parent already rules out []: nothing to narrow
    if not conv.disjoint(branches, {**parent, "minItems": 1}):
        return None
    try:
        return sum(1 for b in branches if b is not False and conv.is_valid(b, []))
    except Exception:  # noqa: BLE001 - undecided (unevaluated*...): leave it overlapping
        return None


def _narrowed_types(conv: ConversionContext, branches: list, parent: dict) -> list | None:
    """The parent's types less those every ``oneOf`` branch accepts whole (two branches
    or more: ``oneOf`` rejects those values), or ``None`` when there are none."""
    live = [b for b in branches if b is not False]
    if len(live) < 2:
        return None
    whole = {"null", "boolean", "number", "string", "array", "object"}
    for b in live:
        whole &= _whole_types(conv, b)
    if "number" in whole:
        whole.add("integer")
    t = parent.get("type", list(_TYPES))
    types = [t] if isinstance(t, str) else list(t)
    if not isinstance(t, (str, list)) or not all(isinstance(x, str) for x in types):
        return None
    narrowed = [x for x in types if x not in whole]
    return narrowed if len(narrowed) < len(types) else None


def _condition_names(conv: ConversionContext, schema: dict, depth: int = 0) -> list:
    """The property names the conditions of ``schema`` (``if``/``then``/``else``,
    ``dependentSchemas``) declare or require, through references and nested conditions."""
    parts = [schema.get(k) for k in ("if", "then", "else")]
    parts += list(schema.get("dependentSchemas", {}).values())
    parts += [d for d in schema.get("dependencies", {}).values() if isinstance(d, dict)]
    return _names_of(conv, parts, depth)


def _own_names(schema: dict) -> list:
    """The property names ``schema`` itself declares or requires."""
    return [*schema.get("properties", {}), *schema.get("required", ())]


def _closed_with(branch, names: list):
    """A plain object shape ``branch`` closed by ``strict_mode`` to its own names and
    ``names`` (:func:`explicit_defaults`); any other schema as it is."""
    if not isinstance(branch, dict) or branch.get(OPEN):
        return branch
    if not ("properties" in branch or "patternProperties" in branch):
        return branch
    if any(k in branch for k in ("allOf", "$ref", "anyOf", "oneOf", *_LOGIC)):
        return branch
    return explicit_defaults(branch, names)


def _names_of(conv: ConversionContext, parts: list, depth: int = 0) -> list:
    """The property names ``parts`` declare or require, through references and their
    nested conditions."""
    out: list = []
    for part in parts:
        for _ in range(8):  # a chain of plain references
            if isinstance(part, dict) and isinstance(part.get("$ref"), str):
                part = conv.resolve(part["$ref"], "")
            else:
                break
        if not isinstance(part, dict):
            continue
        out += list(part.get("properties", {})) + list(part.get("required", ()))
        if depth < 4:
            out += _condition_names(conv, part, depth + 1)
    return list(dict.fromkeys(out))


def _opened(schema):
    """``schema`` marked :data:`OPEN` (a condition, not a shape: see :func:`expand_logic`)."""
    if isinstance(schema, dict) and not schema.get(OPEN):
        return {**schema, OPEN: True}
    return schema


def _evaluates(schema) -> bool:
    """Whether a derived schema declares members (present properties or items).

    A required kind of member (:data:`HAS_MEMBER`) declares none: the object compiler meets
    it with the members the rest of the object declares or lets through (its
    ``unevaluatedProperties`` included), so a negation's member requirement never makes a
    member look evaluated. Its keyed schemas (:data:`KEY_SCHEMAS`) would, as
    ``patternProperties`` do, except those that forbid their keys (``false``), as a
    property declared ``false`` does not.
    """
    if not isinstance(schema, dict):
        return False
    if any(v is not False for v in schema.get("properties", {}).values()):
        return True
    if any(v is not False for _, v in schema.get(KEY_SCHEMAS, ())):
        return True
    if any(
        k in schema
        for k in (
            "prefixItems",
            "items",
            "contains",
            "patternProperties",
            "additionalProperties",
        )
    ):
        return True
    return any(_evaluates(b) for key in ("anyOf", "allOf") for b in schema.get(key, []))


def _any_of(branches: list) -> dict | bool:
    branches = [b for b in branches if b is not False]
    if not branches:
        return False
    if any(b is True for b in branches):
        return True
    return branches[0] if len(branches) == 1 else {"anyOf": branches, OPEN: True}


_GROUPS = ("null", "boolean", "number", "string", "array", "object")


def _groups(alt) -> set | None:
    """The JSON types (integers in ``number``) a derived alternative may accept."""
    if not isinstance(alt, dict):
        return None
    t = alt.get("type")
    if t is None:
        return set(_GROUPS)
    types = {t} if isinstance(t, str) else set(t) if isinstance(t, list) else None
    if types is None or not types <= set(_TYPES):
        return None
    return {"number" if x == "integer" else x for x in types}


def _conjoin(conv: ConversionContext, parts: list) -> dict | bool:
    """``allOf`` of derived schemas (negations), split by JSON type first.

    A value has one type, so ``allOf [anyOf [A1, A2], anyOf [B1, B2], ...]`` is the
    ``anyOf``, over the types, of the type with, from each part, the alternatives that may
    hold for it. Negations of typed schemas have about one alternative per type, so this
    distributes nothing, where the plain ``allOf`` would be distributed into every
    combination (most of them of two types, accepting nothing) when merged.
    """
    if any(p is False for p in parts):
        return False
    parts = [p for p in parts if p is not True]
    # a negated document subschema (a reference) is split too, once computed
    parts = [
        conv.resolve(p["$ref"], "")
        if isinstance(p, dict)
        and set(p) == {"$ref"}
        and conv.negation_target(p["$ref"]) is not None
        and conv.negation_ready(p["$ref"])
        else p
        for p in parts
    ]
    if any(p is False for p in parts):
        return False
    parts = [p for p in parts if p is not True]
    choices = [_alternatives_of(p) for p in parts]
    if len(parts) < 2 or all(len(c) == 1 for c in choices):
        return _all_of(*parts)
    groups = [[_groups(a) for a in c] for c in choices]
    if any(g is None for gs in groups for g in gs):
        return _all_of(*parts)
    out: list = []
    for t in _GROUPS:
        picked: list = []
        for alts, gs in zip(choices, groups, strict=True):
            fits = [a for a, g in zip(alts, gs, strict=True) if t in g]
            if not fits:
                break
            picked.append(_any_of(fits))
        else:
            out.append(_all_of({"type": t, OPEN: True}, *picked))
    return _any_of(out)


def _alternatives_of(schema) -> list:
    """A derived schema's alternatives: nested plain ``anyOf`` lists as one list."""
    if isinstance(schema, dict) and "anyOf" in schema and set(schema) <= {"anyOf", OPEN}:
        return [a for b in schema["anyOf"] for a in _alternatives_of(b)]
    return [schema]


def _all_of(*parts) -> dict | bool:
    if any(p is False for p in parts):
        return False
    parts = [p for p in parts if p is not True]
    if not parts:
        return True
    return parts[0] if len(parts) == 1 else {"allOf": list(parts), OPEN: True}


def _absent(name: str) -> dict:
    """Objects without property ``name`` (other values are unconstrained)."""
    return {"properties": {name: False}, OPEN: True}


def _typed(t: str | list[str], schema: dict) -> dict:
    return {"type": t, **schema, OPEN: True}


def _lone_if(conv: ConversionContext, cond, ptr: str) -> list:
    """An ``if`` without ``then`` and ``else`` next to ``unevaluated*``: it constrains
    nothing, but where it holds the members it evaluates count as evaluated, so it is
    ``anyOf [if, not if]``. When its negation would itself declare members (which a merge
    would make look evaluated) or cannot be written, it is left out: the unevaluated*
    keyword then sees fewer members, which only rejects more (never a wrong value)."""
    try:
        neg = negate(conv, cond, ptr)
    except UnsupportedSchemaError:
        return []
    return [] if _evaluates(neg) else [_any_of([cond, neg])]


def _exclusive(
    conv: ConversionContext,
    branches: list,
    ptr: str,
    parent: dict,
    keyed: bool,
    shown: list | None = None,
) -> dict | bool:
    """``oneOf`` as ``anyOf`` of each branch without the others (each branch taken as
    ``shown[i]`` where given, and negated as written).

    Each branch is merged with the negations of the other branches it may overlap (those
    proven disjoint from it are left out: it implies their negations), which distributes their
    alternatives; a negation leaves out the alternatives that contradict the branch it
    joins (:func:`negate`'s ``within``). Past :data:`_MAX_BRANCHES` branches or
    :data:`_MAX_COMBINATIONS` combinations the keyword is unsupported (widened: ``anyOf``).
    """
    why = None
    parts: list = []
    if len(branches) > _MAX_BRANCHES:
        why = f"more than {_MAX_BRANCHES} overlapping branches"
    else:
        combos = 0
        # a branch disjoint from another implies the other's negation: only the branches
        # it may overlap are negated beside it
        n = len(branches)
        apart = {
            (i, j)
            for i in range(n)
            for j in range(i + 1, n)
            if conv.disjoint([branches[i], branches[j]], parent)
        }
        for i, b in enumerate(branches):
            within = _within(conv, b, parent, f"{ptr}/{i}")
            negs = [
                negate(conv, other, f"{ptr}/{j}", within=within, keyed=keyed)
                for j, other in enumerate(branches)
                if j != i and (min(i, j), max(i, j)) not in apart
            ]
            product = 1
            for n in negs:
                product *= _alternatives(n)
            combos += product
            parts.append(_all_of(b if shown is None else shown[i], *negs))
        if combos > _MAX_COMBINATIONS:
            why = (
                f"overlapping branches whose negations combine {combos} ways "
                f"(more than {_MAX_COMBINATIONS})"
            )
    if why is not None:
        conv.unsupported("oneOf", ptr, why)
        return _any_of(list(branches))
    return _any_of(parts)


def _within(conv: ConversionContext, branch, parent: dict, ptr: str) -> dict | None:
    """What a negation joining ``branch`` (inside ``parent``) may assume of the value: the
    branch merged with the parent's type and required properties."""
    if not isinstance(branch, dict):
        return None
    try:
        merged = conv.merge_all_of(branch, ptr)
    except UnsupportedSchemaError:
        return None
    if not isinstance(merged, dict):
        return None
    return inside_parent(merged, parent)


def _alternatives(schema) -> int:
    """How many alternatives a derived schema is (its top-level ``anyOf``)."""
    if isinstance(schema, dict) and "anyOf" in schema:
        return max(1, sum(_alternatives(b) for b in schema["anyOf"]))
    return 1


def declare_names(schema: dict, listed: list | tuple) -> dict:
    """``schema`` with the ``listed`` names it does not declare declared as any value,
    where ``strict_mode`` will close it (so the closing keeps them)."""
    if schema.get(OPEN) or "additionalProperties" in schema or "unevaluatedProperties" in schema:
        return schema
    props = schema.get("properties")
    if props is None and "patternProperties" not in schema:
        return schema
    props = props or {}
    named = [n for n in listed if n not in props]
    return {**schema, "properties": {**props, **dict.fromkeys(named, True)}} if named else schema


def explicit_defaults(schema: dict, listed: list | tuple = ()) -> dict:
    """``strict_mode``'s implicit ``false`` for further properties / items, written out.

    ``strict_mode`` closes an object to the names it lists: its ``properties``, its
    ``required`` names and ``listed`` (the names its conditions declare), declared here as
    any value (which keeps the schemas of the patterns they match)."""
    out = dict(schema)
    if not out.get(OPEN):
        shaped = "properties" in out or "patternProperties" in out
        if shaped and "additionalProperties" not in out and "unevaluatedProperties" not in out:
            out["additionalProperties"] = False
            props = out.get("properties", {})
            named = [n for n in (*out.get("required", ()), *listed) if n not in props]
            if named:
                out["properties"] = {**props, **dict.fromkeys(named, True)}
        tuple_items = isinstance(out.get("items"), list)
        if "prefixItems" in out and not any(k in out for k in ("items", "unevaluatedItems")):
            out["items"] = False
        elif tuple_items and "additionalItems" not in out and "unevaluatedItems" not in out:
            out["additionalItems"] = False
    out[OPEN] = True
    return out


def _types_of(conv: ConversionContext, keys: dict, ptr: str) -> set[str]:
    t = keys.get("type", list(_TYPES))
    types = {t} if isinstance(t, str) else set(t)
    for x in types:
        if x not in _TYPES:
            raise UnsupportedSchemaError(f"unknown type {x!r} at {ptr or '#'}/type")
    if keys.get("nullable"):
        types.add("null")
    if "number" in types:
        types.add("integer")
    return types


def _negate_type(conv: ConversionContext, keys: dict, ptr: str) -> dict | bool:
    types = _types_of(conv, keys, ptr)
    rest = [t for t in _TYPES if t not in types and t not in ("integer", "number")]
    branches: list = [{"type": rest, OPEN: True}] if rest else []
    if "integer" in types and "number" not in types:
        branches.append({"type": "number", FRACTIONAL: True, OPEN: True})
    elif "integer" not in types:
        branches.append({"type": "number", OPEN: True})
    return _any_of(branches)


def _value_kind(v) -> str:
    """The JSON type of ``v``, all numbers as one kind (they are excluded by value)."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, (int, float)):
        return "number"
    if isinstance(v, str):
        return "string"
    return "array" if isinstance(v, list) else "object"


def _negate_values(conv: ConversionContext, values: list, ptr: str) -> dict | bool:
    """Every JSON value except ``values``."""
    by_type: dict[str, list] = {}
    for v in values:
        by_type.setdefault(_value_kind(v), []).append(v)
    branches: list = []
    free = [t for t in ("null", "boolean", "string", "array", "object") if t not in by_type]
    if free:
        branches.append({"type": free, OPEN: True})
    for b in (True, False):
        if "boolean" in by_type and not any(v is b for v in by_type["boolean"]):
            branches.append({"const": b, OPEN: True})
    if "number" in by_type:
        branches.extend(_numbers_except(by_type["number"]))
    else:
        branches.append({"type": "number", OPEN: True})
    if "string" in by_type:
        branches.append({"type": "string", NOT_STRING: [{"enum": by_type["string"]}], OPEN: True})
    if "array" in by_type:
        branches.append(_all_of(*(_other_arrays(conv, v, ptr) for v in by_type["array"])))
    if "object" in by_type:
        branches.append(_all_of(*(_other_objects(conv, v, ptr) for v in by_type["object"])))
    return _any_of(branches)


def _other_objects(conv: ConversionContext, value: dict, ptr: str) -> dict | bool:
    """Objects other than ``value``: one with a key ``value`` lacks, one without a key of
    ``value``, or one whose member differs from ``value``'s."""
    breaks: list = [[_not_names(list(value), []), True]]
    out: list = []
    for name, item in value.items():
        out.append(_typed("object", _absent(name)))
        other = _negate_values(conv, [item], ptr)
        if other is not False:
            breaks.append([{"enum": [name]}, other])
    out.append(_typed("object", {HAS_MEMBER: [breaks]}))
    return _any_of(out)


def _not_names(names: list, key_schemas: list):
    """The string schema of keys that are none of ``names`` and in none of the key
    languages ``key_schemas`` (string schemas)."""
    others = ([{"enum": names}] if names else []) + key_schemas
    if not others:
        return True
    return {"not": others[0] if len(others) == 1 else {"anyOf": others}}


def _member_breaks(
    conv: ConversionContext, keys: dict, ptr: str, depth: int, within: dict | None, keyed: bool
) -> list:
    """``[key schema, value schema]`` alternatives of a member that breaks
    ``patternProperties``, the internal keyed schemas, ``additionalProperties`` (or
    ``unevaluatedProperties`` where it means the same) or ``propertyNames``."""
    out: list = []
    patterns = keys.get("patternProperties", {})
    by_key = [({"pattern": p}, sub, f"{ptr}/patternProperties/{p}") for p, sub in patterns.items()]
    by_key += [(k, sub, f"{ptr}/not/{i}") for i, (k, sub) in enumerate(keys.get(KEY_SCHEMAS, ()))]
    for lang, sub, where in by_key:
        neg = negate(conv, sub, where, depth + 1, keyed=keyed)
        if neg is not False:
            out.append([lang, neg])
    further = keys.get("additionalProperties")
    if further is None and not any(k in keys for k in ("anyOf", "oneOf")):
        further = keys.get("unevaluatedProperties")
    if further is not None and further is not True and further != {}:
        names = list(keys.get("properties", {}))
        lang = _not_names(names, [k for k, _, _ in by_key])
        closed = within is not None and _closed(within)
        inside = set(within.get("properties", {})) if closed else set()  # type: ignore[union-attr]
        if not (closed and not by_key and inside <= set(names)):  # else within forbids it
            neg = negate(conv, further, f"{ptr}/additionalProperties", depth + 1, keyed=keyed)
            if neg is not False:
                out.append([lang, neg])
    names = keys.get("propertyNames")
    if names is not None and names is not True and names != {}:
        out.append([{"not": names}, True])
    return out


def _other_arrays(conv: ConversionContext, value: list, ptr: str) -> dict | bool:
    """Arrays other than ``value``: another length, or the same length and some item
    other than ``value``'s item there."""
    n = len(value)
    out: list = [_typed("array", {"minItems": n + 1})]
    if n:
        out.append(_typed("array", {"maxItems": n - 1}))
    for i, item in enumerate(value):
        other = _negate_values(conv, [item], ptr)
        if other is not False:
            out.append(
                _typed("array", {"minItems": n, "maxItems": n, "prefixItems": [True] * i + [other]})
            )
    return _any_of(out)


def _numbers_except(points: list) -> list[dict]:
    """Numbers other than ``points``, as open intervals between them."""
    pts = sorted({p for p in points if math.isfinite(p)})
    out: list[dict] = []
    lo = None
    for p in pts + [None]:
        piece: dict = {"type": "number", OPEN: True}
        if lo is not None:
            piece["exclusiveMinimum"] = lo
        if p is not None:
            piece["exclusiveMaximum"] = p
        out.append(piece)
        lo = p
    return out


def _negate_numeric(conv: ConversionContext, keys: dict, ptr: str) -> list[dict]:
    if not any(k in keys for k in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")):
        return []
    lo, lo_s, hi, hi_s = conv.bounds(keys, ptr)
    out = []
    if lo is not None:
        out.append({"type": "number", ("maximum" if lo_s else "exclusiveMaximum"): lo, OPEN: True})
    if hi is not None:
        out.append({"type": "number", ("minimum" if hi_s else "exclusiveMinimum"): hi, OPEN: True})
    return out


_COUNTS = (
    ("minLength", "maxLength", "string"),
    ("minItems", "maxItems", "array"),
    ("minProperties", "maxProperties", "object"),
)


def _negate_counts(keys: dict, strings: bool) -> list:
    out: list = []
    for low, high, t in _COUNTS:
        if t == "string" and not strings:
            continue
        if low in keys and keys[low] > 0:
            out.append({"type": t, high: math.ceil(keys[low]) - 1, OPEN: True})
        if high in keys:
            out.append({"type": t, low: math.floor(keys[high]) + 1, OPEN: True})
    return out


def _negate_arrays(conv: ConversionContext, keys: dict, ptr: str, depth: int, keyed: bool) -> list:
    out: list = []
    items, prefix = keys.get("items"), keys.get("prefixItems")
    further_key = "items"
    if items is None and not any(k in keys for k in ("anyOf", "oneOf", "contains", CONTAINS_ALL)):
        items = keys.get("unevaluatedItems")  # no applicator evaluates items: the same
    if isinstance(items, list):  # draft 7 tuple form
        prefix, items, further_key = items, keys.get("additionalItems"), "additionalItems"
    prefix = prefix or []
    for i, sub in enumerate(prefix):
        neg = negate(conv, sub, f"{ptr}/prefixItems/{i}", depth + 1, keyed=keyed)
        if neg is not False:
            out.append(_typed("array", {"minItems": i + 1, "prefixItems": [True] * i + [neg]}))
    if items is not None and items is not True and items != {}:
        neg = negate(conv, items, f"{ptr}/{further_key}", depth + 1, keyed=keyed)
        if neg is not False:
            if prefix:
                if items is False:
                    out.append(_typed("array", {"minItems": len(prefix) + 1}))
                else:
                    conv.unsupported(
                        "not", f"{ptr}/{further_key}", "the complement of items after prefixItems"
                    )
                    out.append(_typed("array", {"minItems": len(prefix) + 1}))  # widened
            else:
                out.append(_typed("array", {"contains": neg}))
    if "contains" in keys:
        sub = keys["contains"]
        lo, hi = keys.get("minContains", 1), keys.get("maxContains")
        if lo >= 1:  # no matching item at all
            out.append(
                _typed(
                    "array", {"items": negate(conv, sub, f"{ptr}/contains", depth + 1, keyed=keyed)}
                )
            )
        if lo >= 2:
            out.append(_typed("array", {"contains": sub, "maxContains": lo - 1}))
        if hi is not None:
            out.append(_typed("array", {"contains": sub, "minContains": hi + 1}))
    for i, sub in enumerate(keys.get(CONTAINS_ALL, ())):  # no item matches one of them
        out.append(
            _typed(
                "array", {"items": negate(conv, sub, f"{ptr}/contains/{i}", depth + 1, keyed=keyed)}
            )
        )
    if keys.get("uniqueItems"):
        conv.unsupported("not", f"{ptr}/uniqueItems", "arrays with a repeated item")
        out.append(_typed("array", {"minItems": 2}))  # widened: every array that could repeat
    return out
