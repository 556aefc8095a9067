"""Counting array keywords of the JSON Schema frontend: ``contains`` with ``minContains`` /
``maxContains``, and ``uniqueItems``.

``contains``: each item is a *match* (its position's schema and ``contains``) or a
*non-match* (its schema and the negation of ``contains``); the grammar tracks the number
of items and of matches written, so both the length bounds and the match bounds are
exact. Without ``maxContains`` a non-match is written as any item (a match may then be
read either way, which does not change the language) and no negation is needed.

``uniqueItems``: exact when the array length is bounded and every position either has a
small finite set of values (``const``, ``enum``, ``boolean``, ``null``) or a schema that
is provably disjoint from every other position's; the grammar then tracks the set of
values used so far. Otherwise, when the items (no ``prefixItems``) are strings and every
text an item may begin with has infinitely many completions, each item is a unique rule
(:attr:`~treegram.ir.Rule.unique`): the matcher compares a string item, decoded, with the
earlier items of its array when it ends, so a repeat is never accepted, and an item begun
can always end as a new string, so no mask leads into a dead end.
"""

from __future__ import annotations

from fractions import Fraction

from treegram.frontends.json_schema._context import ConversionContext
from treegram.frontends.json_schema._keywords import OPEN, is_annotation
from treegram.frontends.json_schema._lex import EMPTY, alt, lit, seq
from treegram.frontends.json_schema._logic import negate
from treegram.frontends.json_schema._merge import merge_all_of
from treegram.frontends.json_schema._string_dfa import StringConstraintError, string_dfa
from treegram.ir import CharClass, Dfa, Expr, Repeat, RuleRef

__all__ = ["UNCONSTRAINED", "ArrayItems", "contains_all_expr", "contains_expr", "unique_expr"]

# Returned after a refusal was downgraded to a warning: build the array without the keyword.
UNCONSTRAINED = object()

# Bounds on the states (counts, or used value sets) a counting grammar may track.
MAX_STATES = 2048
MAX_POSITIONS = 64
MAX_CONTAINS_ALL = 3  # contains schemas tracked together (2**k satisfied sets)
MAX_UNIQUE_EDGES = 8192  # (used set, next value) pairs; about 1.5 s of compile time


class ArrayItems:
    """The items of an array schema at ``ptr``, converted at ``depth``: per-position schemas
    (``prefix[i]``, then ``items``) and ``lo``..``hi`` of them."""

    def __init__(
        self,
        conv: ConversionContext,
        ptr: str,
        depth: int,
        prefix: list,
        items,
        lo: int,
        hi: int | None,
    ) -> None:
        self.conv, self.ptr, self.depth = conv, ptr, depth
        self.prefix, self.items = prefix, items
        self.lo, self.hi = lo, hi
        self.n = len(prefix)
        self.memo: dict = {}

    def schema(self, i: int):
        return self.prefix[i] if i < self.n else self.items

    def where(self, i: int) -> str:
        return f"{self.ptr}/prefixItems/{i}" if i < self.n else f"{self.ptr}/items"

    def value(self, i: int, extra=None, tag: str = "") -> Expr | None:
        """The values at position ``i``, optionally also satisfying ``extra``."""
        i = min(i, self.n)
        key = (i, tag)
        if key not in self.memo:
            s = self.schema(i)
            if extra is not None:
                s = extra if s is True else {"allOf": [s, extra]}
            self.memo[key] = (
                self.conv.value(s, self.where(i), self.depth + 1) if s is not False else None
            )
        return self.memo[key]


