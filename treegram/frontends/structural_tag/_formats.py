"""The structural tag data model: xgrammar 0.2.8's formats as plain dataclasses.

A structural tag describes an output made of pieces: constant strings, JSON documents,
regular expressions, EBNF grammars and free text, combined by sequences, alternatives,
repetitions and *tags* (``begin content end``); *triggered tags* allow free text in which a
trigger string starts one of the tags. The JSON form is xgrammar's (``{"type":
"structural_tag", "format": {"type": "tag", ...}}``), so a request that an engine sends to
xgrammar parses here unchanged.

The classes need no pydantic: :func:`parse_structural_tag` builds them from a JSON string,
a dict, one of these objects, or any object with pydantic's ``model_dump`` (xgrammar's own
format models included). Every field is checked, and a bad one raises
:class:`~treegram.errors.InvalidStructuralTagError` naming its path
(``format.tags[1].begin``). Formats that work on whole tokens rather than text
(``token``, ``exclude_token``, ``any_tokens``, ``token_triggered_tags``,
``token_dispatch``, and a tag's ``begin`` / ``end`` given as a ``token`` format) name each
token by its id or by its exact text, which the compiler looks up in the vocabulary.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from typing import Any

from treegram.errors import InvalidStructuralTagError, UnsupportedStructuralTagError
from treegram.ir import MAX_NESTING_DEPTH

# Formats xgrammar 0.2.8 defines that treegram does not compile, with the reason.
_UNSUPPORTED_TYPES: dict[str, str] = {}

#: A token named by its id or by its exact text (looked up when the grammar is compiled).
TokenRef = int | str


# JSONSchemaFormat.style values of xgrammar 0.2.8 (not all compile, see _xml)
JSON_SCHEMA_STYLES = (
    "json",
    "qwen_xml",
    "minimax_xml",
    "minimax_m3_xml",
    "deepseek_xml",
    "glm_xml",
    "cohere_xml",
    "kimi_k3_xml",
    "deepseek_v4_1_xml",
)


class _Format:
    """Common behaviour of the format dataclasses: the JSON form."""

    type: str

    def __post_init__(self) -> None:
        expected = type(self).__dataclass_fields__["type"].default  # type: ignore[attr-defined]
        if self.type != expected:
            raise InvalidStructuralTagError(
                f"{type(self).__name__}.type must be {expected!r}, got {self.type!r}"
            )

    def to_dict(self) -> dict[str, Any]:
        """The JSON form of the format (xgrammar's field names), as plain dicts and lists."""
        return {f.name: _dump(getattr(self, f.name)) for f in fields(self)}  # type: ignore[arg-type]

    def to_json(self) -> str:
        """The JSON form as a string."""
        return json.dumps(self.to_dict())

    # pydantic's names, for code written against xgrammar's models
    def model_dump(self, **_: Any) -> dict[str, Any]:
        """Same as :meth:`to_dict` (pydantic's name)."""
        return self.to_dict()

    def model_dump_json(self, **_: Any) -> str:
        """Same as :meth:`to_json` (pydantic's name)."""
        return self.to_json()

    @classmethod
    def model_validate(cls, obj: Any, **_: Any) -> Any:
        """A format of this class from its JSON form (a dict; ``type`` may be left out),
        checked as :func:`parse_format` checks it (pydantic's name).

        Raises
        ------
        InvalidStructuralTagError
            A malformed field, or the JSON form of another format type.
        UnsupportedStructuralTagError
            An option treegram does not compile.
        """
        expected = cls.__dataclass_fields__["type"].default  # type: ignore[attr-defined]
        plain = _as_plain(obj)
        if isinstance(plain, dict) and "type" not in plain:
            plain = {**plain, "type": expected}
        out = parse_format(plain, cls.__name__)
        if not isinstance(out, cls):
            raise InvalidStructuralTagError(
                f"{cls.__name__}.type must be {expected!r}, got {out.type!r}"
            )
        return out

    @classmethod
    def model_validate_json(cls, data: str | bytes | bytearray, **_: Any) -> Any:
        """:meth:`model_validate` of JSON text (pydantic's name); the inverse of
        :meth:`model_dump_json`.

        Raises
        ------
        InvalidStructuralTagError
            Text that is not JSON, and everything :meth:`model_validate` raises.
        """
        return cls.model_validate(_load_json(data, cls.__name__))


def _load_json(data: Any, name: str) -> Any:
    if not isinstance(data, (str, bytes, bytearray)):
        raise InvalidStructuralTagError(
            f"{name} JSON must be str or bytes, got {type(data).__name__}"
        )
    try:
        return json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InvalidStructuralTagError(f"{name} JSON is not valid JSON: {exc}") from None


def _dump(value: Any) -> Any:
    if isinstance(value, _Format):
        return value.to_dict()
    if isinstance(value, (list, tuple)):
        return [_dump(v) for v in value]
    return value


@dataclass(eq=True)
class ConstStringFormat(_Format):
    """Exactly the string ``value``."""

    value: str
    type: str = "const_string"


@dataclass(eq=True)
class JSONSchemaFormat(_Format):
    """A JSON document valid against ``json_schema`` (any whitespace between tokens), or,
    with an XML ``style``, tool-call arguments written as XML parameters.

    ``style``: ``"json"``, or one of xgrammar's XML argument styles: ``"qwen_xml"``
    (``<parameter=key>value</parameter>``), ``"minimax_xml"`` (``<parameter
    name="key">value</parameter>``), ``"deepseek_xml"`` and ``"deepseek_v4_1_xml"``
    (DeepSeek's DSML parameters with a ``string="true|false"`` attribute), ``"glm_xml"``
    (``<arg_key>key</arg_key><arg_value>value</arg_value>``) and ``"kimi_k3_xml"``: string
    values are raw text, other values JSON; ``"cohere_xml"``: every value a typed
    ``<cofl:value>`` element, objects and arrays nested as elements; ``"minimax_m3_xml"``:
    namespaced elements, objects and arrays nested (fixed property names only)
    (:mod:`treegram.frontends.structural_tag._xml`). ``excludes``: with ``"json"``, texts
    that no string the schema leaves free (values and keys; not strings under a
    ``pattern`` or a known ``format``) may contain as written; with the other XML styles,
    strings kept out of raw string values and parameter names (their JSON values must
    then hold no strings). ``any_order``: object members in any order (see
    ``Grammar.from_json_schema``).
    """

    json_schema: bool | dict[str, Any]
    style: str = "json"
    any_order: bool = False
    max_whitespace_cnt: int | None = None
    excludes: list[str] = field(default_factory=list)
    type: str = "json_schema"


def check_budget(value: Any, name: str) -> int | None:
    """A length budget of ``any_text`` (``max_tokens``, ``max_chars``): None or an integer
    in [0, 2**31).

    Raises
    ------
    InvalidStructuralTagError
        Anything else (the message names ``name``).
    """
    if value is not None and (
        isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**31
    ):
        raise InvalidStructuralTagError(
            f"{name} must be a non-negative 32-bit integer, got {value!r}"
        )
    return value


@dataclass(eq=True)
class AnyTextFormat(_Format):
    """Any text without the strings ``excludes``; inside a tag, also without the tag's end
    strings (so the end string closes the tag). ``max_tokens``: at most that many tokens
    (enforced by the matcher; 0: empty); ``max_chars``: at most that many characters, as
    xgrammar counts them (code points; with excludes, bytes other than UTF-8 continuation
    bytes), built into the text's automaton (0: empty)."""

    excludes: list[str] = field(default_factory=list)
    max_tokens: int | None = None
    max_chars: int | None = None
    type: str = "any_text"


@dataclass(eq=True)
class GrammarFormat(_Format):
    """A string of the EBNF grammar ``grammar`` (root rule ``root``)."""

    grammar: str
    type: str = "grammar"


@dataclass(eq=True)
class RegexFormat(_Format):
    """A string that the regular expression ``pattern`` matches as a whole."""

    pattern: str
    type: str = "regex"


@dataclass(eq=True)
class SequenceFormat(_Format):
    """The ``elements`` one after another (at least one)."""

    elements: list[Format]
    type: str = "sequence"


@dataclass(eq=True)
class OrFormat(_Format):
    """One of the ``elements`` (at least one)."""

    elements: list[Format]
    type: str = "or"


@dataclass(eq=True)
class TokenFormat(_Format):
    """One token: ``token`` is its id or its exact text."""

    token: TokenRef
    type: str = "token"


@dataclass(eq=True)
class ExcludeTokenFormat(_Format):
    """One token that is none of ``exclude_tokens``; inside a tag whose end is a token,
    not that one either."""

    exclude_tokens: list[TokenRef] = field(default_factory=list)
    type: str = "exclude_token"


@dataclass(eq=True)
class AnyTokensFormat(_Format):
    """Any tokens but ``exclude_tokens`` (and the end token of the enclosing tag);
    ``max_tokens``: at most that many (enforced by the matcher)."""

    exclude_tokens: list[TokenRef] = field(default_factory=list)
    max_tokens: int | None = None
    type: str = "any_tokens"


@dataclass(eq=True)
class TagFormat(_Format):
    """``begin``, then ``content``, then ``end`` (one of the strings when a list); a
    :class:`TokenFormat` begin or end is that token."""

    begin: str | TokenFormat
    content: Format
    end: str | list[str] | TokenFormat
    type: str = "tag"


@dataclass(eq=True)
class TokenTriggeredTagsFormat(_Format):
    """Tokens in which a trigger token starts a tag (the tag whose ``begin`` is that
    token); after the tag, free tokens again. ``at_least_one``: the output starts with a
    tag; ``stop_after_first``: it ends after the first tag. The free tokens are none of
    the triggers and ``exclude_tokens``."""

    trigger_tokens: list[TokenRef]
    tags: list[TagFormat]
    exclude_tokens: list[TokenRef] = field(default_factory=list)
    at_least_one: bool = False
    stop_after_first: bool = False
    type: str = "token_triggered_tags"


@dataclass(eq=True)
class TokenDispatchFormat(_Format):
    """Tokens in which each token of ``rules`` starts its format; with ``loop``, free
    tokens resume after the format, otherwise the output ends there. The free tokens are
    none of the rules' tokens and ``exclude_tokens``."""

    rules: list[tuple[TokenRef, Format]]
    loop: bool = True
    exclude_tokens: list[TokenRef] = field(default_factory=list)
    type: str = "token_dispatch"


@dataclass(eq=True)
class TriggeredTagsFormat(_Format):
    """Free text in which a trigger starts a tag; after the tag's end, free text again.

    Every tag's ``begin`` starts with exactly one of ``triggers``. ``at_least_one``: the
    output starts with a tag; ``stop_after_first``: it ends after the first tag. The free
    text contains none of ``excludes``.
    """

    triggers: list[str]
    tags: list[TagFormat]
    at_least_one: bool = False
    stop_after_first: bool = False
    excludes: list[str] = field(default_factory=list)
    type: str = "triggered_tags"


@dataclass(eq=True)
class TagsWithSeparatorFormat(_Format):
    """Tags separated by ``separator`` and nothing else: zero or more, at least one with
    ``at_least_one``, at most one with ``stop_after_first``."""

    tags: list[TagFormat]
    separator: str
    at_least_one: bool = False
    stop_after_first: bool = False
    type: str = "tags_with_separator"


@dataclass(eq=True)
class OptionalFormat(_Format):
    """``content`` or nothing."""

    content: Format
    type: str = "optional"


@dataclass(eq=True)
class PlusFormat(_Format):
    """``content`` one or more times."""

    content: Format
    type: str = "plus"


@dataclass(eq=True)
class StarFormat(_Format):
    """``content`` zero or more times."""

    content: Format
    type: str = "star"


@dataclass(eq=True)
class RepeatFormat(_Format):
    """``content`` ``min`` to ``max`` times (``max=-1``: unbounded)."""

    min: int
    max: int
    content: Format
    type: str = "repeat"


@dataclass(eq=True)
class DispatchFormat(_Format):
    """Free text in which each pattern of ``rules`` starts its format; with ``loop``, free
    text resumes after the format, otherwise the output ends there. The free text contains
    none of ``excludes``."""

    rules: list[tuple[str, Format]]
    loop: bool = True
    excludes: list[str] = field(default_factory=list)
    type: str = "dispatch"


@dataclass(eq=True)
class QwenXMLParameterFormat(_Format):
    """Deprecated in xgrammar (``JSONSchemaFormat(style="qwen_xml")`` replaced it): the
    arguments of ``json_schema`` as Qwen XML parameters; compiles as that format."""

    json_schema: bool | dict[str, Any]
    type: str = "qwen_xml_parameter"


Format = (
    ConstStringFormat
    | JSONSchemaFormat
    | AnyTextFormat
    | GrammarFormat
    | RegexFormat
    | SequenceFormat
    | OrFormat
    | TagFormat
    | TriggeredTagsFormat
    | TagsWithSeparatorFormat
    | OptionalFormat
    | PlusFormat
    | StarFormat
    | RepeatFormat
    | DispatchFormat
    | QwenXMLParameterFormat
    | TokenFormat
    | ExcludeTokenFormat
    | AnyTokensFormat
    | TokenTriggeredTagsFormat
    | TokenDispatchFormat
)

#: The formats that read whole tokens (a TagFormat may also hold a TokenFormat).
TOKEN_FORMATS = (
    TokenFormat,
    ExcludeTokenFormat,
    AnyTokensFormat,
    TokenTriggeredTagsFormat,
    TokenDispatchFormat,
)

_FORMAT_CLASSES: dict[str, type] = {
    cls.__dataclass_fields__["type"].default: cls  # type: ignore[attr-defined]
    for cls in Format.__args__  # type: ignore[attr-defined]
}


@dataclass(eq=True)
class StructuralTagItem:
    """A tag of the legacy ``(tags, triggers)`` form: ``begin``, a JSON document valid
    against ``schema`` (a dict, a JSON string or a pydantic model class), then ``end``."""

    begin: str
    schema: Any
    end: str

    @property
    def schema_(self) -> Any:
        """The schema (xgrammar's attribute name)."""
        return self.schema


@dataclass(eq=True)
class StructuralTag:
    """A whole structural tag: ``{"type": "structural_tag", "format": {...}}``."""

    format: Format
    type: str = "structural_tag"

    def to_dict(self) -> dict[str, Any]:
        """The JSON form, as plain dicts and lists."""
        return {"type": self.type, "format": _dump(self.format)}

    def to_json(self) -> str:
        """The JSON form as a string."""
        return json.dumps(self.to_dict())

    def model_dump(self, **_: Any) -> dict[str, Any]:
        """Same as :meth:`to_dict` (pydantic's name)."""
        return self.to_dict()

    def model_dump_json(self, **_: Any) -> str:
        """Same as :meth:`to_json` (pydantic's name)."""
        return self.to_json()

    @classmethod
    def model_validate(cls, obj: Any, **_: Any) -> StructuralTag:
        """:func:`parse_structural_tag` of a dict or tag object (pydantic's name)."""
        if isinstance(obj, (str, bytes, bytearray)):
            raise InvalidStructuralTagError(
                "StructuralTag.model_validate takes a dict; use model_validate_json for text"
            )
        return parse_structural_tag(obj)

    @classmethod
    def model_validate_json(cls, data: str | bytes | bytearray, **_: Any) -> StructuralTag:
        """:func:`parse_structural_tag` of JSON text (pydantic's name); the inverse of
        :meth:`model_dump_json`."""
        return parse_structural_tag(_load_json(data, "StructuralTag"))

    @staticmethod
    def from_json(value: str | dict[str, Any]) -> StructuralTag:
        """Parse the JSON form (a string or a dict); see :func:`parse_structural_tag`."""
        if not isinstance(value, (str, dict)):
            raise InvalidStructuralTagError(
                f"structural_tag must be a JSON str or a dict, got {type(value).__name__}"
            )
        return parse_structural_tag(value)

    @staticmethod
    def from_legacy_structural_tag(tags: list[Any], triggers: list[str]) -> StructuralTag:
        """The legacy ``(tags, triggers)`` form as a triggered-tags structural tag."""
        return legacy_structural_tag(tags, triggers)


# ----------------------------------------------------------------------------- parsing
class _Reader:
    """Reads one JSON object of a format, naming each field by its path in errors."""

    def __init__(self, obj: Any, path: str) -> None:
        if not isinstance(obj, dict):
            raise InvalidStructuralTagError(
                f"{path} must be a JSON object, got {type(obj).__name__}"
            )
        self.obj = obj
        self.path = path
        self.used = {"type"}

    def _get(self, key: str, default: Any) -> Any:
        self.used.add(key)
        if key not in self.obj:
            if default is _REQUIRED:
                raise InvalidStructuralTagError(f"{self.path}.{key} is required")
            return default
        return self.obj[key]

    def text(self, key: str, default: Any = None) -> Any:
        v = self._get(key, _REQUIRED if default is None else default)
        if not isinstance(v, str):
            raise InvalidStructuralTagError(
                f"{self.path}.{key} must be a string, got {type(v).__name__}"
            )
        return v

    def flag(self, key: str, default: bool) -> bool:
        v = self._get(key, default)
        if not isinstance(v, bool):
            raise InvalidStructuralTagError(
                f"{self.path}.{key} must be a boolean, got {type(v).__name__}"
            )
        return v

    def integer(self, key: str, default: Any = None, *, optional: bool = False) -> Any:
        v = self._get(key, default if optional else _REQUIRED)
        if v is None and optional:
            return None
        if not isinstance(v, int) or isinstance(v, bool):
            raise InvalidStructuralTagError(
                f"{self.path}.{key} must be an integer, got {type(v).__name__}"
            )
        return v

    def budget(self, key: str) -> int | None:
        return check_budget(self._get(key, None), f"{self.path}.{key}")

    def texts(self, key: str, *, required: bool = False) -> list[str]:
        v = self._get(key, _REQUIRED if required else [])
        if not isinstance(v, (list, tuple)) or not all(isinstance(x, str) for x in v):
            raise InvalidStructuralTagError(f"{self.path}.{key} must be a list of strings")
        return list(v)

    def nonempty_texts(self, key: str) -> list[str]:
        v = self._get(key, [])
        if not isinstance(v, (list, tuple)) or not all(isinstance(x, str) and x for x in v):
            raise InvalidStructuralTagError(
                f"{self.path}.{key} must be an array of non-empty strings, got {v!r}"
            )
        return list(v)

    def items(self, key: str) -> list[Any]:
        v = self._get(key, _REQUIRED)
        if not isinstance(v, (list, tuple)):
            raise InvalidStructuralTagError(
                f"{self.path}.{key} must be a list, got {type(v).__name__}"
            )
        return list(v)

    def raw(self, key: str) -> Any:
        return self._get(key, _REQUIRED)

    def done(self) -> None:
        extra = sorted(set(self.obj) - self.used)
        if extra:
            raise InvalidStructuralTagError(f"{self.path} has unknown field(s): {extra}")


_REQUIRED = object()


def _as_plain(value: Any) -> Any:
    """Objects with pydantic's ``model_dump`` (xgrammar's models) as their JSON form."""
    if isinstance(value, (_Format, StructuralTag)):
        return value.to_dict()
    if hasattr(value, "model_dump") and not isinstance(value, type):
        return value.model_dump(mode="json", by_alias=True)
    return value


def parse_format(obj: Any, path: str = "format", depth: int = 0) -> Format:
    """Build a format from its JSON form (a dict), a format object, or a pydantic model.

    Raises
    ------
    InvalidStructuralTagError
        A field is missing, has the wrong type, the format type is unknown, or formats
        nest deeper than ``MAX_NESTING_DEPTH``.
    UnsupportedStructuralTagError
        The format type or one of its options is one treegram does not compile.
    """
    if depth > MAX_NESTING_DEPTH:
        raise InvalidStructuralTagError(  # (the path would be as long as the nesting)
            f"structural tag formats nest deeper than MAX_NESTING_DEPTH={MAX_NESTING_DEPTH}"
        )
    r = _Reader(_as_plain(obj), path)
    sub = depth + 1
    kind = r.obj.get("type")
    if kind in _UNSUPPORTED_TYPES:
        raise UnsupportedStructuralTagError(
            f"{path}: format type {kind!r} is not supported by treegram "
            f"({_UNSUPPORTED_TYPES[kind]})"
        )
    if kind not in _FORMAT_CLASSES:
        known = sorted(_FORMAT_CLASSES)
        raise InvalidStructuralTagError(f"{path}.type must be one of {known}, got {kind!r}")
    out: Format
    if kind == "const_string":
        out = ConstStringFormat(value=r.text("value"))
    elif kind == "json_schema":
        out = JSONSchemaFormat(
            json_schema=_schema_field(r, path),
            style=_style(r, path),
            any_order=r.flag("any_order", False),
            max_whitespace_cnt=r.integer("max_whitespace_cnt", None, optional=True),
            excludes=r.nonempty_texts("excludes"),
        )
    elif kind == "qwen_xml_parameter":
        out = QwenXMLParameterFormat(json_schema=_schema_field(r, path))
    elif kind == "any_text":
        out = AnyTextFormat(
            excludes=r.texts("excludes"),
            max_tokens=r.budget("max_tokens"),
            max_chars=r.budget("max_chars"),
        )
    elif kind == "grammar":
        out = GrammarFormat(grammar=r.text("grammar"))
    elif kind == "regex":
        out = RegexFormat(pattern=r.text("pattern"))
    elif kind in ("sequence", "or"):
        elements = [
            parse_format(e, f"{path}.elements[{i}]", sub) for i, e in enumerate(r.items("elements"))
        ]
        out = SequenceFormat(elements=elements) if kind == "sequence" else OrFormat(elements)
    elif kind == "tag":
        out = _parse_tag(r, sub)
    elif kind == "triggered_tags":
        out = TriggeredTagsFormat(
            triggers=r.texts("triggers", required=True),
            tags=_parse_tags(r, sub),
            at_least_one=r.flag("at_least_one", False),
            stop_after_first=r.flag("stop_after_first", False),
            excludes=r.texts("excludes"),
        )
    elif kind == "tags_with_separator":
        out = TagsWithSeparatorFormat(
            tags=_parse_tags(r, sub),
            separator=r.text("separator"),
            at_least_one=r.flag("at_least_one", False),
            stop_after_first=r.flag("stop_after_first", False),
        )
    elif kind == "token":
        out = TokenFormat(token=_token_ref(r.raw("token"), f"{path}.token"))
    elif kind == "exclude_token":
        out = ExcludeTokenFormat(exclude_tokens=_token_refs(r, "exclude_tokens"))
    elif kind == "any_tokens":
        out = AnyTokensFormat(
            exclude_tokens=_token_refs(r, "exclude_tokens"),
            max_tokens=r.integer("max_tokens", None, optional=True),
        )
    elif kind == "token_triggered_tags":
        out = TokenTriggeredTagsFormat(
            trigger_tokens=_token_refs(r, "trigger_tokens", required=True),
            tags=_parse_tags(r, sub),
            exclude_tokens=_token_refs(r, "exclude_tokens"),
            at_least_one=r.flag("at_least_one", False),
            stop_after_first=r.flag("stop_after_first", False),
        )
    elif kind == "token_dispatch":
        pairs = []
        for i, item in enumerate(r.items("rules")):
            if not (isinstance(item, (list, tuple)) and len(item) == 2):
                raise InvalidStructuralTagError(f"{path}.rules[{i}] must be a [token, format] pair")
            token = _token_ref(item[0], f"{path}.rules[{i}][0]")
            pairs.append((token, parse_format(item[1], f"{path}.rules[{i}][1]", sub)))
        out = TokenDispatchFormat(
            rules=pairs, loop=r.flag("loop", True), exclude_tokens=_token_refs(r, "exclude_tokens")
        )
    elif kind in ("optional", "plus", "star"):
        content = parse_format(r.raw("content"), f"{path}.content", sub)
        if kind == "optional":
            out = OptionalFormat(content=content)
        elif kind == "plus":
            out = PlusFormat(content=content)
        else:
            out = StarFormat(content=content)
    elif kind == "repeat":
        out = RepeatFormat(
            min=r.integer("min"),
            max=r.integer("max"),
            content=parse_format(r.raw("content"), f"{path}.content", sub),
        )
    else:  # dispatch
        rules = []
        for i, item in enumerate(r.items("rules")):
            if not (isinstance(item, (list, tuple)) and len(item) == 2):
                raise InvalidStructuralTagError(
                    f"{path}.rules[{i}] must be a [pattern, format] pair"
                )
            if not isinstance(item[0], str):
                raise InvalidStructuralTagError(f"{path}.rules[{i}][0] must be a string")
            rules.append((item[0], parse_format(item[1], f"{path}.rules[{i}][1]", sub)))
        out = DispatchFormat(rules=rules, loop=r.flag("loop", True), excludes=r.texts("excludes"))
    r.done()
    return out


def _style(r: _Reader, path: str) -> str:
    style = r.text("style", "json")
    if style not in JSON_SCHEMA_STYLES:
        raise InvalidStructuralTagError(
            f"{path}.style must be one of {list(JSON_SCHEMA_STYLES)}, got {style!r}"
        )
    return style


def _schema_field(r: _Reader, path: str) -> bool | dict[str, Any]:
    schema = r.raw("json_schema")
    if isinstance(schema, str):  # a schema given as JSON text
        try:
            schema = json.loads(schema)
        except json.JSONDecodeError as exc:
            raise InvalidStructuralTagError(
                f"{path}.json_schema is not valid JSON: {exc}"
            ) from None
    if not isinstance(schema, (bool, dict)):
        raise InvalidStructuralTagError(
            f"{path}.json_schema must be a JSON object or a boolean, got {type(schema).__name__}"
        )
    return schema


def _token_ref(value: Any, path: str) -> TokenRef:
    """A token id (a non-negative int) or a token's text (a non-empty str)."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise InvalidStructuralTagError(
            f"{path} must be an integer token id or a token string, got {type(value).__name__}"
        )
    if isinstance(value, int) and value < 0:
        raise InvalidStructuralTagError(f"{path} must be a non-negative token id, got {value}")
    if isinstance(value, str) and not value:
        raise InvalidStructuralTagError(f"{path} must be a non-empty token string")
    return value


def _token_refs(r: _Reader, key: str, required: bool = False) -> list[TokenRef]:
    v = r._get(key, _REQUIRED if required else [])
    if not isinstance(v, (list, tuple)):
        raise InvalidStructuralTagError(
            f"{r.path}.{key} must be a list of token ids or strings, got {type(v).__name__}"
        )
    return [_token_ref(x, f"{r.path}.{key}[{i}]") for i, x in enumerate(v)]


def _token_side(value: Any, path: str) -> TokenFormat | None:
    """A tag's begin or end given as a token format, else None."""
    plain = _as_plain(value)
    if not isinstance(plain, dict):
        return None
    tr = _Reader(plain, path)
    if tr.obj.get("type") != "token":
        raise InvalidStructuralTagError(f"{path} must be a string or a token format")
    out = TokenFormat(token=_token_ref(tr.raw("token"), f"{path}.token"))
    tr.raw("type")
    tr.done()
    return out


def _parse_tag(r: _Reader, depth: int) -> TagFormat:
    begin = r.raw("begin")
    end = r.raw("end")
    begin_token = _token_side(begin, f"{r.path}.begin")
    end_token = _token_side(end, f"{r.path}.end")
    if begin_token is not None or end_token is not None:
        if begin_token is None and not isinstance(begin, str):
            raise InvalidStructuralTagError(f"{r.path}.begin must be a string or a token format")
        if end_token is None and not isinstance(end, str):
            raise InvalidStructuralTagError(f"{r.path}.end must be a string or a token format")
        content = parse_format(r.raw("content"), f"{r.path}.content", depth)
        return TagFormat(
            begin=begin if begin_token is None else begin_token,
            content=content,
            end=end if end_token is None else end_token,
        )
    if not isinstance(begin, str):
        raise InvalidStructuralTagError(f"{r.path}.begin must be a string")
    if not (isinstance(end, str) or (isinstance(end, list) and end)) or (
        isinstance(end, list) and not all(isinstance(e, str) for e in end)
    ):
        raise InvalidStructuralTagError(
            f"{r.path}.end must be a string or a non-empty list of strings"
        )
    content = parse_format(r.raw("content"), f"{r.path}.content", depth)
    return TagFormat(begin=begin, content=content, end=list(end) if isinstance(end, list) else end)


def _parse_tags(r: _Reader, depth: int) -> list[TagFormat]:
    tags = []
    for i, t in enumerate(r.items("tags")):
        tr = _Reader(_as_plain(t), f"{r.path}.tags[{i}]")
        if tr.obj.get("type", "tag") != "tag":
            raise InvalidStructuralTagError(f"{tr.path}.type must be 'tag'")
        tags.append(_parse_tag(tr, depth))
        tr.done()
    return tags


def parse_structural_tag(value: Any) -> StructuralTag:
    """Build a :class:`StructuralTag` from its JSON form.

    Parameters
    ----------
    value : str, dict, StructuralTag or pydantic model
        ``{"type": "structural_tag", "format": {...}}`` as JSON text or a dict, a
        :class:`StructuralTag`, or an object with pydantic's ``model_dump`` (xgrammar's
        ``StructuralTag``). A bare format object (``TagFormat(...)``) is accepted too.

    Returns
    -------
    StructuralTag
        A fresh, fully checked copy.

    Raises
    ------
    InvalidStructuralTagError
        Malformed JSON, a missing or mistyped field (named by its path).
    UnsupportedStructuralTagError
        A format or option that treegram does not compile.
    """
    if isinstance(value, _Format):
        return StructuralTag(format=parse_format(value))
    if isinstance(value, StructuralTag):
        value = value.to_dict()
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise InvalidStructuralTagError(f"structural_tag is not valid JSON: {exc}") from None
    value = _as_plain(value)
    if not isinstance(value, dict):
        raise InvalidStructuralTagError(
            "structural_tag must be a StructuralTag, a JSON str or a dict, "
            f"got {type(value).__name__}"
        )
    r = _Reader(value, "structural_tag")
    if value.get("type", "structural_tag") != "structural_tag":
        raise InvalidStructuralTagError(
            f"structural_tag.type must be 'structural_tag', got {value.get('type')!r}"
        )
    fmt = parse_format(r.raw("format"), "format")
    r.done()
    return StructuralTag(format=fmt)


def legacy_structural_tag(tags: Any, triggers: Any) -> StructuralTag:
    """The legacy ``(tags, triggers)`` form as a structural tag: triggered tags whose
    contents are the tags' JSON schemas.

    Parameters
    ----------
    tags : list of StructuralTagItem
        Items with ``begin``, ``schema`` (or xgrammar's ``schema_``) and ``end``; dicts with
        those keys are accepted too.
    triggers : list of str

    Raises
    ------
    InvalidStructuralTagError
        A malformed item or trigger list.
    """
    if not isinstance(tags, (list, tuple)):
        raise InvalidStructuralTagError(f"tags must be a list, got {type(tags).__name__}")
    if not isinstance(triggers, (list, tuple)) or not all(isinstance(t, str) for t in triggers):
        raise InvalidStructuralTagError("triggers must be a list of strings")
    out = []
    for i, item in enumerate(tags):
        if isinstance(item, dict):
            begin, schema, end = item.get("begin"), item.get("schema"), item.get("end")
        else:
            begin, end = getattr(item, "begin", None), getattr(item, "end", None)
            # xgrammar's pydantic item names the field schema_ (pydantic owns .schema)
            schema = item.schema_ if hasattr(item, "schema_") else getattr(item, "schema", None)
        if not isinstance(begin, str) or not isinstance(end, str):
            raise InvalidStructuralTagError(f"tags[{i}] must have string begin and end")
        if isinstance(schema, str):
            try:
                schema = json.loads(schema)
            except json.JSONDecodeError as exc:
                raise InvalidStructuralTagError(
                    f"tags[{i}].schema is not valid JSON: {exc}"
                ) from None
        elif isinstance(schema, type) and hasattr(schema, "model_json_schema"):
            schema = schema.model_json_schema()
        if not isinstance(schema, (dict, bool)):
            raise InvalidStructuralTagError(
                f"tags[{i}].schema must be a dict, a JSON str or a pydantic model class"
            )
        out.append(TagFormat(begin=begin, content=JSONSchemaFormat(json_schema=schema), end=end))
    return StructuralTag(format=TriggeredTagsFormat(triggers=list(triggers), tags=out))
