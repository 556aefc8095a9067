"""The JSON Schema frontend: a schema to grammar IR, in xgrammar 0.2.8's output layout.

Modules, from the entry point down (each imports only modules below it):

- ``_convert``: :func:`json_schema_to_ir` and the :class:`Converter` (the conversion context
  every other module receives as ``conv``);
- ``_objects``, ``_arrays``, ``_keys``: objects (declared, pattern and additional
  properties, counts), arrays (``contains``, ``uniqueItems``) and key languages;
- ``_disjoint``: proofs that ``oneOf`` branches are disjoint;
- ``_merge``, ``_logic``: ``allOf`` merged by intersection; ``not``, ``if``/``then``/``else``
  and dependencies rewritten into ``anyOf``/``allOf`` (they call each other through the
  converter);
- ``_validate``: treegram's own validator of a value against a subschema;
- ``_strings``, ``_string_dfa``, ``_dfa_expr``, ``_pattern``, ``_formats``: strings through
  code point DFAs, back to IR; ``_excludes``: strings without excluded texts (xgrammar's
  ``JSONSchemaFormat.excludes``);
- ``_lex``, ``_fraction``, ``_share``, ``_refs``, ``_check``: lexemes and number ranges, rule
  sharing, ``$ref`` resolution, schema shape checks;
- ``_keywords``, ``_options``, ``_context``: the keyword vocabulary every module shares;
  the options, listed once; :class:`ConversionContext`, the type of ``conv`` below the
  converter.
"""

from treegram.frontends.json_schema._convert import (
    check_unknown_format,
    checked_options,
    downgraded_keywords,
    json_schema_to_ir,
)
from treegram.frontends.json_schema._dfa_expr import MAX_GRAMMAR_STATES, dfa_expr
from treegram.frontends.json_schema._formats import format_expr
from treegram.frontends.json_schema._options import JsonSchemaOptions
from treegram.frontends.json_schema._refs import check_remotes

__all__ = [
    "json_schema_to_ir",
    "JsonSchemaOptions",
    "check_unknown_format",
    "checked_options",
    "downgraded_keywords",
    "check_remotes",
    "dfa_expr",
    "MAX_GRAMMAR_STATES",
    "format_expr",
]
