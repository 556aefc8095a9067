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

import itertools

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
from treegram.frontends.json_schema._keywords import CONTAINS_ALL, HAS_MEMBER, OPEN
from treegram.frontends.json_schema._lex import (
    EMPTY,
    alt,
    lit,
    seq,
)
from treegram.frontends.json_schema._string_dfa import StringConstraintError, string_dfa
from treegram.frontends.json_schema._strings import any_string
from treegram.frontends.json_schema._validate import UndecidedError
from treegram.ir import Choice, Dfa, DfaLimitError, Expr, Repeat, RuleRef, Seq

__all__ = ["ObjectBuilder", "array_expr"]

_ANY_ORDER_MAX = 4
_MAX_MARKS = 3  # required kinds of member (from negations) tracked together
_MAX_MARK_BRANCHES = 64  # ways to assign them to declared properties or further members
_MAX_MARK_STATES = 2048  # (requirements met, member count) rules


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
    def object_expr(self, schema: dict, ptr: str, depth: int, marked=None) -> Expr | None:
        """The objects that satisfy the object keywords of ``schema``.

        ``marked`` (internal): a list of ``(key language, value schema)``; for each, the
        objects must also have a further member (not declared, not required by name) with
        a key in the language and a value satisfying the schema (see :meth:`_has_member`).
        """
        if schema.get(HAS_MEMBER) and marked is None:
            return self._has_member(schema, ptr, depth)
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
        mark = None
        if marked:
            mark = self._marks(keys, ptr, depth, list(props), marked)
            if mark is None:
                return None
        if named and lo == 0 and hi is None and len(named) <= _ANY_ORDER_MAX:
            if any(expr is None for _, expr in named):
                return None
            extra = self._extra(keys, ptr, depth, list(props) + [n for n, _ in named])
            tail = _AnyOrder(conv, lay, [expr for _, expr in named], extra, depth, mark)
            return _Counted(lay, slots, extra, lo, hi, depth, tail, mark).build()
        slots.extend((expr, True) for _, expr in named)
        extra = self._extra(keys, ptr, depth, list(props))
        return _Counted(lay, slots, extra, lo, hi, depth, None, mark).build()

    def _has_member(self, schema: dict, ptr: str, depth: int) -> Expr | None:
        """Objects that, for each ``(key language, value schema)`` of :data:`HAS_MEMBER`
        (from a negated ``additionalProperties``, ``patternProperties``, ``propertyNames``
        or object constant), have a member with a key in the language and a value
        satisfying the schema.

        Each requirement is met by a declared property in the language (then required,
        its value also satisfying the schema), by a property required by name (likewise,
        declared in that branch), or by one of the further members: one branch per such
        assignment, in which the further members must meet the requirements assigned to
        them (:class:`_Marks`)."""
        conv = self.conv
        needs = schema[HAS_MEMBER]
        base = {k: v for k, v in schema.items() if k != HAS_MEMBER}
        why = None
        if conv.any_order:
            why = "a required kind of member with any_order"
        elif len(needs) > _MAX_MARKS:
            why = f"more than {_MAX_MARKS} required kinds of member"
        elif KeySpace(conv, base, ptr, True).names_dfa() is None:
            why = "propertyNames outside the string keywords, negated"
        langs = []
        for keys_schema, _ in needs if why is None else ():
            try:
                lang = string_dfa(keys_schema, conv, ptr)
            except (StringConstraintError, DfaLimitError) as exc:
                why = str(exc)
                break
            if lang is None:
                why = "a key language outside the string keywords"
                break
            langs.append(lang)
        if why is not None:
            conv.unsupported("not", ptr, why)
            return self.object_expr(base, ptr, depth)  # widened: without the requirements
        props = base.get("properties", {})
        required = list(dict.fromkeys(base.get("required", [])))
        named = [n for n in required if n not in props]
        keys = KeySpace(conv, base, ptr, self._additional_schema(base))
        # per requirement: the declared or named properties that may meet it, or None
        # (the further members)
        choices = [[*(n for n in [*props, *named] if lang.accepts(n)), None] for lang in langs]
        combos = 1
        for c in choices:
            combos *= len(c)
        if combos > _MAX_MARK_BRANCHES:
            conv.unsupported("not", ptr, f"more than {_MAX_MARK_BRANCHES} ways to meet it")
            return self.object_expr(base, ptr, depth)
        if named:  # a further member is neither declared nor required by name
            taken = Dfa.literals(named)
            langs = [lang.difference(taken) for lang in langs]
        branches = []
        for assignment in itertools.product(*choices):
            b = dict(base)
            new_props = dict(props)
            for name, (_, value) in zip(assignment, needs, strict=True):
                if name is None:
                    continue
                sub = new_props.get(name)
                if sub is None:
                    sub = keys.undeclared(name)[0]
                    b["additionalProperties"] = self._additional_schema(base)
                new_props[name] = _both(sub, value)
                b["required"] = list(dict.fromkeys([*required, name]))
            if new_props:
                b["properties"] = new_props
            rest = [
                (lang, value)
                for name, lang, (_, value) in zip(assignment, langs, needs, strict=True)
                if name is None
            ]
            branches.append(self.object_expr(b, ptr, depth, marked=rest))
        return alt(*branches)

    def _marks(self, keys, ptr, depth, declared, reqs):
        """The further members that meet the requirements ``reqs`` (a list of ``(key
        language, value schema)``): one :class:`_Marks` (``None`` when some requirement
        has no such member)."""
        conv = self.conv
        atoms = keys.atoms(declared)
        if atoms is None:
            return None
        names_schema = keys.names_schema
        free_names = conv.excludes and (names_schema is None or free_string(names_schema))
        classes: dict[int, Expr] = {}
        for bits in range(1, 1 << len(reqs)):
            chosen = [reqs[i] for i in range(len(reqs)) if bits >> i & 1]
            parts = []
            for lang, sub, vptr, patterned in atoms:
                for key_lang, _ in chosen:
                    lang = lang.intersect(key_lang)
                if lang.is_empty():
                    continue
                value = sub
                for _, v in chosen:
                    value = _both(value, v)
                val = conv.value(value, vptr, depth + 1)
                if val is None:
                    continue
                if free_names and not patterned:
                    key = conv.excludes.language(lang, "key")
                else:
                    key = dfa_string_expr(conv, lang, "key")
                parts.append(seq(key, conv.layout.colon(), val))
            expr = alt(*parts)
            if expr is not None:
                classes[bits] = expr
        full = (1 << len(reqs)) - 1
        met = 0
        for bits in classes:
            met |= bits
        if met != full:  # no further member can meet some requirement
            return None
        return _Marks(conv, classes, full)

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
        if not keys.keyed and (add is False or (names_schema is None and not declared)):
            if add is False:
                return None
            return seq(
                conv.excludes.any_string(any_string()),
                colon,
                conv.value(add, f"{ptr}/additionalProperties", depth + 1),
            )
        atoms = keys.atoms(declared)
        if atoms is None:  # propertyNames outside the DFA subset: only without patterns
            if keys.keyed:
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
                    "patternProperties" if keys.keyed else "propertyNames",
                    ptr,
                    f"key language: {exc}",
                )
        return alt(*parts)


