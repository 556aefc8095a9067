"""String-valued schemas of the JSON Schema frontend: lengths, patterns, formats, keys.

All results describe the whole JSON string literal, quotes included, in every encoding a
JSON writer may choose (raw characters or escapes); length bounds count decoded
characters, so an escape sequence counts as one.
"""

from __future__ import annotations

from treegram.grammar._ir import Expr, Repeat
from treegram.grammar._json_schema_formats import format_expr
from treegram.grammar._json_schema_lex import (
    EMPTY,
    alt,
    encode_expr,
    json_string_unit,
    seq,
    string_char,
    string_of,
)

__all__ = [
    "any_string",
    "length_string",
    "pattern_body",
    "format_body",
    "excluded_string",
    "split_alternatives",
    "constrained_string",
]


def any_string() -> Expr:
    """Any JSON string literal."""
    return string_of(Repeat(json_string_unit(), 0, None))


def length_string(min_length: int, max_length: int | None) -> Expr | None:
    """JSON strings of ``min_length`` to ``max_length`` decoded characters."""
    if max_length is not None and max_length < min_length:
        return None
    if min_length == 0 and max_length is None:
        return any_string()
    return string_of(Repeat(string_char(), min_length, max_length))


def split_alternatives(pattern: str) -> list[str]:
    """Split ``pattern`` at its top-level ``|`` (outside groups, classes and escapes); an
    alternative that is one whole group, ``(...)`` or ``(?:...)``, is split inside too
    (for a search, ``(^a$|b)`` is ``^a$|b``)."""
    parts = []
    for part in _split_top(pattern):
        inner = _group_inside(part)
        parts.extend([part] if inner is None else split_alternatives(inner))
    return parts


def _outside_classes(pattern: str):
    """``(index, char, depth)`` for each character outside escapes and classes; ``depth``
    counts the groups around it (a parenthesis counts as outside its own group)."""
    depth, in_class, i = 0, False, 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\":
            i += 2
            continue
        if in_class:
            in_class = ch != "]"
        elif ch == "[":
            in_class = True
        else:
            depth -= ch == ")"
            yield i, ch, depth
            depth += ch == "("
        i += 1


def _split_top(pattern: str) -> list[str]:
    cuts = [i for i, ch, depth in _outside_classes(pattern) if ch == "|" and depth == 0]
    bounds = [-1, *cuts, len(pattern)]
    return [pattern[a + 1 : b] for a, b in zip(bounds, bounds[1:], strict=False)]


def _group_inside(part: str) -> str | None:
    """The inside of ``part`` when it is exactly one capturing or ``(?:`` group."""
    if not part.startswith("(") or part.startswith(("(?=", "(?!", "(?<")):
        return None
    if part.startswith("(?") and not part.startswith("(?:"):
        return None
    for i, ch, depth in _outside_classes(part):
        if ch == ")" and depth == 0:
            if i != len(part) - 1:
                return None  # the group closes before the end (or is quantified)
            return part[3:-1] if part.startswith("(?:") else part[1:-1]
    return None


def _strip_anchors(alternative: str) -> tuple[bool, str, bool]:
    left = alternative.startswith("^")
    core = alternative[1:] if left else alternative
    right = False
    if core.endswith("$"):
        backslashes = len(core[:-1]) - len(core[:-1].rstrip("\\"))
        if backslashes % 2 == 0:
            right, core = True, core[:-1]
    return left, core, right


def _has_inner_anchor(core: str) -> bool:
    i, in_class = 0, False
    while i < len(core):
        ch = core[i]
        if ch == "\\":
            i += 2
            continue
        if in_class:
            in_class = ch != "]"
        elif ch == "[":
            in_class = True
            if core[i + 1 : i + 2] == "^":
                i += 1
        elif ch in "^$":
            return True
        i += 1
    return False


def pattern_body(pattern: str) -> Expr | None:
    """Encoded string content that *contains* a match of ``pattern`` (ECMA-262 search).

    Raises
    ------
    ValueError
        ``pattern`` uses an anchor inside a group (message says so); regex syntax errors
        from the regex frontend propagate.
    """
    from treegram.grammar._regex import regex_to_expr

    anything = Repeat(string_char(), 0, None)
    parts = []
    for alternative in split_alternatives(pattern):
        left, core, right = _strip_anchors(alternative)
        if _has_inner_anchor(core):
            raise ValueError(f"anchor inside a group in pattern {pattern!r}")
        body = encode_expr(regex_to_expr(core)) if core else EMPTY
        parts.append(seq(EMPTY if left else anything, body, EMPTY if right else anything))
    return alt(*parts)


def format_body(name: str) -> Expr | None:
    """Encoded string content of the format ``name``; ``None`` for unknown formats."""
    expr = format_expr(name)
    return None if expr is None else encode_expr(expr)


def constrained_string(conv, schema: dict, ptr: str) -> Expr | None:
    """JSON strings under an intersection of patterns, a format and length bounds, through
    a code point DFA (:mod:`treegram.grammar._charset_dfa`)."""
    from treegram.grammar._charset_dfa import (
        PATTERNS_KEY,
        DfaLimitError,
        StringConstraintError,
        dfa_string_expr,
        string_dfa,
    )
    from treegram.grammar._json_schema_logic import NOT_STRING

    keys = ("minLength", "maxLength", "pattern", "format", PATTERNS_KEY)
    spec = {k: schema[k] for k in keys if k in schema}
    if NOT_STRING in schema:  # strings outside these (from not): complement automata
        spec["allOf"] = [{"not": sub} for sub in schema[NOT_STRING]]
    try:
        return dfa_string_expr(conv, string_dfa(spec, conv))
    except StringConstraintError as exc:
        keyword, why = exc.keyword, str(exc)
    except DfaLimitError as exc:
        keyword = next(k for k in ("maxLength", "minLength", "pattern", "format") if k in schema)
        keyword, why = keyword, f"together with the other string keywords: {exc}"
    conv.unsupported(keyword, f"{ptr}/{keyword}", why)
    return length_string(schema.get("minLength", 0), schema.get("maxLength"))


def excluded_string(conv, schema: dict, value: str) -> bool:
    """Whether ``value`` matches one of the schemas in the internal not-string keyword."""
    from treegram.grammar._charset_dfa import StringConstraintError, string_dfa
    from treegram.grammar._json_schema_logic import NOT_STRING

    for sub in schema.get(NOT_STRING, ()):
        try:
            dfa = string_dfa(sub, conv)
        except StringConstraintError:
            return True  # cannot tell: leave the value out (never admit a wrong one)
        if dfa is None or dfa.accepts(value):
            return True
    return False