def contains_all_expr(pos: ArrayItems, needs: list) -> Expr | None:
    """Arrays of ``lo``..``hi`` items in which every schema of ``needs`` is matched by some
    item (``contains`` of several ``allOf`` parts): one rule per (set of schemas matched
    so far, item count), counts past what the bounds distinguish merged."""
    conv, ptr, depth, items, lo, hi = pos.conv, pos.ptr, pos.depth, pos.items, pos.lo, pos.hi
    cptr = f"{ptr}/contains"
    k = len(needs)
    full = (1 << k) - 1
    top = hi if hi is not None else max(lo, 1)  # counts above top behave alike
    if pos.prefix or k > MAX_CONTAINS_ALL or (full + 1) * (top + 1) > MAX_STATES:
        conv.unsupported(
            "contains",
            cptr,
            "several contains schemas only without "
            f"prefixItems, at most {MAX_CONTAINS_ALL} of them and at most "
            f"{MAX_STATES} (matched set, item count) states",
        )
        return UNCONSTRAINED
    if hi is not None and hi < max(lo, 1):
        return None
    lay = conv.layout
    comma, close = lay.comma(depth), lay.close(depth, "]")
    any_item = conv.value(items, f"{ptr}/items", depth + 1) if items is not False else None
    classes: dict[int, Expr] = {}  # set of needs (bits) -> items that match all of them
    for bits in range(1, full + 1):
        parts = [needs[i] for i in range(k) if bits >> i & 1]
        expr = conv.value({"allOf": ([] if items is True else [items]) + parts}, cptr, depth + 1)
        if expr is not None:
            classes[bits] = expr
    rules: dict[tuple[int, int], RuleRef] = {}

    def state(done: int, t: int) -> RuleRef:
        """After ``t >= 1`` items, with the needs in ``done`` met."""
        t = min(t, top)
        if (done, t) not in rules:
            name = conv.new_rule("contains_all")
            rules[(done, t)] = RuleRef(name)
            options = [close] if done == full and t >= lo else []
            if hi is None or t < hi:
                if any_item is not None:
                    options.append(seq(comma, any_item, state(done, t + 1)))
                options += [
                    seq(comma, expr, state(done | bits, t + 1))
                    for bits, expr in classes.items()
                    if done | bits != done
                ]
            body = alt(*options)
            conv.rules[name] = body if body is not None else _NEVER
        return rules[(done, t)]

    firsts = [seq(expr, state(bits, 1)) for bits, expr in classes.items()]
    if any_item is not None:
        firsts.insert(0, seq(any_item, state(0, 1)))
    body = alt(*firsts)
    return seq(lit("["), lay.open(depth), body) if body is not None else None


_NEVER = CharClass(((0, 0x10FFFF),), negated=True)


def contains_expr(pos: ArrayItems, schema: dict) -> Expr | None:
    """Arrays of ``lo``..``hi`` items whose count of ``contains`` matches is within
    ``minContains`` (default 1) .. ``maxContains``."""
    conv, ptr, depth, lo, hi = pos.conv, pos.ptr, pos.depth, pos.lo, pos.hi
    cmin = conv.count(schema, "minContains", ptr, 1)
    cmax = conv.count(schema, "maxContains", ptr)
    if hi is not None and hi < lo:
        return None
    if cmax is not None and cmax < cmin:
        return None
    cptr = f"{ptr}/contains"
    contains = schema["contains"]
    tmax = hi if hi is not None else max(lo, pos.n, 1)  # counts past tmax behave alike
    mmax = cmax if cmax is not None else cmin
    if (tmax + 1) * (mmax + 1) > MAX_STATES:
        conv.unsupported(
            "contains", cptr, f"more than {MAX_STATES} (item count, match count) states"
        )
        return UNCONSTRAINED
    if cmax is not None:
        not_contains = negate(conv, contains, cptr)
    lay = conv.layout
    comma, close = lay.comma(depth), lay.close(depth, "]")

    def match(i: int) -> Expr | None:
        return pos.value(i, contains, "match")

    def other(i: int) -> Expr | None:
        if cmax is None:
            return pos.value(i)
        return pos.value(i, not_contains, "non")

    free = _free_tails(pos, lo, hi, comma, close, tmax)  # enough matches, no maxContains
    body: dict[tuple[int, int], Expr | None] = {}

    def get(t: int, m: int) -> Expr | None:
        """After ``t >= 1`` items with ``m`` matches."""
        if (hi is not None and t > hi) or (cmax is not None and m > cmax):
            return None
        if hi is not None and m + (hi - t) < cmin:
            return None
        if cmax is None and m >= cmin:
            return free[min(t, tmax)]
        return body[(min(t, tmax), m)]

    for t in range(tmax, 0, -1):
        top = mmax if t == tmax else min(t, mmax)
        for m in range(top, -1, -1):
            if cmax is None and m >= cmin:
                continue
            done = close if t >= lo and m >= cmin else None
            step_m = seq(comma, match(t), get(t + 1, m + 1))
            if hi is None and t == tmax:
                # Non-matches loop here; a match moves on to m + 1.
                loop = Repeat(seq(comma, other(t)), 0, None) if other(t) is not None else EMPTY
                body[(t, m)] = seq(loop, alt(done, step_m))
            else:
                body[(t, m)] = alt(done, step_m, seq(comma, other(t), get(t + 1, m)))
    first = alt(seq(match(0), get(1, 1)), seq(other(0), get(1, 0)))
    empty = lay.empty("[]") if lo == 0 and cmin == 0 else None
    return alt(empty, seq(lit("["), lay.open(depth), first) if first is not None else None)


