"""Turn the converter's expression DAG into rules.

The converter shares sub-expressions by object identity (for example the tail of an
object after its i-th property). The automaton builder expands a rule body as a tree, so
a node reached along many paths would be copied once per path. This pass hoists every
node that is referenced more than once *and* is large after hoisting its own children
into a rule of its own; small shared nodes (a separator, a short key) stay inline.
"""

from __future__ import annotations

from collections.abc import Mapping

from treegram.ir import (
    Choice,
    Expr,
    GrammarIR,
    IrFacts,
    Repeat,
    Rule,
    RuleRef,
    Seq,
    record_ir_facts,
)

__all__ = ["share_rules", "mark_small"]

HOIST_SIZE = 48

# Attribute of a small node shared by many grammars (see :func:`mark_small`).
_SMALL_INFO = "_share_info"


def mark_small(node: Expr) -> None:
    """Record on ``node`` (an inner node smaller than ``HOIST_SIZE`` nodes as a tree, whose
    inner children are marked already) what :func:`share_rules` computes for it: size,
    depth as built, the most copies nested repetitions unroll it into, and the largest of
    those over the repetitions inside it (0: none). No node below it can be hoisted (each
    is smaller still), so these depend on its structure alone, and ``share_rules`` reads
    them instead of walking the subtree again in every grammar that holds it (the
    ``\\u`` escapes of the JSON Schema frontend's encoded classes, one object per
    structure across all grammars)."""
    if _SMALL_INFO in node.__dict__:
        return
    t = type(node)
    children = (node.item,) if t is Repeat else node.items  # type: ignore[union-attr]
    size, deepest, most, longest = 1, 1, 1, 0
    for c in children:
        got = c.__dict__.get(_SMALL_INFO) if type(c) in (Seq, Choice, Repeat) else None
        if got is None:  # a leaf
            size += 1
            continue
        size += got[0]
        deepest = max(deepest, got[1])
        most = max(most, got[2])
        longest = max(longest, got[3])
    if t is Repeat:
        most *= max(node.min if node.max is None else node.max, 1)  # type: ignore[union-attr]
        longest = max(longest, most)
    object.__setattr__(node, _SMALL_INFO, (size, 1 + deepest if children else 1, most, longest))


