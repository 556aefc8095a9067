"""EBNF frontend: grammar text -> :class:`GrammarIR`.

The dialect is the one xgrammar accepts (its ``Regex``, ``Substring``, ``TagDispatch`` and
``TokenTagDispatch`` macros are expanded by :mod:`treegram.frontends._ebnf_macros`, its rule
attributes ``[lazy]`` and ``[max_chars=N]`` applied by :mod:`treegram.frontends._rule_attrs`;
its token-id elements ``Token(1, 2)`` / ``ExcludeToken(3)`` become token rules, see
:class:`treegram.ir.TokenSet`; ``ExcludeToken()`` (any token, as xgrammar prints it) and
tokens named by text, ``Token("<end>")``, are treegram extensions)::

    root ::= "{" ws pair ("," ws pair)* "}"   # comment
    pair ::= name ":" [0-9]+ | "" (= ws)     # lookahead assertion at the end of a body

A rule definition is ``name ::= body`` where ``name`` is the first token on its line; a
body runs until the next definition, so bodies may span lines. Names are ASCII letters,
digits, ``_``, ``-`` and ``.`` and do not start with a digit (so ``.`` is a rule name,
not a wildcard; ``[^]`` is any code point). Escapes in literals and classes denote code
points: ``\\n \\r \\t \\\\ \\" \\' \\? \\/ \\a \\b \\f \\v \\e \\0``, ``\\x`` followed by one
or more hex digits (greedy, as in C and xgrammar), ``\\uXXXX`` and ``\\UXXXXXXXX``;
classes also accept ``\\[ \\] \\- \\^``. In string literals only, ``\\x{HH}`` is one raw
byte (a treegram extension: how the printer writes bytes that are not UTF-8).
Repetitions are ``* + ?`` and ``{m}``, ``{m,}``, ``{m,n}``; ``{m, -1}`` is ``{m,}`` (how
xgrammar prints an unbounded repetition).

The parser is a linear scanner followed by recursive descent over the token list.
"""

from __future__ import annotations

import bisect
import re
from typing import NoReturn

from treegram.errors import GrammarError, GrammarSyntaxError, UndefinedRuleError
from treegram.frontends._ebnf_macros import (
    SUPPORTED_MACROS,
    MacroArgumentError,
    MacroCall,
    MacroName,
    expand_macro,
)
from treegram.frontends._rule_attrs import (
    RuleAttributeError,
    apply_rule_attributes,
    parse_rule_attributes,
)
from treegram.ir import (
    MACRO_NAMES,
    MAX_CODEPOINT,
    MAX_EXPR_DEPTH,
    NAME_PATTERN,
    Bytes,
    CharClass,
    Choice,
    Expr,
    GrammarIR,
    Repeat,
    Rule,
    RuleRef,
    Seq,
    TokenSet,
    run_sized,
    token_rule,
)

__all__ = ["parse_ebnf", "MACRO_NAMES", "NAME_PATTERN"]


# Maximal nesting of parentheses: what the printer may write for any valid IR (the parser
# recurses per level; deep text is parsed on run_deep's large stack).
_MAX_DEPTH = MAX_EXPR_DEPTH
# Above this many '(' the text is parsed on the deep thread.
_SHALLOW_PARENS = 100
# Repetition counts: at most 18 digits (far beyond any automaton that can be built).
_MAX_COUNT_DIGITS = 18

# Both alternatives consume at least one character and start differently: no backtracking.
_SKIP = re.compile(r"(?:[ \t\r\n]+|#[^\n]*)*")
_NAME = re.compile(NAME_PATTERN)
_INT = re.compile(r"[0-9]+")
_STR_CHUNK = re.compile(r'[^"\\\r\n]*')
_HEX = re.compile(r"[0-9A-Fa-f]+")

