"""JSON Schema frontend: a schema -> :class:`GrammarIR` (xgrammar 0.2.8 option semantics).

Options
-------
- ``any_whitespace=True``: ``[ \\n\\r\\t]*`` between tokens (at most ``max_whitespace_cnt``
  characters when given), none before or after the root value; ``indent`` and
  ``separators`` are ignored.
- ``any_whitespace=False``: exactly the layout of ``json.dumps`` with ``indent`` and
  ``separators`` (default ``(", ", ": ")`` without indent, ``(",", ": ")`` with it);
  empty containers are ``{}`` / ``[]``.
- ``strict_mode=True``: absent ``additionalProperties`` / ``unevaluatedProperties`` mean
  ``false``, and with ``prefixItems`` absent ``items`` means no further items.

Layout for fast masks: strings and numbers are inlined in the expression of their
container, which continues with the ``,`` / ``}`` / ``]`` that follows; ``$ref`` targets,
any-value schemas and large shared sub-expressions become rules.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Collection, Mapping
from dataclasses import replace
from fractions import Fraction
from itertools import permutations

from treegram._json import get_max_recursion_depth
from treegram.errors import GrammarError, UnsupportedSchemaError
from treegram.frontends.json_schema._check import check_schema_shapes
from treegram.frontends.json_schema._dfa_expr import dfa_expr
from treegram.frontends.json_schema._excludes import Exclusions, check_excludes, free_string
from treegram.frontends.json_schema._formats import REFUSED as REFUSED_FORMATS
from treegram.frontends.json_schema._fraction import fractional_range
from treegram.frontends.json_schema._idna import idn_hostname_body
from treegram.frontends.json_schema._keywords import (
    ANNOTATIONS,
    FRACTIONAL,
    NOT_MULTIPLE,
    NOT_STRING,
    PATTERNS_KEY,
    json_type,
    only_ref,
    same_value,
)
from treegram.frontends.json_schema._lex import (
    EMPTY,
    FRACTIONAL_NUMBER,
    INTEGER,
    NUMBER,
    ZERO_FRACTION,
    alt,
    decimal_range,
    int_range,
    lit,
    seq,
    string_of,
)
from treegram.frontends.json_schema._logic import NEGATION_PREFIX, negate
from treegram.frontends.json_schema._merge import merge_all_of
from treegram.frontends.json_schema._multiples import multiples_dfa
from treegram.frontends.json_schema._objects import ObjectBuilder, array_expr
from treegram.frontends.json_schema._options import JsonSchemaOptions
from treegram.frontends.json_schema._refs import RefIndex, check_remotes
from treegram.frontends.json_schema._strings import (
    any_string,
    constrained_string,
    excluded_string,
    format_body,
    length_string,
    pattern_body,
)
from treegram.frontends.json_schema._validate import UndecidedError, Validator
from treegram.ir import (
    MAX_NESTING_DEPTH,
    CharClass,
    Choice,
    Dfa,
    DfaLimitError,
    Expr,
    GrammarIR,
    Repeat,
    RuleRef,
    Seq,
    collector_paused,
    run_deep,
)

__all__ = ["UnsupportedSchemaError", "json_schema_to_ir"]

_TYPES = ("null", "boolean", "integer", "number", "string", "array", "object")
WIDEN_HINT = (
    "compile with unsupported='warn' to widen it instead: the grammar then accepts the "
    "language without it, with a warning"
)
"""The end of every refusal's message: the option that serves the schema anyway."""
_UNSUPPORTED = ("$dynamicRef", "$recursiveRef")
_DEPTH_CAP = 24


class Layout:
    """Where whitespace and separators go, by container depth."""

    def __init__(self, any_whitespace, indent, separators, max_whitespace_cnt) -> None:
        self.any_ws = bool(any_whitespace)
        self.indent = None if self.any_ws else indent
        if separators is None:
            separators = (",", ": ") if self.indent is not None else (", ", ": ")
        self.item_sep, self.key_sep = separators
        self.ws = Repeat(CharClass(((9, 10), (13, 13), (32, 32))), 0, max_whitespace_cnt)

    def depth(self, depth: int) -> int:
        """The depth that matters for layout (0 unless indenting)."""
        return min(depth, _DEPTH_CAP) if self.indent is not None else 0

    def _newline(self, depth: int) -> str:
        return "\n" + " " * (self.indent * depth)

    def open(self, depth: int) -> Expr:
        """Between the opening bracket and the first item."""
        if self.any_ws:
            return self.ws
        return lit(self._newline(depth + 1)) if self.indent is not None else EMPTY

    def comma(self, depth: int) -> Expr:
        """Between two items."""
        if self.any_ws:
            return seq(self.ws, lit(","), self.ws)
        tail = self._newline(depth + 1) if self.indent is not None else ""
        return lit(self.item_sep + tail)

    def colon(self) -> Expr:
        """Between a key and its value."""
        return seq(self.ws, lit(":"), self.ws) if self.any_ws else lit(self.key_sep)

    def close(self, depth: int, bracket: str) -> Expr:
        """After the last item, closing bracket included."""
        if self.any_ws:
            return seq(self.ws, lit(bracket))
        head = self._newline(depth) if self.indent is not None else ""
        return lit(head + bracket)

    def empty(self, brackets: str) -> Expr:
        """An empty container."""
        if self.any_ws:
            return seq(lit(brackets[0]), self.ws, lit(brackets[1]))
        return lit(brackets)


