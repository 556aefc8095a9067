"""String-valued schemas of the JSON Schema frontend: lengths, patterns, formats, keys.

All results describe the whole JSON string literal, quotes included, in every encoding a
JSON writer may choose (raw characters or escapes); length bounds count decoded
characters, so an escape sequence counts as one.
"""

from __future__ import annotations

import functools

from treegram.frontends._regex import regex_to_expr
from treegram.frontends.json_schema._context import ConversionContext
from treegram.frontends.json_schema._dfa_expr import (
    MAX_GRAMMAR_STATES,
    NOT_COUNTED,
    bounded_string_expr,
    counted_string_expr,
    dfa_string_expr,
)
from treegram.frontends.json_schema._excludes import free_string
from treegram.frontends.json_schema._formats import format_expr
from treegram.frontends.json_schema._keywords import NOT_STRING, PATTERNS_KEY
from treegram.frontends.json_schema._lex import (
    EMPTY,
    alt,
    build_template,
    copy_build,
    encode_expr,
    json_string_unit,
    seq,
    string_char,
    string_of,
)
from treegram.frontends.json_schema._pattern import (
    ecma_classes,
    has_inner_anchor,
    split_alternatives,
    strip_anchors,
)
from treegram.frontends.json_schema._string_dfa import (
    StringConstraintError,
    string_dfa,
    with_length_bounds,
)
from treegram.ir import DfaLimitError, Expr, Repeat

