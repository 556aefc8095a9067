"""Long bounded repetitions as a logarithmic number of helper rules.

Each rule becomes its own byte DFA, and a bounded repetition ``x{lo,hi}`` is unrolled into
``hi`` copies of ``x``'s states: ``maxLength: 65535`` would build hundreds of thousands of
states. Here a repetition longer than :data:`BLOCK` is rewritten, before the automata are
built, over blocks of :data:`BLOCK` copies (one rule, unrolled as before, so that most
tokens inside a string are still decided within one rule):

- ``exactly(m)`` is ``m // BLOCK`` blocks, written with rules that double (``D_j`` is
  ``2**j`` blocks: ``D_j = D_{j-1} D_{j-1}``), then ``m % BLOCK`` inline copies;
- ``upto(n)`` (``0..n`` copies) is either fewer than ``q = n // BLOCK`` blocks and then
  ``0..BLOCK-1`` copies, or ``q`` blocks and then ``0..n % BLOCK`` copies; "fewer than
  ``q`` blocks" splits by the highest power of two, so every choice is decided by the
  length alone and the grammar stays unambiguous.

Nested repetitions whose counts form one interval are merged first
(``ir.merge_nested_repeat``: ``((a{1,30}){1,30}){1,30}`` is ``a{1,27000}``), and a
repetition that would still unroll its item into more than ``ir.UNROLL_LIMIT`` states
repeats a call of the item, made a rule (``item__N``), instead of its states.

The language is unchanged; only rules are added (named after the rule they came from).
"""

from __future__ import annotations

from dataclasses import replace

from treegram.ir import (
    UNROLL_LIMIT,
    Bytes,
    Choice,
    Expr,
    GrammarIR,
    Repeat,
    Rule,
    RuleRef,
    Seq,
    ir_facts,
    merge_nested_repeat,
)

__all__ = ["BLOCK", "split_long_repeats", "repeats_as_rules"]

BLOCK = 64
"""Copies kept inline; longer repetitions are built from blocks of this many."""

# The states a block of BLOCK copies may unroll into before its item is called as a rule.
_BLOCK_UNROLL_LIMIT = 4 * UNROLL_LIMIT

_EMPTY = Seq(())


def split_long_repeats(ir: GrammarIR) -> GrammarIR:
    """``ir`` with every repetition longer than :data:`BLOCK` built from helper rules."""
    if ir_facts(ir).longest_repeat <= BLOCK:  # known from validation: nothing to rewrite
        return ir
    out: list[Rule] = []
    extra: list[Rule] = []
    splitter = _Splitter({r.name for r in ir.rules}, extra)
    for rule in ir.rules:
        # a lazy rule's body calls no rule: its repetitions stay as they are
        body = rule.body if rule.lazy else splitter.rewrite(rule.body)
        out.append(rule if body is rule.body else replace(rule, body=body))
    if not extra and all(a is b for a, b in zip(out, ir.rules, strict=True)):
        return ir
    return GrammarIR(tuple(out + extra), ir.root)