_SIMPLE_ESCAPES = {
    "n": 0x0A, "r": 0x0D, "t": 0x09, "\\": 0x5C, '"': 0x22, "'": 0x27, "?": 0x3F,
    "/": 0x2F, "a": 0x07, "b": 0x08, "f": 0x0C, "v": 0x0B, "e": 0x1B, "0": 0x00,
}  # fmt: skip
_CLASS_ONLY_ESCAPES = {"[": 0x5B, "]": 0x5D, "-": 0x2D, "^": 0x5E}

_PUNCT = frozenset("|*+?{},)")
_QUANTIFIERS = frozenset("*+?{")
_ELEMENT_START = frozenset({"str", "class", "(", "name", "macro", "tokens"})
# xgrammar's token-id elements: ``Token(1, 2)``, ``ExcludeToken(1, 2)``.
_TOKEN_ELEMENTS = frozenset({"Token", "ExcludeToken"})
_TOKEN_ID = re.compile(r"-?[0-9]+")

# Token: (kind, value, pos, end, first_on_line).
_Token = tuple


class _Source:
    """Grammar text plus lazily computed line starts for error positions."""

    def __init__(self, text: str) -> None:
        self.text = text
        self._starts: list[int] | None = None

    def line_col(self, pos: int) -> tuple[int, int]:
        if self._starts is None:
            self._starts = [0] + [m.end() for m in re.finditer("\n", self.text)]
        line = bisect.bisect_right(self._starts, pos)
        return line, pos - self._starts[line - 1] + 1

    def error(self, message: str, pos: int) -> NoReturn:
        line, col = self.line_col(pos)
        raise GrammarSyntaxError(message, line, col)


def _describe(tok: _Token) -> str:
    kind, value = tok[0], tok[1]
    if kind == "eof":
        return "end of grammar"
    if kind == "name":
        return f"rule name {value!r}"
    if kind == "int":
        return f"integer {value}"
    if kind == "str":
        return "string literal"
    if kind == "class":
        return "character class"
    return f"{kind!r}"


# ----------------------------------------------------------------------------- scanner


_RAW_BYTE = re.compile(r"\\x\{([0-9A-Fa-f]{2})\}")
# Whole literals without escapes, and of one raw byte (free text prints 128 of these per
# state): read in one match, as the general scan below reads them.
_PLAIN_STRING = re.compile(r'"([^"\\\r\n]*)"')
_RAW_BYTE_STRING = re.compile(r'"\\x\{([0-9A-Fa-f]{2})\}"')


def _read_escape(src: _Source, pos: int, in_class: bool) -> tuple[int, int]:
    """Decode the escape whose backslash is at ``pos``; return (code point, next pos)."""
    text = src.text
    c = text[pos + 1] if pos + 1 < len(text) else ""
    if c in _SIMPLE_ESCAPES:
        return _SIMPLE_ESCAPES[c], pos + 2
    if in_class and c in _CLASS_ONLY_ESCAPES:
        return _CLASS_ONLY_ESCAPES[c], pos + 2
    if c in ("x", "u", "U"):
        m = _HEX.match(text, pos + 2)
        digits = m.group() if m else ""
        if c == "x":
            if not digits:
                src.error("invalid escape: expected hex digits after \\x", pos)
        else:
            need = 4 if c == "u" else 8
            if len(digits) < need:
                src.error(f"invalid escape: expected {need} hex digits after \\{c}", pos)
            digits = digits[:need]
        cp = int(digits, 16)
        if cp > MAX_CODEPOINT:
            src.error(f"invalid escape: code point 0x{digits} is above U+10FFFF", pos)
        return cp, pos + 2 + len(digits)
    if in_class and c in ("d", "D", "w", "W", "s", "S"):
        src.error(f"class escape \\{c} is not supported in EBNF; write the ranges out", pos)
    what = repr(c) if c else "end of grammar"
    src.error(f"invalid escape sequence: unexpected {what} after backslash", pos)


