"""The scanner of Lark text: the position, errors located by line and column, blanks and
comments, and the lexical items that need no parser state (string literals, regular
expressions, repetition counts and braces, JSON values, nested ``%lark`` blocks)."""

from __future__ import annotations

import bisect
import json
import re
from typing import NoReturn

from treegram._json import get_max_recursion_depth, json_text_depth
from treegram.errors import LarkSyntaxError, RegexSyntaxError
from treegram.ir import Expr

__all__ = ["Scanner"]

_INT = re.compile(r"[0-9]+")
_FLAGS = re.compile(r"[A-Za-z]*")
_BLANK = re.compile(r"(?:[ \t\r\f]+|//[^\n]*|#[^\n]*)*")
# A newline (plus blank and comment lines) that a '|' continues.
_CONTINUATION = re.compile(r"(?:\s+|//[^\n]*|#[^\n]*)*\|")
# Literals inside a nested %lark block, skipped while looking for its closing brace.
_NESTED_STRING = re.compile(r'"(?:[^"\\\n]|\\.)*"')
_NESTED_REGEX = re.compile(r"/(?:[^/\\\n]|\\.)+/")
_MAX_COUNT = 10**9


class Source:
    """The text, to locate an error by line and column and show its line."""

    def __init__(self, text: str) -> None:
        self.text = text
        self._starts = [0] + [m.end() for m in re.finditer("\n", text)]

    def error(self, message: str, pos: int) -> NoReturn:
        line = bisect.bisect_right(self._starts, pos)
        begin = self._starts[line - 1]
        end = self.text.find("\n", begin)
        source = self.text[begin : len(self.text) if end < 0 else end].rstrip("\r")
        raise LarkSyntaxError(message, line, pos - begin + 1, source)


class Scanner:
    """The text and the position in it; the parser (:class:`._parse.Parser`) reads on."""

    def __init__(self, text: str) -> None:
        self.src = Source(text)
        self.text = text
        self.pos = 0

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

    def read_braced_text(self, start: int) -> str:
        """The text between ``{`` (at the position) and its matching ``}``, skipping
        string literals, regular expressions and comments (they may hold braces)."""
        if self.peek() != "{":
            self.error("expected '{' after %lark")
        text, i, depth = self.text, self.pos + 1, 1
        while i < len(text):
            c = text[i]
            if c == "/" and text.startswith("//", i) or c == "#":
                nl = text.find("\n", i)
                i = len(text) if nl < 0 else nl
                continue
            if c in ('"', "/"):  # a string or regex literal, skipped whole
                m = (_NESTED_STRING if c == '"' else _NESTED_REGEX).match(text, i)
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

    def read_count(self, what: str = "a repetition count after '~'") -> int:
        m = _INT.match(self.text, self.pos)
        if m is None:
            self.error(f"expected {what}")
        if len(m.group()) > 9 or int(m.group()) > _MAX_COUNT:
            self.error("invalid repetition count")
        self.pos = m.end()
        return int(m.group())

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

    def closing(self, delimiter: str, what: str) -> int:
        """Where the literal that opens at the position closes with ``delimiter`` on its
        line (a backslash escapes the next character); ``unterminated {what}`` if not."""
        start, text = self.pos, self.text
        pos = start + 1
        while True:
            if pos >= len(text) or text[pos] == "\n":
                self.error(f"unterminated {what}", start)
            if text[pos] == "\\":
                pos += 2
                continue
            if text[pos] == delimiter:
                return pos
            pos += 1

    def read_string(self) -> str:
        start = self.pos
        pos = self.closing('"', "string literal")
        raw = self.text[start : pos + 1]
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

        start = self.pos
        pos = self.closing("/", "regular expression")
        pattern = self.text[start + 1 : pos]
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
