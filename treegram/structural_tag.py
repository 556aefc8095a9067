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

from treegram.frontends.structural_tag import (
    AnyTextFormat,
    AnyTokensFormat,
    BuiltinToolParam,
    ConstStringFormat,
    DispatchFormat,
    ExcludeTokenFormat,
    Format,
    FunctionDefinition,
    FunctionToolParam,
    GrammarFormat,
    JSONSchemaFormat,
    OptionalFormat,
    OrFormat,
    PlusFormat,
    QwenXMLParameterFormat,
    RegexFormat,
    RepeatFormat,
    SequenceFormat,
    StarFormat,
    StructuralTag,
    StructuralTagItem,
    TagFormat,
    TagsWithSeparatorFormat,
    TokenDispatchFormat,
    TokenFormat,
    TokenTriggeredTagsFormat,
    TriggeredTagsFormat,
    builtin_structural_tag_models,
    get_builtin_structural_tag,
    get_cohere_structural_tag,
    get_deepseek_r1_structural_tag,
    get_deepseek_v3_1_structural_tag,
    get_deepseek_v3_2_structural_tag,
    get_deepseek_v4_1_structural_tag,
    get_deepseek_v4_structural_tag,
    get_exaone_structural_tag,
    get_glm_4_7_structural_tag,
    get_harmony_structural_tag,
    get_kimi_k3_structural_tag,
    get_kimi_structural_tag,
    get_llama_structural_tag,
    get_mimo_structural_tag,
    get_minimax_m3_structural_tag,
    get_minimax_structural_tag,
    get_model_structural_tag,
    get_qwen_3_5_structural_tag,
    get_qwen_3_coder_structural_tag,
    get_qwen_3_structural_tag,
    normalize_tool_choice,
    register_model_structural_tag,
)

__all__ = [
    "ConstStringFormat",
    "JSONSchemaFormat",
    "AnyTextFormat",
    "GrammarFormat",
    "RegexFormat",
    "SequenceFormat",
    "OrFormat",
    "TagFormat",
    "TriggeredTagsFormat",
    "TagsWithSeparatorFormat",
    "OptionalFormat",
    "PlusFormat",
    "StarFormat",
    "RepeatFormat",
    "DispatchFormat",
    "QwenXMLParameterFormat",
    "TokenFormat",
    "ExcludeTokenFormat",
    "AnyTokensFormat",
    "TokenTriggeredTagsFormat",
    "TokenDispatchFormat",
    "Format",
    "StructuralTagItem",
    "StructuralTag",
    "get_model_structural_tag",
    "get_llama_structural_tag",
    "get_qwen_3_structural_tag",
    "get_exaone_structural_tag",
    "get_kimi_structural_tag",
    "get_deepseek_r1_structural_tag",
    "get_deepseek_v3_1_structural_tag",
    "get_harmony_structural_tag",
    "get_qwen_3_5_structural_tag",
    "get_qwen_3_coder_structural_tag",
    "get_mimo_structural_tag",
    "get_kimi_k3_structural_tag",
    "get_deepseek_v3_2_structural_tag",
    "get_deepseek_v4_structural_tag",
    "get_deepseek_v4_1_structural_tag",
    "get_minimax_structural_tag",
    "get_minimax_m3_structural_tag",
    "get_glm_4_7_structural_tag",
    "get_cohere_structural_tag",
    "get_builtin_structural_tag",
    "normalize_tool_choice",
    "register_model_structural_tag",
    "builtin_structural_tag_models",
    "FunctionDefinition",
    "FunctionToolParam",
    "BuiltinToolParam",
]
