"""Code point DFAs written back as grammar IR: the JSON string literals whose decoded
content an automaton accepts, with shared and cyclic states as rules of the converter.
"""

from __future__ import annotations

from treegram.frontends.json_schema._context import ConversionContext
from treegram.frontends.json_schema._lex import (
    EMPTY,
    _tree_size,
    alt,
    encoded_class,
    seq,
    string_of,
)
from treegram.frontends.json_schema._share import HOIST_SIZE
from treegram.ir import (
    MAX_CODEPOINT,
    Dfa,
    DfaLimitError,
    Expr,
    Repeat,
    RuleRef,
    Seq,
    cycles_of_two_or_more,
)

__all__ = [
    "MAX_GRAMMAR_STATES",
    "WRITABLE",
    "NOT_COUNTED",
    "NotCounted",
    "bounded_string_expr",
    "counted_string_expr",
    "dfa_string_expr",
    "dfa_expr",
]

# States of a (minimal) automaton turned into grammar rules: beyond this the grammar
# compiles too slowly (10,000 states: about 4 s with a 128k vocabulary).
MAX_GRAMMAR_STATES = 10_000

_INLINE_DEPTH = 16
# The code points a JSON string spells as one character: lone surrogates have no such
# spelling.
WRITABLE = Dfa([((0, 0xD7FF, 0), (0xE000, MAX_CODEPOINT, 0))], [True])


def dfa_string_expr(
    conv: ConversionContext, dfa: Dfa, base: str = "str", writable: bool = False
) -> Expr | None:
    """A JSON string literal (quotes included) whose decoded content ``dfa`` accepts.

    Each character is matched in every encoding JSON allows (raw, short escape,
    ``\\uXXXX``, surrogate pair). States that are shared, on a cycle of more than one
    state, or deep in a chain become rules ``{base}_dfa...`` of ``conv``; a state's loop
    on itself becomes a repetition. ``writable``: ``dfa`` is already
    ``d.intersect(WRITABLE)`` of some ``d`` (minimal and numbered as a product is), so
    that product is not taken again.

    Returns
    -------
    Expr or None
        ``None`` when the language is empty.

    Raises
    ------
    DfaLimitError
        The minimal automaton has more than :data:`MAX_GRAMMAR_STATES` states.
    """
    # Written once per language and conversion: the same automaton (an object's undeclared
    # keys, a pattern) comes back for every copy of an inline subschema and for equal
    # property sets, and each copy was written out as rules again (half the frontend and
    # grammar of some schemas). Equal automata accept equal languages, so the one literal
    # serves every caller; share_rules hoists it into one rule.
    memo = conv.string_exprs
    key = (base, writable, tuple(dfa.trans), tuple(dfa.accept))
    got = memo.get(key, _MISSING)
    if got is not _MISSING:
        return got  # type: ignore[return-value]
    # Lone surrogates have no JSON spelling that decodes to one character.
    d = dfa if writable else dfa.intersect(WRITABLE)
    got = memo[key] = string_of(dfa_expr(conv, d, base, _rule_encoder(conv)))
    return got


