"""The structural tag frontend: xgrammar 0.2.8's structural tags to grammar IR.

Modules, from the entry points down (each imports only modules below it):

- ``_builtin``, ``_builtin_xml``: the built-in structural tags of models' tool-call formats
  (``get_model_structural_tag``), the XML-argument models in the second;
- ``_convert``: :func:`structural_tag_to_ir`, every format to IR (free text, tags, triggers,
  character budgets); JSON Schema, regex and EBNF contents through their own frontends;
- ``_text``: :func:`structural_tag_text`, the normal-form EBNF text xgrammar prints;
- ``_xml``: the entry of the XML argument styles of ``JSONSchemaFormat``, over
  ``_xml_arguments`` (Qwen, DeepSeek, Kimi and the shared converter), ``_xml_cohere`` and
  ``_xml_minimax_m3``;
- ``_formats``: the data model, the formats as dataclasses and their JSON form.

:mod:`treegram.structural_tag` is the public face: it publishes ``__all__`` below, the formats
and the model builders. The frontend's entry points are exported by name (``x as x``).
"""

from ._builtin import (
    BuiltinToolParam,
    FunctionDefinition,
    FunctionToolParam,
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
from ._convert import MAX_BOUNDED_TEXT_STATES as MAX_BOUNDED_TEXT_STATES
from ._convert import free_text_rules as free_text_rules
from ._convert import structural_tag_from_args as structural_tag_from_args
from ._convert import structural_tag_key as structural_tag_key
from ._convert import structural_tag_to_ir as structural_tag_to_ir
from ._convert import xml_arguments_to_ir as xml_arguments_to_ir
from ._formats import (
    AnyTextFormat,
    AnyTokensFormat,
    ConstStringFormat,
    DispatchFormat,
    ExcludeTokenFormat,
    Format,
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
)
from ._text import structural_tag_text as structural_tag_text

__all__ = [
    "StructuralTag",
    "StructuralTagItem",
    "Format",
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
    "FunctionDefinition",
    "FunctionToolParam",
    "BuiltinToolParam",
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
]
