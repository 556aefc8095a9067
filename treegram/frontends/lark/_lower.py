"""Lark text to grammar IR: parse, check the names, lower lazy rules and dispatch, embed
``%json``, ``%lark`` and ``@name`` grammars under fresh names, place ``%ignore``."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import NoReturn

from treegram.errors import GrammarError, GrammarSyntaxError, LarkSyntaxError
from treegram.frontends.lark._exprs import rename, rename_one, renamed_lookahead, strip_ignore
from treegram.frontends.lark._lazy import lower_lazy
from treegram.frontends.lark._parse import Parser
from treegram.frontends.lark._syntax import COMMON, IGNORE, Definition, Marker, is_terminal
from treegram.ir import Choice, Expr, GrammarIR, Repeat, Rule, RuleRef, Seq

__all__ = ["lark_to_ir"]


def lark_to_ir(
    text: str,
    named_grammars: Mapping | None = None,
    _seen: tuple = (),
    *,
    known_token: Callable[[str], bool] | None = None,
) -> GrammarIR:
    """Translate Lark grammar text into a :class:`GrammarIR` rooted at ``start``.

    Parameters
    ----------
    text : str
        The Lark grammar (the accepted subset is in the module docstring).
    named_grammars : mapping of str to Grammar or str, optional
        Grammars that ``@name`` refers to: a :class:`Grammar` or Lark text with its own
        ``start`` rule; keys are the names without ``@``.
    known_token : callable, optional
        Whether a vocabulary has a token spelled like a named special token (``<|eot|>``);
        given, an unknown one is a located error here instead of at compile time.

    Returns
    -------
    GrammarIR

    Raises
    ------
    LarkSyntaxError
        Malformed or unsupported Lark (``line`` and ``column`` locate it; the message
        starts ``Lark error at line L, column C:`` as xgrammar's does).
    GrammarError
        ``text`` or ``named_grammars`` has the wrong type.
    """
    if not isinstance(text, str):
        raise GrammarError(f"lark text must be a str, got {type(text).__name__}")
    named = dict(named_grammars or {})
    for key in named:
        if not isinstance(key, str):
            raise GrammarError(f"named_grammars keys must be str, got {type(key).__name__}")
    embedded: list[tuple[str, str, GrammarIR]] = []  # (placeholder prefix, kind, IR)

    def embed(kind: str, value, pos: int) -> Expr:
        placeholder = f"\0embed{len(embedded)}"
        if kind == "json":
            from treegram.frontends.json_schema import json_schema_to_ir

            try:
                ir = json_schema_to_ir(value)
            except GrammarError as err:
                parser.error(f"failed to compile inline JSON schema: {err}", pos)
        elif kind == "lark":
            try:
                ir = lark_to_ir(value, named, _seen, known_token=known_token)
            except GrammarSyntaxError as err:
                parser.error(f"failed to compile nested Lark grammar: {err}", pos)
        else:
            if value not in named:
                parser.error(f"unknown named grammar '@{value}'", pos)
            if value in _seen:
                cycle = " -> ".join(f"@{n}" for n in (*_seen, value))
                parser.error(f"circular named grammar reference: {cycle}", pos)
            ir = _named_ir(value, named[value], named, (*_seen, value), parser, pos)
        embedded.append((placeholder, kind, ir))
        return RuleRef(f"{placeholder}\0{ir.root}")

    parser = Parser(text, embed)
    parser.known_token = known_token
    parser.parse()
    defs, imports = parser.defs, parser.imports
    if "start" not in defs:
        raise LarkSyntaxError("no start rule found", 1, 1)
    markers = _apply_markers(parser)

    # names: every definition must resolve, terminals reference terminals only
    for d in (*defs.values(), Definition("%ignore", 0, True, refs=parser.ignore_refs)):
        for name, pos in d.refs:
            if name not in defs and name not in imports:
                parser.error(f"unknown name {name!r}", pos)
            if d.terminal and name in defs and not is_terminal(name):
                if d.name in parser.hot:
                    if defs[name].terminal:
                        continue  # a lazy rule inside a temperature rule
                    parser.error(
                        f"rule {d.name!r}: temperature applies to rules made of terminals and "
                        f"sub-grammars only, and {name!r} is a rule",
                        pos,
                    )
                if d.name == "%ignore":
                    parser.error(f"terminal cannot reference rule {name!r}", pos)
                if not is_terminal(d.name):  # a lazy, suffix or stop rule
                    parser.error(
                        f"terminal cannot reference rule {name!r} (rule {d.name!r} is lazy, so "
                        "it is matched as one terminal)",
                        pos,
                    )
                parser.error(f"terminal {d.name!r} cannot reference rule {name!r}", d.pos)
    _check_terminal_cycles(defs, parser)

    taken = set(defs) | set(imports)

    def fresh(base: str) -> str:
        name, k = base, 0
        while name in taken:
            k += 1
            name = f"{base}_{k}"
        taken.add(name)
        return name

    dispatch_rules, capture_markers = lower_lazy(parser, markers, fresh)

    rules: list[Rule] = []
    ignore_name = fresh("lark_ignore") if parser.ignores else None
    for d in defs.values():
        body = d.body
        if ignore_name is None:
            body = strip_ignore(body, IGNORE)
        else:
            body = rename_one(body, IGNORE, ignore_name)
        capture = parser.captures.get((d.name, "capture"))
        rules.append(Rule(d.name, body, capture=capture, marker=capture_markers.get(d.name)))
    for r in dispatch_rules:
        body = r.body
        body = (
            strip_ignore(body, IGNORE)
            if ignore_name is None
            else rename_one(body, IGNORE, ignore_name)
        )
        rules.append(replace(r, body=body))
    from treegram.frontends._regex import regex_to_expr

    for alias, (name, _) in imports.items():
        rules.append(Rule(alias, regex_to_expr(COMMON[name])))
    if ignore_name is not None:
        items = parser.ignores
        item = items[0] if len(items) == 1 else Choice(tuple(items))
        rules.append(Rule(ignore_name, Repeat(item, 0, None)))
    # helper rules of %regex substrings and embedded grammars: give them free names and
    # point the placeholders at them
    rules.extend(parser.helpers)
    rules.extend(parser.token_rules.values())
    mapping: dict[str, str] = {}
    for placeholder, kind, ir in embedded:
        local = {r.name: fresh(f"{kind}_{r.name}") for r in ir.rules}
        for r in ir.rules:
            mapping[f"{placeholder}\0{r.name}"] = local[r.name]
            rules.append(
                replace(
                    r,
                    name=local[r.name],
                    body=rename(r.body, local),
                    lookahead=renamed_lookahead(r, local),
                    marker=r.marker and r.marker.renamed(local.__getitem__),
                )
            )
    if mapping:
        identity = {r.name: r.name for r in rules}
        identity.update(mapping)
        rules = [replace(r, body=rename(r.body, identity)) for r in rules]
    if parser.attrs:
        from treegram.frontends._rule_attrs import apply_rule_attributes

        def located(name: str, message: str) -> NoReturn:
            parser.error(f"rule {name!r}: {message}", parser.attrs[name][1])

        rules = apply_rule_attributes(rules, {k: v for k, (v, _) in parser.attrs.items()}, located)
    root = "start"
    if parser.options.get("allow_initial_skip") and ignore_name is not None:
        root = fresh("lark_root")
        rules.append(Rule(root, Seq((RuleRef(ignore_name), RuleRef("start")))))
    return _rooted(rules, root)


def _rooted(rules: list[Rule], root: str) -> GrammarIR:
    """The grammar with ``root`` renamed to ``root`` (xgrammar's name for the root rule,
    so printed Lark grammars parse back with ``Grammar.from_ebnf``'s default) and a user
    rule named ``root`` moved to a free name."""
    if root == "root":
        return GrammarIR(tuple(rules), "root")
    names = {r.name: r.name for r in rules}
    if "root" in names:
        k = 0
        while f"root_{k}" in names:
            k += 1
        names["root"] = f"root_{k}"
    names[root] = "root"
    out = [
        replace(
            r,
            name=names[r.name],
            body=rename(r.body, names),
            lookahead=renamed_lookahead(r, names),
            marker=r.marker and r.marker.renamed(names.__getitem__),
        )
        for r in rules
    ]
    return GrammarIR(tuple(out), "root")


def _apply_markers(parser: Parser) -> dict[str, Marker]:
    """Take the ``suffix`` / ``stop`` markers out of the rule attributes (a terminal
    marker's name is checked like any reference); rule name -> marker."""
    markers: dict[str, Marker] = {}
    for name, (attrs, _) in parser.attrs.items():
        for key in ("suffix", "stop"):
            marker = attrs.pop(key, None)
            if isinstance(marker, Marker):
                markers[name] = marker
                if marker.ref is not None:
                    parser.defs[name].refs.append((marker.ref, marker.pos))  # type: ignore[union-attr]
    return markers


def _named_ir(name: str, value, named: Mapping, seen: tuple, parser: Parser, pos: int):
    if isinstance(getattr(value, "ir", None), GrammarIR):  # a Grammar (a layer above)
        return value.ir
    if isinstance(value, str):
        try:
            return lark_to_ir(value, named, seen)
        except GrammarSyntaxError as err:
            parser.error(f"in named grammar '@{name}': {err}", pos)
    raise GrammarError(
        f"named_grammars[{name!r}] must be a Grammar or Lark text, got {type(value).__name__}"
    )


def _check_terminal_cycles(defs: dict[str, Definition], parser: Parser) -> None:
    state: dict[str, int] = {}  # 1: on the path, 2: done

    for root in defs:
        if not defs[root].terminal or state.get(root):
            continue
        stack = [(root, iter(defs[root].refs))]
        state[root] = 1
        while stack:
            name, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                state[name] = 2
                stack.pop()
                continue
            ref = nxt[0]
            if ref not in defs or not defs[ref].terminal:
                continue
            if state.get(ref) == 1:
                parser.error(f"circular reference in terminal {ref!r}", defs[ref].pos)
            if not state.get(ref):
                state[ref] = 1
                stack.append((ref, iter(defs[ref].refs)))
