"""The XML argument converter: tool-call arguments written as XML parameters (the
``JSONSchemaFormat`` styles other than ``"json"``; :mod:`._xml` is the entry).

The language is xgrammar 0.2.8's. The argument object of a tool call is written as a list
of parameters instead of a JSON object; for Qwen (``qwen_xml``)::

    <parameter=city>Paris, France</parameter>
    <parameter=days>3</parameter>

Three layers, as in xgrammar:

- the *argument object* (the root schema) is a parameter list: optional whitespace, then
  the parameters, each followed by optional whitespace. Declared properties come in schema
  order (optional ones may be left out), further keys (``additionalProperties``,
  ``patternProperties``) after them; with ``any_order`` any mix of keys, counted only.
  An unconstrained root (``{}``, ``true``, ``{"type": "object"}``) is any parameter list
  whose names are identifiers;
- a *parameter value* is raw text where the schema says string: an unconstrained string is
  any text without the style's closing tag, a ``pattern``/``format`` or length-bounded
  string is exactly that language; a ``const``/``enum`` value is its raw text (a string
  without quotes, anything else as JSON). Any other value (numbers, booleans, null, arrays,
  objects) is JSON, padded with optional whitespace; ``anyOf``/``oneOf``/type lists choose
  per branch;
- inside a JSON value, everything is JSON (the JSON Schema frontend).

DeepSeek's styles tag every value with ``string="true"`` (raw text, no padding) or
``string="false"`` (JSON, padded); a union carries the attribute per branch. Kimi-K3 writes
the value's JSON type into the key (``type="number"``), or any of the types when the schema
does not fix one. Cohere's and MiniMax-M3's recursive elements are
:mod:`._xml_cohere` and :mod:`._xml_minimax_m3`.
``excludes`` keep strings out of raw values, parameter names (a further parameter's name
is an identifier minus the names holding one, an exact automaton difference) and the
strings of JSON values (JSON Schema ``excludes``, :mod:`.json_schema._excludes`: the
written content, escapes included); constants holding one are left out (those of an object
or array by each string as JSON writes it). As in xgrammar, a value with no constant left,
or an argument object with a required name holding one, admits no text.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from treegram.errors import InvalidStructuralTagError, UnsupportedStructuralTagError
from treegram.frontends._regex import regex_to_ir
from treegram.frontends.json_schema import format_expr, json_schema_to_ir
from treegram.ir import (
    MAX_CODEPOINT,
    Bytes,
    CharClass,
    Choice,
    Dfa,
    DfaLimitError,
    Expr,
    GrammarIR,
    Repeat,
    Rule,
    RuleRef,
    Seq,
)

__all__ = [
    "ordered_tail",
    "parameter_list",
    "XML_STYLES",
    "XmlBuilder",
    "Converter",
    "Style",
    "ANNOTATIONS",
    "ANY_CHAR",
    "EMPTY",
    "COHERE_ENTITIES",
    "is_any",
    "json_text",
    "without_unknown_keywords",
    "union_options",
    "alt",
]


@dataclass(frozen=True)
class Style:
    key_prefix: str  # before the parameter name
    key_suffix: str  # after the name (Kimi-K3: built per value type)
    value_prefix: str  # before the value (GLM), after optional whitespace
    end: str  # closes the parameter
    kind: str = "plain"  # "plain", "deepseek" (string= attribute) or "kimi" (type= attribute)


XML_STYLES: dict[str, Style] = {
    "qwen_xml": Style("<parameter=", ">", "", "</parameter>"),
    "minimax_xml": Style('<parameter name="', '">', "", "</parameter>"),
    "glm_xml": Style("<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>"),
    "deepseek_xml": Style(
        '<\uff5cDSML\uff5cparameter name="', "", "", "</\uff5cDSML\uff5cparameter>", "deepseek"
    ),
    "deepseek_v4_1_xml": Style(
        '<\uff5cDSML\uff5c parameter name="', "", "", "</\uff5cDSML\uff5c parameter>", "deepseek"
    ),
    "kimi_k3_xml": Style('<|open|>argument key="', "", "", "<|close|>argument<|sep|>", "kimi"),
    "cohere_xml": Style("<cofl:value", ">", "", "</cofl:value>", "cohere"),
    "minimax_m3_xml": Style("", "", "", "", "minimax_m3"),  # elements: _xml_arguments_minimax_m3
}

# Styles xgrammar 0.2.8 defines that treegram does not compile, with the reason.

_KIMI_TYPES = ("string", "number", "integer", "boolean", "object", "array", "null")
ANNOTATIONS = frozenset(
    {"$schema", "$id", "$comment", "title", "description", "examples", "default", "$defs",
     "definitions", "deprecated", "readOnly", "writeOnly"}
)  # fmt: skip
# Every keyword of JSON Schema (drafts 4 to 2020-12); any other key is an annotation of its
# own (Snowplow's "self", OpenAPI's "x-..."): xgrammar ignores it, so do the styles here.
_KEYWORDS = ANNOTATIONS | frozenset(
    {"type", "enum", "const", "multipleOf", "maximum", "exclusiveMaximum", "minimum",
     "exclusiveMinimum", "maxLength", "minLength", "pattern", "format", "maxItems", "minItems",
     "uniqueItems", "maxContains", "minContains", "maxProperties", "minProperties",
     "required", "dependentRequired", "allOf", "anyOf", "oneOf", "not", "if", "then", "else",
     "dependentSchemas", "dependencies", "prefixItems", "items", "additionalItems", "contains",
     "properties", "patternProperties", "additionalProperties", "propertyNames",
     "unevaluatedItems", "unevaluatedProperties", "$ref", "$dynamicRef", "$recursiveRef",
     "$recursiveAnchor", "$anchor", "$dynamicAnchor", "$vocabulary", "contentMediaType",
     "contentEncoding", "contentSchema", "example", "discriminator"}
)  # fmt: skip
_SCHEMA = ("additionalProperties", "unevaluatedProperties", "propertyNames",
           "additionalItems", "unevaluatedItems", "contains", "not", "if", "then", "else",
           "contentSchema")  # fmt: skip
_SCHEMAS = ("allOf", "anyOf", "oneOf", "prefixItems")
_SCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
# Annotations for a reader only (no $id, $schema or definitions: references read those).
_DESCRIPTIVE = frozenset(
    {"title", "description", "examples", "default", "$comment", "deprecated", "readOnly",
     "writeOnly"}
)  # fmt: skip


def without_unknown_keywords(schema: Any) -> Any:
    """``schema`` with the keys that are no JSON Schema keyword left out, in it and in every
    subschema (definitions included, so a ``$ref`` finds the same subschema): such a key
    never constrains a value, and :class:`Converter` reads the keys a schema has to tell its
    shape (a plain object, a bare ``$ref``, a one-branch ``allOf``). A schema without any is
    returned as it is."""
    return _only_keys(schema, _KEYWORDS)


def without_descriptions(schema: Any) -> Any:
    """``schema`` without the annotations that describe a value to a reader (titles,
    descriptions, examples, defaults...), in it and in every subschema: they never constrain
    a value, so two tools' parameters that differ only there are one JSON value grammar."""
    return _only_keys(schema, _KEYWORDS - _DESCRIPTIVE)


