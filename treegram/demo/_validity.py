"""Is a generated output what its request asked for? (``jsonschema`` when installed.)"""

from __future__ import annotations

import json

__all__ = ["check_output"]


def check_output(text: str, request) -> str:
    """``"valid"`` (the document validates against the request's schema, or the tool call
    against its call schema, tags included), ``"valid JSON"`` (no schema), or what is wrong:
    ``"NOT JSON"``, ``"BAD TAGS"``, ``"INVALID: <jsonschema's message>"``.

    Without ``jsonschema`` installed a schema is not checked (``"valid JSON (jsonschema not
    installed)"``).
    """
    schema = request.schema
    if request.structural_tag is not None:
        fmt = request.structural_tag["format"]
        begin, end = fmt["begin"], fmt["end"]
        if not (text.startswith(begin) and text.endswith(end)):
            return "BAD TAGS"
        text = text[len(begin) : len(text) - len(end)]
        schema = fmt["content"]["json_schema"]
    try:
        doc = json.loads(text)
    except ValueError:
        return "NOT JSON"
    if schema is None:
        return "valid JSON"
    try:
        import jsonschema
    except ImportError:  # pragma: no cover - jsonschema is a test dependency
        return "valid JSON (jsonschema not installed)"
    try:
        jsonschema.validate(doc, schema, format_checker=jsonschema.FormatChecker())
    except jsonschema.ValidationError as exc:
        return f"INVALID: {exc.message}"
    except jsonschema.SchemaError as exc:
        return f"SCHEMA ERROR: {exc.message}"
    return "valid"
