"""Structural tag frontend: a structural tag (:mod:`._formats`) to grammar IR.

Each format becomes an IR expression; JSON Schema, regex and EBNF contents are compiled by
their own frontends and their rules embedded under fresh names. The language is xgrammar
0.2.8's, checked mask for mask against it (tests/frontends/structural_tag/test_convert.py):

- ``any_text`` is any text; inside a tag it may not contain the tag's end strings (nor its
  own ``excludes``), so the first end string closes the tag;
- ``triggered_tags`` and ``dispatch`` are free text in which the first occurrence of a
  trigger starts its tag (the rest of the ``begin`` string, the content, the end); an
  excluded string never occurs in the free text. The free text is a byte automaton
  (Aho-Corasick over the triggers and excluded strings) written as one rule per state, so
  a trigger is recognised wherever it starts, also after a partial match of another; like
  xgrammar's, it reads any bytes, so a token cut inside a character is allowed there;
- tag ends propagate into every ``any_text`` and ``triggered_tags`` of the tag's content
  (through sequences, alternatives, repetitions and ``dispatch`` rules; a nested tag brings
  its own ends), but not into the free text of a ``dispatch`` itself, which keeps only its
  own ``excludes`` (as in xgrammar).
"""

from __future__ import annotations

import functools
import json
from dataclasses import replace
from typing import Any

from treegram.errors import InvalidStructuralTagError, UnsupportedStructuralTagError
from treegram.frontends._ebnf import parse_ebnf
from treegram.frontends._regex import regex_to_ir
from treegram.frontends.json_schema import MAX_GRAMMAR_STATES, dfa_expr, json_schema_to_ir
from treegram.frontends.structural_tag._formats import (
    AnyTextFormat,
    AnyTokensFormat,
    ConstStringFormat,
    DispatchFormat,
    ExcludeTokenFormat,
    Format,
    GrammarFormat,
    JSONSchemaFormat,
    OptionalFormat,
    OrFormat,
    PlusFormat,
    QwenXMLParameterFormat,
    RegexFormat,
    RepeatFormat,
    SequenceFormat,
    StarFormat,
    StructuralTag,
    TagFormat,
    TagsWithSeparatorFormat,
    TokenDispatchFormat,
    TokenFormat,
    TokenTriggeredTagsFormat,
    TriggeredTagsFormat,
    check_budget,
    legacy_structural_tag,
    parse_structural_tag,
)
from treegram.frontends.structural_tag._xml import xml_arguments_expr
from treegram.ir import (
    MAX_CODEPOINT,
    Bytes,
    CharClass,
    Choice,
    Dfa,
    DfaLimitError,
    Expr,
    GrammarIR,
    IrFacts,
    Repeat,
    Rule,
    RuleRef,
    Seq,
    TokenSet,
    ir_facts,
    normalize_ranges,
    record_ir_facts,
    run_sized,
    token_rule,
)

__all__ = [
    "MAX_BOUNDED_TEXT_STATES",
    "structural_tag_to_ir",
    "structural_tag_from_args",
    "structural_tag_key",
    "xml_arguments_to_ir",
    "free_text_rules",
]

_EMPTY = Bytes(b"")
_ANY_CHAR = CharClass(((0, MAX_CODEPOINT),))
_ANY_BYTES = Repeat(CharClass(((0, 0xFF),)), 0, None)  # bytes as the symbols 0-255


def structural_tag_from_args(args: tuple, kwargs: dict[str, Any]) -> StructuralTag:
    """The structural tag of xgrammar's two call forms: ``(structural_tag)`` or the legacy
    ``(tags, triggers)``, positionally or by keyword.

    Raises
    ------
    InvalidStructuralTagError
        Any other combination of arguments, or a malformed structural tag.
    """
    # deeply nested input overflows the caller's stack: retried on the deep-stack thread
    return run_sized(False, _from_args, args, dict(kwargs))


def structural_tag_key(tag: StructuralTag) -> str:
    """The canonical JSON text of ``tag`` (a cache key: equal tags, equal keys)."""
    return run_sized(False, _key, tag)


def _key(tag: StructuralTag) -> str:
    return json.dumps(tag.to_dict(), sort_keys=True)


def _from_args(args: tuple, kw: dict[str, Any]) -> StructuralTag:
    if len(args) == 1 and not kw:
        return parse_structural_tag(args[0])
    if not args and set(kw) == {"structural_tag"}:
        return parse_structural_tag(kw["structural_tag"])
    if len(args) == 2 and not kw:
        return legacy_structural_tag(args[0], args[1])
    if len(args) == 1 and set(kw) == {"triggers"}:
        return legacy_structural_tag(args[0], kw["triggers"])
    if not args and set(kw) == {"tags", "triggers"}:
        return legacy_structural_tag(kw["tags"], kw["triggers"])
    raise InvalidStructuralTagError(
        "expected one structural_tag argument, or the legacy tags and triggers; got "
        f"{len(args)} positional argument(s) and keyword(s) {sorted(kw)}"
    )


