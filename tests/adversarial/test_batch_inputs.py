"""Issue 11, matcher layer: batch inputs validated whole before any change, and every bad
input to a matcher raises a TreegramError naming the argument (findings 7, 11, 12, 16)."""

from __future__ import annotations

import numpy as np
import pytest
from adversarial.lifetime_scenarios import EOS, GRAMMAR_TEXTS, VOCAB, W
from matcher_rows import SENTINEL

import treegram as tg
from treegram import BatchGrammarMatcher, GrammarMatcher
from treegram.errors import (
    ArgumentError,
    BitmaskError,
    DraftTreeError,
    InvalidTokenIdError,
    MatcherStateError,
    TreegramError,
)

V = len(VOCAB)


@pytest.fixture(scope="module")
def grammar():
    info = tg.TokenizerInfo(VOCAB, stop_token_ids=[EOS])
    return tg.GrammarCompiler(info, cache_enabled=False).compile_grammar(GRAMMAR_TEXTS["letters"])


@pytest.fixture(scope="module")
def bm():
    with BatchGrammarMatcher(2) as b:
        yield b


def tok(text: str) -> int:
    return VOCAB.index(text)


def state(m: GrammarMatcher) -> tuple:
    row = np.zeros((1, W), dtype=np.int32)
    m.fill_next_token_bitmask(row)
    return m.num_accepted_steps(), row.tobytes()


def walked(grammar, text: str = "ab") -> GrammarMatcher:
    m = GrammarMatcher(grammar)
    for ch in text:
        assert m.accept_token(tok(ch))
    return m


# --------------------------------------------------------------------------- finding 7
def test_finding07_same_matcher_twice_in_a_traversal_is_rejected(grammar, bm):
    """The same matcher listed 4,096 times in one traversal (split across workers) used to
    write wrong rows and leave the matcher with extra steps."""
    import treegram.matcher._batch as mb

    m = walked(grammar)
    before = state(m)
    n = 4096
    draft = np.full((n, 2), tok("c"), dtype=np.int64)
    out = np.full((2 * n, W), SENTINEL, dtype=np.int32)
    saved, mb._INLINE_WORDS = mb._INLINE_WORDS, 1
    try:
        with pytest.raises(ArgumentError, match=r"matchers\[0\] and matchers\[1\] are the same"):
            bm.batch_traverse_draft_tree([m] * n, np.array([1, -1]), np.array([-1, -1]), draft, out)
    finally:
        mb._INLINE_WORDS = saved
    assert (out == SENTINEL).all()
    assert state(m) == before


def test_finding07_duplicates_rejected_by_every_batch_call(grammar, bm):
    a, b = walked(grammar), walked(grammar, "x")
    before = (state(a), state(b))
    out = np.full((3, W), SENTINEL, dtype=np.int32)
    calls = {
        "fill": lambda: bm.batch_fill_next_token_bitmask([a, b, a], out),
        "accept": lambda: bm.batch_accept_token([a, b, a], [tok("c")] * 3),
        "accept_string": lambda: bm.batch_accept_string([b, a, b], ["c", "c", "c"]),
        "rollback": lambda: bm.batch_rollback([a, a], [1, 1]),
        "traverse": lambda: bm.batch_traverse_draft_tree(
            [b, a, b], np.array([-1]), np.array([-1]), np.zeros((3, 1), np.int64), out
        ),
    }
    for name, call in calls.items():
        with pytest.raises(ArgumentError, match="same GrammarMatcher"):
            call()
        assert (state(a), state(b)) == before, name
    assert (out == SENTINEL).all()
    # Duplicates outside the selected requests are fine: only selected rows are touched.
    bm.batch_traverse_draft_tree(
        [a, b, a], np.array([-1]), np.array([-1]), np.zeros((3, 1), np.int64), out, indices=[0, 1]
    )


# --------------------------------------------------------------------------- finding 11
def test_finding11_unencodable_string_changes_no_matcher(grammar, bm):
    ms = [walked(grammar) for _ in range(3)]
    before = [state(m) for m in ms]
    with pytest.raises(ArgumentError, match=r"strings\[1\] cannot be encoded as UTF-8"):
        bm.batch_accept_string(ms, ["c", "\ud800", "c"])
    assert [state(m) for m in ms] == before
    assert bm.batch_accept_string(ms, ["c", b"d", "e"]) == [True] * 3


def test_finding11_rollback_of_one_matcher_twice_is_rejected(grammar, bm):
    m = walked(grammar, "a")  # one step of history
    before = state(m)
    with pytest.raises(ArgumentError, match="same GrammarMatcher"):
        bm.batch_rollback([m, m], [1, 1])
    assert state(m) == before
    with pytest.raises(MatcherStateError, match=r"matchers\[1\]: cannot roll back 2"):
        bm.batch_rollback([walked(grammar, "ab"), m], [1, 2])
    assert state(m) == before


# --------------------------------------------------------------------------- finding 12
@pytest.mark.parametrize("bad", [-5, V + 10, 2**62])
def test_finding12_draft_tokens_out_of_vocab_rejected(grammar, bm, bad):
    m = walked(grammar)
    before = state(m)
    nt, ns = np.array([1, 2, -1]), np.array([-1, -1, -1])
    draft = np.array([[0, tok("c"), bad]], dtype=np.int64)
    out = np.full((3, W), SENTINEL, dtype=np.int32)
    with pytest.raises(InvalidTokenIdError, match=rf"draft_tokens\[0, 2\] = {bad} "):
        bm.batch_traverse_draft_tree([m], nt, ns, draft, out)
    with pytest.raises(InvalidTokenIdError, match=rf"draft_tokens\[2\] = {bad} "):
        m.traverse_draft_tree(nt, ns, draft[0], out)
    assert (out == SENTINEL).all()
    assert state(m) == before


