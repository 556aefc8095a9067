"""Shared helpers for tests that look at the shape of a JSON schema's grammar IR: schemas
of many objects with undeclared keys, and the inner nodes of an IR."""

from __future__ import annotations

from treegram.ir import Choice, Repeat, Seq


def key_objects(n: int) -> dict:
    """A schema of ``n`` objects that each declare ``xa`` and a name of their own
    (``xb<i>``) and admit other keys with string values."""
    props = {
        f"o{i}": {
            "type": "object",
            "properties": {"xa": {"type": "integer"}, f"xb{i}": {"type": "integer"}},
            "additionalProperties": {"type": "string"},
        }
        for i in range(n)
    }
    return {"type": "object", "properties": props}


def inner_nodes(ir) -> list:
    """The distinct ``Seq``, ``Choice`` and ``Repeat`` nodes of ``ir``'s rule bodies (by
    identity: a node shared by several parents counts once)."""
    out, seen, stack = [], set(), [r.body for r in ir.rules]
    while stack:
        node = stack.pop()
        if id(node) in seen or not isinstance(node, (Seq, Choice, Repeat)):
            continue
        seen.add(id(node))
        out.append(node)
        stack.extend((node.item,) if isinstance(node, Repeat) else node.items)
    return out