class Converter:
    """Walks one schema and collects rules; see :func:`json_schema_to_ir`."""

    def __init__(
        self,
        root: dict | bool,
        layout: Layout,
        strict: bool,
        unsupported: str,
        refs: RefIndex | None = None,
        unknown_format: str = "warn",
        canonical_integers: bool = True,
        any_order: bool = False,
        excludes: tuple[str, ...] = (),
    ):
        self.refs = refs if refs is not None else RefIndex(root)
        self.root = self.refs.root  # every $ref in it is a canonical absolute URI
        self.layout = layout
        self.strict = strict
        self.warn = downgraded_keywords(unsupported)
        self.unknown_format_policy = check_unknown_format(unknown_format)
        self.canonical_integers = canonical_integers
        self.any_order = any_order
        self.rules: dict[str, Expr | None] = {}
        self.unique_rules: set[str] = set()  # see _arrays.unique_strings_expr
        self.counted_rules: dict[str, int] = {}  # see _dfa_expr.bounded_string_expr
        self._next_suffix: dict[str, int] = {}  # base -> first suffix not tried (rules only grow)
        self.ref_names: dict[tuple[str | tuple, int], str] = {}
        self.objects = ObjectBuilder(self)
        self.nesting = 0  # value() calls in progress: nested schemas and $ref chains
        self.nesting_limit = MAX_NESTING_DEPTH  # lower on the caller's own stack
        self.merging = 0  # merge_all_of calls in progress
        self.string_classes: dict[tuple, Expr | None] = {}  # see dfa_string_expr
        self.string_exprs: dict[tuple, Expr | None] = {}  # see dfa_string_expr
        self.key_languages: dict[str, Dfa | None] = {}  # see _objects._key_language
        # ("format", name) or ("pattern", text) -> the JSON string literal, one per
        # conversion (see _string)
        self._string_literals: dict[tuple[str, str], Expr] = {}
        self._validator: Validator | None = None
        self.excludes = Exclusions(self, excludes)
        self._doc_ids: dict[int, dict] = {}
        self._doc_nodes = -1  # len(refs.nodes) when _doc_ids was built
        self._derived: list = []  # derived schemas named by _fingerprint
        self.fingerprint_left = _FINGERPRINT_BUDGET  # parts _fingerprint may still visit
        self.work = 0  # value() calls: bounded by MAX_SUBSCHEMAS
        self.merges = 0  # pairs of schemas merged: bounded by MAX_MERGES
        self.widen_one_of = False  # overlapping oneOf as anyOf (a second, widened try)
        self.expanded: list[str] = []  # pointers of the overlapping oneOfs expanded
        self.widenings = 0  # keywords widened so far (unsupported downgraded to a warning)
        self._negations: dict[str, object] = {}
        self._negation_names: dict[tuple, str] = {}  # (id of the subschema, keyed): ref
        self._negation_targets: dict[str, dict] = {}
        self._negation_keyed: dict[str, bool] = {}  # ref: negated with negate's keyed

    # -- errors -------------------------------------------------------------------------
    def downgraded(self, keyword: str) -> bool:
        """Whether a refusal of ``keyword`` is downgraded to a warning (widened)."""
        return self.warn is True or keyword in self.warn

    def unsupported(self, keyword: str, ptr: str, why: str) -> None:
        """Raise :class:`UnsupportedSchemaError`, or warn when downgraded."""
        where = ptr or "#"
        if not self.downgraded(keyword):
            raise UnsupportedSchemaError(
                f"unsupported JSON Schema keyword {keyword!r} at {where}: {why} ({WIDEN_HINT})"
            )
        self.widenings += 1
        warnings.warn(
            f"JSON Schema keyword {keyword!r} at {where} widened (constraint dropped): {why}; "
            "the grammar accepts every value the schema accepts, and some it rejects",
            stacklevel=4,
        )

    def unknown_format(self, name: str, ptr: str) -> None:
        """Handle a ``format`` that treegram does not know: JSON Schema 2020-12 makes it an
        annotation (warn and assert nothing), or refuse it as an unsupported keyword."""
        if self.unknown_format_policy == "error":
            self.unsupported("format", ptr, f"unknown format ({name!r})")
        elif self.unknown_format_policy == "warn":
            warnings.warn(
                f"unknown JSON Schema format {name!r} at {ptr or '#'} is an annotation: "
                "the string is not constrained by it",
                stacklevel=4,
            )

    def count(self, schema: dict, key: str, ptr: str, default: int | None = None):
        """The count keyword ``key`` (``minLength``, ``maxItems``...) as an ``int``.

        JSON Schema allows a number with a zero fractional part (``2.0``) here; anything
        else (negative, fractional, not a number) makes the schema malformed.
        """
        v = schema.get(key, default)
        if v is None:
            return None
        if isinstance(v, float) and v.is_integer():
            v = int(v)
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise GrammarError(
                f"{key} at {ptr or '#'}/{key} must be a non-negative integer, got {v!r}"
            )
        return v

    def merge_all_of(self, schema, ptr: str) -> dict | bool:
        """``schema`` with its ``allOf`` (and ``$ref`` with siblings) merged into one.

        The negation of :mod:`._logic` merges, and merging expands the boolean keywords
        of :mod:`._logic`; the converter ties the two together so neither module imports
        the other.
        """
        return merge_all_of(self, schema, ptr)

    # -- rules --------------------------------------------------------------------------
    def new_rule(self, base: str) -> str:
        """Reserve a fresh rule name."""
        k = self._next_suffix.get(base, 0)
        name = base if k == 0 else f"{base}_{k}"
        while name in self.rules:
            k += 1
            name = f"{base}_{k}"
        self._next_suffix[base] = k + 1
        self.rules[name] = None
        return name

    def any_value(self, depth: int) -> Expr:
        """Any JSON value (a rule per layout depth)."""
        return self.ref_rule("#any", {}, depth, self._any_body)

    def _any_body(self, _schema, depth: int) -> Expr:
        lay = self.layout
        inner = self.any_value(depth + 1)
        text = self.excludes.any_string(any_string())
        obj = self.objects.homogeneous("{}", seq(text, lay.colon(), inner), 0, None, depth)
        arr = self.objects.homogeneous("[]", inner, 0, None, depth)
        return alt(lit("null"), lit("true"), lit("false"), NUMBER, text, obj, arr)

    def ref_rule(
        self, key: str | tuple, schema, depth: int, body_fn, base: str | None = None
    ) -> Expr:
        """A rule for ``schema`` at ``depth``, created once; recursion is allowed."""
        d = self.layout.depth(depth)
        name = self.ref_names.get((key, d))
        if name is None:
            name = self.new_rule((base or _rule_base(key)) + (f"_d{d}" if d else ""))
            self.ref_names[(key, d)] = name
            body = body_fn(schema, d)
            self.rules[name] = body if body is not None else _NOTHING
        return RuleRef(name)

    def in_document(self, schema) -> bool:
        """Whether ``schema`` is a subschema of the (rewritten) documents, so that its
        identity names it for the whole conversion."""
        if not isinstance(schema, dict):
            return False
        nodes = self.refs.nodes
        if self._doc_nodes != len(nodes):  # RefIndex.schema may add nodes
            # counted apart: boolean nodes and a subschema named by several pointers make
            # the table shorter than the nodes, which rebuilt it on every call
            self._doc_ids = {id(n): n for n in nodes.values() if isinstance(n, dict)}
            self._doc_nodes = len(nodes)
        return id(schema) in self._doc_ids

    def count_merge(self, ptr: str) -> None:
        """Count one merge of two schemas; past :data:`MAX_MERGES` stop the conversion.

        Checked at each merge, not only at each :meth:`value`: one value's ``allOf``
        with negations beside it can merge thousands of pairs before the next value."""
        self.merges += 1
        if self.merges > MAX_MERGES:
            raise _BudgetExceeded(ptr, "merges")

    def negation_ref(self, schema: dict, keyed: bool = False) -> str:
        """A ``$ref`` naming the negation of the document subschema ``schema``, computed
        when first resolved: a negated recursive schema stays a recursion."""
        # numbered in order of first use (not by id(), which differs run to run): the
        # grammar's rule names, and so its text and cache entries, are reproducible
        ref = self._negation_names.setdefault(
            (id(schema), keyed), f"{NEGATION_PREFIX}{len(self._negation_names)}"
        )
        self._negations.setdefault(ref, schema)
        self._negation_targets[ref] = schema
        self._negation_keyed[ref] = keyed
        return ref

    def negation_ready(self, ref) -> bool:
        """Whether the negation :meth:`negation_ref` named ``ref`` may be resolved now
        (not while it is being computed: it would depend on itself)."""
        return isinstance(ref, str) and self._negations.get(ref) != (None,)

    def negation_target(self, ref) -> dict | None:
        """The document subschema a :meth:`negation_ref` negates (``None``: another ref)."""
        return self._negation_targets.get(ref) if isinstance(ref, str) else None

    def resolve(self, ref: str, ptr: str) -> dict | bool:
        """The schema a (canonical, absolute) ``$ref`` points to."""
        if isinstance(ref, str) and ref in self._negations:
            target = self._negations[ref]
            if isinstance(target, tuple):  # computed already, or in progress (None)
                if target[0] is None:
                    self.unsupported("not", ptr, "a negation that depends on itself")
                    return True
                return target[0]
            self._negations[ref] = (None,)
            out = negate(self, target, ptr, keyed=self._negation_keyed.get(ref, False))
            self._negations[ref] = (out,)
            return out
        node = self.refs.schema(ref) if isinstance(ref, str) else None
        if node is None:
            self.unsupported(
                "$ref",
                f"{ptr}/$ref",
                f"{ref!r} does not resolve (a document "
                "outside the schema must be given in remote_schemas)",
            )
            return True
        return node

    def is_valid(self, schema, value) -> bool:
        """Whether ``value`` satisfies a subschema of this compilation (treegram's own
        validator: the answer never depends on an optional package).

        Raises
        ------
        UndecidedError
            A keyword whose answer depends on annotations (``unevaluated*``).
        """
        if self._validator is None:
            self._validator = Validator(self)
        return self._validator.is_valid(schema, value)

    # -- values -------------------------------------------------------------------------
    def value(self, schema, ptr: str, depth: int) -> Expr | None:
        """The encoded values that satisfy ``schema`` (``None`` when none do).

        Raises :class:`GrammarError` past ``MAX_NESTING_DEPTH`` nested schemas (each
        object, array, combinator branch or ``$ref`` followed counts one level)."""
        self.work += 1
        if self.work > MAX_SUBSCHEMAS:
            raise _BudgetExceeded(ptr)
        if self.nesting >= self.nesting_limit:
            if self.nesting_limit < MAX_NESTING_DEPTH:
                raise _NeedsDeepStack
            if self.expanded and not self.widen_one_of:
                # likely a recursion through an overlapping oneOf's derived schemas that
                # never closes: refused as that oneOf (or retried with it widened)
                raise _BudgetExceeded(ptr, "nesting")
            where = ptr if len(ptr) <= 80 else "..." + ptr[-77:]
            raise GrammarError(
                f"schema at {where or '#'} is nested deeper than "
                f"MAX_NESTING_DEPTH={MAX_NESTING_DEPTH} levels (nested "
                "schemas and $ref chains)"
            )
        self.nesting += 1
        try:
            return self._value(schema, ptr, depth)
        finally:
            self.nesting -= 1

    def _value(self, schema, ptr: str, depth: int) -> Expr | None:
        if schema is True or schema == {}:
            return self.any_value(depth)
        if schema is False:
            return None
        if not isinstance(schema, dict):
            raise UnsupportedSchemaError(f"schema at {ptr or '#'} is not an object or boolean")
        if "$ref" in schema and only_ref(schema):
            ref = schema["$ref"]
            return self.ref_rule(
                ref,
                ref,
                depth,
                lambda r, d: self.value(self.resolve(r, ptr), self.refs.display(r), d),
            )
        if _may_recurse(schema) and self.in_document(schema):
            # merged once into one rule: a recursion through allOf, a $ref with siblings
            # or a branch that refers stays a recursion instead of being inlined level
            # after level
            return self.ref_rule(
                f"#merged/{id(schema)}",
                schema,
                depth,
                lambda s, d: self._merged_value(s, ptr, d),
                base="merged",
            )
        if _may_recurse(schema):
            key = _fingerprint(self, schema)
            if key is not None:
                # a derived schema (a merge, a negation's part) met again, equal part for
                # part (document subschemas by identity): one rule, so a recursion through
                # derived schemas (a oneOf branch negated inside its own member) closes
                # instead of being inlined level after level until the budget runs out
                self._derived.append(schema)  # keeps the identities in the key alive
                ref = self.ref_rule(
                    ("#derived", key),
                    schema,
                    depth,
                    lambda s, d: self._merged_value(s, ptr, d),
                    base="merged",
                )
                # no value: said so, as the inlined schema would (the parent prunes it, and
                # a schema that admits nothing is refused as such)
                return None if self.rules.get(ref.name) is _NOTHING else ref
        return self._merged_value(schema, ptr, depth)

    def _merged_value(self, schema: dict, ptr: str, depth: int) -> Expr | None:
        schema = merge_all_of(self, schema, ptr)
        if schema is False:
            return None
        if schema is True or schema == {}:
            return self.any_value(depth)
        if "$ref" in schema:
            return self.value(schema, ptr, depth)
        for key in _UNSUPPORTED:
            if key in schema:
                self.unsupported(key, f"{ptr}/{key}", "not supported")
        if "anyOf" in schema or "oneOf" in schema:
            return self._branches(schema, ptr, depth)
        if "enum" in schema or "const" in schema:
            return self._literals(schema, ptr, depth)
        return self._typed(schema, ptr, depth)

    def _branches(self, schema: dict, ptr: str, depth: int) -> Expr | None:
        key = "anyOf" if "anyOf" in schema else "oneOf"
        rest = {k: v for k, v in schema.items() if k != key}
        branches = schema[key]
        parts = []
        for i, branch in enumerate(branches):
            # rest is the base: its unevaluated* keywords see the branch's members
            merged = {**rest, "allOf": [branch]} if rest else branch
            parts.append(self.value(merged, f"{ptr}/{key}/{i}", depth))
        return alt(*parts)

    def _literals(self, schema: dict, ptr: str, depth: int) -> Expr | None:
        return alt(*(self.literal(v, depth) for v in self.kept_values(schema, ptr)))

    def kept_values(self, schema: dict, ptr: str) -> list:
        """The ``const``/``enum`` values of ``schema`` that satisfy its other keywords."""
        values = [schema["const"]] if "const" in schema else list(schema["enum"])
        if "const" in schema and "enum" in schema:
            values = [v for v in values if any(same_value(v, e) for e in schema["enum"])]
        rest = {k: v for k, v in schema.items() if k not in ("enum", "const")}
        return [
            v
            for v in values
            if _valid(rest, v, self, ptr)
            and not (isinstance(v, str) and excluded_string(self, rest, v))
            and not (rest.get(FRACTIONAL) and json_type(v) != "number")
        ]

    def literal(self, value, depth: int) -> Expr | None:
        """Every encoding of the JSON value ``value`` in this layout (``None``: a string
        in it can only be written with an excluded text)."""
        lay = self.layout
        if isinstance(value, str):
            return self.excludes.literal(value)
        if isinstance(value, dict):
            if not value:
                return lay.empty("{}")
            items = [
                seq(self.excludes.literal(k), lay.colon(), self.literal(v, depth + 1))
                for k, v in value.items()
            ]
            if None in items:
                return None
            if len(items) > _ANY_ORDER_MEMBERS:
                return self._container("{}", items, depth)
            # a JSON object has no order: a small constant in every order of its members
            # (the member expressions are shared, only the sequences differ)
            return alt(*(self._container("{}", list(p), depth) for p in permutations(items)))
        if isinstance(value, list):
            if not value:
                return lay.empty("[]")
            items = [self.literal(v, depth + 1) for v in value]
            return None if None in items else self._container("[]", items, depth)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            # every plain spelling of the same value: 1 and 1.0 are equal in JSON Schema
            return decimal_range(value, False, value, False)
        return lit(json.dumps(value))

    def _container(self, brackets: str, items: list, depth: int) -> Expr:
        lay = self.layout
        out = [lit(brackets[0]), lay.open(depth), items[0]]
        for it in items[1:]:
            out += [lay.comma(depth), it]
        out.append(lay.close(depth, brackets[1]))
        return seq(*out)

    def _typed(self, schema: dict, ptr: str, depth: int) -> Expr | None:
        types = _types(self, schema, ptr)
        if schema.get(FRACTIONAL):
            types = [t for t in types if t != "integer"]
        parts = []
        for t in types:
            if t == "null":
                parts.append(lit("null"))
            elif t == "boolean":
                parts.append(alt(lit("true"), lit("false")))
            elif t == "integer":
                parts.append(self._integer(schema, ptr, canonical=self.canonical_integers))
            elif t == "number":
                parts.append(self._number(schema, ptr))
            elif t == "string":
                parts.append(self._string(schema, ptr))
            elif t == "array":
                parts.append(array_expr(self, schema, ptr, depth))
            else:
                parts.append(self.objects.object_expr(schema, ptr, depth))
        return alt(*parts)

    # -- scalars ------------------------------------------------------------------------
    def disjoint(self, branches: list, parent: dict | None = None) -> bool:
        """Whether ``oneOf`` branches provably accept disjoint sets of values (inside
        ``parent``'s ``type`` and ``required``)."""
        from treegram.frontends.json_schema._disjoint import disjoint

        return disjoint(self, branches, parent)

    def bounds(self, schema: dict, ptr: str):
        """``(lo, lo_strict, hi, hi_strict)`` of the numeric keywords of ``schema``."""
        lo, lo_s, hi, hi_s = schema.get("minimum"), False, schema.get("maximum"), False
        for key, strict_val in (("exclusiveMinimum", True), ("exclusiveMaximum", False)):
            v = schema.get(key)
            if isinstance(v, bool):  # draft 4 form
                if v:
                    if strict_val:
                        lo_s = True
                    else:
                        hi_s = True
            elif v is not None:
                if strict_val and (lo is None or v >= lo):
                    lo, lo_s = v, True
                elif not strict_val and (hi is None or v <= hi):
                    hi, hi_s = v, True
        for key, v in (("minimum", lo), ("maximum", hi)):
            if v is not None and (
                not isinstance(v, (int, float)) or v != v or v in (float("inf"), float("-inf"))
            ):
                raise UnsupportedSchemaError(f"{key} at {ptr or '#'} must be a finite number")
        return lo, lo_s, hi, hi_s

    def _integer(self, schema: dict, ptr: str, canonical: bool = False) -> Expr | None:
        """Integers under ``schema``'s bounds and ``multipleOf``; ``canonical`` writes them
        only without a fraction (``63``, never ``63.0``)."""
        import math

        lo, lo_s, hi, hi_s = self.bounds(schema, ptr)
        ilo = None if lo is None else (math.floor(lo) + 1 if lo_s else math.ceil(lo))
        ihi = None if hi is None else (math.ceil(hi) - 1 if hi_s else math.floor(hi))
        mult = schema.get("multipleOf")
        if schema.get(NOT_MULTIPLE):
            # an integer is a multiple of p/q (lowest terms) exactly when it is one of p
            def numerator(m) -> int:
                return Fraction(m if isinstance(m, int) else str(m)).numerator

            mults = [] if mult is None else [mult]
            for m in (*mults, *schema[NOT_MULTIPLE]):  # checked before numerator() reads it
                if isinstance(m, bool) or not isinstance(m, (int, float)) or not m > 0:
                    raise GrammarError(f"multipleOf at {ptr or '#'} must be a positive number")
            digits = self._multiples(
                INTEGER if ilo is None and ihi is None else int_range(ilo, ihi),
                [numerator(m) for m in mults],
                [numerator(m) for m in schema[NOT_MULTIPLE]],
                ptr,
            )
        elif mult is not None:
            digits = self._multiple(mult, ilo, ihi, ptr)
        elif ilo is None and ihi is None:
            digits = INTEGER
        else:
            digits = int_range(ilo, ihi)
        if digits is None or canonical:
            return digits
        # "a float with zero fractional part is an integer": 1.0 and 1.00 are integers too
        return seq(digits, ZERO_FRACTION)

    def _multiple(self, mult, lo, hi, ptr: str) -> Expr | None:
        if isinstance(mult, (int, float)) and not isinstance(mult, bool) and mult > 0:
            # An integer is a multiple of p/q (lowest terms) exactly when it is one of p.
            mult = Fraction(str(mult)).numerator
        if not isinstance(mult, int) or mult <= 0:
            self.unsupported("multipleOf", f"{ptr}/multipleOf", "only positive integers")
            return int_range(lo, hi)
        if lo is not None and hi is not None:
            first = -(-lo // mult) * mult
            count = (hi - first) // mult + 1 if hi >= first else 0
            if count <= 4096:
                return alt(*(lit(str(v)) for v in range(first, hi + 1, mult)))
        if lo is None and hi is None and mult <= 1024:
            return self._mod_rules(mult)
        # the range's digits intersected with the remainders of the digits read
        try:
            d = Dfa.from_expr(int_range(lo, hi)).intersect(multiples_dfa(mult))
            return dfa_expr(self, d.minimize(), "multiple", CharClass)
        except DfaLimitError as exc:
            why = f"multiples of {mult} in the range: {exc}"
        self.unsupported("multipleOf", f"{ptr}/multipleOf", why)
        return int_range(lo, hi)

    def _mod_rules(self, k: int) -> Expr:
        """Integers divisible by ``k``: one rule per remainder of the digits read so far."""
        names = [self.new_rule(f"mult{k}_r{r}") for r in range(k)]
        for r in range(k):
            by_target: dict[int, list[int]] = {}
            for d in range(10):
                by_target.setdefault((10 * r + d) % k, []).append(d)
            parts = [EMPTY] if r == 0 else []
            for t, ds in by_target.items():
                parts.append(seq(CharClass(_digit_ranges(ds)), RuleRef(names[t])))
            self.rules[names[r]] = alt(*parts)
        nonzero = [
            seq(CharClass(((0x30 + d, 0x30 + d),)), RuleRef(names[d % k])) for d in range(1, 10)
        ]
        mag = alt(*nonzero)
        return alt(lit("0"), mag, seq(lit("-"), mag))

    def _number(self, schema: dict, ptr: str) -> Expr | None:
        lo, lo_s, hi, hi_s = self.bounds(schema, ptr)
        mult = schema.get("multipleOf")
        nots = schema.get(NOT_MULTIPLE, ())
        fractional = bool(schema.get(FRACTIONAL))
        integral = (
            isinstance(mult, (int, float))
            and not isinstance(mult, bool)
            and mult > 0
            and float(mult).is_integer()
        )
        if integral and not fractional and not nots:
            # written as integers (a number with a zero fraction is one too)
            return self._integer({**schema, "multipleOf": int(mult)}, ptr)
        if fractional:
            base = FRACTIONAL_NUMBER if lo is None and hi is None else None
            base = base or fractional_range(lo, lo_s, hi, hi_s)
        elif mult is not None or nots:
            base = decimal_range(lo, lo_s, hi, hi_s)  # no exponent: its digits are read
        elif lo is None and hi is None:
            return NUMBER
        else:
            return decimal_range(lo, lo_s, hi, hi_s)
        if mult is None and not nots:
            return base
        return self._multiples(base, [] if mult is None else [mult], list(nots), ptr)

    def _multiples(self, base: Expr | None, mults: list, nots: list, ptr: str) -> Expr | None:
        """The numerals of ``base`` (no exponent) that are multiples of every value of
        ``mults`` and of none of ``nots``, through a code point automaton
        (:mod:`._multiples`); past its size limit the keyword is unsupported (widened:
        ``base`` itself)."""
        if base is None:
            return None
        for m in (*mults, *nots):
            if isinstance(m, bool) or not isinstance(m, (int, float)) or not m > 0:
                raise GrammarError(f"multipleOf at {ptr or '#'} must be a positive number")
        try:
            d = Dfa.from_expr(base)
            for m in mults:
                d = d.intersect(multiples_dfa(m))
            for m in nots:
                d = d.difference(multiples_dfa(m))
            return dfa_expr(self, d.minimize(), "multiple", CharClass)
        except DfaLimitError as exc:
            keyword = "multipleOf" if mults else "not"
            self.unsupported(keyword, f"{ptr}/multipleOf", str(exc))
            return base

    def _string(self, schema: dict, ptr: str) -> Expr | None:
        if NOT_STRING in schema:
            return constrained_string(self, schema, ptr)
        lo = self.count(schema, "minLength", ptr, 0)
        hi = self.count(schema, "maxLength", ptr)
        has_len = lo > 0 or hi is not None
        fmt, pattern = schema.get("format"), schema.get("pattern")
        if self.excludes and free_string(schema):
            return self._excluded_string(lo, hi, fmt, ptr)
        regular = (pattern is not None) + (fmt is not None) + len(schema.get(PATTERNS_KEY, ()))
        if regular > 1 or (regular and has_len):
            return constrained_string(self, schema, ptr)  # an intersection: a code point DFA
        body = None
        if fmt == "regex":  # context-free: a rule of its own (see _regex_format)
            body = self.ref_rule(
                "#format/regex", None, 0, lambda _s, _d: self._regex_format(), base="regex_format"
            )
        elif fmt == "idn-hostname":  # IDNA 2008: U-label automata as rules, made once
            body = self.ref_rule(
                "#format/idn-hostname",
                None,
                0,
                lambda _s, _d: idn_hostname_body(self),
                base="idn_hostname",
            )
        elif fmt is not None:
            got = self._string_literals.get(("format", fmt))
            if got is not None:
                return got
            body = format_body(fmt)
            if body is None and fmt in REFUSED_FORMATS:  # never drop a constraint silently
                why = REFUSED_FORMATS[fmt]
                self.unsupported("format", f"{ptr}/format", f"{why} ({fmt!r})")
            elif body is None:
                self.unknown_format(fmt, f"{ptr}/format")
            else:  # no pattern beside it (an intersection went through the automaton)
                got = self._string_literals[("format", fmt)] = string_of(body)
                return got
        if pattern is not None:
            got = self._string_literals.get(("pattern", pattern))
            if got is not None:
                return got
            try:
                body = pattern_body(pattern)
            except (ImportError, ValueError):
                # anchors or lookaheads a plain expression cannot hold: through the
                # pattern's automaton (which refuses, or widens, what it cannot compile)
                return constrained_string(self, schema, ptr)
            if body is not None:
                got = self._string_literals[("pattern", pattern)] = string_of(body)
                return got
        if body is None:
            return length_string(lo, hi)
        return string_of(body)

    def _regex_format(self) -> Expr:
        from treegram.frontends.json_schema._regex_format import regex_format_body

        def rule(base: str, build) -> RuleRef:
            name = self.new_rule(base)
            ref = RuleRef(name)
            self.rules[name] = build(ref)
            return ref

        return regex_format_body(rule)

    def _excluded_string(self, lo: int, hi: int | None, fmt, ptr: str) -> Expr | None:
        """A string the schema leaves free (lengths, a format without a language) when
        texts are excluded: exact, or, past the automaton limit, without the lengths
        (as an unsupported keyword: refused unless downgraded)."""
        if fmt is not None:
            if fmt in REFUSED_FORMATS:
                self.unsupported("format", f"{ptr}/format", f"{REFUSED_FORMATS[fmt]} ({fmt!r})")
            else:
                self.unknown_format(fmt, f"{ptr}/format")
        if hi is not None and hi < lo:
            return None
        if lo == 0 and hi is None:
            return self.excludes.any_string(any_string())
        try:
            return self.excludes.bounded_string(lo, hi)
        except DfaLimitError as exc:
            keyword = "maxLength" if hi is not None else "minLength"
            self.unsupported(keyword, f"{ptr}/{keyword}", f"length bounds with excludes: {exc}")
            return self.excludes.any_string(any_string())


_NOTHING = Choice((Seq((CharClass(((0, 0x10FFFF),), negated=True),)),))


def _may_recurse(schema: dict) -> bool:
    """Whether converting ``schema`` merges a reference into new schemas (``allOf``, a
    ``$ref`` with siblings, ``anyOf`` / ``oneOf`` with a branch that refers)."""
    if "allOf" in schema or "$ref" in schema:
        return True
    for key in ("anyOf", "oneOf"):
        branches = schema.get(key)
        if isinstance(branches, list) and any(
            isinstance(b, dict) and "$ref" in b for b in branches
        ):
            return len(schema) > 1  # beside other keywords: each branch is merged
    return False


_MAX_FINGERPRINT = 500
"""Parts of a derived schema :func:`_fingerprint` takes apart (larger ones: no key)."""
_FINGERPRINT_BUDGET = 100_000
"""Parts :func:`_fingerprint` visits in one conversion, all keys together: past it derived
schemas are inlined (as without keys), so the keys never cost more than a bounded share
of a compile."""


def _fingerprint(conv, schema):
    """A hashable key equal for derived schemas equal part for part (document subschemas
    and any other object by identity, scalars with their type: ``1``, ``1.0`` and ``True``
    differ), or ``None`` past :data:`_MAX_FINGERPRINT` parts."""
    budget = [_MAX_FINGERPRINT]

    def walk(node):
        budget[0] -= 1
        if budget[0] < 0:
            raise OverflowError
        if isinstance(node, dict):
            if conv.in_document(node):
                return ("@", id(node))
            return ("{", tuple((k, walk(v)) for k, v in sorted(node.items())))
        if isinstance(node, list | tuple):
            return ("[", tuple(walk(v) for v in node))
        if node is None or isinstance(node, bool | int | float | str):
            return (type(node).__name__, node)
        return ("#", id(node))

    if conv.fingerprint_left <= 0:
        return None
    try:
        return walk(schema)
    except (OverflowError, TypeError):
        return None
    finally:
        conv.fingerprint_left -= _MAX_FINGERPRINT - budget[0]


def _rule_base(key: str) -> str:
    key = key.rsplit("#", 1)[-1] if key != "#any" else key  # the pointer names the rule
    text = "".join(c if c.isalnum() else "_" for c in key.lstrip("#/")) or "root_ref"
    return "ref_" + text.strip("_")[:40] if key != "#any" else "any_value"


def _digit_ranges(ds: list[int]) -> tuple[tuple[int, int], ...]:
    out: list[list[int]] = []
    for d in sorted(ds):
        if out and out[-1][1] == 0x30 + d - 1:
            out[-1][1] = 0x30 + d
        else:
            out.append([0x30 + d, 0x30 + d])
    return tuple((a, b) for a, b in out)


def _types(conv: Converter, schema: dict, ptr: str) -> list[str]:
    t = schema.get("type")
    types = list(_TYPES) if t is None else ([t] if isinstance(t, str) else list(t))
    for x in types:
        if x not in _TYPES:
            raise UnsupportedSchemaError(f"unknown type {x!r} at {ptr or '#'}/type")
    if schema.get("nullable") and "null" not in types:
        types.append("null")
    if "number" in types and "integer" in types:
        types.remove("integer")
    return types


def _valid(rest: dict, value, conv: Converter, ptr: str) -> bool:
    """Whether ``value`` satisfies the keywords next to ``enum``/``const``."""
    checks = {k: v for k, v in rest.items() if k not in ANNOTATIONS}
    if not checks:
        return True
    try:
        # an unresolvable $ref raises UnsupportedSchemaError: never dropped silently
        return conv.is_valid(checks, value)
    except UndecidedError:  # e.g. unevaluatedProperties: keep the value
        return True


def downgraded_keywords(unsupported) -> bool | frozenset[str]:
    """The ``unsupported`` option as ``True`` (every keyword warns) or the set of keywords
    that warn instead of raising (empty for ``"error"``).

    Raises
    ------
    GrammarError
        Neither ``"error"``, ``"warn"`` nor a collection of keyword names.
    """
    if unsupported == "error":
        return frozenset()
    if unsupported == "warn":
        return True
    if isinstance(unsupported, (list, tuple, set, frozenset)) and all(
        isinstance(k, str) and k for k in unsupported
    ):
        return frozenset(unsupported)
    raise GrammarError(
        f"unsupported must be 'error', 'warn' or a collection of keyword names, got {unsupported!r}"
    )


UNKNOWN_FORMAT_POLICIES = ("warn", "ignore", "error")


def check_unknown_format(unknown_format) -> str:
    """The ``unknown_format`` option, validated.

    Raises
    ------
    GrammarError
        Not one of ``"warn"``, ``"ignore"`` or ``"error"``.
    """
    if not isinstance(unknown_format, str) or unknown_format not in UNKNOWN_FORMAT_POLICIES:
        raise GrammarError(
            f"unknown_format must be 'warn', 'ignore' or 'error', got {unknown_format!r}"
        )
    return unknown_format


def _load(schema) -> dict | bool:
    if isinstance(schema, str):
        try:
            return json.loads(schema)
        except RecursionError:  # json's C parser nests per level
            return run_deep(_load, schema)
        except ValueError as exc:  # JSONDecodeError, or Python's int-digit limit
            raise GrammarError(f"schema is not valid JSON: {exc}") from None
    if isinstance(schema, (dict, bool)):
        return schema
    if isinstance(schema, type) and hasattr(schema, "model_json_schema"):
        return schema.model_json_schema()
    raise GrammarError(
        f"schema must be a JSON string, a dict or a pydantic model class, "
        f"got {type(schema).__name__}"
    )


# A schema within these bounds compiles on the caller's stack; beyond them on run_deep's.
_SHALLOW_JSON_DEPTH = 24
_SHALLOW_REFS = 16
_SHALLOW_MAGNITUDE = 40  # decimal digits / exponent of numbers (digit-wise range rules)
_SHALLOW_NESTING = 60  # value() levels on the caller's stack (a few frames each)


def _scan(root, what: str) -> bool:
    """Check the parsed schema for values no compilation can handle, without recursion,
    and tell whether compiling it may recurse deeply.

    Raises
    ------
    GrammarError
        An integer too long for Python's int-to-text conversion, or a schema nested
        deeper than ``MAX_NESTING_DEPTH`` (JSON levels, counted loosely: two per object
        level of ``properties``) or than ``get_max_recursion_depth()`` JSON levels.
    """
    deep = False
    refs = 0
    limit = get_max_recursion_depth()
    stack = [(root, 0, "")]
    while stack:
        node, depth, ptr = stack.pop()
        if depth > _SHALLOW_JSON_DEPTH:
            deep = True
        if depth > limit:
            where = ptr if len(ptr) <= 80 else "..." + ptr[-77:]
            raise GrammarError(
                f"{what}: Maximum recursion depth exceeded: nested deeper than "
                f"max_recursion_depth={limit} JSON levels at {where}"
            )
        if depth > 3 * MAX_NESTING_DEPTH:
            where = ptr if len(ptr) <= 80 else "..." + ptr[-77:]
            raise GrammarError(
                f"{what} nested deeper than {3 * MAX_NESTING_DEPTH} JSON "
                f"levels at {where} (MAX_NESTING_DEPTH="
                f"{MAX_NESTING_DEPTH} schema levels)"
            )
        if isinstance(node, dict):
            refs += "$ref" in node
            stack.extend((v, depth + 1, f"{ptr}/{k}") for k, v in node.items())
        elif isinstance(node, list):
            stack.extend((v, depth + 1, f"{ptr}/{i}") for i, v in enumerate(node))
        elif isinstance(node, int) and not isinstance(node, bool):
            if node.bit_length() > 3 * _SHALLOW_MAGNITUDE:
                deep = True
                try:
                    str(node)
                except ValueError:
                    raise GrammarError(
                        f"{what}: the integer at {ptr or '#'} has more digits than Python "
                        f"converts ({node.bit_length()} bits)"
                    ) from None
        elif (
            isinstance(node, float)
            and node != 0
            and not (10.0**-_SHALLOW_MAGNITUDE < abs(node) < 10.0**_SHALLOW_MAGNITUDE)
        ):
            deep = True
    return deep or refs > _SHALLOW_REFS


def checked_options(**options) -> JsonSchemaOptions:
    """The options of one conversion (``json_schema_to_ir``'s keyword arguments but
    ``excludes``), validated, with ``remote_schemas`` normalized: what both
    ``json_schema_to_ir`` and the compiler's cache key are made of.

    Raises
    ------
    GrammarError
        An option has a value it cannot take (the message names it).
    """
    o = JsonSchemaOptions(**options)
    downgraded_keywords(o.unsupported)
    check_unknown_format(o.unknown_format)
    for flag in ("canonical_integers", "any_order", "format_assertion"):
        if not isinstance(getattr(o, flag), bool):
            raise GrammarError(f"{flag} must be a bool, got {getattr(o, flag)!r}")
    if o.max_whitespace_cnt is not None and (
        not isinstance(o.max_whitespace_cnt, int) or o.max_whitespace_cnt <= 0
    ):
        raise GrammarError(
            f"max_whitespace_cnt must be a positive integer, got {o.max_whitespace_cnt!r}"
        )
    if o.indent is not None and (not isinstance(o.indent, int) or o.indent < 0):
        raise GrammarError(f"indent must be a non-negative integer, got {o.indent!r}")
    return replace(o, remote_schemas=check_remotes(o.remote_schemas))


def json_schema_to_ir(
    schema,
    *,
    any_whitespace: bool = True,
    indent: int | None = None,
    separators: tuple[str, str] | None = None,
    strict_mode: bool = True,
    max_whitespace_cnt: int | None = None,
    unsupported: str | Collection[str] = "error",
    unknown_format: str = "warn",
    format_assertion: bool = True,
    canonical_integers: bool = True,
    remote_schemas: Mapping[str, dict | bool] | None = None,
    any_order: bool = False,
    excludes: Collection[str] = (),
) -> GrammarIR:
    """Compile a JSON Schema to grammar IR.

    Parameters
    ----------
    schema : str, dict, bool or pydantic model class
        The schema (JSON text, a parsed schema, or a class with ``model_json_schema``).
    any_whitespace : bool, default True
        Allow ``[ \\n\\r\\t]*`` between tokens; ``indent`` and ``separators`` are ignored.
    indent : int or None
        With ``any_whitespace=False``: ``json.dumps``-style indentation.
    separators : (str, str) or None
        With ``any_whitespace=False``: item and key separators; default ``(", ", ": ")``,
        or ``(",", ": ")`` with ``indent``.
    strict_mode : bool, default True
        Absent ``additionalProperties`` / ``unevaluatedProperties`` mean ``false`` and
        absent ``items`` after ``prefixItems`` means no further items.
    max_whitespace_cnt : int or None
        With ``any_whitespace``: at most this many whitespace characters in a row.
    unsupported : "error", "warn" or collection of str, default "error"
        The widening option. ``"warn"`` serves a schema with a keyword treegram cannot
        compile exactly by widening that keyword to the language without it, with a
        warning naming the keyword and its JSON pointer; the grammar never rejects a
        valid instance. A collection of keyword names (for example
        ``{"uniqueItems", "format"}``) does so for those keywords only. ``"error"``
        refuses with :class:`UnsupportedSchemaError`, whose message names this option.
    unknown_format : "warn", "ignore" or "error", default "warn"
        A ``format`` treegram does not know (``"path"``, ``"byte"``...) is an annotation
        in JSON Schema 2020-12: ``"warn"`` accepts any string for it with a warning,
        ``"ignore"`` without one, ``"error"`` refuses it as an unsupported keyword (then
        ``unsupported`` may downgrade it). Known formats that treegram does not compile
        exactly (``regex``) stay under ``unsupported``.
    format_assertion : bool, default True
        Enforce every ``format`` treegram knows (the generation default). ``False`` makes
        every ``format`` an annotation that constrains nothing, as JSON Schema 2020-12
        does without the format-assertion vocabulary (the test suite's required tests
        expect it).
    canonical_integers : bool, default True
        Write an ``integer`` only in its canonical form (``63``), as xgrammar and typed
        parsers expect; ``False`` is JSON Schema's value semantics, under which ``63.0``
        and ``63.00`` are integers too. A ``number`` with an integer ``multipleOf``
        keeps the zero fraction either way (it is a number).
    remote_schemas : mapping of str to dict or bool, optional
        Documents outside the schema that ``$ref`` may name, keyed by their retrieval URI
        (their ``$id``, when present, also names them). A reference to anything not in the
        schema or these documents raises :class:`UnsupportedSchemaError`; so does one to a
        JSON Schema meta-schema unless it is given here. The root's ``$schema`` picks the
        draft: drafts 4 to 7 ignore a ``$ref``'s sibling keywords, 2019-09 / 2020-12 (the
        default) apply them.
    any_order : bool, default False
        xgrammar's ``any_order``: an object's members may come in any order, and only each
        key's value schema is checked; required keys may be missing and keys may repeat.
        The member count lies between ``max(minProperties, len(required))`` and
        ``maxProperties``. Applies to every object, nested ones included.
    excludes : list or tuple of str, default ()
        xgrammar's ``JSONSchemaFormat.excludes``: texts that no JSON string the schema
        leaves free may contain as written (escapes included), keys and
        ``enum``/``const`` strings included; strings under a ``pattern`` or a known
        ``format`` are kept as they are (see :mod:`._excludes`). Length bounds stay
        exact. With exclusions a schema may admit no value at all; the grammar then
        accepts nothing instead of raising.

    Returns
    -------
    GrammarIR
        Root rule ``root``.

    Raises
    ------
    UnsupportedSchemaError
        A keyword cannot be compiled exactly (message names it and its JSON pointer).
    GrammarError
        The schema is malformed or admits no value.
    """
    options = checked_options(
        any_whitespace=any_whitespace,
        indent=indent,
        separators=separators,
        strict_mode=strict_mode,
        max_whitespace_cnt=max_whitespace_cnt,
        unsupported=unsupported,
        unknown_format=unknown_format,
        format_assertion=format_assertion,
        canonical_integers=canonical_integers,
        remote_schemas=remote_schemas,
        any_order=any_order,
    )
    excluded = check_excludes(excludes)
    root = _load(schema)
    deep = _scan(root, "schema")
    check_schema_shapes(root)
    for uri, doc in (options.remote_schemas or {}).items():
        deep = _scan(doc, f"remote_schemas[{uri!r}]") or deep
        check_schema_shapes(doc, f"remote_schemas[{uri!r}]")
    args = (root, options, excluded)
    with collector_paused():  # the IR is acyclic: collections would free nothing
        # Deep schemas, long $ref chains and huge numeric bounds recurse deeply: they are
        # compiled on run_deep's large stack (and MAX_NESTING_DEPTH bounds the nesting).
        if not deep:
            try:
                return _convert(*args, nesting_limit=_SHALLOW_NESTING)
            except (_NeedsDeepStack, RecursionError):
                pass  # e.g. a $ref cycle through allOf: again, where the full limit applies
        return run_deep(_convert, *args)


class _NeedsDeepStack(Exception):  # noqa: N818 - control flow, never escapes
    """Raised on the caller's stack past ``_SHALLOW_NESTING``: compile again deeper."""


_ANY_ORDER_MEMBERS = 4
"""A constant object of at most this many members is written in any order (24 orders)."""

MAX_SUBSCHEMAS = 20_000
"""Subschemas one conversion may convert (``value`` calls). A schema of thousands of
properties needs a few thousand; more come from overlapping ``oneOf`` expanded into
``anyOf`` of each branch with the others' negations, which can grow exponentially."""


MAX_MERGES = 20_000
"""Pairs of schemas one conversion may merge (``allOf`` parts, a branch with the negations
beside it), counted at each merge (:meth:`Converter.count_merge`). Most schemas merge a few
hundred; in the MaskBench sample the most that compile merge about 18,600 (Github_hard
o35186, default options) and 12,000 (minecraft-biome's chain of ``if``/``then``, widened
mode). A merge costs tens of microseconds (derived schemas compared part by part), so the
bound is reached in about a second of CPU."""


class _BudgetExceeded(Exception):  # noqa: N818 - control flow, turned into a refusal
    """Raised past :data:`MAX_SUBSCHEMAS` conversions or :data:`MAX_MERGES` merges."""


def _convert(
    root,
    options: JsonSchemaOptions,
    excludes: tuple[str, ...] = (),
    nesting_limit: int = MAX_NESTING_DEPTH,
    widen_one_of: bool = False,
) -> GrammarIR:
    o = options
    layout = Layout(o.any_whitespace, o.indent, o.separators, o.max_whitespace_cnt)
    conv = Converter(
        root,
        layout,
        o.strict_mode,
        o.unsupported,
        RefIndex(root, o.remote_schemas, formats=o.format_assertion),
        unknown_format=o.unknown_format,
        canonical_integers=o.canonical_integers,
        any_order=o.any_order,
        excludes=excludes,
    )
    conv.nesting_limit = nesting_limit
    conv.widen_one_of = widen_one_of
    try:
        conv.rules["root"] = None
        try:
            body = conv.value(conv.root, "", 0)
        except _BudgetExceeded as exc:
            where = conv.expanded[0] if conv.expanded else exc.args[0]
            why = (
                f"the conversion needs more than {MAX_SUBSCHEMAS} subschemas (overlapping "
                "oneOf branches expanded with each other's negations)"
            )
            if exc.args[1:] == ("merges",):
                why = (
                    f"the conversion needs more than {MAX_MERGES} merges of subschemas "
                    "(overlapping oneOf branches merged with each other's negations)"
                )
            elif exc.args[1:] == ("nesting",):
                why = (
                    f"the conversion nests deeper than MAX_NESTING_DEPTH={MAX_NESTING_DEPTH} "
                    "levels (overlapping oneOf branches expanded with each other's negations)"
                )
            if widen_one_of or not conv.expanded:  # nothing left to widen
                # no oneOf expanded: the work came from allOf parts distributed (if/then)
                keyword = "oneOf" if conv.expanded else "allOf"
                if not conv.expanded:
                    why = why.replace("overlapping oneOf branches", "allOf parts and conditions")
                raise UnsupportedSchemaError(
                    f"unsupported JSON Schema keyword {keyword!r} at {where or '#'}: {why}"
                    + (", even with overlapping oneOf widened" if widen_one_of else "")
                ) from None
            conv.unsupported("oneOf", where, why)  # raises naming the option, or warns
            return _convert(root, options, excludes, nesting_limit, widen_one_of=True)
        if body is None and excludes:
            body = _NOTHING  # the exclusions removed every value: accepts nothing
        if body is None:
            raise GrammarError("the schema admits no JSON value")
        conv.rules["root"] = body
        from treegram.frontends.json_schema._share import share_rules

        return share_rules(conv.rules, "root", conv.unique_rules, conv.counted_rules)
    finally:
        # The converter and its helpers point at each other: dropping its state frees the
        # intermediate expressions and tables now, by reference counting. Left to the
        # collector, they made the first collection after the compile (tens of thousands
        # of objects) cost as much as the conversion itself.
        conv.__dict__.clear()
