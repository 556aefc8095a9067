"""Hostile grammar shapes compile to automata that grow linearly, with the same language.

Growth is asserted structurally (states, rules, grammar size), never by timing.
"""

from __future__ import annotations

import itertools
import json
import random

import numpy as np
import pytest
from schema_matching import accepts, compile_schema, parsed_grammars

import treegram
from treegram.automaton import build_automaton
from treegram.automaton._build import _follow_sets, _nullable_rules
from treegram.frontends.json_schema._convert import json_schema_to_ir


def _optional_props(n: int, value: dict | None = None, **extra) -> dict:
    value = value if value is not None else {"type": "integer"}
    return {"type": "object", "properties": {f"p{i}": value for i in range(n)}, **extra}


def _states(schema: dict, **options) -> int:
    return build_automaton(json_schema_to_ir(schema, **options)).n_states


@pytest.mark.parametrize(
    "options", [{}, {"any_whitespace": False}, {"any_whitespace": False, "indent": 2}]
)
@pytest.mark.parametrize("value", [{"type": "integer"}, {"type": "boolean"}, {"type": "string"}])
def test_optional_properties_grow_linearly(options, value):
    s100 = _states(_optional_props(100, value), **options)
    s200 = _states(_optional_props(200, value), **options)
    s400 = _states(_optional_props(400, value), **options)
    assert s200 <= 2.2 * s100, (s100, s200)
    assert s400 <= 2.2 * s200, (s200, s400)


def test_optional_properties_rules_and_text_grow_linearly():
    def size(n):
        ir = json_schema_to_ir(_optional_props(n))
        return len(ir.rules), len(str(treegram.Grammar.from_ir(ir)))

    (r100, t100), (r200, t200) = size(100), size(200)
    assert r200 <= 2.2 * r100 and t200 <= 2.2 * t100, (r100, r200, t100, t200)


def test_mixed_required_and_optional_grow_linearly():
    def schema(n):
        return _optional_props(n, required=[f"p{i}" for i in range(0, n, 3)])

    s100, s200 = _states(schema(100)), _states(schema(200))
    assert s200 <= 2.2 * s100, (s100, s200)


def test_thousand_optional_properties_compile():
    ir = json_schema_to_ir(_optional_props(1000))
    a = build_automaton(ir)
    assert a.n_states < 100 * 1000  # linear: tens of states per property


def _object_text(members: list[tuple[str, int]], compact: bool) -> str:
    sep, colon = (",", ":") if compact else (", ", ": ")
    return "{" + sep.join(f'"{k}"{colon}{v}' for k, v in members) + "}"


@pytest.mark.parametrize(
    "n, extra",
    [
        (n, extra)
        for n in (1, 2, 5)
        for extra in ({}, {"minProperties": 2}, {"maxProperties": 2}, {"required": ["p1"]})
        if n >= 2 or not extra.keys() & {"required", "minProperties"}  # needs p1 / 2 members
    ],
)
def test_optional_properties_language(n, extra):
    """Every subset in declared order is accepted (within the count bounds and with the
    required keys); other orders and duplicates are not."""
    schema = _optional_props(n, **extra)
    cg = compile_schema(schema, any_whitespace=False)
    names = [f"p{i}" for i in range(n)]
    lo, hi = extra.get("minProperties", 0), extra.get("maxProperties", n)
    required = set(extra.get("required", []))
    for k in range(n + 1):
        for subset in itertools.combinations(names, k):
            ok = lo <= k <= hi and required <= set(subset)
            text = _object_text([(name, i) for i, name in enumerate(subset)], compact=False)
            assert accepts(cg, text) == ok, text
    if n >= 2:
        assert not accepts(cg, _object_text([("p1", 1), ("p0", 0)], compact=False))
        assert not accepts(cg, _object_text([("p0", 1), ("p0", 0)], compact=False))


def test_hundreds_of_optional_properties_language():
    cg = compile_schema(_optional_props(300), any_whitespace=True)
    rng = random.Random(0)
    for _ in range(20):
        keep = sorted(rng.sample(range(300), rng.randrange(0, 12)))
        text = "{" + " , ".join(f'"p{i}" :{i}' for i in keep) + "}"
        assert accepts(cg, text), text
        if len(keep) >= 2:
            swapped = keep[:]
            swapped[0], swapped[1] = swapped[1], swapped[0]
            bad = "{" + ",".join(f'"p{i}":{i}' for i in swapped) + "}"
            assert not accepts(cg, bad), bad
    assert not accepts(cg, '{"p300": 1}')


def _chain(n: int, end: str = '"a"') -> treegram.Grammar:
    lines = [f'r{i} ::= r{i + 1} | ""' for i in range(n)] + [f"r{n} ::= {end}"]
    return treegram.Grammar.from_ebnf('root ::= r0 "b"\n' + "\n".join(lines))


