"""String exclusions: JSON strings whose *written* content contains none of a set of texts.

xgrammar 0.2.8's structural tags take ``JSONSchemaFormat(excludes=[...])``: no JSON string
the document writes (a value or a key) may contain one of those texts between its quotes,
so that, for example, a tool call's arguments cannot contain the control tokens that end
the call. The texts are matched against the string as written, escapes included: with
``"ab"`` excluded, ``"ab"`` is refused and ``"\\u0061b"`` is not; with ``'"'`` excluded,
``"\\""`` is refused (it contains a quote) and ``"\\u0022"`` is not. Punctuation, numbers
and literals outside strings are never filtered, and a text never spans two strings.

A string's written content is a regular language over code points (the spellings of its
decoded characters), so each filtered string is built exactly as an automaton
difference: spellings minus ``.*(t1|t2|...).*``, written back as grammar rules.

Which strings are filtered follows xgrammar: strings that the schema leaves free (plain
``type: string``, with or without length bounds, or with a ``format`` that has no
language), ``enum``/``const`` strings and every string inside ``enum``/``const`` objects
and arrays, declared and additional property names, and every string of an
unconstrained value. Strings constrained by a ``pattern`` or a known ``format``, and keys
matched by ``patternProperties`` or constrained by a ``propertyNames`` pattern or
format, are the schema's own contract and are kept as they are.
"""

from __future__ import annotations

from treegram.errors import GrammarError
from treegram.frontends.json_schema._context import ConversionContext
from treegram.frontends.json_schema._dfa_expr import MAX_GRAMMAR_STATES, dfa_expr
from treegram.frontends.json_schema._formats import format_expr
from treegram.frontends.json_schema._keywords import PATTERNS_KEY
from treegram.frontends.json_schema._lex import (
    canonical_text,
    encoded_class,
    json_string_unit,
    string_char,
    string_of,
)
from treegram.ir import (
    MAX_CODEPOINT,
    Bytes,
    CharClass,
    Choice,
    Dfa,
    DfaLimitError,
    Expr,
    Repeat,
    RuleRef,
    Seq,
)

__all__ = ["Exclusions", "check_excludes", "free_string"]

_ANY_STAR = Repeat(CharClass(((0, MAX_CODEPOINT),)), 0, None)
# Code points a JSON string holds as themselves (no escape needed): the fast path for
# literals, whose spelling is then the text itself.
_PLAIN_ASCII = frozenset(chr(c) for c in range(0x20, 0x7F)) - {'"', "\\"}


def check_excludes(excludes, name: str = "excludes") -> tuple[str, ...]:
    """``excludes`` as a tuple of texts, duplicates removed in order.

    Raises
    ------
    GrammarError
        ``excludes`` is not a list or tuple of non-empty strings (the message names
        ``name``).
    """
    if not isinstance(excludes, (list, tuple)) or not all(
        isinstance(t, str) and t for t in excludes
    ):
        raise GrammarError(f"{name} must be an array of non-empty strings, got {excludes!r}")
    return tuple(dict.fromkeys(excludes))


# Lone surrogates have no JSON spelling that decodes to one character.
_WRITABLE = Dfa([((0, 0xD7FF, 0), (0xE000, MAX_CODEPOINT, 0))], [True])


def free_string(schema) -> bool:
    """Whether the strings of ``schema`` are ones the schema leaves free (filtered): no
    ``pattern`` and no ``format`` with a language of its own."""
    if not isinstance(schema, dict):
        return schema is True
    if "pattern" in schema or PATTERNS_KEY in schema:
        return False
    fmt = schema.get("format")
    return fmt is None or format_expr(fmt) is None


def _raw(ranges) -> Expr:
    return CharClass(tuple(ranges))


