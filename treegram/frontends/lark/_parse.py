"""The Lark parser: recursive descent over the text (Lark is line-oriented, so the scanner
and the parser share the position); it collects the definitions, ``%ignore`` items,
imports, rule attributes and helper rules that :mod:`._lower` turns into IR."""

from __future__ import annotations

import math
import re
from collections.abc import Callable

from treegram.frontends.lark._scan import Scanner
from treegram.frontends.lark._syntax import COMMON, IGNORE, Definition, Marker, is_terminal
from treegram.ir import (
    Bytes,
    CharClass,
    Choice,
    Expr,
    Repeat,
    Rule,
    RuleRef,
    Seq,
    TokenSet,
    token_rule,
)

__all__ = ["Parser"]

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Rule, terminal and grammar names may also hold '-' after their first character (as in
# xgrammar, ``x->y`` is the name ``x-`` and a stray '>').
_LARK_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")
_SPACE = re.compile(r"(?:\s+|//[^\n]*|#[^\n]*)*")
# Rules marked [lazy], [suffix=...], [stop=...] or [temperature=...]: xgrammar handles them
# like terminals.
_LEXICAL_RULE = re.compile(
    r"^[ \t]*[?!]?([A-Za-z_][A-Za-z0-9_-]*)[ \t]*\[[^\n]*?\b(?:lazy|temperature|suffix|stop)\b",
    re.M,
)
_TEMPERATURE_RULE = re.compile(
    r"^[ \t]*[?!]?([A-Za-z_][A-Za-z0-9_-]*)[ \t]*\[[^\]\n]*\btemperature\b", re.M
)
_NUMBER_TEXT = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_IMPORT_PATH = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")
# Each group level costs about five Python frames of the recursive descent.
_MAX_NESTING = 128
# Rule attributes the parser reads.
_ATTRIBUTES = frozenset(
    {"capture", "lazy", "max_chars", "max_tokens", "temperature", "suffix", "stop", "stop_capture"}
)
_MAX_TOKENS = 1_000_000
# The widest numeric special-token range xgrammar accepts.
_MAX_TOKEN_RANGE = 1_000_000
# Helper rules are named with a '.', which no Lark name holds (EBNF names may).
_HELPER = "lark."
_CAPTURE_NAME = re.compile(r"[A-Za-z0-9_.\-]+")


class Parser(Scanner):
    """Recursive descent straight over the text (Lark is line-oriented, so the scanner
    and the parser share the position)."""

    def __init__(self, text: str, embed) -> None:
        super().__init__(text)
        # names of the rules handled like terminals (lazy, suffix, stop, temperature),
        # known before any reference is parsed
        self.lazy = set(_LEXICAL_RULE.findall(text))
        self.hot = set(_TEMPERATURE_RULE.findall(text))  # these may hold sub-grammars
        self.embed = embed  # callback: (kind, value, pos) -> Expr for %json and @name
        self.defs: dict[str, Definition] = {}
        self.ignores: list[Expr] = []
        self.ignore_refs: list[tuple[str, int]] = []
        self.imports: dict[str, tuple[str, int]] = {}
        self.current: Definition | None = None
        self.depth = 0
        # rule name -> (attributes, position of the name)
        self.attrs: dict[str, tuple[dict[str, object], int]] = {}
        self.regex_atoms: set[int] = set()  # ids of the expressions of /regex/ atoms
        self.helpers: list[Rule] = []  # rules of %regex substrings (names start _HELPER)
        self.token_rules: dict[str, Rule] = {}  # the rules of special tokens, by name
        self.known_token: Callable[[str], bool] | None = None  # see lark_to_ir
        self.options: dict[str, object] = {}  # %grammar_options, merged
        self.attr_pos: dict[tuple[str, str], int] = {}  # (rule, attribute) -> position
        # (rule, "capture" or "stop_capture") -> capture name; captures are not recorded
        self.captures: dict[tuple[str, str], str] = {}

    # -- top level
    def parse(self) -> None:
        text = self.text
        while True:
            self.pos = _SPACE.match(text, self.pos).end()
            if self.pos >= len(text):
                return
            if self.peek() == "%":
                self.parse_directive()
            else:
                self.parse_definition()
            self.skip()
            if not self.at_line_end():
                self.error("expected end of grammar item")

    def parse_definition(self) -> None:
        start = self.pos
        if self.peek() in ("?", "!"):
            self.pos += 1
        m = _LARK_NAME.match(self.text, self.pos)
        if m is None:
            self.error("expected rule or terminal name")
        name = m.group()
        name_pos = self.pos
        self.pos = m.end()
        if self.text.startswith("::", self.pos):
            self.error("parametric grammar is not supported")
        self.skip()
        if self.peek() == "[":
            self.parse_attributes(name, name_pos)
            self.skip()
        if self.peek() == ".":
            self.error("rule and terminal priorities are not supported")
        if self.peek() == "{":
            self.error("Lark templates are not supported")
        if self.peek() != ":":
            kind = "terminal" if is_terminal(name) else "rule"
            self.error(f"expected ':' after {kind} name {name!r}")
        self.pos += 1
        if name in self.defs or name in self.imports:
            self.error(f"duplicate rule or terminal {name!r}", start)
        # xgrammar treats a lazy, suffix, stop (or temperature) rule as a terminal:
        # %ignore neither enters it nor skips after it, and it references terminals only
        lexical = is_terminal(name) or name in self.lazy
        d = Definition(name, name_pos, lexical, refs=[])
        self.defs[name] = d
        self.current = d
        self.skip()
        d.body = self.parse_expansions(top=True)
        self.current = None

    def parse_attributes(self, name: str, name_pos: int) -> None:
        if is_terminal(name):
            self.error("attributes are only supported on rules", name_pos + 1)
        self.pos += 1
        attrs: dict[str, object] = {}
        while True:
            self.skip()
            m = _NAME.match(self.text, self.pos)
            if m is None:
                self.error("expected a rule attribute name")
            attr, attr_pos = m.group(), self.pos
            if attr not in _ATTRIBUTES:
                self.error(f"rule attribute {attr!r} is not supported")
            if attr in attrs:
                self.error(f"{attr} attribute is specified more than once")
            self.attr_pos[name, attr] = attr_pos
            self.pos = m.end()
            self.skip()
            if attr in ("suffix", "stop"):
                other = "stop" if attr == "suffix" else "suffix"
                if other in attrs:
                    self.error(f"{attr} cannot be combined with {other}", attr_pos)
                self.expect_value(attr, "a marker")
                attrs[attr] = self.read_marker(attr)
            elif attr == "max_tokens":
                # not on rules consumed by dynamic dispatch (checked in lower_lazy)
                self.expect_value("max_tokens", "a count")
                count_pos = self.pos
                count = self.read_count("an integer after max_tokens=")
                if not 1 <= count <= _MAX_TOKENS:
                    what = "positive" if count < 1 else f"at most {_MAX_TOKENS:,}"
                    self.error(f"max_tokens must be {what}", count_pos)
                attrs[attr] = count
            elif attr == "max_chars":
                self.expect_value("max_chars", "a count")
                attrs[attr] = self.read_count("an integer after max_chars=")
            elif attr == "temperature":
                self.expect_value("temperature", "a number")
                m = _NUMBER_TEXT.match(self.text, self.pos)
                if m is None:
                    self.error("expected a number after temperature=")
                value = float(m.group())
                if not math.isfinite(value) or value < 0:
                    self.error(f"temperature must be a finite non-negative number, got {m.group()}")
                self.pos = m.end()
                attrs[attr] = value
            elif attr == "lazy":
                attrs[attr] = True
            elif attr == "stop_capture":
                self.expect_value("stop_capture", "a string")
                attrs[attr] = self.read_capture_name("stop_capture")
            else:  # capture: no effect on the language (no captures are recorded)
                attrs[attr] = name
                if self.peek() == "=":
                    self.pos += 1
                    self.skip()
                    attrs[attr] = self.read_capture_name("capture")
            if self.list_goes_on("]", "rule attributes"):
                continue
            if "stop_capture" in attrs and "suffix" not in attrs and "stop" not in attrs:
                self.error(
                    "stop_capture requires stop or suffix", self.attr_pos[name, "stop_capture"]
                )
            for key in ("capture", "stop_capture"):
                if key in attrs:
                    self.captures[name, key] = attrs.pop(key)  # type: ignore[assignment]
            if attrs:
                self.attrs[name] = (attrs, name_pos)
            return

    def read_name(self, what: str) -> str:
        """The name at the position, stepped over; an error (expected ``what``) if none."""
        m = _NAME.match(self.text, self.pos)
        if m is None:
            self.error(f"expected {what}")
        self.pos = m.end()
        return m.group()

    def list_goes_on(self, close: str, what: str) -> bool:
        """After an item of a list: True past a ``,`` (another item follows), False past
        ``close`` (the list ends); anything else is an error in ``what``."""
        self.skip()
        if self.peek() == ",":
            self.pos += 1
            return True
        if self.peek() != close:
            self.error(f"expected ',' or '{close}' in {what}")
        self.pos += 1
        return False

    def expect_value(self, attr: str, what: str) -> None:
        """Step over the ``=`` after an attribute that takes a value (``what`` it is)."""
        if self.peek() != "=":
            self.error(f"expected '=' and {what} after {attr}")
        self.pos += 1
        self.skip()

    def read_capture_name(self, attr: str) -> str:
        """The string literal naming a capture, checked as xgrammar checks it."""
        if self.peek() != '"':
            self.error(f"expected string literal after {attr}=")
        pos = self.pos
        value = self.read_string()
        if not value:
            self.error("capture name must not be empty", pos)
        if not _CAPTURE_NAME.fullmatch(value):
            self.error("capture name must only contain letters, digits, '_', '-' and '.'", pos)
        return value

    def read_marker(self, attr: str) -> Marker:
        """The marker after ``suffix=`` or ``stop=``: a string literal (flag ``i``
        allowed), a regular expression (flags ``s`` and ``u``) or a terminal name."""
        pos, c = self.pos, self.peek()
        if c == '"':
            value = self.read_string()
            flags = self.read_flags()
            if flags and set(flags) != {"i"}:
                self.error(f"string literal flag {flags!r} is not supported", pos)
            if not value:
                self.error(f"{attr} must not be empty", pos)
            if flags:
                if not value.isascii():
                    self.error(
                        "case-insensitive string literals currently support ASCII characters only",
                        pos,
                    )
                return Marker(_fold_literal(value), pos, kind=attr)
            return Marker(Bytes(value.encode("utf-8")), pos, value, kind=attr)
        if c == "/":
            return Marker(self.read_regex(marker=True), pos, kind=attr)
        m = _LARK_NAME.match(self.text, self.pos)
        if m is None:
            self.error(f"expected a string, a regular expression or a terminal name after {attr}=")
        if not is_terminal(m.group()):
            self.error(f"{attr} terminal name must be uppercase", pos)
        self.pos = m.end()
        return Marker(RuleRef(m.group()), pos, ref=m.group(), kind=attr)

    def parse_directive(self) -> None:
        start = self.pos
        m = _NAME.match(self.text, self.pos + 1)
        word = m.group() if m else ""
        if word == "ignore":
            self.pos = m.end()
            self.skip()
            d = Definition("%ignore", start, True, refs=[])
            self.current = d
            self.ignores.append(
                Bytes(b"") if self.at_line_end() else self.parse_expansions(top=True)
            )
            self.ignore_refs.extend(d.refs)
            self.current = None
        elif word == "import":
            self.pos = m.end()
            self.parse_import(start)
        elif word == "grammar_options":
            self.pos = m.end()
            self.skip()
            value, end = self.read_json("%grammar_options", start)
            self.pos = end
            if not isinstance(value, dict):
                self.error("%grammar_options value must be an object", start)
            for key, option in value.items():
                if key == "allow_initial_skip":
                    if not isinstance(option, bool):
                        self.error("allow_initial_skip must be a boolean", start)
                    self.options[key] = option
                elif key in ("no_forcing", "allow_invalid_utf8"):
                    # llguidance options; their default (false) is what treegram does
                    if option is not False:
                        self.error(f"%grammar_options option {key!r} is not supported", start)
                else:
                    self.error(f"unknown %grammar_options option {key!r}", start)
        else:
            self.error(f"directive %{word} is not supported", start)

    def parse_import(self, start: int) -> None:
        self.skip()
        m = _IMPORT_PATH.match(self.text, self.pos)
        if m is None:
            self.error("expected import path")
        path = m.group()
        self.pos = m.end()
        self.skip()
        if self.peek() == "(":
            if path != "common":
                self.error(f"unknown common import {path!r}", start)
            self.pos += 1
            names = []
            while True:
                self.skip()
                names.append(self.read_name("a terminal name in the import list"))
                if self.list_goes_on(")", "the import list"):
                    continue
                break
            for name in names:
                self.add_import(name, name, start)
            return
        module, _, name = path.rpartition(".")
        if module != "common" or name not in COMMON:
            self.error(f"unknown common import {path!r}", start)
        alias = name
        if self.text.startswith("->", self.pos):
            self.pos += 2
            self.skip()
            alias = self.read_name("alias name after '->'")
        self.add_import(name, alias, start)

    def add_import(self, name: str, alias: str, pos: int) -> None:
        if name not in COMMON:
            self.error(f"unknown common import 'common.{name}'", pos)
        if alias in self.defs or alias in self.imports:
            self.error(f"duplicate rule or terminal {alias!r}", pos)
        self.imports[alias] = (name, pos)

    # -- expressions
    def parse_expansions(self, top: bool = False) -> Expr:
        alts = [self.parse_alias(top)]
        while self.peek() == "|":
            self.pos += 1
            self.skip()
            alts.append(self.parse_alias(top))
        return alts[0] if len(alts) == 1 else Choice(tuple(alts))

    def parse_alias(self, top: bool) -> Expr:
        expr = self.parse_sequence()
        if self.text.startswith("->", self.pos):
            if not top:
                self.error("an alias '->' is only allowed at the end of a top-level alternative")
            self.pos += 2
            self.skip()
            m = _LARK_NAME.match(self.text, self.pos)
            if m is None:
                self.error("expected alias name after '->'")
            self.pos = m.end()
            self.skip()
        return expr

    def parse_sequence(self) -> Expr:
        items: list[Expr] = []
        while True:
            c = self.peek()
            if c in ("", "\n", "|", ")", "]") or self.text.startswith("->", self.pos):
                break
            items.extend(self.parse_item())
            self.skip()
        items = [i for i in items if i != Bytes(b"")]
        if not items:
            return Bytes(b"")
        return items[0] if len(items) == 1 else Seq(tuple(items))

    def parse_item(self) -> list[Expr]:
        start = self.pos
        atom, lexical = self.parse_atom()
        ignore = lexical and bool(self.ignore_active()) and atom != Bytes(b"")
        if ignore:
            atom = Seq((atom, RuleRef(IGNORE)))
        op_pos = self.pos
        self.skip_inline()
        c = self.peek()
        if c in ("?", "*", "+"):
            self.pos += 1
            lo, hi = {"?": (0, 1), "*": (0, None), "+": (1, None)}[c]
            atom = Repeat(atom, lo, hi)
        elif c == "~":
            self.pos += 1
            self.skip_inline()
            lo = self.read_count()
            hi = lo
            self.skip_inline()
            if self.text.startswith("..", self.pos):
                self.pos += 2
                self.skip_inline()
                hi = self.read_count()
                if hi < lo:
                    self.error("repetition end must be greater than or equal to start", start)
            atom = Repeat(atom, lo, hi)
        elif c == "{":
            lo, hi = self.read_braces(start)
            atom = Repeat(atom, lo, hi)
        else:
            self.pos = op_pos
            return [atom]
        self.skip_inline()
        if self.peek() in ("?", "*", "+", "~", "{"):
            self.error("expected grammar expression")
        return [atom]

    def in_terminal(self) -> bool:
        """Inside a terminal or a lazy rule (a temperature rule may hold sub-grammars)."""
        cur = self.current
        return cur is not None and cur.terminal and cur.name not in self.hot

    def ignore_active(self) -> bool:
        # %ignore applies inside rules only; it is known once the whole text is read, so
        # every rule gets the reference and it is dropped later if no %ignore exists.
        return self.current is not None and not self.current.terminal

    def parse_atom(self) -> tuple[Expr, bool]:
        """One atom; the flag says whether it is lexical (a place %ignore applies after)."""
        c, start = self.peek(), self.pos
        if c in ("(", "["):
            if self.depth >= _MAX_NESTING:
                self.error(f"groups nested deeper than {_MAX_NESTING} levels")
            self.pos += 1
            self.depth += 1
            self.skip_inline()
            expr = self.parse_expansions()
            self.depth -= 1
            close = ")" if c == "(" else "]"
            if self.peek() != close:
                what = "group" if c == "(" else "optional group"
                self.error(f"expected {close!r} after {what}")
            self.pos += 1
            return (expr if c == "(" else Repeat(expr, 0, 1)), False
        if c == '"':
            value = self.read_string()
            flags = self.read_flags()
            if flags and set(flags) != {"i"}:
                self.error(f"string literal flag {flags!r} is not supported", start)
            self.skip_inline()
            if self.text.startswith("..", self.pos):
                if flags:
                    self.error("flags are not allowed on character ranges", start)
                self.pos += 2
                self.skip_inline()
                if self.peek() != '"':
                    self.error("expected a string literal after '..'")
                end = self.read_string()
                if self.read_flags():
                    self.error("flags are not allowed on character ranges", start)
                if len(value) != 1 or len(end) != 1:
                    self.error("character range endpoints must be one character", start)
                if ord(value) > ord(end):
                    self.error("character range start must not exceed end", start)
                return CharClass(((ord(value), ord(end)),)), True
            if flags:
                if not value.isascii():
                    self.error(
                        "case-insensitive string literals currently support ASCII characters only",
                        start,
                    )
                return _fold_literal(value), True
            return Bytes(value.encode("utf-8")), True
        if c == "/":
            expr = self.read_regex()
            self.regex_atoms.add(id(expr))
            return expr, True
        if c == "%":
            m = _NAME.match(self.text, self.pos + 1)
            word = m.group() if m is not None else ""
            if word == "lark":
                if self.in_terminal():
                    self.error("nested %lark cannot be used in terminals")
                self.pos = m.end()  # type: ignore[union-attr]
                self.skip_inline()
                body = self.read_braced_text(start)
                return self.embed("lark", body, start), True
            if word == "regex":
                self.pos = m.end()  # type: ignore[union-attr]
                self.skip_inline()
                return self.read_structured_regex(start), True
            if word == "if":
                self.error("parametric %if conditions are not supported")
            if word != "json":
                self.error("expected grammar expression")
            if self.in_terminal():
                self.error("%json cannot be used in terminals")
            self.pos = m.end()  # type: ignore[union-attr]
            self.skip_inline()
            value, end = self.read_json("%json", start)
            self.pos = end
            return self.embed("json", value, start), True
        if c == "@":
            m = _LARK_NAME.match(self.text, self.pos + 1)
            if m is None:
                self.error("empty grammar reference: expected a grammar name after '@'")
            if self.in_terminal():
                self.error("named grammars cannot be used in terminals")
            self.pos = m.end()
            return self.embed("named", m.group(), start), True
        if c == "<":
            return self.read_special_token(), True
        if c == "&":
            self.error("terminal intersection '&' is not supported")
        if c == "~":
            self.error("regular-expression complement '~' is not supported")
        if c == "-":
            self.error(
                "unexpected '-' character (a '-' is part of a name only after its first letter)"
            )
        if c == "!":
            self.error(
                "unexpected '!' character (it is a rule prefix, allowed only before a "
                "rule's name in its definition)"
            )
        m = _LARK_NAME.match(self.text, self.pos)
        if m is None:
            if c in ("", "\n"):
                self.error("expected grammar expression")
            self.error(f"unexpected character {c!r}")
        name = m.group()
        self.pos = m.end()
        if self.text.startswith("::", self.pos):
            self.error("parametric grammar is not supported")
        self.current.refs.append((name, start))  # type: ignore[union-attr]
        return RuleRef(name), is_terminal(name) or name in self.imports or name in self.lazy

    def read_structured_regex(self, start: int) -> Expr:
        """``%regex {"substring_chunks": [...]}`` or ``{"substring_chars": "..."}``: every
        run of consecutive chunks (characters), or the empty string."""
        from treegram.frontends._ebnf_macros import MacroCall, expand_macro

        if self.peek() not in ("{", "["):
            self.error("expected a JSON object after %regex")
        value, end = self.read_json("%regex", start)
        if not isinstance(value, dict):
            self.error("%regex value must be an object", start)
        for key in value:
            if key not in ("substring_chunks", "substring_chars", "substring_words"):
                self.error(f"unknown field {key!r} in %regex", start)
        if not value:
            self.error("no fields set on %regex", start)
        if len(value) > 1:
            self.error("only one field can be set on %regex", start)
        ((key, field),) = value.items()
        if key == "substring_words":
            self.error("substring_words is not supported yet", start)
        if key == "substring_chars":
            if not isinstance(field, str):
                self.error("substring_chars must be a string", start)
            chunks = tuple(field)
        else:
            if not isinstance(field, list) or not all(isinstance(c, str) for c in field):
                self.error("substring_chunks must be an array of strings", start)
            chunks = tuple(field)
        self.pos = end
        prefix = f"{_HELPER}substring{len(self.helpers)}"
        expr, rules, _ = expand_macro(MacroCall("Substring", chunks, ()), prefix)
        self.helpers.extend(rules)
        return expr

    def read_special_token(self) -> Expr:
        """A special-token element: one whole token, named by its exact text (``<|name|>``,
        ``<name>``: every vocabulary entry spelled so), by ids and id ranges (``<[1,3-5]>``),
        by the ids it is not (``<[^1,3]>``) or any (``<[*]>``); a token-id rule."""
        start, text = self.pos, self.text
        if self.in_terminal():
            cur = self.current
            if cur is not None and "lazy" in self.attrs.get(cur.name, ({}, 0))[0]:
                if text.startswith("<[^", start):
                    self.error("lazy special-token trigger cannot be negated")
                self.error(
                    "special tokens in lazy rules (lazy special-token triggers) are not supported"
                )
            self.error("special tokens cannot be used in terminals")
        end = start + 1
        while end < len(text) and text[end] not in ">\n":
            end += 1
        if end >= len(text) or text[end] != ">":
            self.error("unterminated special token")
        inner = text[start + 1 : end]
        ids: list[int] = []
        exclude = False
        names: tuple[str, ...] = ()
        if inner.startswith("[") and inner.endswith("]"):
            body = inner[1:-1]
            negated = body.startswith("^")
            items = [i.strip() for i in (body[1:] if negated else body).split(",")]
            items = [i for i in items if i]
            if not items:
                self.error("empty numeric special-token range")
            if "*" in items:
                if negated:
                    self.error("negated wildcard special token is not supported")
                if len(items) > 1:
                    self.error("wildcard cannot be mixed with token ids or ranges")
                exclude = True  # any token: none excluded
            else:
                exclude = negated
                for item in items:
                    bounds = item.split("-")
                    if len(bounds) > 2 or not all(b.isascii() and b.isdigit() for b in bounds):
                        self.error(f"invalid numeric special-token range {item!r}")
                    lo, hi = int(bounds[0]), int(bounds[-1])
                    if hi < lo:
                        self.error(f"invalid numeric special-token range {item!r}")
                    if hi - lo > _MAX_TOKEN_RANGE:
                        self.error(
                            f"special-token range is too large ({item!r} spans more than "
                            f"{_MAX_TOKEN_RANGE:,} ids)"
                        )
                    ids.extend(range(lo, hi + 1))
        elif not inner or any(ch.isspace() for ch in inner):
            self.error(f"invalid special token <{inner}>")
        else:
            names = (f"<{inner}>",)
            if self.known_token is not None and not self.known_token(names[0]):
                self.error(f"unknown special token {names[0]}", start)
        self.pos = end + 1
        rule = token_rule(TokenSet(tuple(sorted(set(ids))), exclude, names))
        if rule.name not in self.token_rules:
            self.token_rules[rule.name] = rule
        return RuleRef(rule.name)


def _fold_literal(value: str) -> Expr:
    items: list[Expr] = []
    for ch in value:
        if ch.isalpha():
            items.append(CharClass(tuple(sorted({(ord(ch.upper()),) * 2, (ord(ch.lower()),) * 2}))))
        else:
            items.append(Bytes(ch.encode("utf-8")))
    if not items:
        return Bytes(b"")
    return items[0] if len(items) == 1 else Seq(tuple(items))