@pytest.mark.parametrize(
    "dtype", [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64]
)
def test_finding12_links_out_of_range_rejected_in_every_dtype(grammar, bm, dtype):
    m = walked(grammar)
    before = state(m)
    big = np.iinfo(dtype).max  # 2**64 - 1 for uint64: must not wrap to -1
    out = np.full((3, W), SENTINEL, dtype=np.int32)
    draft = np.array([[0, tok("c"), tok("d")]], dtype=np.int64)
    ns = np.full(3, -1, dtype=np.int64)
    for nt in (np.array([1, 2, big], dtype=dtype), np.array([1, 2, 3], dtype=dtype)):
        for links in ((nt, ns), (ns, nt)):
            with pytest.raises(DraftTreeError, match="retrieve_next"):
                bm.batch_traverse_draft_tree([m], *links, draft, out)
            with pytest.raises(DraftTreeError, match="retrieve_next"):
                m.traverse_draft_tree(*links, draft[0], out)
    assert (out == SENTINEL).all()
    assert state(m) == before


def test_finding12_uint64_max_does_not_wrap_to_no_link(grammar):
    m = walked(grammar)
    out = np.full((2, W), SENTINEL, dtype=np.int32)
    nt = np.array([1, 2**64 - 1], dtype=np.uint64)
    ns = np.array([2**64 - 1, 2**64 - 1], dtype=np.uint64)
    with pytest.raises(DraftTreeError, match=r"retrieve_next_token holds 18446744073709551615"):
        m.traverse_draft_tree(nt, ns, np.array([0, tok("c")]), out)
    assert (out == SENTINEL).all()


# --------------------------------------------------------------------------- finding 16
def test_finding16_huge_rollback_counts(grammar, bm):
    m = walked(grammar)
    before = state(m)
    with pytest.raises(MatcherStateError, match="cannot roll back 100000000000000000000"):
        m.rollback(10**20)
    with pytest.raises(MatcherStateError, match="cannot roll back 100000000000000000000"):
        bm.batch_rollback([m], 10**20)
    with pytest.raises(DraftTreeError, match="num_tokens"):
        bm.batch_rollback([m], [10**20])
    assert state(m) == before


@pytest.mark.filterwarnings("ignore::PendingDeprecationWarning")  # np.matrix itself
def test_finding16_matrix_bitmask_is_filled(grammar):
    m = walked(grammar)
    plain = np.zeros((2, W), dtype=np.int32)
    mat = np.matrix(np.zeros((2, W), dtype=np.int32))
    assert m.fill_next_token_bitmask(plain, 1) == m.fill_next_token_bitmask(mat, 1)
    assert (np.asarray(mat) == plain).all() and plain[1].any()


def test_finding16_bitmask_made_read_only_after_first_fill(grammar, bm):
    m = walked(grammar)
    out = np.zeros((1, W), dtype=np.int32)
    m.fill_next_token_bitmask(out)
    out[:] = 7
    out.flags.writeable = False
    with pytest.raises(BitmaskError, match="writable"):
        m.fill_next_token_bitmask(out)
    with pytest.raises(BitmaskError, match="writable"):
        bm.batch_fill_next_token_bitmask([m], out)
    assert (out == 7).all()


@pytest.mark.parametrize("threshold", [float("inf"), 10**400, 1e300])
def test_finding16_infinite_time_threshold_means_no_limit(grammar, bm, threshold):
    m = walked(grammar)
    nt, ns = np.array([1, -1]), np.array([-1, -1])
    out = np.zeros((2, W), dtype=np.int32)
    assert (
        m.traverse_draft_tree(nt, ns, np.array([0, tok("c")]), out, time_threshold=threshold)
        is True
    )
    assert bm.batch_traverse_draft_tree(
        [m], nt, ns, np.array([[0, tok("c")]]), out, time_threshold=threshold
    ) == [True]


@pytest.mark.parametrize("threshold", [float("nan"), "1", None, True])
def test_finding16_bad_time_threshold(grammar, bm, threshold):
    m = walked(grammar)
    nt, ns = np.array([1, -1]), np.array([-1, -1])
    out = np.full((2, W), SENTINEL, dtype=np.int32)
    with pytest.raises(ArgumentError, match="time_threshold"):
        m.traverse_draft_tree(nt, ns, np.array([0, tok("c")]), out, time_threshold=threshold)
    with pytest.raises(ArgumentError, match="time_threshold"):
        bm.batch_traverse_draft_tree(
            [m], nt, ns, np.array([[0, tok("c")]]), out, time_threshold=threshold
        )
    assert (out == SENTINEL).all()


def test_finding16_huge_root_position(grammar, bm):
    m = walked(grammar)
    nt, ns = np.array([1, -1]), np.array([-1, -1])
    out = np.full((2, W), SENTINEL, dtype=np.int32)
    with pytest.raises(DraftTreeError, match="root_position"):
        m.traverse_draft_tree(nt, ns, np.array([0, tok("c")]), out, root_position=2**70)
    with pytest.raises(DraftTreeError, match="root_positions"):
        bm.batch_traverse_draft_tree(
            [m], nt, ns, np.array([[0, tok("c")]]), out, root_positions=[2**70]
        )
    assert (out == SENTINEL).all()


def test_finding16_unencodable_accept_string(grammar):
    m = walked(grammar)
    before = state(m)
    with pytest.raises(ArgumentError, match="input_str cannot be encoded as UTF-8") as err:
        m.accept_string("a\ud800")
    assert isinstance(err.value, TreegramError) and isinstance(err.value, ValueError)
    assert state(m) == before