def _scan_string(src: _Source, start: int) -> tuple[bytes, int]:
    """Scan a string literal whose opening quote is at ``start``; return (UTF-8 bytes, end).

    Besides the code point escapes, ``\\x{HH}`` is the raw byte ``HH`` (how the printer
    writes literal bytes that are not UTF-8, such as the free text of structural tags)."""
    text, n = src.text, len(src.text)
    m = _PLAIN_STRING.match(text, start)
    if m is not None:
        return m.group(1).encode("utf-8", "surrogatepass"), m.end()
    m = _RAW_BYTE_STRING.match(text, start)
    if m is not None:
        return bytes((int(m.group(1), 16),)), m.end()
    parts: list[bytes] = []
    pos = start + 1
    while True:
        m = _STR_CHUNK.match(text, pos)
        parts.append(m.group().encode("utf-8", "surrogatepass"))
        pos = m.end()
        c = text[pos] if pos < n else ""
        if c == '"':
            return b"".join(parts), pos + 1
        if c == "\\":
            if text.startswith("\\x{", pos):
                m = _RAW_BYTE.match(text, pos)
                if m is None:
                    src.error("invalid escape: expected \\x{HH}, a raw byte of two hex digits", pos)
                parts.append(bytes((int(m.group(1), 16),)))
                pos = m.end()
                continue
            cp, pos = _read_escape(src, pos, in_class=False)
            parts.append(chr(cp).encode("utf-8", "surrogatepass"))
            continue
        src.error("unterminated string literal: expected '\"' before end of line", pos)


def _scan_class(src: _Source, start: int) -> tuple[CharClass, int]:
    """Scan a character class whose ``[`` is at ``start``; return (class, end)."""
    text, n = src.text, len(src.text)
    pos = start + 1
    negated = pos < n and text[pos] == "^"
    if negated:
        pos += 1
    ranges: list[tuple[int, int]] = []

    def read_char(p: int) -> tuple[int, int]:
        c = text[p] if p < n else ""
        if c == "\\":
            return _read_escape(src, p, in_class=True)
        if c in ("", "\n", "\r"):
            if c:
                src.error("character class must not contain a raw newline (use \\n)", p)
            src.error("unterminated character class: expected ']'", p)
        return ord(c), p + 1

    while True:
        if pos < n and text[pos] == "]":
            return CharClass(_merge_ranges(ranges), negated), pos + 1
        item_pos = pos
        lo, pos = read_char(pos)
        if pos + 1 < n and text[pos] == "-" and text[pos + 1] != "]":
            hi, pos = read_char(pos + 1)
            if hi < lo:
                src.error(
                    f"invalid character class range: upper bound U+{hi:04X} is below "
                    f"lower bound U+{lo:04X}",
                    item_pos,
                )
            ranges.append((lo, hi))
        else:
            ranges.append((lo, lo))


