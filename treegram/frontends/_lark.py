"""Lark frontend: Lark grammar text -> :class:`GrammarIR`.

The accepted subset and its meaning follow xgrammar 0.2.8's ``Grammar.from_lark``:

- definitions ``name: expansions``; a name whose first letter (after leading ``_``) is
  upper case is a *terminal*, any other name a *rule*; ``?name`` and ``!name`` are
  plain rules (tree shaping does not change the language); the grammar starts at
  ``start``; a definition continues on the next line only when that line starts with
  ``|``; ``-> alias`` at the end of an alternative is ignored;
- items: ``"literal"`` (JSON string escapes; flag ``i`` folds ASCII letters),
  ``"a".."z"`` (one code point each), ``/regex/flags`` (flags ``i``, ``s``, ``u``; ``.``
  excludes ``\\n`` unless ``s``), names, ``( )``, ``[ ]`` (optional), ``%json {schema}``
  (a JSON Schema inline), ``@name`` (a grammar from ``named_grammars``), ``%lark { ... }``
  (a nested Lark grammar with its own names, ``start`` and ``%ignore``), and the
  operators ``? * + ~n ~n..m`` and ``{n} {n,} {,m} {n,m}``;
- ``%ignore item`` (any number): inside *rules*, anything in the ignored set may follow
  each literal, range, regex, terminal reference or ``%json`` value (not a rule
  reference: the rule adds its own); terminals never contain it;
- ``%import common.NAME [-> ALIAS]`` and ``%import common (A, B)`` for the terminals of
  Lark's ``common`` library;
- rule attributes ``name[lazy]``, ``name[max_chars=N]`` and ``name[temperature=T]`` (see
  :mod:`treegram.frontends._rule_attrs`; as in xgrammar, a lazy or temperature rule is
  handled like a terminal: it references terminals (and sub-grammars) only and
  ``%ignore`` applies after it, not inside);
  ``name[capture]`` / ``name[capture="x"]`` are accepted and have no effect on the
  language (treegram records no captures).

Refused with :class:`GrammarSyntaxError` (line and column): priorities ``name.2``,
templates, ``%declare`` / ``%override`` / other directives, named special tokens
``<|...|>`` (treegram grammars are over text), ``lazy`` / ``max_chars`` on a recursive
rule, terminals that reference rules or themselves, unknown names and imports,
duplicate definitions, and a grammar without ``start``.
"""

from __future__ import annotations

import bisect
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import NoReturn

from treegram._json import get_max_recursion_depth, json_text_depth
from treegram.errors import GrammarError, GrammarSyntaxError, LarkSyntaxError, RegexSyntaxError
from treegram.ir import (
    Bytes,
    CharClass,
    Choice,
    Expr,
    GrammarIR,
    Repeat,
    Rule,
    RuleRef,
    Seq,
)

__all__ = ["lark_to_ir"]

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_INT = re.compile(r"[0-9]+")
_FLAGS = re.compile(r"[A-Za-z]*")
_BLANK = re.compile(r"(?:[ \t\r\f]+|//[^\n]*|#[^\n]*)*")
# A newline (plus blank and comment lines) that a '|' continues.
_CONTINUATION = re.compile(r"(?:\s+|//[^\n]*|#[^\n]*)*\|")
_SPACE = re.compile(r"(?:\s+|//[^\n]*|#[^\n]*)*")
# Rules marked [lazy] or [temperature=...]: xgrammar handles them like terminals.
_LEXICAL_RULE = re.compile(
    r"^[ \t]*[?!]?([A-Za-z_][A-Za-z0-9_]*)[ \t]*\[[^\]\n]*\b(?:lazy|temperature)\b", re.M
)
_TEMPERATURE_RULE = re.compile(
    r"^[ \t]*[?!]?([A-Za-z_][A-Za-z0-9_]*)[ \t]*\[[^\]\n]*\btemperature\b", re.M
)
# Literals inside a nested %lark block, skipped while looking for its closing brace.
_NESTED_STRING = re.compile(r'"(?:[^"\\\n]|\\.)*"')
_NESTED_REGEX = re.compile(r"/(?:[^/\\\n]|\\.)+/")
_NUMBER_TEXT = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_IMPORT_PATH = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")
# Placeholder for the %ignore rule: cannot clash with a Lark name.
_IGNORE = "\0ignore"
_MAX_COUNT = 10**9
_MAX_NESTING = 200

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
        raise LarkSyntaxError(message, line, pos - self._starts[line - 1] + 1)