class _Splitter:
    """Rewrites repetitions, adding helper rules (shared by equal items) to ``extra``."""

    def __init__(self, names: set[str], extra: list[Rule]) -> None:
        self.names, self.extra = names, extra
        self.families: dict[Expr, _Family] = {}
        self.memo: dict[int, Expr] = {}
        self.sizes: dict[int, int] = {}
        self.item_rules: dict[Expr, RuleRef] = {}

    def size(self, expr: Expr) -> int:
        """NFA states ``expr`` unrolls into, roughly (a character class counts 4: its
        UTF-8 byte ranges); shared nodes are counted once per use, as they are built."""
        got = self.sizes.get(id(expr))
        if got is None:
            if isinstance(expr, Bytes):
                got = len(expr.data) + 1
            elif isinstance(expr, (Seq, Choice)):
                got = 1 + sum(self.size(e) for e in expr.items)
            elif isinstance(expr, Repeat):
                bound = expr.min if expr.max is None else expr.max
                got = 1 + self.size(expr.item) * max(bound, 1)
            elif isinstance(expr, RuleRef):
                got = 1
            else:
                got = 4
            self.sizes[id(expr)] = got
        return got

    def _callable(self, item: Expr, copies: int, limit: int = UNROLL_LIMIT) -> Expr:
        """``item``, or a call of it made a rule when ``copies`` of its states would pass
        ``limit``."""
        if copies < 2 or self.size(item) * copies <= limit or isinstance(item, RuleRef):
            return item
        got = self.item_rules.get(item)
        if got is None:
            got = self.item_rules[item] = self.new_rule(f"item{len(self.item_rules)}", item)
        return got

    def rewrite(self, expr: Expr) -> Expr:
        """``expr`` with its long repetitions rewritten; a node shared in the DAG is
        rewritten once (the memo is keyed by identity; the IR keeps every key alive). A
        leaf is itself. This walks every node of a grammar that has one long repetition
        (tens of thousands for a large JSON Schema), so the common case, nothing to
        rewrite, is read with as few calls as possible."""
        got = self.memo.get(id(expr))
        if got is None:
            t = type(expr)
            if t is Seq or t is Choice:
                got = self._rewrite_items(expr, t)
            elif t is Repeat:
                got = self._rewrite(expr)
            else:
                return expr
            self.memo[id(expr)] = got
        return got

    def _rewrite_items(self, expr: Seq | Choice, t: type) -> Expr:
        """A sequence or choice with its items rewritten (itself when none changes)."""
        memo_get = self.memo.get
        items = expr.items
        new: list[Expr] | None = None
        for i, e in enumerate(items):
            got = memo_get(id(e))
            if got is None:
                te = type(e)
                got = self.rewrite(e) if te is Seq or te is Choice or te is Repeat else e
            if new is not None:
                new.append(got)
            elif got is not e:
                new = [*items[:i], got]
        return expr if new is None else t(tuple(new))

    def _rewrite(self, expr: Repeat) -> Expr:
        # (x?){lo,hi} is x{0,hi} (any copy may be the empty one): kept nested, every block
        # position could hold the empty copies, and the chart would carry an item per
        # position (a regex like `(a?){2,300}b` took seconds a byte); ((a{1,30}){1,30}){1,30}
        # is a{1,27000}, built in blocks below instead of 27,000 unrolled states
        merged = merge_nested_repeat(expr)
        item = self.rewrite(merged.item)
        lo, hi = merged.min, merged.max
        longest = lo if hi is None else hi
        if longest <= BLOCK:
            item = self._callable(item, longest)
            if merged is expr and item is expr.item:
                return expr
            return Repeat(item, lo, hi)
        # a block is BLOCK copies inline: items of a few dozen states (a JSON string's
        # character with its escapes, ~70) stay inline, so a string state still reads its
        # characters itself (its string slice); only far larger items are called
        item = self._callable(item, BLOCK, _BLOCK_UNROLL_LIMIT)
        family = self.families.get(item)
        if family is None:
            family = self.families[item] = _Family(self, item, len(self.families))
        head = family.exactly(lo) if lo else None
        if hi is None:
            tail: Expr = Repeat(item, 0, None)
        else:
            tail = family.upto(hi - lo)
        return Seq((head, tail)) if head is not None else tail

    def new_rule(self, tag: str, body: Expr) -> RuleRef:
        base = f"repeat__{tag}"
        name, k = base, 1
        while name in self.names:
            name, k = f"{base}_{k}", k + 1
        self.names.add(name)
        self.extra.append(Rule(name, body))
        return RuleRef(name)


