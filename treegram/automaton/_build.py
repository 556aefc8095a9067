"""Grammar IR to one flat automaton for all rules.

Each rule body becomes a byte-level NFA (Thompson construction) whose edges read a byte
range or *call* another rule; subset construction turns it into a DFA over the same two
kinds of labels. All rule DFAs are numbered into one global state space and stored as
flat arrays (:class:`Automaton`), which the Earley kernels walk. Calls stay
non-deterministic on purpose: the Earley chart handles them, so recursion, ambiguity and
nullable rules need no special casing here. The one exception is right recursion, which
Earley recognises in quadratic time: calls in tail position that lead back to the calling
rule are rewritten into loops before subset construction (see :func:`_loop_tail_self_calls`
and :func:`_inline_tail_calls`), which keeps the language and makes the chart linear.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from itertools import chain

import numpy as np

from treegram.ir import (
    MAX_AUTOMATON_STATES,
    MAX_BUILD_SECONDS,
    MAX_EXPR_DEPTH,
    MAX_RULE_STATES,
    MAX_SUBSET_MEMBERS,
    SHALLOW_DEPTH,
    Bytes,
    CharClass,
    Choice,
    Expr,
    GrammarIR,
    Repeat,
    RuleRef,
    Seq,
    TokenSet,
    collector_paused,
    complement_ranges,
    cycles_of_two_or_more,
    expr_depth_error,
    expr_excerpt,
    ir_depth,
    normalize_ranges,
    run_sized,
)

from .._kernel_cache import kernel_seconds
from ..errors import GrammarError, UndefinedRuleError
from ..kernels import layout
from ._counted import inline_calls, one_character, state_chars
from ._follow import follow_sets
from ._merge import merge_equal_rules
from ._nfa import FlatIr, call_patterns, choice_sequences, node_keys, tail_calls
from ._repeats import repeats_as_rules, split_long_repeats
from ._rule_dfa import DFA_OF_BODY, DFA_OF_NFA, NFA_OF_BODY, pack_nfa, unpack_nfa
from ._rule_dfa import rule_dfa as rule_kernel
from ._subset import fill_transitions
from ._utf8 import utf8_sequences

__all__ = ["Automaton", "build_automaton", "LOOKAHEAD_SUFFIX"]

LOOKAHEAD_SUFFIX = "$lookahead"


@dataclass(frozen=True, eq=False)
class Automaton:
    """Flat arrays of the automaton of a whole grammar.

    States are global ids ``0 .. n_states-1``; each belongs to one rule.

    Attributes
    ----------
    rule_names : tuple of str
        Name per rule id (lookahead pseudo-rules end with ``$lookahead``).
    root_rule : int
        Rule id of the root.
    rule_start : int32 [n_rules]
        Start state of each rule.
    rule_nullable : uint8 [n_rules]
        1 if the rule derives the empty string.
    rule_lookahead : int32 [n_rules]
        Rule id of the rule's lookahead pseudo-rule, or -1.
    state_rule : int32 [n_states]
        Owning rule of each state.
    state_final : uint8 [n_states]
        1 if the rule may end in this state; 2 in a unique rule (``Rule.unique``).
    byte_class : int32 [256]
        Byte to byte-equivalence-class id.
    n_classes : int
        Number of byte classes.
    trans : int32 [n_states * n_classes]
        Byte transition ``trans[s * n_classes + byte_class[b]]`` or -1.
    ref_ptr : int32 [n_states + 1]
        CSR offsets of rule-call edges of each state.
    ref_rule, ref_target : int32 [n_ref_edges]
        Called rule and the state reached after the call returns.
    rule_follow : uint8 [n_rules, 256]
        1 where the byte may come right after the rule ends in some context (an LL(1)
        follow set); token classification uses it to decide tokens that run past a rule.
    token_rules : tuple of (int, TokenSet)
        The token-id rules (``Rule.tokens``) by rule id. Such a rule is one state with no
        edge: bytes never enter it, and the matcher completes it when it accepts a token
        of its set (see ``kernels._earley.scan_token``).
    token_bits : int32 array or None
        The token sets over a vocabulary (:meth:`with_vocabulary`), as the kernels read
        them: ``[n, n_words, rule ids..., n bitsets of n_words words]``; None until bound.
    state_chars : int32 [2 * n_states] or [0]
        Where some rule is counted (``Rule.max_string_chars``): per state, the most
        characters an item entering it may have read (-1: it cannot end within the bound;
        ``NOT_COUNTED`` outside counted rules, see ``automaton._counted``), then per state
        the least of those of the states ahead of it; empty otherwise.
    """

    rule_names: tuple[str, ...]
    root_rule: int
    rule_start: np.ndarray
    rule_nullable: np.ndarray
    rule_lookahead: np.ndarray
    state_rule: np.ndarray
    state_final: np.ndarray
    byte_class: np.ndarray
    n_classes: int
    trans: np.ndarray
    ref_ptr: np.ndarray
    ref_rule: np.ndarray
    ref_target: np.ndarray
    rule_follow: np.ndarray
    token_rules: tuple[tuple[int, TokenSet], ...] = ()
    token_bits: np.ndarray | None = None
    state_chars: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0, np.int32))

    def with_vocabulary(
        self, vocab_size: int, never: np.ndarray, lookup: Callable[[str], list[int]]
    ) -> Automaton:
        """This automaton with its token sets bound to a vocabulary of ``vocab_size`` ids,
        leaving out the ids in ``never`` (special tokens: they have no text); ``lookup``
        gives the ids of the tokens spelled by a token name (``TokenSet.names``). Returns
        ``self`` when there are no token sets.

        Raises
        ------
        GrammarError
            A token id of the grammar is not in ``[0, vocab_size)``, or no token of the
            vocabulary is spelled like one of its token names.
        """
        if not self.token_rules:
            return self
        n_words = (vocab_size + 31) // 32
        n = len(self.token_rules)
        bits = np.zeros(2 + n + n * n_words, dtype=np.int32)
        bits[0], bits[1] = n, n_words
        allowed = np.zeros(n_words * 32, dtype=bool)
        for k, (rid, ts) in enumerate(self.token_rules):
            bad = [t for t in ts.ids if not 0 <= t < vocab_size]
            if bad:
                raise GrammarError(
                    f"token id {bad[0]} of {ts.text} in the grammar is out of the "
                    f"vocabulary range [0, {vocab_size})"
                )
            ids = list(ts.ids)
            for name in ts.names:
                found = lookup(name)
                if not found:
                    raise GrammarError(
                        f"unknown special token {name}: no token of the vocabulary is "
                        f"spelled {name!r} ({ts.text} in the grammar)"
                    )
                ids.extend(found)
            allowed[:] = ts.exclude
            allowed[ids] = not ts.exclude
            allowed[vocab_size:] = False
            allowed[never] = False
            bits[2 + k] = rid
            words = np.packbits(allowed, bitorder="little").view(np.int32)
            bits[2 + n + k * n_words : 2 + n + (k + 1) * n_words] = words
        return dataclasses.replace(self, token_bits=bits)

    @property
    def n_states(self) -> int:
        """Number of states over all rules."""
        return int(self.state_rule.shape[0])

    @property
    def chars_floor(self) -> int:
        """The least of ``state_chars`` over the states that can end within their bound
        (``NOT_COUNTED`` without counted rules): no string a token begins can pass its
        bound within a token of at most that many bytes."""
        live = self.state_chars[: self.n_states]
        live = live[live >= 0]
        return int(live.min()) if live.shape[0] else layout.NOT_COUNTED

    @property
    def n_rules(self) -> int:
        """Number of rules, lookahead pseudo-rules included."""
        return len(self.rule_names)

    @property
    def packed(self) -> np.ndarray:
        """All kernel arrays in one int32 buffer (see ``kernels._earley.unpack``).

        Entry-point kernels take this single array instead of ten: numba's per-argument
        dispatch cost is a large part of a microsecond-scale call.
        """
        buf = self.__dict__.get("_packed")
        if buf is None:
            parts = [
                self.rule_start,
                self.rule_nullable,
                self.state_rule,
                self.state_final,
                self.byte_class,
                self.trans,
                self.ref_ptr,
                self.ref_rule,
                self.ref_target,
                self._token_data(),
                self.state_chars,
            ]
            buf = np.empty(layout.PACK_HEADER + sum(p.shape[0] for p in parts), dtype=np.int32)
            buf[: layout.PACK_HEADER] = 0
            buf[layout.PACK_N_STATES] = self.n_states
            buf[layout.PACK_N_RULES] = self.n_rules
            buf[layout.PACK_N_CLASSES] = self.n_classes
            buf[layout.PACK_ROOT_RULE] = self.root_rule
            buf[layout.PACK_UNIQUE] = int((self.state_final == 2).any())
            buf[layout.PACK_CHARS_FLOOR] = self.chars_floor
            offset = layout.PACK_HEADER
            for k, part in enumerate(parts):
                buf[layout.PACK_OFFSETS + k] = offset
                buf[offset : offset + part.shape[0]] = part  # one copy, cast in place
                offset += part.shape[0]
            buf[layout.PACK_OFFSETS + len(parts)] = offset
            object.__setattr__(self, "_packed", buf)
        return buf

    def _token_data(self) -> np.ndarray:
        if self.token_bits is not None:
            return self.token_bits
        if self.token_rules:
            raise GrammarError(
                "the grammar has token-id elements: bind it to a vocabulary first "
                "(Automaton.with_vocabulary; GrammarCompiler does)"
            )
        return np.zeros(2, dtype=np.int32)

    def arrays(self) -> tuple:
        """The arrays in the order the kernels take them."""
        return (
            self.rule_start,
            self.rule_nullable,
            self.state_rule,
            self.state_final,
            self.byte_class,
            self.n_classes,
            self.trans,
            self.ref_ptr,
            self.ref_rule,
            self.ref_target,
        )


class _Nfa:
    """A mutable Thompson NFA: epsilon, byte-range and rule-call edges per state."""

    def __init__(self) -> None:
        self.eps: list[list[int]] = []
        self.byte_edges: list[list[tuple[int, int, int]]] = []
        self.ref_edges: list[list[tuple[int, int]]] = []

    def new_state(self) -> int:
        eps = self.eps
        eps.append([])
        self.byte_edges.append([])
        self.ref_edges.append([])
        return len(eps) - 1


class _NfaBuilder:
    """Builds the NFA of one rule body, resolving rule names to ids."""

    def __init__(self, rule_ids: dict[str, int], rule_name: str) -> None:
        self.nfa = _Nfa()
        self.rule_ids = rule_ids
        self.rule_name = rule_name
        self.called: set[int] = set()  # rule ids this builder wrote call edges to

    def build(self, expr: Expr, start: int, end: int) -> None:
        nfa = self.nfa
        kind = type(expr)  # the IR node classes are final: one lookup instead of isinstance
        if kind is Bytes:
            data = expr.data  # type: ignore[attr-defined]
            if not data:
                nfa.eps[start].append(end)
                return
            cur, last = start, len(data) - 1
            for i, b in enumerate(data):
                nxt = end if i == last else nfa.new_state()
                nfa.byte_edges[cur].append((b, b, nxt))
                cur = nxt
        elif kind is CharClass:
            self._sequences(_class_sequences(expr), start, end)  # type: ignore[arg-type]
        elif kind is Seq:
            items = expr.items  # type: ignore[attr-defined]
            if not items:
                nfa.eps[start].append(end)
                return
            cur, last = start, len(items) - 1
            for i, item in enumerate(items):
                nxt = end if i == last else nfa.new_state()
                self.build(item, cur, nxt)
                cur = nxt
        elif kind is Choice:
            seqs = choice_sequences(expr, _class_sequences)  # type: ignore[arg-type]
            if seqs is not None:  # literals and classes only: one class (as FlatIr reads it)
                self._sequences(seqs, start, end)
                return
            for item in expr.items:  # type: ignore[attr-defined]
                self.build(item, start, end)
        elif kind is Repeat:
            self._build_repeat(expr, start, end)  # type: ignore[arg-type]
        elif kind is RuleRef:
            rid = self.rule_ids.get(expr.name)  # type: ignore[attr-defined]
            if rid is None:
                raise UndefinedRuleError(
                    f"rule {self.rule_name!r} references undefined rule {expr.name!r}"  # type: ignore[attr-defined]
                )
            nfa.ref_edges[start].append((rid, end))
            self.called.add(rid)
        else:  # pragma: no cover - the IR is closed
            raise GrammarError(f"unknown grammar expression {expr!r}")

    def _sequences(self, seqs, start: int, end: int) -> None:
        """A chain of byte-range edges per sequence, from ``start`` to ``end``."""
        nfa = self.nfa
        for seq in seqs:
            cur, last = start, len(seq) - 1
            for i, (lo, hi) in enumerate(seq):
                nxt = end if i == last else nfa.new_state()
                nfa.byte_edges[cur].append((lo, hi, nxt))
                cur = nxt

    def _build_repeat(self, expr: Repeat, start: int, end: int) -> None:
        nfa = self.nfa
        if expr.max is not None and expr.max < expr.min:
            raise GrammarError(f"repetition {{{expr.min},{expr.max}}} has max < min")
        cur = start
        for _ in range(expr.min):
            nxt = nfa.new_state()
            self.build(expr.item, cur, nxt)
            cur = nxt
        if expr.max is None:
            loop = nfa.new_state()
            nfa.eps[cur].append(loop)
            back = nfa.new_state()
            self.build(expr.item, loop, back)
            nfa.eps[back].append(loop)
            nfa.eps[loop].append(end)
            return
        # Optional copies chained so that the DFA stays linear in (max - min).
        for _ in range(expr.max - expr.min):
            nfa.eps[cur].append(end)
            nxt = nfa.new_state()
            self.build(expr.item, cur, nxt)
            cur = nxt
        nfa.eps[cur].append(end)


@functools.lru_cache(maxsize=4096)  # the same classes recur in every rule and grammar
def _class_sequences(cls: CharClass) -> list[tuple[tuple[int, int], ...]]:
    """The UTF-8 byte-range sequences that spell the code points of ``cls``."""
    ranges = normalize_ranges(cls.ranges)
    if cls.negated:
        ranges = complement_ranges(ranges)
    return [s for lo, hi in ranges for s in utf8_sequences(lo, hi)]


def _only_ends(nfa: _Nfa, q: int, accept: int) -> bool:
    """Whether nothing but the end of the rule can follow NFA state ``q``: only epsilon
    moves lead on from it, and they reach ``accept``."""
    seen = {q}
    stack = [q]
    ends = False
    while stack:
        u = stack.pop()
        if nfa.byte_edges[u] or nfa.ref_edges[u]:
            return False
        ends = ends or u == accept
        for t in nfa.eps[u]:
            if t not in seen:
                seen.add(t)
                stack.append(t)
    return ends


def _tail_cycles(flat: FlatIr, roots: list[int]) -> dict[int, frozenset[int]]:
    """Rules that reach themselves through a cycle of two or more tail calls: rule id ->
    its cycle, itself included (a strongly connected component of the tail-call graph
    that :func:`._nfa.tail_calls` finds on the flattened bodies). The members of a cycle
    share one set: a set of the others per rule is quadratic in the cycle (a structural
    tag's free text of 4,500 rules spent 0.2 s making them)."""
    kind, a, b, kid_at, kids = flat.arrays()[:5]
    ptr, callee = tail_calls(np.array(roots, dtype=np.int64), len(roots), kind, a, b, kid_at, kids)
    ptr_l, callee_l = ptr.tolist(), callee.tolist()
    graph = [callee_l[ptr_l[r] : ptr_l[r + 1]] for r in range(len(roots))]
    out: dict[int, frozenset[int]] = {}
    for comp in cycles_of_two_or_more(graph):
        members = frozenset(comp)
        out.update(dict.fromkeys(comp, members))
    return out


def _cycles_without(
    cycles: dict[int, frozenset[int]], hot: set[int], captured: set[int]
) -> dict[int, frozenset[int]]:
    """:func:`_tail_cycles` less the ``hot`` rules (never inlined), keeping the rules that
    still have another rule in their cycle and are not ``captured``. A rule's cycle, as
    in :func:`_tail_cycles`, is one set shared by its members, which may leave the rule
    itself out (a hot rule whose cycle has others)."""
    out: dict[int, frozenset[int]] = {}
    less: dict[int, frozenset[int]] = {}  # id of a cycle -> that cycle less the hot rules
    for w, comp in cycles.items():
        if w in captured:
            continue
        rest = less.get(id(comp))
        if rest is None:
            rest = less[id(comp)] = comp - hot if hot else comp
        if len(rest) > (1 if w in rest else 0):  # another rule of it is left
            out[w] = rest
    return out


def _inline_tail_calls(
    nfa: _Nfa, accept: int, cycle: frozenset[int], splice, room: int = 0, own: int = -1
) -> None:
    """Replace the tail calls of the other rules of the rule's tail-call cycle by jumps: a
    callee's body is added once (within a size budget), from a state of its own to the
    rule's end, and every tail call of it jumps there, so that the cycle's way back to the
    rule becomes a self tail call that :func:`_loop_tail_self_calls` turns into a loop.
    A call in tail position is followed by nothing but the rule's end, so jumping into
    the callee's body keeps the language; right recursion through ``a ::= "x" b``,
    ``b ::= "y" a`` becomes linear, and the rule calls no other rule of its cycle (the
    free text of a structural tag, one rule per Aho-Corasick state, is one rule: the
    others are never reached). ``splice(callee, p, end)`` adds the callee's body from
    ``p`` to ``end``. The budget is twice the rule's own size, or ``room`` more states
    when that is larger (the caller's room for the whole cycle). Calls of rule ``own``
    (the rule itself, which ``cycle`` may hold) are left alone.
    """
    budget = max(2 * len(nfa.eps) + 64, len(nfa.eps) + room)
    starts: dict[int, int] = {}
    p = 0
    ref_edges = nfa.ref_edges
    while p < len(ref_edges):  # states added by inlining are visited too
        if not ref_edges[p]:  # most states call nothing
            p += 1
            continue
        for callee, q in list(ref_edges[p]):
            if callee == own or callee not in cycle or not _only_ends(nfa, q, accept):
                continue
            start = starts.get(callee)
            if start is None:
                if len(nfa.eps) >= budget:
                    continue
                start = starts[callee] = nfa.new_state()
                splice(callee, start, accept)
            ref_edges[p].remove((callee, q))
            nfa.eps[p].append(start)
        p += 1


def _loop_tail_self_calls(nfa: _Nfa, rid: int, start: int, accept: int) -> None:
    """Turn every call of rule ``rid`` to itself in tail position into a jump to its start.

    A call is in tail position when nothing but the end of the rule can follow it (only
    epsilon moves lead on, all to ``accept``). ``R ::= a R | b`` derives exactly ``a* b``,
    so the jump keeps the language, follow sets and nullability, while the Earley chart
    stops growing by one completed item per nesting level: right recursion such as
    ``root ::= stmt root | stmt`` is recognised in linear time and space instead of
    quadratic.
    """
    for p, edges in enumerate(nfa.ref_edges):
        if not edges:  # most states call nothing
            continue
        tails = [(c, q) for c, q in edges if c == rid and _only_ends(nfa, q, accept)]
        if tails:
            nfa.ref_edges[p] = [e for e in edges if e not in tails]
            nfa.eps[p].append(start)


def _list_nfa(csr: tuple) -> _Nfa:
    """The kernel's NFA (:func:`._nfa.build_nfa`'s CSR arrays) as per-state edge lists."""
    n, eps_ptr, eps_to, byte_ptr, lo, hi, to, ref_ptr, ref_rule, ref_to = csr
    nfa = _Nfa()
    ep, et = eps_ptr.tolist(), eps_to.tolist()
    nfa.eps = [et[ep[s] : ep[s + 1]] for s in range(n)]
    bp, edges = byte_ptr.tolist(), list(zip(lo.tolist(), hi.tolist(), to.tolist(), strict=True))
    nfa.byte_edges = [edges[bp[s] : bp[s + 1]] for s in range(n)]
    rp, refs = ref_ptr.tolist(), list(zip(ref_rule.tolist(), ref_to.tolist(), strict=True))
    nfa.ref_edges = [refs[rp[s] : rp[s + 1]] for s in range(n)]
    return nfa


def _splice(nfa: _Nfa, part: _Nfa, p: int, accept: int) -> None:
    """Add NFA ``part`` (start 0, accepting 1, no edge out of 1) into ``nfa`` from state
    ``p`` to ``accept``, its other states appended in order: the states and edges the
    Python builder makes when it builds the same body from ``p`` to ``accept``."""
    base = len(nfa.eps) - 2
    names = [p, accept, *range(base + 2, base + len(part.eps))]
    # the part's own states first (each is a new state: its lists are made here, in one
    # pass per kind), then its start's and end's edges onto p and accept
    nfa.eps.extend([[names[t] for t in eps] for eps in part.eps[2:]])
    nfa.byte_edges.extend([[(lo, hi, names[t]) for lo, hi, t in e] for e in part.byte_edges[2:]])
    nfa.ref_edges.extend([[(r, names[t]) for r, t in e] for e in part.ref_edges[2:]])
    for k in (0, 1):
        u = names[k]
        if part.eps[k]:
            nfa.eps[u].extend([names[t] for t in part.eps[k]])
        if part.byte_edges[k]:
            nfa.byte_edges[u].extend([(lo, hi, names[t]) for lo, hi, t in part.byte_edges[k]])
        if part.ref_edges[k]:
            nfa.ref_edges[u].extend([(r, names[t]) for r, t in part.ref_edges[k]])


def _csr(lists: list[list], width: int) -> tuple[np.ndarray, np.ndarray]:
    """Per-state edge lists as CSR: offsets [n + 1] and an int32 [n_edges, width] table."""
    ptr = np.zeros(len(lists) + 1, dtype=np.int32)
    np.cumsum(np.fromiter(map(len, lists), dtype=np.int32, count=len(lists)), out=ptr[1:])
    n = int(ptr[-1])
    values = chain.from_iterable(lists)
    if width > 1:  # edges are tuples: read as one stream of ints (np.array of tuples is slow)
        values = chain.from_iterable(values)
    table = np.fromiter(values, dtype=np.int32, count=n * width).reshape(n, width)
    return ptr, table


def _determinize(nfa: _Nfa, start: int, accept: int) -> tuple[np.ndarray, ...]:
    """Subset construction of one rule's NFA (see :func:`._subset.determinize`), through
    :func:`._rule_dfa.rule_dfa` (``rule_kernel`` here)."""
    eps_ptr, eps_to = _csr(nfa.eps, 1)
    byte_ptr, byte = _csr(nfa.byte_edges, 3)
    ref_ptr, ref = _csr(nfa.ref_edges, 2)
    csr = (len(nfa.eps), eps_ptr, eps_to[:, 0], byte_ptr, *byte.T, ref_ptr, *ref.T)
    return rule_kernel(DFA_OF_NFA, -1, -1, _NO_NODES, pack_nfa(csr), start, accept)[2]


# ``rule_dfa``'s node arguments where it builds from a packed NFA: their types are those
# of ``FlatIr.arrays`` (the kernel has one specialization; ``data`` is read-only there too)
_NO_NODES = (
    np.zeros(0, dtype=np.int8),
    *(np.zeros(0, dtype=np.int64) for _ in range(4)),
    np.frombuffer(b"", dtype=np.uint8),
    np.zeros(1, dtype=np.int64),
    np.zeros(0, dtype=np.int32),
    np.zeros(0, dtype=np.int32),
    np.zeros((0, 5), dtype=np.int64),
)
_NO_NFA = np.zeros(0, dtype=np.int32)


def _nullable_rules(rule_start, finals, ref_ptr, ref_rule, ref_target, rule_of_state) -> np.ndarray:
    """A rule is nullable if its start reaches a final state through calls to nullable
    rules only.

    Worklist form, linear in states and call edges: a call to a rule not (yet) known to be
    nullable parks its target state until the callee turns out nullable, so a chain
    ``r_i ::= r_{i+1} | ...`` of thousands of rules costs no more than its size. The
    arguments are Python lists (call edges as CSR).
    """
    n_rules = len(rule_start)
    nullable = np.zeros(n_rules, dtype=np.uint8)
    reached: set[int] = set()  # states reached from their rule's start (a state has one rule)
    waiting: dict[int, list[int]] = {}  # callee -> target states to visit once it is nullable
    queue: list[int] = []

    def visit(s: int) -> None:
        stack = [s]
        while stack:
            u = stack.pop()
            if u in reached:
                continue
            reached.add(u)
            r = rule_of_state[u]
            if finals[u] and not nullable[r]:
                nullable[r] = 1
                queue.append(r)
            for e in range(ref_ptr[u], ref_ptr[u + 1]):
                rid, to = ref_rule[e], ref_target[e]
                if nullable[rid]:
                    stack.append(to)
                else:
                    waiting.setdefault(rid, []).append(to)

    for r in range(n_rules):
        visit(rule_start[r])
    while queue:
        for to in waiting.pop(queue.pop(), ()):
            visit(to)
    return nullable


def build_automaton(ir: GrammarIR) -> Automaton:
    """Compile a grammar IR into the flat automaton.

    Parameters
    ----------
    ir : GrammarIR
        The grammar; its root rule must exist.

    Returns
    -------
    Automaton
    """
    if not ir.has_rule(ir.root):
        raise GrammarError(f"root rule {ir.root!r} is not defined")
    for rebuild in range(_MAX_REBUILDS + 1):
        depth = ir_depth(ir)
        if depth > MAX_EXPR_DEPTH:
            raise expr_depth_error("build_automaton")
        try:
            # The NFA construction recurses per expression level: deep IR, large stack.
            with collector_paused():  # its allocations are acyclic: collections free nothing
                return run_sized(depth > SHALLOW_DEPTH, _build, ir)
        except _RuleTooLargeError as over:
            # the automaton tracks every position of its counted repetitions at once: let
            # the chart follow them instead, as calls of rules (see repeats_as_rules)
            rewritten = repeats_as_rules(ir, over.rule)
            if rewritten is None or rebuild == _MAX_REBUILDS:
                raise over.error() from None
            ir = rewritten
    raise AssertionError("unreachable")  # the loop returns or raises


# A rule over the budget is built again with its counted repetitions made rules, and those
# rules in turn: a few rounds unless the grammar nests repetitions deeply.
_MAX_REBUILDS = 8


class _RuleTooLargeError(Exception):
    """A rule's automaton would pass the budget (``ir.MAX_RULE_STATES`` states or
    ``ir.MAX_SUBSET_MEMBERS`` subset members)."""

    def __init__(self, rule: str, excerpt: str) -> None:
        super().__init__(rule)
        self.rule, self.excerpt = rule, excerpt

    def error(self) -> GrammarError:
        return GrammarError(
            f"rule {self.rule!r}: its automaton needs more than {MAX_RULE_STATES} states "
            f"(treegram.ir.MAX_RULE_STATES) or {MAX_SUBSET_MEMBERS} subset members "
            f"(MAX_SUBSET_MEMBERS), even with its counted repetitions made rules: "
            f"{self.excerpt}"
        )


def _build_clock() -> float:
    """Monotonic seconds less the seconds spent compiling or loading numba kernels."""
    return time.monotonic() - kernel_seconds()


def _within_budget(part: tuple, name: str, body: Expr, total: int, deadline: float) -> int:
    """The grammar's state count with rule ``name``'s DFA ``part`` added; raises when the
    rule or the grammar passes the budget, or the build its time."""
    if part[0].shape[0] == 0:  # determinize's answer when over the budget
        raise _RuleTooLargeError(name, expr_excerpt(body))
    if _build_clock() > deadline:
        raise GrammarError(
            f"building the automaton took more than {MAX_BUILD_SECONDS:g} s "
            f"(treegram.ir.MAX_BUILD_SECONDS); it was at rule {name!r}: {expr_excerpt(body)}"
        )
    total += part[0].shape[0]
    if total > MAX_AUTOMATON_STATES:
        raise GrammarError(
            f"the grammar needs more than {MAX_AUTOMATON_STATES} automaton states "
            f"(treegram.ir.MAX_AUTOMATON_STATES); rule {name!r} passed it: "
            f"{expr_excerpt(body)}"
        )
    return total


def _build(ir: GrammarIR) -> Automaton:
    ir = split_long_repeats(ir)
    bodies: list[tuple[str, Expr]] = [(r.name, r.body) for r in ir.rules]
    lookahead_of: dict[int, int] = {}
    for i, r in enumerate(ir.rules):
        if r.lookahead is not None:
            lookahead_of[i] = len(bodies)
            bodies.append((r.name + LOOKAHEAD_SUFFIX, r.lookahead))
    rule_ids = {name: i for i, (name, _) in enumerate(bodies[: len(ir.rules)])}

    flat = FlatIr(rule_ids, _class_sequences)
    roots = [flat.add(body) for _, body in bodies]  # every shared node flattened once
    flat.close()
    tail_cycles = _tail_cycles(flat, roots[: len(ir.rules)])
    # A rule with a temperature, a capture or a token budget keeps its own states (the
    # matcher reads them from the rule that owns a state), so it is never inlined into a caller;
    # a captured rule also keeps its calls of itself (each level is a completion to record).
    captured = {i for i, r in enumerate(ir.rules) if r.capture is not None or r.marker}
    lazy = {i for i, r in enumerate(ir.rules) if r.lazy}
    # a unique rule's completions are compared by the matcher: it keeps its own states and
    # is never merged with an equal rule that is not unique; so does a counted one
    unique = {i for i, r in enumerate(ir.rules) if r.unique}
    counted = {
        i: r.max_string_chars for i, r in enumerate(ir.rules) if r.max_string_chars is not None
    }
    chars_of: dict[int, np.ndarray] = {}  # counted rule -> its states' character limits
    chars_memo: dict[tuple, np.ndarray] = {}  # counted automaton and bound -> limits
    hot = (
        {i for i, r in enumerate(ir.rules) if r.temperature is not None or r.max_tokens}
        | captured
        | lazy
        | unique
        | set(counted)
    )
    tail_cycles = _cycles_without(tail_cycles, hot, captured)
    # per rule: (final, byte_ptr, lo, hi, to, ref_ptr, ref_rule, ref_to)
    nfas: dict[int, tuple] = {}  # flat root -> the kernel's NFA: equal bodies once
    lists: dict[int, _Nfa] = {}  # flat root -> that NFA as edge lists (read only)
    done: dict[int, tuple] = {}  # flat root -> (rules its NFA calls, DFA)
    arrays = flat.arrays()

    def nfa_of(root: int) -> tuple:
        got = nfas.get(root)
        if got is None:
            packed = rule_kernel(NFA_OF_BODY, root, -1, arrays, _NO_NFA, 0, 1)[1]
            got = nfas[root] = unpack_nfa(packed)
        return got

    def list_nfa_of(root: int) -> _Nfa:
        got = lists.get(root)
        if got is None:
            got = lists[root] = _list_nfa(nfa_of(root))
        return got

    def splice_into(nfa: _Nfa):
        def splice(callee: int, p: int, accept: int) -> None:
            if roots[callee] in flat.bad:  # the Python builder raises the callee's error
                inliner = _NfaBuilder(rule_ids, bodies[callee][0])
                inliner.nfa = nfa
                inliner.build(bodies[callee][1], p, accept)
            else:
                _splice(nfa, list_nfa_of(roots[callee]), p, accept)

        return splice

    for rid, (name, body) in enumerate(bodies):
        if roots[rid] in flat.bad:  # an error to raise, reached or not: the Python builder
            builder = _NfaBuilder(rule_ids, name)
            builder.build(body, builder.nfa.new_state(), builder.nfa.new_state())

    total = 0  # states so far
    # the budget is the build's own time: numba compiling or loading kernels meanwhile
    # (a fresh checkout's first compile, a minute on a busy machine) does not count
    deadline = _build_clock() + MAX_BUILD_SECONDS

    cycle_states: dict[frozenset[int], int] = {}  # NFA states of a tail-call cycle's bodies
    keys, calls = node_keys(*arrays[:9], _KEY0, _KEY1)

    def rule_dfa(rid: int) -> tuple:
        if rid in counted:
            part = counted_dfa(rid)
            # equal automata with equal bounds have equal limits: a schema repeats one
            # bounded string (four ``uri-reference`` strings of 2,000 characters in
            # Github_medium o15711), whose analysis is a Python walk of its byte edges
            key = (counted[rid], *(a.tobytes() for a in part[:8]))
            limits = chars_memo.get(key)
            if limits is None:
                limits = state_chars(part, counted[rid], bodies[rid][0])  # type: ignore[arg-type]
                chars_memo[key] = limits
            chars_of[rid] = limits
            return budgeted(rid, part)
        root = roots[rid]
        key = None
        if rid not in tail_cycles and rid not in captured and root not in flat.bad:
            own = int(calls[root])
            if own == -1 or own == rid:  # calls nothing, or only itself: its hash says all
                key = (rule_kernel, own == rid, int(keys[root, 0]), int(keys[root, 1]))
                got = _RULE_DFAS.get(key)
                if got is not None:
                    if own == rid:  # the cached calls are of that grammar's rule: this one
                        got = (*got[:6], np.full_like(got[6], rid), got[7])
                    return budgeted(rid, got)
            else:  # calls other rules: an earlier body equal but for its callees may do
                return budgeted(rid, alike_dfa(rid, root, own))
        part = new_rule_dfa(rid)
        small = part[0].shape[0] <= _RULE_DFA_STATES and part[2].shape[0] <= _RULE_DFA_EDGES
        if key is not None and part[0].shape[0] and small:
            if len(_RULE_DFAS) >= _RULE_DFAS_KEPT:
                _RULE_DFAS.clear()
            _RULE_DFAS[key] = part
        return budgeted(rid, part)

    # body hash -> (rule, the one rule it calls or -2, its DFA or None) of the first rule
    # built from such a body; (body hash, call pattern) -> (DFA, per call of the DFA the
    # rank of its rule; None: every call is of one rule) of a rule built from one
    firsts: dict[tuple[int, int], tuple] = {}
    alike: dict[tuple, tuple] = {}
    patterns: tuple | None = None  # ``call_patterns`` of the bodies, on first need

    def call_pattern(rid: int, own: int) -> tuple | None:
        """The ranks of rule ``rid``'s calls (bytes; empty when it calls one rule,
        ``own``) and the rules it calls (None then), see :func:`._nfa.call_patterns`;
        None if it calls itself or was not walked."""
        nonlocal patterns
        if own >= 0:
            return b"", None
        if patterns is None:
            several = np.array(roots, dtype=np.int64)
            several[calls[several] != -2] = -1  # the bodies that call several rules
            patterns = call_patterns(several, _PATTERN_LIMIT, *arrays[:5], arrays[9])
        status, ptr, ranks, rule_ptr, rules = patterns
        if status[rid]:
            return None
        return ranks[ptr[rid] : ptr[rid + 1]].tobytes(), rules[rule_ptr[rid] : rule_ptr[rid + 1]]

    def keep_alike(hkey: tuple, pattern: tuple, part: tuple) -> None:
        at = None if pattern[1] is None else np.searchsorted(pattern[1], part[6])
        alike.setdefault((hkey, pattern[0]), (part, at))

    def alike_dfa(rid: int, root: int, own: int) -> tuple:
        """The DFA of rule ``rid`` (body ``root``, calling other rules only: ``own`` is
        the one rule it calls, -2 several), taken from an earlier rule whose body is
        equal but for the rules it calls, in the same pattern: the same rule at the same
        calls and the rules in the same order. Subset construction reads the rule of a
        call only to group a subset's calls by rule, in ascending order, so the DFA is
        the same but for its calls, mapped rank for rank; else built (and kept for the
        next such body). A length bounded pattern is a chain of thousands of rules,
        each calling the next (2,822 in Github_hard o82544); a schema with many
        date-time properties has a DFA of 9,000 states per property name. Patterns are
        read only from a body's second rule on (most bodies have one)."""
        hkey = (int(keys[root, 0]), int(keys[root, 1]))
        first = firsts.get(hkey)
        if first is None:
            part = new_rule_dfa(rid)
            built = done.get(root)
            own_dfa = built is not None and built[1] is part  # its NFA's, no call rewritten
            firsts[hkey] = (rid, own, part if own_dfa else None)
            return part
        if first[2] is not None:  # the first rule's DFA kept, now that a second came
            firsts[hkey] = (first[0], first[1], None)
            pattern = call_pattern(first[0], first[1])
            if pattern is not None:
                keep_alike(hkey, pattern, first[2])
        pattern = call_pattern(rid, own)
        if pattern is None:
            return new_rule_dfa(rid)
        got = alike.get((hkey, pattern[0]))
        if got is not None:
            dfa, at = got
            mapped = np.full_like(dfa[6], own) if at is None else pattern[1][at]
            return (*dfa[:6], mapped, dfa[7])
        part = new_rule_dfa(rid)
        built = done.get(root)
        if built is not None and built[1] is part:
            keep_alike(hkey, pattern, part)
        return part

    def budgeted(rid: int, part: tuple) -> tuple:
        nonlocal total
        total = _within_budget(part, *bodies[rid], total, deadline)
        return _committed_shortest(part) if rid in lazy else part

    def new_rule_dfa(rid: int) -> tuple:
        root = roots[rid]
        if rid not in tail_cycles:
            # no call to rewrite (a captured rule keeps its calls of itself): equal
            # bodies share one DFA, built in one kernel call
            self_rule = -1 if rid in captured else rid
            got = done.get(root)
            if got is None:
                calls_self, nfa_calls, dfa = rule_kernel(
                    DFA_OF_BODY, root, self_rule, arrays, _NO_NFA, 0, 1
                )
                if not calls_self:
                    got = done[root] = (nfa_calls, dfa)
            elif self_rule >= 0 and (got[0] == self_rule).any():
                got = None
            if got is not None:
                return got[1]
        csr = nfa_of(root)
        nfa = _list_nfa(csr)  # calls to rewrite, on the kernel's NFA as edge lists
        if rid in tail_cycles:
            cycle = tail_cycles[rid]  # shared by its members; may leave out rid (hot)
            # every other member's body once: the cycle's total, summed once per cycle (a
            # string with patterns and a length bound has a 557-rule cycle, 300k sums)
            total_states = cycle_states.get(cycle)
            if total_states is None:
                total_states = cycle_states[cycle] = sum(nfa_of(roots[c])[0] for c in cycle)
            whole = total_states - csr[0] if rid in cycle else total_states
            room = whole if whole <= _CYCLE_INLINE_STATES else 0
            _inline_tail_calls(nfa, 1, cycle, splice_into(nfa), room, rid)
        if rid not in captured:
            _loop_tail_self_calls(nfa, rid, 0, 1)
        return _determinize(nfa, 0, 1)

    one_char: dict[int, bool] = {}  # rule -> whether it reads exactly one character

    def reads_one_char(rid: int) -> bool:
        got = one_char.get(rid)
        if got is None:
            got = False
            root = roots[rid]
            if rid not in tail_cycles and rid not in captured and root not in flat.bad:
                calls_self, nfa_calls, dfa = rule_kernel(
                    DFA_OF_BODY, root, rid, arrays, _NO_NFA, 0, 1
                )
                got = not calls_self and nfa_calls.shape[0] == 0 and one_character(dfa)
                if not calls_self:
                    done.setdefault(root, (nfa_calls, dfa))  # built once, kept for its own use
            one_char[rid] = got
        return got

    counted_dfas: dict[tuple, tuple] = {}  # counted_key -> the counted rule's DFA

    def counted_key(rid: int) -> tuple | None:
        """What :func:`counted_dfa` reads to build rule ``rid``'s automaton: the NFA of
        every rule it reaches by calls (the rules numbered by first reach, ``rid`` first),
        each callee by its number, and by its id where it reads one character (its calls
        may stay, naming it). Rules with equal keys inline into equal automata: a schema
        repeats one bounded string (four ``uri-reference`` strings of 2,000 characters in
        Github_medium o15711), each with rules of its own for its automaton's states.
        None when a reached rule has an error to raise."""
        number = {rid: 0}
        todo = [rid]
        key: list = []
        for r in todo:  # grows while read
            root = roots[r]
            if root in flat.bad:
                return None
            csr = nfa_of(root)
            callees = []
            for callee in csr[8].tolist():
                k = number.get(callee)
                if k is None:
                    k = number[callee] = len(todo)
                    todo.append(callee)
                one = callee != rid and reads_one_char(callee)
                callees.append((k, callee if one else -1))
            key.append((csr[0], *(a.tobytes() for a in csr[1:8]), csr[9].tobytes(), *callees))
        return tuple(key)

    def counted_dfa(rid: int) -> tuple:
        key = counted_key(rid)
        got = counted_dfas.get(key) if key is not None else None
        if got is None:
            got = new_counted_dfa(rid)
            if key is not None:
                counted_dfas[key] = got
        return got

    def new_counted_dfa(rid: int) -> tuple:
        # the matcher bounds the rule's characters on its own items: every call inlined
        # but those of a rule that reads one character (counted when predicted)
        nfa = _list_nfa(nfa_of(roots[rid]))
        name = bodies[rid][0]
        inline_calls(
            nfa, 1, rid, splice_into(nfa), _only_ends, reads_one_char, name, MAX_RULE_STATES
        )
        _loop_tail_self_calls(nfa, rid, 0, 1)
        return _determinize(nfa, 0, 1)

    # Only the rules the root reaches through calls (and their lookaheads) are built: a
    # rule whose every call was inlined (the free-text rules of a structural tag, one per
    # Aho-Corasick state) is never entered, and gets one dead state.
    parts: list = [None] * len(bodies)
    queue = [rule_ids[ir.root]]
    parts[queue[0]] = ()
    while queue:
        rid = queue.pop()
        part = parts[rid] = rule_dfa(rid)
        more = part[6].tolist()
        if rid in lookahead_of:
            more.append(lookahead_of[rid])
        for callee in more:
            if parts[callee] is None:
                parts[callee] = ()  # queued
                queue.append(callee)
    # Calls of copies of a rule (equal automata calling equal rules) go to one of them:
    # fewer chart items and states to classify, the same language. The copies no call
    # reaches any more get one dead state; their nullability is their representative's
    # (readable by rule id: testing's allow-empty rule ids).
    kept = hot | set(lookahead_of) | set(lookahead_of.values())
    kept |= {i for i, r in enumerate(ir.rules) if r.tokens is not None}
    live = [r for r, p in enumerate(parts) if p is not None]
    copy_of = merge_equal_rules(parts, live, kept, rule_ids[ir.root])
    if copy_of is not None:
        _drop_uncalled(parts, rule_ids[ir.root], kept)
    parts = [_DEAD if p is None else p for p in parts]

    # One global state space: each rule's states follow the previous rule's.
    sizes = np.array([p[0].shape[0] for p in parts], dtype=np.int64)
    base = np.zeros(len(parts) + 1, dtype=np.int64)
    np.cumsum(sizes, out=base[1:])
    rule_start = base[:-1]
    state_final = np.concatenate([p[0] for p in parts])
    state_rule = np.repeat(np.arange(len(parts), dtype=np.int32), sizes)
    if unique:  # their final states read 2 (``kernels._earley``)
        state_final[np.isin(state_rule, list(unique)) & (state_final != 0)] = 2
    chars = np.zeros(0, dtype=np.int32)
    if chars_of:  # limits, then the least limit ahead (``automaton._counted``)
        n_all = state_final.shape[0]
        chars = np.full(2 * n_all, layout.NOT_COUNTED, dtype=np.int32)
        for rid, limits in chars_of.items():
            k = limits.shape[0] // 2
            at = int(rule_start[rid])
            chars[at : at + k] = limits[:k]
            chars[n_all + at : n_all + at + k] = limits[k:]
    byte_ptr = _concat_ptr([p[1] for p in parts])
    lo = np.concatenate([p[2] for p in parts])
    hi = np.concatenate([p[3] for p in parts])
    to = _concat_shifted([p[4] for p in parts], rule_start)
    ref_ptr = _concat_ptr([p[5] for p in parts])
    ref_rule = np.concatenate([p[6] for p in parts])
    ref_target = _concat_shifted([p[7] for p in parts], rule_start)

    # Byte equivalence classes: bytes no edge distinguishes share one column.
    byte_class, n_classes = _byte_classes(lo, hi)
    n_states = int(state_final.shape[0])
    trans = np.full(n_states * n_classes, -1, dtype=np.int32)
    fill_transitions(trans, n_classes, byte_class, byte_ptr, lo, hi, to)

    rule_follow = _follow_sets(
        rule_start,
        state_final,
        (byte_ptr, lo, hi),
        (ref_ptr, ref_rule, ref_target),
        state_rule,
        rule_ids[ir.root],
        len(ir.rules),
    )
    lists = (rule_start.tolist(), state_final.tolist(), state_rule.tolist())
    ref_lists = (ref_ptr.tolist(), ref_rule.tolist(), ref_target.tolist())
    rule_lookahead = np.full(len(bodies), -1, dtype=np.int32)
    for rid, lid in lookahead_of.items():
        rule_lookahead[rid] = lid
    nullable = _nullable_rules(lists[0], lists[1], *ref_lists, lists[2])
    if copy_of is not None:
        nullable = nullable[copy_of]
    for rid in unique:
        if nullable[rid]:
            raise GrammarError(
                f"rule {bodies[rid][0]!r} is unique but matches the empty text "
                "(a unique rule reads one JSON string)"
            )
    return Automaton(
        rule_names=tuple(name for name, _ in bodies),
        root_rule=rule_ids[ir.root],
        rule_start=rule_start.astype(np.int32),
        rule_nullable=nullable,
        rule_lookahead=rule_lookahead,
        state_rule=state_rule,
        state_final=state_final,
        byte_class=byte_class,
        n_classes=n_classes,
        trans=trans,
        ref_ptr=ref_ptr,
        ref_rule=ref_rule,
        ref_target=ref_target,
        rule_follow=rule_follow,
        token_rules=tuple((i, r.tokens) for i, r in enumerate(ir.rules) if r.tokens is not None),
        state_chars=chars,
    )


# Rule automata by the hash of their body (``_nfa.node_keys``), for bodies that call
# nothing or only their own rule: such a DFA depends on the body alone (its calls are of
# the rule itself, rewritten to the rule's id on use), so the next grammar with the same
# body (the JSON Schema frontend's ``any_value`` in every schema with undeclared keys)
# takes it instead of building the NFA, its self tail calls as loops and the subsets
# again. The key also holds the kernel that built it (tests swap in a plain one). Only
# automata of at most _RULE_DFA_STATES states and _RULE_DFA_EDGES byte edges are kept,
# and the table is cleared when it holds _RULE_DFAS_KEPT of them (at most ~15 MB; the
# ones that recur are small: any_value has 20 states, an encoded class a few dozen).
_RULE_DFAS: dict[tuple, tuple] = {}
_RULE_DFAS_KEPT = 256
_RULE_DFA_STATES = 1024
_RULE_DFA_EDGES = 4096
_KEY0, _KEY1 = (np.uint64(int.from_bytes(os.urandom(8), "little")) for _ in range(2))

# The call patterns of bodies whose NFA has more states and edges than this are not
# read (their rules are built): a walk that long costs about as much as the build.
_PATTERN_LIMIT = 1 << 20

# A tail-call cycle whose bodies have at most this many NFA states in all is inlined whole
# into each rule of it that is reached (the Aho-Corasick free text of a structural tag: one
# rule per state, a few states each); larger cycles get twice the rule's own size.
_CYCLE_INLINE_STATES = 4096

_I32 = np.zeros(0, dtype=np.int32)
_PTR = np.zeros(2, dtype=np.int32)
# The DFA of a rule nothing reaches: one state, not final, no edge.
_DEAD = (np.zeros(1, dtype=np.uint8), _PTR, _I32, _I32, _I32, _PTR, _I32, _I32)


def _drop_uncalled(parts: list, root: int, kept: set[int]) -> None:
    """Forget, in place, the automata of the rules that no call reaches any more once
    calls of equal rules go to one of them (:func:`merge_equal_rules`): like a rule never
    reached, each gets one dead state. The root, the rules the matcher reads by identity
    (``kept``: lookaheads among them) and the rules they call stay. A schema with seven
    ``date-time`` properties kept six unused copies of a 9,231-state string automaton
    (Github_ultra o7578: 58,000 of its 94,000 states, each a row of the transition table
    and of every later per-state array)."""
    reached = [False] * len(parts)
    todo = [root, *(r for r in kept if parts[r] is not None)]
    for r in todo:
        reached[r] = True
    while todo:
        for callee in parts[todo.pop()][6].tolist():
            if not reached[callee]:
                reached[callee] = True
                todo.append(callee)
    for r, part in enumerate(parts):
        if part is not None and not reached[r]:
            parts[r] = None


def _committed_shortest(part: tuple) -> tuple:
    """A rule DFA (``determinize``'s arrays) that stops at its first accepting state: the
    byte edges out of accepting states are dropped (xgrammar's ``[lazy]``). The DFA is
    deterministic and reaches an accepting state only after whole characters, so this
    keeps exactly the strings none of whose proper prefixes the rule matches."""
    final, byte_ptr, lo, hi, to = part[:5]
    counts = np.diff(byte_ptr)
    counts[final.astype(bool)] = 0
    keep = np.repeat(~final.astype(bool), np.diff(byte_ptr))
    new_ptr = np.zeros_like(byte_ptr)
    np.cumsum(counts, out=new_ptr[1:])
    return (final, new_ptr, lo[keep], hi[keep], to[keep], *part[5:])


def _byte_classes(lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, int]:
    """The class of each byte (int32 [256]) and the number of classes, for byte edges
    ``lo[i]..hi[i]``: a class is a maximal run of bytes that no edge's bounds cut (the
    cuts at 0, every ``lo`` and every ``hi + 1``, sorted and each once, split 0..255).
    The cuts are marked in a table of the 257 places, each byte's class counts those up
    to it (``np.unique`` of the bounds, a hash then a sort, cost a small grammar ~50 us)."""
    cut = np.zeros(257, dtype=bool)
    cut[0] = cut[256] = True
    cut[lo] = True
    cut[hi + 1] = True
    return np.cumsum(cut[:256], dtype=np.int32) - 1, int(np.count_nonzero(cut)) - 1


def _concat_ptr(ptrs: list[np.ndarray]) -> np.ndarray:
    """Concatenate per-rule CSR offsets into one global offset array: each array but its
    first entry, shifted by the last entries of the arrays before it. One pass of numpy
    over all of them (a slice and an add per rule cost a large grammar's thousands of
    rules about 10 ms)."""
    cat = np.concatenate(ptrs)
    lens = np.fromiter((p.shape[0] for p in ptrs), dtype=np.int64, count=len(ptrs))
    ends = np.cumsum(lens)
    totals = np.zeros(len(ptrs), dtype=np.int64)
    np.cumsum(cat[ends[:-1] - 1], out=totals[1:])  # each array's last entry, summed
    keep = np.ones(cat.shape[0], dtype=bool)
    keep[ends - lens] = False  # every array's first entry
    out = np.zeros(cat.shape[0] - len(ptrs) + 1, dtype=np.int32)
    out[1:] = cat[keep] + np.repeat(totals, lens - 1)
    return out


def _concat_shifted(arrays: list[np.ndarray], shifts: np.ndarray) -> np.ndarray:
    """``np.concatenate([a + np.int32(s) for a, s in zip(arrays, shifts)])`` in one pass
    (per-rule state numbers made global)."""
    cat = np.concatenate(arrays)
    lens = np.fromiter((a.shape[0] for a in arrays), dtype=np.int64, count=len(arrays))
    return cat + np.repeat(shifts.astype(np.int32), lens)


def _follow_sets(rule_start, finals, byte_csr, ref_csr, rule_of_state, root, n_real):
    """LL(1) follow sets: for each rule, the bytes that can be read right after it ends
    (see :func:`._follow.follow_sets`). Byte edges ``(ptr, lo, hi)`` and call edges
    ``(ptr, rule, target)`` come as CSR arrays."""
    return follow_sets(rule_start, finals, rule_of_state, *byte_csr, *ref_csr, root, n_real)