def _merge_ranges(ranges: list[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    """Sort inclusive ranges and merge overlapping or adjacent ones."""
    merged: list[list[int]] = []
    for lo, hi in sorted(ranges):
        if merged and lo <= merged[-1][1] + 1:
            if hi > merged[-1][1]:
                merged[-1][1] = hi
        else:
            merged.append([lo, hi])
    return tuple((lo, hi) for lo, hi in merged)


def _tokenize(src: _Source) -> list[_Token]:
    text, n = src.text, len(src.text)
    tokens: list[_Token] = []
    pos = 0
    newline = True
    while True:
        m = _SKIP.match(text, pos)
        if m.end() > pos:
            newline = newline or "\n" in text[pos : m.end()]
            pos = m.end()
        if pos >= n:
            tokens.append(("eof", None, n, n, newline))
            return tokens
        c = text[pos]
        if c == '"':
            value, end = _scan_string(src, pos)
            tok: _Token = ("str", value, pos, end, newline)
        elif c == "[":
            prev = tokens[-1] if tokens else None
            attrs = _ATTRS_BEFORE_ASSIGN.match(text, pos)
            if attrs and prev is not None and prev[0] == "name" and prev[3] == pos and prev[4]:
                # rule attributes (name[...] ::=): not a character class, whatever they
                # hold (temperature=-0.1 is no class range); _check_assign parses them
                tok = ("class", None, pos, attrs.end(1), newline)
            else:
                cls, end = _scan_class(src, pos)
                tok = ("class", cls, pos, end, newline)
        elif c == "(":
            if text.startswith("(=", pos):
                tok = ("(=", None, pos, pos + 2, newline)
            else:
                tok = ("(", None, pos, pos + 1, newline)
        elif c in _PUNCT:
            tok = (c, None, pos, pos + 1, newline)
        elif "0" <= c <= "9":
            m = _INT.match(text, pos)
            if m.end() - pos > _MAX_COUNT_DIGITS:  # before int(): Python caps digit strings
                src.error(
                    f"repetition count {text[pos : pos + 12]}... has more than "
                    f"{_MAX_COUNT_DIGITS} digits",
                    pos,
                )
            tok = ("int", int(m.group()), pos, m.end(), newline)
        elif text.startswith("::=", pos):
            _check_assign(src, tokens, pos)
            tok = ("::=", None, pos, pos + 3, newline)
        else:
            m = _NAME.match(text, pos)
            if m is None:
                hint = " (string literals use double quotes)" if c == "'" else ""
                src.error(f"unexpected character {c!r}{hint}", pos)
            tok = ("name", m.group(), pos, m.end(), newline)
            # Macro arguments use syntax (``key=value``) the scanner would trip on.
            paren = _SKIP.match(text, m.end()).end()
            if m.group() in _TOKEN_ELEMENTS and text.startswith("(", paren):
                tokens_set, end = _scan_token_ids(src, m.group(), paren)
                tok = ("tokens", tokens_set, pos, end, newline)
            elif m.group() in MACRO_NAMES and text.startswith("(", paren):
                if m.group() not in SUPPORTED_MACROS:
                    _macro_error(src, m.group(), pos)
                call, end = _scan_macro(src, m.group(), paren)
                tok = ("macro", call, pos, end, newline)
        tokens.append(tok)
        pos = tok[3]
        newline = False


def _scan_token_ids(src: _Source, name: str, paren: int) -> tuple[TokenSet, int]:
    """Scan the id list of a token-id element ``name(...)`` whose ``(`` is at ``paren``:
    non-negative integers (at least one for ``Token``), kept sorted and distinct (as
    xgrammar does), and, a treegram extension, tokens given by their text as strings."""
    text, n = src.text, len(src.text)
    ids: list[int] = []
    names: list[str] = []
    pos = _SKIP.match(text, paren + 1).end()
    while pos < n and text[pos] != ")":
        if text[pos] == '"':  # a token by its text (treegram: how token names print)
            name_text, pos = _scan_macro_text(src, name, pos)
            names.append(name_text)
            pos = _next_macro_item(src, name, pos, paren)
            continue
        m = _TOKEN_ID.match(text, pos)
        if m is None or m.group().startswith("-"):
            src.error(f"{name}() arguments must be non-negative integers", pos)
        if m.end() - pos > _MAX_COUNT_DIGITS:
            src.error(f"{name}(): token id {text[pos : pos + 12]}... is too large", pos)
        ids.append(int(m.group()))
        pos = _next_macro_item(src, name, m.end(), paren)
    if pos >= n:
        src.error(f"{name}(...): unclosed argument list", paren)
    if not ids and not names and name == "Token":
        # ``ExcludeToken()`` is any one token: xgrammar prints it (its parser refuses it)
        src.error(f"{name}() requires at least one integer argument", paren)
    exclude = name == "ExcludeToken"
    return TokenSet(tuple(sorted(set(ids))), exclude, tuple(sorted(set(names)))), pos + 1


_MACRO_VALUE = re.compile(r"true\b|false\b|[0-9]+")


def _scan_macro(src: _Source, name: str, paren: int) -> tuple[MacroCall, int]:
    """Scan the arguments of macro ``name`` whose ``(`` is at ``paren``: positional
    arguments (string literals or tuples), then ``key=value`` pairs (a string, a tuple,
    ``true``/``false`` or an integer). A tuple is ``(item, ...)`` of strings and names."""
    text, n = src.text, len(src.text)
    positional: list[object] = []
    named: list[tuple[str, object]] = []
    pos = _SKIP.match(text, paren + 1).end()
    while pos < n and text[pos] != ")":
        if text[pos] in ('"', "("):
            if named:
                src.error(f"{name}(...): a positional argument after a named argument", pos)
            value, pos = _scan_macro_value(src, name, pos)
            positional.append(value)
        else:
            m = _NAME.match(text, pos)
            eq = _SKIP.match(text, m.end()).end() if m else pos
            if m is None or not text.startswith("=", eq):
                src.error(f"{name}(...) expects string arguments or key=value pairs", pos)
            vpos = _SKIP.match(text, eq + 1).end()
            value, pos = _scan_macro_value(src, name, vpos)
            if any(key == m.group() for key, _ in named):
                src.error(f"{name}(...): argument {m.group()!r} is given twice", m.start())
            named.append((m.group(), value))
        pos = _next_macro_item(src, name, pos, paren)
    if pos >= n:
        src.error(f"{name}(...): unclosed argument list", paren)
    return MacroCall(name, tuple(positional), tuple(named)), pos + 1


def _next_macro_item(
    src: _Source, name: str, pos: int, paren: int, trailing_comma: bool = False
) -> int:
    """Skip to the next item of an argument list or tuple: past a ',' or up to ')'."""
    text, n = src.text, len(src.text)
    pos = _SKIP.match(text, pos).end()
    if pos < n and text[pos] == ",":
        pos = _SKIP.match(text, pos + 1).end()
        # as xgrammar: a tuple may end with a comma, an argument list may not
        if pos < n and text[pos] == ")" and not trailing_comma:
            src.error(f"{name}(...): expected an argument after ','", pos)
    elif pos < n and text[pos] != ")":
        src.error(f"{name}(...): expected ',' or ')' between arguments", pos)
    if pos >= n:
        src.error(f"{name}(...): unclosed argument list", paren)
    return pos


def _scan_macro_text(src: _Source, name: str, pos: int) -> tuple[str, int]:
    """A macro's string argument: text (a raw ``\\x{HH}`` byte must form UTF-8)."""
    data, end = _scan_string(src, pos)
    try:
        return data.decode("utf-8", "surrogatepass"), end
    except UnicodeDecodeError:
        src.error(f"{name}(...): a string argument must be text, not raw bytes", pos)


def _scan_macro_value(src: _Source, name: str, pos: int) -> tuple[object, int]:
    text = src.text
    if text.startswith('"', pos):
        return _scan_macro_text(src, name, pos)
    if text.startswith("(", pos):
        items: list[object] = []
        open_pos = pos
        pos = _SKIP.match(text, pos + 1).end()
        while pos < len(text) and text[pos] != ")":
            if text.startswith('"', pos):
                item, pos = _scan_macro_text(src, name, pos)
                items.append(item)
            elif name == "TokenTagDispatch" and (m := _TOKEN_ID.match(text, pos)):
                if m.group().startswith("-") or m.end() - pos > _MAX_COUNT_DIGITS:
                    src.error(f"{name}(...): token ids must be non-negative integers", pos)
                items.append(int(m.group()))
                pos = m.end()
            else:
                m = _NAME.match(text, pos)
                if m is None:
                    src.error(f"{name}(...): a tuple holds strings and rule names", pos)
                items.append(MacroName(m.group(), pos))
                pos = m.end()
            pos = _next_macro_item(src, name, pos, open_pos, trailing_comma=True)
        return tuple(items), pos + 1
    v = _MACRO_VALUE.match(text, pos)
    if v is None:
        src.error(f"{name}(...): expected a string, a tuple, true, false or an integer", pos)
    if v.group() in ("true", "false"):
        return v.group() == "true", v.end()
    return int(v.group()), v.end()


def _macro_error(src: _Source, name: str, pos: int) -> NoReturn:
    src.error(f"macro {name}(...) is not supported by the treegram EBNF dialect", pos)


_ATTRS_BEFORE_ASSIGN = re.compile(r"(\[[A-Za-z_][^\]\n]*\])[ \t]*::=")


def _check_assign(src: _Source, tokens: list[_Token], pos: int) -> None:
    """A ``::=`` must follow a rule name that starts its line."""
    prev = tokens[-1] if tokens else None
    if prev is not None and prev[0] == "name":
        if prev[4]:
            return
        src.error(f"rule definition {prev[1]!r} must start at the beginning of a line", prev[2])
    if (
        prev is not None
        and prev[0] == "class"
        and len(tokens) >= 2
        and tokens[-2][0] == "name"
        and tokens[-2][3] == prev[2]
        and tokens[-2][4]
    ):
        try:
            attrs = parse_rule_attributes(src.text[prev[2] + 1 : prev[3] - 1])
        except RuleAttributeError as err:
            src.error(f"rule attributes: {err}", prev[2])
        tokens[-1] = ("attrs", attrs, prev[2], prev[3], False)
        return
    src.error("expected a rule name before '::='", pos)


# ----------------------------------------------------------------------------- parser


class _Parser:
    def __init__(self, src: _Source, tokens: list[_Token]) -> None:
        self.src = src
        self.toks = tokens
        self.i = 0
        self.depth = 0
        # (name, pos, followed_by_paren) of every rule reference, in text order.
        self.refs: list[tuple[str, int, bool]] = []
        # Helper rules that macros expand to, and the names they must not take.
        self.macro_rules: list[tuple[Rule, int]] = []
        self.taken = {
            t[1]
            for t, nxt in zip(tokens, tokens[1:], strict=False)
            if t[0] == "name" and nxt[0] in ("::=", "attrs")
        }
        # rule name -> (attributes, position of the name)
        self.attrs: dict[str, tuple[dict, int]] = {}
        self.rule_name = ""
        self.in_lookahead = False
        # the rules of token-id elements, by name (one per distinct element)
        self.token_rules: dict[str, tuple[Rule, int]] = {}

    # helpers -------------------------------------------------------------------------
    def peek(self, k: int = 0) -> _Token:
        j = self.i + k
        toks = self.toks
        return toks[j] if j < len(toks) else toks[-1]  # past the end: its "eof"

    def at_rule_start(self) -> bool:
        if self.peek()[0] != "name":
            return False
        nxt = self.peek(1)[0]
        return nxt == "::=" or (nxt == "attrs" and self.peek(2)[0] == "::=")

    def fail(self, expected: str, tok: _Token | None = None) -> NoReturn:
        tok = tok or self.peek()
        self.src.error(f"expected {expected}, got {_describe(tok)}", tok[2])

    # grammar ---------------------------------------------------------------------------
    def parse_rules(self) -> list[tuple[Rule, int]]:
        rules: list[tuple[Rule, int]] = []
        while self.peek()[0] != "eof":
            if not self.at_rule_start():
                self.fail("a rule definition 'name ::= ...'")
            name_tok = self.peek()
            self.rule_name = name_tok[1]
            if self.peek(1)[0] == "attrs":
                self.attrs[name_tok[1]] = (self.peek(1)[1], name_tok[2])
                self.i += 1
            self.i += 2
            body = self.parse_choice()
            lookahead = None
            if self.peek()[0] == "(=":
                lookahead = self.parse_lookahead()
                if self.peek()[0] != "eof" and not self.at_rule_start():
                    self.fail("a new rule definition after the lookahead assertion")
            elif self.peek()[0] != "eof" and not self.at_rule_start():
                self.fail("an element, '|', a lookahead '(= ...)' or a new rule definition")
            rules.append((Rule(name_tok[1], body, lookahead), name_tok[2]))
        return rules + self.macro_rules + list(self.token_rules.values())

    def parse_lookahead(self) -> Expr:
        open_tok = self.peek()
        self.i += 1
        self.in_lookahead = True
        expr = self.parse_choice()
        self.in_lookahead = False
        self.expect_close(open_tok)
        return expr

    def expect_close(self, open_tok: _Token) -> None:
        tok = self.peek()
        if tok[0] == ")":
            self.i += 1
            return
        if tok[0] == "(=":
            self.src.error(
                "a lookahead assertion '(= ...)' is only allowed at the end of a rule body",
                tok[2],
            )
        line, col = self.src.line_col(open_tok[2])
        self.fail(f"')' to close the '(' at line {line}, column {col}")

    # expressions ---------------------------------------------------------------------
    def parse_choice(self) -> Expr:
        items = [self.parse_seq()]
        while self.peek()[0] == "|":
            self.i += 1
            items.append(self.parse_seq())
        return items[0] if len(items) == 1 else Choice(tuple(items))

    def parse_seq(self) -> Expr:
        items: list[Expr] = []
        while self.peek()[0] in _ELEMENT_START and not self.at_rule_start():
            items.append(self.parse_element())
        if not items:
            tok = self.peek()
            if tok[0] == "(=":
                self.src.error(
                    "a lookahead assertion '(= ...)' is only allowed at the end of a rule "
                    "body, after a non-empty alternative",
                    tok[2],
                )
            self.fail("an element (string, character class, rule name or group)")
        return items[0] if len(items) == 1 else Seq(tuple(items))

    def parse_element(self) -> Expr:
        expr = self.parse_primary()
        kind = self.peek()[0]
        if kind not in _QUANTIFIERS:
            return expr
        if kind == "{":
            expr = self.parse_braces(expr)
        else:
            self.i += 1
            lo, hi = {"*": (0, None), "+": (1, None), "?": (0, 1)}[kind]
            expr = Repeat(expr, lo, hi)
        tok = self.peek()
        if tok[0] in _QUANTIFIERS:
            self.src.error(
                f"unexpected {tok[0]!r}: an element takes at most one quantifier "
                "(wrap it in parentheses to repeat again)",
                tok[2],
            )
        return expr

    def parse_braces(self, expr: Expr) -> Expr:
        self.i += 1  # '{'
        tok = self.peek()
        if tok[0] != "int":
            self.fail("an integer (the minimum count) in '{m,n}'")
        lo, hi = tok[1], tok[1]
        self.i += 1
        if self.peek()[0] == ",":
            self.i += 1
            tok = self.peek()
            if tok[0] == "int":
                hi = tok[1]
                self.i += 1
                if hi < lo:
                    self.src.error(
                        f"invalid repetition range: minimum {lo} is larger than maximum {hi}",
                        tok[2],
                    )
            elif tok[0] == "name" and tok[1] == "-1":
                hi = None  # xgrammar writes an unbounded repetition {m, -1}
                self.i += 1
            else:
                hi = None
        if self.peek()[0] != "}":
            self.fail("',' or '}' in repetition range")
        self.i += 1
        return Repeat(expr, lo, hi)

    def parse_primary(self) -> Expr:
        tok = self.peek()
        kind = tok[0]
        self.i += 1
        if kind == "str":
            return Bytes(tok[1])
        if kind == "class":
            return tok[1]
        if kind == "macro":
            return self.expand(tok)
        if kind == "tokens":
            rule = token_rule(tok[1])
            self.token_rules.setdefault(rule.name, (rule, tok[2]))
            return RuleRef(rule.name)
        if kind == "name":
            name = tok[1]
            nxt = self.peek()
            if name in SUPPORTED_MACROS:
                self.src.error(f"macro {name} must be called with arguments: {name}(...)", tok[2])
            if name in MACRO_NAMES:
                _macro_error(self.src, name, tok[2])
            self.refs.append((name, tok[2], nxt[0] == "(" and nxt[2] == tok[3]))
            return RuleRef(name)
        # '(' group
        if self.depth >= _MAX_DEPTH:
            self.src.error(f"parentheses nested deeper than {_MAX_DEPTH} levels", tok[2])
        if self.peek()[0] == ")":
            self.i += 1
            return Bytes(b"")
        self.depth += 1
        expr = self.parse_choice()
        self.depth -= 1
        self.expect_close(tok)
        return expr

    def expand(self, tok: _Token) -> Expr:
        call: MacroCall = tok[1]
        base = f"{self.rule_name}_{call.name.lower()}"
        k = 0
        while any(n == f"{base}{k}" or n.startswith(f"{base}{k}_") for n in self.taken):
            k += 1
        prefix = f"{base}{k}"
        if self.in_lookahead:
            self.src.error(f"{call.name}(...) is not allowed in a lookahead assertion", tok[2])
        try:
            expr, rules, refs = expand_macro(call, prefix)
        except MacroArgumentError as err:
            self.src.error(str(err), tok[2])
        self.refs.extend((ref.name, ref.pos, False) for ref in refs)
        self.taken.update(r.name for r in rules)
        self.taken.add(prefix)
        for r in rules:
            if r.tokens is not None:  # one rule per token-id element, shared with the text
                self.token_rules.setdefault(r.name, (r, tok[2]))
            else:
                self.macro_rules.append((r, tok[2]))
        return expr


def parse_ebnf(text: str, root_rule_name: str = "root") -> GrammarIR:
    """Parse EBNF grammar text into a :class:`GrammarIR`.

    Parameters
    ----------
    text : str
        Grammar in treegram's EBNF dialect (xgrammar's, without macros).
    root_rule_name : str, default "root"
        Name of the rule the grammar starts from.

    Returns
    -------
    GrammarIR
        Rules in definition order; string literals become UTF-8 :class:`Bytes`, character
        classes become :class:`CharClass` with sorted, merged code-point ranges.

    Raises
    ------
    GrammarSyntaxError
        Malformed text, duplicate rule definitions, invalid ranges, or unsupported
        xgrammar macros / rule attributes; ``line`` and ``column`` locate the problem.
    UndefinedRuleError
        A referenced rule is not defined.
    GrammarError
        The grammar is empty or has no rule called ``root_rule_name``.
    """
    if not isinstance(text, str):
        raise GrammarError(f"text must be a str, got {type(text).__name__}")
    return run_sized(text.count("(") > _SHALLOW_PARENS, _parse_ebnf, text, root_rule_name)


def _parse_ebnf(text: str, root_rule_name: str) -> GrammarIR:
    src = _Source(text)
    parser = _Parser(src, _tokenize(src))
    rules = parser.parse_rules()
    if not rules:
        raise GrammarError("grammar is empty: it defines no rules")

    defined: dict[str, int] = {}
    for rule, pos in rules:
        if rule.name in defined:
            line, col = src.line_col(defined[rule.name])
            src.error(
                f"rule {rule.name!r} is defined more than once (first at line {line}, "
                f"column {col})",
                pos,
            )
        defined[rule.name] = pos

    for name, pos, call in parser.refs:
        if name in defined:
            continue
        line, col = src.line_col(pos)
        if call:
            raise GrammarSyntaxError(
                f"{name}(...) looks like a macro call; macros are not supported by the "
                f"treegram EBNF dialect (and no rule {name!r} is defined)",
                line,
                col,
            )
        hint = " ('.' is a rule name in EBNF; use [^] for any character)" if name == "." else ""
        err = UndefinedRuleError(
            f"rule {name!r} is not defined (referenced at line {line}, column {col}){hint}"
        )
        err.rule_name, err.line, err.column = name, line, col  # type: ignore[attr-defined]
        raise err

    if root_rule_name not in defined:
        raise GrammarError(
            f"root rule {root_rule_name!r} is not defined "
            f"(root_rule_name={root_rule_name!r}; defined rules: {_preview(defined)})"
        )
    plain = [rule for rule, _ in rules]
    if parser.attrs:

        def located(name: str, message: str) -> NoReturn:
            src.error(f"rule {name!r}: {message}", parser.attrs[name][1])

        plain = apply_rule_attributes(plain, {k: v for k, (v, _) in parser.attrs.items()}, located)
    return GrammarIR(tuple(plain), root_rule_name)


def _preview(names: dict[str, int], limit: int = 8) -> str:
    shown = ", ".join(list(names)[:limit])
    return shown + (", ..." if len(names) > limit else "")
