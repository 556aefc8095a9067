"""A structural tag as xgrammar's normal-form EBNF text (what ``str(grammar)`` prints).

xgrammar 0.2.8 prints the grammar of a structural tag in its normal form: one rule per
format, named after the format's type (``const_string``, ``tag``, ``sequence``... then
``tag_1``, ``tag_2`` when a name is taken), every body a choice of sequences written
``(("a" b) | (c))`` with the empty alternative first (``("" | (c))``), free text as a
``TagDispatch(...)`` macro, counted repetitions as ``rule{min, max}`` (``-1``: unbounded),
and ``root ::= ((top))`` last. Engines and xgrammar's own tests compare this text, so
treegram renders the same text from the format tree, following the rules that xgrammar's
recorded outputs show:

- formats are visited depth first and a rule is added after the rules of its parts
  (``plus`` and ``star`` name their recursive helper rule first); a format met again with
  the same end strings around it reuses its rule;
- ``any_text`` and ``triggered_tags`` exclude the end strings of the nearest enclosing
  tag (as the compiled grammar does, see :mod:`._convert`);
- an empty string written as a literal (a tag's empty ``begin``) stays ``""`` in a
  sequence, an empty alternative (an empty ``end``) is dropped from it.

Contents written in another language are rendered from treegram's own grammar of them,
in the normal form xgrammar's EBNF parser gives (:class:`_NormalForm`): EBNF grammars,
regular expressions (literals one character at a time, as xgrammar's regex converter
writes them) and the JSON Schemas of one scalar type (xgrammar's basic JSON rules). A
character class prints its ranges sorted, where xgrammar keeps them as written. Other
JSON Schemas, the XML argument styles, EBNF with macros or lookaheads, and free text
with a token budget are not rendered: :func:`structural_tag_text` returns None for a
tree holding one, and the grammar prints as treegram's own EBNF.

The text describes exactly the grammar treegram compiles: ``Grammar.from_ebnf`` parses it
(``TagDispatch`` is treegram's macro, ``{m, -1}`` its unbounded repetition) to a grammar
accepting the same strings (tests/frontends/structural_tag/test_text.py checks both).
Where xgrammar's printer would write a text that reads back differently (a NUL ends its
literal; ``\\xe9`` before a hex digit reads on), the true text is printed instead.
"""

from __future__ import annotations

import json
import re
from dataclasses import fields
from typing import Any

from treegram.frontends._ebnf import parse_ebnf
from treegram.frontends._regex import regex_to_ir
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
)
from treegram.ir import (
    MAX_CODEPOINT,
    Bytes,
    CharClass,
    Choice,
    Expr,
    Repeat,
    RuleRef,
    Seq,
    TokenSet,
    join_escapes,
    run_sized,
)

__all__ = ["structural_tag_text"]

# The empty alternative: dropped from a sequence, printed first among choices.
_EMPTY = None

_ESCAPES = {
    0x27: "\\'", 0x22: '\\"', 0x3F: "\\?", 0x5C: "\\\\", 0x07: "\\a", 0x08: "\\b",
    0x0C: "\\f", 0x0A: "\\n", 0x0D: "\\r", 0x09: "\\t", 0x0B: "\\v", 0x00: "\\0", 0x1B: "\\e",
}  # fmt: skip
_CLASS_ESCAPES = {0x2D: "\\-", 0x5D: "\\]"}
# a rule body's tokens: literals and classes (skipped when renaming), names
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_BODY_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|\[(?:[^\]\\]|\\.)*\]|' + _IDENTIFIER.pattern)

