"""Objects and arrays of the JSON Schema frontend.

Properties are emitted in schema order; optional ones may be skipped; further keys
(``patternProperties``, ``additionalProperties``) follow the declared ones; their key
languages are exact decoded-string sets (:mod:`._keys`). The item count
(``minProperties``/``maxProperties``, ``minItems``/``maxItems``) is tracked exactly: the
expression after the i-th slot is memoised per (slot, count so far), each container's
closing bracket is part of that expression, so a value's lexeme is always followed by
its ``,`` / ``}`` / ``]`` in the same rule unless a shared tail was hoisted into a rule.
"""

from __future__ import annotations

from treegram.frontends.json_schema._arrays import (
    UNCONSTRAINED,
    contains_all_expr,
    contains_expr,
    unique_expr,
)
from treegram.frontends.json_schema._context import ConversionContext
from treegram.frontends.json_schema._dfa_expr import dfa_string_expr
from treegram.frontends.json_schema._excludes import free_string
from treegram.frontends.json_schema._keys import KeySpace
from treegram.frontends.json_schema._keywords import CONTAINS_ALL, OPEN
from treegram.frontends.json_schema._lex import (
    EMPTY,
    alt,
    lit,
    seq,
)
from treegram.frontends.json_schema._strings import any_string
from treegram.frontends.json_schema._validate import UndecidedError
from treegram.ir import Choice, DfaLimitError, Expr, Repeat, RuleRef, Seq

__all__ = ["ObjectBuilder", "array_expr"]

_ANY_ORDER_MAX = 4


