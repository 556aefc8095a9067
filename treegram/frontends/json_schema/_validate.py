"""Validate one JSON value against a subschema of the compilation, without ``jsonschema``.

The converter needs a yes/no answer in a few places: which ``enum``/``const`` values
satisfy their sibling keywords, which declared property names satisfy
``propertyNames``, whether ``oneOf`` branches overlap on a value. These answers decide
the grammar, so they must not depend on an optional package. This module answers them
with treegram's own machinery: string keywords (``pattern``, the allOf-merged patterns)
through the code point DFAs of :mod:`._string_dfa`, ``$ref`` through
the compilation's reference index, everything else directly.

Semantics follow JSON Schema 2020-12 as ``jsonschema``'s validators apply it by default:
``format`` is an annotation (not asserted), unknown keywords are ignored, numbers compare
by value (``1 == 1.0``, ``true`` is not ``1``). A keyword whose answer depends on
annotations from elsewhere (``unevaluated*``, dynamic references) raises
:class:`UndecidedError`, and callers keep the value, as they do for any undecidable case.
"""

from __future__ import annotations

from fractions import Fraction

from treegram.frontends.json_schema._context import ConversionContext
from treegram.frontends.json_schema._keywords import (
    CONTAINS_ALL,
    FRACTIONAL,
    HAS_MEMBER,
    KEY_SCHEMAS,
    NOT_MULTIPLE,
    NOT_STRING,
    PATTERNS_KEY,
)
from treegram.frontends.json_schema._string_dfa import (
    StringConstraintError,
    pattern_dfa,
    string_dfa,
)

__all__ = ["UndecidedError", "Validator", "json_equal"]

# Following $refs this deep is taken for a loop that never reads the value.
_MAX_REF_DEPTH = 64


class UndecidedError(Exception):
    """The value's validity cannot be decided here (the caller keeps the value)."""


def _counts_allow(schema: dict, members: str, n: int) -> bool:
    """Whether ``n`` members meet ``min{members}`` / ``max{members}``.

    Raises
    ------
    UndecidedError
        The schema has ``unevaluated{members}`` (it needs the annotations of the
        applicators around it).
    """
    key = f"unevaluated{members}"
    if key in schema and schema[key] is not True:
        raise UndecidedError(key)
    lo, hi = schema.get(f"min{members}"), schema.get(f"max{members}")
    return not (_is_number(lo) and n < lo or _is_number(hi) and n > hi)


def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _json_type_ok(value, t: str) -> bool:
    if t == "null":
        return value is None
    if t == "boolean":
        return isinstance(value, bool)
    if t == "integer":
        return _is_number(value) and (isinstance(value, int) or value.is_integer())
    if t == "number":
        return _is_number(value)
    if t == "string":
        return isinstance(value, str)
    if t == "array":
        return isinstance(value, list)
    if t == "object":
        return isinstance(value, dict)
    return False