# xgrammar's JSON grammar of a schema starts with its basic rules, in this order, whatever
# the schema (the ones it does not reach included); the root rule follows, then the
# helpers of the basic rules. Written for JSON with any whitespace, no cap.
_JSON_BASIC_HEAD = [
    ("basic_escape", '(([\\"\\\\/bfnrt]) | ("u" [A-Fa-f0-9] [A-Fa-f0-9] [A-Fa-f0-9] [A-Fa-f0-9]))'),
    ("basic_string_sub", '(("\\"") | ([^\\0-\\x1f\\"\\\\\\r\\n] basic_string_sub) | '
     '("\\\\" basic_escape basic_string_sub)) (=([ \\n\\r\\t]* [,}\\]:]))'),
    ("basic_any", "((basic_number) | (basic_string) | (basic_boolean) | (basic_null) | "
     "(basic_array) | (basic_object))"),
    ("basic_integer", '(("0") | (basic_integer_1 [1-9] [0-9]*))'),
    ("basic_number", "((basic_number_1 basic_number_2 basic_number_3 basic_number_5))"),
    ("basic_string", '(("\\"" basic_string_sub))'),
    ("basic_boolean", '(("true") | ("false"))'),
    ("basic_null", '(("null"))'),
    ("basic_array", '(("[" [ \\n\\r\\t]* basic_any basic_array_items{0, -1} [ \\n\\r\\t]* "]") | '
     '("[" [ \\n\\r\\t]* "]"))'),
    ("basic_object", '(("{" [ \\n\\r\\t]* basic_string [ \\n\\r\\t]* ":" [ \\n\\r\\t]* basic_any '
     'basic_object_properties{0, -1} [ \\n\\r\\t]* "}") | ("{" [ \\n\\r\\t]* "}"))'),
    ("basic_number_digits", "(([0-9]))"),
    ("basic_array_items", '(([ \\n\\r\\t]* "," [ \\n\\r\\t]* basic_any))'),
    ("basic_object_properties", '(([ \\n\\r\\t]* "," [ \\n\\r\\t]* basic_string [ \\n\\r\\t]* ":" '
     "[ \\n\\r\\t]* basic_any))"),
]  # fmt: skip
_JSON_BASIC_TAIL = [
    ("basic_integer_1", '("" | ("-"))'),
    ("basic_number_1", '("" | ("-"))'),
    ("basic_number_2", '(("0") | ([1-9] [0-9]*))'),
    ("basic_number_3", '("" | ("." basic_number_digits{1, -1}))'),
    ("basic_number_4", '("" | ([+\\-]))'),
    ("basic_number_5", '("" | ([eE] basic_number_4 basic_number_digits{1, -1}))'),
]
# JSON Schemas whose root is one basic rule
_JSON_SCALARS = {"number", "integer", "boolean", "null", "string"}
# an xgrammar macro call or rule attribute: parsed by treegram into other rules
_EBNF_EXTRAS = re.compile(r"\b(?:TagDispatch|TokenTagDispatch|Regex|Substring)\s*\(|\]\s*::=")


class _UnprintedError(Exception):
    """A format this module does not render (the grammar keeps treegram's printing)."""


def structural_tag_text(tag: StructuralTag) -> str | None:
    """xgrammar's normal-form EBNF text of a parsed structural tag.

    Parameters
    ----------
    tag : StructuralTag
        A structural tag that compiled (``parse_structural_tag`` output); the checks of
        the compiler are not repeated here.

    Returns
    -------
    str or None
        The text, one rule per line, ending with a newline; None when the tree holds a
        content that is not rendered (a JSON Schema other than one scalar type, an XML
        argument style, EBNF with macros, attributes, lookaheads or rule names that are
        not plain identifiers, free text with a token budget).
    """
    return run_sized(False, _render, tag)


def _render(tag: StructuralTag) -> str | None:
    printer = _Printer()
    try:
        top = printer.visit(tag.format, ())
    except _UnprintedError:
        return None
    printer.add_root(top)
    rules = [*printer.rules, *printer.deferred]
    return "".join(f"{name}{printer.attrs.get(name, '')} ::= {body}\n" for name, body in rules)