class _Parser:
    """Recursive descent straight over the text (Lark is line-oriented, so the scanner
    and the parser share the position)."""

    def __init__(self, text: str, embed) -> None:
        self.src = _Source(text)
        # names of the rules marked [lazy] or [temperature=...], known before any
        # reference is parsed
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
        # rule name -> (lazy / max_chars attributes, position of the name)
        self.attrs: dict[str, tuple[dict[str, object], int]] = {}

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
        m = _NAME.match(self.text, self.pos)
        if m is None:
            self.error("expected rule or terminal name")
        name = m.group()
        name_pos = self.pos
        self.pos = m.end()
        self.skip()
        if self.peek() == "[":
            self.parse_attributes(name, name_pos)
            self.skip()
        if self.peek() == ".":
            self.error("rule and terminal priorities are not supported")
        if self.peek() == "{":
            self.error("Lark templates are not supported")
        if self.peek() != ":":
            self.error(f"expected ':' after the name {name!r}")
        self.pos += 1
        if name in self.defs or name in self.imports:
            self.error(f"duplicate rule or terminal {name!r}", start)
        # xgrammar treats a lazy (or temperature) rule as a terminal: %ignore neither
        # enters it nor skips
        # after it, and it references terminals only
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
            attr = m.group()
            if attr not in ("capture", "lazy", "max_chars", "temperature"):
                self.error(f"rule attribute {attr!r} is not supported")
            if attr in attrs:
                self.error(f"rule attribute {attr!r} is given twice")
            self.pos = m.end()
            self.skip()
            if attr == "max_chars":
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
            else:  # capture: no effect on the language (no captures are recorded)
                attrs[attr] = True
                if self.peek() == "=":
                    self.pos += 1
                    self.skip()
                    if self.peek() != '"':
                        self.error("expected a string after capture=")
                    self.read_string()
            self.skip()
            if self.peek() == ",":
                self.pos += 1
                continue
            if self.peek() != "]":
                self.error("expected ',' or ']' in rule attributes")
            self.pos += 1
            attrs.pop("capture", None)
            if attrs:
                self.attrs[name] = (attrs, name_pos)
            return

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
                self.error("expected a name after '->'")
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
            m = _NAME.match(self.text, self.pos)
            if m is None:
                self.error("expected a name after '->'")
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
                        "case-insensitive string literals support ASCII characters only", start
                    )
                return _fold_literal(value), True
            return Bytes(value.encode("utf-8")), True
        if c == "/":
            return self.read_regex(), True
        if c == "%":
            m = _NAME.match(self.text, self.pos + 1)
            if m is not None and m.group() == "lark":
                if self.in_terminal():
                    self.error("%lark cannot be used in terminals")
                self.pos = m.end()
                self.skip_inline()
                body = self.read_braced_text(start)
                return self.embed("lark", body, start), True
            if m is None or m.group() != "json":
                self.error("expected grammar expression")
            if self.in_terminal():
                self.error("%json cannot be used in terminals")
            self.pos = m.end()
            self.skip_inline()
            try:
                value, end = json.JSONDecoder().raw_decode(self.text, self.pos)
            except json.JSONDecodeError as err:
                self.error(f"failed to parse JSON value after %json: {err.msg}", start)
            except RecursionError:
                end = len(self.text)  # too deep for json: reported just below
            limit = get_max_recursion_depth()
            if json_text_depth(self.text[self.pos : end]) > limit:
                self.error(
                    "failed to parse JSON value after %json: Maximum recursion depth "
                    f"exceeded (max_recursion_depth={limit})",
                    start,
                )
            self.pos = end
            return self.embed("json", value, start), True
        if c == "@":
            m = _NAME.match(self.text, self.pos + 1)
            if m is None:
                self.error("expected a grammar name after '@'")
            if self.in_terminal():
                self.error("named grammars cannot be used in terminals")
            self.pos = m.end()
            return self.embed("named", m.group(), start), True
        if c == "<":
            self.error(
                "named special tokens such as <|eot|> are not supported (treegram grammars "
                "are over text)"
            )
        m = _NAME.match(self.text, self.pos)
        if m is None:
            if c in ("", "\n"):
                self.error("expected grammar expression")
            self.error(f"unexpected character {c!r}")
        name = m.group()
        self.pos = m.end()
        self.current.refs.append((name, start))  # type: ignore[union-attr]
        return RuleRef(name), is_terminal(name) or name in self.imports or name in self.lazy

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

    def read_regex(self) -> Expr:
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
    if isinstance(expr, Seq):
        items = tuple(_strip_ignore(i, name) for i in expr.items if i != RuleRef(name))
        return items[0] if len(items) == 1 else Seq(items)
    if isinstance(expr, Choice):
        return Choice(tuple(_strip_ignore(i, name) for i in expr.items))
    if isinstance(expr, Repeat):
        return Repeat(_strip_ignore(expr.item, name), expr.min, expr.max)
    return expr


