"""Frontends: grammar text in each supported language to the grammar IR.

EBNF (xgrammar's dialect), regular expressions (ECMA-262 subset), the built-in JSON
grammar, JSON Schema (the :mod:`treegram.frontends.json_schema` subpackage) and structural
tags (xgrammar's format family). Every frontend produces a :class:`~treegram.ir.GrammarIR`;
JSON Schema reads ``pattern`` through the regex frontend, and structural tags embed the
JSON Schema, regex and EBNF frontends' grammars.
"""

from treegram.frontends._builtin_json import BUILTIN_JSON_EBNF, builtin_json_grammar_ir
from treegram.frontends._builtin_structural_tag import (
    BuiltinToolParam,
    FunctionDefinition,
    FunctionToolParam,
    builtin_structural_tag_models,
    get_builtin_structural_tag,
    get_model_structural_tag,
    normalize_tool_choice,
    register_model_structural_tag,
)
from treegram.frontends._ebnf import parse_ebnf
from treegram.frontends._lark import lark_to_ir
from treegram.frontends._regex import regex_to_expr, regex_to_ir
from treegram.frontends._structural_tag import (
    structural_tag_from_args,
    structural_tag_key,
    structural_tag_to_ir,
)
from treegram.frontends._structural_tag_formats import (
    AnyTextFormat,
    ConstStringFormat,
    DispatchFormat,
    Format,
    GrammarFormat,
    JSONSchemaFormat,
    OptionalFormat,
    OrFormat,
    PlusFormat,
    RegexFormat,
    RepeatFormat,
    SequenceFormat,
    StarFormat,
    StructuralTag,
    StructuralTagItem,
    TagFormat,
    TagsWithSeparatorFormat,
    TriggeredTagsFormat,
    parse_structural_tag,
)
from treegram.frontends.json_schema import (
    JsonSchemaOptions,
    check_remotes,
    check_unknown_format,
    downgraded_keywords,
    json_schema_to_ir,
)

__all__ = [
    "parse_ebnf",
    "lark_to_ir",
    "regex_to_ir",
    "regex_to_expr",
    "builtin_json_grammar_ir",
    "BUILTIN_JSON_EBNF",
    "json_schema_to_ir",
    "JsonSchemaOptions",
    "check_unknown_format",
    "downgraded_keywords",
    "check_remotes",
    "structural_tag_to_ir",
    "structural_tag_from_args",
    "structural_tag_key",
    "parse_structural_tag",
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
    "FunctionDefinition",
    "FunctionToolParam",
    "BuiltinToolParam",
    "get_model_structural_tag",
    "get_builtin_structural_tag",
    "normalize_tool_choice",
    "register_model_structural_tag",
    "builtin_structural_tag_models",
]