class _Printer:
    """The rules of one rendering, in the order they are added, with unique names."""

    def __init__(self) -> None:
        self.rules: list[list[str]] = []
        self._taken: set[str] = set()
        self._next: dict[str, int] = {}
        self._done: dict[int, str] = {}
        self._ids: dict[tuple, int] = {}
        self._memo: dict[tuple, int] = {}
        # the end token of the innermost enclosing tag (token formats exclude it)
        self._end_tokens: tuple[int | str, ...] = ()
        self.attrs: dict[str, str] = {}  # rule attributes (``[max_tokens=3]``) by name
        self.deferred: list[list[str]] = []  # rules printed after root (TokenTagDispatch)

    def _fingerprint(self, fmt: Format, ends: tuple[str, ...]) -> int:
        """A number for ``fmt``'s JSON form with the end strings its free text excludes:
        formats with equal numbers have equal rules (xgrammar shares them). Numbered
        bottom up, so a deep tree costs time linear in its size."""
        memo = (id(fmt), ends, self._end_tokens)
        if memo not in self._memo:
            outer = self._end_tokens
            inner = _ends(fmt) if isinstance(fmt, TagFormat) else ends
            if isinstance(fmt, TagFormat):
                self._end_tokens = _end_tokens(fmt)
            parts: list[Any] = [type(fmt).__name__]
            try:
                for f in fields(fmt):  # type: ignore[arg-type]
                    value = inner if f.name == "end" else getattr(fmt, f.name)
                    if f.name == "end" and isinstance(fmt.end, TokenFormat):  # type: ignore[union-attr]
                        value = fmt.end  # type: ignore[union-attr]
                    parts.append((f.name, self._value(value, inner)))
            finally:
                self._end_tokens = outer
            if isinstance(fmt, (AnyTextFormat, TriggeredTagsFormat)):
                parts.append(ends)
            if isinstance(fmt, (ExcludeTokenFormat, AnyTokensFormat, TokenTriggeredTagsFormat)):
                parts.append(json.dumps(list(outer)))
            self._memo[memo] = self._ids.setdefault(tuple(parts), len(self._ids))
        return self._memo[memo]

    def _value(self, value: Any, ends: tuple[str, ...]) -> Any:
        if isinstance(value, (list, tuple)):
            return tuple(self._value(v, ends) for v in value)
        if hasattr(value, "__dataclass_fields__"):
            return self._fingerprint(value, ends)
        return json.dumps(value, sort_keys=True)

    def _name(self, hint: str) -> str:
        """``hint``, or ``hint_<n>`` with the smallest unused n counting on from the last
        one given for ``hint``."""
        name = hint
        if name in self._taken:
            n = self._next.get(hint, 1)
            while f"{hint}_{n}" in self._taken:
                n += 1
            self._next[hint] = n
            name = f"{hint}_{n}"
        self._taken.add(name)
        return name

    def add(self, hint: str, body: str) -> str:
        name = self._name(hint)
        self.rules.append([name, body])
        return name

    def embed(self, rules: list[tuple[str, str]], root: str) -> str:
        """Add another grammar's rules (normal-form bodies) under fresh names, all names
        first, in order; the new name of its rule ``root``."""
        new = {name: self._name(name) for name, _ in rules}
        self.rules.extend([new[name], _renamed(body, new)] for name, body in rules)
        return new[root]

    def add_root(self, top: str) -> None:
        """The root rule ``root ::= ((top))``, added last. An embedded grammar may have
        taken the name ``root``: its rule is renamed ``root_<i>`` (the smallest free i)."""
        name = self.add("root", _choices([[top]]))
        if name == "root":
            return
        i = 0
        while f"root_{i}" in self._taken:
            i += 1
        mapping = {"root": f"root_{i}"}
        for rule in self.rules:
            rule[0] = mapping.get(rule[0], rule[0])
            rule[1] = _renamed(rule[1], mapping)
        self.rules[-1][0] = "root"

    def reserve(self, hint: str) -> int:
        """Add a rule whose body is set later (a recursive rule needs its own name)."""
        self.rules.append([self._name(hint), ""])
        return len(self.rules) - 1

    # ------------------------------------------------------------------ formats
    def visit(self, fmt: Format, ends: tuple[str, ...]) -> str:
        """The name of the rule of ``fmt``; ``ends`` are the end strings of the nearest
        enclosing tag."""
        key = self._fingerprint(fmt, ends)
        if key not in self._done:
            self._done[key] = self._visit(fmt, ends)
        return self._done[key]

    def _visit(self, fmt: Format, ends: tuple[str, ...]) -> str:  # noqa: C901
        if isinstance(fmt, ConstStringFormat):
            value = _literal(fmt.value) if fmt.value else _EMPTY
            return self.add("const_string", _choices([[value]]))
        if isinstance(fmt, AnyTextFormat):
            if fmt.max_tokens is not None or fmt.max_chars is not None:
                # a budget: treegram's own text prints it
                raise _UnprintedError
            excludes = [*fmt.excludes, *(e for e in ends if e)]
            if excludes:
                return self.add("any_text", _tag_dispatch([], loop=False, excludes=excludes))
            return self.add("any_text", _choices([[f"[{_class_range(0, MAX_CODEPOINT)}]*"]]))
        if isinstance(fmt, SequenceFormat):
            names = [self.visit(e, ends) for e in fmt.elements]
            return self.add("sequence", _choices([names]))
        if isinstance(fmt, OrFormat):
            names = [self.visit(e, ends) for e in fmt.elements]
            return self.add("or", _choices([[n] for n in names]))
        if isinstance(fmt, TagFormat):
            content = self._content(fmt)
            end = self._end(fmt)
            return self.add("tag", _choices([[_begin(fmt), content, end]]))
        if isinstance(fmt, TokenFormat):
            return self.add("token", _choices([[_tokens([fmt.token])]]))
        if isinstance(fmt, ExcludeTokenFormat):
            excluded = _tokens([*fmt.exclude_tokens, *self._end_tokens], exclude=True)
            return self.add("exclude_token", _choices([[excluded]]))
        if isinstance(fmt, AnyTokensFormat):
            excluded = _tokens([*fmt.exclude_tokens, *self._end_tokens], exclude=True)
            inner = self.add("any_tokens_inner", _choices([[excluded]]))
            i = self.reserve("any_tokens")
            name = self.rules[i][0]
            if fmt.max_tokens is not None:
                self.attrs[name] = f"[max_tokens={fmt.max_tokens}]"
            empty_only = fmt.max_tokens == 0
            self.rules[i][1] = _choices([[_EMPTY]] if empty_only else [[_EMPTY], [inner, name]])
            return name
        if isinstance(fmt, TokenTriggeredTagsFormat):
            return self._token_triggered(fmt)
        if isinstance(fmt, TokenDispatchFormat):
            pairs = [(token, self.visit(content, ends)) for token, content in fmt.rules]
            body = _token_tag_dispatch(pairs, loop=fmt.loop, excludes=list(fmt.exclude_tokens))
            return self._with_deferred("token_tag_dispatch", body)
        if isinstance(fmt, TriggeredTagsFormat):
            return self._triggered(fmt, ends)
        if isinstance(fmt, TagsWithSeparatorFormat):
            return self._with_separator(fmt, ends)
        if isinstance(fmt, OptionalFormat):
            content = self.visit(fmt.content, ends)
            return self.add("optional", _choices([[_EMPTY], [content]]))
        if isinstance(fmt, (PlusFormat, StarFormat)):
            content = self.visit(fmt.content, ends)
            hint = "plus_star" if isinstance(fmt, PlusFormat) else "star"
            i = self.reserve(hint)
            loop = self.rules[i][0]
            self.rules[i][1] = _choices([[_EMPTY], [content, loop]])
            if isinstance(fmt, PlusFormat):
                return self.add("plus", _choices([[content, loop]]))
            return self.add("star", _choices([[loop]]))
        if isinstance(fmt, RepeatFormat):
            content = self.visit(fmt.content, ends)
            return self.add("repeat", _choices([[f"{content}{{{fmt.min}, {fmt.max}}}"]]))
        if isinstance(fmt, DispatchFormat):
            pairs = [(pattern, self.visit(content, ends)) for pattern, content in fmt.rules]
            body = _tag_dispatch(pairs, loop=fmt.loop, excludes=list(fmt.excludes))
            return self.add("tag_dispatch", body)
        if isinstance(fmt, JSONSchemaFormat):
            return self._json(fmt)
        if isinstance(fmt, GrammarFormat) and not _EBNF_EXTRAS.search(fmt.grammar):
            ir = parse_ebnf(fmt.grammar)
            return self.embed(_NormalForm(ir).rules(), ir.root)
        if isinstance(fmt, RegexFormat):
            ir = regex_to_ir(fmt.pattern)
            return self.embed(_NormalForm(ir, per_character=True).rules(), ir.root)
        raise _UnprintedError(type(fmt).__name__)

    def _json(self, fmt: JSONSchemaFormat) -> str:
        schema = fmt.json_schema
        kind = schema.get("type") if isinstance(schema, dict) and len(schema) == 1 else None
        default = fmt.style == "json" and fmt.max_whitespace_cnt is None and not fmt.excludes
        if not (default and not fmt.any_order and kind in _JSON_SCALARS):
            raise _UnprintedError("JSONSchemaFormat")
        root = ("root", f"((basic_{kind}))")
        return self.embed([*_JSON_BASIC_HEAD, root, *_JSON_BASIC_TAIL], "root")

    def _content(self, tag: TagFormat) -> str:
        """The rule of a tag's content, printed with the tag's end token (if any)."""
        outer, self._end_tokens = self._end_tokens, _end_tokens(tag)
        try:
            return self.visit(tag.content, _ends(tag))
        finally:
            self._end_tokens = outer

    def _with_deferred(self, hint: str, body: str) -> str:
        """``hint ::= ((hint_<n>))`` with ``hint_<n> ::= body`` printed after the root
        rule, as xgrammar places its ``TokenTagDispatch`` rules."""
        name = self._name(hint)
        inner = self._name(hint)
        self.rules.append([name, _choices([[inner]])])
        self.deferred.append([inner, body])
        return name

    def _token_triggered(self, fmt: TokenTriggeredTagsFormat) -> str:
        contents = [self._content(t) for t in fmt.tags]
        if fmt.at_least_one and fmt.stop_after_first:
            full = [[_begin(t), c, self._end(t)] for t, c in zip(fmt.tags, contents, strict=True)]
            return self.add("token_triggered_tags", _choices(full))
        if fmt.at_least_one:
            raise _UnprintedError("token_triggered_tags at_least_one")
        pairs = []
        for trigger in fmt.trigger_tokens:
            alternatives = [
                [c, self._end(t)]
                for t, c in zip(fmt.tags, contents, strict=True)
                if isinstance(t.begin, TokenFormat) and t.begin.token == trigger
            ]
            group = self.add("token_triggered_tags_group", _choices(alternatives))
            pairs.append((trigger, group))
        excludes = [*fmt.exclude_tokens, *self._end_tokens]
        body = _token_tag_dispatch(pairs, loop=not fmt.stop_after_first, excludes=excludes)
        return self._with_deferred("token_triggered_tags", body)

    def _end(self, tag: TagFormat) -> Any:
        """A tag's end: a literal, the empty alternative, or a rule of the alternatives."""
        if isinstance(tag.end, TokenFormat):
            return _tokens([tag.end.token])
        ends = _ends(tag)
        if len(ends) == 1:
            return _literal(ends[0]) if ends[0] else _EMPTY
        alternatives = [[_literal(e) if e else _EMPTY] for e in ends]
        return self.add("tag_end", _choices(alternatives))

    def _full_tags(self, tags: list[TagFormat], contents: list[str]) -> str:
        """The alternatives ``begin content end`` of ``tags``."""
        return _choices(
            [[_literal(t.begin), c, self._end(t)] for t, c in zip(tags, contents, strict=True)]
        )

    def _triggered(self, fmt: TriggeredTagsFormat, ends: tuple[str, ...]) -> str:
        contents = [self.visit(t.content, _ends(t)) for t in fmt.tags]
        if fmt.at_least_one and fmt.stop_after_first:
            return self.add("triggered_tags", self._full_tags(fmt.tags, contents))
        pairs = []
        for trigger in fmt.triggers:
            alternatives = [
                [_literal(t.begin[len(trigger) :]), c, self._end(t)]
                for t, c in zip(fmt.tags, contents, strict=True)
                if t.begin.startswith(trigger)
            ]
            pairs.append((trigger, self.add("triggered_tags_group", _choices(alternatives))))
        excludes = [*fmt.excludes, *(e for e in ends if e)]
        dispatch = _tag_dispatch(pairs, loop=not fmt.stop_after_first, excludes=excludes)
        if not fmt.at_least_one:
            return self.add("triggered_tags", dispatch)
        first = self.add("triggered_tags_first", self._full_tags(fmt.tags, contents))
        sub = self.add("triggered_tags_sub", dispatch)
        return self.add("triggered_tags", _choices([[first, sub]]))

    def _with_separator(self, fmt: TagsWithSeparatorFormat, ends: tuple[str, ...]) -> str:
        names = [self.visit(t, ends) for t in fmt.tags]
        tags = self.add("tags_with_separator_tags", _choices([[n] for n in names]))
        if fmt.stop_after_first:
            alternatives: list[list[Any]] = [[tags]]
            if not fmt.at_least_one:
                alternatives.append([_EMPTY])
            return self.add("tags_with_separator", _choices(alternatives))
        i = self.reserve("tags_with_separator_sub")
        sub = self.rules[i][0]
        separator = [_literal(fmt.separator)] if fmt.separator else []
        self.rules[i][1] = _choices([[*separator, tags, sub], [_EMPTY]])
        alternatives = [[tags, sub]]
        if not fmt.at_least_one:
            alternatives.append([_EMPTY])
        return self.add("tags_with_separator", _choices(alternatives))


