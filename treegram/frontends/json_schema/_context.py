"""The conversion context: what the JSON Schema modules use of the converter.

Every module below :mod:`._convert` receives the converter as ``conv``; this protocol is
its type there, so those modules depend on an interface instead of importing the
converter (which imports them). :class:`._convert.Converter` implements it.
"""

from __future__ import annotations

from typing import Any, Protocol

from treegram.ir import Dfa, Expr

__all__ = ["ConversionContext"]


class ConversionContext(Protocol):
    """The converter as the keyword modules see it (see :class:`._convert.Converter`)."""

    root: Any  # the root schema, every $ref in it absolute
    layout: Any  # _convert.Layout: separators, whitespace, brackets
    strict: bool
    rules: dict[str, Expr | None]
    unique_rules: set[str]  # rules whose completions one caller keeps pairwise different
    counted_rules: dict[str, int]  # rules whose string content the matcher bounds: the bound
    objects: Any  # _objects.ObjectBuilder
    nesting_limit: int
    merging: int
    merges: int  # pairs of schemas merged (the converter bounds them)
    excludes: Any  # _excludes.Exclusions: the texts no free string may contain
    # code point ranges -> their encoding in a JSON string, one object per conversion
    string_classes: dict[tuple, Expr | None]
    # (base, writable, automaton) -> its JSON string literal, one per conversion
    string_exprs: dict[tuple, Expr | None]
    # text of a key schema -> its key language, one per conversion (_objects)
    key_languages: dict[str, Dfa | None]
    widen_one_of: bool  # overlapping oneOf compiled as anyOf (the widened second try)
    expanded: list[str]  # pointers of the overlapping oneOfs expanded with negations
    widenings: int  # keywords widened so far (a widened schema is a superset of its own)

    def unsupported(self, keyword: str, ptr: str, why: str) -> None:
        """Refuse ``keyword`` at ``ptr`` (or warn and drop it when downgraded)."""

    def unknown_format(self, name: str, ptr: str) -> None:
        """A ``format`` treegram does not know: warn (an annotation) or refuse it."""

    def count(self, schema: dict, key: str, ptr: str, default: int | None = None) -> Any:
        """The count keyword ``key`` of ``schema`` as an int (``default`` when absent)."""

    def new_rule(self, base: str) -> str:
        """Reserve a fresh rule name starting with ``base``."""

    def resolve(self, ref: str, ptr: str) -> dict | bool:
        """The schema a ``$ref`` names."""

    def in_document(self, schema) -> bool:
        """Whether ``schema`` is a subschema of the documents (its identity names it)."""

    def count_merge(self, ptr: str) -> None:
        """Count one merge of two schemas at ``ptr``; past the converter's bound it stops
        the conversion (refused naming ``ptr``, or retried with overlapping ``oneOf``
        widened)."""

    def negation_ref(self, schema: dict, keyed: bool = False) -> str:
        """A ``$ref`` naming the negation of the document subschema ``schema``."""

    def negation_ready(self, ref) -> bool:
        """Whether a :meth:`negation_ref` may be resolved now (not while computed)."""

    def negation_target(self, ref) -> dict | None:
        """The subschema a :meth:`negation_ref` negates (``None``: another reference)."""

    def value(self, schema: Any, ptr: str, depth: int) -> Expr | None:
        """Grammar IR for the JSON values ``schema`` accepts (None: no value)."""

    def literal(self, value: Any, depth: int) -> Expr:
        """Grammar IR for one JSON value, in the output layout."""

    def kept_values(self, schema: dict, ptr: str) -> list:
        """The ``enum``/``const`` values that satisfy the keywords beside them."""

    def is_valid(self, schema: Any, value: Any) -> bool:
        """Whether ``value`` satisfies ``schema`` (treegram's own validator)."""

    def disjoint(self, branches: list, parent: dict | None = None) -> bool:
        """Whether the ``oneOf`` branches provably accept disjoint sets of values."""

    def bounds(self, schema: dict, ptr: str) -> Any:
        """The numeric bounds of ``schema``."""

    def merge_all_of(self, schema: Any, ptr: str) -> dict | bool:
        """``schema`` with its ``allOf`` merged into one schema."""
