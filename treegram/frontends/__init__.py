"""Frontends: grammar text in each supported language to the grammar IR.

EBNF (xgrammar's dialect), regular expressions (ECMA-262 subset), the built-in JSON
grammar, and JSON Schema (the :mod:`treegram.frontends.json_schema` subpackage). Every
frontend produces a :class:`~treegram.ir.GrammarIR`; none depends on another except that
JSON Schema reads ``pattern`` through the regex frontend.
"""

from treegram.frontends._builtin_json import BUILTIN_JSON_EBNF, builtin_json_grammar_ir
from treegram.frontends._ebnf import parse_ebnf
from treegram.frontends._lark import lark_to_ir
from treegram.frontends._regex import regex_to_expr, regex_to_ir
from treegram.frontends.json_schema import (
    JsonSchemaOptions,
    check_remotes,
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
    "downgraded_keywords",
    "check_remotes",
]