def _renamed(body: str, mapping: dict[str, str]) -> str:
    """``body`` with the rule names in ``mapping`` replaced (not inside literals)."""
    return _BODY_TOKEN.sub(lambda m: mapping.get(m.group(), m.group()), body)


def _ends(tag: TagFormat) -> tuple[str, ...]:
    if isinstance(tag.end, TokenFormat):
        return ()
    return (tag.end,) if isinstance(tag.end, str) else tuple(tag.end)


def _end_tokens(tag: TagFormat) -> tuple[int | str, ...]:
    """The end token of a tag, which the token formats inside it exclude."""
    return (tag.end.token,) if isinstance(tag.end, TokenFormat) else ()


def _begin(tag: TagFormat) -> str:
    if isinstance(tag.begin, TokenFormat):
        return _tokens([tag.begin.token])
    return _literal(tag.begin)


def _tokens(refs: list, exclude: bool = False) -> str:
    """A token-id element over token ids and token texts (``Token(1)``)."""
    ids = tuple(sorted({r for r in refs if isinstance(r, int)}))
    names = tuple(sorted({r for r in refs if isinstance(r, str)}))
    return TokenSet(ids, exclude, names).text


def _token_tag_dispatch(pairs: list[tuple[Any, str]], *, loop: bool, excludes: list) -> str:
    """xgrammar's ``TokenTagDispatch`` text (the EBNF macro of the same meaning)."""
    if len({p for p, _ in pairs}) != len(pairs) or any(isinstance(p, str) for p, _ in pairs):
        raise _UnprintedError("TokenTagDispatch repeated or named trigger")
    if any(isinstance(e, str) for e in excludes) or {p for p, _ in pairs} & set(excludes):
        # a name, or a trigger also excluded: the macro refuses both
        raise _UnprintedError("TokenTagDispatch named or overlapping exclude")
    lines = [f"  ({p}, {rule})," for p, rule in pairs]
    lines.append(f"  loop_after_dispatch={'true' if loop else 'false'},")
    lines.append("  excludes=(" + ", ".join(str(e) for e in _unique_list(excludes)) + ")")
    return "TokenTagDispatch(\n" + "\n".join(lines) + "\n)"


