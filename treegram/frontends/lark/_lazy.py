"""Lazy, ``suffix`` and ``stop`` rules, and xgrammar's dynamic tool-call dispatch, lowered
to IR (free text as structural tags' byte automaton, markers as lazy rules)."""

from __future__ import annotations

from collections.abc import Mapping

from treegram.frontends.lark._exprs import strip_ignore
from treegram.frontends.lark._parse import Parser
from treegram.frontends.lark._syntax import IGNORE, Definition, Marker, is_terminal
from treegram.ir import (
    Bytes,
    CaptureMarker,
    CharClass,
    Choice,
    Expr,
    Repeat,
    Rule,
    RuleRef,
    Seq,
    TokenSet,
    complement_ranges,
    normalize_ranges,
    token_rule,
)

__all__ = ["lower_lazy"]


def lower_lazy(
    parser: Parser, markers: dict[str, Marker], fresh
) -> tuple[list[Rule], dict[str, CaptureMarker]]:
    """Lower the lazy, ``suffix`` and ``stop`` rules; the helper rules this adds.

    - *Dynamic dispatch* (xgrammar's tool-call pattern): ``start: (tool | ...)* tail``,
      ``tail: TEXT`` with ``TEXT`` any text, every tool ``head rest...`` whose head is any
      text up to a fixed trigger (``head[lazy]: TEXT "<t>"``, ``head[suffix="<t>"]: TEXT``,
      ``head[stop="<t>"]: TEXT`` or ``head[lazy]: /(\\n|.)*<t>/``). ``start`` becomes free
      text in which each trigger must be followed by the rest of a tool that has it, then
      free text again (the byte-level automaton of structural tags' ``triggered_tags``,
      which is xgrammar's ``TagDispatch``).
    - A head of the first three forms used on its own matches text that ends at the first
      trigger, or text without the trigger (xgrammar's TagDispatch lowering); the regex
      form is refused there, as xgrammar refuses it.
    - Any other ``suffix`` / ``stop`` rule is the lazy rule ``body marker``: it ends at
      the first place the marker completes (committed-shortest matching).

    Returns the helper rules and the :class:`CaptureMarker` of each marker rule that
    captures need (where its marker lies in its completions).
    """
    from treegram.frontends.structural_tag import free_text_rules

    defs = parser.defs
    any_text: dict[str, bool] = {}

    def is_any_text(expr: Expr) -> bool:
        key = repr(expr)
        if key not in any_text:
            any_text[key] = _is_any_text(_inline_terminals(strip_ignore(expr, IGNORE), defs))
        return any_text[key]

    heads: dict[str, tuple[str, str]] = {}  # rule -> (trigger, form)
    for name, (attrs, _) in parser.attrs.items():
        if set(attrs) - {"lazy", "max_tokens"}:
            continue  # max_chars or temperature: the general lowering
        body = defs[name].body
        marker = markers.get(name)
        if marker is not None:
            if marker.literal is not None and is_any_text(body):  # type: ignore[arg-type]
                heads[name] = (marker.literal, "marker")
        elif isinstance(body, Seq) and isinstance(body.items[-1], Bytes) and body.items[-1].data:
            if id(body) in parser.regex_atoms:
                prefix, trigger = _literal_tail(body)
                if trigger and prefix is not None and is_any_text(prefix):
                    heads[name] = (trigger.decode("utf-8"), "regex")
            elif len(body.items) == 2 and is_any_text(body.items[0]):
                heads[name] = (body.items[1].data.decode("utf-8"), "text")

    rules: list[Rule] = []
    infos: dict[str, CaptureMarker] = {}
    pattern = _dispatch_tools(defs, heads, is_any_text)
    token_pattern = _token_dispatch_tools(defs, parser.token_rules, is_any_text, heads)
    if token_pattern == "mixed":
        parser.error("dynamic dispatch cannot mix string and token triggers", defs["start"].pos)
    if token_pattern == "negated":
        parser.error("dynamic special-token trigger cannot be negated", defs["start"].pos)
    if isinstance(token_pattern, tuple):
        # ``tool: TEXT <|tool|> rest``: the dispatch reads whole tokens, as xgrammar's:
        # any token but the triggers, or a trigger and its tool's rest (the tail is the
        # free tokens)
        tail, token_tools = token_pattern
        triggers = [parser.token_rules[trigger].tokens for _, trigger, _ in token_tools]
        ids = sorted({i for ts in triggers for i in ts.ids})  # type: ignore[union-attr]
        names = sorted({n for ts in triggers for n in ts.names})  # type: ignore[union-attr]
        free = token_rule(TokenSet(tuple(ids), True, tuple(names)))
        parser.token_rules.setdefault(free.name, free)
        branches: list[Expr] = [RuleRef(free.name)]
        for tool, trigger, rest in token_tools:
            group = fresh(f"lark.{tool}")
            rules.append(Rule(group, rest))
            branches.append(Seq((RuleRef(trigger), RuleRef(group))))
        defs["start"].body = Repeat(Choice(tuple(branches)), 0, None)
        for rule in (tail, *(tool for tool, _, _ in token_tools), "start"):
            for key in ("capture", "max_tokens", "max_chars"):
                if rule == "start" and key != "max_chars":
                    continue
                if key in parser.attrs.get(rule, ({}, 0))[0] or (rule, key) in parser.captures:
                    parser.error(
                        f"{key} is not supported on rules consumed by dynamic dispatch",
                        parser.attr_pos.get((rule, key), defs[rule].pos),
                    )
    if pattern is not None and token_pattern is None:  # (a tuple and a pattern: "mixed")
        tail, consumed = pattern
        tags: dict[str, list[str]] = {}
        for tool, head, rest in consumed:
            # one rule per tool, so that each keeps its head's marker: the trigger, right
            # before the rule
            group = fresh(f"lark.{tool}")
            marker = markers.get(head)
            info = None
            if marker is not None:
                info = CaptureMarker(
                    marker.kind,
                    len(heads[head][0].encode("utf-8")),
                    before=True,
                    capture=parser.captures.get((head, "stop_capture")),
                )
            rules.append(Rule(group, rest, marker=info))
            tags.setdefault(heads[head][0], []).append(group)
        pairs = []
        for trigger, groups in tags.items():  # tools that share a trigger: one of them
            if len(groups) > 1:
                shared = fresh("lark.trigger")
                rules.append(Rule(shared, Choice(tuple(RuleRef(g) for g in groups))))
                groups = [shared]
            pairs.append((trigger, groups[0]))
        expr, helpers = free_text_rules(pairs, loop=True, prefix=fresh("lark.dispatch") + ".")
        rules.extend(helpers)
        defs["start"].body = expr
        roles = {tail, *(r for tool, head, _ in consumed for r in (tool, head))}
        for (rule, key), _ in parser.captures.items():
            if rule in roles and key == "capture":
                parser.error(
                    f"{key} is not supported on rules consumed by dynamic dispatch",
                    parser.attr_pos[rule, key],
                )
        for rule in (*roles, "start"):
            for key in ("max_tokens", "max_chars"):
                # xgrammar ignores max_chars here with a warning; a bound the grammar
                # states is not dropped here
                if key in parser.attrs.get(rule, ({}, 0))[0]:
                    parser.error(
                        f"{key} is not supported on rules consumed by dynamic dispatch "
                        f"(rule {rule!r})",
                        parser.attr_pos[rule, key],
                    )
        for _, head, _ in consumed:
            parser.attrs.pop(head, None)
            markers.pop(head, None)
            heads.pop(head, None)
    for name, (trigger, form) in heads.items():
        if form == "regex":
            parser.error(
                "lazy regex suffix is only supported on a head used by dynamic dispatch",
                defs[name].pos,
            )
        end = fresh("lark.end")
        rules.append(Rule(end, Bytes(b"")))
        expr, helpers = free_text_rules(
            [(trigger, end)], loop=False, prefix=fresh(f"lark.{name}") + "."
        )
        rules.extend(helpers)
        defs[name].body = expr
        parser.attrs[name][0].pop("lazy", None)  # a budget stays
        marker = markers.pop(name, None)
        if marker is not None:  # the trigger ends the completions that have it
            infos[name] = CaptureMarker(
                marker.kind,
                text=trigger.encode("utf-8"),
                capture=parser.captures.get((name, "stop_capture")),
            )
    for name, marker in markers.items():
        body = defs[name].body
        defs[name].body = Seq((body, marker.expr))  # type: ignore[arg-type]
        parser.attrs[name][0]["lazy"] = True
        stop_capture = parser.captures.get((name, "stop_capture"))
        size = _byte_length(_inline_terminals(marker.expr, defs))
        if size is not None:
            infos[name] = CaptureMarker(marker.kind, size, capture=stop_capture)
            continue
        # markers of several lengths: the matcher splits each completion with the
        # automata of the body and the marker, kept as two rules nothing calls
        split = (fresh(f"lark.{name}.body"), fresh(f"lark.{name}.marker"))
        rules.append(Rule(split[0], body))  # type: ignore[arg-type]
        rules.append(Rule(split[1], marker.expr))
        infos[name] = CaptureMarker(marker.kind, capture=stop_capture, split=split)
    return rules, infos


