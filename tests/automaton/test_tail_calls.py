"""``_nfa.tail_calls`` (a numba walk of the flattened rule bodies) finds the rules each
rule may call last, and ``_build._tail_cycles`` the cycles of two or more such calls that
the builder turns into loops."""

from __future__ import annotations

import numpy as np
import pytest

import treegram
from treegram.automaton._build import _class_sequences, _tail_cycles
from treegram.automaton._nfa import FlatIr, tail_calls


def _flat(source: str):
    ir = treegram.Grammar.from_ebnf(source).ir
    rule_ids = {r.name: i for i, r in enumerate(ir.rules)}
    flat = FlatIr(rule_ids, _class_sequences)
    return ir, rule_ids, flat, [flat.add(r.body) for r in ir.rules]


def _tails(source: str) -> dict[str, list[str]]:
    ir, _, flat, roots = _flat(source)
    ptr, callee = tail_calls(np.array(roots, dtype=np.int64), len(roots), *flat.arrays()[:5])
    names = [r.name for r in ir.rules]
    return {names[r]: [names[c] for c in callee[ptr[r] : ptr[r + 1]]] for r in range(len(names))}


def test_tail_positions():
    tails = _tails(
        'root ::= a b | c ""\n'  # the last item; an empty string after it is skipped
        'a ::= ("x" d)? | c "y"\n'  # an optional item is in tail position; c is not
        "b ::= d+ | (c)\n"  # a repetition of more than one copy is not
        'c ::= "z"\n'
        'd ::= root "w" | (a | b)\n'
    )
    assert tails == {"root": ["b", "c"], "a": ["d"], "b": ["c"], "c": [], "d": ["a", "b"]}


@pytest.mark.parametrize(
    ("source", "cycles"),
    [
        ('root ::= a\na ::= "x" b | "x"\nb ::= "y" a | "y"', {"a": {"b"}, "b": {"a"}}),
        ('root ::= "(" root ")" root | ""', {}),  # a self call alone is not a cycle of two
        ('root ::= a\na ::= b "x"\nb ::= a "y" | "z"', {}),  # calls that are not last
        (
            'root ::= a\na ::= "x" b?\nb ::= "y" c\nc ::= "z" (a | "")\n',
            {"a": {"b", "c"}, "b": {"a", "c"}, "c": {"a", "b"}},
        ),
    ],
)
def test_tail_cycles(source, cycles):
    ir, rule_ids, flat, roots = _flat(source)
    names = [r.name for r in ir.rules]
    got = _tail_cycles(flat, roots)
    # each rule maps to its whole cycle, one set shared by the members
    assert {names[r]: {names[o] for o in cycle - {r}} for r, cycle in got.items()} == cycles
    assert all(r in cycle and got[o] is cycle for r, cycle in got.items() for o in cycle)
