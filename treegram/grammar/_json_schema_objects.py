"""Objects and arrays of the JSON Schema frontend.

Properties are emitted in schema order; optional ones may be skipped; further keys
(``patternProperties``, ``additionalProperties``) follow the declared ones; their key
languages are exact decoded-string sets (:mod:`treegram.grammar._json_schema_keys`). The item count
(``minProperties``/``maxProperties``, ``minItems``/``maxItems``) is tracked exactly: the
expression after the i-th slot is memoised per (slot, count so far), each container's
closing bracket is part of that expression, so a value's lexeme is always followed by
its ``,`` / ``}`` / ``]`` in the same rule unless a shared tail was hoisted into a rule.
"""

from __future__ import annotations

from treegram.grammar._charset_dfa import DfaLimitError, dfa_string_expr
from treegram.grammar._ir import Expr, Repeat
from treegram.grammar._json_schema_keys import KeySpace
from treegram.grammar._json_schema_lex import (
    EMPTY,
    alt,
    canonical_text,
    lit,
    seq,
    string_of,
)
from treegram.grammar._json_schema_strings import any_string

__all__ = ["ObjectBuilder", "array_expr"]

_UNIQUE_MAX_VALUES = 6


class ObjectBuilder:
    """Builds object and homogeneous container expressions for one converter."""

    def __init__(self, conv) -> None:
        self.conv = conv

    def homogeneous(self, brackets: str, item: Expr | None, lo: int, hi: int | None,
                    depth: int, count_before: int = 0) -> Expr | None:
        """``lo``..``hi`` copies of ``item`` between ``brackets`` with separators."""
        lay = self.conv.layout
        if hi is not None and hi < lo:
            return None
        close = lay.close(depth, brackets[1])
        empty = lay.empty(brackets) if lo == 0 else None
        if item is None:
            return empty
        rest = Repeat(seq(lay.comma(depth), item), max(lo - 1, 0),
                      None if hi is None else hi - 1)
        if hi == 0:
            return empty
        return alt(empty, seq(lit(brackets[0]), lay.open(depth), item, rest, close))

    # -- objects ------------------------------------------------------------------------
    def object_expr(self, schema: dict, ptr: str, depth: int) -> Expr | None:
        """The objects that satisfy the object keywords of ``schema``."""
        conv = self.conv
        lay = conv.layout
        props = schema.get("properties", {})
        required = set(schema.get("required", []))
        names_schema = schema.get("propertyNames")
        keys = KeySpace(conv, schema, ptr, self._additional_schema(schema))
        slots = []  # (name, value expr, required)
        for name, sub in props.items():
            if names_schema is not None and not _name_ok(conv, names_schema, name):
                if name in required:
                    return None
                continue
            val = conv.value(keys.declared_schema(name, sub), f"{ptr}/properties/{_esc(name)}",
                             depth + 1)
            if val is None:
                if name in required:
                    return None
                continue
            key = string_of(canonical_text(name))
            slots.append((seq(key, lay.colon(), val), name in required))
        for name in [n for n in dict.fromkeys(schema.get("required", [])) if n not in props]:
            # A required key without a schema is an additional property that must appear.
            slots.append((self._named_extra(keys, name, depth), True))
        extra = self._extra(keys, ptr, depth, list(props))
        lo = schema.get("minProperties", 0)
        hi = schema.get("maxProperties")
        return _Counted(lay, slots, extra, lo, hi, depth).build()

    def _named_extra(self, keys: KeySpace, name: str, depth: int) -> Expr | None:
        conv = self.conv
        if keys.names_schema is not None and not _name_ok(conv, keys.names_schema, name):
            return None
        sub, vptr = keys.undeclared(name)
        val = conv.value(sub, vptr, depth + 1)
        if val is None:
            return None
        return seq(string_of(canonical_text(name)), conv.layout.colon(), val)

    def _additional_schema(self, schema: dict):
        if "additionalProperties" in schema:
            return schema["additionalProperties"]
        if "unevaluatedProperties" in schema:
            return schema["unevaluatedProperties"]
        shaped = "properties" in schema or "patternProperties" in schema
        return not (self.conv.strict and shaped)

    def _extra(self, keys: KeySpace, ptr: str, depth: int, declared: list[str]) -> Expr | None:
        """One further key and value (not a declared property), or ``None``."""
        conv = self.conv
        colon = conv.layout.colon()
        add, names_schema = keys.additional, keys.names_schema
        if not keys.patterns and (add is False or (names_schema is None and not declared)):
            if add is False:
                return None
            return seq(any_string(), colon, conv.value(add, f"{ptr}/additionalProperties",
                                                       depth + 1))
        atoms = keys.atoms(declared)
        if atoms is None:  # propertyNames outside the DFA subset: only without patterns
            if keys.patterns:
                conv.unsupported("propertyNames", f"{ptr}/propertyNames",
                                 "together with patternProperties, only string keywords")
                return None
            key = conv.value(_as_string(names_schema), f"{ptr}/propertyNames", 0)
            return seq(key, colon, conv.value(add, f"{ptr}/additionalProperties", depth + 1))
        parts = []
        for lang, sub, vptr in atoms:
            val = conv.value(sub, vptr, depth + 1)
            if val is None:
                continue
            try:
                parts.append(seq(dfa_string_expr(conv, lang, "key"), colon, val))
            except DfaLimitError as exc:
                conv.unsupported("patternProperties" if keys.patterns else "propertyNames",
                                 ptr, f"key language: {exc}")
        return alt(*parts)