def _both(a, b):
    """``allOf`` of two schemas, without a ``true`` side."""
    if b is True or b == {}:
        return a
    if a is True or a == {}:
        return b
    return {"allOf": [a, b]}


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


class _Marks:
    """Further members that must meet some requirements together: ``classes[bits]`` is a
    member meeting the requirements in ``bits`` (at least), ``full`` all of them."""

    def __init__(self, conv: ConversionContext, classes: dict[int, Expr], full: int) -> None:
        self.conv, self.classes, self.full = conv, classes, full
        self.rules: dict[tuple, RuleRef] = {}

    def steps(self, done: int) -> list[tuple[Expr, int]]:
        """The members that meet a requirement not in ``done``, with what is met after."""
        return [(e, done | b) for b, e in self.classes.items() if done | b != done]

    def run(self, lay, depth: int, plain: Expr | None, comma_first: bool, lo: int, hi):
        """``lo``..``hi`` members, plain or marked, that together meet every requirement,
        each after a comma but the first when not ``comma_first``: one rule per
        (requirements met, members written), counts past what the bounds tell apart
        merged."""
        top = max(lo, 1) if hi is None else hi
        if (self.full + 1) * (top + 1) > _MAX_MARK_STATES:
            self.conv.unsupported(
                "not", "", f"more than {_MAX_MARK_STATES} (requirements met, count) states"
            )
            if plain is None:
                return None
            first = plain if not comma_first else seq(lay.comma(depth), plain)
            room = None if hi is None else hi - 1
            more = Repeat(seq(lay.comma(depth), plain), max(lo - 1, 0), room)
            return alt(EMPTY if lo == 0 else None, seq(first, more))

        def state(done: int, t: int) -> RuleRef:
            t = min(t, top)
            key = (comma_first, lo, hi, done, t)
            if key not in self.rules:
                name = self.conv.new_rule("members")
                self.rules[key] = RuleRef(name)
                sep = lay.comma(depth) if t > 0 or comma_first else EMPTY
                options = [EMPTY] if done == self.full and t >= lo else []
                if hi is None or t < hi:
                    if plain is not None:
                        options.append(seq(sep, plain, state(done, t + 1)))
                    options += [seq(sep, e, state(after, t + 1)) for e, after in self.steps(done)]
                body = alt(*options)
                self.conv.rules[name] = body if body is not None else _never()
            return self.rules[key]

        return state(0, 0)