def _dispatch_shape(
    defs: dict[str, Definition], is_any_text
) -> tuple[RuleRef, tuple[Expr, ...]] | None:
    """When ``start`` is ``(tool | ...)* tail`` with ``tail`` a rule of free text: the
    tail's reference and the tools (unchecked)."""
    body = defs["start"].body
    if not (isinstance(body, Seq) and len(body.items) == 2):
        return None
    loop, tail = body.items
    if not (isinstance(loop, Repeat) and loop.min == 0 and loop.max is None):
        return None
    if not (isinstance(tail, RuleRef) and tail.name in defs and not defs[tail.name].terminal):
        return None
    if not is_any_text(defs[tail.name].body):
        return None
    return tail, loop.item.items if isinstance(loop.item, Choice) else (loop.item,)


def _dispatch_tools(
    defs: dict[str, Definition], heads: Mapping[str, tuple[str, str]], is_any_text
) -> tuple[str, list[tuple[str, str, Expr]]] | None:
    """When ``start`` has the dynamic-dispatch shape: the tail rule, and the tool, head
    and rest of every tool."""
    shape = _dispatch_shape(defs, is_any_text)
    if shape is None:
        return None
    tail, tools = shape
    out = []
    for tool in tools:
        if not (isinstance(tool, RuleRef) and tool.name in defs and tool.name != "start"):
            return None
        items = _items(defs[tool.name].body)  # type: ignore[arg-type]
        first, rest = items[0], list(items[1:])
        if isinstance(first, Seq) and first.items[1:] == (RuleRef(IGNORE),):
            first = first.items[0]  # as in xgrammar, %ignore does not follow the trigger
        if not (isinstance(first, RuleRef) and first.name in heads):
            return None
        body: Expr = Bytes(b"") if not rest else rest[0] if len(rest) == 1 else Seq(tuple(rest))
        out.append((tool.name, first.name, body))
    return tail.name, out