def _esc(name: str) -> str:
    return name.replace("~", "~0").replace("/", "~1")


def _as_string(names_schema):
    if names_schema is True or names_schema == {}:
        return {"type": "string"}
    if names_schema is False:
        return False
    return {"allOf": [{"type": "string"}, names_schema]}


def _name_ok(conv, names_schema, name: str) -> bool:
    try:
        import jsonschema
    except ImportError:
        return True
    try:
        return jsonschema.Draft202012Validator(names_schema).is_valid(name)
    except Exception:  # noqa: BLE001 - keep the property when undecidable
        return True


class _Counted:
    """Declared slots in order, then repeated extras, with an exact count range."""

    def __init__(self, lay, slots, extra, lo: int, hi: int | None, depth: int) -> None:
        self.lay, self.slots, self.extra = lay, slots, extra
        self.lo, self.hi, self.depth = lo, hi, depth
        self.memo: dict[tuple[int, int], Expr | None] = {}
        # Counts above the cap behave alike.
        self.cap = hi if hi is not None else lo
        self.remaining_required = [sum(1 for _, r in slots[i:] if r)
                                   for i in range(len(slots) + 1)]

    def build(self) -> Expr | None:
        body = self.tail(0, 0)
        lay = self.lay
        empty = lay.empty("{}") if self._tail_can_be_empty() else None
        nonempty = seq(lit("{"), lay.open(self.depth), body) if body is not None else None
        return alt(empty, nonempty)

    def _tail_can_be_empty(self) -> bool:
        return self.remaining_required[0] == 0 and self.lo == 0

    def tail(self, i: int, c: int) -> Expr | None:
        """What follows after slot ``i`` with ``c`` members written (``c >= 1`` unless
        nothing was written); ``None`` when nothing can follow."""
        key = (i, min(c, self.cap + 1) if self.hi is None else c)
        if key in self.memo:
            return self.memo[key]
        self.memo[key] = None
        out = self._tail(i, c)
        self.memo[key] = out
        return out

    def _tail(self, i: int, c: int) -> Expr | None:
        if self.hi is not None and c + self.remaining_required[i] > self.hi:
            return None
        if i == len(self.slots):
            return self._extras(c)
        slot, required = self.slots[i]
        sep = self.lay.comma(self.depth) if c > 0 else EMPTY
        take = seq(sep, slot, self.tail(i + 1, c + 1)) if slot is not None else None
        skip = None if required else self.tail(i + 1, c)
        return alt(take, skip)

    def _extras(self, c: int) -> Expr | None:
        lay = self.lay
        close = lay.close(self.depth, "}")
        need = max(self.lo - c, 0)
        room = None if self.hi is None else self.hi - c
        if c == 0:
            # The empty object is built separately; here at least one member is written.
            if self.extra is None or (room is not None and room < 1):
                return None
            rest = Repeat(seq(lay.comma(self.depth), self.extra), max(need - 1, 0),
                          None if room is None else room - 1)
            return seq(self.extra, rest, close)
        if self.extra is None:
            return close if need == 0 else None
        return seq(Repeat(seq(lay.comma(self.depth), self.extra), need, room), close)


# -- arrays -------------------------------------------------------------------------------


