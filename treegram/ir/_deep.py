"""Nesting limits of the grammar frontends, and a thread deep enough to honour them.

The frontends (JSON Schema, EBNF, regex), the printer and the automaton builder walk
nested input recursively. Instead of failing with ``RecursionError`` at Python's default
limit (about 1,000 frames, which a schema nested a few hundred levels deep already
exceeds), these stages run in a helper thread with a large stack and a raised recursion
limit, and every input is checked against documented limits *before* its recursion
could get near that raised limit:

- :data:`MAX_NESTING_DEPTH` (1,000): nested JSON schemas (each object, array, combinator
  branch or ``$ref`` followed counts one level; the schema document itself may nest at
  most three times as many JSON levels);
- :data:`MAX_EXPR_DEPTH` (20,000): nesting of grammar IR expressions, whichever frontend
  built them (a 300-digit numeric bound nests a few hundred deep), and of EBNF
  parentheses, so that every printed grammar parses back.

(Regex groups keep their own limit of 100, checked by the regex parser.)

Going past a limit raises :class:`treegram.errors.GrammarError` naming the limit.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from treegram.errors import GrammarError

__all__ = [
    "MAX_NESTING_DEPTH",
    "MAX_EXPR_DEPTH",
    "SHALLOW_DEPTH",
    "run_deep",
    "run_sized",
    "with_frame_room",
    "expr_depth",
    "ir_depth",
    "ir_facts",
    "record_ir_facts",
    "IrFacts",
    "expr_depth_error",
]

MAX_NESTING_DEPTH = 1000
MAX_EXPR_DEPTH = 20000

# Python frames the deep thread may use: generous for MAX_EXPR_DEPTH levels of the
# printer / builder recursions (a few frames each) and MAX_NESTING_DEPTH levels of the
# JSON Schema converter (a few dozen frames each).
_RECURSION_LIMIT = 150_000
# Virtual size of the helper thread's stack; pages are only committed when touched.
_STACK_BYTES = 1 << 30

T = TypeVar("T")

_local = threading.local()
_lock = threading.Lock()
_active = 0
_saved_limit = 0


def _enter() -> None:
    global _active, _saved_limit
    with _lock:
        if _active == 0:
            _saved_limit = sys.getrecursionlimit()
            if _saved_limit < _RECURSION_LIMIT:
                sys.setrecursionlimit(_RECURSION_LIMIT)
        _active += 1


def _leave() -> None:
    global _active
    with _lock:
        _active -= 1
        # Restore only what we changed (someone may have raised it further meanwhile).
        if _active == 0 and sys.getrecursionlimit() == _RECURSION_LIMIT > _saved_limit:
            sys.setrecursionlimit(_saved_limit)


def run_deep(fn: Callable[..., T], *args, **kwargs) -> T:
    """Call ``fn(*args, **kwargs)`` on a helper thread with a 1 GiB stack and a raised
    recursion limit, and return its result or raise its exception.

    Called from such a thread already, ``fn`` runs inline. While any call is in flight
    the interpreter-wide recursion limit is raised to 150,000 (Python has no per-thread
    limit); it is restored when the last one returns. A ``RecursionError`` that still
    escapes (the limits above are meant to prevent it) becomes a :class:`GrammarError`.
    """
    if getattr(_local, "deep", False):
        return fn(*args, **kwargs)
    box: dict = {}

    def target() -> None:
        _local.deep = True
        try:
            box["value"] = with_frame_room(fn, *args, **kwargs)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller below
            box["error"] = exc

    _enter()
    try:
        worker = _start(target)
        if worker is not None:
            worker.join()
    finally:
        _leave()
    if worker is None:  # no large-stack thread here: the caller's stack, default limit
        try:
            box["value"] = with_frame_room(fn, *args, **kwargs)
        except RecursionError as exc:
            box["error"] = exc
    if "error" in box:
        exc = box.pop("error")
        if isinstance(exc, RecursionError):
            raise GrammarError(
                f"grammar too deeply nested for {getattr(fn, '__name__', 'compilation')} "
                f"(limits: MAX_NESTING_DEPTH={MAX_NESTING_DEPTH}, "
                f"MAX_EXPR_DEPTH={MAX_EXPR_DEPTH})"
            ) from None
        raise exc
    return box["value"]


def run_sized(deep: bool, fn: Callable[..., T], *args) -> T:
    """``fn(*args)`` on the caller's stack when ``deep`` is false (the input is known to
    be shallow), else through :func:`run_deep`; a caller already deep in its own stack
    that overflows it gets the deep thread too. ``fn`` must have no side effects."""
    if not deep:
        try:
            return fn(*args)
        except RecursionError:
            pass
    return run_deep(fn, *args)


# CPython (3.11 on) keeps a thread's Python frames in chunks of 16 KiB, mapped when a call
# finds no room left in the current one and unmapped as soon as that call returns: a
# recursion that goes back and forth across a chunk's end maps and unmaps a chunk each
# time (vtesttree-schema.json's conversion on the deep thread: 17,000 page faults, over
# 100 ms of system time, half its compile). A frame that reserves this many slots gets a
# chunk of its own of 2 MiB, with about 1 MiB free above it, in which a compile's whole
# recursion runs; the pages it never reaches are never touched.
_FRAME_ROOM_SLOTS = 1 << 17


def with_frame_room(fn: Callable[..., T], *args, **kwargs) -> T:
    """Call ``fn(*args, **kwargs)`` from a frame that reserves room for a deep recursion
    on the interpreter's frame stack, so that the recursion does not map and unmap a
    frame-stack chunk at every crossing of a chunk's end (a cost of system time, never of
    results). Each call maps the room afresh and faults in the pages it uses (about
    0.1 ms): :func:`run_deep` uses it, for work that is deep and large; a small grammar
    on the caller's stack reuses the chunks that stack already has."""
    return fn(*args, **kwargs)