def _only_keys(schema: Any, keep: frozenset[str]) -> Any:
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    changed = False
    for key, value in schema.items():
        if key not in keep:
            changed = True
            continue
        new = value
        if key in _SCHEMA or (key == "items" and isinstance(value, dict)):
            new = _only_keys(value, keep)
        elif (key in _SCHEMAS or key == "items") and isinstance(value, list):
            items = [_only_keys(v, keep) for v in value]
            new = value if all(a is b for a, b in zip(items, value, strict=True)) else items
        elif (key in _SCHEMA_MAPS or key == "dependencies") and isinstance(value, dict):
            fields = {k: _only_keys(v, keep) for k, v in value.items()}
            new = value if all(fields[k] is value[k] for k in value) else fields
        changed = changed or new is not value
        out[key] = new
    return out if changed else schema


_OBJECT_KEYS = frozenset(
    {"type", "properties", "required", "additionalProperties", "unevaluatedProperties",
     "patternProperties", "propertyNames", "minProperties", "maxProperties"}
)  # fmt: skip
_WS_CHARS = ((9, 10), (13, 13), (32, 32))
ANY_CHAR = CharClass(((0, MAX_CODEPOINT),))
EMPTY = Bytes(b"")
NOTHING = CharClass(((0, MAX_CODEPOINT),), negated=True)  # no text matches it


