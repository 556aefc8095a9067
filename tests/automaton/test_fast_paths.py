"""The vectorized, fused or inlined paths of the automaton build against their plain
versions: the per-rule array concatenation (``_build._concat_ptr``, ``_concat_shifted``),
the byte classes (``_build._byte_classes``), the walk of ``split_long_repeats``
(``_repeats._Splitter.rewrite``) and the one-call rule DFA (``_rule_dfa.rule_dfa``)."""

from __future__ import annotations

import dataclasses
import json
import random
from dataclasses import replace

import numpy as np
import pytest
from schema_matching import random_ebnf

import treegram
from treegram.automaton import _build, build_automaton
from treegram.automaton._build import (
    _byte_classes,
    _class_sequences,
    _concat_ptr,
    _concat_shifted,
)
from treegram.automaton._nfa import FlatIr, build_nfa
from treegram.automaton._repeats import _Splitter
from treegram.automaton._rule_dfa import (
    DFA_OF_BODY,
    DFA_OF_NFA,
    NFA_OF_BODY,
    pack_nfa,
    rule_dfa,
    unpack_nfa,
)
from treegram.automaton._subset import determinize
from treegram.frontends.json_schema._convert import json_schema_to_ir
from treegram.ir import Choice, Expr, GrammarIR, Repeat, Seq


def _plain_concat_ptr(ptrs):
    out = np.zeros(sum(p.shape[0] - 1 for p in ptrs) + 1, dtype=np.int32)
    at, total = 0, 0
    for p in ptrs:
        n = p.shape[0] - 1
        out[at + 1 : at + n + 1] = p[1:] + total
        at += n
        total += int(p[-1])
    return out


@pytest.mark.parametrize("seed", range(20))
def test_concat_matches_per_rule_loops(seed):
    rng = np.random.default_rng(seed)
    n_parts = int(rng.integers(1, 40))
    ptrs, arrays = [], []
    for _ in range(n_parts):
        n_states = int(rng.integers(1, 6))  # a DFA has a state at least
        counts = rng.integers(0, 4, n_states)
        ptr = np.zeros(n_states + 1, dtype=np.int32)
        np.cumsum(counts, out=ptr[1:])
        ptrs.append(ptr)
        arrays.append(rng.integers(0, 50, int(ptr[-1])).astype(np.int32))
    got = _concat_ptr(ptrs)
    want = _plain_concat_ptr(ptrs)
    assert got.dtype == want.dtype and np.array_equal(got, want)
    shifts = np.cumsum([0] + [len(p) - 1 for p in ptrs])[:-1].astype(np.int64)
    got = _concat_shifted(arrays, shifts)
    want = np.concatenate([a + np.int32(s) for a, s in zip(arrays, shifts, strict=True)])
    assert got.dtype == want.dtype and np.array_equal(got, want)


def _plain_byte_classes(lo, hi):
    """Byte classes by their definition: bytes ``b`` and ``b + 1`` share a class unless
    some edge starts at ``b + 1`` or ends at ``b``."""
    starts, ends = set(lo.tolist()), set(hi.tolist())
    out, k = [0], 0
    for b in range(1, 256):
        if b in starts or b - 1 in ends:
            k += 1
        out.append(k)
    return out, k + 1


@pytest.mark.parametrize("seed", range(20))
def test_byte_classes_match_their_definition(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 60)) if seed else 0  # seed 0: no edge, one class
    lo = rng.integers(0, 256, n).astype(np.int32)
    hi = np.minimum(lo + rng.integers(0, 40, n), 255).astype(np.int32)
    if seed == 1:  # the bounds of the byte range
        lo, hi = np.array([0, 255], dtype=np.int32), np.array([0, 255], dtype=np.int32)
    got, n_classes = _byte_classes(lo, hi)
    want, want_n = _plain_byte_classes(lo, hi)
    assert got.dtype == np.int32 and got.tolist() == want
    assert n_classes == want_n


class _PlainSplitter(_Splitter):
    """The splitter with the walk written plainly: every node through the memo."""

    def rewrite(self, expr: Expr) -> Expr:
        got = self.memo.get(id(expr))
        if got is None:
            got = self.memo[id(expr)] = self._plain(expr)
        return got

    def _plain(self, expr: Expr) -> Expr:
        if isinstance(expr, (Seq, Choice)):
            items = tuple(self.rewrite(e) for e in expr.items)
            if all(a is b for a, b in zip(items, expr.items, strict=True)):
                return expr
            return type(expr)(items)
        if not isinstance(expr, Repeat):
            return expr
        return self._rewrite(expr)


def _split(ir: GrammarIR, cls) -> tuple[list, list]:
    extra: list = []
    splitter = cls({r.name for r in ir.rules}, extra)
    out = []
    for rule in ir.rules:
        body = rule.body if rule.lazy else splitter.rewrite(rule.body)
        out.append(rule if body is rule.body else replace(rule, body=body))
    return out, extra


