"""Prompts for a real chat model: JSON documents of a schema, and tool calls.

A structured-output request usually shows the model its schema; the n-gram drafter then
finds the property names in the prompt. :func:`schema_request` writes such a prompt,
:func:`tool_call_request` one whose answer is a ``<tool_call>`` tag around a JSON call of a
function (a structural tag), and :data:`SMOLLM2_EXAMPLES` are the built-in requests of
``treegram demo --model smollm2``.
"""

from __future__ import annotations

import json

from treegram.demo._loop import DemoRequest

__all__ = ["SMOLLM2_EXAMPLES", "schema_request", "tool_call_request"]


def schema_request(schema: dict, *, name: str = "", task: str | None = None) -> DemoRequest:
    """A request for one JSON document of ``schema``, the schema shown in the prompt.

    Parameters
    ----------
    schema : dict
    name : str
    task : str, optional
        What the document should describe (default: a realistic example).
    """
    what = task or "Write a realistic example"
    prompt = (
        f"{what} as a JSON document that follows this JSON Schema. Answer with the JSON "
        f"only.\n\nSchema:\n{json.dumps(schema)}"
    )
    return DemoRequest(prompt, schema, name)


def tool_call_request(
    tool: dict, question: str, *, name: str = "", begin: str = "<tool_call>\n"
) -> DemoRequest:
    """A request answered by one call of ``tool`` (OpenAI style ``{"name", "description",
    "parameters"}``), written ``<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>``.

    The grammar is a structural tag: the tags around a JSON Schema of the call (its name a
    constant, its arguments the tool's parameters).
    """
    call_schema = {
        "type": "object",
        "properties": {"name": {"const": tool["name"]}, "arguments": tool["parameters"]},
        "required": ["name", "arguments"],
        "additionalProperties": False,
    }
    tag = {
        "type": "structural_tag",
        "format": {
            "type": "tag",
            "begin": begin,
            "content": {"type": "json_schema", "json_schema": call_schema},
            "end": "\n</tool_call>",
        },
    }
    prompt = (
        "You can call this tool:\n"
        f"{json.dumps(tool)}\n"
        'Answer with one call, as <tool_call>\n{"name": ..., "arguments": {...}}\n'
        f"</tool_call>\n\n{question}"
    )
    return DemoRequest(prompt, None, name, structural_tag=tag)


_PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "email": {"type": "string", "format": "email"},
        "is_student": {"type": "boolean"},
    },
    "required": ["name", "age", "email", "is_student"],
    "additionalProperties": False,
}

_ORDER = {
    "type": "object",
    "properties": {
        "order_id": {"type": "string", "pattern": "^ORD-[0-9]{4}$"},
        "items": {
            "type": "array",
            "minItems": 1,
            "maxItems": 3,
            "items": {
                "type": "object",
                "properties": {
                    "product": {"type": "string"},
                    "quantity": {"type": "integer", "minimum": 1},
                    "unit_price": {"type": "number"},
                },
                "required": ["product", "quantity", "unit_price"],
                "additionalProperties": False,
            },
        },
        "status": {"enum": ["pending", "shipped", "delivered"]},
    },
    "required": ["order_id", "items", "status"],
    "additionalProperties": False,
}

_WEATHER = {
    "name": "get_weather",
    "description": "Current weather of a city",
    "parameters": {
        "type": "object",
        "properties": {
            "city": {"type": "string"},
            "unit": {"enum": ["celsius", "fahrenheit"]},
        },
        "required": ["city", "unit"],
        "additionalProperties": False,
    },
}

#: The built-in requests of ``treegram demo --model smollm2``.
SMOLLM2_EXAMPLES: tuple[DemoRequest, ...] = (
    schema_request(_PERSON, name="person", task="Describe a fictional university student"),
    schema_request(_ORDER, name="order", task="Write an online order of two books"),
    tool_call_request(_WEATHER, "What is the weather like in Paris, in celsius?", name="weather"),
)