def _free_tails(
    pos: ArrayItems, lo: int, hi: int | None, comma, close, tmax: int
) -> dict[int, Expr | None]:
    """What may follow after ``t`` items once the match count no longer matters."""
    out: dict[int, Expr | None] = {}
    for t in range(tmax, 0, -1):
        if t >= pos.n:
            room = None if hi is None else hi - t
            item = pos.value(t)
            if room is not None and room < 0:
                out[t] = None
            elif item is None or room == 0:
                out[t] = close if t >= lo else None
            else:
                out[t] = seq(Repeat(seq(comma, item), max(lo - t, 0), room), close)
        else:
            nxt = out.get(t + 1) if hi is None or t + 1 <= hi else None
            out[t] = alt(close if t >= lo else None, seq(comma, pos.value(t), nxt))
    return out


# -- uniqueItems ----------------------------------------------------------------------------


class _RefusedError(Exception):
    pass


def unique_expr(pos: ArrayItems) -> Expr | None:
    """Arrays of ``lo``..``hi`` pairwise distinct items (JSON Schema equality), or
    :data:`UNCONSTRAINED` when the refusal was downgraded to a warning."""
    try:
        return _unique(pos)
    except _RefusedError as exc:
        pos.conv.unsupported("uniqueItems", f"{pos.ptr}/uniqueItems", str(exc))
        return UNCONSTRAINED


def _unique(pos: ArrayItems) -> Expr | None:
    conv, ptr, depth, prefix, items = pos.conv, pos.ptr, pos.depth, pos.prefix, pos.items
    lo, hi = pos.lo, pos.hi
    tail = _finite_values(conv, items, f"{ptr}/items")
    longest = pos.n if items is False else (pos.n + len(tail) if tail is not None else None)
    if hi is not None:
        longest = hi if longest is None else min(longest, hi)
    if tail is None and not pos.n and _open_strings(conv, items, f"{ptr}/items"):
        return _unique_strings(pos)
    if longest is None:
        raise _RefusedError(
            "the items are not a small finite set (const, enum, boolean, null) "
            "and the length is unbounded"
        )
    if longest > MAX_POSITIONS:
        raise _RefusedError(f"more than {MAX_POSITIONS} positions")
    domains = []  # per position: list of value groups, or None for a free position
    for i in range(longest):
        vals = tail if i >= pos.n else _finite_values(conv, prefix[i], pos.where(i))
        domains.append(None if vals is None else _groups(vals))
    for i, dom in enumerate(domains):
        if dom is None and not _apart(conv, pos, i, longest):
            raise _RefusedError(
                f"item {i} is neither a small finite set (const, enum, boolean, "
                "null) nor provably different from every other item"
            )
    lay = conv.layout
    comma, close = lay.comma(depth), lay.close(depth, "]")
    literal = {}
    for dom in domains:
        for key, values in (dom or {}).items():
            if key not in literal:
                literal[key] = alt(*(conv.literal(v, depth + 1) for v in values))
    memo: dict = {}
    edges = [0]

    def options(t: int, used: frozenset) -> Expr | None:
        """Item ``t`` and what follows it."""
        if t >= longest:
            return None
        if domains[t] is None:
            return seq(pos.value(t), after(t + 1, used))
        fresh = [k for k in domains[t] if k not in used]
        edges[0] += len(fresh)
        if edges[0] > MAX_UNIQUE_EDGES:
            raise _RefusedError(
                f"more than {MAX_UNIQUE_EDGES} (values used, next value) pairs to track"
            )
        return alt(*(seq(literal[k], after(t + 1, used | {k})) for k in fresh))

    def after(t: int, used: frozenset) -> Expr | None:
        key = (t, used)
        if key not in memo:
            if len(memo) >= MAX_STATES:
                raise _RefusedError(f"more than {MAX_STATES} sets of used values to track")
            nxt = options(t, used)
            memo[key] = alt(
                close if t >= lo else None, seq(comma, nxt) if nxt is not None else None
            )
        return memo[key]

    first = options(0, frozenset())
    empty = lay.empty("[]") if lo == 0 else None
    return alt(empty, seq(lit("["), lay.open(depth), first) if first is not None else None)