def structural_tag_to_ir(structural_tag: Any) -> GrammarIR:
    """Translate a structural tag into a grammar whose root rule is ``"root"``.

    Parameters
    ----------
    structural_tag : StructuralTag, str, dict or pydantic model
        The structural tag (see ``parse_structural_tag``).

    Returns
    -------
    GrammarIR

    Raises
    ------
    InvalidStructuralTagError
        A malformed structural tag (the message names the field by its path).
    UnsupportedStructuralTagError
        A format or option that treegram does not compile.
    GrammarError
        A content grammar, regex or JSON Schema is invalid (its frontend's error).
    """
    return run_sized(False, _to_ir, structural_tag)


def _to_ir(structural_tag: Any) -> GrammarIR:
    # parsed again even when given as objects: the dataclasses do not check their fields
    tag = parse_structural_tag(structural_tag)
    b = _Builder()
    root = b.expr(tag.format, (), "format")
    ir = GrammarIR((Rule("root", root), *b.rules), "root")
    record_ir_facts(ir, b.facts(ir))
    return ir


def xml_arguments_to_ir(
    schema: Any,
    style: str,
    *,
    max_whitespace_cnt: int | None = None,
    any_order: bool = False,
    strict_mode: bool = True,
) -> GrammarIR:
    """The grammar of tool-call arguments valid against ``schema``, written in the XML
    ``style`` (see :class:`JSONSchemaFormat`); its root rule is ``"root"``.

    Raises
    ------
    InvalidStructuralTagError
        ``style`` is not one of xgrammar's, or the schema is malformed.
    UnsupportedStructuralTagError
        A style or schema construct that is not compiled.
    """
    if isinstance(schema, type) and hasattr(schema, "model_json_schema"):
        schema = schema.model_json_schema()  # a pydantic model class
    if isinstance(schema, str):
        try:
            schema = json.loads(schema)
        except json.JSONDecodeError as exc:
            raise InvalidStructuralTagError(f"schema is not valid JSON: {exc}") from None
    b = _Builder()
    root = xml_arguments_expr(
        b,
        schema,
        style,
        max_whitespace_cnt=max_whitespace_cnt,
        any_order=any_order,
        path="format",
        strict_mode=strict_mode,
    )
    return GrammarIR((Rule("root", root), *b.rules), "root")


def _unlimited(fmt: Format) -> bool:
    """Whether ``fmt`` can run on indefinitely as free text (so a tag needs an end)."""
    if isinstance(fmt, (AnyTextFormat, TriggeredTagsFormat)):
        return True
    if isinstance(fmt, (SequenceFormat, OrFormat)):
        return any(_unlimited(e) for e in fmt.elements)
    if isinstance(fmt, (OptionalFormat, PlusFormat, StarFormat, RepeatFormat)):
        return _unlimited(fmt.content)
    return False


def free_text_rules(
    pairs: list[tuple[str, str]], *, loop: bool, prefix: str
) -> tuple[Expr, list[Rule]]:
    """Free text in which each trigger is followed by a call of its rule (then, with
    ``loop``, free text again; otherwise nothing): the byte-level automaton of
    ``triggered_tags`` and ``dispatch`` (see :meth:`_Builder._free_text`), for other
    frontends (Lark's dynamic dispatch). ``pairs`` are ``(trigger, rule name)``; the
    helper rules are named ``prefix`` + a number + ``_text``.
    """
    b = _Builder(prefix)
    start = b._free_text([(t, RuleRef(r)) for t, r in pairs], [], loop=loop, path="dispatch")
    return start, b.rules