def counted_string_expr(
    conv: ConversionContext, dfa: Dfa, lo: int, hi: int | None, base: str = "str"
) -> Expr | None | NotCounted:
    """A JSON string literal whose decoded content ``dfa`` accepts and has ``lo`` to
    ``hi`` characters, with the length bound as a counted repetition of the automaton's
    one loop (see :meth:`~treegram.ir.Dfa.loop_split`; one repetition per pair of prefix
    and suffix lengths) rather than a state per length:
    ``^[a-z0-9 ]*$`` with ``maxLength: 10000`` is ``"[a-z0-9 ]{0,10000}"``, which the
    automaton builder turns into a few doubling block rules.

    Returns
    -------
    Expr, None or NOT_COUNTED
        ``None`` when no string qualifies; :data:`NOT_COUNTED` when the automaton has no
        such form (the caller intersects it with the length automaton instead).
    """
    d = dfa.intersect(WRITABLE)
    if d.is_empty():
        return None
    split = d.loop_split()
    if split is None:
        return NOT_COUNTED
    encode = _string_encoder(conv)
    parts = []
    span = split.avoid.length_range()  # finite: the avoiding strings never loop
    if span is not None and span[0] <= (span[1] if hi is None else hi) and span[1] >= lo:  # type: ignore[operator]
        top = span[1] if hi is None else min(hi, span[1])  # type: ignore[type-var]
        parts.append(dfa_expr(conv, split.avoid.with_length(lo, top), base, encode))
    step = encode(split.loop)
    prefixes = {
        a: dfa_expr(conv, split.prefix.with_length(a, a), base, encode)
        for a in split.prefix_lengths
    }
    suffixes = {
        b: dfa_expr(conv, split.suffix.with_length(b, b), base, encode)
        for b in split.suffix_lengths
    }
    for a, prefix in prefixes.items():
        for b, suffix in suffixes.items():
            least = max(0, lo - a - b)
            most = None if hi is None else hi - a - b
            if step is None or prefix is None or suffix is None:
                continue
            if most is None or least <= most:
                parts.append(seq(prefix, Repeat(step, least, most), suffix))
    parts = [p for p in parts if p is not None]
    return string_of(alt(*parts)) if parts else None


def bounded_string_expr(
    conv: ConversionContext, dfa: Dfa, lo: int, hi: int, base: str = "str"
) -> Expr | None:
    """A JSON string literal whose decoded content ``dfa`` accepts and has ``lo`` to
    ``hi`` characters, with the upper bound kept by the matcher rather than by a state per
    length: the content is a rule of ``conv`` counted to ``hi`` characters
    (``conv.counted_rules``, :attr:`~treegram.ir.Rule.max_string_chars`), whose automaton
    is ``dfa`` with the lower bound alone. ``format: email`` with ``maxLength: 1024`` is
    an automaton of some 40 states instead of 40,000.

    Returns
    -------
    Expr or None
        ``None`` when no string qualifies.

    Raises
    ------
    DfaLimitError
        The automaton with the lower bound has more than :data:`MAX_GRAMMAR_STATES` states.
    """
    d = (dfa if lo == 0 else dfa.with_length(lo, None)).intersect(WRITABLE)
    span = d.length_range()
    if d.is_empty() or span is None or span[0] > hi:
        return None
    name = conv.new_rule(f"{base}_counted")
    conv.rules[name] = dfa_expr(conv, d, base, _string_encoder(conv)) or EMPTY
    conv.counted_rules[name] = hi
    return string_of(RuleRef(name))


class NotCounted:
    """The type of :data:`NOT_COUNTED`."""


NOT_COUNTED = NotCounted()


def _string_encoder(conv: ConversionContext):
    """``encoded_class`` with one result per class for the whole conversion, shared by
    identity: the same class in many automata (every object's "any key but the declared
    names" excludes its own first letters) is then one node, hoisted into one rule by
    ``share_rules``, instead of a fresh copy per automaton that every later stage walks
    again."""
    cache = conv.string_classes

    def encode(ranges: tuple) -> Expr | None:
        got = cache.get(ranges, _MISSING)
        if got is _MISSING:
            # once per class and conversion: the cached build itself, no copy (the key is
            # the class as encoded_class caches it, so no build is handed out twice)
            key = tuple(map(tuple, ranges))
            got = cache.get(key, _MISSING)
            if got is _MISSING:
                got = cache[key] = encoded_class(key, once=True)
            cache[ranges] = got
        return got  # type: ignore[return-value]

    return encode


_MISSING = object()


def _rule_encoder(conv: ConversionContext):
    """:func:`_string_encoder` with every encoding that ``share_rules`` would hoist if
    shared (``HOIST_SIZE`` nodes or more as a tree) made a rule ``str_class...`` of
    ``conv`` up front, once per class and conversion, and handed out as a reference.

    Such encodings are the ``\\u`` spellings of a class that leaves out a few ASCII
    characters: at every state of an object's undeclared-key automaton, the characters
    that leave the declared names. Hoisted later, each one made ``share_rules`` rebuild
    every node above it, nearly the whole key literal (10,400 of 13,100 nodes in a
    Kubernetes schema), and the automaton builder then flattened the rebuilt copies."""
    plain = _string_encoder(conv)
    cache = conv.string_classes

    def encode(ranges: tuple) -> Expr | None:
        got = plain(ranges)
        if got is None or type(got) is RuleRef:
            return got
        key = (_AS_RULE, id(got))  # the encoding is kept alive by the plain entry
        ref = cache.get(key, _MISSING)
        if ref is _MISSING:
            ref = got
            if _tree_size(got, HOIST_SIZE) >= HOIST_SIZE:
                name = conv.new_rule("str_class")
                conv.rules[name] = got
                ref = RuleRef(name)
            cache[key] = ref
        return ref  # type: ignore[return-value]

    return encode


