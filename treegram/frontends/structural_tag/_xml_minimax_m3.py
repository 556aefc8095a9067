"""MiniMax-M3's ``minimax_m3_xml`` tool-call arguments (xgrammar 0.2.8's language).

Every value is written as elements in the MiniMax namespace: a property ``k`` is
``]<]minimax[>[<k>value]<]minimax[>[</k>``, an array item the same with the name ``item``.
An object is its properties (declared names only, in schema order unless ``any_order``)
and an array its items, separated by optional whitespace, with optional whitespace around
them when there is at least one (an empty object or array is the empty text). A string is
raw text without the namespace marker; numbers, booleans and null are JSON; a constant is
written the same way (its strings raw, its objects and arrays as elements).

Only schemas whose element names are known when the grammar is built compile: an
unconstrained value, ``additionalProperties``, ``patternProperties``, ``propertyNames``,
array items without a schema, and strings with a ``pattern``, a known ``format`` or a
length bound (which cannot be combined with the marker's exclusion) are refused, as
xgrammar refuses them.
"""

from __future__ import annotations

from typing import Any

from treegram.errors import InvalidStructuralTagError
from treegram.frontends.json_schema import format_expr
from treegram.frontends.structural_tag._xml_arguments import (
    EMPTY,
    Converter,
    alt,
    is_any,
    json_text,
    ordered_tail,
)
from treegram.ir import Bytes, Choice, Expr, Repeat, RuleRef, Seq

__all__ = ["MiniMaxM3Converter", "NAMESPACE"]

NAMESPACE = "]<]minimax[>["
_WHITESPACE = " \t\n\r\f\v"


