"""Printer: :class:`GrammarIR` -> EBNF text in treegram's dialect.

The output parses back (:func:`parse_ebnf`) to an equal IR for any IR the parser
produces, and to a language-equivalent IR otherwise (one-item ``Seq``/``Choice`` and
``Seq(())`` are printed without their wrapper).
"""

from __future__ import annotations

import functools
import json
import re

from treegram.errors import GrammarError
from treegram.ir._deep import SHALLOW_DEPTH, ir_depth, run_sized
from treegram.ir._nodes import (
    MAX_CODEPOINT,
    Bytes,
    CaptureMarker,
    CharClass,
    Choice,
    Expr,
    GrammarIR,
    Repeat,
    RuleRef,
    Seq,
)

__all__ = ["expr_excerpt", "grammar_to_ebnf", "join_escapes", "MACRO_NAMES", "NAME_PATTERN"]

#: xgrammar macro names; treegram does not support them.
MACRO_NAMES = frozenset({"TagDispatch", "TokenTagDispatch", "Regex", "Substring"})
#: A rule name (also used by the printer to validate names).
NAME_PATTERN = r"[A-Za-z_.\-][A-Za-z0-9_.\-]*"

_NAME = re.compile(NAME_PATTERN)
_HEXDIGITS = frozenset("0123456789abcdefABCDEF")
_NAMED = {0x0A: "\\n", 0x0D: "\\r", 0x09: "\\t", 0x5C: "\\\\"}
_STRING_SPECIAL = {0x22: '\\"'}
_CLASS_SPECIAL = {0x5D: "\\]", 0x2D: "\\-", 0x5E: "\\^"}

# Precedence of the context an expression is printed in.
_CHOICE, _SEQ, _ATOM = 0, 1, 2


def _escape(cp: int, special: dict[int, str]) -> str:
    if cp in _NAMED:
        return _NAMED[cp]
    if cp in special:
        return special[cp]
    if cp < 0x20 or cp == 0x7F:
        return f"\\x{cp:02x}"
    if cp < 0x7F:
        return chr(cp)
    ch = chr(cp)
    if ch.isprintable() and not 0xD800 <= cp <= 0xDFFF:
        return ch
    return f"\\u{cp:04x}" if cp <= 0xFFFF else f"\\U{cp:08x}"


def join_escapes(pieces: list[str]) -> str:
    """The escaped pieces of an EBNF literal or class as one text: ``\\x`` reads every hex
    digit after it, so a ``\\xHH`` before a hex digit is written ``\\u00HH``."""
    for i in range(len(pieces) - 1):
        if pieces[i].startswith("\\x") and pieces[i + 1][:1] in _HEXDIGITS:
            pieces[i] = "\\u00" + pieces[i][2:]
    return "".join(pieces)


# Bytes printed as themselves: printable ASCII but for '"' and '\\'.
_PLAIN = re.compile(rb"[ !#-\[\]-~]*")


def _literal(data: bytes) -> str:
    if len(data) <= 8:  # short literals recur (free text's 128 raw bytes in every state)
        return _short_literal(data)
    return _literal_text(data)


@functools.lru_cache(maxsize=4096)
def _short_literal(data: bytes) -> str:
    return _literal_text(data)


def _literal_text(data: bytes) -> str:
    if _PLAIN.fullmatch(data):  # most literals: nothing to escape
        return '"' + data.decode("ascii") + '"'
    # Bytes that are not UTF-8 (free text of structural tags reads raw bytes) are written
    # as \x{HH}, the EBNF frontend's raw-byte escape.
    pieces: list[str] = []
    rest = data
    while rest:
        try:
            text = rest.decode("utf-8", "surrogatepass")
        except UnicodeDecodeError as exc:
            text = rest[: exc.start].decode("utf-8", "surrogatepass")
            pieces.append(join_escapes([_escape(ord(c), _STRING_SPECIAL) for c in text]))
            pieces.append(f"\\x{{{rest[exc.start]:02X}}}")
            rest = rest[exc.start + 1 :]
            continue
        pieces.append(join_escapes([_escape(ord(c), _STRING_SPECIAL) for c in text]))
        break
    return '"' + "".join(pieces) + '"'


def _char_class(cc: CharClass) -> str:
    pieces: list[str] = []
    for lo, hi in cc.ranges:
        if not 0 <= lo <= hi <= MAX_CODEPOINT:
            raise GrammarError(f"CharClass range ({lo}, {hi}) is not a valid code-point range")
        pieces.append(_escape(lo, _CLASS_SPECIAL))
        if hi == lo + 1:
            pieces.append(_escape(hi, _CLASS_SPECIAL))
        elif hi != lo:
            pieces.append("-")
            pieces.append(_escape(hi, _CLASS_SPECIAL))
    return "[" + ("^" if cc.negated else "") + join_escapes(pieces) + "]"


def _quantifier(lo: int, hi: int | None) -> str:
    if lo < 0 or (hi is not None and hi < lo):
        raise GrammarError(f"Repeat bounds min={lo}, max={hi} are invalid")
    if hi is None:
        return {0: "*", 1: "+"}.get(lo, f"{{{lo},}}")
    if (lo, hi) == (0, 1):
        return "?"
    return f"{{{lo}}}" if lo == hi else f"{{{lo},{hi}}}"


def _name(name: str) -> str:
    if not _NAME.fullmatch(name) or name in MACRO_NAMES:
        raise GrammarError(f"rule name {name!r} cannot be written as EBNF")
    return name