_AS_RULE = "as rule"  # tags the rule forms in ``conv.string_classes``


def dfa_expr(conv: ConversionContext, d: Dfa, base: str, encode) -> Expr | None:
    """Grammar IR for the strings ``d`` accepts, each code point range written as
    ``encode(ranges)`` (an expression, or ``None`` when the range cannot be written).

    States that are shared, on a cycle of more than one state, or deep in a chain become
    rules ``{base}_dfa...`` of ``conv``; a state's loop on itself becomes a repetition.

    Raises
    ------
    DfaLimitError
        The automaton has more than :data:`MAX_GRAMMAR_STATES` states.
    """
    if d.is_empty():
        return None
    n = len(d)
    if n > MAX_GRAMMAR_STATES:
        raise DfaLimitError(
            f"the string automaton has {n} states, more than "
            f"{MAX_GRAMMAR_STATES} a grammar is built from"
        )
    groups, indeg, cyclic = _shape(d)
    # each group's ranges (a tuple the shape holds, alive meanwhile) encoded once, found
    # by identity: a tuple's hash is computed anew at every lookup
    enc_cache: dict[tuple, Expr | None] = {}
    by_id: dict[int, Expr | None] = {}

    def enc(ranges: tuple) -> Expr | None:
        got: object = by_id.get(id(ranges), _MISSING)
        if got is _MISSING:
            got = enc_cache.get(ranges, _MISSING)
            if got is _MISSING:
                got = enc_cache[ranges] = encode(ranges)
            by_id[id(ranges)] = got  # type: ignore[assignment]
        return got  # type: ignore[return-value]

    names: dict[int, str] = {}
    calls: dict[int, RuleRef] = {}  # one reference node per state: later passes walk it once

    # steps and loop rules shared across the conversion's automata; a writer's context
    # without the memo (structural tags, rule attributes) shares them in this one
    memo = getattr(conv, "string_exprs", None)
    if memo is None:
        memo = {}

    loops: set[int] = set()  # the states written as loop rules (see _loop_rule)

    def ref(s: int):
        got = calls.get(s)
        if got is None:
            g = groups[s]
            if d.accept[s] and len(g) == 1 and s in g:  # every string of some characters
                got = calls[s] = _loop_rule(conv, memo, base, enc(g[s]))
                loops.add(s)
                return got
            names[s] = conv.new_rule(f"{base}_dfa")
            pending.append(s)
            got = calls[s] = RuleRef(names[s])
        return got

    def body(s: int, depth: int) -> Expr | None:
        g = groups[s]
        step = enc(g[s]) if s in g else None
        loop = Repeat(step, 0, None) if step is not None else None
        exits: list[Expr | None] = [EMPTY] if d.accept[s] else []
        for t, ranges in g.items():
            if t == s:
                continue
            e = enc(ranges)
            if e is None:  # e.g. a surrogate code point in a string
                continue
            if indeg[t] > 1 or cyclic[t] or depth >= _INLINE_DEPTH:
                nxt = ref(t)
                if t not in loops:
                    exits.append(_seq2(e, nxt))
                    continue
                # a step into a loop rule: one node per conversion (the step out of the
                # declared names into "any further characters", at every state of every
                # object's key automaton, repeats a few classes)
                key = (_STEP, id(e), id(nxt))
                got = memo.get(key)
                if got is None:
                    got = memo[key] = _seq2(e, nxt)
                exits.append(got)
            else:
                exits.append(_seq2(e, body(t, depth + 1)))
        rest = alt(*exits)
        return rest if loop is None else seq(loop, rest)

    pending: list[int] = []
    top = ref(0) if cyclic[0] else body(0, 0)
    while pending:
        s = pending.pop()
        conv.rules[names[s]] = body(s, 0)
    body = None  # type: ignore[assignment]  # recursive: its cell would keep it (a cycle)
    return top


