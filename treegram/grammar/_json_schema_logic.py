"""Negation for the JSON Schema frontend (placeholder).

:func:`negate` rewrites ``{"not": s}`` as an equivalent schema without ``not``. This
version covers only what the array code needs in tests (``true``/``false``, ``type`` and
``const`` of a scalar); everything else is refused. The full implementation replaces this
module with the same interface.
"""

from __future__ import annotations

from treegram.errors import UnsupportedSchemaError

__all__ = ["negate"]

_TYPES = ("null", "boolean", "integer", "number", "string", "array", "object")
_IGNORED = frozenset({"title", "description", "default", "examples", "$comment"})


def negate(conv, schema, ptr: str) -> dict | bool:
    """A schema that accepts exactly the instances ``schema`` rejects.

    Parameters
    ----------
    conv : Converter
        The converter (for error reporting).
    schema : dict or bool
        The schema to negate.
    ptr : str
        JSON pointer of ``schema``, for error messages.

    Returns
    -------
    dict or bool

    Raises
    ------
    UnsupportedSchemaError
        ``schema`` has no known equivalent positive negation.
    """
    if schema is True or schema == {}:
        return False
    if schema is False:
        return True
    keys = set(schema) - _IGNORED if isinstance(schema, dict) else set()
    if keys == {"type"}:
        t = schema["type"]
        types = {t} if isinstance(t, str) else set(t)
        if "number" in types:
            types.add("integer")
        if "integer" in types and "number" not in types:
            _refuse(ptr, "the non-integer numbers have no positive schema")
        return {"type": [x for x in _TYPES if x not in types and x != "integer"]}
    if keys == {"const"}:
        return _not_const(schema["const"], ptr)
    _refuse(ptr, "only true/false, type and scalar const can be negated here")
    return True  # not reached


def _not_const(value, ptr: str) -> dict:
    if value is None:
        return {"type": [t for t in _TYPES if t not in ("null", "integer")]}
    others = [t for t in _TYPES if t not in ("boolean", "integer", "number")]
    if isinstance(value, bool):
        return {"anyOf": [{"type": others + ["number"]}, {"const": not value}]}
    if isinstance(value, (int, float)):
        below = {"type": "number", "exclusiveMaximum": value}
        above = {"type": "number", "exclusiveMinimum": value}
        return {"anyOf": [{"type": others + ["boolean"]}, below, above]}
    _refuse(ptr, "only a null, boolean or number const can be negated here")
    return {}  # not reached


def _refuse(ptr: str, why: str) -> None:
    raise UnsupportedSchemaError(f"unsupported JSON Schema keyword 'not' at {ptr or '#'}: "
                                 f"{why}")