class ObjectBuilder:
    """Builds object and homogeneous container expressions for one converter."""

    def __init__(self, conv: ConversionContext) -> None:
        self.conv = conv

    def homogeneous(
        self,
        brackets: str,
        item: Expr | None,
        lo: int,
        hi: int | None,
        depth: int,
        count_before: int = 0,
    ) -> Expr | None:
        """``lo``..``hi`` copies of ``item`` between ``brackets`` with separators."""
        lay = self.conv.layout
        if hi is not None and hi < lo:
            return None
        close = lay.close(depth, brackets[1])
        empty = lay.empty(brackets) if lo == 0 else None
        if item is None:
            return empty
        rest = Repeat(seq(lay.comma(depth), item), max(lo - 1, 0), None if hi is None else hi - 1)
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
            val = conv.value(
                keys.declared_schema(name, sub), f"{ptr}/properties/{_esc(name)}", depth + 1
            )
            if val is None:
                if name in required:
                    return None
                continue
            key = conv.excludes.literal(name)
            if key is None:  # the name itself holds an excluded text
                if name in required:
                    return None
                continue
            slots.append((seq(key, lay.colon(), val), name in required))
        # A required key without a schema is an additional property that must appear.
        named = [
            (name, self._named_extra(keys, name, depth))
            for name in dict.fromkeys(schema.get("required", []))
            if name not in props
        ]
        lo = conv.count(schema, "minProperties", ptr, 0)
        hi = conv.count(schema, "maxProperties", ptr)
        if conv.any_order:
            return self._any_order(keys, schema, ptr, depth, slots, named, lo, hi)
        if named and lo == 0 and hi is None and len(named) <= _ANY_ORDER_MAX:
            if any(expr is None for _, expr in named):
                return None
            extra = self._extra(keys, ptr, depth, list(props) + [n for n, _ in named])
            tail = _AnyOrder(conv, lay, [expr for _, expr in named], extra, depth)
            return _Counted(lay, slots, extra, lo, hi, depth, tail).build()
        slots.extend((expr, True) for _, expr in named)
        extra = self._extra(keys, ptr, depth, list(props))
        return _Counted(lay, slots, extra, lo, hi, depth).build()

    def _any_order(self, keys, schema, ptr, depth, slots, named, lo, hi) -> Expr | None:
        """xgrammar's ``any_order``: members in any order, each a declared property, a
        required undeclared key or a further key; presence and repetition are not
        checked, only the count, at least ``max(minProperties, len(required))``."""
        members = [slot for slot, _ in slots]
        members += [expr for _, expr in named if expr is not None]
        extra = self._extra(keys, ptr, depth, list(schema.get("properties", {})))
        if extra is not None:
            members.append(extra)
        lo = max(lo, len(set(schema.get("required", []))))
        if hi is not None and hi < lo:
            return None
        if not members:
            return self.conv.layout.empty("{}") if lo == 0 else None
        return self.homogeneous("{}", alt(*members), lo, hi, depth)

    def _named_extra(self, keys: KeySpace, name: str, depth: int) -> Expr | None:
        conv = self.conv
        if keys.names_schema is not None and not _name_ok(conv, keys.names_schema, name):
            return None
        sub, vptr = keys.undeclared(name)
        key = conv.excludes.literal(name)
        val = None if key is None else conv.value(sub, vptr, depth + 1)
        if val is None:
            return None
        return seq(key, conv.layout.colon(), val)

    def _additional_schema(self, schema: dict):
        if "additionalProperties" in schema:
            return schema["additionalProperties"]
        if "unevaluatedProperties" in schema:
            return schema["unevaluatedProperties"]
        shaped = "properties" in schema or "patternProperties" in schema
        return not (self.conv.strict and shaped and not schema.get(OPEN))

    def _extra(self, keys: KeySpace, ptr: str, depth: int, declared: list[str]) -> Expr | None:
        """One further key and value (not a declared property), or ``None``."""
        conv = self.conv
        colon = conv.layout.colon()
        add, names_schema = keys.additional, keys.names_schema
        if not keys.patterns and (add is False or (names_schema is None and not declared)):
            if add is False:
                return None
            return seq(
                conv.excludes.any_string(any_string()),
                colon,
                conv.value(add, f"{ptr}/additionalProperties", depth + 1),
            )
        atoms = keys.atoms(declared)
        if atoms is None:  # propertyNames outside the DFA subset: only without patterns
            if keys.patterns:
                conv.unsupported(
                    "propertyNames",
                    f"{ptr}/propertyNames",
                    "together with patternProperties, only string keywords",
                )
                return None
            key = conv.value(_as_string(names_schema), f"{ptr}/propertyNames", 0)
            return seq(key, colon, conv.value(add, f"{ptr}/additionalProperties", depth + 1))
        # Keys that no pattern constrains are filtered by the excluded texts.
        free_names = conv.excludes and (names_schema is None or free_string(names_schema))
        parts = []
        for lang, sub, vptr, patterned in atoms:
            val = conv.value(sub, vptr, depth + 1)
            if val is None:
                continue
            try:
                if free_names and not patterned:
                    key = conv.excludes.language(lang, "key")
                else:
                    key = dfa_string_expr(conv, lang, "key")
                parts.append(seq(key, colon, val))
            except DfaLimitError as exc:
                conv.unsupported(
                    "patternProperties" if keys.patterns else "propertyNames",
                    ptr,
                    f"key language: {exc}",
                )
        return alt(*parts)


def _esc(name: str) -> str:
    return name.replace("~", "~0").replace("/", "~1")


def _as_string(names_schema):
    if names_schema is True or names_schema == {}:
        return {"type": "string"}
    if names_schema is False:
        return False
    return {"allOf": [{"type": "string"}, names_schema]}


def _name_ok(conv: ConversionContext, names_schema, name: str) -> bool:
    try:
        return conv.is_valid(names_schema, name)  # its $refs resolve in this compilation
    except UndecidedError:  # keep the property when undecidable
        return True