class XmlBuilder(Protocol):
    """What the XML conversion needs from the structural tag builder."""

    rules: list[Rule]

    def _fresh(self, base: str) -> str: ...

    def _rule(self, base: str, body: Expr) -> RuleRef: ...

    def _embed(self, ir: GrammarIR) -> RuleRef: ...

    def _dfa(self, d: Dfa, base: str) -> Expr | None: ...

    def _free_text(
        self, pairs: list[tuple[str, RuleRef]], excludes: list[str], *, loop: bool, path: str
    ) -> Expr: ...

    #: JSON values of XML arguments by schema and options, shared by the tag's converters
    xml_json_memo: dict[str, RuleRef]


def _json_type(value: Any) -> str:
    if isinstance(value, str):
        return "string"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if value is None:
        return "null"
    return "object" if isinstance(value, dict) else "array"


def _raw(value: Any) -> bytes:
    """A constant as raw parameter text: a string without quotes, anything else as JSON,
    numbers written as xgrammar writes them (an integral float without a fraction, others
    with 17 significant digits)."""
    return (value if isinstance(value, str) else json_text(value)).encode("utf-8")


def json_text(value: Any) -> str:
    if isinstance(value, int) and not isinstance(value, bool) and not -(2**63) <= value < 2**63:
        value = float(value)  # beyond int64: read as a double
    if isinstance(value, float):
        if abs(value) < 2**53 and value.is_integer():
            return f"{abs(value) if value == 0 else value:.0f}"
        return f"{value:.17g}"
    if isinstance(value, dict):
        items = (f"{json.dumps(k, ensure_ascii=False)}:{json_text(v)}" for k, v in value.items())
        return "{" + ",".join(items) + "}"
    if isinstance(value, list):
        return "[" + ",".join(json_text(v) for v in value) + "]"
    return json.dumps(value, ensure_ascii=False)


def is_any(schema: Any) -> bool:
    return schema is True or (isinstance(schema, dict) and set(schema) <= ANNOTATIONS)