_STEP = "step"  # tags a step into a loop rule in the writer's memo
_LOOP = "loop"  # tags the rule of a state looping on itself alone (see _loop_rule)


def _loop_rule(conv: ConversionContext, memo: dict, base: str, step: Expr | None) -> Expr:
    """A reference to the rule ``{base}_dfa...`` for ``step`` repeated any number of
    times (a final state whose only transitions loop on itself), one rule per step and
    conversion: the automata of all objects' undeclared keys end in such a state (any
    further characters once a key has left the declared names), so it is written once
    instead of once per object. ``step`` is an encoding the conversion keeps, ``memo``
    the writer's (see :func:`dfa_expr`)."""
    key = (_LOOP, base, id(step))
    got = memo.get(key)
    if got is None:
        name = conv.new_rule(f"{base}_dfa")
        conv.rules[name] = EMPTY if step is None else Repeat(step, 0, None)
        got = memo[key] = RuleRef(name)
    return got


# The shapes of the last automata written (see _shape): automata are immutable, and the
# kept ones (the undeclared keys of _keys.undeclared_keys) are written again by every
# object and grammar that holds them. Each entry keeps its automaton alive, so its id is
# not reused meanwhile.
_SHAPES: dict[int, tuple] = {}
_SHAPES_LIMIT = 512
_SHAPES_STATES = 50_000  # states of all kept automata together (memory: ~0.5 kB a state)
_SHAPE_STATES = 4096  # larger automata are rare and their shapes large: not kept
_kept_states = [0]  # states of the automata in _SHAPES


def _seq2(a: Expr, b: Expr | None) -> Expr | None:
    """``seq(a, b)`` for an expression ``a``: the two concatenated, nested sequences
    flattened (one call per transition of an automaton written as rules)."""
    if b is None:
        return None
    items = (a.items if type(a) is Seq else (a,)) + (b.items if type(b) is Seq else (b,))  # type: ignore[union-attr]
    return items[0] if len(items) == 1 else Seq(items)


def _shape(d: Dfa) -> tuple[list[dict[int, tuple[tuple[int, int], ...]]], list[int], list[bool]]:
    """Per state of ``d``, its transitions grouped by target (target -> ranges, in row
    order), the number of other states with an edge to it, and whether it lies on a cycle
    through another state. Read-only for the caller: kept for the last automata asked."""
    got = _SHAPES.get(id(d))
    if got is not None and got[0] is d:
        return got[1]
    groups: list[dict[int, tuple[tuple[int, int], ...]]] = []
    indeg = [0] * len(d.trans)
    for row in d.trans:
        lists: dict[int, list[tuple[int, int]]] = {}
        for lo, hi, t in row:
            ranges = lists.get(t)
            if ranges is None:
                lists[t] = [(lo, hi)]
            else:
                ranges.append((lo, hi))
        groups.append({t: tuple(r) for t, r in lists.items()})
    for s, g in enumerate(groups):
        for t in g:
            if t != s:
                indeg[t] += 1
    shape = (groups, indeg, _on_cycles(groups))
    n = len(d.trans)
    if n <= _SHAPE_STATES:
        if len(_SHAPES) >= _SHAPES_LIMIT or _kept_states[0] + n > _SHAPES_STATES:
            _SHAPES.clear()
            _kept_states[0] = 0
        _SHAPES[id(d)] = (d, shape)
        _kept_states[0] += n
    return shape


def _on_cycles(groups: list[dict[int, tuple[tuple[int, int], ...]]]) -> list[bool]:
    """Per state, whether it lies on a cycle through another state."""
    out = [False] * len(groups)
    for comp in cycles_of_two_or_more([[t for t in g if t != v] for v, g in enumerate(groups)]):
        for w in comp:
            out[w] = True
    return out