class _AnyOrder:
    """After the declared slots: further properties in any order, among which each of
    ``named`` (required properties without a declaration) appears exactly once.

    One rule per (members written yet?, named ones still missing); used without
    ``minProperties``/``maxProperties``.
    """

    def __init__(
        self, conv: ConversionContext, lay, named: list[Expr], extra: Expr | None, depth: int
    ) -> None:
        self.conv, self.lay, self.named, self.extra, self.depth = conv, lay, named, extra, depth
        self.rules: dict[tuple[bool, frozenset], RuleRef] = {}

    def __call__(self, started: bool) -> Expr | None:
        return self.state(started, frozenset(range(len(self.named))))

    def state(self, started: bool, left: frozenset) -> Expr | None:
        key = (started, left)
        if key not in self.rules:
            name = self.conv.new_rule("members")
            self.rules[key] = RuleRef(name)
            body = self._body(started, left)
            self.conv.rules[name] = body if body is not None else _never()
        return self.rules[key]

    def _body(self, started: bool, left: frozenset) -> Expr | None:
        sep = self.lay.comma(self.depth) if started else EMPTY
        options = [self.lay.close(self.depth, "}")] if started and not left else []
        for j in sorted(left):
            options.append(seq(sep, self.named[j], self.state(True, left - {j})))
        if self.extra is not None:
            options.append(seq(sep, self.extra, self.state(True, left)))
        return alt(*options)


def _never() -> Expr:
    from treegram.ir import CharClass

    return CharClass(((0, 0x10FFFF),), negated=True)


class _Counted:
    """Declared slots in order, then repeated extras, with an exact count range."""

    def __init__(
        self,
        lay,
        slots,
        extra,
        lo: int,
        hi: int | None,
        depth: int,
        any_order: _AnyOrder | None = None,
    ) -> None:
        self.lay, self.slots, self.extra = lay, slots, extra
        self.any_order = any_order
        self.lo, self.hi, self.depth = lo, hi, depth
        self.memo: dict[tuple[int, int], Expr | None] = {}
        self.bodies: dict[tuple[int, tuple[int, int]], Expr] = {}
        # Counts above the cap behave alike.
        self.cap = hi if hi is not None else lo
        after = len(any_order.named) if any_order is not None else 0
        self.remaining_required = [
            sum(1 for _, r in slots[i:] if r) + after for i in range(len(slots) + 1)
        ]

    def build(self) -> Expr | None:
        body = self.tail(0, 0)
        lay = self.lay
        empty = lay.empty("{}") if self._tail_can_be_empty() else None
        nonempty = seq(lit("{"), lay.open(self.depth), body) if body is not None else None
        return alt(empty, nonempty)

    def _tail_can_be_empty(self) -> bool:
        return self.remaining_required[0] == 0 and self.lo == 0

    def _key(self, i: int, c: int) -> tuple[int, int]:
        return (i, min(c, self.cap + 1) if self.hi is None else c)

    def _pruned(self, i: int, c: int) -> bool:
        return self.hi is not None and c + self.remaining_required[i] > self.hi

    def tail(self, i: int, c: int) -> Expr | None:
        """What follows after slot ``i`` with ``c`` members written (``c >= 1`` unless
        nothing was written); ``None`` when nothing can follow.

        Iterative (an explicit depth-first stack in the order a recursion would take), so
        thousands of properties cannot exhaust Python's stack.
        """
        key = self._key(i, c)
        if key in self.memo:
            return self.memo[key]
        stack = [(i, c, False)]
        while stack:
            i, c, expanded = stack.pop()
            key = self._key(i, c)
            if expanded:
                self.memo[key] = self._tail(i, c)
                continue
            if key in self.memo:
                continue
            self.memo[key] = None
            stack.append((i, c, True))
            if i == len(self.slots) or self._pruned(i, c):
                continue
            slot, required = self.slots[i]
            # children pushed in reverse so the take branch is built first
            if not required:
                stack.append((i + 1, c, False))
            if slot is not None:
                stack.append((i + 1, c + 1, False))
        return self.memo[self._key(i, c)]

    def _tail(self, i: int, c: int) -> Expr | None:
        """One step of :meth:`tail`; the tails after slot ``i`` are already memoised."""
        if self._pruned(i, c):
            return None
        if i == len(self.slots):
            return self._extras(c)
        slot, required = self.slots[i]
        take = None
        if slot is not None:
            after = self._key(i + 1, c + 1)
            nxt = self.memo[after]
            if nxt is not None:
                # slot i and what follows it, one node whatever came before, so the
                # first-member branch and the later ones share it
                body = self.bodies.get((i, after))
                if body is None:
                    body = self.bodies[(i, after)] = seq(slot, nxt)
                if c == 0:
                    take = body
                elif required:  # flat: a chain of required slots must not nest
                    take = seq(self.lay.comma(self.depth), body)
                else:
                    take = Seq((self.lay.comma(self.depth), body))
        skip = None if required else self.memo[self._key(i + 1, c)]
        if take is None or skip is None:
            return take if skip is None else skip
        if c > 0:
            # Keep the skipped tail one node (not flattened into this choice): it is
            # shared with the previous slot's take branch, so it becomes one rule and
            # N optional properties cost O(N) rules of O(1) size each.
            return Choice((take, skip))
        # Before the first member: one flat choice of every possible first member
        # (tuple concatenation, not alt's per-item walk, keeps this cheap).
        return Choice((take, *skip.items)) if isinstance(skip, Choice) else Choice((take, skip))

    def _extras(self, c: int) -> Expr | None:
        if self.any_order is not None:
            return self.any_order(c > 0)
        lay = self.lay
        close = lay.close(self.depth, "}")
        need = max(self.lo - c, 0)
        room = None if self.hi is None else self.hi - c
        if c == 0:
            # The empty object is built separately; here at least one member is written.
            if self.extra is None or (room is not None and room < 1):
                return None
            rest = Repeat(
                seq(lay.comma(self.depth), self.extra),
                max(need - 1, 0),
                None if room is None else room - 1,
            )
            return seq(self.extra, rest, close)
        if self.extra is None:
            return close if need == 0 else None
        return seq(Repeat(seq(lay.comma(self.depth), self.extra), need, room), close)