class Converter:
    def __init__(
        self,
        b: XmlBuilder,
        schema: Any,
        style: Style,
        max_ws: int | None,
        any_order: bool,
        path: str,
    ) -> None:
        if not isinstance(schema, (bool, dict)):
            raise InvalidStructuralTagError(f"{path}.json_schema must be an object or a boolean")
        self.b = b
        self.doc = without_unknown_keywords(schema)
        self.style = style
        self.max_ws = max_ws
        self.any_order = any_order
        self.path = path
        self.ws: Expr = Repeat(CharClass(_WS_CHARS), 0, max_ws)
        self._memo: dict[str, RuleRef] = {}
        self._value_refs: dict[str, RuleRef] = {}
        self._deepseek_refs: dict[str, RuleRef] = {}
        self.excludes: list[str] = []
        self.strict = True

    def _banned(self, text: str) -> bool:
        return any(e in text for e in self.excludes)

    # ------------------------------------------------------------------ helpers
    def _once(self, key: str, make) -> RuleRef:
        """The rule ``key``, made on first use; named before its body is made, so a body
        may refer to its own rule (Cohere's recursive any values)."""
        if key not in self._memo:
            name = self.b._fresh(key)
            self._memo[key] = RuleRef(name)
            self.b.rules.append(Rule(name, make()))
        return self._memo[key]

    def _unsupported(self, what: str) -> UnsupportedStructuralTagError:
        return UnsupportedStructuralTagError(
            f"{self.path}.json_schema: {what} is not supported in XML argument styles"
        )

    def _target(self, ref: Any) -> Any:
        """The subschema a local ``$ref`` points to."""
        if not isinstance(ref, str) or not ref.startswith("#"):
            raise self._unsupported(f"$ref {ref!r}")
        target: Any = self.doc
        for part in ref[1:].split("/")[1:]:
            part = part.replace("~1", "/").replace("~0", "~")
            try:
                target = target[int(part)] if isinstance(target, list) else target[part]
            except (KeyError, IndexError, ValueError, TypeError):
                raise InvalidStructuralTagError(
                    f"{self.path}.json_schema: $ref {ref!r} does not resolve"
                ) from None
        return target

    def _resolve(self, schema: Any) -> Any:
        """Follow ``$ref`` chains that stand alone (no sibling keywords)."""
        chain: set[str] = set()
        while _bare_ref(schema):
            ref = schema["$ref"]
            if ref in chain:
                raise self._unsupported(f"a $ref cycle through {ref!r} with no value")
            chain.add(ref)
            schema = self._target(ref)
        return schema

    def _by_ref(self, memo: dict[str, RuleRef], schema: Any, make) -> Expr | None:
        """For a bare ``$ref``: one rule per reference, made once, so recursive and
        shared references stay linear; None for any other schema."""
        if not _bare_ref(schema):
            return None
        ref = schema["$ref"]
        if ref not in memo:
            self._resolve(schema)  # a cycle of bare references has no value
            name = self.b._fresh("xml_ref")
            memo[ref] = RuleRef(name)
            self.b.rules.append(Rule(name, make(self._target(ref))))
        return memo[ref]

    def _shared_value(self, schema: Any) -> Expr | None:
        """The start of every style's ``value``: a bare ``$ref``'s one rule (None for any
        other schema); a false schema refused."""
        shared = self._by_ref(self._value_refs, schema, lambda s: self.value(s)[0])
        if shared is None and schema is False:
            raise self._unsupported("a false schema")
        return shared

    def json(self, schema: Any) -> RuleRef:
        """A JSON value valid against ``schema`` (the root's definitions in scope)."""
        if isinstance(schema, dict) and isinstance(self.doc, dict):
            schema = dict(schema)
            for key in ("$defs", "definitions"):
                if key in self.doc and key not in schema:
                    schema[key] = self.doc[key]
        schema = without_descriptions(schema)
        options = [self.max_ws, self.any_order, self.strict, self.excludes]
        key = json.dumps([schema, options], sort_keys=True)
        memo = self.b.xml_json_memo
        if key not in memo:
            ir = json_schema_to_ir(
                schema,
                max_whitespace_cnt=self.max_ws,
                any_order=self.any_order,
                strict_mode=self.strict,
                excludes=self.excludes,
            )
            memo[key] = self.b._embed(ir)
        return memo[key]

    def xml_string(self) -> RuleRef:
        """Raw text that does not contain the closing tag."""
        return self._once(
            "xml_string",
            lambda: self.b._free_text(
                [], [*self.excludes, self.style.end], loop=False, path=self.path
            ),
        )

    def any_value(self) -> RuleRef:
        """An unconstrained parameter value: raw text, or a JSON array or object."""
        return self._once(
            "xml_any",
            lambda: Choice(
                (self.xml_string(), self.json({"type": "array"}), self.json({"type": "object"}))
            ),
        )

    def variable_name(self) -> Expr:
        """An identifier (a further parameter's name) that holds no excluded string."""
        name = Seq(
            (
                CharClass(((65, 90), (95, 95), (97, 122))),
                Repeat(CharClass(((48, 57), (65, 90), (95, 95), (97, 122))), 0, None),
            )
        )
        if not any(_IDENTIFIER.fullmatch(e) for e in self.excludes):
            return name
        return self._once("xml_variable_name", lambda: self._without_excluded(name))

    def _without_excluded(self, expr: Expr) -> Expr:
        """``expr`` (a language without rule calls) minus the texts holding an excluded
        string, as an exact automaton difference written back as helper rules."""
        texts = tuple(Bytes(e.encode("utf-8")) for e in self.excludes)
        search = Dfa.from_expr(Seq((_ANY_STAR, alt(list(texts)), _ANY_STAR)))
        try:
            body = self.b._dfa(Dfa.from_expr(expr).difference(search).minimize(), "xml_name")
        except DfaLimitError as err:
            raise self._unsupported(f"excludes on parameter names ({err})") from None
        return NOTHING if body is None else body

    # ------------------------------------------------------------------ values
    def value(self, schema: Any) -> tuple[Expr, bool]:
        """The expression of one parameter's value; True when it is the unconstrained raw
        string (which takes no padding: it contains any whitespace already)."""
        shared = self._shared_value(schema)
        if shared is not None:
            return shared, False
        if is_any(schema):
            return self.any_value(), False
        if "const" in schema or "enum" in schema:
            values = [schema["const"]] if "const" in schema else schema["enum"]
            return self.constants(values, lambda v: Bytes(_raw(v))), False
        combined = self._combined(schema)
        if combined is not None:
            return combined
        if schema.get("type") == "string":
            return self._string(schema)
        if schema.get("type") == "object" and set(schema) - ANNOTATIONS == {"type"}:
            return self.json({"type": "object"}), False
        return self.json(schema), False

    def _combined(self, schema: dict) -> tuple[Expr, bool] | None:
        """The value of a union (the choice of its options' values) or of a lone ``allOf``
        (its one schema's value); None for any other schema. Every style reads these alike."""
        options = union_options(schema)
        if options is not None:
            return alt([self.value(o)[0] for o in options]), False
        all_of = schema.get("allOf")
        if isinstance(all_of, list) and len(all_of) == 1 and set(schema) - ANNOTATIONS == {"allOf"}:
            return self.value(all_of[0])
        return None

    def _allowed(self, values: list[Any], *, root: bool = False) -> list[Any]:
        """The constants that contain no excluded string (xgrammar drops the others): a
        string constant as its raw text, an object or array constant by each string in it
        (keys too) as JSON writes it, so a text never spans two strings. An object at the
        root is a parameter list, whose names and values :meth:`_object` checks."""
        if not self.excludes:
            return values
        return [
            v
            for v in values
            if (root and isinstance(v, dict)) or not any(map(self._banned, _written_strings(v)))
        ]

    def constants(self, values: Any, write, *, root: bool = False) -> Expr:
        """The alternatives ``write(v)`` of the constants ``values`` that hold no excluded
        string; when none is left, an expression no text matches (as xgrammar, the value
        is then impossible, and an optional parameter can only be left out)."""
        if not isinstance(values, list) or not values:
            raise InvalidStructuralTagError(f"{self.path}.json_schema: bad enum {values!r}")
        kept = self._allowed(values, root=root)
        return alt([write(v) for v in kept]) if kept else NOTHING

    def _string(self, schema: dict) -> tuple[Expr, bool]:
        fmt = schema.get("format")
        if fmt is not None:
            expr = format_expr(fmt)
            if expr is not None:
                return expr, False
        if "pattern" in schema:
            return self.b._embed(regex_to_ir(schema["pattern"])), False
        lo = schema.get("minLength", 0)
        hi = schema.get("maxLength")
        if not self.excludes and (lo or hi is not None or fmt is not None):
            return Repeat(ANY_CHAR, lo, hi), False
        return self.xml_string(), True

    def pinned_type(self, schema: Any) -> str | None:
        """The one JSON type every value of ``schema`` is written as, if there is one."""
        if not isinstance(schema, dict) or "$ref" in schema:
            return None
        if "const" in schema:
            return _json_type(schema["const"])
        if "enum" in schema:
            types = {_json_type(v) for v in schema["enum"]} if schema["enum"] else set()
            return types.pop() if len(types) == 1 else None
        if union_options(schema) is not None or "allOf" in schema:
            return None
        kind = schema.get("type")
        if isinstance(kind, str):
            return "number" if kind == "integer" else kind
        return None

    # ------------------------------------------------------------------ parameters
    def parameter(self, key: Expr, schema: Any) -> Expr:
        """One parameter: the name ``key`` and a value valid against ``schema``."""
        st = self.style
        if st.kind == "deepseek":
            return Seq((Bytes(st.key_prefix.encode()), key, self._deepseek(schema)))
        items: list[Expr] = [Bytes(st.key_prefix.encode()), key]
        if st.kind == "kimi":
            pinned = self.pinned_type(schema)
            kind = (
                Bytes(pinned.encode()) if pinned else alt([Bytes(t.encode()) for t in _KIMI_TYPES])
            )
            items += [Bytes(b'" type="'), kind, Bytes(b'"<|sep|>')]
        else:
            items.append(Bytes(st.key_suffix.encode()))
        if st.value_prefix:
            items += [self.ws, Bytes(st.value_prefix.encode())]
        value, plain = self.value(schema)
        items += [value] if plain else [self.ws, value, self.ws]
        items.append(Bytes(st.end.encode()))
        return Seq(tuple(items))

    def _deepseek(self, schema: Any) -> Expr:
        """``" string="true|false">value</...parameter>``, the attribute per branch."""
        shared = self._by_ref(self._deepseek_refs, schema, self._deepseek)
        if shared is not None:
            return shared
        end = Bytes(self.style.end.encode())

        def wrap(value: Expr, is_string: bool) -> Expr:
            if is_string:
                return Seq((Bytes(b'" string="true">'), value, end))
            return Seq((Bytes(b'" string="false">'), self.ws, value, self.ws, end))

        pinned = self.pinned_type(schema)
        if pinned is not None:
            return wrap(self.value(schema)[0], pinned == "string")
        options: list[Any] | None = None
        if isinstance(schema, dict):
            options = union_options(schema)
            if options is None and isinstance(schema.get("allOf"), list):
                options = schema["allOf"] if len(schema["allOf"]) == 1 else None
            if options is None and "enum" in schema:
                options = [{"const": v} for v in schema["enum"]]
        if not options:
            other = {"type": ["number", "boolean", "null", "array", "object"]}
            return Choice((wrap(self.xml_string(), True), wrap(self.json(other), False)))
        return alt([self._deepseek(o) for o in options])

    # ------------------------------------------------------------------ the argument object
    def root(self) -> Expr:
        return self._arguments(self.doc)

    def _arguments(self, schema: Any) -> Expr:
        schema = self._resolve(schema)
        if schema is False:
            raise self._unsupported("a false schema")
        if is_any(schema) or (
            isinstance(schema, dict)
            and set(schema) - ANNOTATIONS == {"type"}
            and schema["type"] == "object"
        ):
            return self._any_arguments()
        if "const" in schema or "enum" in schema:
            # an object constant is a fixed parameter list (in its own order); any other
            # constant is its raw text
            values = [schema["const"]] if "const" in schema else schema["enum"]
            return self.constants(values, self._fixed, root=True)
        options = union_options(schema)
        if options is not None:
            return alt([self._arguments(o) for o in options])
        if schema.get("type", "object") == "object":
            return self._object(schema, any_order=self.any_order)
        return self.value(schema)[0]  # a scalar root: the value on its own

    def _fixed(self, value: Any) -> Expr:
        if not isinstance(value, dict):
            return Bytes(_raw(value))
        if any(self._banned(_key_text(self.style, k).decode("utf-8")) for k in value):
            return NOTHING  # a name holding an excluded string: the constant is left out
        fixed = {"properties": {k: {"const": v} for k, v in value.items()}, "required": list(value)}
        return self._object(fixed, any_order=False)

    def _any_arguments(self) -> RuleRef:
        def make() -> Expr:
            return parameter_list(self.ws, self.parameter(self.variable_name(), True))

        return self._once("xml_object", make)

    def _object(self, schema: dict, *, any_order: bool) -> Expr:
        unknown = set(schema) - _OBJECT_KEYS - ANNOTATIONS
        if unknown:
            raise self._unsupported(f"keyword(s) {sorted(unknown)} on the argument object")
        props = schema.get("properties", {})
        required = set(schema.get("required", []))
        if not isinstance(props, dict):
            raise InvalidStructuralTagError(f"{self.path}.json_schema.properties must be an object")
        lo = schema.get("minProperties", 0)
        hi = schema.get("maxProperties")
        declared = []
        for name, sub in props.items():
            if self._banned(_key_text(self.style, name).decode("utf-8")):
                if name in required:
                    return NOTHING  # xgrammar: no argument object can be written
                continue  # a name holding an excluded string is never written
            param = self.parameter(Bytes(_key_text(self.style, name)), sub)
            declared.append((param, name in required))
        extra = self._extra(schema)
        ws = self.ws
        if hi == 0:
            return ws
        if any_order:
            items = [p for p, _ in declared] + ([extra] if extra is not None else [])
            if not items:
                return ws
            item = self.b._rule("xml_item", alt(items))
            least = max(lo, len(required), 1)
            can_be_empty = not required and lo == 0
            if hi is not None and least > hi:
                if can_be_empty:
                    return ws
                raise self._unsupported("an argument object no value satisfies")
            more = Repeat(Seq((ws, item)), least - 1, None if hi is None else hi - 1)
            body: Expr = Seq((ws, item, more, ws))
            return Choice((body, ws)) if can_be_empty else body

        # declared properties in order, then further keys; the count in [lo, hi]
        def end(count: int) -> Expr | None:
            if extra is None:
                return EMPTY if count >= lo else None
            need = max(lo - count, 0)
            room = None if hi is None else hi - count
            return Repeat(Seq((ws, extra)), need, room) if room is None or need <= room else None

        content = ordered_tail(self.b, declared, ws, lo, hi, end, "xml_part")(0, 0)
        if content is None:
            raise self._unsupported("an argument object no value satisfies")
        return Seq((content, ws))

    def _additional_key(self, schema: dict) -> Expr:
        """The name of an additional parameter (declared names are not excluded)."""
        return self.variable_name()

    def _extra(self, schema: dict) -> Expr | None:
        """One further parameter (``patternProperties``, ``additionalProperties``,
        ``propertyNames``), as xgrammar combines them."""
        # strict mode (structural tags always): absent means no further keys
        open_default = not self.strict
        additional = schema.get(
            "additionalProperties", schema.get("unevaluatedProperties", open_default)
        )
        names = schema.get("propertyNames")
        patterns = schema.get("patternProperties", {})
        alts = [self.parameter(self.b._embed(regex_to_ir(p)), sub) for p, sub in patterns.items()]
        if patterns and not schema.get("properties"):
            return alt(alts) if alts else None  # the patterns alone
        if additional is False and (names is None or patterns or schema.get("properties")):
            return alt(alts) if alts else None
        key = self._additional_key(schema)
        if names is not None and not patterns:
            key = self._string({**names, "type": "string"})[0] if isinstance(names, dict) else key
        alts.append(self.parameter(key, True if additional is False else additional))
        return alt(alts)


