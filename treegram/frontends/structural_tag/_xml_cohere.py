"""Cohere's ``cohere_xml`` tool-call arguments (xgrammar 0.2.8's language).

Every value is an element ``<cofl:value [name="k"] type="T">...</cofl:value>``: ``T`` is
``raw`` (a string, written raw), ``json`` (a number, boolean, null, or a constant written as
JSON), ``dict`` (an object: its members as named elements) or ``list`` (an array: its items
as unnamed elements, back to back). Objects and arrays nest this way at every depth, so
only scalars are JSON text. Names escape ``& < > "`` as entities; further names exclude
the declared ones. A union or a mixed enum gives each branch its own ``type``; an
unconstrained value is any of the four, each with its matching body.
"""

from __future__ import annotations

from typing import Any

from treegram.errors import InvalidStructuralTagError
from treegram.frontends._regex import regex_to_ir
from treegram.frontends.json_schema import format_expr
from treegram.frontends.structural_tag._xml_arguments import (
    ANNOTATIONS,
    ANY_CHAR,
    COHERE_ENTITIES,
    EMPTY,
    Converter,
    alt,
    is_any,
    parameter_list,
    union_options,
)
from treegram.ir import MAX_CODEPOINT, Bytes, CharClass, Choice, Expr, Repeat, RuleRef, Seq

__all__ = ["CohereConverter"]

_COHERE_KEY_CHARS = CharClass(((0, 0), (34, 34), (38, 38), (60, 60), (62, 62)), negated=True)


