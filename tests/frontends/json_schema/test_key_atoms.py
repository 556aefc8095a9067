"""The undeclared keys of an object are taken as the key literals write them (without lone
surrogates) in ``KeySpace.atoms`` itself: one product with the declared names' trie instead
of two. The grammar and its automaton are those of the two products, checked against the
old path (the languages from every string, intersected by the literal builders)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from treegram import Grammar
from treegram.automaton import build_automaton
from treegram.frontends.json_schema import _excludes, _keys, _objects

_SCHEMAS = [
    {"type": "object", "properties": {"ab": {"type": "string"}, "ac": {"type": "integer"}}},
    {"properties": {"a": {}, "\u00e9t\u00e9": {}, "\ud83d\ude00": {}}, "required": ["a"]},
    {"properties": {"x": {}}, "additionalProperties": {"type": "boolean"}},
    {"properties": {"x": {}}, "additionalProperties": False},
    {"properties": {"x": {}}, "patternProperties": {"^y": {"type": "integer"}}},
    {"properties": {"yz": {}}, "patternProperties": {"^y": {}, "z$": {"type": "null"}}},
    {"properties": {"ab": {}}, "propertyNames": {"pattern": "^a"}},
    {"properties": {"ab": {}}, "propertyNames": {"maxLength": 3}},
    {"propertyNames": {"pattern": "^[a-c]+$"}, "minProperties": 1},
    {"type": "object", "properties": {"o": {"properties": {"p": {}, "q": {}}}}},
]


def _old_path(monkeypatch) -> None:
    """The key languages over every string, each intersected where its literal is built."""
    atoms, language = _keys.KeySpace.atoms, _excludes.Exclusions.language
    string_expr = _objects.dfa_string_expr
    monkeypatch.setattr(_keys.KeySpace, "atoms", lambda s, d, writable=False: atoms(s, d))
    monkeypatch.setattr(
        _excludes.Exclusions, "language", lambda s, d, b, writable=False: language(s, d, b)
    )
    monkeypatch.setattr(
        _objects, "dfa_string_expr", lambda c, d, b="str", writable=False: string_expr(c, d, b)
    )


def _compiled(schema) -> tuple:
    g = Grammar.from_json_schema(json.dumps(schema), any_whitespace=True, strict_mode=False)
    a = build_automaton(g.ir)
    arrays = (a.rule_start, a.state_final, a.trans, a.ref_ptr, a.ref_rule, a.ref_target)
    return g.to_ebnf(), a.rule_names, [np.asarray(x).tolist() for x in arrays]


@pytest.mark.parametrize("schema", _SCHEMAS)
def test_key_languages_in_one_product_give_the_same_grammar(schema, monkeypatch):
    new = _compiled(schema)
    with monkeypatch.context() as m:
        _old_path(m)
        old = _compiled(schema)
    assert new == old
