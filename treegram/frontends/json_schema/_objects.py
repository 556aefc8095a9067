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
import json

from treegram.frontends.json_schema._arrays import (
    UNCONSTRAINED,
    ArrayItems,
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
_MAX_MARKS = 12  # required kinds of member (from negations) tracked together; their
# (requirements met, count) states are bounded by _MAX_MARK_STATES
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
    def object_expr(self, schema: dict, ptr: str, depth: int) -> Expr | None:
        """The objects that satisfy the object keywords of ``schema``.

        Required kinds of member (:data:`HAS_MEMBER`, from negations: a member with a key
        in a language and a value satisfying a schema) are tracked while the members are
        written: each declared or named property may meet some of them (a variant of its
        slot per set it meets), the further members the rest (:class:`_Marks`), and the
        object may close once all are met.
        """
        conv = self.conv
        lay = conv.layout
        props = schema.get("properties", {})
        required = set(schema.get("required", []))
        names_schema = schema.get("propertyNames")
        keys = KeySpace(conv, schema, ptr, self._additional_schema(schema))
        reqs = self._requirements(schema, keys, ptr)
        slots = []  # (variants: [(requirements met, member expr)], required)
        for name, sub in props.items():
            if names_schema is not None and not _name_ok(conv, names_schema, name):
                if name in required:
                    return None
                continue
            key = conv.excludes.literal(name)
            if key is None:  # the name itself holds an excluded text
                if name in required:
                    return None
                continue
            declared = keys.declared_schema(name, sub)
            vptr = f"{ptr}/properties/{_esc(name)}"
            variants = self._variants(key, declared, vptr, name, reqs, depth)
            if not variants:
                if name in required:
                    return None
                continue
            slots.append((variants, name in required))
        # A required key without a schema is an additional property that must appear.
        named = []
        for name in dict.fromkeys(schema.get("required", [])):
            if name in props:
                continue
            if keys.names_schema is not None and not _name_ok(conv, keys.names_schema, name):
                return None
            key = conv.excludes.literal(name)
            if key is None:
                return None
            sub, vptr = keys.undeclared(name)
            if sub is False and self._implicitly_closed(schema) and not keys.matching(name):
                sub = True  # strict_mode closes the object to the names it lists
            variants = self._variants(key, sub, vptr, name, reqs, depth)
            if not variants:
                return None
            named.append((name, variants))
        lo = conv.count(schema, "minProperties", ptr, 0)
        hi = conv.count(schema, "maxProperties", ptr)
        if conv.any_order:
            return self._any_order(keys, schema, ptr, depth, slots, named, lo, hi)
        full = (1 << len(reqs)) - 1
        marks = None
        if reqs:
            declared_names = list(props) + [n for n, _ in named]
            marks = self._marks(keys, ptr, depth, declared_names, reqs)
        if named and lo == 0 and hi is None and len(named) <= _ANY_ORDER_MAX:
            extra = self._extra(keys, ptr, depth, list(props) + [n for n, _ in named])
            tail = _AnyOrder(conv, lay, [v for _, v in named], extra, depth, marks, full)
            return _Counted(lay, slots, extra, lo, hi, depth, tail, marks, full).build()
        slots.extend((variants, True) for _, variants in named)
        extra = self._extra(keys, ptr, depth, list(props))
        return _Counted(lay, slots, extra, lo, hi, depth, None, marks, full).build()

    def _requirements(self, schema: dict, keys: KeySpace, ptr: str) -> list[list]:
        """The required kinds of member of :data:`HAS_MEMBER`, each a list of ``(key
        language, value schema)`` alternatives, without those a required property always
        meets. One that cannot be compiled is unsupported (widened: dropped)."""
        conv = self.conv
        needs = schema.get(HAS_MEMBER, ())
        if not needs:
            return []
        required = list(dict.fromkeys(schema.get("required", [])))
        why = None
        if conv.any_order:
            why = "a required kind of member with any_order"
        elif keys.names_dfa() is None:
            why = "propertyNames outside the string keywords, negated"
        out: list[list] = []
        for requirement in needs if why is None else ():
            alts = []
            for keys_schema, value in requirement:
                try:
                    lang = _key_language(conv, keys_schema, ptr)
                except (StringConstraintError, DfaLimitError) as exc:
                    why = str(exc)
                    break
                if lang is None:
                    why = "a key language outside the string keywords"
                    break
                if not lang.is_empty() and value is not False:
                    alts.append((lang, value))
            if why is not None:
                break
            if any(_free(v) and any(lang.accepts(n) for n in required) for lang, v in alts):
                continue  # a required property is such a member
            out.append(alts)
        if why is None and len(out) > _MAX_MARKS:
            why = f"more than {_MAX_MARKS} required kinds of member"
        if why is not None:
            conv.unsupported("not", ptr, why)
            return []  # widened: without the requirements
        return out

    def _variants(self, key, sub, vptr: str, name: str, reqs, depth: int) -> list:
        """A property's member as ``(requirements met, expr)``: the plain member (meeting
        the requirements with a free value for ``name``) and, per set of the others it may
        meet, the member whose value also satisfies them."""
        conv = self.conv
        colon = conv.layout.colon()
        base, others = 0, []
        for j, alts in enumerate(reqs):
            values = [v for lang, v in alts if lang.accepts(name)]
            if any(_free(v) for v in values):
                base |= 1 << j
            elif values:
                others.append((j, values[0] if len(values) == 1 else {"anyOf": values}))
        out = []
        val = conv.value(sub, vptr, depth + 1)
        if val is not None:
            out.append((base, seq(key, colon, val)))
        for r in range(1, len(others) + 1):
            for chosen in itertools.combinations(others, r):
                both = sub
                bits = base
                for j, value in chosen:
                    both = _both(both, value)
                    bits |= 1 << j
                val = conv.value(both, vptr, depth + 1)
                if val is not None:
                    out.append((bits, seq(key, colon, val)))
        return out

    def _marks(self, keys, ptr, depth, declared, reqs) -> _Marks:
        """The further members that meet some of the requirements ``reqs``, as one
        :class:`_Marks`: per set of requirements, the members meeting them (one
        alternative of each, chosen per member)."""
        conv = self.conv
        atoms = keys.atoms(declared) or []
        names_schema = keys.names_schema
        free_names = conv.excludes and (names_schema is None or free_string(names_schema))
        classes: dict[int, Expr] = {}
        for bits in range(1, 1 << len(reqs)):
            chosen = [reqs[i] for i in range(len(reqs)) if bits >> i & 1]
            parts = []
            for atom_lang, sub, vptr, patterned in atoms:
                combos = [(atom_lang, sub)]
                for alts in chosen:
                    combos = [
                        (both, _both(value, v))
                        for lang, value in combos
                        for key_lang, v in alts
                        if not (both := lang.intersect(key_lang)).is_empty()
                    ]
                    if len(combos) > _MAX_MARK_STATES:
                        conv.unsupported("not", ptr, "too many kinds of further member")
                        combos = [(atom_lang, sub)]  # widened: any member meets it
                        break
                for lang, value in combos:
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
        return _Marks(conv, classes, (1 << len(reqs)) - 1)

    def _any_order(self, keys, schema, ptr, depth, slots, named, lo, hi) -> Expr | None:
        """xgrammar's ``any_order``: members in any order, each a declared property, a
        required undeclared key or a further key; presence and repetition are not
        checked, only the count, at least ``max(minProperties, len(required))``."""
        members = [variants[0][1] for variants, _ in slots if variants[0][0] == 0]
        members += [variants[0][1] for _, variants in named if variants[0][0] == 0]
        extra = self._extra(keys, ptr, depth, list(schema.get("properties", {})))
        if extra is not None:
            members.append(extra)
        lo = max(lo, len(set(schema.get("required", []))))
        if hi is not None and hi < lo:
            return None
        if not members:
            return self.conv.layout.empty("{}") if lo == 0 else None
        return self.homogeneous("{}", alt(*members), lo, hi, depth)

    def _implicitly_closed(self, schema: dict) -> bool:
        """Whether only ``strict_mode`` forbids further properties of ``schema``."""
        if "additionalProperties" in schema or "unevaluatedProperties" in schema:
            return False
        return self._additional_schema(schema) is False

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
        atoms = keys.atoms(declared, writable=True)  # as the key literals take them
        if atoms is None:  # propertyNames outside the DFA subset: only without patterns
            if keys.keyed:
                conv.unsupported(
                    "propertyNames",
                    f"{ptr}/propertyNames",
                    "together with patternProperties, only string keywords",
                )
                return self._widened_extra(keys, ptr, depth)
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
                    key = conv.excludes.language(lang, "key", writable=True)
                else:
                    key = dfa_string_expr(conv, lang, "key", writable=True)
                parts.append(seq(key, colon, val))
            except DfaLimitError as exc:
                conv.unsupported(
                    "patternProperties" if keys.keyed else "propertyNames",
                    ptr,
                    f"key language: {exc}",
                )
                parts.append(seq(conv.excludes.any_string(any_string()), colon, val))  # widened
        return alt(*parts)

    def _widened_extra(self, keys: KeySpace, ptr: str, depth: int) -> Expr | None:
        """After a downgraded refusal: a further member with any key and any of the value
        schemas a further member may take."""
        subs = [keys.additional] + [sub for _, _, sub, _ in keys.keyed]
        value = True if any(s is True for s in subs) else {"anyOf": subs}
        val = self.conv.value(value, f"{ptr}/additionalProperties", depth + 1)
        if val is None:
            return None
        key = self.conv.excludes.any_string(any_string())
        return seq(key, self.conv.layout.colon(), val)


def _free(schema) -> bool:
    return schema is True or schema == {}


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

    def reachable(self, done: int) -> bool:
        """Whether further members can meet every requirement not in ``done``."""
        met = done
        for bits in self.classes:
            met |= bits
        return met == self.full

    def run(self, lay, depth: int, plain, comma_first: bool, lo: int, hi, done: int = 0):
        """``lo``..``hi`` members, plain or meeting requirements, after which every
        requirement is met (``done`` already are), each after a comma but the first when
        not ``comma_first``: one rule per (requirements met, members written), counts
        past what the bounds tell apart merged. ``None`` when that cannot happen."""
        if not self.reachable(done) or (hi is not None and hi < 1 and done != self.full):
            return None
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
            return alt(EMPTY if lo == 0 else None, seq(first, more))  # widened

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

        return state(done, 0)


class _AnyOrder:
    """After the declared slots: further properties in any order, among which each of
    ``named`` (required properties without a declaration, each a list of variants
    ``(requirements met, expr)``) appears exactly once, and, with ``marks``, members
    that meet the requirements left.

    One rule per (members written yet?, named ones still missing, requirements met); used
    without ``minProperties``/``maxProperties``.
    """

    def __init__(
        self,
        conv: ConversionContext,
        lay,
        named: list[list[tuple[int, Expr]]],
        extra: Expr | None,
        depth: int,
        marks: _Marks | None = None,
        full: int = 0,
    ) -> None:
        self.conv, self.lay, self.named, self.extra, self.depth = conv, lay, named, extra, depth
        self.marks, self.full = marks, full
        self.rules: dict[tuple[bool, frozenset, int], RuleRef] = {}

    def __call__(self, started: bool, done: int = 0) -> Expr | None:
        return self.state(started, frozenset(range(len(self.named))), done)

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
            for bits, expr in self.named[j]:
                options.append(seq(sep, expr, self.state(True, left - {j}, done | bits)))
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
    """Declared slots in order, then repeated extras, with an exact count range and the
    required kinds of member met (``full``: every requirement's bit).

    A slot is ``(variants, required)``: each variant ``(requirements met, member expr)``.
    """

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
        full: int = 0,
    ) -> None:
        self.lay, self.slots, self.extra = lay, slots, extra
        self.any_order = any_order
        self.marks, self.full = marks, full  # requirements the members must meet
        self.lo, self.hi, self.depth = lo, hi, depth
        self.memo: dict[tuple[int, int, int], Expr | None] = {}
        self.bodies: dict[tuple, Expr] = {}
        # Counts above the cap behave alike.
        self.cap = hi if hi is not None else lo
        after = len(any_order.named) if any_order is not None else 0
        self.remaining_required = [
            sum(1 for _, r in slots[i:] if r) + after for i in range(len(slots) + 1)
        ]

    def build(self) -> Expr | None:
        body = self.tail(0, 0, 0)
        lay = self.lay
        empty = lay.empty("{}") if self._tail_can_be_empty() else None
        nonempty = seq(lit("{"), lay.open(self.depth), body) if body is not None else None
        return alt(empty, nonempty)

    def _tail_can_be_empty(self) -> bool:
        return self.remaining_required[0] == 0 and self.lo == 0 and self.full == 0

    def _key(self, i: int, c: int, done: int) -> tuple[int, int, int]:
        return (i, min(c, self.cap + 1) if self.hi is None else c, done)

    def _pruned(self, i: int, c: int) -> bool:
        return self.hi is not None and c + self.remaining_required[i] > self.hi

    def tail(self, i: int, c: int, done: int) -> Expr | None:
        """What follows after slot ``i`` with ``c`` members written (``c >= 1`` unless
        nothing was written) and the requirements ``done`` met; ``None`` when nothing can
        follow.

        Iterative (an explicit depth-first stack in the order a recursion would take), so
        thousands of properties cannot exhaust Python's stack.
        """
        key = self._key(i, c, done)
        if key in self.memo:
            return self.memo[key]
        stack = [(i, c, done, False)]
        while stack:
            i, c, done, expanded = stack.pop()
            key = self._key(i, c, done)
            if expanded:
                self.memo[key] = self._tail(i, c, done)
                continue
            if key in self.memo:
                continue
            self.memo[key] = None
            stack.append((i, c, done, True))
            if i == len(self.slots) or self._pruned(i, c):
                continue
            variants, required = self.slots[i]
            # children pushed in reverse so the take branch is built first
            if not required:
                stack.append((i + 1, c, done, False))
            for bits, _ in reversed(variants):
                stack.append((i + 1, c + 1, done | bits, False))
        return self.memo[self._key(i, c, done)]

    def _tail(self, i: int, c: int, done: int) -> Expr | None:
        """One step of :meth:`tail`; the tails after slot ``i`` are already memoised."""
        if self._pruned(i, c):
            return None
        if i == len(self.slots):
            return self._extras(c, done)
        variants, required = self.slots[i]
        takes = []
        for bits, slot in variants:
            after = self._key(i + 1, c + 1, done | bits)
            nxt = self.memo[after]
            if nxt is None:
                continue
            # slot i and what follows it, one node whatever came before, so the
            # first-member branch and the later ones share it
            body = self.bodies.get((i, bits, after))
            if body is None:
                body = self.bodies[(i, bits, after)] = seq(slot, nxt)
            if c == 0:
                takes.append(body)
            elif required:  # flat: a chain of required slots must not nest
                takes.append(seq(self.lay.comma(self.depth), body))
            else:
                takes.append(Seq((self.lay.comma(self.depth), body)))
        take = None if not takes else takes[0] if len(takes) == 1 else Choice(tuple(takes))
        skip = None if required else self.memo[self._key(i + 1, c, done)]
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

    def _extras(self, c: int, done: int) -> Expr | None:
        if self.any_order is not None:
            return self.any_order(c > 0, done)
        lay = self.lay
        close = lay.close(self.depth, "}")
        need = max(self.lo - c, 0)
        room = None if self.hi is None else self.hi - c
        if done != self.full:
            if self.marks is None:
                return None
            run = self.marks.run(lay, self.depth, self.extra, c > 0, need, room, done)
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


