"""Issue 11: one matcher used from two threads at once.

A matcher's arrays grow while a call works on them, so two threads in one matcher could
make a kernel index an array by another array's bounds. A matcher therefore serves one
call at a time: a second thread's call, scalar or batch, raises MatcherStateError and
changes nothing. The stress scenario runs in a fresh interpreter, so a crash fails the
test instead of killing the run.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest
from adversarial.lifetime_scenarios import EOS, GRAMMAR_TEXTS, VOCAB, W, holding, run_scenario

import treegram as tg
from treegram import BatchGrammarMatcher, GrammarMatcher
from treegram.errors import MatcherStateError


@pytest.fixture(scope="module")
def grammar():
    info = tg.TokenizerInfo(VOCAB, stop_token_ids=[EOS])
    return tg.GrammarCompiler(info, cache_enabled=False).compile_grammar(GRAMMAR_TEXTS["object"])


def _hold_elsewhere(matcher: GrammarMatcher):
    """Keep ``matcher`` busy in another thread (as a long call would) until released."""
    taken, release = threading.Event(), threading.Event()

    def worker() -> None:
        with holding(matcher):
            taken.set()
            release.wait(10)

    thread = threading.Thread(target=worker)
    thread.start()
    assert taken.wait(10)
    return release, thread


def test_second_thread_gets_a_clear_error_and_changes_nothing(grammar):
    m = GrammarMatcher(grammar)
    other = GrammarMatcher(grammar)
    assert m.accept_string('{"ab": ')
    before = np.zeros((1, W), dtype=np.int32)
    m.fill_next_token_bitmask(before)
    release, thread = _hold_elsewhere(m)
    try:
        row = np.zeros((1, W), dtype=np.int32)
        calls = [
            lambda: m.fill_next_token_bitmask(row),
            lambda: m.accept_token(VOCAB.index("1")),
            lambda: m.accept_string("12"),
            lambda: m.rollback(1),
            lambda: m.reset(),
            lambda: m.fork(),
            lambda: m.is_terminated(),
            lambda: m.find_jump_forward_string(),
            lambda: BatchGrammarMatcher.batch_rollback([other, m], [0, 1]),
            lambda: BatchGrammarMatcher.batch_accept_string([other, m], ["1", "1"]),
            lambda: BatchGrammarMatcher(max_threads=1).batch_fill_next_token_bitmask(
                [other, m], np.zeros((2, W), dtype=np.int32)
            ),
            lambda: BatchGrammarMatcher(max_threads=1).batch_accept_token(
                matchers=[other, m], tokens=[VOCAB.index("1")] * 2
            ),
        ]
        for call in calls:
            with pytest.raises(MatcherStateError, match="in use by another thread"):
                call()
    finally:
        release.set()
        thread.join()
    # nothing changed: neither the busy matcher nor the other one in the batch calls
    after = np.zeros((1, W), dtype=np.int32)
    m.fill_next_token_bitmask(after)
    assert np.array_equal(before, after) and m.num_accepted_steps() == 1
    assert other.num_accepted_steps() == 0
    # free again: every call works
    assert BatchGrammarMatcher.batch_accept_string([other, m], ['{"a', "1"]) == [True, True]


def test_same_thread_may_nest_calls(grammar):
    m = GrammarMatcher(grammar)
    with holding(m):  # what a batch call holding the matcher looks like to its own thread
        assert m.accept_string("{")
        assert BatchGrammarMatcher.batch_accept_string([m], ['"']) == [True]


def test_two_threads_hammering_one_matcher_never_crash():
    run_scenario(
        """
        from treegram.errors import MatcherStateError
        g = fresh("object")
        m = GrammarMatcher(g)
        batch = BatchGrammarMatcher(max_threads=1)
        text = '{"ab": 12, "abc": true}'
        errors, done = [], []
        def hammer(seed):
            rng = np.random.default_rng(seed)
            row = np.zeros((1, W), dtype=np.int32)
            rows = np.zeros((1, W), dtype=np.int32)
            ok = busy = 0
            for _ in range(3000):
                op = rng.integers(6)
                try:
                    if op == 0:
                        m.fill_next_token_bitmask(row)
                    elif op == 1:
                        m.accept_string(text[: rng.integers(1, len(text))])
                    elif op == 2:
                        m.rollback(min(1, m.num_accepted_steps()))
                    elif op == 3:
                        m.reset()
                    elif op == 4:
                        batch.batch_fill_next_token_bitmask([m], rows)
                    else:
                        BatchGrammarMatcher.batch_rollback([m], [0])
                    ok += 1
                except MatcherStateError as exc:
                    if "in use by another thread" not in str(exc) and "stop token" not in str(exc):
                        errors.append(repr(exc))
                    busy += 1
            done.append((ok, busy))
        sys.setswitchinterval(1e-6)
        threads = [threading.Thread(target=hammer, args=(s,)) for s in range(3)]
        for t in threads: t.start()
        for t in threads: t.join()
        assert not errors, errors[:3]
        assert sum(b for _, b in done) > 0, done  # the threads did meet
        m.reset()
        assert m.accept_string(text) and m.is_completed()
        print("OK")
    """,
        timeout=120,
    )


def test_a_batch_claimed_again_keeps_every_guarantee(grammar):
    """The claim of the batch claimed last takes its tokens in one pass and records no
    owner (``_batch._claim``): a busy matcher there still fails the whole call and gives
    back every token taken, the calling thread's nested calls still go through, and a
    matcher listed twice is still refused."""
    from treegram.matcher import _batch

    ms = [GrammarMatcher(grammar) for _ in range(4)]
    rows = np.zeros((4, W), dtype=np.int32)
    batch = BatchGrammarMatcher(max_threads=1)
    for _ in range(2):  # the second call takes the one-pass claim
        batch.batch_fill_next_token_bitmask(ms, rows)
    assert _batch._LAST_CLAIM[2] is not None and len(_batch._LAST_CLAIM[2]) == 4
    # nested calls of the same thread: batch_accept_string calls accept_string per matcher
    for _ in range(2):
        assert BatchGrammarMatcher.batch_accept_string(ms, ["{"] * 4) == [True] * 4
        BatchGrammarMatcher.batch_rollback(ms, [1] * 4)
    assert BatchGrammarMatcher.batch_accept_string(ms, ["{"] * 4) == [True] * 4
    BatchGrammarMatcher.batch_rollback(ms, [1] * 4)
    # a matcher busy in another thread: the call fails, nothing changes, no token is lost
    batch.batch_fill_next_token_bitmask(ms, rows)
    before = rows.copy()
    release, thread = _hold_elsewhere(ms[2])
    try:
        for call in (
            lambda: batch.batch_fill_next_token_bitmask(ms, rows),
            lambda: BatchGrammarMatcher.batch_accept_string(ms, ["{"] * 4),
        ):
            with pytest.raises(MatcherStateError, match=r"matchers\[2\] is in use"):
                call()
        for m in (ms[0], ms[1], ms[3]):  # their tokens were given back
            assert m._free and m._owner == 0
            assert m.accept_string("{")
            m.rollback(1)
        with pytest.raises(MatcherStateError, match="in use by another thread"):
            ms[2].accept_string("{")
    finally:
        release.set()
        thread.join()
    assert all(m.num_accepted_steps() == 0 for m in ms)
    for _ in range(2):
        batch.batch_fill_next_token_bitmask(ms, rows)
        assert np.array_equal(rows, before)
    # every token back and no batch left on this thread's stack
    from treegram.matcher._matcher import _BATCH_HELD

    assert all(m._free and m._owner == 0 for m in ms)
    assert not getattr(_BATCH_HELD, "stack", [])
    with pytest.raises(Exception, match="same GrammarMatcher"):
        batch.batch_fill_next_token_bitmask([*ms, ms[0]], np.zeros((5, W), dtype=np.int32))
    assert all(m._free for m in ms)
    # while this thread runs a batch call on them, another thread still finds them busy
    seen = []

    def other_thread() -> None:
        try:
            ms[1].accept_string("{")
        except MatcherStateError as exc:
            seen.append(str(exc))

    _batch._release(_batch._claim(tuple(ms))[0])
    taken, _ = _batch._claim(tuple(ms))
    try:
        assert type(taken) is tuple  # the one-pass claim
        t = threading.Thread(target=other_thread)
        t.start()
        t.join()
        assert ms[1].accept_string("{")  # this thread's nested call
        ms[1].rollback(1)
    finally:
        _batch._release(taken)
    assert seen and "in use by another thread" in seen[0]
    assert all(m._free and m._owner == 0 for m in ms)