class _Builder:
    """Collects the rules of one translation; every name it makes is unique."""

    def __init__(self, prefix: str = "st") -> None:
        self.rules: list[Rule] = []
        self._n = 0
        self._prefix = prefix
        self._token_rules: set[str] = set()  # names of the token-id rules added
        # the end token of the innermost enclosing tag (its content may not read it)
        self._end_tokens: tuple[int | str, ...] = ()
        self._bounded_states = 0  # automaton states of the character budgets built so far
        # JSON-style argument grammars by schema and options: a tool's schema that several
        # tags carry (harmony's channels, a forced call beside the free calls) is
        # converted and embedded once, its rules called from each tag
        self._json_memo: dict[str, RuleRef] = {}
        # the same for the JSON values inside XML arguments (by schema and the converter's
        # options), and free texts by triggers, excluded strings and loop: every tool of a
        # tag asks for the same few (raw string values, JSON numbers), built once
        self.xml_json_memo: dict[str, RuleRef] = {}
        self._free_texts: dict[tuple, Expr] = {}
        # what ir_facts finds in the embedded grammars' rules, renamed (their rules are
        # not walked again: the frontends recorded it, or it was found once)
        self._embedded: set[str] = set()
        self._embedded_facts: list[IrFacts] = []

    def facts(self, ir: GrammarIR) -> IrFacts:
        """``ir_facts`` of ``ir``, the grammar of this builder's rules: the embedded
        grammars' facts combined with one walk over the rules made here."""
        own = GrammarIR(tuple(r for r in ir.rules if r.name not in self._embedded), ir.root)
        parts = [ir_facts(own), *self._embedded_facts]
        return IrFacts(
            max(f.depth for f in parts),
            frozenset().union(*(f.ref_names for f in parts)),
            max(f.longest_repeat for f in parts),
        )

    def _tokens(self, refs, exclude: bool = False) -> RuleRef:
        """A token-id element over ``refs`` (ids and token texts): one rule per set."""
        ids = tuple(sorted({r for r in refs if isinstance(r, int)}))
        names = tuple(sorted({r for r in refs if isinstance(r, str)}))
        rule = token_rule(TokenSet(ids, exclude, names))
        if rule.name not in self._token_rules:
            self._token_rules.add(rule.name)
            self.rules.append(rule)
        return RuleRef(rule.name)

    def _fresh(self, base: str) -> str:
        self._n += 1
        return f"{self._prefix}{self._n}_{base}"

    def _rule(self, base: str, body: Expr) -> RuleRef:
        name = self._fresh(base)
        self.rules.append(Rule(name, body))
        return RuleRef(name)

    def _dfa(self, d: Dfa, base: str, encode=None) -> Expr | None:
        """The strings of the code point automaton ``d`` as an expression, its helper
        rules added under fresh names; None when ``d`` accepts nothing. ``encode``
        writes the symbols of one transition (default: as code points).

        Raises
        ------
        DfaLimitError
            ``d`` has more states than a grammar is built from.
        """
        helpers = _DfaRules(self)
        body = dfa_expr(helpers, d, base, encode or _code_points)
        self.rules.extend(Rule(n, e) for n, e in helpers.rules.items())
        return body

    def _embed(self, ir: GrammarIR) -> RuleRef:
        """Add the rules of a frontend's grammar under fresh names; a call of its root."""
        self._n += 1
        prefix = f"st{self._n}_"
        # token-id rules keep their names (the element's text), shared with the builder's
        tokens = {r.name for r in ir.rules if r.tokens is not None}

        memo: dict[int, Expr] = {}  # by node id: shared nodes renamed once, kept shared

        def rename(root: Expr) -> Expr:
            """``root`` with its rule references renamed; a node with none below it is
            kept as it is (iterative: embedded grammars may be deep)."""
            stack = [root]
            while stack:
                e = stack[-1]
                if id(e) in memo:
                    stack.pop()
                    continue
                t = type(e)
                if t is Seq or t is Choice:
                    kids = e.items  # type: ignore[union-attr]
                elif t is Repeat:
                    kids = (e.item,)  # type: ignore[union-attr]
                else:
                    stack.pop()
                    if t is RuleRef and e.name not in tokens:  # type: ignore[union-attr]
                        memo[id(e)] = RuleRef(prefix + e.name)  # type: ignore[union-attr]
                    else:
                        memo[id(e)] = e
                    continue
                pending = [k for k in kids if id(k) not in memo]
                if pending:
                    stack.extend(pending)
                    continue
                stack.pop()
                new = [memo[id(k)] for k in kids]
                if all(a is b for a, b in zip(new, kids, strict=True)):
                    memo[id(e)] = e
                elif t is Repeat:
                    memo[id(e)] = Repeat(new[0], e.min, e.max)  # type: ignore[union-attr]
                else:
                    memo[id(e)] = t(tuple(new))  # type: ignore[operator]
            return memo[id(root)]

        found = ir_facts(ir)
        self._embedded_facts.append(
            IrFacts(
                found.depth,
                frozenset(n if n in tokens else prefix + n for n in found.ref_names),
                found.longest_repeat,
            )
        )
        for r in ir.rules:
            if r.tokens is not None:
                if r.name not in self._token_rules:
                    self._token_rules.add(r.name)
                    self._embedded.add(r.name)
                    self.rules.append(r)
                continue
            self._embedded.add(prefix + r.name)
            look = None if r.lookahead is None else rename(r.lookahead)
            marker = r.marker and r.marker.renamed(f"{prefix}{{}}".format)
            self.rules.append(
                replace(r, name=prefix + r.name, body=rename(r.body), lookahead=look, marker=marker)
            )
        return RuleRef(prefix + ir.root)

    # ------------------------------------------------------------------ formats
    def expr(self, fmt: Format, ends: tuple[str, ...], path: str) -> Expr:
        """The expression of ``fmt``; ``ends`` are the end strings of the enclosing tag,
        which free text inside it may not contain."""
        if isinstance(fmt, ConstStringFormat):
            return Bytes(fmt.value.encode("utf-8"))
        if isinstance(fmt, JSONSchemaFormat):
            return self._json(fmt, path)
        if isinstance(fmt, QwenXMLParameterFormat):
            return xml_arguments_expr(
                self,
                fmt.json_schema,
                "qwen_xml",
                max_whitespace_cnt=None,
                any_order=False,
                path=path,
            )
        if isinstance(fmt, AnyTextFormat):
            budget = check_budget(fmt.max_tokens, f"{path}.max_tokens")
            chars = check_budget(fmt.max_chars, f"{path}.max_chars")
            if budget == 0 or chars == 0:
                return _EMPTY  # no token may be spent in it, or no character written
            excludes = _unique([*fmt.excludes, *ends])
            if chars is not None:
                text: Expr = self._bounded_text(excludes, chars, path)
            elif not excludes:
                text = Repeat(_ANY_CHAR, 0, None)
            else:
                text = self._free_text([], excludes, loop=False, path=path)
            # a token budget is enforced by the matcher on the rule (Rule.max_tokens)
            if budget is None:
                return text
            name = self._fresh("any_text")
            self.rules.append(Rule(name, text, max_tokens=budget))
            return RuleRef(name)
        if isinstance(fmt, GrammarFormat):
            return self._embed(parse_ebnf(fmt.grammar))
        if isinstance(fmt, RegexFormat):
            return self._embed(regex_to_ir(fmt.pattern))
        if isinstance(fmt, (SequenceFormat, OrFormat)):
            kind = "Sequence" if isinstance(fmt, SequenceFormat) else "Or"
            if not fmt.elements:
                raise InvalidStructuralTagError(
                    f"{path}.elements: a {kind} format needs at least one element"
                )
            items = tuple(
                self.expr(e, ends, f"{path}.elements[{i}]") for i, e in enumerate(fmt.elements)
            )
            if len(items) == 1:
                return items[0]
            return Seq(items) if kind == "Sequence" else Choice(items)
        if isinstance(fmt, TagFormat):
            return self._tag(fmt, path)
        if isinstance(fmt, TriggeredTagsFormat):
            return self._triggered(fmt, ends, path)
        if isinstance(fmt, TagsWithSeparatorFormat):
            return self._with_separator(fmt, path)
        if isinstance(fmt, (OptionalFormat, PlusFormat, StarFormat)):
            lo, hi = {OptionalFormat: (0, 1), PlusFormat: (1, None), StarFormat: (0, None)}[
                type(fmt)
            ]
            return Repeat(self.expr(fmt.content, ends, f"{path}.content"), lo, hi)
        if isinstance(fmt, RepeatFormat):
            if fmt.min < 0 or (fmt.max != -1 and fmt.max < fmt.min):
                raise InvalidStructuralTagError(
                    f"{path}: repeat needs 0 <= min <= max (or max = -1), "
                    f"got min={fmt.min}, max={fmt.max}"
                )
            hi = None if fmt.max == -1 else fmt.max
            return Repeat(self.expr(fmt.content, ends, f"{path}.content"), fmt.min, hi)
        if isinstance(fmt, TokenFormat):
            return self._tokens([fmt.token])
        if isinstance(fmt, ExcludeTokenFormat):
            return self._tokens([*fmt.exclude_tokens, *self._end_tokens], exclude=True)
        if isinstance(fmt, AnyTokensFormat):
            budget = fmt.max_tokens
            if budget is not None and (
                isinstance(budget, bool) or not isinstance(budget, int) or not 0 <= budget < 2**31
            ):
                raise InvalidStructuralTagError(
                    f"{path}.max_tokens must be an integer in [0, 2**31), got {budget!r}"
                )
            if budget == 0:
                return _EMPTY
            free = self._tokens([*fmt.exclude_tokens, *self._end_tokens], exclude=True)
            if budget is None:
                return Repeat(free, 0, None)
            name = self._fresh("any_tokens")
            self.rules.append(Rule(name, Repeat(free, 0, None), max_tokens=budget))
            return RuleRef(name)
        if isinstance(fmt, TokenTriggeredTagsFormat):
            return self._token_triggered(fmt, path)
        if isinstance(fmt, TokenDispatchFormat):
            pairs_t: list[tuple[int | str, Expr]] = []
            for i, (token, content) in enumerate(fmt.rules):
                body = self.expr(content, ends, f"{path}.rules[{i}][1]")
                pairs_t.append((token, self._rule("dispatch_group", body)))
            # as the text dispatch: the enclosing tag's end reaches the rules' formats,
            # not the dispatch's own free tokens
            return self._token_loop(
                pairs_t, [*fmt.exclude_tokens, *(t for t, _ in pairs_t)], loop=fmt.loop
            )
        if isinstance(fmt, DispatchFormat):
            pairs = []
            for i, (pattern, content) in enumerate(fmt.rules):
                body = self.expr(content, ends, f"{path}.rules[{i}][1]")
                group = self._rule("dispatch_group", body)
                pairs.append((pattern, group))
            # as in xgrammar, an enclosing tag's end strings reach the rules' formats but not
            # the dispatch's own free text, which keeps only its own excludes
            return self._free_text(pairs, _unique(fmt.excludes), loop=fmt.loop, path=path)
        raise InvalidStructuralTagError(f"{path}: not a structural tag format: {fmt!r}")

    def _json(self, fmt: JSONSchemaFormat, path: str) -> Expr:
        if fmt.style != "json":
            return xml_arguments_expr(
                self,
                fmt.json_schema,
                fmt.style,
                max_whitespace_cnt=fmt.max_whitespace_cnt,
                any_order=fmt.any_order,
                path=path,
                excludes=fmt.excludes,
            )
        excludes = fmt.excludes
        if not isinstance(excludes, (list, tuple)) or not all(
            isinstance(t, str) and t for t in excludes
        ):
            raise InvalidStructuralTagError(
                f"{path}.excludes must be an array of non-empty strings, got {excludes!r}"
            )
        try:
            key = json.dumps(
                [fmt.json_schema, fmt.max_whitespace_cnt, fmt.any_order, excludes],
                sort_keys=True,
            )
        except (TypeError, ValueError):  # not JSON data: converted (and refused) as it is
            key = None
        got = None if key is None else self._json_memo.get(key)
        if got is None:
            ir = json_schema_to_ir(
                fmt.json_schema,
                max_whitespace_cnt=fmt.max_whitespace_cnt,
                any_order=fmt.any_order,
                excludes=tuple(excludes),
            )
            got = self._embed(ir)
            if key is not None:
                self._json_memo[key] = got
        return got

    def _tag_parts(self, tag: TagFormat, path: str) -> tuple[Expr, list[str]]:
        """The content and end of a tag (without its begin string)."""
        if isinstance(tag.end, TokenFormat):  # the content may not read the end token
            saved, self._end_tokens = self._end_tokens, (tag.end.token,)
            try:
                return self.expr(tag.content, (), f"{path}.content"), []
            finally:
                self._end_tokens = saved
        ends = [tag.end] if isinstance(tag.end, str) else list(tag.end)
        live = tuple(_unique([e for e in ends if e]))
        if not live and _unlimited(tag.content):
            raise InvalidStructuralTagError(
                f"{path}.end: the content is unlimited free text, so at least one end "
                "string must be non-empty"
            )
        saved, self._end_tokens = self._end_tokens, ()
        try:
            return self.expr(tag.content, live, f"{path}.content"), _unique(ends)
        finally:
            self._end_tokens = saved

    def _tag(self, tag: TagFormat, path: str, skip: int = 0) -> Expr:
        """``begin[skip:] content end`` as one rule (``skip=-1``: without a token begin,
        which the trigger token of ``token_triggered_tags`` read)."""
        content, ends = self._tag_parts(tag, path)
        end: Expr
        if isinstance(tag.end, TokenFormat):
            end = self._tokens([tag.end.token])
        else:
            end = (
                Bytes(ends[0].encode("utf-8"))
                if len(ends) == 1
                else Choice(tuple(Bytes(e.encode("utf-8")) for e in ends))
            )
        begin: Expr
        if isinstance(tag.begin, TokenFormat):
            begin = _EMPTY if skip < 0 else self._tokens([tag.begin.token])
        else:
            begin = Bytes(tag.begin[skip:].encode("utf-8"))
        return self._rule("tag", Seq((begin, content, end)))

    def _token_loop(
        self, pairs: list[tuple[int | str, Expr]], free: list[int | str], *, loop: bool
    ) -> Expr:
        """Free tokens (none of ``free``) in which a trigger token calls its group; with
        ``loop`` free tokens resume after it, otherwise the text ends there."""
        any_free = self._tokens(free, exclude=True)
        groups: dict[int | str, list[Expr]] = {}
        for token, group in pairs:
            groups.setdefault(token, []).append(group)
        dispatch = [Seq((self._tokens([t]), _alt(g))) for t, g in groups.items()]
        if loop:
            return Repeat(_alt([any_free, *dispatch]), 0, None)
        tail = [Repeat(_alt(dispatch), 0, 1)] if dispatch else []
        return Seq((Repeat(any_free, 0, None), *tail))

    def _token_triggered(self, fmt: TokenTriggeredTagsFormat, path: str) -> Expr:
        if not fmt.trigger_tokens:
            raise InvalidStructuralTagError(f"{path}.trigger_tokens must be non-empty")
        if not fmt.tags:
            raise InvalidStructuralTagError(f"{path}.tags must be non-empty")
        pairs: list[tuple[int | str, Expr]] = []
        for i, tag in enumerate(fmt.tags):
            if not isinstance(tag.begin, TokenFormat) or tag.begin.token not in fmt.trigger_tokens:
                raise InvalidStructuralTagError(
                    f"{path}.tags[{i}].begin must be a token format begin whose token is one "
                    f"of trigger_tokens {fmt.trigger_tokens}"
                )
            pairs.append((tag.begin.token, self._tag(tag, f"{path}.tags[{i}]", skip=-1)))
        unused = [t for t in fmt.trigger_tokens if all(t != p for p, _ in pairs)]
        if unused:
            raise InvalidStructuralTagError(
                f"{path}.trigger_tokens: {unused} start(s) no tag; every trigger needs a tag"
            )
        first = None
        if fmt.at_least_one:
            first = _alt([self._tag(t, f"{path}.tags[{i}]") for i, t in enumerate(fmt.tags)])
            if fmt.stop_after_first:
                return first
        free = [*fmt.trigger_tokens, *fmt.exclude_tokens, *self._end_tokens]
        text = self._token_loop(pairs, free, loop=not fmt.stop_after_first)
        return text if first is None else Seq((first, text))

    def _triggered(self, fmt: TriggeredTagsFormat, ends: tuple[str, ...], path: str) -> Expr:
        if not fmt.triggers:
            raise InvalidStructuralTagError(f"{path}.triggers must be non-empty")
        if any(not t for t in fmt.triggers):
            raise InvalidStructuralTagError(f"{path}.triggers must not contain ''")
        if not fmt.tags:
            raise InvalidStructuralTagError(f"{path}.tags must be non-empty")
        groups: dict[str, list[Expr]] = {t: [] for t in fmt.triggers}
        for i, tag in enumerate(fmt.tags):
            if not isinstance(tag.begin, str):
                raise InvalidStructuralTagError(
                    f"{path}.tags[{i}].begin must be a string begin (token begins need "
                    "token_triggered_tags)"
                )
            hits = [t for t in groups if tag.begin.startswith(t)]
            if len(hits) != 1:
                what = "does not start with any trigger" if not hits else "matches triggers"
                raise InvalidStructuralTagError(
                    f"{path}.tags[{i}].begin {tag.begin!r} {what}"
                    + (f" {hits}" if hits else f" of {fmt.triggers}")
                )
            groups[hits[0]].append(self._tag(tag, f"{path}.tags[{i}]", skip=len(hits[0])))
        if fmt.at_least_one:
            first = _alt([self._tag(t, f"{path}.tags[{i}]") for i, t in enumerate(fmt.tags)])
            if fmt.stop_after_first:
                return first
        unused = [t for t, g in groups.items() if not g]
        if unused:  # xgrammar 0.2.8 fails with an internal error here
            raise InvalidStructuralTagError(
                f"{path}.triggers: {unused} start(s) no tag; every trigger needs a tag"
            )
        pairs = [(t, self._rule("trigger_group", _alt(g))) for t, g in groups.items()]
        text = self._free_text(
            pairs, _unique([*fmt.excludes, *ends]), loop=not fmt.stop_after_first, path=path
        )
        return Seq((first, text)) if fmt.at_least_one else text

    def _with_separator(self, fmt: TagsWithSeparatorFormat, path: str) -> Expr:
        if not fmt.tags:
            raise InvalidStructuralTagError(f"{path}.tags must be non-empty")
        tags = self._rule(
            "tags", _alt([self._tag(t, f"{path}.tags[{i}]") for i, t in enumerate(fmt.tags)])
        )
        if fmt.stop_after_first:
            return tags if fmt.at_least_one else Choice((_EMPTY, tags))
        sep = Bytes(fmt.separator.encode("utf-8"))
        some = Seq((tags, Repeat(Seq((sep, tags)), 0, None)))
        return some if fmt.at_least_one else Choice((_EMPTY, some))

    # ------------------------------------------------------------------ free text
    def _bounded_text(self, excludes: list[str], max_chars: int, path: str) -> Expr:
        """Text of at most ``max_chars`` characters without the strings ``excludes``, as
        xgrammar 0.2.8 counts them: without excludes, code points; with them, the free
        text is bytes (as :meth:`_free_text`) counted by :func:`_byte_budget`. With
        excludes it is the exact automaton of that free text cut to the budget, one state
        per count and partial match, so the budget times the excluded strings' length is
        bounded."""
        if not excludes:
            return Repeat(_ANY_CHAR, 0, max_chars)
        try:
            if max_chars + 1 > MAX_GRAMMAR_STATES:  # one state per count at least
                raise DfaLimitError(f"more than {MAX_GRAMMAR_STATES} automaton states")
            budget = _byte_budget(max_chars)
            hits = [Seq(tuple(CharClass(((b, b),)) for b in e.encode("utf-8"))) for e in excludes]
            search = Dfa.from_expr(Seq((_ANY_BYTES, _alt(hits), _ANY_BYTES)))
            text = budget.difference(search).minimize()
            self._bounded_states += len(text)
            if self._bounded_states > MAX_BOUNDED_TEXT_STATES:
                raise DfaLimitError(
                    f"the character budgets of this structural tag need more than "
                    f"{MAX_BOUNDED_TEXT_STATES} automaton states in all "
                    "(treegram.frontends.MAX_BOUNDED_TEXT_STATES)"
                )
            body = self._dfa(text, "any_text", _bytes_of)
        except DfaLimitError as err:
            raise UnsupportedStructuralTagError(
                f"{path}.max_chars: a budget of {max_chars} characters beside the excluded "
                f"strings {excludes} is too large to build ({err})"
            ) from None
        return _EMPTY if body is None else body

    def _free_text(
        self, pairs: list[tuple[str, RuleRef]], excludes: list[str], *, loop: bool, path: str
    ) -> Expr:
        """Text in which a trigger is followed by its group (then, with ``loop``, free text
        again; otherwise nothing) and no excluded string occurs.

        An Aho-Corasick automaton over UTF-8 bytes (xgrammar's free text is any bytes, not
        only whole characters), one rule per state (the longest suffix of the text that is
        a prefix of a pattern), with xgrammar's rules for when a trigger fires, found by
        probing it:

        - a trigger fires when the automaton *reaches its state*, not when it merely ends
          a longer partial match (after ``"/<"`` of the excluded ``"/<a"``, the trigger
          ``"<"`` has not fired); an excluded string is caught as any suffix, and wins
          over a trigger that ends at the same byte;
        - a trigger that is also the prefix of a longer pattern waits for the next byte:
          one that continues the longer pattern continues it, any other byte is the first
          byte of the trigger's group, and the text may not end there.

        The text may end in any other state.
        """
        key = (tuple(pairs), tuple(excludes), loop)
        if key in self._free_texts:
            return self._free_texts[key]
        self._free_texts[key] = got = self._build_free_text(pairs, excludes, loop=loop, path=path)
        return got

    def _build_free_text(
        self, pairs: list[tuple[str, RuleRef]], excludes: list[str], *, loop: bool, path: str
    ) -> Expr:
        outcome: dict[bytes, RuleRef | None] = {}
        for pattern, group in pairs:
            if not pattern:
                raise InvalidStructuralTagError(f"{path}: a trigger must not be empty")
            outcome.setdefault(pattern.encode("utf-8"), group)
        for pattern in excludes:
            if pattern:
                outcome[pattern.encode("utf-8")] = None  # an excluded string is never written
        # trie of the patterns over bytes
        children: list[dict[int, int]] = [{}]
        done: list[bytes | None] = [None]
        for key in outcome:
            s = 0
            for byte in key:
                if byte not in children[s]:
                    children[s][byte] = len(children)
                    children.append({})
                    done.append(None)
                s = children[s][byte]
            done[s] = key
        # failure links breadth first; an excluded string ending a longer partial match
        # still counts (a trigger does not, see above)
        fail = [0] * len(children)
        order = [0]
        i = 0
        while i < len(order):
            s = order[i]
            i += 1
            for byte, t in children[s].items():
                order.append(t)
                if s == 0:
                    continue
                f = fail[s]
                while f and byte not in children[f]:
                    f = fail[f]
                fail[t] = children[f].get(byte, 0)
                inherited = done[fail[t]]
                if inherited is not None and outcome[inherited] is None:
                    done[t] = inherited  # an excluded suffix wins, even over a trigger

        # the automaton's moves: a state's own children over its failure state's moves
        # (breadth first, so the failure state's are complete); any other byte: the root
        goto: list[dict[int, int]] = [{} for _ in children]
        for t in order:
            goto[t] = {**goto[fail[t]], **children[t]} if t else children[0]

        def call_of(t: int) -> RuleRef | None:
            key = done[t]
            return None if key is None else outcome[key]

        # states of the text: free states, and triggers that wait for the next byte
        waiting = {t for t in order if call_of(t) is not None and children[t]}
        kept = [t for t in order if done[t] is None or t in waiting]
        names = {0: self._fresh("text")}  # a rule per state not inlined, named on first call
        start = RuleRef(names[0])
        refs: set[str] = set()  # every rule the rules below call (their ir_facts ref_names)

        def after(call: RuleRef) -> Expr:
            refs.add(call.name)
            if loop:
                refs.add(start.name)
                return Seq((call, start))
            return call

        def edges(s: int, byte_list: list[int], exits: list[Expr]) -> dict[int, list[int]]:
            """Add the edges of ``s`` on ``byte_list`` that dispatch; return the others
            grouped by target state."""
            by_target: dict[int, list[int]] = {}
            moves = goto[s]  # the state's moves; any other byte goes to the root
            for byte in byte_list:
                t = moves.get(byte, 0)
                key = done[t]
                if key is None or t in waiting:
                    got = by_target.get(t)
                    if got is None:
                        by_target[t] = [byte]
                    else:
                        got.append(byte)
                    continue
                call = outcome[key]
                if call is not None:  # a trigger with nothing after it: fires now
                    exits.append(Seq((Bytes(bytes((byte,))), after(call))))
                # else: the byte completes an excluded string
            return by_target

        alphabet = sorted({byte for key in outcome for byte in key})
        other = sorted(set(range(256)) - set(alphabet))
        moves_of: dict[int, tuple[list[Expr], dict[int, list[int]]]] = {}
        for s in kept:
            exits: list[Expr] = []
            if s in waiting:
                # a continuing byte continues the longer pattern; anything else starts
                # the trigger's group (approximation: a group that itself starts with a
                # continuing byte is allowed both ways, xgrammar only continues)
                by_target = edges(s, sorted(children[s]), exits)
                exits.append(after(call_of(s)))  # type: ignore[arg-type]
            else:
                by_target = edges(s, alphabet, exits)
                by_target.setdefault(0, []).extend(other)
                exits.insert(0, _EMPTY)
            moves_of[s] = (exits, by_target)
        # A state that only one edge leads to, from a state before it breadth first (the
        # inner bytes of a long excluded string), is written inside that state's body
        # instead of as a rule of its own: the automaton builder inlines the text's rules
        # into one anyway, and pays per rule (a tool-call tag's excluded strings made
        # 68 rules of its 147).
        position = {t: i for i, t in enumerate(kept)}
        into: dict[int, int | None] = {}  # state -> the one state leading to it, or None
        for s in kept:
            for t in moves_of[s][1]:
                if t != s:
                    into[t] = s if t not in into and position[s] < position[t] else None
        body_of: dict[int, tuple[Expr, int]] = {}  # inlined state -> (body, nesting)
        first_rule = len(self.rules)
        bodies: list[tuple[int, Expr]] = []
        for s in reversed(kept):  # a state's inlined successors come after it
            exits, by_target = moves_of[s]
            exits = list(exits)
            loop_back: Expr | None = None
            nesting = 0
            for t, byte_set in by_target.items():
                if not byte_set:
                    continue
                cls = _byte_class(byte_set)
                if t == s:
                    loop_back = Repeat(cls, 0, None)
                    continue
                inner = body_of.pop(t, None) if into.get(t) == s else None
                if inner is not None and inner[1] < _MAX_INLINED_TEXT_STATES:
                    exits.append(Seq((cls, inner[0])))
                    nesting = max(nesting, inner[1] + 1)
                    continue
                if inner is not None:  # nested too deep: a rule after all
                    bodies.append((t, inner[0]))
                name = names.get(t)
                if name is None:
                    name = names[t] = self._fresh("text")
                refs.add(name)
                exits.append(Seq((cls, RuleRef(name))))
            rest = _alt(exits)
            body = rest if loop_back is None else Seq((loop_back, rest))
            if s != 0 and into.get(s) is not None:
                body_of[s] = (body, nesting)
            else:
                bodies.append((s, body))
        # rules in breadth-first order, the start first (as ir_facts reads them)
        for s, body in sorted(bodies, key=lambda sb: position[sb[0]]):
            name = names.get(s)
            if name is None:
                name = names[s] = self._fresh("text")
            self.rules.append(Rule(name, body))
        self._free_text_facts(self.rules[first_rule:], (pairs, excludes, loop), refs)
        return start

    def _free_text_facts(self, rules: list[Rule], key: tuple, refs: set[str]) -> None:
        """Record the ``ir_facts`` of a free text's ``rules`` apart (not walked again in
        :meth:`facts`: with one rule per state and an exit per target, they were nine
        tenths of a tool-call tag's walk). Their depth and longest repetition depend only
        on the patterns, excluded strings and loop (calls are rule references): walked
        once per process for each such shape; their calls are ``refs``."""
        patterns, excludes, loop = key
        shape_key = (tuple(p for p, _ in patterns), tuple(excludes), loop)
        shape = _FREE_TEXT_SHAPES.get(shape_key)
        if shape is None:
            found = ir_facts(GrammarIR(tuple(rules), rules[0].name))
            shape = (found.depth, found.longest_repeat)
            if len(_FREE_TEXT_SHAPES) >= _MAX_FREE_TEXT_SHAPES:
                _FREE_TEXT_SHAPES.clear()
            _FREE_TEXT_SHAPES[shape_key] = shape
        self._embedded.update(r.name for r in rules)
        self._embedded_facts.append(IrFacts(shape[0], frozenset(refs), shape[1]))


