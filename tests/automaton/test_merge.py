"""Calls of rules with equal automata go to one of them, and nothing else changes.

The reference is the same grammar built with the merge turned off: the masks at every
prefix of every text must be equal, and only the set of rules the root reaches shrinks.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from schema_matching import byte_compiler

import treegram
import treegram.automaton._merge as merge
from treegram.automaton import build_automaton
from treegram.ir import Bytes, GrammarIR, Rule, RuleRef, Seq

# b is a copy of a, d of c (equal only through the calls: a and b call themselves);
# e differs from a only in its callee's text, two calls down.
COPIES = """
root ::= "[" (a | b | e) "]"
a ::= "x" a | "y" c
b ::= "x" b | "y" d
e ::= "x" e | "y" f
c ::= "z"
d ::= "z"
f ::= "w"
"""


# The shape behind 130 copies of an object's member list in one MaskBench schema
# (Github_medium---o10566): a recursive value whose oneOf holds objects keyed by "$..."
# beside an object whose keys may not start with "$".
def _keyed(key: str, value: dict) -> dict:
    return {
        "type": "object",
        "properties": {key: value},
        "required": [key],
        "additionalProperties": False,
    }


RECURSIVE_SCHEMA = {
    "definitions": {
        "doc": {
            "type": "object",
            "patternProperties": {"^[^$]": {"$ref": "#/definitions/value"}},
            "additionalProperties": False,
        },
        "value": {
            "oneOf": [
                {"type": "string"},
                {"type": "integer"},
                _keyed("$a", {"type": "integer"}),
                _keyed("$b", {"type": "string"}),
                _keyed("$c", {"type": "string"}),
                {"type": "array", "items": {"$ref": "#/definitions/value"}},
                {"$ref": "#/definitions/doc"},
            ]
        },
    },
    "allOf": [{"$ref": "#/definitions/doc"}, {"required": ["_id"]}],
}

RECURSIVE_TEXTS = [
    '{"_id": {"$b": "5f9f"}, "a": {"b": [1, {"c": "d"}], "e": {}}, "f": [[], "g"]}',
    '{"_id":1,"x":{"y":{"z":{"$a":0}}}}',
    '{"_id": {"$c": "1", "$a": 2}}',  # rejected inside the object
    '{"a": {"$b": 1}}',  # rejected at the key
]


def _reached_rules(a) -> set[int]:
    """The rules the root reaches through calls."""
    start, ptr, callee = a.rule_start, a.ref_ptr, a.ref_rule
    bounds = [*start.tolist(), a.n_states]
    seen, todo = {a.root_rule}, [a.root_rule]
    while todo:
        r = todo.pop()
        for s in range(bounds[r], bounds[r + 1]):
            for e in range(ptr[s], ptr[s + 1]):
                c = int(callee[e])
                if c not in seen:
                    seen.add(c)
                    todo.append(c)
    return seen


def _masks(grammar: treegram.Grammar, texts: list[str]) -> list[list[bytes]]:
    """The bitmask before every byte of every text (and after its last), as far as the
    matcher accepts it, from a fresh compile of ``grammar`` over the byte vocabulary."""
    compiler = treegram.GrammarCompiler(byte_compiler().tokenizer_info, cache_enabled=False)
    cg = compiler.compile_grammar(grammar)
    out = []
    for text in texts:
        m = treegram.GrammarMatcher(cg)
        rows = []
        bitmask = treegram.allocate_token_bitmask(1, cg.tokenizer_info.vocab_size)
        for b in [*text.encode(), None]:
            m.fill_next_token_bitmask(bitmask)
            rows.append(bitmask.numpy().tobytes())
            if b is None or not m.accept_token(b):
                break
        out.append(rows)
    return out


def _unmerged(monkeypatch: pytest.MonkeyPatch, build):
    with monkeypatch.context() as patch:
        patch.setattr(merge, "MAX_ROUNDS", 0)  # no round: the merge gives up
        return build()


def _reached_names(monkeypatch: pytest.MonkeyPatch, grammar) -> tuple[set, set]:
    """The names of the rules reached from the root with the merge and without it."""
    names = build_automaton(grammar.ir).rule_names
    merged = {names[r] for r in _reached_rules(build_automaton(grammar.ir))}
    plain = {
        names[r]
        for r in _reached_rules(_unmerged(monkeypatch, lambda: build_automaton(grammar.ir)))
    }
    return merged, plain


def test_copies_are_called_once(monkeypatch):
    grammar = treegram.Grammar.from_ebnf(COPIES)
    merged, plain = _reached_names(monkeypatch, grammar)
    assert plain == {"root", "a", "b", "c", "d", "e", "f"}
    assert merged == {"root", "a", "c", "e", "f"}  # e's callee differs: e stays apart


def test_masks_equal_with_and_without_the_merge(monkeypatch):
    texts = ["[xxyz]", "[yz]", "[xyw]", "[xxxyw]", "[xyq]", "[z]"]
    grammar = treegram.Grammar.from_ebnf(COPIES)
    assert _masks(grammar, texts) == _unmerged(monkeypatch, lambda: _masks(grammar, texts))


RECURSIVE_COPIES = r"""
root ::= "{" a "}"
a ::= "[" (b | "x") ("," b)* "]"
b ::= "[" (a | "x") ("," a)* "]"
"""


def test_recursive_copies_are_called_once(monkeypatch):
    """Rules equal only through each other (a calls b, b calls a) are one rule."""
    grammar = treegram.Grammar.from_ebnf(RECURSIVE_COPIES)
    merged, plain = _reached_names(monkeypatch, grammar)
    assert plain == {"root", "a", "b"}
    assert merged == {"root", "a"}
    texts = ["{[x]}", "{[[x],[[x]]]}", "{[x,[x,x]]}", "{[[x]", "{[y]}"]
    assert _masks(grammar, texts) == _unmerged(monkeypatch, lambda: _masks(grammar, texts))


def test_recursive_schema_masks_equal_with_and_without_the_merge(monkeypatch):
    # The JSON Schema frontend shares the derived schemas it meets again, so this schema's
    # grammar has no equal rules left for the merge (10 rules reached either way; before the
    # frontend shared them, 17 of 42): the merge must still change no mask.
    grammar = treegram.Grammar.from_json_schema(json.dumps(RECURSIVE_SCHEMA))
    merged = _reached_rules(build_automaton(grammar.ir))
    plain = _reached_rules(_unmerged(monkeypatch, lambda: build_automaton(grammar.ir)))
    assert len(merged) <= len(plain)
    masks = _masks(grammar, RECURSIVE_TEXTS)
    assert masks == _unmerged(monkeypatch, lambda: _masks(grammar, RECURSIVE_TEXTS))
    assert [len(rows) for rows in masks[:2]] == [len(t) + 1 for t in RECURSIVE_TEXTS[:2]]
    assert [len(rows) for rows in masks[2:]] != [len(t) + 1 for t in RECURSIVE_TEXTS[2:]]


def test_rules_the_matcher_reads_by_id_keep_their_calls():
    body = Seq((Bytes(b"x"),))
    ir = GrammarIR(
        (
            Rule("root", Seq((RuleRef("plain"), RuleRef("copy"), RuleRef("captured")))),
            Rule("plain", body),
            Rule("copy", body),
            Rule("captured", body, capture="value"),
        ),
        "root",
    )
    a = build_automaton(ir)
    reached = {a.rule_names[r] for r in _reached_rules(a)}
    assert reached == {"root", "plain", "captured"}


def test_a_chain_longer_than_the_rounds_keeps_every_rule(monkeypatch):
    # r0 .. r9 equal but for the end of the chain: telling them apart takes 10 rounds
    rules = "\n".join(f'r{i} ::= "x" r{i + 1}' for i in range(9))
    ebnf = (
        f'root ::= r0 | s0\n{rules}\nr9 ::= "y"\n'
        + "\n".join(f's{i} ::= "x" s{i + 1}' for i in range(9))
        + '\ns9 ::= "z"\n'
    )
    grammar = treegram.Grammar.from_ebnf(ebnf)
    monkeypatch.setattr(merge, "MAX_ROUNDS", 5)
    assert len(_reached_rules(build_automaton(grammar.ir))) == 21
    monkeypatch.setattr(merge, "MAX_ROUNDS", 64)
    assert len(_reached_rules(build_automaton(grammar.ir))) == 21  # no two are equal


def test_weights_are_the_seeded_draw_of_each_length(monkeypatch):
    monkeypatch.setattr(merge, "_WEIGHTS", merge._WEIGHTS[:0])
    for n in (1, 5, 300, 40, 1000, 257, 3000):  # grown, read shorter, grown again
        want = np.random.default_rng(0x5EED).integers(1, 2**63, n, dtype=np.uint64)
        got = merge._weights(n)
        assert got.dtype == np.uint64 and np.array_equal(got, want), n
    assert not merge._weights(3).flags.writeable  # shared by every build


NULLABLE_COPIES = """
root ::= "[" a "," b "]"
a ::= ("x" "y" a)?
b ::= ("x" "y" b)?
"""


def _states_of(a, name: str) -> int:
    rid = a.rule_names.index(name)
    return int(np.count_nonzero(a.state_rule == rid))


def test_copies_no_call_reaches_have_one_state():
    a = build_automaton(treegram.Grammar.from_ebnf(COPIES).ir)
    assert {n: _states_of(a, n) for n in ("b", "d")} == {"b": 1, "d": 1}
    assert not a.state_final[a.state_rule == a.rule_names.index("d")].any()
    assert _states_of(a, "a") > 1 and _states_of(a, "c") > 1 and _states_of(a, "e") > 1


def test_copies_keep_their_nullability(monkeypatch):
    grammar = treegram.Grammar.from_ebnf(NULLABLE_COPIES)
    a = build_automaton(grammar.ir)
    plain = _unmerged(monkeypatch, lambda: build_automaton(grammar.ir))
    assert _states_of(a, "b") == 1 < _states_of(plain, "b")
    assert np.array_equal(a.rule_nullable, plain.rule_nullable)
    assert a.rule_nullable[a.rule_names.index("b")] == 1
    texts = ["[,]", "[xyxy,xy]", "[x,y]", "[,xyx]"]
    assert _masks(grammar, texts) == _unmerged(monkeypatch, lambda: _masks(grammar, texts))
