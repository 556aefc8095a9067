"""The decoded strings a JSON Schema accepts, as a code point DFA (:class:`~treegram.ir.Dfa`).

- :func:`pattern_dfa` -- the strings containing a match of a JSON Schema ``pattern``
  (an ECMA-262 *search*: ``^``/``$`` anchor a top-level alternative, as
  :func:`~treegram.frontends.json_schema._strings.pattern_body` has it);
- :func:`string_dfa` -- the decoded strings a schema accepts, for schemas built from
  ``type``, ``minLength``, ``maxLength``, ``pattern``, ``format``, ``const``, ``enum``,
  ``allOf``, ``anyOf``, ``oneOf``, ``not``, ``if``/``then``/``else`` and ``$ref`` (keywords
  of other types are ignored, as JSON Schema does for strings); ``None`` when some other
  keyword could constrain a string. So ``{"not": S}`` over strings is
  ``string_dfa(S).complement()``.

Errors that a caller reports as :class:`~treegram.errors.UnsupportedSchemaError` are raised
as :class:`StringConstraintError` carrying the keyword to name.
"""

from __future__ import annotations

import functools

from treegram.frontends._regex import regex_to_expr
from treegram.frontends.json_schema._anchors import (
    edge_lookaheads,
    marked_pattern_dfa,
    trailing_lookahead,
)
from treegram.frontends.json_schema._assertions import has_assertions
from treegram.frontends.json_schema._context import ConversionContext
from treegram.frontends.json_schema._dfa_expr import MAX_GRAMMAR_STATES
from treegram.frontends.json_schema._formats import REFUSED as REFUSED_FORMATS
from treegram.frontends.json_schema._formats import format_expr
from treegram.frontends.json_schema._keywords import (
    ANNOTATIONS,
    INTERNAL,
    NOT_STRING,
    PATTERNS_KEY,
    is_annotation,
)
from treegram.frontends.json_schema._pattern import (
    ecma_classes,
    has_inner_anchor,
    split_alternatives,
    strip_anchors,
)
from treegram.ir import MAX_CODEPOINT, CharClass, Choice, Dfa, DfaLimitError, Expr, Repeat, Seq

__all__ = ["StringConstraintError", "pattern_dfa", "string_dfa", "with_length_bounds"]


class StringConstraintError(ValueError):
    """A string constraint that cannot be compiled; ``keyword`` is the one to name."""

    def __init__(self, keyword: str, why: str) -> None:
        super().__init__(why)
        self.keyword = keyword


_ALL = ((0, MAX_CODEPOINT),)

_ANY_STAR = Repeat(CharClass(_ALL), 0, None)
# Keywords that never constrain a string.
_OTHER_TYPES = (
    frozenset(
        {
            "minimum",
            "maximum",
            "exclusiveMinimum",
            "exclusiveMaximum",
            "multipleOf",
            "items",
            "prefixItems",
            "additionalItems",
            "contains",
            "minItems",
            "maxItems",
            "uniqueItems",
            "minContains",
            "maxContains",
            "unevaluatedItems",
            "properties",
            "patternProperties",
            "additionalProperties",
            "required",
            "minProperties",
            "maxProperties",
            "propertyNames",
            "dependentRequired",
            "dependentSchemas",
            "dependencies",
            "unevaluatedProperties",
        }
    )
    | ANNOTATIONS
    | {"contentSchema", "nullable"}
    | (INTERNAL - {PATTERNS_KEY, NOT_STRING})  # those two are read below
)
_MAX_REF_DEPTH = 32
# Applied after the other keywords (lengths: to the smallest automaton; then/else: by if).
_LATER = frozenset({"minLength", "maxLength", "then", "else"})
_ANY_DFA_MARK = Dfa.any()


def pattern_dfa(pattern: str) -> Dfa:
    """The strings that contain a match of the ECMA-262 ``pattern`` (JSON Schema search).

    Automata are immutable; the last :data:`_PATTERN_CACHE` patterns compiled (in any
    schema) are kept, since schemas repeat a pattern under ``not``, ``allOf`` and across
    properties.

    Raises
    ------
    StringConstraintError
        The pattern has an anchor inside a group, a syntax error or an unsupported
        construct, or needs too many states (keyword ``pattern``).
    """
    try:
        spelled = ecma_classes(pattern)
    except ValueError as exc:
        raise StringConstraintError("pattern", str(exc)) from None
    return _cached_pattern_dfa(spelled)