def test_nullable_chain_structure():
    n = 3000
    a = build_automaton(_chain(n).ir)
    assert a.n_states <= 4 * n
    names = list(a.rule_names)
    assert all(a.rule_nullable[names.index(f"r{i}")] for i in range(n))
    assert not a.rule_nullable[names.index(f"r{n}")]
    for i in (0, n // 2, n - 1, n):
        row = a.rule_follow[names.index(f"r{i}")]
        assert set(np.flatnonzero(row).tolist()) == {ord("b")}, i


def test_nullable_only_through_a_long_chain():
    """``r_i ::= r_{i+1}`` with only the last rule empty: every rule is nullable."""
    n = 3000
    lines = [f'r{i} ::= r{i + 1} ""' for i in range(n)] + [f'r{n} ::= "" | "x"']
    a = build_automaton(treegram.Grammar.from_ebnf("root ::= r0\n" + "\n".join(lines)).ir)
    assert a.rule_nullable.all()


# -- the worklist fixpoints agree with the textbook ones --------------------------------


def _reference_nullable(rule_start, finals, ref_edges):
    nullable = [False] * len(rule_start)
    changed = True
    while changed:
        changed = False
        for r in range(len(rule_start)):
            if nullable[r]:
                continue
            seen, stack = {rule_start[r]}, [rule_start[r]]
            while stack:
                s = stack.pop()
                if finals[s]:
                    nullable[r] = changed = True
                    break
                for rid, to in ref_edges[s]:
                    if nullable[rid] and to not in seen:
                        seen.add(to)
                        stack.append(to)
    return np.array(nullable, dtype=np.uint8)


def _reference_follow(rule_start, finals, byte_edges, ref_edges, rule_of_state, root, n_real):
    n_states, n_rules = len(finals), len(rule_start)
    first = np.zeros((n_states, 257), dtype=bool)
    for s, edges in enumerate(byte_edges):
        for lo, hi, _ in edges:
            first[s, lo : hi + 1] = True
        first[s, 256] = bool(finals[s])
    changed = True
    while changed:
        changed = False
        for s, edges in enumerate(ref_edges):
            row = first[s].copy()
            for rid, to in edges:
                callee = first[rule_start[rid]]
                row[:256] |= callee[:256]
                if callee[256]:
                    row |= first[to]
            if (row != first[s]).any():
                first[s], changed = row, True
    follow = np.zeros((n_rules, 257), dtype=bool)
    follow[root, 256] = True
    changed = True
    while changed:
        changed = False
        for s, edges in enumerate(ref_edges):
            for rid, to in edges:
                row = follow[rid] | np.append(first[to, :256], False)
                if first[to, 256]:
                    row |= follow[rule_of_state[s]]
                if (row != follow[rid]).any():
                    follow[rid], changed = row, True
    follow[n_real:, :] = True
    return follow[:, :256].astype(np.uint8)


def _edge_lists(ptr, *columns) -> list[list[tuple]]:
    """CSR edges (offsets and one list per field) as a list of edge tuples per state."""
    return [
        list(zip(*(c[ptr[s] : ptr[s + 1]] for c in columns), strict=True))
        for s in range(len(ptr) - 1)
    ]


def _random_grammar(rng: random.Random) -> str:
    n = rng.randrange(1, 7)
    rules = []
    for i in range(n):
        alts = []
        for _ in range(rng.randrange(1, 4)):
            items = []
            for _ in range(rng.randrange(0, 4)):
                kind = rng.random()
                if kind < 0.45:
                    items.append(f"r{rng.randrange(n)}")
                elif kind < 0.8:
                    items.append(json.dumps(rng.choice(["a", "b", "cd", ""])))
                else:
                    items.append(f"r{rng.randrange(n)}*")
            alts.append(" ".join(items) or '""')
        rules.append(f"r{i} ::= " + " | ".join(alts))
    return "root ::= r0\n" + "\n".join(rules)


def test_fixpoints_match_reference_on_random_grammars():
    from treegram.automaton import _build

    rng = random.Random(1234)
    captured = {}

    def spy_nullable(*args):
        captured["nullable"] = args
        captured["nullable_out"] = _nullable_rules(*args)
        return captured["nullable_out"]

    def spy_follow(*args):
        captured["follow"] = args
        return _follow_sets(*args)

    checked = 0
    for grammar in parsed_grammars(_random_grammar, rng, 300):
        orig_n, orig_f = _build._nullable_rules, _build._follow_sets
        _build._nullable_rules, _build._follow_sets = spy_nullable, spy_follow
        try:
            a = build_automaton(grammar.ir)
        finally:
            _build._nullable_rules, _build._follow_sets = orig_n, orig_f
        rule_start, finals, ref_ptr, ref_rule, ref_target, _ = captured["nullable"]
        ref_edges = _edge_lists(ref_ptr, ref_rule, ref_target)
        # the fixpoint over the arrays (a copy the merge left uncalled then takes its
        # representative's nullability: see test_merge)
        reference_nullable = _reference_nullable(rule_start, finals, ref_edges)
        assert np.array_equal(captured["nullable_out"], reference_nullable)
        start, fin, (byte_ptr, lo, hi), _, rule_of_state, root, n_real = captured["follow"]
        byte_edges = _edge_lists(byte_ptr, lo, hi, [0] * len(lo))
        reference = _reference_follow(
            start, fin, byte_edges, ref_edges, rule_of_state, root, n_real
        )
        assert np.array_equal(a.rule_follow, reference)
        checked += 1
    assert checked > 100