__all__ = [
    "any_string",
    "length_string",
    "pattern_body",
    "format_body",
    "excluded_string",
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


def pattern_body(pattern: str) -> Expr | None:
    """Encoded string content that *contains* a match of ``pattern`` (ECMA-262 search).

    Built once for the last :data:`_BODY_CACHE` patterns and handed out as a copy that
    is what a build would be (:func:`~._lex.copy_build`): schemas repeat a pattern
    across properties and definitions.

    Raises
    ------
    ValueError
        ``pattern`` uses an anchor inside a group (message says so); regex syntax errors
        from the regex frontend propagate.
    """
    return copy_build(_pattern_template(pattern))


_BODY_CACHE = 128


@functools.lru_cache(maxsize=_BODY_CACHE)  # errors are raised again, never cached
def _pattern_template(pattern: str) -> tuple[Expr | None, frozenset[int]]:
    return build_template(lambda: _pattern_build(pattern))


def _pattern_build(pattern: str) -> Expr | None:
    anything = Repeat(string_char(), 0, None)
    # alternatives grouped by their anchors: one leading and one trailing ``anything`` per
    # group, as a union of k unanchored searches would make the automaton track which of
    # them matched already (2^k subsets of their trailing loops)
    groups: dict[tuple[bool, bool], list[Expr]] = {}
    pattern = ecma_classes(pattern)
    for alternative in split_alternatives(pattern):
        left, core, right = strip_anchors(alternative)
        if has_inner_anchor(core):
            raise ValueError(f"anchor inside a group in pattern {pattern!r}")
        body = encode_expr(regex_to_expr(core)) if core else EMPTY
        groups.setdefault((left, right), []).append(body)
    return alt(
        *(
            seq(EMPTY if left else anything, alt(*bodies), EMPTY if right else anything)
            for (left, right), bodies in groups.items()
        )
    )


def format_body(name: str) -> Expr | None:
    """Encoded string content of the format ``name``; ``None`` for unknown formats.
    Built once per format and handed out as a copy that is what a build would be
    (:func:`~._lex.copy_build`): a schema names a format for many properties."""
    return copy_build(_format_template(name))


@functools.lru_cache(maxsize=_BODY_CACHE)  # errors are raised again, never cached
def _format_template(name: str) -> tuple[Expr | None, frozenset[int]]:
    return build_template(lambda: _format_build(name))


def _format_build(name: str) -> Expr | None:
    expr = format_expr(name)
    return None if expr is None else encode_expr(expr)


def constrained_string(conv: ConversionContext, schema: dict, ptr: str) -> Expr | None:
    """JSON strings under an intersection of patterns, a format and length bounds, through
    a code point DFA (:mod:`._string_dfa`)."""
    keys = ("minLength", "maxLength", "pattern", "format", PATTERNS_KEY)
    spec = {k: schema[k] for k in keys if k in schema}
    if NOT_STRING in schema:  # strings outside these (from not): complement automata
        spec["allOf"] = [{"not": sub} for sub in schema[NOT_STRING]]
    bounds = {k: spec.pop(k) for k in ("minLength", "maxLength") if k in spec}
    try:
        dfa = string_dfa(spec, conv)
        if conv.excludes and free_string(schema):
            if bounds:  # the exclusions are taken out of the bounded language itself
                dfa = string_dfa({**spec, **bounds}, conv)
            return conv.excludes.language(dfa, "str")
        if bounds and dfa is not None:
            # as ints: JSON Schema allows 5.0 for a count
            lo, hi = conv.count(schema, "minLength", ptr, 0), conv.count(schema, "maxLength", ptr)
            counted = counted_string_expr(conv, dfa, lo, hi)
            if counted is not NOT_COUNTED:
                return counted  # type: ignore[return-value]
            bounded = _length_product(dfa, lo, hi)
            if bounded is None:  # a state per length is too many: the matcher counts
                return bounded_string_expr(conv, dfa, lo, hi)  # type: ignore[arg-type]
            dfa = bounded
        elif bounds:  # a keyword string_dfa does not decide: as before, in one call
            dfa = string_dfa({**spec, **bounds}, conv)
        return dfa_string_expr(conv, dfa)  # type: ignore[arg-type]
    except StringConstraintError as exc:
        keyword, why = exc.keyword, str(exc)
    except DfaLimitError as exc:
        keyword = next(
            (k for k in ("maxLength", "minLength", "pattern", "format") if k in schema), "not"
        )
        keyword, why = keyword, f"together with the other string keywords: {exc}"
    conv.unsupported(keyword, f"{ptr}/{keyword}", why)
    if conv.excludes and free_string(schema):
        return conv.excludes.any_string(any_string())
    return length_string(schema.get("minLength", 0), schema.get("maxLength"))


def _length_product(dfa, lo: int, hi: int | None):
    """``dfa`` with ``lo`` to ``hi`` characters as one automaton, or None when a maximum
    that cuts the language may take more than ``_PRODUCT_STATES`` states (``dfa``'s
    times ``hi + 1``) or takes more than a grammar is built from: then
    ``bounded_string_expr`` has the matcher count instead."""
    span = dfa.length_range()
    if hi is None or span is None or (span[1] is not None and span[1] <= hi):
        return with_length_bounds(dfa, lo, hi)
    if len(dfa) * (hi + 1) > _PRODUCT_STATES:
        return None
    try:
        out = with_length_bounds(dfa, lo, hi)
    except (StringConstraintError, DfaLimitError):
        return None
    return out if len(out) <= MAX_GRAMMAR_STATES else None


# A length bound whose product with the automaton may hold more states than this is
# counted by the matcher instead: every state of a product is classified against the
# vocabulary on its first mask, and a string walks through a new state per character
# (``^(?:\S+\s+){0,9}\S+$`` with ``maxLength: 120``: masks of 100-270 ms, against a few
# ms counted). On every 12th MaskBench schema, 2,000 rather than 80,000 here took the
# masks' total thread CPU from 4,328 to 4,202 ms and the slowest from 11.2 to 7.9 ms.
_PRODUCT_STATES = 2_000


def excluded_string(conv: ConversionContext, schema: dict, value: str) -> bool:
    """Whether ``value`` matches one of the schemas in the internal not-string keyword."""
    for sub in schema.get(NOT_STRING, ()):
        try:
            dfa = string_dfa(sub, conv)
        except StringConstraintError:
            return True  # cannot tell: leave the value out (never admit a wrong one)
        if dfa is None or dfa.accepts(value):
            return True
    return False