# A larger value stack than the body needs is safe: the reserved slots are never used.
with_frame_room.__code__ = with_frame_room.__code__.replace(co_stacksize=_FRAME_ROOM_SLOTS)


def _start(target) -> threading.Thread | None:
    """Start ``target`` on a thread with the largest stack the platform grants."""
    with _lock:
        old = threading.stack_size()
        try:
            for size in (_STACK_BYTES, _STACK_BYTES // 4):
                try:
                    threading.stack_size(size)
                    worker = threading.Thread(target=target, name="treegram-deep", daemon=True)
                    worker.start()
                    return worker
                except (RuntimeError, ValueError):  # address space or platform limits
                    continue
            return None
        finally:
            threading.stack_size(old)


def expr_depth_error(where: str) -> GrammarError:
    """The error for an expression nested deeper than :data:`MAX_EXPR_DEPTH`."""
    return GrammarError(
        f"{where}: grammar expressions nested deeper than MAX_EXPR_DEPTH={MAX_EXPR_DEPTH} levels"
    )


# IR at most this deep is walked on the caller's own stack.
SHALLOW_DEPTH = 150


def expr_depth(expr, memo: dict[int, int] | None = None) -> int:
    """Nesting depth of an IR expression (a leaf is 1), without recursion.

    Shared sub-expressions are measured once (``memo`` is keyed by ``id``)."""
    return _walk(expr, {} if memo is None else memo, set(), [0], {})


def _walk(
    expr, memo: dict[int, int], refs: set[str], longest: list[int], copies: dict[int, int]
) -> int:
    """:func:`expr_depth`, also adding the names of referenced rules to ``refs`` and
    raising ``longest[0]`` to the largest number of copies a repetition unrolls anything
    into (the product of the bounds of nested repetitions; a bound is ``max``, or ``min``
    when unbounded). ``copies`` holds that number per node."""
    from treegram.ir._nodes import Choice, Repeat, RuleRef, Seq

    stack = [expr]
    while stack:
        node = stack.pop()
        if node is _DONE:  # the node below has all its children measured
            node = stack.pop()
            children = (node.item,) if type(node) is Repeat else node.items
            deepest = 0
            most = 1
            for c in children:
                d = memo[id(c)]
                if d > deepest:
                    deepest = d
                if copies[id(c)] > most:
                    most = copies[id(c)]
            if type(node) is Repeat:
                most *= max(node.min if node.max is None else node.max, 1)
                if most > longest[0]:
                    longest[0] = most
            memo[id(node)] = 1 + deepest
            copies[id(node)] = most
            continue
        key = id(node)
        if key in memo:  # measured since it was pushed (shared below another parent)
            continue
        t = type(node)
        if t is Seq or t is Choice:
            children = node.items
            leaves = node.__dict__.get("_leaf_refs")
            if leaves is None:  # found once per node, kept on it (nodes are immutable)
                leaves = _leaf_refs(children, Seq, Choice, Repeat, RuleRef)
                object.__setattr__(node, "_leaf_refs", leaves)
            if leaves is not False:  # only leaves below (free text's byte classes): depth 2
                refs.update(leaves)
                memo[key] = 2 if children else 1
                copies[key] = 1
                continue
        elif t is Repeat:
            children = (node.item,)
        else:
            if t is RuleRef:
                refs.add(node.name)
            memo[key] = 1
            copies[key] = 1
            continue
        stack.append(node)  # children first, then this node again
        stack.append(_DONE)
        for c in children:
            if id(c) not in memo:
                stack.append(c)
    return memo[id(expr)]


_DONE = object()  # stack marker in _walk


def _leaf_refs(children, seq, choice, repeat, rule_ref):
    """False when some child is a sequence, choice or repetition; else the names of the
    rules the children reference (a tuple)."""
    names = []
    for c in children:
        t = type(c)
        if t is seq or t is choice or t is repeat:
            return False
        if t is rule_ref:
            names.append(c.name)
    return tuple(names)


@dataclass(frozen=True)
class IrFacts:
    """What one walk over a :class:`GrammarIR` finds (see :func:`ir_facts`).

    Attributes
    ----------
    depth : int
        The deepest rule body or lookahead (see :func:`expr_depth`).
    ref_names : frozenset of str
        Every rule name that a rule body or lookahead references.
    longest_repeat : int
        The largest number of copies repetitions unroll anything into: the product of the
        bounds (``max``, or ``min`` when unbounded) of nested repetitions; 0 without
        repetitions.
    """

    depth: int
    ref_names: frozenset[str]
    longest_repeat: int


def ir_facts(ir) -> IrFacts:
    """Depth, referenced rules and longest repetition of ``ir``, in one walk that visits
    each shared node once; computed once per IR (the IR is immutable; validation, printer
    and builder ask)."""
    cached = ir.__dict__.get("_facts")
    if cached is not None:
        return cached
    memo: dict[int, int] = {}
    copies: dict[int, int] = {}
    refs: set[str] = set()
    longest = [0]
    depth = 0
    for rule in ir.rules:
        depth = max(depth, _walk(rule.body, memo, refs, longest, copies))
        if rule.lookahead is not None:
            depth = max(depth, _walk(rule.lookahead, memo, refs, longest, copies))
    facts = IrFacts(depth, frozenset(refs), longest[0])
    object.__setattr__(ir, "_facts", facts)
    return facts


def record_ir_facts(ir, facts: IrFacts) -> None:
    """Store ``facts`` as what :func:`ir_facts` returns for ``ir``, for a builder that
    found them while building ``ir`` (they must be what the walk would find)."""
    object.__setattr__(ir, "_facts", facts)


def ir_depth(ir) -> int:
    """The deepest rule body or lookahead of a :class:`GrammarIR` (see :func:`expr_depth`
    and :func:`ir_facts`)."""
    return ir_facts(ir).depth