def _unique_list(items: list) -> list:
    return list(dict.fromkeys(items))


class _NormalForm:
    """The rules of an EBNF grammar as xgrammar's parser and normaliser leave them.

    The parser turns ``x?`` into a rule ``("" | (x))``, ``x*`` into ``("" | (x r))`` (a
    character class keeps ``[...]*``) and ``x+`` into ``((x r) | (x))``, each named after
    the rule it is in (``root_1``), added after the written rules in the order the
    quantifiers close (``x{m,n}`` repeats a rule: ``x`` itself, or a new rule of it);
    then every body becomes a choice of sequences, a choice inside a sequence becoming one
    more rule, added last. Lookaheads and temperatures are not rendered.
    """

    def __init__(self, ir: Any, *, per_character: bool = False) -> None:
        # xgrammar's regex converter writes a literal one character at a time
        self._per_character = per_character
        self._names = _Printer()
        for rule in ir.rules:
            if rule.lookahead is not None or rule.temperature is not None:
                raise _UnprintedError("EBNF rule attribute")
            if not _IDENTIFIER.fullmatch(rule.name):  # ("a-b.c", "-1": not renamed safely)
                raise _UnprintedError("EBNF rule name")
            self._names._name(rule.name)
        self._bodies: list[list[Any]] = [[r.name, r.body] for r in ir.rules]
        self._rule = ""

    def rules(self) -> list[tuple[str, str]]:
        # the parser's rules first (written ones, then quantifier ones), then normalise
        for entry in list(self._bodies):
            self._rule = entry[0]
            entry[1] = self._lift(entry[1])
        out: list[tuple[str, str]] = []
        i = 0
        while i < len(self._bodies):  # normalising may add rules at the end
            name, body = self._bodies[i]
            self._rule = name
            if isinstance(body, _Normalized):
                out.append((name, _choices(body.alternatives)))
            else:
                out.append((name, _choices(self._alternatives(body))))
            i += 1
        return out

    def _new_rule(self, body: Any) -> RuleRef:
        name = self._names._name(self._rule)
        self._bodies.append([name, body])
        return RuleRef(name)

    def _lift(self, e: Expr) -> Any:
        """``e`` with its quantifiers replaced by rule references (or ``_Star``)."""
        if isinstance(e, Seq):
            return Seq(tuple(self._lift(x) for x in e.items))
        if isinstance(e, Choice):
            return Choice(tuple(self._lift(x) for x in e.items))
        if not isinstance(e, Repeat):
            return e
        item = self._lift(e.item)
        bounds = (e.min, e.max)
        if bounds == (0, None) and isinstance(item, CharClass):
            return _Star(item)
        if bounds not in ((0, None), (1, None), (0, 1)):
            # a counted repetition repeats a rule: the item's own, or a new one
            ref = item if isinstance(item, RuleRef) else self._new_rule(item)
            return _Counted(ref.name, e.min, -1 if e.max is None else e.max)
        if bounds == (0, 1):
            return self._new_rule(Choice((Bytes(b""), item)))
        name = self._names._name(self._rule)
        ref = RuleRef(name)
        body = Choice((Bytes(b""), Seq((item, ref))) if e.min == 0 else (Seq((item, ref)), item))
        self._bodies.append([name, body])
        return ref

    def _alternatives(self, e: Any) -> list[list[Any]]:
        """The alternatives of ``e`` as sequences of printed elements."""
        if isinstance(e, Choice):
            return [a for x in e.items for a in self._alternatives(x)]
        return [self._sequence(e)]

    def _sequence(self, e: Any) -> list[Any]:
        if isinstance(e, Seq):
            return [x for item in e.items for x in self._sequence(item)]
        if isinstance(e, Choice):
            alternatives = self._alternatives(e)
            if len(alternatives) == 1:
                return [x for x in alternatives[0] if x is not _EMPTY]
            # its own rule, holding the alternatives already normalised (and their rules)
            return [self._new_rule(_Normalized(alternatives)).name]
        if self._per_character and isinstance(e, Bytes) and len(e.data) > 1:
            try:
                return [_literal(c) for c in e.data.decode("utf-8")]
            except UnicodeDecodeError:
                raise _UnprintedError("non-UTF-8 literal") from None
        return [_element(e)]