def _key_language(conv: ConversionContext, keys_schema, ptr: str) -> Dfa | None:
    """The keys ``keys_schema`` accepts (:func:`string_dfa`), built once per conversion
    for each text of a key schema without ``$ref`` or ``format`` (whose reading depends on
    where it is, or warns there). The negated branches of a ``oneOf`` of objects require
    the same few kinds of member over and over (vtesttree-schema.json: 266 key languages,
    10 distinct, each a product or complement of automata)."""
    try:
        text = json.dumps(keys_schema)
    except (TypeError, ValueError):  # not plain JSON: built each time
        return string_dfa(keys_schema, conv, ptr)
    if '"$ref"' in text or '"format"' in text:
        return string_dfa(keys_schema, conv, ptr)
    memo = conv.key_languages
    if text not in memo:
        memo[text] = string_dfa(keys_schema, conv, ptr)  # errors are raised, never kept
    return memo[text]


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
        contained = "contains" in schema or CONTAINS_ALL in schema
        if contained and items is not None and items is not True and items != {}:
            # Items that match contains count as evaluated; not modelled.
            conv.unsupported(
                "unevaluatedItems", f"{ptr}/unevaluatedItems", "together with contains"
            )
            items = True  # widened
    if items is None:
        items = not (prefix and conv.strict and not schema.get(OPEN))
    lo = conv.count(schema, "minItems", ptr, 0)
    hi = conv.count(schema, "maxItems", ptr)
    if hi is not None and hi < lo:
        return None  # e.g. allOf parts with minItems 3 and maxItems 1
    if not prefix:
        hi = 0 if items is False else hi
    unique = schema.get("uniqueItems") is True and (hi is None or hi > 1)
    arr = ArrayItems(conv, ptr, depth, prefix, items, lo, hi)
    if CONTAINS_ALL in schema:
        if unique:
            conv.unsupported("uniqueItems", f"{ptr}/uniqueItems", "together with contains")
        out = contains_all_expr(arr, schema[CONTAINS_ALL])
        if out is not UNCONSTRAINED:
            return out
    elif "contains" in schema:
        if unique:
            conv.unsupported("uniqueItems", f"{ptr}/uniqueItems", "together with contains")
        out = contains_expr(arr, schema)
        if out is not UNCONSTRAINED:
            return out
    elif unique:
        out = unique_expr(arr)
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