_PATTERN_CACHE = 128


@functools.lru_cache(maxsize=_PATTERN_CACHE)  # errors are raised again, never cached
def _cached_pattern_dfa(pattern: str) -> Dfa:
    edges = edge_lookaheads(pattern)
    if edges is not None:  # ^(?=X)(?!Y)rest: rest, with X, without Y
        looks, rest = edges
        out = _cached_pattern_dfa(rest)
        for positive, look in looks:
            try:
                other = _cached_pattern_dfa(look)
                out = out.intersect(other) if positive else out.difference(other)
            except DfaLimitError as exc:
                raise StringConstraintError("pattern", f"pattern {pattern!r}: {exc}") from None
        return out
    trailing = trailing_lookahead(pattern)
    if trailing is not None:  # p(?=X) searches like pX
        return _cached_pattern_dfa(trailing)
    # Alternatives grouped by their anchors: one Σ*(a|b|...)Σ* rather than a union of
    # searches, whose subsets would track every alternative separately.
    groups: dict[tuple[bool, bool], list[Expr]] = {}
    try:
        if has_assertions(pattern):  # word boundaries, lookaheads elsewhere: markers
            return marked_pattern_dfa(pattern)
        for alternative in split_alternatives(pattern):
            left, core, right = strip_anchors(alternative)
            if has_inner_anchor(core):
                return marked_pattern_dfa(pattern)  # anchors anywhere: through markers
            body = regex_to_expr(core) if core else Seq(())
            groups.setdefault((left, right), []).append(body)
        parts = []
        for (left, right), bodies in groups.items():
            body = bodies[0] if len(bodies) == 1 else Choice(tuple(bodies))
            items = ([] if left else [_ANY_STAR]) + [body] + ([] if right else [_ANY_STAR])
            parts.append(Seq(tuple(items)))
        return Dfa.from_expr(parts[0] if len(parts) == 1 else Choice(tuple(parts)))
    except DfaLimitError as exc:
        raise StringConstraintError("pattern", f"pattern {pattern!r}: {exc}") from None
    except ValueError as exc:
        if isinstance(exc, StringConstraintError):
            raise
        raise StringConstraintError("pattern", str(exc)) from None


def _format_dfa(name: str, conv: ConversionContext | None, ptr: str) -> Dfa:
    expr = format_expr(name)
    if expr is None and conv is not None and name not in REFUSED_FORMATS:
        conv.unknown_format(name, f"{ptr}/format")  # raises, or the format is an annotation
        return Dfa.any()
    if expr is None and name in REFUSED_FORMATS:
        raise StringConstraintError("format", f"format {name!r}: {REFUSED_FORMATS[name]}")
    if expr is None:
        raise StringConstraintError("format", f"unknown format {name!r}")
    try:
        return _known_format_dfa(name)
    except DfaLimitError as exc:
        raise StringConstraintError("format", f"format {name!r}: {exc}") from None


@functools.cache  # errors are raised again, never cached
def _known_format_dfa(name: str) -> Dfa:
    """The automaton of the known format ``name``, built once per process: automata are
    immutable and the formats few, while a schema repeats one across many properties
    (Github_medium o15711 has four ``uri-reference`` strings, each a subset
    construction of some 40 ms)."""
    return Dfa.from_expr(format_expr(name))