def _token_dispatch_tools(
    defs: dict[str, Definition], token_rules: Mapping[str, Rule], is_any_text, heads
) -> tuple[str, list[tuple[str, str, Expr]]] | str | None:
    """When ``start`` is ``(tool | ...)* tail`` with every tool ``TEXT <token> rest``
    (free text, then a special token that is not negated): the tail rule, and the tool,
    the trigger's token rule and the rest of every tool. ``"mixed"`` when some tools are
    that and the others start with a string-trigger head (``heads``); ``"negated"`` when
    a trigger is a negated token set."""
    shape = _dispatch_shape(defs, is_any_text)
    if shape is None:
        return None
    tail, tools = shape
    out = []
    string_tools = 0
    for tool in tools:
        if not (isinstance(tool, RuleRef) and tool.name in defs and tool.name != "start"):
            return None
        items = [_unignored(x) for x in _items(defs[tool.name].body)]  # type: ignore[arg-type]
        if isinstance(items[0], RuleRef) and items[0].name in heads:
            string_tools += 1
            continue
        if len(items) < 2 or not is_any_text(items[0]):
            return None
        trigger = items[1]
        if not (isinstance(trigger, RuleRef) and trigger.name in token_rules):
            return None
        if token_rules[trigger.name].tokens.exclude:  # type: ignore[union-attr]
            return "negated"
        rest = items[2:]
        expr: Expr = Bytes(b"") if not rest else rest[0] if len(rest) == 1 else Seq(tuple(rest))
        out.append((tool.name, trigger.name, expr))
    if string_tools:
        return "mixed" if out else None
    return tail.name, out