# an excluded string made of these characters only can occur inside an identifier
_IDENTIFIER = re.compile(r"[A-Za-z0-9_]+")
_ANY_STAR = Repeat(ANY_CHAR, 0, None)


def _written_strings(value: Any):
    """The contents of the JSON strings of ``value`` (keys included) as :func:`json_text`
    writes them, escapes included; a string on its own is its raw text."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield json.dumps(k, ensure_ascii=False)[1:-1]
            yield from _inner_strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _inner_strings(v)


def _inner_strings(value: Any):
    if isinstance(value, str):
        yield json.dumps(value, ensure_ascii=False)[1:-1]
    else:
        yield from _written_strings(value)


def _bare_ref(schema: Any) -> bool:
    return (
        isinstance(schema, dict) and "$ref" in schema and not set(schema) - ANNOTATIONS - {"$ref"}
    )


def _key_text(style: Style, name: str) -> bytes:
    if style.kind == "kimi":  # Kimi-K3 escapes attribute values
        name = name.replace("&", "&amp;").replace('"', "&quot;")
    elif style.kind == "cohere":  # Cohere escapes the XML-sensitive characters
        name = "".join(COHERE_ENTITIES.get(c, c) for c in name)
    return name.encode("utf-8")


COHERE_ENTITIES = {"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;"}


def union_options(schema: dict) -> list[Any] | None:
    """The branches of a union (``anyOf``, ``oneOf``, a type list), or None."""
    for key in ("anyOf", "oneOf"):
        if isinstance(schema.get(key), list) and set(schema) - ANNOTATIONS == {key}:
            return schema[key]
    kind = schema.get("type")
    if isinstance(kind, list):
        rest = {k: v for k, v in schema.items() if k != "type"}
        return [{**rest, "type": t} for t in kind]
    return None


def ordered_tail(
    b: XmlBuilder,
    declared: list[tuple[Expr, bool]],
    ws: Expr,
    lo: int,
    hi: int | None,
    end: Callable[[int], Expr | None],
    base: str,
) -> Callable[[int, int], Expr | None]:
    """``tail(i, count)``: the declared parameters (expression, required) from the ``i``-th
    on, in order, each after whitespace, a required one always and any other one or not,
    ``count`` of at most ``hi`` written so far (counted up to ``lo`` when unbounded), then
    ``end(count)``; None where nothing fits. One rule ``base`` per (i, count), made once."""
    memo: dict[tuple[int, int], Expr | None] = {}

    def tail(i: int, count: int) -> Expr | None:
        key = (i, count)
        if key in memo:
            return memo[key]
        out: Expr | None
        if i == len(declared):
            out = end(count)
        else:
            param, required = declared[i]
            nxt = count + 1 if hi is not None else min(count + 1, lo)
            parts: list[Expr] = []
            if hi is None or count < hi:
                rest = tail(i + 1, nxt)
                if rest is not None:
                    parts.append(Seq((ws, param, rest)))
            if not required:
                rest = tail(i + 1, count)
                if rest is not None:
                    parts.append(rest)
            out = b._rule(base, alt(parts)) if parts else None
        memo[key] = out
        return out

    return tail


def parameter_list(ws: Expr, one: Expr) -> Expr:
    """Any number of ``one`` (zero: whitespace alone), each after whitespace, then
    whitespace."""
    some = Seq((ws, one, Repeat(Seq((ws, one)), 0, None), ws))
    return Choice((some, ws))


def alt(items: list[Expr]) -> Expr:
    return items[0] if len(items) == 1 else Choice(tuple(items))
