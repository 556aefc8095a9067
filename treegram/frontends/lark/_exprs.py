"""Rewriting of IR expressions for the Lark lowering: renaming rules, and placing or
dropping the ``%ignore`` placeholder."""

from __future__ import annotations

from collections.abc import Mapping

from treegram.ir import Bytes, Choice, Expr, Repeat, Rule, RuleRef, Seq, renamed_refs

__all__ = ["rename", "rename_one", "renamed_lookahead", "strip_ignore"]


def rename(expr: Expr, names: Mapping[str, str]) -> Expr:
    return renamed_refs(expr, names.__getitem__)


def strip_ignore(expr: Expr, name: str) -> Expr:
    """``expr`` without references to the ignore rule (there was no %ignore)."""
    if expr == RuleRef(name):
        return Bytes(b"")
    if isinstance(expr, Seq):
        items = tuple(strip_ignore(i, name) for i in expr.items if i != RuleRef(name))
        return Bytes(b"") if not items else items[0] if len(items) == 1 else Seq(items)
    if isinstance(expr, Choice):
        return Choice(tuple(strip_ignore(i, name) for i in expr.items))
    if isinstance(expr, Repeat):
        return Repeat(strip_ignore(expr.item, name), expr.min, expr.max)
    return expr


def renamed_lookahead(rule: Rule, names: Mapping[str, str]) -> Expr | None:
    return None if rule.lookahead is None else rename(rule.lookahead, names)


def rename_one(expr: Expr, old: str, new: str) -> Expr:
    if isinstance(expr, RuleRef):
        return RuleRef(new) if expr.name == old else expr
    if isinstance(expr, (Seq, Choice)):
        return type(expr)(tuple(rename_one(i, old, new) for i in expr.items))
    if isinstance(expr, Repeat):
        return Repeat(rename_one(expr.item, old, new), expr.min, expr.max)
    return expr