class _Family:
    """Helper rules for repetitions of one item inside one rule."""

    def __init__(self, splitter: _Splitter, item: Expr, number: int) -> None:
        self.splitter, self.item, self.number = splitter, item, number
        self.doubles: list[RuleRef] = []  # doubles[j]: exactly 2**j blocks
        self.below: dict[int, Expr] = {}  # below[q]: 0..q-1 blocks, then 0..BLOCK-1 copies
        self.ranges: dict[tuple[str, int], RuleRef] = {}

    def _rule(self, tag: str, body: Expr) -> RuleRef:
        return self.splitter.new_rule(f"{self.number}_{tag}", body)

    def _double(self, j: int) -> RuleRef:
        while len(self.doubles) <= j:
            if not self.doubles:
                body: Expr = Repeat(self.item, BLOCK, BLOCK)
            else:
                prev = self.doubles[-1]
                body = Seq((prev, prev))
            self.doubles.append(self._rule(f"x{BLOCK << len(self.doubles)}", body))
        return self.doubles[j]

    def _blocks(self, q: int) -> Expr:
        """Exactly ``q`` blocks."""
        parts = [self._double(j) for j in reversed(range(q.bit_length())) if q >> j & 1]
        return Seq(tuple(parts)) if len(parts) != 1 else parts[0]

    def exactly(self, m: int) -> Expr:
        """Exactly ``m`` copies (one shared rule per count)."""
        got = self.ranges.get(("exactly", m))
        if got is None:
            q, r = divmod(m, BLOCK)
            tail = Repeat(self.item, r, r)
            body = Seq((self._blocks(q), tail)) if q else tail
            got = self.ranges[("exactly", m)] = self._rule(f"exactly{m}", body)
        return got

    def upto(self, n: int) -> Expr:
        """``0..n`` copies (one shared rule per count)."""
        got = self.ranges.get(("upto", n))
        if got is None:
            q, r = divmod(n, BLOCK)
            last = Seq((self._blocks(q), Repeat(self.item, 0, r))) if q else Repeat(self.item, 0, r)
            body = Choice((self._below(q), last)) if q else last
            got = self.ranges[("upto", n)] = self._rule(f"upto{n}", body)
        return got

    def _below(self, q: int) -> Expr:
        """Fewer than ``q`` blocks, then ``0..BLOCK-1`` copies (``q >= 1``)."""
        got = self.below.get(q)
        if got is not None:
            return got
        partial = Repeat(self.item, 0, BLOCK - 1)
        if q == 1:
            out: Expr = partial
        else:
            # 2**j <= q - 1 < 2**(j+1): fewer than 2**j blocks, or 2**j of them and then
            # fewer than q - 2**j more
            j = (q - 1).bit_length() - 1
            low = self._below(1 << j)
            high = Seq((self._double(j), self._below(q - (1 << j))))
            out = self._rule(f"below{q}blocks", Choice((low, high)))
        self.below[q] = out
        return out


def repeats_as_rules(ir: GrammarIR, name: str) -> GrammarIR | None:
    """``ir`` with every counted repetition of rule ``name`` (outermost ones, bounded, more
    than one copy) made a rule of its own, called where it stood; None when the rule has
    none. The rule's automaton then no longer tracks every position of those repetitions
    at once (``[ab]*a[ab]{20}`` needs 2**21 states that way): the Earley chart follows them,
    an item per live position."""
    rule = next((r for r in ir.rules if r.name == name), None)
    if rule is None or rule.lazy:
        return None
    names = {r.name for r in ir.rules}
    extra: list[Rule] = []

    def hoist(expr: Expr) -> Expr:
        if isinstance(expr, (Seq, Choice)):
            items = tuple(hoist(e) for e in expr.items)
            same = all(a is b for a, b in zip(items, expr.items, strict=True))
            return expr if same else type(expr)(items)
        if isinstance(expr, Repeat) and expr.max is not None and expr.max >= 2:
            helper, k = f"{name}__counted", len(extra)
            while f"{helper}{k}" in names:
                k += 1
            names.add(f"{helper}{k}")
            extra.append(Rule(f"{helper}{k}", expr))
            return RuleRef(f"{helper}{k}")
        return expr

    body = hoist(rule.body)
    if not extra:
        return None
    rules = tuple(replace(r, body=body) if r is rule else r for r in ir.rules)
    return GrammarIR(rules + tuple(extra), ir.root)