def share_rules(
    rules: dict[str, Expr],
    root: str,
    unique: set[str] | frozenset[str] = frozenset(),
    counted: Mapping[str, int] | None = None,
) -> GrammarIR:
    """Build the grammar, hoisting large shared nodes into ``shared_N`` rules.

    Parameters
    ----------
    rules : dict of str to Expr
        Rule bodies in definition order.
    root : str
        Name of the root rule.
    unique : set of str
        The rules to mark :attr:`~treegram.ir.Rule.unique`.
    counted : mapping of str to int, optional
        The rules to give :attr:`~treegram.ir.Rule.max_string_chars`, and their bounds.

    Returns
    -------
    GrammarIR
    """
    counted = counted or {}
    refs: dict[int, int] = {}  # inner nodes: references from parents and rule bodies
    order: list[Expr] = []  # inner nodes in post-order, each once
    seen: set[int] = set()
    # what ir_facts would find in the result, gathered on the way: depth as built (in
    # ``info``), referenced rule names, the most copies nested repetitions unroll
    ref_names: set[str] = set()
    small: list[Expr] = []  # marked nodes (mark_small), each once: not walked
    for body in rules.values():
        _visit(body, refs, order, seen, ref_names, small)
    as_body: dict[int, int] = {}  # how many rule bodies each inner node is
    for body in rules.values():
        as_body[id(body)] = as_body.get(id(body), 0) + 1
    # per inner node: size after hoisting, depth as built, the most copies nested
    # repetitions unroll it into, and whether a node below it is hoisted (it is rebuilt);
    # a hoisted node reads as the reference that replaces it, (1, 1, 1, True); a leaf has
    # no entry and reads as (1, 1, 1, False)
    info: dict[int, tuple[int, int, int, bool]] = {}
    hoisted: dict[int, str] = {}
    lifted: list[Expr] = []  # the hoisted nodes, in order
    lifted_depth: dict[int, int] = {}  # their depths as built
    # nodes with a hoisted node below them, rebuilt with references in its place (in the
    # same post-order pass: their children are final by then), and what replaces a node
    # inside its parents (the reference for a hoisted one, the rebuilt node otherwise)
    rebuilt: dict[int, Expr] = {}
    replace: dict[int, Expr] = {}
    names = set(rules)
    longest = 0
    as_ref = (1, 1, 1, True)
    for node in small:
        size, depth, most, inside = node.__dict__[_SMALL_INFO]
        info[id(node)] = (size, depth, most, False)
        longest = max(longest, inside)
    info_get, replace_get = info.get, replace.get
    for node in order:
        t = type(node)
        children = (node.item,) if t is Repeat else node.items  # type: ignore[union-attr]
        s = 1
        deepest = 1  # a child is at least one level
        below = False  # a hoisted or rebuilt child
        most = 1
        for c in children:
            got = info_get(id(c))
            if got is None:  # a leaf
                s += 1
                continue
            cs, cd, cc, cb = got
            s += cs
            if cd > deepest:
                deepest = cd
            if cb:
                below = True
            if cc > most:
                most = cc
        if t is Repeat:
            most *= max(node.min if node.max is None else node.max, 1)  # type: ignore[union-attr]
            longest = max(longest, most)
        nid = id(node)
        if below:
            if t is Repeat:
                c = node.item  # type: ignore[union-attr]
                new: Expr = Repeat(replace_get(id(c), c), node.min, node.max)  # type: ignore[union-attr]
            else:
                items = tuple([replace_get(id(c), c) for c in children])
                new = Seq(items) if t is Seq else Choice(items)
            rebuilt[nid] = replace[nid] = new
        if s >= HOIST_SIZE and refs[nid] > 1:
            name = f"shared_{len(hoisted)}"
            while name in names:
                name += "_"
            names.add(name)
            hoisted[nid] = name
            replace[nid] = RuleRef(name)
            lifted.append(node)
            lifted_depth[nid] = 1 + deepest if children else 1
            if refs[nid] > as_body.get(nid, 0):  # referenced by a parent
                ref_names.add(name)
            info[nid] = as_ref
        else:
            info[nid] = (s, 1 + deepest if children else 1, most, below)
    out = [
        Rule(
            name,
            rebuilt.get(id(body), body),
            unique=name in unique,
            max_string_chars=counted.get(name),
        )
        for name, body in rules.items()
    ]
    for node in lifted:
        out.append(Rule(hoisted[id(node)], rebuilt.get(id(node), node)))
    ir = GrammarIR(tuple(out), root)
    # depth as built of each rule body (a hoisted one reads as a reference in ``info``)
    tops = list(lifted_depth.values())
    for body in rules.values():
        top = lifted_depth.get(id(body))
        tops.append(top if top is not None else info.get(id(body), (1, 1))[1])
    record_ir_facts(ir, IrFacts(max(tops, default=0), frozenset(ref_names), longest))
    return ir


def _visit(
    root: Expr,
    refs: dict[int, int],
    order: list,
    seen: set[int],
    ref_names: set[str],
    small: list,
) -> None:
    """Count references of inner nodes (one per parent, counted when the parent is first
    seen, and one per rule body) and append every inner node not seen before to ``order``
    in post-order (children last to first), without recursion; add the names leaves refer
    to to ``ref_names``. Leaves are neither counted nor ordered: they are never hoisted,
    and skipping them halves the walk. A node marked by :func:`mark_small` goes to
    ``small`` the first time it is seen, its subtree unwalked (it holds no reference)."""
    t = type(root)
    if t is not Seq and t is not Choice and t is not Repeat:
        if t is RuleRef:
            ref_names.add(root.name)  # type: ignore[union-attr]
        return
    refs[id(root)] = refs.get(id(root), 0) + 1
    if hasattr(root, _SMALL_INFO):
        if id(root) not in seen:
            seen.add(id(root))
            small.append(root)
        return
    stack: list = [root]
    # the loop runs once per inner node of the grammar: methods read once
    push, pop, emit, refs_get, seen_add = stack.append, stack.pop, order.append, refs.get, seen.add
    while stack:
        node = pop()
        if node is _DONE:  # the node below has all its children in order
            emit(pop())
            continue
        nid = id(node)
        if nid in seen:
            continue
        seen_add(nid)
        push(node)
        push(_DONE)
        # the last child is expanded first
        for c in (node.item,) if type(node) is Repeat else node.items:
            t = type(c)
            if t is Seq or t is Choice or t is Repeat:
                cid = id(c)
                refs[cid] = refs_get(cid, 0) + 1
                if cid not in seen:
                    # not ``c.__dict__``: reading it makes the instance a dict of its own
                    # (a tracked object more per node for the collector, and its memory)
                    if hasattr(c, _SMALL_INFO):
                        seen_add(cid)
                        small.append(c)
                    else:
                        push(c)
            elif t is RuleRef:
                ref_names.add(c.name)  # type: ignore[union-attr]


_DONE = object()  # stack marker in _visit