class MiniMaxM3Converter(Converter):
    """The ``minimax_m3_xml`` converter (see the module docstring)."""

    def _invalid(self, what: str) -> InvalidStructuralTagError:
        return InvalidStructuralTagError(f"{self.path}.json_schema: minimax_m3_xml {what}")

    def root(self) -> Expr:
        return self.value(self.doc)[0]

    def xml_string(self) -> RuleRef:
        """Raw text without the namespace marker."""
        return self._once(
            "m3_string", lambda: self.b._free_text([], [NAMESPACE], loop=False, path=self.path)
        )

    def element(self, name: str, value: Expr) -> Expr:
        if not name or name[0] == "/" or ">" in name or not name.strip(_WHITESPACE):
            raise self._invalid(f"cannot use the element name {name!r} (empty, blank, or with "
                                "a leading '/' or a '>')")  # fmt: skip
        try:
            name.encode("utf-8")
        except UnicodeEncodeError:
            raise self._invalid(f"element names must be valid UTF-8, got {name!r}") from None
        return Seq(
            (
                Bytes(f"{NAMESPACE}<{name}>".encode()),
                value,
                Bytes(f"{NAMESPACE}</{name}>".encode()),
            )
        )

    def literal(self, value: Any) -> Expr:
        if isinstance(value, str):
            if NAMESPACE in value:
                raise self._invalid("string literals cannot contain the namespace marker")
            return Bytes(value.encode("utf-8"))
        if isinstance(value, dict):
            return Seq(tuple(self.element(k, self.literal(v)) for k, v in value.items()))
        if isinstance(value, list):
            return Seq(tuple(self.element("item", self.literal(v)) for v in value))
        return Bytes(json_text(value).encode("utf-8"))  # as xgrammar writes JSON

    def value(self, schema: Any) -> tuple[Expr, bool]:
        shared = self._shared_value(schema)
        if shared is not None:
            return shared, False
        if is_any(schema):
            raise self._invalid("does not support unconstrained schemas")
        if "const" in schema:
            return self.literal(schema["const"]), False
        if "enum" in schema:
            values = schema["enum"]
            if not isinstance(values, list) or not values:
                raise InvalidStructuralTagError(f"{self.path}.json_schema: bad enum {values!r}")
            return alt([self.literal(v) for v in values]), False
        combined = self._combined(schema)
        if combined is not None:
            return combined
        kind = schema.get("type")
        if kind is None and "properties" in schema:
            kind = "object"
        if kind == "string":
            fmt = schema.get("format")
            known = fmt is not None and format_expr(fmt) is not None
            bounded = schema.get("minLength", 0) or schema.get("maxLength") is not None
            if "pattern" in schema or known or bounded:
                raise InvalidStructuralTagError(
                    f"{self.path}.json_schema: String pattern, recognized format, and length "
                    "constraints are not supported by minimax_m3_xml (they cannot be combined "
                    "with the exclusion of the namespace marker)"
                )
            return self.xml_string(), True
        if kind == "object":
            return self._elements(schema), False
        if kind == "array":
            return self._items(schema), False
        return self.json(schema), False

    def _elements(self, schema: dict) -> Expr:
        open_keys = {"additionalProperties", "unevaluatedProperties"}
        if any(schema.get(k, not self.strict) is not False for k in open_keys) or (
            "patternProperties" in schema or "propertyNames" in schema
        ):
            raise self._invalid(
                "requires fixed object property names; additionalProperties, "
                "unevaluatedProperties, patternProperties, and propertyNames are not supported"
            )
        props = schema.get("properties", {})
        required = set(schema.get("required", []))
        missing = sorted(required - set(props))
        if missing:
            raise self._invalid(f"required property has no fixed schema: {missing[0]!r}")
        decl = [
            (self.element(name, self.value(sub)[0]), name in required)
            for name, sub in props.items()
        ]
        lo, hi = schema.get("minProperties", 0), schema.get("maxProperties")
        ws = self.ws
        if not decl or hi == 0:
            return EMPTY
        if self.any_order:
            least = max(lo, len(required), 1)
            item = self.b._rule("m3_item", alt([d for d, _ in decl]))
            if hi is not None and least > hi:
                return EMPTY
            some = Seq(
                (ws, item, Repeat(Seq((ws, item)), least - 1, None if hi is None else hi - 1), ws)
            )
            return Choice((some, EMPTY)) if not required and lo == 0 else some
        tail = ordered_tail(
            self.b, decl, ws, lo, hi, lambda count: EMPTY if count >= lo else None, "m3_part"
        )

        # a sequence of at least one element, then whitespace; or nothing at all
        first: list[Expr] = []
        for i, (param, needed) in enumerate(decl):
            count = 1 if hi is not None else min(1, lo)
            rest = tail(i + 1, count)
            if rest is not None:
                first.append(Seq((ws, param, rest)))
            if needed:
                break
        body = Seq((alt(first), ws)) if first else None
        empty_ok = not required and lo == 0
        if body is None:
            if empty_ok:
                return EMPTY
            raise self._unsupported("an argument object no value satisfies")
        return Choice((body, EMPTY)) if empty_ok else body

    def _items(self, schema: dict) -> Expr:
        prefix = schema.get("prefixItems", [])
        items = schema.get("items", not prefix or not self.strict)
        if isinstance(items, list):  # draft 4-7 tuple form
            prefix, items = items, schema.get("additionalItems", False)
        if items is True or is_any(items):
            raise self._invalid("requires a fixed schema for array items")
        lo, hi = schema.get("minItems", 0), schema.get("maxItems")
        if hi is not None and hi >= 2**31:
            hi = None  # beyond a repeat's range: unbounded, as xgrammar reads it
        if lo >= 2**31:
            raise self._invalid(f"minItems must not exceed 2**31 - 1, got {lo}")
        heads = [self.element("item", self.value(p)[0]) for p in prefix]
        extra = None if items is False else self.element("item", self.value(items)[0])
        ws = self.ws
        if hi == 0 or (not heads and extra is None):
            return EMPTY
        if not heads:
            assert extra is not None
            more = Repeat(Seq((ws, extra)), max(0, lo - 1), None if hi is None else max(0, hi - 1))
            some: Expr = Seq((ws, extra, more, ws))
            return Choice((some, EMPTY)) if lo == 0 else some
        tail: Expr = EMPTY
        if extra is not None:
            tail = Repeat(
                Seq((ws, extra)),
                max(0, lo - len(heads)),
                None if hi is None else max(0, hi - len(heads)),
            )
        for index in range(len(heads) - 2, -1, -1):
            emitted = index + 1
            can_stop = emitted >= lo
            can_go_on = hi is None or emitted < hi
            body: Expr = EMPTY
            if can_go_on:
                go = Seq((ws, heads[index + 1], tail))
                body = Choice((go, EMPTY)) if can_stop else go
            tail = self.b._rule("m3_prefix_tail", body)
        some = Seq((ws, heads[0], tail, ws))
        return Choice((some, EMPTY)) if lo == 0 else some