def _expr(
    e: Expr,
    ctx: int,
    toks: dict[str, str] | None = None,
    memo: dict[tuple[int, int], str] | None = None,
) -> str:
    """Print ``e`` so that it parses back as one unit in a context of precedence ``ctx``.
    ``toks`` maps the names of token-id rules to their element text; ``memo`` holds the
    text of inner nodes printed so far (by id and context: a node shared by many parents,
    such as free text's byte classes, is printed once)."""
    if type(e) is Bytes:  # the most common node: straight to its text
        return _literal(e.data)
    if memo is not None and isinstance(e, (Seq, Choice, Repeat)):
        key = (id(e), ctx)
        got = memo.get(key)
        if got is None:
            got = memo[key] = _inner(e, ctx, toks, memo)
        return got
    return _inner(e, ctx, toks, memo)


def _inner(
    e: Expr, ctx: int, toks: dict[str, str] | None, memo: dict[tuple[int, int], str] | None
) -> str:
    if isinstance(e, Bytes):
        return _literal(e.data)
    if isinstance(e, CharClass):
        return _char_class(e)
    if isinstance(e, RuleRef):
        if toks and e.name in toks:
            return toks[e.name]
        return _name(e.name)
    if isinstance(e, Repeat):
        out = _expr(e.item, _ATOM + 1, toks, memo) + _quantifier(e.min, e.max)
        return f"({out})" if ctx > _ATOM else out
    if isinstance(e, Seq):
        if not e.items:
            return '""'
        if len(e.items) == 1:
            return _expr(e.items[0], ctx, toks, memo)
        out = " ".join(_expr(item, _SEQ + 1, toks, memo) for item in e.items)
        return f"({out})" if ctx > _SEQ else out
    if isinstance(e, Choice):
        if not e.items:
            raise GrammarError("Choice with no alternatives cannot be written as EBNF")
        if len(e.items) == 1:
            return _expr(e.items[0], ctx, toks, memo)
        out = " | ".join(_expr(item, _CHOICE + 1, toks, memo) for item in e.items)
        return f"({out})" if ctx > _CHOICE else out
    raise GrammarError(f"unknown grammar expression {e!r}")


def expr_excerpt(expr: Expr, limit: int = 160) -> str:
    """The EBNF text of one expression, cut to ``limit`` characters (for error messages;
    it recurses, so a caller with deep expressions runs it on a deep stack)."""
    text = _expr(expr, 0)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def grammar_to_ebnf(ir: GrammarIR) -> str:
    """Write a grammar as EBNF text, one rule per line, root rule first.

    Parameters
    ----------
    ir : GrammarIR
        The grammar to print.

    Returns
    -------
    str
        EBNF text in treegram's dialect, ending with a newline. Non-printable characters
        are escaped (``\\n``, ``\\xNN``, ``\\uNNNN``, ``\\UNNNNNNNN``).

    Raises
    ------
    GrammarError
        A rule name is not a valid EBNF name, or the IR holds something EBNF cannot
        express (non-UTF-8 bytes, invalid ranges or repeat bounds).
    """
    return run_sized(ir_depth(ir) > SHALLOW_DEPTH, _grammar_to_ebnf, ir)


def _marker_attributes(m: CaptureMarker) -> list[str]:
    """A capture marker as rule attributes (parsed back by ``frontends._rule_attrs``)."""
    if m.text is not None:
        # JSON escapes, with ',' and ']' escaped too so the attribute list splits on ','
        text = json.dumps(m.text.decode("utf-8"), ensure_ascii=True)
        text = text.replace(",", "\\u002c").replace("]", "\\u005d")
        out = [f"capture_hidden_{m.kind}_text={text}"]
    elif m.split is not None:
        out = [f'capture_hidden_{m.kind}_split="{m.split[0]} {m.split[1]}"']
    elif m.before:
        out = [f"capture_hidden_{m.kind}_before_bytes={m.size}"]
    else:
        out = [f"capture_hidden_{m.kind}_bytes={m.size}"]
    if m.capture is not None:
        out.append(f'stop_capture="{m.capture}"')
    return out


def _grammar_to_ebnf(ir: GrammarIR) -> str:
    rules = sorted(ir.rules, key=lambda r: r.name != ir.root)
    # token-id rules print inline as their element (the parser makes them again)
    toks = {r.name: r.tokens.text for r in rules if r.tokens is not None}
    lines = []
    memo: dict[tuple[int, int], str] = {}  # the nodes live in ``ir``: ids stay valid
    for rule in rules:
        if rule.tokens is not None:
            continue
        parts = [] if rule.temperature is None else [f"temperature={rule.temperature!r}"]
        if rule.max_tokens is not None:
            parts.append(f"max_tokens={rule.max_tokens}")
        if rule.capture is not None:
            parts.append(f'capture="{rule.capture}"')
        if rule.marker is not None:
            parts.extend(_marker_attributes(rule.marker))
        if rule.lazy:
            parts.append("lazy")
        if rule.unique:
            parts.append("unique")
        if rule.max_string_chars is not None:
            parts.append(f"max_string_chars={rule.max_string_chars}")
        attrs = f"[{', '.join(parts)}]" if parts else ""
        line = f"{_name(rule.name)}{attrs} ::= {_expr(rule.body, _CHOICE, toks, memo)}"
        if rule.lookahead is not None:
            line += f" (= {_expr(rule.lookahead, _CHOICE, toks, memo)})"
        lines.append(line)
    return "\n".join(lines) + "\n"