_SCHEMAS = [
    {"type": "string", "maxLength": 300},
    {"type": "array", "items": {"type": "integer"}, "minItems": 70, "maxItems": 200},
    {
        "type": "object",
        "properties": {
            "a": {"type": "string", "minLength": 65, "maxLength": 1000},
            "b": {"type": "array", "items": {"type": "string", "maxLength": 100}},
            "c": {"type": "string", "pattern": "^[a-z]{2,5}(-[0-9]{1,100})?$"},
            "d": {"$ref": "#/properties/b"},
            "e": {"type": "number"},
        },
        "required": ["a", "c"],
    },
    {"type": "string", "pattern": "^(ab?){2,300}c$"},
]


@pytest.mark.parametrize("schema", _SCHEMAS)
def test_split_walk_matches_plain_walk(schema):
    ir = json_schema_to_ir(json.dumps(schema), any_whitespace=True, strict_mode=False)
    got_rules, got_extra = _split(ir, _Splitter)
    want_rules, want_extra = _split(ir, _PlainSplitter)
    assert got_extra == want_extra
    assert got_rules == want_rules
    assert got_extra or any(a is not b for a, b in zip(got_rules, ir.rules, strict=True))
    # an unchanged body is the same object, as in the plain walk
    for got, want, rule in zip(got_rules, want_rules, ir.rules, strict=True):
        assert (got.body is rule.body) == (want.body is rule.body)


def _plain_rule_dfa(what, root, self_rule, nodes, packed_nfa, start, accept):
    """What ``rule_dfa`` replaces: the two kernels called from Python."""
    if what == DFA_OF_NFA:
        return False, np.zeros(0, np.int32), determinize(*unpack_nfa(packed_nfa), start, accept)
    nfa = build_nfa(root, *nodes)
    if what == NFA_OF_BODY:
        return False, pack_nfa(nfa), None
    calls_self = self_rule >= 0 and bool((nfa[8] == self_rule).any())
    return calls_self, nfa[8], determinize(*nfa, start, accept)


def _same_arrays(got, want):
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        if isinstance(w, np.ndarray):
            assert g.dtype == w.dtype and np.array_equal(g, w)
        else:
            assert g == w


def _sample_irs():
    rng = random.Random(11)
    for _ in range(60):
        try:
            yield treegram.Grammar.from_ebnf(random_ebnf(rng)).ir
        except treegram.errors.GrammarError:
            continue
    for schema in _SCHEMAS:
        yield json_schema_to_ir(json.dumps(schema), any_whitespace=True, strict_mode=False)
    recursive = {"type": "object", "properties": {"a": {"type": "array", "items": {"$ref": "#"}}}}
    yield json_schema_to_ir(json.dumps(recursive))


def test_rule_dfa_kernel_matches_the_two_kernels():
    checked = 0
    for ir in _sample_irs():
        rule_ids = {r.name: i for i, r in enumerate(ir.rules)}
        flat = FlatIr(rule_ids, _class_sequences)
        roots = [flat.add(r.body) for r in ir.rules]
        flat.close()
        arrays = flat.arrays()
        for rid, root in enumerate(roots):
            if root in flat.bad:
                continue
            for self_rule in (-1, rid, (rid + 1) % len(roots)):
                got = rule_dfa(DFA_OF_BODY, root, self_rule, arrays, np.zeros(0, np.int32), 0, 1)
                want = _plain_rule_dfa(DFA_OF_BODY, root, self_rule, arrays, None, 0, 1)
                assert got[0] == want[0]
                assert np.array_equal(got[1], want[1])
                if not got[0]:
                    _same_arrays(got[2], want[2])
                checked += 1
            packed = rule_dfa(NFA_OF_BODY, root, -1, arrays, np.zeros(0, np.int32), 0, 1)[1]
            nfa = build_nfa(root, *arrays)
            _same_arrays(unpack_nfa(packed), nfa)
            assert np.array_equal(packed, pack_nfa(nfa))
            for start, accept in ((0, 1), (1, 0), (0, nfa[0] - 1)):
                got = rule_dfa(DFA_OF_NFA, -1, -1, arrays, packed, start, accept)
                assert not got[0] and got[1].shape == (0,)
                _same_arrays(got[2], determinize(*nfa, start, accept))
    assert checked > 200


def test_automata_built_with_the_rule_dfa_kernel_are_unchanged(monkeypatch):
    irs = list(_sample_irs())
    fast = [build_automaton(ir) for ir in irs]
    monkeypatch.setattr(_build, "rule_kernel", _plain_rule_dfa)
    for ir, got in zip(irs, fast, strict=True):
        want = build_automaton(ir)
        for field in dataclasses.fields(want):
            g, w = getattr(got, field.name), getattr(want, field.name)
            if isinstance(w, np.ndarray):
                assert g.dtype == w.dtype and np.array_equal(g, w), field.name
            else:
                assert g == w, field.name