class _Normalized:
    """A rule body already turned into alternatives of printed elements."""

    def __init__(self, alternatives: list[list[Any]]) -> None:
        self.alternatives = alternatives


class _Counted:
    """A rule repeated ``lo`` to ``hi`` times (``hi=-1``: unbounded), one element."""

    def __init__(self, name: str, lo: int, hi: int) -> None:
        self.text = f"{name}{{{lo}, {hi}}}"


class _Star:
    """A character class repeated any number of times (``[...]*``, one element)."""

    def __init__(self, cls: CharClass) -> None:
        self.cls = cls


def _element(e: Any) -> Any:
    if isinstance(e, Bytes):
        if not e.data:
            return _EMPTY
        try:
            return _literal(e.data.decode("utf-8"))
        except UnicodeDecodeError:
            raise _UnprintedError("non-UTF-8 literal") from None
    if isinstance(e, CharClass):
        if not e.negated and len(e.ranges) == 1 and e.ranges[0][0] == e.ranges[0][1]:
            return _literal(chr(e.ranges[0][0]))
        return _char_class(e)
    if isinstance(e, _Counted):
        return e.text
    if isinstance(e, _Star):
        return _char_class(e.cls) + "*"
    if isinstance(e, RuleRef):
        return e.name
    raise _UnprintedError(type(e).__name__)  # pragma: no cover - lifted before