class _AnyOrder:
    """After the declared slots: further properties in any order, among which each of
    ``named`` (required properties without a declaration) appears exactly once, and, with
    ``marks``, members that meet its requirements.

    One rule per (members written yet?, named ones still missing, requirements met); used
    without ``minProperties``/``maxProperties``.
    """

    def __init__(
        self,
        conv: ConversionContext,
        lay,
        named: list[Expr],
        extra: Expr | None,
        depth: int,
        marks: _Marks | None = None,
    ) -> None:
        self.conv, self.lay, self.named, self.extra, self.depth = conv, lay, named, extra, depth
        self.marks = marks
        self.full = marks.full if marks is not None else 0
        self.rules: dict[tuple[bool, frozenset, int], RuleRef] = {}

    def __call__(self, started: bool) -> Expr | None:
        return self.state(started, frozenset(range(len(self.named))), 0)

    def state(self, started: bool, left: frozenset, done: int) -> Expr | None:
        key = (started, left, done)
        if key not in self.rules:
            name = self.conv.new_rule("members")
            self.rules[key] = RuleRef(name)
            body = self._body(started, left, done)
            self.conv.rules[name] = body if body is not None else _never()
        return self.rules[key]

    def _body(self, started: bool, left: frozenset, done: int) -> Expr | None:
        sep = self.lay.comma(self.depth) if started else EMPTY
        ready = started and not left and done == self.full
        options = [self.lay.close(self.depth, "}")] if ready else []
        for j in sorted(left):
            options.append(seq(sep, self.named[j], self.state(True, left - {j}, done)))
        if self.extra is not None:
            options.append(seq(sep, self.extra, self.state(True, left, done)))
        if self.marks is not None:
            for expr, after in self.marks.steps(done):
                options.append(seq(sep, expr, self.state(True, left, after)))
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
        marks: _Marks | None = None,
    ) -> None:
        self.lay, self.slots, self.extra = lay, slots, extra
        self.any_order = any_order
        self.marks = marks  # requirements the further members must meet
        self.lo, self.hi, self.depth = lo, hi, depth
        self.memo: dict[tuple[int, int], Expr | None] = {}
        self.bodies: dict[tuple[int, tuple[int, int]], Expr] = {}
        # Counts above the cap behave alike.
        self.cap = hi if hi is not None else lo
        after = len(any_order.named) if any_order is not None else 0
        after += marks is not None
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
        if self.marks is not None:
            run = self.marks.run(lay, self.depth, self.extra, c > 0, need, room)
            return seq(run, close) if run is not None else None
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
