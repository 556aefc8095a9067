"""Rule automata kept across grammars (``_build._RULE_DFAS``): a body that calls nothing or
only its own rule is built once per process and taken by every later grammar with the
same body, its self calls renumbered to the rule's id there. The reference is each grammar
built with the table empty: every array of the automaton must be the same, whatever was
built before and in whatever order."""

from __future__ import annotations

import json

import numpy as np
import pytest

import treegram
import treegram.automaton._build as build
from treegram.automaton import build_automaton

_EBNF = [
    # the same self-recursive body at different rule ids (x, then y after two others)
    'root ::= "a" x\nx ::= "(" x ")" | "b" | "b" x',
    'root ::= "c" y | z\nz ::= "q"\nw ::= "v"\ny ::= "(" y ")" | "b" | "b" y',
    # equal bodies but for the rule they call: never taken for one another
    'root ::= x\nx ::= "(" w ")" x?\nw ::= "a"',
    'root ::= x\nx ::= "(" w ")" x?\nw ::= "b"',
    # a lazy rule, a captured rule calling itself, a rule with a temperature
    'root ::= l "!" c\nl[lazy] ::= [a-z]+ "."\nc[capture="c"] ::= "<" c ">" | "-"',
    'root ::= l "!" c\nl[temperature=0.5] ::= [a-z]+ "."\nc ::= "<" c ">" | "-"',
    # a tail-call cycle of two rules and a call-free rule shared with the others
    'root ::= a\na ::= "x" b | "-"\nb ::= "y" a\nz ::= [a-z]+ "."',
]
_SCHEMAS = [
    {"type": "object", "properties": {"a": {"type": "string"}}},
    {"type": "object", "properties": {"b": {"type": "integer"}, "c": {}}, "required": ["b"]},
    {"type": "array", "items": {"type": "object"}},
    {"$defs": {"n": {"properties": {"next": {"$ref": "#/$defs/n"}}}}, "$ref": "#/$defs/n"},
]


def _grammars() -> list:
    out = [treegram.Grammar.from_ebnf(text) for text in _EBNF]
    out += [
        treegram.Grammar.from_json_schema(json.dumps(s), any_whitespace=True, strict_mode=False)
        for s in _SCHEMAS
    ]
    return [g.ir for g in out]


def _arrays(ir) -> list:
    a = build_automaton(ir)
    return [
        a.rule_names,
        *(
            np.asarray(x).tolist()
            for x in (
                a.rule_start, a.rule_nullable, a.rule_lookahead, a.state_rule, a.state_final,
                a.byte_class, a.trans, a.ref_ptr, a.ref_rule, a.ref_target, a.rule_follow,
            )
        ),
    ]  # fmt: skip


@pytest.mark.parametrize("order", ["forward", "backward"])
def test_kept_rule_automata_give_the_automata_built_afresh(order, monkeypatch):
    irs = _grammars()
    monkeypatch.setattr(build, "_RULE_DFAS", {})
    want = []
    for ir in irs:
        build._RULE_DFAS.clear()
        want.append(_arrays(ir))
    build._RULE_DFAS.clear()
    idx = list(range(len(irs))) if order == "forward" else list(range(len(irs)))[::-1]
    for _ in range(2):  # the second round takes every kept automaton
        for i in idx:
            assert _arrays(irs[i]) == want[i], _EBNF[i] if i < len(_EBNF) else _SCHEMAS[i - 7]
    assert build._RULE_DFAS  # bodies were kept and taken


def test_a_rule_calling_another_rule_is_not_kept(monkeypatch):
    monkeypatch.setattr(build, "_RULE_DFAS", {})
    g = treegram.Grammar.from_ebnf('root ::= x\nx ::= "(" w ")" x?\nw ::= "a"')
    build_automaton(g.ir)
    kept_self = [k for k in build._RULE_DFAS if k[1]]
    # w (calls nothing) and root (calls x only: another rule) : only w is kept
    assert not kept_self
    assert len(build._RULE_DFAS) == 1


def test_the_table_is_bounded(monkeypatch):
    monkeypatch.setattr(build, "_RULE_DFAS", {})
    monkeypatch.setattr(build, "_RULE_DFAS_KEPT", 3)
    for k in range(10):
        build_automaton(treegram.Grammar.from_ebnf(f'root ::= "{"x" * (k + 1)}"').ir)
        assert len(build._RULE_DFAS) <= 3