def _char_class(cc: CharClass) -> str:
    pieces = ["^"] if cc.negated else []
    for lo, hi in cc.ranges:
        pieces.append(_class_range(lo, hi) if hi != lo else _escape(lo, _CLASS_ESCAPES))
    return "[" + join_escapes(pieces) + "]"


# ---------------------------------------------------------------------- printing
def _choices(alternatives: list[list[Any]]) -> str:
    """A rule body in normal form: the sequences of ``alternatives`` (empty items
    dropped), an empty one written once, first."""
    printed = []
    empty = False
    for items in alternatives:
        kept = [x for x in items if x is not _EMPTY]
        if kept:
            printed.append("(" + " ".join(kept) + ")")
        else:
            empty = True
    if empty:
        printed.insert(0, '""')
    return "(" + " | ".join(printed) + ")"


def _tag_dispatch(pairs: list[tuple[str, str]], *, loop: bool, excludes: list[str]) -> str:
    # the macro refuses an empty exclude, or one a trigger starts with (xgrammar's does
    # too), and offers every rule of a repeated trigger where the compiled free text
    # takes the first: such free text is left to treegram's own printing
    triggers = [p for p, _ in pairs]
    if any(not e for e in excludes) or any(p.startswith(e) for e in excludes for p in triggers):
        raise _UnprintedError("TagDispatch excludes")
    if len(set(triggers)) != len(triggers):
        raise _UnprintedError("TagDispatch repeated trigger")
    lines = [f"  ({_literal(p)}, {rule})," for p, rule in pairs]
    lines.append(f"  loop_after_dispatch={'true' if loop else 'false'},")
    lines.append("  excludes=(" + ", ".join(_literal(e) for e in excludes) + ")")
    return "TagDispatch(\n" + "\n".join(lines) + "\n)"


def _escape(cp: int, special: dict[int, str]) -> str:
    if cp in special:
        return special[cp]
    if cp in _ESCAPES:
        return _ESCAPES[cp]
    if 0x20 <= cp <= 0x7E:
        return chr(cp)
    if cp <= 0xFF:
        return f"\\x{cp:02x}"
    return f"\\u{cp:04x}" if cp <= 0xFFFF else f"\\U{cp:08x}"


def _literal(text: str) -> str:
    return '"' + join_escapes([_escape(ord(c), {}) for c in text]) + '"'


def _class_range(lo: int, hi: int) -> str:
    return join_escapes([_escape(lo, _CLASS_ESCAPES), "-", _escape(hi, _CLASS_ESCAPES)])
