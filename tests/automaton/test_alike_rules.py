"""Rules whose bodies are equal but for the rules they call (``_build``'s ``alike_dfa``):
a later one takes an earlier one's DFA with its calls mapped, when both call their rules in
the same pattern (``_nfa.call_patterns``). The reference is every grammar built with each
body's key its own (nothing taken): every array of the automaton must be the same."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

import treegram
import treegram.automaton._build as build
from treegram.automaton import build_automaton
from treegram.automaton._nfa import call_patterns

_CHAIN = "root ::= s0\n" + "".join(f's{i} ::= "" | [a-z] s{i + 1}\n' for i in range(9))
_CHAIN += 's9 ::= "" | [a-z]\n'
# each link also calls one rule defined first (a lower id: the same rank every time)
_PAIR = 'root ::= s0\nw ::= "-"\n'
_PAIR += "".join(f's{i} ::= "" | [a-z] s{i + 1} | "." w s{i + 1}\n' for i in range(6))
_PAIR += 's6 ::= "!"\n'

_EBNF = [
    _CHAIN,
    _PAIR,
    # equal bodies calling their rules in the same order, and in the other order
    'root ::= a b c\na ::= "x" p q\nb ::= "x" r s\nc ::= "x" s r\n'
    'p ::= "1"\nq ::= "2"\nr ::= "3"\ns ::= "4"',
    # the same rule at two calls of one body, different rules at those of the other
    'root ::= a b\na ::= "(" p ")" p\nb ::= "(" p ")" q\np ::= "1"\nq ::= "2"',
    # equal bodies, one of which calls itself in tail position (a loop there)
    'root ::= a c\na ::= "(" b ")" c | "z"\nc ::= "(" b ")" c | "z"\nb ::= "q"',
    # (a calls b and d, c calls b and itself: the same pattern, ids b < d and b < c)
    'root ::= a c\nb ::= "q"\na ::= "(" b ")" d | "z"\nc ::= "(" b ")" c | "z"\nd ::= "y"',
]
_DATE = {"type": "string", "format": "date-time"}
_SCHEMAS = [
    {
        "type": "object",
        "properties": {
            "a": {"type": "object", "properties": {"start": _DATE, "end": _DATE}},
            "b": {"type": "object", "properties": {"start": _DATE, "end": _DATE}},
            "c": {"type": "array", "items": {"type": "object", "properties": {"end": _DATE}}},
        },
    },
    {"type": "string", "pattern": "^[a-z]+(-[a-z0-9]+)*$", "maxLength": 40},
    {"type": "array", "items": {"type": "string", "pattern": "^[a-z]{2}-[0-9]+$"}, "maxItems": 9},
]


def _irs() -> list:
    out = [treegram.Grammar.from_ebnf(text).ir for text in _EBNF]
    for schema in _SCHEMAS:
        text = json.dumps(schema)
        out.append(treegram.Grammar.from_json_schema(text, any_whitespace=True).ir)
    return out


def _own_keys(*args):
    """``node_keys`` with a key of its own per node: no body is taken for another."""
    keys, calls = _node_keys(*args)
    keys = np.zeros_like(keys)
    keys[:, 0] = np.arange(keys.shape[0], dtype=np.uint64)
    return keys, calls


_node_keys = build.node_keys


def _same(got, want) -> None:
    for field in dataclasses.fields(want):
        g, w = getattr(got, field.name), getattr(want, field.name)
        if isinstance(w, np.ndarray):
            assert g.dtype == w.dtype and np.array_equal(g, w), field.name
        else:
            assert g == w, field.name


@pytest.mark.parametrize("index", range(len(_EBNF) + len(_SCHEMAS)))
def test_taken_automata_match_the_ones_built(index, monkeypatch):
    ir = _irs()[index]
    monkeypatch.setattr(build, "_RULE_DFAS", {})
    built = []
    kernel = build.rule_kernel

    def counted(what, *args):
        built.append(what)
        return kernel(what, *args)

    monkeypatch.setattr(build, "rule_kernel", counted)
    got = build_automaton(ir)
    n_taken = len(built)
    build._RULE_DFAS.clear()
    built.clear()
    monkeypatch.setattr(build, "node_keys", _own_keys)
    want = build_automaton(ir)
    _same(got, want)
    if index in (0, 1, 2):  # some rule was taken, not built
        assert n_taken < len(built)


def test_call_patterns_rank_the_calls_in_body_order():
    ir = treegram.Grammar.from_ebnf(_EBNF[2]).ir
    rule_ids = {r.name: i for i, r in enumerate(ir.rules)}
    flat = build.FlatIr(rule_ids, build._class_sequences)
    roots = np.array([flat.add(r.body) for r in ir.rules], dtype=np.int64)
    flat.close()
    arrays = flat.arrays()
    status, ptr, ranks, rule_ptr, rules = call_patterns(roots, 1 << 20, *arrays[:5], arrays[9])
    got = {
        r.name: (ranks[ptr[i] : ptr[i + 1]].tolist(), rules[rule_ptr[i] : rule_ptr[i + 1]].tolist())
        for i, r in enumerate(ir.rules)
    }
    ids = rule_ids
    assert got["a"] == ([0, 1], [ids["p"], ids["q"]])
    assert got["b"] == ([0, 1], [ids["r"], ids["s"]])
    assert got["c"] == ([1, 0], [ids["r"], ids["s"]])
    assert got["p"] == ([], [])
    assert not status.any()
    # a body calling its own rule is marked, one not walked too
    ir = treegram.Grammar.from_ebnf(_EBNF[4]).ir
    flat = build.FlatIr({r.name: i for i, r in enumerate(ir.rules)}, build._class_sequences)
    roots = np.array([flat.add(r.body) for r in ir.rules], dtype=np.int64)
    flat.close()
    arrays = flat.arrays()
    roots[0] = -1
    status = call_patterns(roots, 1 << 20, *arrays[:5], arrays[9])[0]
    assert status.tolist() == [2, 0, 1, 0]
    assert call_patterns(roots, 0, *arrays[:5], arrays[9])[0].tolist() == [2, 2, 2, 2]