# States of a free text written one inside another at most (see _Builder._build_free_text):
# the expression depth stays far below SHALLOW_DEPTH, whatever the excluded strings' length
_MAX_INLINED_TEXT_STATES = 16

# (patterns, excluded strings, loop) of a free text -> (depth, longest repetition) of its
# rules (see _Builder._free_text_facts); a tool-call format has one or two such shapes
_FREE_TEXT_SHAPES: dict[tuple, tuple[int, int]] = {}
_MAX_FREE_TEXT_SHAPES = 256


def _byte_budget(max_chars: int) -> Dfa:
    """Byte texts (bytes as the symbols 0-255) of at most ``max_chars`` characters, where
    every byte but a UTF-8 continuation byte (``0x80``-``0xBF``) starts a character, as
    xgrammar's free text counts them: a stray continuation byte is free while the budget
    lasts. Once it is spent, only the continuation bytes of the last character may follow
    (xgrammar checks the budget per token, so it also refuses them when the character is
    cut between two tokens at that point; a text is never left cut here)."""
    trans: list[tuple[tuple[int, int, int], ...]] = []
    spent = max_chars  # states max_chars + p: spent, p continuation bytes still due

    def lead(c: int, lo: int, hi: int, due: int) -> tuple[int, int, int]:
        return (lo, hi, c + 1 if c + 1 < max_chars else spent + due)

    for c in range(max_chars):
        trans.append(
            (
                lead(c, 0x00, 0x7F, 0),
                (0x80, 0xBF, c),
                lead(c, 0xC0, 0xDF, 1),
                lead(c, 0xE0, 0xEF, 2),
                lead(c, 0xF0, 0xF7, 3),
                lead(c, 0xF8, 0xFF, 0),
            )
        )
    trans.append(())
    trans += [((0x80, 0xBF, spent + due - 1),) for due in (1, 2, 3)]
    return Dfa(trans, [True] * len(trans))