# -- arrays -------------------------------------------------------------------------------


def array_expr(conv: ConversionContext, schema: dict, ptr: str, depth: int) -> Expr | None:
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
        items = not (prefix and conv.strict and not schema.get(OPEN))
    lo = conv.count(schema, "minItems", ptr, 0)
    hi = conv.count(schema, "maxItems", ptr)
    if hi is not None and hi < lo:
        return None  # e.g. allOf parts with minItems 3 and maxItems 1
    if not prefix:
        hi = 0 if items is False else hi
    unique = schema.get("uniqueItems") is True and (hi is None or hi > 1)
    if CONTAINS_ALL in schema:
        if items is schema.get("unevaluatedItems") and items is not True:
            conv.unsupported(
                "unevaluatedItems", f"{ptr}/unevaluatedItems", "together with contains"
            )
        if unique:
            conv.unsupported("uniqueItems", f"{ptr}/uniqueItems", "together with contains")
        out = contains_all_expr(conv, schema[CONTAINS_ALL], ptr, depth, prefix, items, lo, hi)
        if out is not UNCONSTRAINED:
            return out
    elif "contains" in schema:
        if items is schema.get("unevaluatedItems") and items is not True:
            # Items that match contains count as evaluated; not modelled.
            conv.unsupported(
                "unevaluatedItems", f"{ptr}/unevaluatedItems", "together with contains"
            )
        if unique:
            conv.unsupported("uniqueItems", f"{ptr}/uniqueItems", "together with contains")
        out = contains_expr(conv, schema, ptr, depth, prefix, items, lo, hi)
        if out is not UNCONSTRAINED:
            return out
    elif unique:
        out = unique_expr(conv, ptr, depth, prefix, items, lo, hi)
        if out is not UNCONSTRAINED:
            return out
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
            return alt(done, seq(lay.comma(depth), nxt, after(j + 1)) if nxt is not None else None)
        if item is None:
            return done
        room = None if hi is None else hi - j
        return seq(Repeat(seq(lay.comma(depth), item), max(lo - j, 0), room), close)

    empty = lay.empty("[]") if lo == 0 else None
    if pvals[0] is None or (hi is not None and hi < 1):
        return empty
    return alt(empty, seq(lit("["), lay.open(depth), pvals[0], after(1)))
