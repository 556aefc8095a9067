"""Structural tags: xgrammar 0.2.8's format family, as plain dataclasses.

A structural tag describes an output made of constant strings, JSON documents, regular
expressions, EBNF grammars and free text, combined by sequences, alternatives, repetitions
and tags; *triggered tags* allow free text in which a trigger string starts a tag (tool
calls inside a chat answer). Compile one with ``GrammarCompiler.compile_structural_tag`` or
``Grammar.from_structural_tag``; both also take the JSON form (a str or dict) and xgrammar's
own pydantic models.

``get_model_structural_tag(model, tools, tool_choice, ...)`` builds the structural tag of a
model family's tool-call format (``llama``, ``qwen_3``, ``exaone``, ``kimi``,
``deepseek_r1``, ``deepseek_v3_1``, ``harmony``) from OpenAI Chat Completions tools, as
xgrammar 0.2.8 does.

Example
-------
>>> from treegram.structural_tag import JSONSchemaFormat, StructuralTag, TagFormat
>>> from treegram.structural_tag import TriggeredTagsFormat
>>> tag = StructuralTag(format=TriggeredTagsFormat(
...     triggers=["<function="],
...     tags=[TagFormat(begin="<function=get_weather>",
...                     content=JSONSchemaFormat(json_schema={"type": "object"}),
...                     end="</function>")]))
"""

# The formats and the model builders, listed once (in treegram.frontends.structural_tag).
from treegram.frontends.structural_tag import *  # noqa: F403
from treegram.frontends.structural_tag import __all__ as __all__
