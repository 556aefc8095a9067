"""Grammar intermediate representation.

A grammar is a set of named rules; each rule body is an expression tree over UTF-8 *bytes*
(literals are stored encoded) and Unicode *code points* (character classes). Frontends
(EBNF, builtin JSON, later JSON Schema and regex) produce this IR; the automaton builder
consumes it. Nodes are immutable and hashable so frontends can share sub-trees.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field, replace

__all__ = [
    "Bytes",
    "CharClass",
    "Seq",
    "Choice",
    "Repeat",
    "RuleRef",
    "Expr",
    "Rule",
    "CaptureMarker",
    "GrammarIR",
    "TokenSet",
    "token_rule",
    "map_leaves",
    "renamed_refs",
    "MAX_CODEPOINT",
]

MAX_CODEPOINT = 0x10FFFF


@dataclass(frozen=True)
class Bytes:
    """A literal byte string (UTF-8 encoded text). ``Bytes(b"")`` is the empty string."""

    data: bytes


@dataclass(frozen=True)
class CharClass:
    """One code point from ``ranges`` (inclusive pairs), or from their complement in
    ``[0, MAX_CODEPOINT]`` when ``negated``. Ranges are sorted, disjoint and merged."""

    ranges: tuple[tuple[int, int], ...]
    negated: bool = False


@dataclass(frozen=True)
class Seq:
    """Concatenation of ``items`` (an empty tuple is the empty string)."""

    items: tuple[Expr, ...]


@dataclass(frozen=True)
class Choice:
    """Alternation of ``items`` (at least one)."""

    items: tuple[Expr, ...]


@dataclass(frozen=True)
class Repeat:
    """``item`` repeated between ``min`` and ``max`` times; ``max=None`` is unbounded."""

    item: Expr
    min: int
    max: int | None


@dataclass(frozen=True)
class RuleRef:
    """A reference to the rule called ``name``."""

    name: str


Expr = Bytes | CharClass | Seq | Choice | Repeat | RuleRef


@dataclass(frozen=True)
class CaptureMarker:
    """Where the marker of a Lark ``suffix=`` / ``stop=`` rule lies in each completion of
    the rule that carries it, for captures (it never changes the language).

    ``kind`` is ``"suffix"`` (the marker is left out of the rule's own capture only) or
    ``"stop"`` (also out of every capture around it). The marker is the last ``size``
    bytes of a completion; with ``text`` set, it is ``text`` when the completion ends
    with it and absent otherwise; with ``before``, it is the ``size`` bytes right before
    the completion; with ``split`` (the names of two rules of the grammar, used only for
    this), the marker is the shortest end of the completion that the second rule matches
    while the first matches the rest (markers of several lengths).
    ``capture`` (``stop_capture="name"``) records the marker's bytes.
    """

    kind: str
    size: int = 0
    text: bytes | None = None
    before: bool = False
    capture: str | None = None
    split: tuple[str, str] | None = None

    def renamed(self, names) -> CaptureMarker:
        """This marker with the rule names of ``split`` mapped through ``names``."""
        if self.split is None:
            return self
        return replace(self, split=(names(self.split[0]), names(self.split[1])))


@dataclass(frozen=True)
class TokenSet:
    """xgrammar's token-id elements: one whole token whose id is in ``ids``
    (``Token(...)``), or, with ``exclude``, any one token whose id is not
    (``ExcludeToken(...)``). ``names`` are tokens given by their exact text (structural
    tags), looked up in the vocabulary when the grammar is compiled. ``ids`` and ``names``
    are sorted and distinct. Special and stop tokens never match one (a stop token ends
    the text; a special token has no text)."""

    ids: tuple[int, ...]
    exclude: bool = False
    names: tuple[str, ...] = ()

    @property
    def text(self) -> str:
        """The element as EBNF: ``Token(1, 2)`` or ``ExcludeToken(1, 2, "<end>")``."""
        items = [*map(str, self.ids), *(json.dumps(n, ensure_ascii=False) for n in self.names)]
        return f"{'ExcludeToken' if self.exclude else 'Token'}({', '.join(items)})"


@dataclass(frozen=True)
class Rule:
    """A named rule. ``lookahead`` is an optional assertion on what follows the rule
    (EBNF ``(= ...)``); it never changes the language and is used as a hint only.
    ``temperature`` is xgrammar's ``[temperature=T]`` attribute: the sampling temperature
    of the tokens generated inside the rule (the innermost such rule wins); it never
    changes the language either. ``capture`` is xgrammar's ``[capture="name"]``
    attribute: the matcher records the text of each completion of the rule under that
    name (:meth:`GrammarMatcher.get_captures`); ``marker`` says which bytes of those
    completions are a suffix or stop marker. Neither changes the language.
    ``max_tokens`` is xgrammar's token budget: each occurrence of the rule may read at
    most that many tokens; once they are spent, the matcher ends the occurrence where it
    can end (the language of a whole text does not change). ``lazy`` (xgrammar's
    ``[lazy]``) keeps only the strings of ``body`` none of whose proper prefixes it
    matches (committed-shortest matching); the body must call no rule, and the automaton
    builder applies it. ``tokens`` makes the rule a token-id element (:class:`TokenSet`):
    it reads one whole token by id, never bytes, and its ``body`` (an empty
    :class:`CharClass`) is not used; :func:`token_rule` builds one. ``unique`` (JSON
    Schema's ``uniqueItems``): the body reads one JSON string, never the empty text, and
    the completions of the rule that one occurrence of a caller's rule takes must decode to
    pairwise different strings (the matcher compares each with the earlier ones).
    ``max_string_chars`` (JSON Schema's ``maxLength`` beside a pattern or a format): the
    body reads the content of one JSON string (between its quotes, in any encoding JSON
    allows), calling no rule in a recursion; the matcher keeps
    each occurrence to at most that many decoded characters, instead of an automaton state
    per length."""

    name: str
    body: Expr
    lookahead: Expr | None = None
    temperature: float | None = None
    capture: str | None = None
    marker: CaptureMarker | None = None
    max_tokens: int | None = None
    lazy: bool = False
    tokens: TokenSet | None = None
    unique: bool = False
    max_string_chars: int | None = None


def token_rule(tokens: TokenSet) -> Rule:
    """The rule of a token-id element, named by its EBNF text (no EBNF rule name has
    parentheses, so it cannot clash with one), referenced with ``RuleRef(rule.name)``."""
    return Rule(tokens.text, CharClass(()), tokens=tokens)


def map_leaves(expr: Expr, leaf: Callable[[Expr], Expr]) -> Expr:
    """``expr`` with every node that is not a sequence, choice or repetition replaced by
    ``leaf(node)`` (the nodes are immutable: the path to each is rebuilt)."""
    if isinstance(expr, Seq):
        return Seq(tuple(map_leaves(x, leaf) for x in expr.items))
    if isinstance(expr, Choice):
        return Choice(tuple(map_leaves(x, leaf) for x in expr.items))
    if isinstance(expr, Repeat):
        return Repeat(map_leaves(expr.item, leaf), expr.min, expr.max)
    return leaf(expr)


def renamed_refs(expr: Expr, new_name: Callable[[str], str]) -> Expr:
    """``expr`` with every rule reference renamed by ``new_name``."""
    return map_leaves(expr, lambda e: RuleRef(new_name(e.name)) if isinstance(e, RuleRef) else e)


@dataclass(frozen=True)
class GrammarIR:
    """A whole grammar: rules in definition order and the name of the root rule."""

    rules: tuple[Rule, ...]
    root: str
    _index: dict = field(default=None, compare=False, hash=False, repr=False)  # type: ignore[assignment]

    def __post_init__(self) -> None:
        object.__setattr__(self, "_index", {r.name: i for i, r in enumerate(self.rules)})

    def rule(self, name: str) -> Rule:
        """Return the rule called ``name`` (KeyError if absent)."""
        return self.rules[self._index[name]]

    def has_rule(self, name: str) -> bool:
        """Whether a rule called ``name`` exists."""
        return name in self._index
