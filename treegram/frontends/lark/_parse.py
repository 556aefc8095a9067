"""Lark frontend: Lark grammar text -> :class:`GrammarIR`.

The accepted subset and its meaning follow xgrammar 0.2.8's ``Grammar.from_lark``:

- definitions ``name: expansions``; names hold letters, digits, ``_`` and ``-``; a name
  whose first letter (after leading ``_``) is upper case is a *terminal*, any other name a
  *rule*; ``?name`` and ``!name`` are plain rules (tree shaping does not change the
  language); the grammar starts at ``start`` (the root rule is named ``root``, as in
  xgrammar, so a printed grammar parses back as EBNF); a definition continues on the
  next line only when that line starts with ``|``; ``-> alias`` at the end of an
  alternative is ignored;
- items: ``"literal"`` (JSON string escapes; flag ``i`` folds ASCII letters),
  ``"a".."z"`` (one code point each), ``/regex/flags`` (flags ``i``, ``s``, ``u``; ``.``
  excludes ``\\n`` unless ``s``), names, ``( )``, ``[ ]`` (optional), ``%json {schema}``
  (a JSON Schema inline), ``@name`` (a grammar from ``named_grammars``), ``%lark { ... }``
  (a nested Lark grammar with its own names, ``start``, ``%ignore`` and options),
  ``%regex {"substring_chunks": [...]}`` / ``{"substring_chars": "..."}`` (any run of
  consecutive chunks or characters, or nothing), and the operators ``? * + ~n ~n..m``
  and ``{n} {n,} {,m} {n,m}``;
- ``%ignore item`` (any number): inside *rules*, anything in the ignored set may follow
  each literal, range, regex, terminal reference or ``%json`` value (not a rule
  reference: the rule adds its own); terminals never contain it; with
  ``%grammar_options {"allow_initial_skip": true}`` it may also come first;
- ``%import common.NAME [-> ALIAS]`` and ``%import common (A, B)`` for the terminals of
  Lark's ``common`` library;
- rule attributes ``name[lazy]``, ``name[max_chars=N]``, ``name[max_tokens=N]`` (a token
  budget per occurrence, enforced by the matcher) and ``name[temperature=T]`` (see
  :mod:`treegram.frontends._rule_attrs`), ``name[suffix=M]`` / ``name[stop=M]`` (the
  marker ``M`` a string, a regex or a terminal name: the rule is the lazy rule
  ``body M``); as in xgrammar, a lazy, suffix, stop or temperature rule is handled like
  a terminal: it references terminals (and sub-grammars) only and ``%ignore`` applies
  after it, not inside; ``name[capture]`` / ``capture="x"`` record the rule's text
  (:meth:`GrammarMatcher.get_captures`; :attr:`Rule.capture`), and the marker of a
  ``suffix`` / ``stop`` rule is left out of captures as xgrammar does (``stop_capture="x"``
  records it; :class:`~treegram.ir.CaptureMarker`);
- xgrammar's dynamic tool-call dispatch (``start: (tool | ...)* tail`` over any-text
  heads ending in a trigger) and lazy any-text heads used on their own become the
  byte-level free text of structural tags, xgrammar's ``TagDispatch`` (see
  :func:`_lower_lazy`).

Refused with :class:`GrammarSyntaxError` (line and column, and the source line with a
caret under the column): priorities ``name.2``, templates, parametric grammars (``::``,
``%if``), ``&`` and ``~`` on terminals, ``%declare`` / ``%override`` / other
directives, malformed special tokens (each with its own message; well-formed ones,
``<|name|>``, ``<name>``, ``<[1,3-5]>``, ``<[^1]>`` and ``<[*]>``, are token-id elements
that read one whole token), ``max_tokens`` on the rules of a dynamic dispatch,
``lazy`` / ``max_chars`` on a recursive rule, terminals that reference rules or
themselves, unknown names and imports, duplicate definitions, and a grammar without
``start``.
"""

from __future__ import annotations

import bisect
import json
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import NoReturn

from treegram._json import get_max_recursion_depth, json_text_depth
from treegram.errors import GrammarError, GrammarSyntaxError, LarkSyntaxError, RegexSyntaxError
from treegram.ir import (
    Bytes,
    CaptureMarker,
    CharClass,
    Choice,
    Expr,
    GrammarIR,
    Repeat,
    Rule,
    RuleRef,
    Seq,
    TokenSet,
    complement_ranges,
    normalize_ranges,
    token_rule,
)