def array_expr(conv, schema: dict, ptr: str, depth: int) -> Expr | None:
    """The arrays that satisfy the array keywords of ``schema``."""
    items = schema.get("items")
    prefix = schema.get("prefixItems")
    if isinstance(items, list):  # draft 7 tuple form
        prefix, items = items, schema.get("additionalItems")
    if prefix is None:
        prefix = []
    if items is None:
        items = schema.get("unevaluatedItems")
    if items is None:
        items = not (prefix and conv.strict)
    lo = schema.get("minItems", 0)
    hi = schema.get("maxItems")
    if not prefix:
        hi = 0 if items is False else hi
    if "contains" in schema:
        return _contains(conv, schema, ptr, depth, prefix, items, lo, hi)
    if schema.get("uniqueItems") and (hi is None or hi > 1):
        return _unique(conv, schema, ptr, depth, prefix, items, lo, hi)
    pvals = [conv.value(p, f"{ptr}/prefixItems/{i}", depth + 1) for i, p in enumerate(prefix)]
    item = conv.value(items, f"{ptr}/items", depth + 1) if items is not False else None
    if not pvals:
        return conv.objects.homogeneous("[]", item, lo, hi, depth)
    return _tuple(conv.layout, pvals, item, lo, hi, depth)


def _tuple(lay, pvals, item, lo, hi, depth) -> Expr | None:
    close = lay.close(depth, "]")
    n = len(pvals)

    def after(j: int) -> Expr | None:  # j items written, j >= 1
        if hi is not None and j > hi:
            return None
        done = close if j >= lo else None
        if j < n:
            nxt = pvals[j]
            return alt(done, seq(lay.comma(depth), nxt, after(j + 1)) if nxt is not None
                       else None)
        if item is None:
            return done
        room = None if hi is None else hi - j
        return seq(Repeat(seq(lay.comma(depth), item), max(lo - j, 0), room), close)

    empty = lay.empty("[]") if lo == 0 else None
    if pvals[0] is None or (hi is not None and hi < 1):
        return empty
    return alt(empty, seq(lit("["), lay.open(depth), pvals[0], after(1)))


def _contains(conv, schema, ptr, depth, prefix, items, lo, hi) -> Expr | None:
    if prefix or hi is not None or lo > 1:
        conv.unsupported("contains", f"{ptr}/contains",
                         "only without prefixItems, maxItems and minItems > 1")
    lay = conv.layout
    item = conv.value(items, f"{ptr}/items", depth + 1) if items is not False else None
    match_schema = schema["contains"] if items is True else {"allOf": [items, schema["contains"]]}
    match = conv.value(match_schema, f"{ptr}/contains", depth + 1)
    if match is None or item is None:
        return None
    sep_item = seq(lay.comma(depth), item)
    return seq(lit("["), lay.open(depth), Repeat(seq(item, lay.comma(depth)), 0, None), match,
               Repeat(sep_item, 0, None), lay.close(depth, "]"))


def _unique(conv, schema, ptr, depth, prefix, items, lo, hi) -> Expr | None:
    """uniqueItems where the item values are a small finite set of literals."""
    values = _finite_values(conv, items)
    if prefix or values is None or len(values) > _UNIQUE_MAX_VALUES:
        conv.unsupported("uniqueItems", f"{ptr}/uniqueItems",
                         "only for items that are a small enum/const/boolean/null set")
        return conv.objects.homogeneous("[]", conv.value(items, f"{ptr}/items", depth + 1),
                                        lo, hi, depth)
    lits = [conv.literal(v, depth + 1) for v in values]
    lay = conv.layout
    close = lay.close(depth, "]")
    memo: dict = {}

    def after(used: frozenset) -> Expr | None:
        if used in memo:
            return memo[used]
        k = len(used)
        done = close if k >= lo else None
        more = []
        if hi is None or k < hi:
            for i, v in enumerate(lits):
                if i not in used:
                    more.append(seq(lay.comma(depth), v, after(used | {i})))
        memo[used] = alt(done, *more)
        return memo[used]

    firsts = [seq(v, after(frozenset({i}))) for i, v in enumerate(lits)]
    empty = lay.empty("[]") if lo == 0 else None
    body = alt(*firsts)
    return alt(empty, seq(lit("["), lay.open(depth), body) if body is not None else None)


def _finite_values(conv, items):
    if not isinstance(items, dict):
        return None
    if "const" in items:
        return [items["const"]]
    if "enum" in items:
        return list(items["enum"])
    t = items.get("type")
    if t == "boolean" and len(items) == 1:
        return [True, False]
    if t == "null" and len(items) == 1:
        return [None]
    return None