class _DfaRules:
    """The ``conv`` that :func:`dfa_expr` writes its helper rules into."""

    def __init__(self, b: _Builder) -> None:
        self.b = b
        self.rules: dict[str, Expr] = {}

    def new_rule(self, base: str) -> str:
        return self.b._fresh(base)


# The code point automaton states all any_text character budgets of one structural tag may
# build together (one per count and partial match of an excluded string: max_chars 1,000
# beside "</t0>" is 4,988, 1,200 beside "</think>" 9,555). Each becomes a rule of about ten
# byte states, and a structural tag over this compiles for seconds: it is refused by name.
MAX_BOUNDED_TEXT_STATES = 12_000


def _bytes_of(ranges: tuple[tuple[int, int], ...]) -> Expr:
    """The symbols 0-255 of ``ranges`` as bytes (see :func:`_byte_class`)."""
    return _byte_class([b for lo, hi in ranges for b in range(lo, hi + 1)])


def _code_points(ranges: tuple[tuple[int, int], ...]) -> Expr:
    if len(ranges) == 1 and ranges[0][0] == ranges[0][1]:
        return Bytes(chr(ranges[0][0]).encode("utf-8"))
    return CharClass(ranges)


def _byte_class(byte_set: list[int]) -> Expr:
    """One byte of ``byte_set``: ASCII bytes as a character class, the others as raw bytes
    (xgrammar's free text reads bytes, so a token cut inside a character is allowed)."""
    return _byte_class_of(tuple(byte_set))


@functools.lru_cache(maxsize=1024)  # free text spells the same sets in every state and tag
def _byte_class_of(byte_set: tuple[int, ...]) -> Expr:
    low = normalize_ranges((b, b) for b in byte_set if b < 0x80)
    items: list[Expr] = [CharClass(tuple(low))] if low else []
    items.extend(Bytes(bytes((b,))) for b in byte_set if b >= 0x80)
    return _alt(items)


def _alt(items: list[Expr]) -> Expr:
    return items[0] if len(items) == 1 else Choice(tuple(items))


def _unique(items: list[str]) -> list[str]:
    return list(dict.fromkeys(items))