def _open_strings(conv: ConversionContext, schema, ptr: str) -> bool:
    """Whether ``schema`` accepts strings only, and from every text an item may begin with
    infinitely many strings (the matcher's unique rules need both: an item begun can
    always end as a string no earlier item holds)."""
    if not isinstance(schema, dict):
        return False
    merged = merge_all_of(conv, schema, ptr)
    if not isinstance(merged, dict) or merged.get("type") not in ("string", ["string"]):
        return False
    try:
        dfa = string_dfa(merged, conv, ptr)
    except StringConstraintError:
        return False  # the item's own conversion says what it refuses
    return dfa is not None and _unbounded_everywhere(dfa)


def _unbounded_everywhere(dfa: Dfa) -> bool:
    """Whether every live state of ``dfa`` accepts infinitely many continuations: none can
    only reach states that end in a finite number of steps (peeled from the dead ends
    backwards; a state on or before a cycle is never peeled)."""
    dfa = dfa.trim()
    if dfa.is_empty():
        return False
    n = len(dfa)
    preds: list[list[int]] = [[] for _ in range(n)]
    out = [0] * n
    for s in range(n):
        targets = {t for _, _, t in dfa.trans[s]}
        out[s] = len(targets)
        for t in targets:
            preds[t].append(s)
    bounded = [s for s in range(n) if out[s] == 0]
    for s in bounded:  # grows while it is read
        for p in preds[s]:
            out[p] -= 1
            if out[p] == 0:
                bounded.append(p)
    return not bounded


def _unique_strings(pos: ArrayItems) -> Expr | None:
    """Arrays of ``lo``..``hi`` pairwise different strings: the item a unique rule, the
    array a rule of its own (the matcher compares the items one occurrence of it reads)."""
    conv = pos.conv
    item = pos.value(0)
    body = conv.objects.homogeneous("[]", item, pos.lo, pos.hi, pos.depth)
    if item is None or body is None:
        return body  # no item can be written: the array is empty or nothing
    name = conv.new_rule("unique_item")
    conv.rules[name] = item
    conv.unique_rules.add(name)
    array = conv.new_rule("unique_array")
    conv.rules[array] = conv.objects.homogeneous("[]", RuleRef(name), pos.lo, pos.hi, pos.depth)
    return RuleRef(array)


def _apart(conv: ConversionContext, pos: ArrayItems, i: int, longest: int) -> bool:
    """Whether no value at position ``i`` can equal a value at another position."""
    return all(conv.disjoint([pos.schema(i), pos.schema(j)]) for j in range(longest) if j != i)


def _finite_values(conv: ConversionContext, schema, ptr: str) -> list | None:
    """The values ``schema`` accepts when it is a small finite set, else ``None``."""

    if schema is False:
        return []
    if not isinstance(schema, dict):
        return None
    schema = merge_all_of(conv, schema, ptr)
    if not isinstance(schema, dict):
        return [] if schema is False else None
    if "const" in schema or "enum" in schema:
        return conv.kept_values(schema, ptr)
    if {k for k in schema if not is_annotation(k)} - {OPEN} != {"type"}:
        return None
    t = schema["type"]
    types = {t} if isinstance(t, str) else set(t)
    if not types <= {"boolean", "null"}:
        return None
    return ([True, False] if "boolean" in types else []) + ([None] if "null" in types else [])


def _groups(values: list) -> dict:
    """Values grouped by JSON Schema equality (``1`` equals ``1.0``; key order is ignored)."""
    out: dict = {}
    for v in values:
        out.setdefault(_key(v), []).append(v)
    return out


def _key(v):
    if isinstance(v, bool):
        return ("b", v)
    if v is None:
        return ("z",)
    if isinstance(v, (int, float)):
        return ("n", Fraction(v))
    if isinstance(v, str):
        return ("s", v)
    if isinstance(v, list):
        return ("a", tuple(_key(x) for x in v))
    return ("o", frozenset((k, _key(x)) for k, x in v.items()))