def json_equal(a, b) -> bool:
    """JSON Schema equality: numbers by value, ``true`` unequal to ``1``."""
    if _is_number(a) and _is_number(b):
        return a == b
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(json_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(json_equal(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


def _frac(x) -> Fraction:
    return Fraction(x) if isinstance(x, int) else Fraction(str(x))


class Validator:
    """Validates values against subschemas of one converter's schema.

    Parameters
    ----------
    conv : Converter
        Resolves ``$ref`` (canonical, absolute in the converter's schema).
    """

    def __init__(self, conv: ConversionContext) -> None:
        self.conv = conv
        self._patterns: dict[str, object] = {}
        self._keys: dict[int, object] = {}  # id of a key schema -> its automaton

    def is_valid(self, schema, value) -> bool:
        """Whether ``value`` satisfies ``schema``.

        Raises
        ------
        UndecidedError
            A keyword this module does not decide (see the module docstring).
        """
        return self._valid(schema, value, 0)

    def _search(self, pattern: str, text: str) -> bool:
        dfa = self._patterns.get(pattern)
        if dfa is None:
            try:
                dfa = self._patterns[pattern] = pattern_dfa(pattern)
            except StringConstraintError as exc:
                raise UndecidedError(str(exc)) from None
        return dfa.accepts(text)

    def _in_keys(self, keys, text: str) -> bool:
        """Whether the string schema ``keys`` (internal keywords) accepts ``text``."""
        dfa = self._keys.get(id(keys))
        if dfa is None:
            try:
                dfa = string_dfa(keys, self.conv)
            except StringConstraintError as exc:
                raise UndecidedError(str(exc)) from None
            if dfa is None:
                raise UndecidedError("a key language outside the string keywords")
            self._keys[id(keys)] = (keys, dfa)  # the schema kept: its id stays unique
        else:
            dfa = dfa[1]
        return dfa.accepts(text)

    def _valid(self, schema, value, refs: int) -> bool:
        if schema is True:
            return True
        if schema is False:
            return False
        if not isinstance(schema, dict):
            raise UndecidedError("not a schema")
        for key in ("$dynamicRef", "$recursiveRef"):
            if key in schema:
                raise UndecidedError(key)
        if "$ref" in schema:
            if refs >= _MAX_REF_DEPTH:
                raise UndecidedError("$ref loop")
            target = self.conv.resolve(schema["$ref"], "")
            if not self._valid(target, value, refs + 1):
                return False
        t = schema.get("type")
        if t is not None:
            types = [t] if isinstance(t, str) else t
            if not any(_json_type_ok(value, x) for x in types):
                return False
        if "const" in schema and not json_equal(value, schema["const"]):
            return False
        if "enum" in schema and not any(json_equal(value, e) for e in schema["enum"]):
            return False
        if not self._logic(schema, value, refs):
            return False
        if _is_number(value):
            if schema.get(FRACTIONAL) and _frac(value).denominator == 1:
                return False
            return self._number(schema, value)
        if isinstance(value, str):
            # as the grammar reads them: a format here is asserted
            if any(self._in_keys(sub, value) for sub in schema.get(NOT_STRING, ())):
                return False
            return self._string(schema, value)
        if isinstance(value, list):
            return self._array(schema, value, refs)
        if isinstance(value, dict):
            return self._object(schema, value, refs)
        return True

    def _logic(self, schema: dict, value, refs: int) -> bool:
        sub = self._valid
        if "allOf" in schema and not all(sub(s, value, refs) for s in schema["allOf"]):
            return False
        if "anyOf" in schema and not any(sub(s, value, refs) for s in schema["anyOf"]):
            return False
        if "oneOf" in schema and sum(sub(s, value, refs) for s in schema["oneOf"]) != 1:
            return False
        if "not" in schema and sub(schema["not"], value, refs):
            return False
        if "if" in schema:
            branch = "then" if sub(schema["if"], value, refs) else "else"
            if not sub(schema.get(branch, True), value, refs):
                return False
        return True

    def _number(self, schema: dict, v) -> bool:
        lo, hi = schema.get("minimum"), schema.get("maximum")
        if _is_number(lo) and v < lo:
            return False
        if _is_number(hi) and v > hi:
            return False
        xlo, xhi = schema.get("exclusiveMinimum"), schema.get("exclusiveMaximum")
        if xlo is True and _is_number(lo) and v <= lo:  # draft 4 form
            return False
        if xhi is True and _is_number(hi) and v >= hi:
            return False
        if _is_number(xlo) and v <= xlo:
            return False
        if _is_number(xhi) and v >= xhi:
            return False
        mult = schema.get("multipleOf")
        # exact: 0.3 is a multiple of 0.1 (binary floating point says otherwise)
        if _is_number(mult) and mult > 0 and (_frac(v) / _frac(mult)).denominator != 1:
            return False
        return not any((_frac(v) / _frac(m)).denominator == 1 for m in schema.get(NOT_MULTIPLE, ()))

    def _string(self, schema: dict, s: str) -> bool:
        lo, hi = schema.get("minLength"), schema.get("maxLength")
        if _is_number(lo) and len(s) < lo:  # code points, as JSON Schema counts
            return False
        if _is_number(hi) and len(s) > hi:
            return False
        pats = list(schema.get(PATTERNS_KEY, ()))
        if isinstance(schema.get("pattern"), str):
            pats.append(schema["pattern"])
        return all(self._search(p, s) for p in pats)

    def _array(self, schema: dict, arr: list, refs: int) -> bool:
        sub = self._valid
        if not _counts_allow(schema, "Items", len(arr)):
            return False
        items = schema.get("items")
        prefix = schema.get("prefixItems", [])
        rest = items
        if isinstance(items, list):  # draft 7 tuple form
            prefix, rest = items, schema.get("additionalItems")
        for i, v in enumerate(arr):
            if i < len(prefix):
                if not sub(prefix[i], v, refs):
                    return False
            elif rest is not None and not sub(rest, v, refs):
                return False
        if schema.get("uniqueItems") is True:
            for i in range(len(arr)):
                if any(json_equal(arr[i], arr[j]) for j in range(i)):
                    return False
        if not all(any(sub(c, v, refs) for v in arr) for c in schema.get(CONTAINS_ALL, ())):
            return False
        if "contains" in schema:
            n = sum(1 for v in arr if sub(schema["contains"], v, refs))
            least = schema.get("minContains", 1)
            most = schema.get("maxContains")
            if n < least or (_is_number(most) and n > most):
                return False
        return True

    def _object(self, schema: dict, obj: dict, refs: int) -> bool:
        sub = self._valid
        if not _counts_allow(schema, "Properties", len(obj)):
            return False
        if any(k not in obj for k in schema.get("required", ())):
            return False
        props = schema.get("properties", {})
        patterns = schema.get("patternProperties", {})
        extra = schema.get("additionalProperties")
        names = schema.get("propertyNames")
        for k, v in obj.items():
            if names is not None and not sub(names, k, refs):
                return False
            matched = k in props
            if matched and not sub(props[k], v, refs):
                return False
            for pat, psub in patterns.items():
                if self._search(pat, k):
                    matched = True
                    if not sub(psub, v, refs):
                        return False
            if not matched and extra is not None and not sub(extra, v, refs):
                return False
        for keys, value in schema.get(KEY_SCHEMAS, ()):
            if any(self._in_keys(keys, k) and not sub(value, v, refs) for k, v in obj.items()):
                return False
        for requirement in schema.get(HAS_MEMBER, ()):
            if not any(
                self._in_keys(keys, k) and sub(value, v, refs)
                for k, v in obj.items()
                for keys, value in requirement
            ):
                return False
        for k, needed in schema.get("dependentRequired", {}).items():
            if k in obj and any(n not in obj for n in needed):
                return False
        for k, dep in schema.get("dependentSchemas", {}).items():
            if k in obj and not sub(dep, obj, refs):
                return False
        for k, dep in schema.get("dependencies", {}).items():  # draft 7
            if k not in obj:
                continue
            if isinstance(dep, list):
                if any(n not in obj for n in dep):
                    return False
            elif not sub(dep, obj, refs):
                return False
        return True