def _unignored(expr: Expr) -> Expr:
    """``x`` for ``x %ignore`` (the ignored text after a lexical item), else ``expr``."""
    if isinstance(expr, Seq) and expr.items[1:] == (RuleRef(IGNORE),):
        return expr.items[0]
    return expr


def _byte_length(expr: Expr) -> int | None:
    """The length in UTF-8 bytes of every string ``expr`` (no rule references) matches,
    or None when they differ."""
    lengths = _byte_lengths(expr)
    return lengths.pop() if lengths is not None and len(lengths) == 1 else None


def _byte_lengths(expr: Expr) -> set[int] | None:
    # None: unbounded, or too many lengths to follow
    if isinstance(expr, Bytes):
        return {len(expr.data)}
    if isinstance(expr, CharClass):
        ranges = complement_ranges(expr.ranges) if expr.negated else expr.ranges
        sizes = set()
        for lo, hi in ranges:
            for cut, size in ((0x7F, 1), (0x7FF, 2), (0xFFFF, 3), (0x10FFFF, 4)):
                if lo <= cut:
                    sizes.add(size)
                    if hi <= cut:
                        break
        return sizes
    if isinstance(expr, Repeat):
        item = _byte_lengths(expr.item)
        if item is None:
            return None
        if item == {0}:
            return {0}
        if expr.max is None or expr.max > 64:
            return None
        out: set[int] = set()
        total = {0}
        for count in range(expr.max + 1):
            if count >= expr.min:
                out |= total
            total = {a + b for a in total for b in item}
            if len(total) > 64:
                return None
        return out
    if isinstance(expr, Seq):
        total = {0}
        for part in map(_byte_lengths, expr.items):
            if part is None:
                return None
            total = {a + b for a in total for b in part}
            if len(total) > 64:
                return None
        return total
    if isinstance(expr, Choice):
        out = set()
        for item in expr.items:
            sub = _byte_lengths(item)
            if sub is None:
                return None
            out |= sub
        return out
    return None  # a rule reference


def _items(expr: Expr) -> tuple[Expr, ...]:
    return expr.items if isinstance(expr, Seq) else (expr,)


def _literal_tail(expr: Seq) -> tuple[Expr | None, bytes]:
    """``expr`` as (the part before its trailing literal bytes, those bytes)."""
    items = list(expr.items)
    tail = b""
    while items and isinstance(items[-1], Bytes):
        tail = items.pop().data + tail
    if not items:
        return None, tail
    return (items[0] if len(items) == 1 else Seq(tuple(items))), tail


def _inline_terminals(expr: Expr, defs: Mapping[str, Definition], depth: int = 0) -> Expr:
    """``expr`` with terminal references replaced by their bodies (rule references are
    kept; terminals are not recursive, which was checked)."""
    if isinstance(expr, RuleRef):
        d = defs.get(expr.name)
        if d is None or not is_terminal(expr.name):
            return expr
        return _inline_terminals(d.body, defs, depth + 1)  # type: ignore[arg-type]
    if isinstance(expr, (Seq, Choice)):
        return type(expr)(tuple(_inline_terminals(i, defs, depth) for i in expr.items))
    if isinstance(expr, Repeat):
        return Repeat(_inline_terminals(expr.item, defs, depth), expr.min, expr.max)
    return expr


def _is_any_text(expr: Expr) -> bool:
    """Whether ``expr`` (no rule references) matches every string of code points."""
    from treegram.ir import Dfa, DfaLimitError

    if _has_ref(expr):
        return False
    try:
        d = Dfa.from_expr(expr).minimize()
    except DfaLimitError:
        return False
    if len(d) != 1 or not d.accept[0]:
        return False
    covered = [(lo, hi) for lo, hi, t in d.trans[0] if t == 0]
    gaps = complement_ranges(normalize_ranges(covered))
    # surrogates are not characters; a class may or may not list them
    return all(lo >= 0xD800 and hi <= 0xDFFF for lo, hi in gaps)


def _has_ref(expr: Expr) -> bool:
    if isinstance(expr, RuleRef):
        return True
    if isinstance(expr, (Seq, Choice)):
        return any(_has_ref(i) for i in expr.items)
    if isinstance(expr, Repeat):
        return _has_ref(expr.item)
    return False
