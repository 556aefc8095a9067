"""The JSON serialization envelope shared by ``Grammar``, ``TokenizerInfo`` and
``CompiledGrammar`` (xgrammar's ``serialize_json`` / ``deserialize_json`` names).

Every document is a JSON object with ``"__VERSION__"`` set to
:data:`SERIALIZATION_VERSION` and ``"type"`` naming the class; reading checks both before
any field is used, so a document from another treegram version or for another class fails
with a clear error instead of a half-built object.
"""

from __future__ import annotations

import json
from typing import Any

from treegram.errors import DeserializeFormatError, DeserializeVersionError

__all__ = ["SERIALIZATION_VERSION", "dump_json", "load_json", "get_serialization_version"]

SERIALIZATION_VERSION = "treegram-json-1"


def get_serialization_version() -> str:
    """The version written into every ``serialize_json`` document (xgrammar's name).

    Returns
    -------
    str
        ``"treegram-json-1"``; documents of another version are refused.
    """
    return SERIALIZATION_VERSION


def dump_json(kind: str, fields: dict[str, Any]) -> str:
    """``fields`` as a compact JSON object tagged with ``kind`` and the version."""
    return json.dumps(
        {"__VERSION__": SERIALIZATION_VERSION, "type": kind, **fields}, separators=(",", ":")
    )


def load_json(text: Any, kind: str, required: dict[str, type | tuple[type, ...]]) -> dict:
    """The object of a ``serialize_json`` document of ``kind``, its fields type-checked.

    Raises
    ------
    DeserializeFormatError
        ``text`` is not a str of JSON, not an object, of another type, or a field is
        missing or has the wrong JSON type (the message names it).
    DeserializeVersionError
        The document has another ``__VERSION__``.
    """
    if not isinstance(text, (str, bytes, bytearray)):
        raise DeserializeFormatError(
            f"{kind}.deserialize_json: json_string must be a str, got {type(text).__name__}"
        )
    try:
        obj = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise DeserializeFormatError(f"{kind}.deserialize_json: invalid JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise DeserializeFormatError(f"{kind}.deserialize_json: expected a JSON object")
    version = obj.get("__VERSION__")
    if version != SERIALIZATION_VERSION:
        raise DeserializeVersionError(
            f"{kind}.deserialize_json: __VERSION__ is {version!r}, this treegram reads "
            f"{SERIALIZATION_VERSION!r}"
        )
    if obj.get("type") != kind:
        raise DeserializeFormatError(
            f"{kind}.deserialize_json: the document holds a {obj.get('type')!r}, not a {kind}"
        )
    for name, types in required.items():
        if name not in obj:
            raise DeserializeFormatError(f"{kind}.deserialize_json: field {name!r} is missing")
        value = obj[name]
        # JSON true/false are Python bools, which are ints: only a bool field takes them
        if not isinstance(value, types) or (isinstance(value, bool) and types is not bool):
            raise DeserializeFormatError(
                f"{kind}.deserialize_json: field {name!r} must be "
                f"{getattr(types, '__name__', types)}, got {type(value).__name__}"
            )
    return obj