class CohereConverter(Converter):
    """Cohere's ``cohere_xml``: every value is a ``<cofl:value [name="k"] type="T">`` element,
    ``T`` one of ``raw`` (a string, raw), ``json`` (a number, boolean, null or a constant
    written as JSON), ``dict`` (an object: its members as named elements) and ``list`` (an
    array: its items as unnamed elements, back to back); objects and arrays nest this way
    at every depth, so no value is JSON text except scalars."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self._suffix_refs: dict[str, RuleRef] = {}

    # the root: a dict body; an unconstrained root is any dict
    def _arguments(self, schema: Any) -> Expr:
        schema = self._resolve(schema)
        if schema is False:
            raise self._unsupported("a false schema")
        if is_any(schema) or _plain_object(schema):
            return self.any_dict()
        if "const" in schema or "enum" in schema:
            return self.value(schema)[0]
        options = union_options(schema)
        if options is not None:
            return alt([self._arguments(o) for o in options])
        if schema.get("type", "object") == "object":
            return self._object(schema, any_order=self.any_order)
        return self.value(schema)[0]

    # elements
    def parameter(self, key: Expr | None, schema: Any) -> Expr:
        """An element: ``<cofl:value``, the name (None: unnamed), the typed value."""
        head: list[Expr] = [Bytes(b"<cofl:value")]
        if key is not None:
            head += [Bytes(b' name="'), key, Bytes(b'"')]
        return Seq((*head, self._suffix(schema)))

    def _typed(self, kind: str | Expr, value: tuple[Expr, bool]) -> Expr:
        expr, plain = value
        body = [expr] if plain else [self.ws, expr, self.ws]
        label = Bytes(kind.encode()) if isinstance(kind, str) else kind
        return Seq((Bytes(b' type="'), label, Bytes(b'">'), *body, Bytes(b"</cofl:value>")))

    def _suffix(self, schema: Any) -> Expr:
        """`` type="T">value</cofl:value>``, the type per branch of a union."""
        shared = self._by_ref(self._suffix_refs, schema, self._suffix)
        if shared is not None:
            return shared
        if is_any(schema) or (
            isinstance(schema, dict) and isinstance(schema.get("allOf"), list)
            and len(schema["allOf"]) != 1 and set(schema) - ANNOTATIONS == {"allOf"}
        ):  # fmt: skip
            return self.any_suffix()
        options = _cohere_options(schema)
        if options is None:
            return self._typed(_cohere_type(schema), self.value(schema))
        return alt([self._suffix(o) for o in options])

    def any_suffix(self) -> RuleRef:
        def make() -> Expr:
            scalar = self.json({"type": ["number", "boolean", "null"]})
            return Choice(
                (
                    self._typed("raw", (self.xml_string(), True)),
                    self._typed("json", (scalar, False)),
                    self._typed("dict", (self.any_dict(), False)),
                    self._typed("list", (self.any_list(), False)),
                )
            )

        return self._once("cohere_any", make)

    def any_dict(self) -> RuleRef:
        def make() -> Expr:
            return parameter_list(self.ws, self.parameter(self.cohere_key(), True))

        return self._once("cohere_any_dict", make)

    def any_list(self) -> RuleRef:
        return self._once("cohere_any_list", lambda: Repeat(self.parameter(None, True), 0, None))

    def cohere_key(self) -> RuleRef:
        def make() -> Expr:
            entities = [Bytes(e.encode()) for e in COHERE_ENTITIES.values()]
            return Repeat(Choice((_COHERE_KEY_CHARS, *entities)), 1, None)

        return self._once("cohere_key", make)

    def _additional_key(self, schema: dict) -> Expr:
        """Any name but the declared ones (compared as written, entities included)."""
        names = list(schema.get("properties", {}))
        if not names:
            return self.cohere_key()
        trie: dict = {}
        for name in names:
            node = trie
            for ch in name:
                node = node.setdefault(ch, {})
            if name:
                node[None] = True  # a declared name ends here
        rest = Choice((EMPTY, self.cohere_key()))

        def body(node: dict, depth: int) -> Expr:
            children = {c: n for c, n in node.items() if c is not None}
            choices: list[Expr] = []
            if depth > 0 and None not in node:
                choices.append(EMPTY)
            taken = sorted({0, *(ord(c) for c in COHERE_ENTITIES), *(ord(c) for c in children)})
            ranges, lo = [], 0
            for cp in taken:
                if lo < cp:
                    ranges.append((lo, cp - 1))
                lo = max(lo, cp + 1)
            if lo <= MAX_CODEPOINT:
                ranges.append((lo, MAX_CODEPOINT))
            choices.append(Seq((CharClass(tuple(ranges)), rest)))
            for ch, entity in COHERE_ENTITIES.items():
                if ch not in children:
                    choices.append(Seq((Bytes(entity.encode()), rest)))
            for ch, child in children.items():
                text = COHERE_ENTITIES.get(ch, ch).encode("utf-8")
                choices.append(Seq((Bytes(text), body(child, depth + 1))))
            return Choice(tuple(choices))

        return self.b._rule("cohere_addl_key", body(trie, 0))

    # values
    def value(self, schema: Any) -> tuple[Expr, bool]:
        shared = self._shared_value(schema)
        if shared is not None:
            return shared, False
        if is_any(schema):
            return alt([self.xml_string(), self.json({"type": ["number", "boolean", "null"]}),
                         self.any_dict(), self.any_list()]), False  # fmt: skip
        if "const" in schema or "enum" in schema:
            return super().value(schema)
        combined = self._combined(schema)
        if combined is not None:
            return combined
        kind = _cohere_type(schema)
        if kind == "raw" and schema.get("type") == "string":
            return self._cohere_string(schema)
        if kind == "dict":
            if _plain_object(schema):
                return self.any_dict(), False
            return self._object(schema, any_order=self.any_order), False
        if kind == "list":
            return self._list(schema), False
        return self.json(schema), False

    def _cohere_string(self, schema: dict) -> tuple[Expr, bool]:
        fmt, lo, hi = schema.get("format"), schema.get("minLength", 0), schema.get("maxLength")
        if fmt is None and "pattern" not in schema and not lo and hi is None:
            return self.xml_string(), True
        known = None if fmt is None else format_expr(fmt)
        if known is not None:
            return known, False
        if "pattern" in schema:
            return self.b._embed(regex_to_ir(schema["pattern"])), False
        if lo or hi is not None:
            return Repeat(ANY_CHAR, lo, hi), False
        return self.json(schema), False  # an unknown format alone: a JSON string, as xgrammar

    def _list(self, schema: dict) -> Expr:
        prefix = schema.get("prefixItems", [])
        items = schema.get("items", not prefix or not self.strict)
        if isinstance(items, list):  # draft 4-7 tuple form
            prefix, items = items, schema.get("additionalItems", False)
        lo, hi = schema.get("minItems", 0), schema.get("maxItems")
        if hi is not None and hi >= 2**31:
            hi = None  # beyond a repeat's range: unbounded, as xgrammar reads it
        if lo >= 2**31:
            raise InvalidStructuralTagError(
                f"{self.path}.json_schema: minItems must not exceed 2**31 - 1, got {lo}"
            )
        heads = [self.parameter(None, p) for p in prefix]
        extra = None if items is False else self.parameter(None, items)
        if not heads:
            if extra is None or hi == 0:
                return EMPTY
            return Repeat(extra, lo, hi)
        if extra is None:
            return Seq(tuple(heads))
        more = Repeat(
            extra, max(0, lo - len(heads)), None if hi is None else max(0, hi - len(heads))
        )
        return Seq((*heads, more))


def _plain_object(schema: Any) -> bool:
    return (
        isinstance(schema, dict)
        and set(schema) - ANNOTATIONS == {"type"}
        and (schema["type"] == "object")
    )


def _cohere_type(schema: Any) -> str:
    """The ``type=`` attribute of a schema with one type."""
    if not isinstance(schema, dict):
        return "json"
    if "const" in schema:
        return "raw" if isinstance(schema["const"], str) else "json"
    if "enum" in schema:
        kinds = {"raw" if isinstance(v, str) else "json" for v in schema["enum"]}
        return kinds.pop() if len(kinds) == 1 else "json"
    kind = schema.get("type")
    if kind is None and "properties" in schema:
        kind = "object"
    return {"string": "raw", "object": "dict", "array": "list"}.get(str(kind), "json")


def _cohere_options(schema: Any) -> list[Any] | None:
    """The branches that each carry their own ``type=``: unions, a one-schema ``allOf``, and
    an enum of both strings and other values."""
    if not isinstance(schema, dict):
        return None
    options = union_options(schema)
    if options is not None:
        return options
    all_of = schema.get("allOf")
    if isinstance(all_of, list) and len(all_of) == 1 and set(schema) - ANNOTATIONS == {"allOf"}:
        return all_of
    values = schema.get("enum")
    if isinstance(values, list) and len({isinstance(v, str) for v in values}) > 1:
        return [{"const": v} for v in values]
    return None