__all__ = ["lark_to_ir"]

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Rule, terminal and grammar names may also hold '-' after their first character (as in
# xgrammar, ``x->y`` is the name ``x-`` and a stray '>').
_LARK_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")
_INT = re.compile(r"[0-9]+")
_FLAGS = re.compile(r"[A-Za-z]*")
_BLANK = re.compile(r"(?:[ \t\r\f]+|//[^\n]*|#[^\n]*)*")
# A newline (plus blank and comment lines) that a '|' continues.
_CONTINUATION = re.compile(r"(?:\s+|//[^\n]*|#[^\n]*)*\|")
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
# Literals inside a nested %lark block, skipped while looking for its closing brace.
_NESTED_STRING = re.compile(r'"(?:[^"\\\n]|\\.)*"')
_NESTED_REGEX = re.compile(r"/(?:[^/\\\n]|\\.)+/")
_NUMBER_TEXT = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_IMPORT_PATH = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")
# Placeholder for the %ignore rule: cannot clash with a Lark name.
_IGNORE = "\0ignore"
_MAX_COUNT = 10**9
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

# Lark's ``common`` terminals, as regular expressions over their language.
_DECIMAL = r"[0-9]+\.[0-9]*|\.[0-9]+"
_FLOAT = rf"(?:{_DECIMAL})(?:[eE][+-]?[0-9]+)?|[0-9]+[eE][+-]?[0-9]+"
_COMMON = {
    "DIGIT": "[0-9]",
    "HEXDIGIT": "[a-fA-F0-9]",
    "INT": "[0-9]+",
    "SIGNED_INT": "[+-]?[0-9]+",
    "DECIMAL": _DECIMAL,
    "_EXP": "[eE][+-]?[0-9]+",
    "FLOAT": _FLOAT,
    "SIGNED_FLOAT": rf"[+-]?(?:{_FLOAT})",
    "NUMBER": rf"[0-9]+|{_FLOAT}",
    "SIGNED_NUMBER": rf"[+-]?(?:[0-9]+|{_FLOAT})",
    "ESCAPED_STRING": r'"(?:[^"\\]|\\[^\n])*"',
    "LETTER": "[A-Za-z]",
    "WORD": "[A-Za-z]+",
    "CNAME": "[_A-Za-z][_A-Za-z0-9]*",
    "WS_INLINE": "[ \\t]+",
    "WS": "[ \\t\\f\\r\\n]+",
    "CR": "\\r",
    "LF": "\\n",
    "NEWLINE": "(?:\\r?\\n)+",
    "LCASE_LETTER": "[a-z]",
    "UCASE_LETTER": "[A-Z]",
    "SH_COMMENT": "#[^\\n]*",
    "CPP_COMMENT": "//[^\\n]*",
    "C_COMMENT": r"/\*[^*]*\*+(?:[^/*][^*]*\*+)*/",
    "SQL_COMMENT": "--[^\\n]*",
}


def is_terminal(name: str) -> bool:
    """Lark's convention: the first letter after leading underscores is upper case."""
    stripped = name.lstrip("_")
    return bool(stripped) and stripped[0].isupper()


@dataclass(frozen=True)
class _Marker:
    """The marker of a ``suffix=`` or ``stop=`` attribute: its expression, where it is,
    the literal text of a case-sensitive string marker and the name of a terminal one."""

    expr: Expr
    pos: int
    literal: str | None = None
    ref: str | None = None
    kind: str = "suffix"  # or "stop"


@dataclass
class _Definition:
    name: str
    pos: int
    terminal: bool
    body: Expr | None = None
    # (name, pos) of every name this definition references.
    refs: list | None = None


class _Source:
    def __init__(self, text: str) -> None:
        self.text = text
        self._starts = [0] + [m.end() for m in re.finditer("\n", text)]

    def error(self, message: str, pos: int) -> NoReturn:
        line = bisect.bisect_right(self._starts, pos)
        begin = self._starts[line - 1]
        end = self.text.find("\n", begin)
        source = self.text[begin : len(self.text) if end < 0 else end].rstrip("\r")
        raise LarkSyntaxError(message, line, pos - begin + 1, source)


class _Parser:
    """Recursive descent straight over the text (Lark is line-oriented, so the scanner
    and the parser share the position)."""

    def __init__(self, text: str, embed) -> None:
        self.src = _Source(text)
        # names of the rules handled like terminals (lazy, suffix, stop, temperature),
        # known before any reference is parsed
        self.lazy = set(_LEXICAL_RULE.findall(text))
        self.hot = set(_TEMPERATURE_RULE.findall(text))  # these may hold sub-grammars
        self.text = text
        self.pos = 0
        self.embed = embed  # callback: (kind, value, pos) -> Expr for %json and @name
        self.defs: dict[str, _Definition] = {}
        self.ignores: list[Expr] = []
        self.ignore_refs: list[tuple[str, int]] = []
        self.imports: dict[str, tuple[str, int]] = {}
        self.current: _Definition | None = None
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

    # -- low level
    def error(self, message: str, pos: int | None = None) -> NoReturn:
        self.src.error(message, self.pos if pos is None else pos)

    def skip(self) -> None:
        """Skip blanks and comments on this line, and a newline that a '|' continues."""
        while True:
            self.pos = _BLANK.match(self.text, self.pos).end()
            if self.peek() == "\n":
                m = _CONTINUATION.match(self.text, self.pos)
                if m is not None:
                    self.pos = m.end() - 1  # stop at the '|'
                    continue
            return

    def peek(self) -> str:
        return self.text[self.pos] if self.pos < len(self.text) else ""

    def at_line_end(self) -> bool:
        return self.peek() in ("", "\n")

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
        d = _Definition(name, name_pos, lexical, refs=[])
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
                if self.peek() != "=":
                    self.error(f"expected '=' and a marker after {attr}")
                self.pos += 1
                self.skip()
                attrs[attr] = self.read_marker(attr)
            elif attr == "max_tokens":
                # not on rules consumed by dynamic dispatch (checked in _lower_lazy)
                if self.peek() != "=":
                    self.error("expected '=' and a count after max_tokens")
                self.pos += 1
                self.skip()
                count_pos = self.pos
                count = self.read_count("an integer after max_tokens=")
                if not 1 <= count <= _MAX_TOKENS:
                    what = "positive" if count < 1 else f"at most {_MAX_TOKENS:,}"
                    self.error(f"max_tokens must be {what}", count_pos)
                attrs[attr] = count
            elif attr == "max_chars":
                if self.peek() != "=":
                    self.error("expected '=' and a count after max_chars")
                self.pos += 1
                self.skip()
                attrs[attr] = self.read_count("an integer after max_chars=")
            elif attr == "temperature":
                if self.peek() != "=":
                    self.error("expected '=' and a number after temperature")
                self.pos += 1
                self.skip()
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
                if self.peek() != "=":
                    self.error("expected '=' and a string after stop_capture")
                self.pos += 1
                self.skip()
                attrs[attr] = self.read_capture_name("stop_capture")
            else:  # capture: no effect on the language (no captures are recorded)
                attrs[attr] = name
                if self.peek() == "=":
                    self.pos += 1
                    self.skip()
                    attrs[attr] = self.read_capture_name("capture")
            self.skip()
            if self.peek() == ",":
                self.pos += 1
                continue
            if self.peek() != "]":
                self.error("expected ',' or ']' in rule attributes")
            self.pos += 1
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

    def read_marker(self, attr: str) -> _Marker:
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
                return _Marker(_fold_literal(value), pos, kind=attr)
            return _Marker(Bytes(value.encode("utf-8")), pos, value, kind=attr)
        if c == "/":
            return _Marker(self.read_regex(marker=True), pos, kind=attr)
        m = _LARK_NAME.match(self.text, self.pos)
        if m is None:
            self.error(f"expected a string, a regular expression or a terminal name after {attr}=")
        if not is_terminal(m.group()):
            self.error(f"{attr} terminal name must be uppercase", pos)
        self.pos = m.end()
        return _Marker(RuleRef(m.group()), pos, ref=m.group(), kind=attr)

    def parse_directive(self) -> None:
        start = self.pos
        m = _NAME.match(self.text, self.pos + 1)
        word = m.group() if m else ""
        if word == "ignore":
            self.pos = m.end()
            self.skip()
            d = _Definition("%ignore", start, True, refs=[])
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
                n = _NAME.match(self.text, self.pos)
                if n is None:
                    self.error("expected a terminal name in the import list")
                names.append(n.group())
                self.pos = n.end()
                self.skip()
                if self.peek() == ",":
                    self.pos += 1
                    continue
                if self.peek() != ")":
                    self.error("expected ',' or ')' in the import list")
                self.pos += 1
                break
            for name in names:
                self.add_import(name, name, start)
            return
        module, _, name = path.rpartition(".")
        if module != "common" or name not in _COMMON:
            self.error(f"unknown common import {path!r}", start)
        alias = name
        if self.text.startswith("->", self.pos):
            self.pos += 2
            self.skip()
            a = _NAME.match(self.text, self.pos)
            if a is None:
                self.error("expected alias name after '->'")
            alias = a.group()
            self.pos = a.end()
        self.add_import(name, alias, start)

    def add_import(self, name: str, alias: str, pos: int) -> None:
        if name not in _COMMON:
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
            atom = Seq((atom, RuleRef(_IGNORE)))
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

    def read_braced_text(self, start: int) -> str:
        """The text between ``{`` (at the position) and its matching ``}``, skipping
        string literals, regular expressions and comments (they may hold braces)."""
        if self.peek() != "{":
            self.error("expected '{' after %lark")
        text, i, depth = self.text, self.pos + 1, 1
        while i < len(text):
            c = text[i]
            if c == '"':
                m = _NESTED_STRING.match(text, i)
                if m is None:
                    break
                i = m.end()
                continue
            if c == "/" and text.startswith("//", i) or c == "#":
                nl = text.find("\n", i)
                i = len(text) if nl < 0 else nl
                continue
            if c == "/":
                m = _NESTED_REGEX.match(text, i)
                if m is None:
                    break
                i = m.end()
                continue
            if c == "{":
                depth += 1
            elif c == "}":
                depth -= 1
                if depth == 0:
                    body = text[self.pos + 1 : i]
                    self.pos = i + 1
                    return body
            i += 1
        self.error("unterminated %lark block: expected '}'", start)

    def read_braces(self, start: int) -> tuple[int, int | None]:
        """``{n}``, ``{n,}``, ``{,m}`` or ``{n,m}`` after an item (the position is at
        ``{``): the bounds of the repetition (``None``: unbounded)."""
        self.pos += 1
        self.skip_inline()
        if self.peek() not in ("", ",", "-", "}") and not self.peek().isdigit():
            self.error("Lark templates are not supported", start)  # name{args}
        bounds: list[int | None] = []
        while True:
            if self.peek() == "-":
                self.error("invalid repetition count")
            if self.peek().isdigit():
                bounds.append(self.read_count("a repetition count in '{...}'"))
            else:
                bounds.append(None)
            self.skip_inline()
            if self.peek() == "," and len(bounds) == 1:
                self.pos += 1
                self.skip_inline()
                continue
            if self.peek() != "}":
                self.error("expected '}' to close the repetition")
            self.pos += 1
            break
        if len(bounds) == 1:
            if bounds[0] is None:
                self.error("expected a repetition count in '{...}'", start)
            return bounds[0], bounds[0]  # type: ignore[return-value]
        if bounds == [None, None]:
            self.error("expected a repetition count in '{...}'", start)
        lo, hi = bounds[0] or 0, bounds[1]
        if hi is not None and hi < lo:
            self.error("repetition end must be greater than or equal to start", start)
        return lo, hi

    def skip_inline(self) -> None:
        self.pos = _BLANK.match(self.text, self.pos).end()

    def in_terminal(self) -> bool:
        """Inside a terminal or a lazy rule (a temperature rule may hold sub-grammars)."""
        cur = self.current
        return cur is not None and cur.terminal and cur.name not in self.hot

    def ignore_active(self) -> bool:
        # %ignore applies inside rules only; it is known once the whole text is read, so
        # every rule gets the reference and it is dropped later if no %ignore exists.
        return self.current is not None and not self.current.terminal

    def read_count(self, what: str = "a repetition count after '~'") -> int:
        m = _INT.match(self.text, self.pos)
        if m is None:
            self.error(f"expected {what}")
        if len(m.group()) > 9 or int(m.group()) > _MAX_COUNT:
            self.error("invalid repetition count")
        self.pos = m.end()
        return int(m.group())

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

    def read_json(self, directive: str, start: int) -> tuple[object, int]:
        """The JSON value at the position and where it ends (the position is unchanged);
        errors point at ``start``, the directive."""
        try:
            value, end = json.JSONDecoder().raw_decode(self.text, self.pos)
        except json.JSONDecodeError as err:
            self.error(f"failed to parse JSON value after {directive}: {err.msg}", start)
        except RecursionError:
            end = len(self.text)  # too deep for json: reported just below
        limit = get_max_recursion_depth()
        if json_text_depth(self.text[self.pos : end]) > limit:
            self.error(
                f"failed to parse JSON value after {directive}: Maximum recursion depth "
                f"exceeded (max_recursion_depth={limit})",
                start,
            )
        return value, end

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

    def read_string(self) -> str:
        start, text = self.pos, self.text
        pos = start + 1
        while True:
            if pos >= len(text) or text[pos] == "\n":
                self.error("unterminated string literal", start)
            if text[pos] == "\\":
                pos += 2
                continue
            if text[pos] == '"':
                break
            pos += 1
        raw = text[start : pos + 1]
        try:
            value = json.loads(raw)
        except json.JSONDecodeError as err:
            self.error(f"invalid string literal: {err.msg}", start)
        if any(0xD800 <= ord(ch) <= 0xDFFF for ch in value):
            self.error("invalid string literal: lone surrogate escape", start)
        self.pos = pos + 1
        return value

    def read_flags(self) -> str:
        m = _FLAGS.match(self.text, self.pos)
        self.pos = m.end()
        return m.group()

    def read_regex(self, marker: bool = False) -> Expr:
        """``/pattern/flags`` at the position; ``marker``: it ends a suffix or stop rule,
        where xgrammar does not fold case."""
        from treegram.frontends._regex import regex_to_expr

        start, text = self.pos, self.text
        pos = start + 1
        while True:
            if pos >= len(text) or text[pos] == "\n":
                self.error("unterminated regular expression", start)
            if text[pos] == "\\":
                pos += 2
                continue
            if text[pos] == "/":
                break
            pos += 1
        pattern = text[start + 1 : pos]
        self.pos = pos + 1
        flags = self.read_flags()
        bad = sorted(set(flags) - set("isu"))
        if bad:
            self.error(f"regular-expression flag {bad[0]!r} is not supported", start)
        if marker and "i" in flags:
            self.error(
                "regular-expression flag 'i' is not supported with suffix or stop attributes",
                start,
            )
        try:
            return regex_to_expr(pattern, dot_all="s" in flags, ignore_case="i" in flags)
        except RegexSyntaxError as err:
            self.error(f"failed to compile regular expression /{pattern}/: {err}", start)


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


def _rename(expr: Expr, names: Mapping[str, str]) -> Expr:
    if isinstance(expr, RuleRef):
        return RuleRef(names[expr.name])
    if isinstance(expr, Seq):
        return Seq(tuple(_rename(i, names) for i in expr.items))
    if isinstance(expr, Choice):
        return Choice(tuple(_rename(i, names) for i in expr.items))
    if isinstance(expr, Repeat):
        return Repeat(_rename(expr.item, names), expr.min, expr.max)
    return expr


def _strip_ignore(expr: Expr, name: str) -> Expr:
    """``expr`` without references to the ignore rule (there was no %ignore)."""
    if expr == RuleRef(name):
        return Bytes(b"")
    if isinstance(expr, Seq):
        items = tuple(_strip_ignore(i, name) for i in expr.items if i != RuleRef(name))
        return Bytes(b"") if not items else items[0] if len(items) == 1 else Seq(items)
    if isinstance(expr, Choice):
        return Choice(tuple(_strip_ignore(i, name) for i in expr.items))
    if isinstance(expr, Repeat):
        return Repeat(_strip_ignore(expr.item, name), expr.min, expr.max)
    return expr


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

    parser = _Parser(text, embed)
    parser.known_token = known_token
    parser.parse()
    defs, imports = parser.defs, parser.imports
    if "start" not in defs:
        raise LarkSyntaxError("no start rule found", 1, 1)
    markers = _apply_markers(parser)

    # names: every definition must resolve, terminals reference terminals only
    for d in (*defs.values(), _Definition("%ignore", 0, True, refs=parser.ignore_refs)):
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

    dispatch_rules, capture_markers = _lower_lazy(parser, markers, fresh)

    rules: list[Rule] = []
    ignore_name = fresh("lark_ignore") if parser.ignores else None
    for d in defs.values():
        body = d.body
        if ignore_name is None:
            body = _strip_ignore(body, _IGNORE)
        else:
            body = _rename_one(body, _IGNORE, ignore_name)
        capture = parser.captures.get((d.name, "capture"))
        rules.append(Rule(d.name, body, capture=capture, marker=capture_markers.get(d.name)))
    for r in dispatch_rules:
        body = r.body
        body = (
            _strip_ignore(body, _IGNORE)
            if ignore_name is None
            else _rename_one(body, _IGNORE, ignore_name)
        )
        rules.append(replace(r, body=body))
    from treegram.frontends._regex import regex_to_expr

    for alias, (name, _) in imports.items():
        rules.append(Rule(alias, regex_to_expr(_COMMON[name])))
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
                    body=_rename(r.body, local),
                    lookahead=_la(r, local),
                    marker=r.marker and r.marker.renamed(local.__getitem__),
                )
            )
    if mapping:
        identity = {r.name: r.name for r in rules}
        identity.update(mapping)
        rules = [replace(r, body=_rename(r.body, identity)) for r in rules]
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
            body=_rename(r.body, names),
            lookahead=_la(r, names),
            marker=r.marker and r.marker.renamed(names.__getitem__),
        )
        for r in rules
    ]
    return GrammarIR(tuple(out), "root")