def string_dfa(
    schema, conv: ConversionContext | None = None, ptr: str = "", _depth: int = 0
) -> Dfa | None:
    """The decoded strings that satisfy ``schema``, or ``None`` when the schema has a
    keyword outside the string subset this module handles (see the module docstring).

    Parameters
    ----------
    schema : dict or bool
        The schema.
    conv : Converter, optional
        Resolves ``$ref`` (without it a ``$ref`` gives ``None``).
    ptr : str
        JSON pointer of ``schema`` (for messages).

    Raises
    ------
    StringConstraintError
        An unknown format, a pattern that cannot be compiled, or too many states.
    """
    if schema is True:
        return Dfa.any()
    if schema is False:
        return Dfa.nothing()
    if not isinstance(schema, dict) or _depth > _MAX_REF_DEPTH:
        return None
    out = _ANY_DFA_MARK
    for key, val in schema.items():
        if key in _OTHER_TYPES or key in _LATER or is_annotation(key):
            continue
        try:
            part = _keyword_dfa(schema, key, val, conv, ptr, _depth)
            if part is None:
                return None
            out = part if out is _ANY_DFA_MARK else out.intersect(part)
        except DfaLimitError as exc:
            raise StringConstraintError(key, str(exc)) from None
        if out.is_empty():
            return out
    if out is _ANY_DFA_MARK:
        out = Dfa.any()
    if "minLength" in schema or "maxLength" in schema:
        out = with_length_bounds(out, schema.get("minLength", 0), schema.get("maxLength"))
    return out


def with_length_bounds(dfa: Dfa, lo: int, hi: int | None) -> Dfa:
    """The strings of ``dfa`` with ``lo`` to ``hi`` characters, as one automaton (a state
    per length where the language is infinite).

    Raises
    ------
    StringConstraintError
        The automaton would need more than ``MAX_GRAMMAR_STATES`` states.
    """
    span = dfa.length_range()
    if (
        hi is not None
        and span is not None
        and span[1] is None
        and hi >= MAX_GRAMMAR_STATES + len(dfa)
    ):
        # An infinite language has a string of every length up to len(dfa) apart, and an
        # automaton accepting a string of length n without cycles has n + 1 states.
        raise StringConstraintError(
            "maxLength",
            f"maxLength {hi} with a pattern or format "
            f"needs more than {MAX_GRAMMAR_STATES} automaton states",
        )
    try:
        return dfa.with_length(lo, hi)
    except DfaLimitError as exc:
        raise StringConstraintError(
            "maxLength" if hi is not None else "minLength",
            f"length bounds with pattern or format: {exc}",
        ) from None


def _keyword_dfa(
    schema: dict, key: str, val, conv: ConversionContext | None, ptr: str, depth: int
) -> Dfa | None:
    if key == "type":
        types = [val] if isinstance(val, str) else list(val)
        return Dfa.any() if "string" in types else Dfa.nothing()
    if key == "pattern":
        return pattern_dfa(val)
    if key == PATTERNS_KEY:
        out = Dfa.any()
        for pat in val:
            out = out.intersect(pattern_dfa(pat))
        return out
    if key == "format":
        return _format_dfa(val, conv, ptr)
    if key in ("const", "enum"):
        values = [val] if key == "const" else list(val)
        return Dfa.literals(v for v in values if isinstance(v, str))
    sub = lambda s, p: string_dfa(s, conv, p, depth + 1)  # noqa: E731
    if key in ("allOf", "anyOf", "oneOf"):
        parts = [sub(s, f"{ptr}/{key}/{i}") for i, s in enumerate(val)]
        if any(p is None for p in parts):
            return None
        if key == "allOf":
            out = Dfa.any()
            for p in parts:
                out = out.intersect(p)
            return out
        if key == "anyOf":
            out = Dfa.nothing()
            for p in parts:
                out = out.union(p)
            return out
        once, twice = Dfa.nothing(), Dfa.nothing()
        for p in parts:
            twice = twice.union(once.intersect(p))
            once = once.union(p)
        return once.difference(twice)
    if key == "not":
        inner = sub(val, f"{ptr}/not")
        return None if inner is None else inner.complement()
    if key == NOT_STRING:  # strings outside each of these
        out = Dfa.any()
        for i, s in enumerate(val):
            inner = sub(s, f"{ptr}/not/{i}")
            if inner is None:
                return None
            out = out.difference(inner)
        return out
    if key == "if":
        cond = sub(val, f"{ptr}/if")
        then = sub(schema.get("then", True), f"{ptr}/then")
        other = sub(schema.get("else", True), f"{ptr}/else")
        if cond is None or then is None or other is None:
            return None
        return cond.intersect(then).union(other.difference(cond))
    if key == "$ref" and conv is not None:
        return sub(conv.resolve(val, ptr), val)
    return None
