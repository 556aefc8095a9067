"""Frontends: grammar text in each supported language to the grammar IR.

EBNF (xgrammar's dialect), regular expressions (ECMA-262 subset), the built-in JSON
grammar, and three subpackages: JSON Schema (:mod:`treegram.frontends.json_schema`), Lark
(:mod:`treegram.frontends.lark`) and structural tags (xgrammar's format family,
:mod:`treegram.frontends.structural_tag`, whose formats and model builders
:mod:`treegram.structural_tag` publishes). Every frontend produces a
:class:`~treegram.ir.GrammarIR`; JSON Schema reads ``pattern`` through the regex frontend,
structural tags embed the JSON Schema, regex and EBNF frontends' grammars, and Lark's
dynamic dispatch lowers to a structural tag's free text.
"""

from treegram.frontends._builtin_json import BUILTIN_JSON_EBNF, builtin_json_grammar_ir
from treegram.frontends._ebnf import parse_ebnf
from treegram.frontends._regex import regex_to_expr, regex_to_ir
from treegram.frontends.json_schema import (
    JsonSchemaOptions,
    check_remotes,
    check_unknown_format,
    checked_options,
    downgraded_keywords,
    json_schema_to_ir,
)
from treegram.frontends.lark import lark_to_ir
from treegram.frontends.structural_tag import (
    MAX_BOUNDED_TEXT_STATES,
    structural_tag_from_args,
    structural_tag_key,
    structural_tag_text,
    structural_tag_to_ir,
    xml_arguments_to_ir,
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
    "checked_options",
    "downgraded_keywords",
    "check_remotes",
    "MAX_BOUNDED_TEXT_STATES",
    "structural_tag_to_ir",
    "structural_tag_text",
    "structural_tag_from_args",
    "structural_tag_key",
    "xml_arguments_to_ir",
]