def _apply_markers(parser: _Parser) -> dict[str, _Marker]:
    """Take the ``suffix`` / ``stop`` markers out of the rule attributes (a terminal
    marker's name is checked like any reference); rule name -> marker."""
    markers: dict[str, _Marker] = {}
    for name, (attrs, _) in parser.attrs.items():
        for key in ("suffix", "stop"):
            marker = attrs.pop(key, None)
            if isinstance(marker, _Marker):
                markers[name] = marker
                if marker.ref is not None:
                    parser.defs[name].refs.append((marker.ref, marker.pos))  # type: ignore[union-attr]
    return markers


def _lower_lazy(
    parser: _Parser, markers: dict[str, _Marker], fresh
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
            any_text[key] = _is_any_text(_inline_terminals(_strip_ignore(expr, _IGNORE), defs))
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
    defs: dict[str, _Definition], is_any_text
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
    defs: dict[str, _Definition], heads: Mapping[str, tuple[str, str]], is_any_text
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
        if isinstance(first, Seq) and first.items[1:] == (RuleRef(_IGNORE),):
            first = first.items[0]  # as in xgrammar, %ignore does not follow the trigger
        if not (isinstance(first, RuleRef) and first.name in heads):
            return None
        body: Expr = Bytes(b"") if not rest else rest[0] if len(rest) == 1 else Seq(tuple(rest))
        out.append((tool.name, first.name, body))
    return tail.name, out


def _token_dispatch_tools(
    defs: dict[str, _Definition], token_rules: Mapping[str, Rule], is_any_text, heads
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
    if isinstance(expr, Seq) and expr.items[1:] == (RuleRef(_IGNORE),):
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


def _inline_terminals(expr: Expr, defs: Mapping[str, _Definition], depth: int = 0) -> Expr:
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


def _la(rule: Rule, names: Mapping[str, str]) -> Expr | None:
    return None if rule.lookahead is None else _rename(rule.lookahead, names)


def _rename_one(expr: Expr, old: str, new: str) -> Expr:
    if isinstance(expr, RuleRef):
        return RuleRef(new) if expr.name == old else expr
    if isinstance(expr, (Seq, Choice)):
        return type(expr)(tuple(_rename_one(i, old, new) for i in expr.items))
    if isinstance(expr, Repeat):
        return Repeat(_rename_one(expr.item, old, new), expr.min, expr.max)
    return expr


def _named_ir(name: str, value, named: Mapping, seen: tuple, parser: _Parser, pos: int):
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


def _check_terminal_cycles(defs: dict[str, _Definition], parser: _Parser) -> None:
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