def lark_to_ir(text: str, named_grammars: Mapping | None = None, _seen: tuple = ()) -> GrammarIR:
    """Translate Lark grammar text into a :class:`GrammarIR` rooted at ``start``.

    Parameters
    ----------
    text : str
        The Lark grammar (the accepted subset is in the module docstring).
    named_grammars : mapping of str to Grammar or str, optional
        Grammars that ``@name`` refers to: a :class:`Grammar` or Lark text with its own
        ``start`` rule; keys are the names without ``@``.

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
                parser.error(f"invalid JSON Schema after %json: {err}", pos)
        elif kind == "lark":
            try:
                ir = lark_to_ir(value, named, _seen)
            except GrammarSyntaxError as err:
                parser.error(f"in nested %lark grammar: {err}", pos)
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
    parser.parse()
    defs, imports = parser.defs, parser.imports
    if "start" not in defs:
        raise LarkSyntaxError("no start rule found", 1, 1)

    # names: every definition must resolve, terminals reference terminals only
    for d in (*defs.values(), _Definition("%ignore", 0, True, refs=parser.ignore_refs)):
        for name, pos in d.refs:
            if name not in defs and name not in imports:
                parser.error(f"unknown name {name!r}", pos)
            if d.terminal and name in defs and not defs[name].terminal:
                if d.name in parser.hot:
                    parser.error(
                        f"rule {d.name!r}: temperature applies to rules made of terminals and "
                        f"sub-grammars only, and {name!r} is a rule",
                        pos,
                    )
                if d.name == "%ignore":
                    parser.error(f"terminal cannot reference rule {name!r}", pos)
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

    rules: list[Rule] = []
    ignore_name = fresh("lark_ignore") if parser.ignores else None
    for d in defs.values():
        body = d.body
        if ignore_name is None:
            body = _strip_ignore(body, _IGNORE)
        else:
            body = _rename_one(body, _IGNORE, ignore_name)
        rules.append(Rule(d.name, body))
    from treegram.frontends._regex import regex_to_expr

    for alias, (name, _) in imports.items():
        rules.append(Rule(alias, regex_to_expr(_COMMON[name])))
    if ignore_name is not None:
        items = parser.ignores
        item = items[0] if len(items) == 1 else Choice(tuple(items))
        rules.append(Rule(ignore_name, Repeat(item, 0, None)))
    # embedded grammars: give their rules free names and point the placeholders at them
    mapping: dict[str, str] = {}
    for placeholder, kind, ir in embedded:
        local = {r.name: fresh(f"{kind}_{r.name}") for r in ir.rules}
        for r in ir.rules:
            mapping[f"{placeholder}\0{r.name}"] = local[r.name]
            rules.append(Rule(local[r.name], _rename(r.body, local), _la(r, local), r.temperature))
    if mapping:
        identity = {r.name: r.name for r in rules}
        identity.update(mapping)
        rules = [replace(r, body=_rename(r.body, identity)) for r in rules]
    if parser.attrs:
        from treegram.frontends._rule_attrs import apply_rule_attributes

        def located(name: str, message: str) -> NoReturn:
            parser.error(f"rule {name!r}: {message}", parser.attrs[name][1])

        rules = apply_rule_attributes(rules, {k: v for k, (v, _) in parser.attrs.items()}, located)
    return GrammarIR(tuple(rules), "start")


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
