"""The numba NFA builder (``_nfa.build_nfa`` over ``FlatIr``) gives exactly the NFA of the
Python builder (``_build._NfaBuilder``): same states, same edges in the same order."""

from __future__ import annotations

import gc
import json
import random

import numpy as np
import pytest
from schema_matching import parsed_grammars, random_ebnf

import treegram
from treegram.automaton import build_automaton
from treegram.automaton._build import _class_sequences, _csr, _NfaBuilder
from treegram.automaton._nfa import FlatIr, build_nfa
from treegram.frontends.json_schema._convert import json_schema_to_ir


def _python_nfa(ir, rule_ids, body, name):
    builder = _NfaBuilder(rule_ids, name)
    start = builder.nfa.new_state()
    accept = builder.nfa.new_state()
    assert (start, accept) == (0, 1)
    builder.build(body, start, accept)
    nfa = builder.nfa
    eps_ptr, eps = _csr(nfa.eps, 1)
    byte_ptr, byte = _csr(nfa.byte_edges, 3)
    ref_ptr, ref = _csr(nfa.ref_edges, 2)
    return (len(nfa.eps), eps_ptr, eps[:, 0], byte_ptr, *byte.T, ref_ptr, *ref.T)


def _assert_same_nfas(ir) -> int:
    rule_ids = {r.name: i for i, r in enumerate(ir.rules)}
    flat = FlatIr(rule_ids, _class_sequences)
    roots = [flat.add(r.body) for r in ir.rules]
    for rule, root in zip(ir.rules, roots, strict=True):
        got = build_nfa(root, *flat.arrays())
        want = _python_nfa(ir, rule_ids, rule.body, rule.name)
        assert got[0] == want[0], rule.name
        for g, w in zip(got[1:], want[1:], strict=True):
            assert g.dtype == np.int32
            assert np.array_equal(g, w), rule.name
    return len(ir.rules)


def test_random_grammars_give_the_same_nfa():
    rng = random.Random(7)
    checked = 0
    for grammar in parsed_grammars(random_ebnf, rng, 150):
        checked += _assert_same_nfas(grammar.ir)
    assert checked > 300


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(30)}},
        {"type": "array", "items": {"type": "number"}, "minItems": 2, "maxItems": 9},
        {"type": "string", "pattern": "^[a-c]{2,5}x$", "maxLength": 4},
        {"anyOf": [{"type": "integer", "minimum": -40, "maximum": 1234}, {"enum": ["é", 1]}]},
    ],
)
def test_json_schema_grammars_give_the_same_nfa(schema):
    assert _assert_same_nfas(json_schema_to_ir(schema)) > 0


def test_rules_the_numba_builder_leaves_to_python_still_raise():
    bad = treegram.ir.GrammarIR((treegram.ir.Rule("root", treegram.ir.RuleRef("nowhere")),), "root")
    with pytest.raises(treegram.errors.UndefinedRuleError, match="nowhere"):
        build_automaton(bad)
    backwards = treegram.ir.GrammarIR(
        (treegram.ir.Rule("root", treegram.ir.Repeat(treegram.ir.Bytes(b"a"), 3, 1)),), "root"
    )
    with pytest.raises(treegram.errors.GrammarError, match="max < min"):
        build_automaton(backwards)


def test_rules_with_equal_bodies_share_one_automaton_but_not_self_calls():
    # c has a's body: built once; a calls itself in tail position and becomes a loop,
    # c's call of a stays a call
    ir = treegram.Grammar.from_ebnf(
        'root ::= a c c2\na ::= "x" a | "y"\nc ::= "x" a | "y"\nc2 ::= "x" a | "y"'
    ).ir
    auto = build_automaton(ir)
    rid = {name: i for i, name in enumerate(auto.rule_names)}

    def calls(rule):
        states = np.flatnonzero(auto.state_rule == rid[rule])
        return sorted(
            auto.rule_names[auto.ref_rule[e]]
            for s in states
            for e in range(auto.ref_ptr[s], auto.ref_ptr[s + 1])
        )

    assert calls("a") == []
    assert calls("c") == ["a"]
    # c2 is a copy of c: the root's call of it goes to c, and no call reaches it any more
    assert calls("root") == ["a", "c", "c"]
    assert int((auto.state_rule == rid["c2"]).sum()) == 1


def test_a_build_leaves_no_cycles_for_the_collector():
    """The flattened IR's indexing function calls itself; once the build is done it is
    dropped, so nothing the build made waits for the cyclic garbage collector."""
    schema = {"type": "object", "properties": {"a": {"type": "array", "items": {"$ref": "#"}}}}
    ir = json_schema_to_ir(json.dumps(schema))
    build_automaton(ir)
    gc.collect()
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        build_automaton(ir)
        assert gc.collect() == 0  # unreachable objects found
    finally:
        if was_enabled:
            gc.enable()
    flat = FlatIr({}, _class_sequences)
    flat.add(treegram.ir.Seq((treegram.ir.Bytes(b"a"), treegram.ir.Bytes(b"b"))))
    flat.close()
    assert flat.add(treegram.ir.Bytes(b"c")) >= 0  # adding again after close still works


def test_class_runs_kept_on_the_nodes_give_the_same_flat_arrays():
    # a class leaf's ranges are kept on its node the first time it is flattened: a
    # second flattening of the same nodes (every later grammar holding them) must give
    # the same arrays as the first, and the NFAs of the Python builder
    schema = {
        "type": "object",
        "properties": {"ab": {"type": "string", "pattern": "^[^a-c]+$"}, "\u00e9": {}},
    }
    ir = json_schema_to_ir(schema, strict_mode=False)
    rule_ids = {r.name: i for i, r in enumerate(ir.rules)}
    flats = []
    for _ in range(2):
        flat = FlatIr(rule_ids, _class_sequences)
        for r in ir.rules:
            flat.add(r.body)
        flats.append(flat.arrays())
    for first, second in zip(*flats, strict=True):
        assert np.array_equal(first, second)
    _assert_same_nfas(ir)
