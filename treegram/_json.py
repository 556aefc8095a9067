"""The JSON serialization envelope shared by ``Grammar``, ``TokenizerInfo`` and
``CompiledGrammar`` (xgrammar's ``serialize_json`` / ``deserialize_json`` names).

Every document is a JSON object with ``"__VERSION__"`` set to
:data:`SERIALIZATION_VERSION` and ``"type"`` naming the class; reading checks both before
any field is used, so a document from another treegram version or for another class fails
with a clear error instead of a half-built object.
"""

from __future__ import annotations

import json
import os
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from treegram.errors import (
    ConfigError,
    DeserializeFormatError,
    DeserializeVersionError,
    InvalidJSONError,
)

__all__ = [
    "SERIALIZATION_VERSION",
    "dump_json",
    "load_json",
    "get_serialization_version",
    "get_max_recursion_depth",
    "set_max_recursion_depth",
    "max_recursion_depth",
    "json_text_depth",
    "DEFAULT_MAX_RECURSION_DEPTH",
    "MAX_RECURSION_DEPTH_LIMIT",
]

DEFAULT_MAX_RECURSION_DEPTH = 10_000
MAX_RECURSION_DEPTH_LIMIT = 1_000_000
_DEPTH_ENV = "TREEGRAM_MAX_RECURSION_DEPTH"


def _initial_depth() -> int:
    raw = os.environ.get(_DEPTH_ENV, "").strip()
    if raw.isdigit() and 1 <= int(raw) <= MAX_RECURSION_DEPTH_LIMIT:
        return int(raw)
    return DEFAULT_MAX_RECURSION_DEPTH  # unset or invalid: the default, as xgrammar does


_depth_lock = threading.Lock()
_max_depth = _initial_depth()


def get_max_recursion_depth() -> int:
    """The deepest nesting allowed in the JSON documents treegram reads (xgrammar's name).

    It bounds JSON Schema documents, Lark ``%json`` values and ``deserialize_json`` input,
    counted in JSON levels (each array or object one). Shared by the whole process: set by
    :func:`set_max_recursion_depth`, else by the ``TREEGRAM_MAX_RECURSION_DEPTH`` environment
    variable (an integer in ``[1, 1000000]``), else 10,000.

    Returns
    -------
    int
    """
    return _max_depth


def set_max_recursion_depth(max_recursion_depth: int) -> None:
    """Set :func:`get_max_recursion_depth` for the whole process (thread-safe).

    Raises
    ------
    ConfigError
        ``max_recursion_depth`` is not an int in ``[1, 1000000]`` (also a ``RuntimeError``).
    """
    global _max_depth
    if (
        not isinstance(max_recursion_depth, int)
        or isinstance(max_recursion_depth, bool)
        or not 1 <= max_recursion_depth <= MAX_RECURSION_DEPTH_LIMIT
    ):
        raise ConfigError(
            f"max_recursion_depth must be an int in [1, {MAX_RECURSION_DEPTH_LIMIT}], "
            f"got {max_recursion_depth!r}"
        )
    with _depth_lock:
        _max_depth = max_recursion_depth


@contextmanager
def max_recursion_depth(temp_depth: int) -> Iterator[None]:
    """Set the maximum recursion depth inside a ``with`` block and restore it after.

    Raises
    ------
    ConfigError
        ``temp_depth`` is invalid (nothing is changed).
    """
    previous = get_max_recursion_depth()
    set_max_recursion_depth(temp_depth)
    try:
        yield
    finally:
        set_max_recursion_depth(previous)


# a JSON string literal (escapes included), whose brackets are text, not nesting
_JSON_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)


def json_text_depth(text: str | bytes | bytearray) -> int:
    """The deepest array/object nesting of JSON text (0 for a scalar), without parsing it
    recursively; brackets inside strings do not count."""
    if isinstance(text, str):
        text = text.encode("utf-8", "surrogatepass")
    stripped = _JSON_STRING.sub(b"", bytes(text))
    if not stripped:
        return 0
    arr = np.frombuffer(stripped, dtype=np.uint8)
    step = (arr == ord("[")).astype(np.int64) + (arr == ord("{"))
    step -= (arr == ord("]")).astype(np.int64) + (arr == ord("}"))
    return int(max(np.cumsum(step).max(), 0))


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
    depth = json_text_depth(text)
    if depth > get_max_recursion_depth():
        raise InvalidJSONError(
            f"{kind}.deserialize_json: Maximum recursion depth exceeded: the JSON nests "
            f"{depth} levels, more than max_recursion_depth={get_max_recursion_depth()}"
        )
    try:
        obj = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise InvalidJSONError(f"{kind}.deserialize_json: invalid JSON: {exc}") from None
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
