"""xgrammar's rule attributes ``name[lazy]``, ``name[max_chars=N]`` and
``name[temperature=T]`` (EBNF and Lark).

``temperature`` does not change the language: it is kept on the rule
(:attr:`~treegram.ir.Rule.temperature`) for the matcher. ``lazy`` and ``max_chars``
change the rule's language, so they are applied to the IR: the rule body (with the
rules it references inlined; they must not be recursive) becomes a code point automaton
(:class:`~treegram.ir.Dfa`), which is restricted and written back as
helper rules.

``lazy``
    The rule matches as little as it can: it keeps the strings none of whose proper
    prefixes it matches (the automaton loses every transition out of an accepting
    state), as xgrammar 0.2.8 does.
``max_chars=N``
    The rule keeps the strings of at most ``N`` characters (code points). xgrammar 0.2.8
    only counts some of the characters (in measurements, a literal alternative or text
    matched by a referenced rule could run past the bound); treegram bounds the rule's
    whole text.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import replace

from treegram.ir import Bytes, CharClass, Choice, Expr, Repeat, Rule, RuleRef, Seq

__all__ = ["RULE_ATTRIBUTES", "parse_rule_attributes", "apply_rule_attributes"]

#: Attribute names that are applied; others are refused by the parsers.
RULE_ATTRIBUTES = frozenset({"lazy", "max_chars", "temperature"})

_NUMBER = re.compile(r"[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)?")


class RuleAttributeError(ValueError):
    """A bad attribute list or a rule the attributes cannot apply to (the parser adds the
    position)."""


def parse_rule_attributes(text: str) -> dict[str, object]:
    """Parse the inside of ``[...]``: ``lazy``, ``max_chars=N`` and ``temperature=T``,
    comma separated."""
    attrs: dict[str, object] = {}
    for part in text.split(","):
        item = part.strip()
        key, eq, value = (s.strip() for s in item.partition("="))
        if key not in RULE_ATTRIBUTES:
            raise RuleAttributeError(
                f"rule attribute {key!r} is not supported "
                "(supported: lazy, max_chars=N, temperature=T)"
            )
        if key in attrs:
            raise RuleAttributeError(f"rule attribute {key!r} is given twice")
        if key == "lazy":
            if eq:
                raise RuleAttributeError("rule attribute 'lazy' takes no value")
            attrs[key] = True
        elif key == "temperature":
            attrs[key] = parse_temperature(value)
        else:
            if not (value.isascii() and value.isdigit()) or len(value) > 9:
                raise RuleAttributeError("rule attribute max_chars needs a non-negative integer")
            attrs[key] = int(value)
    return attrs


def parse_temperature(text: str) -> float:
    """The value of ``temperature=`` (a decimal number, optionally with an exponent).

    Raises
    ------
    RuleAttributeError
        Not a number, or not a finite non-negative one.
    """
    if not _NUMBER.fullmatch(text.strip()):
        raise RuleAttributeError(f"expected a number after temperature=, got {text.strip()!r}")
    value = float(text)
    if not math.isfinite(value) or value < 0:
        raise RuleAttributeError(f"temperature must be a finite non-negative number, got {text!r}")
    return value


class _Rules:
    """The ``conv`` that :func:`dfa_expr` writes helper rules into."""

    def __init__(self, taken: set[str]) -> None:
        self.taken = taken
        self.rules: dict[str, Expr] = {}

    def new_rule(self, base: str) -> str:
        k = 0
        while f"{base}{k}" in self.taken:
            k += 1
        name = f"{base}{k}"
        self.taken.add(name)
        return name


def apply_rule_attributes(
    rules: list[Rule], attrs: Mapping[str, dict[str, object]], on_error: Callable[[str, str], None]
) -> list[Rule]:
    """``rules`` with the attributes of ``attrs`` (rule name -> attributes) applied;
    helper rules are appended. ``on_error(rule, message)`` must raise."""
    from treegram.frontends.json_schema import dfa_expr
    from treegram.ir import Dfa, DfaLimitError

    by_name = {r.name: r for r in rules}
    conv = _Rules(set(by_name))
    out = []
    for rule in rules:
        a = dict(attrs.get(rule.name) or {})
        if "temperature" in a:
            rule = replace(rule, temperature=float(a.pop("temperature")))  # type: ignore[arg-type]
        if not a:
            out.append(rule)
            continue
        try:
            expr = _inline(rule.body, by_name, (rule.name,))
        except RuleAttributeError as err:
            on_error(rule.name, str(err))
        try:
            d = Dfa.from_expr(expr)
            if "max_chars" in a:
                d = d.with_length(0, int(a["max_chars"]))  # type: ignore[arg-type]
            if a.get("lazy"):
                d = _lazy(d)
            body = dfa_expr(conv, d, f"{rule.name}_attr", _encode)
        except DfaLimitError as err:
            on_error(rule.name, f"rule attributes make the rule too large: {err}")
        out.append(replace(rule, body=CharClass(()) if body is None else body))
    out.extend(Rule(name, body) for name, body in conv.rules.items())
    return out


def _lazy(d):
    from treegram.ir import Dfa

    trans = [() if d.accept[s] else row for s, row in enumerate(d.trans)]
    return Dfa(trans, list(d.accept)).minimize()


def _encode(ranges: tuple[tuple[int, int], ...]) -> Expr:
    if len(ranges) == 1 and ranges[0][0] == ranges[0][1]:
        return Bytes(chr(ranges[0][0]).encode("utf-8", "surrogatepass"))
    return CharClass(ranges)


def _inline(expr: Expr, rules: Mapping[str, Rule], path: tuple[str, ...]) -> Expr:
    if isinstance(expr, RuleRef):
        if expr.name in path:
            raise RuleAttributeError(
                f"lazy and max_chars need a rule that is not recursive ({' -> '.join(path)} "
                f"-> {expr.name})"
            )
        return _inline(rules[expr.name].body, rules, (*path, expr.name))
    if isinstance(expr, (Seq, Choice)):
        return type(expr)(tuple(_inline(i, rules, path) for i in expr.items))
    if isinstance(expr, Repeat):
        return Repeat(_inline(expr.item, rules, path), expr.min, expr.max)
    return expr