class Exclusions:
    """The excluded texts of one conversion and the filtered strings built from them.

    Parameters
    ----------
    conv : ConversionContext
        The converter (filtered strings become its rules).
    texts : tuple of str
        The excluded texts (non-empty; see :func:`check_excludes`). Empty: nothing is
        filtered and every method returns its input.
    """

    def __init__(self, conv: ConversionContext, texts: tuple[str, ...]) -> None:
        self.conv = conv
        self.texts = texts
        self._search: Dfa | None = None
        self._any: Expr | None = None
        self._bounded: dict[tuple[int, int | None], Expr | None] = {}  # one rule per bounds

    def __bool__(self) -> bool:
        return bool(self.texts)

    @property
    def search(self) -> Dfa:
        """The written contents that contain an excluded text."""
        if self._search is None:
            hits = tuple(Bytes(t.encode("utf-8")) for t in self.texts)
            body = hits[0] if len(hits) == 1 else Choice(hits)
            self._search = Dfa.from_expr(Seq((_ANY_STAR, body, _ANY_STAR)))
        return self._search

    def any_string(self, plain: Expr) -> Expr:
        """Any JSON string without an excluded text (one shared rule); ``plain`` when
        nothing is excluded."""
        if not self.texts:
            return plain
        if self._any is None:
            name = self.conv.new_rule("string_excl")
            spellings = Dfa.from_expr(Repeat(json_string_unit(), 0, None))
            self.conv.rules[name] = self._checked(spellings, "string_excl")
            self._any = RuleRef(name)
        return self._any

    def bounded_string(self, min_length: int, max_length: int | None) -> Expr | None:
        """JSON strings of ``min_length`` to ``max_length`` decoded characters without an
        excluded text.

        Raises
        ------
        DfaLimitError
            The bounds times the exclusion automaton need more than
            :data:`MAX_GRAMMAR_STATES` states (the caller reports the length keyword).
        """
        key = (min_length, max_length)
        if key in self._bounded:
            return self._bounded[key]
        top = max(min_length, max_length or 0)
        if top + 1 > MAX_GRAMMAR_STATES:
            # Each position up to the bound is a state of its own: the automaton would be
            # refused after building it.
            raise DfaLimitError(
                f"a length bound of {top} needs more than {MAX_GRAMMAR_STATES} automaton states"
            )
        spellings = Dfa.from_expr(Repeat(string_char(), min_length, max_length))
        body = self._checked(spellings, "string_excl_len")
        out: Expr | None = None
        if body is not None:
            name = self.conv.new_rule("string_excl_len")
            self.conv.rules[name] = body
            out = RuleRef(name)
        self._bounded[key] = out
        return out

    def language(self, decoded: Dfa, base: str, writable: bool = False) -> Expr | None:
        """JSON strings whose decoded content ``decoded`` accepts and whose written
        content has no excluded text (``writable``: ``decoded`` is already
        ``d.intersect(WRITABLE)`` of some ``d``, see ``dfa_string_expr``).

        Raises
        ------
        DfaLimitError
            Too many states (see :meth:`bounded_string`).
        """
        if not writable:
            decoded = decoded.intersect(_WRITABLE)
        return self._checked(decoded.substitute(encoded_class), base)

    def _checked(self, spellings: Dfa, base: str) -> Expr | None:
        """A JSON string literal whose written content ``spellings`` accepts minus the
        contents that contain an excluded text (``None``: none is left)."""
        kept = spellings.difference(self.search).minimize()
        if len(kept) > MAX_GRAMMAR_STATES:
            raise DfaLimitError(
                f"the strings without the excluded texts need {len(kept)} automaton "
                f"states, more than {MAX_GRAMMAR_STATES}"
            )
        if kept.is_empty():
            return None
        return string_of(dfa_expr(self.conv, kept, base, _raw))

    def literal(self, text: str) -> Expr | None:
        """The spellings of the string ``text`` (as ``const``/``enum`` values and property
        names are written) without an excluded text; ``None`` when none is left."""
        body = canonical_text(text)
        if not self.texts:
            return string_of(body)
        if all(ch in _PLAIN_ASCII for ch in text):  # written exactly as itself
            return None if any(t in text for t in self.texts) else string_of(body)
        spellings = Dfa.from_expr(body)
        if spellings.intersect(self.search).is_empty():
            return string_of(body)
        return self._checked(spellings, "literal_excl")
