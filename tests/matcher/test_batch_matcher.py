"""BatchGrammarMatcher accept / accept_string / rollback / fill against scalar operations.

Two equal sets of matchers are driven in lockstep, one through the batch calls (inline
and split across worker threads), one through the scalar GrammarMatcher methods; return
values, step counts and full masks must agree after every operation. Invalid batch input
must raise its specific error and change no matcher and no output row.
(Draft-tree traversal is covered by test_draft_tree.py.)
"""

from __future__ import annotations

import numpy as np
import pytest
from matcher_rows import (
    EXPR_GRAMMAR,
    OBJECT_GRAMMAR,
    SENTINEL,
    SMALL_VOCAB,
    compile_small,
    mask_of,
    snapshot,
    tid,
)

import treegram as tg
import treegram.matcher._batch as matcher_batch
from treegram import BatchGrammarMatcher, GrammarMatcher
from treegram.errors import (
    ArgumentError,
    BitmaskError,
    InvalidTokenIdError,
    MatcherStateError,
)

VOCAB = SMALL_VOCAB
V = len(VOCAB) + 2  # two padding ids
W = (V + 31) // 32
EOS = VOCAB.index("<eos>")

GRAMMARS: dict[str, str | None] = {
    "letters": "root ::= [a-z]*",
    "builtin_json": None,
    "expr": EXPR_GRAMMAR,
    "object": OBJECT_GRAMMAR,
}


@pytest.fixture(scope="module")
def compiled():
    return compile_small(GRAMMARS, V)


def pick_token(m: GrammarMatcher, rng: np.random.Generator) -> int:
    """Mostly an allowed token (the stop token now and then), sometimes any id."""
    row = mask_of(m)
    if row is None or rng.random() < 0.2:
        return int(rng.integers(0, V))
    ok = np.flatnonzero(tg.bitmask_to_bool(row, V))
    if len(ok) == 0:
        return int(rng.integers(0, V))
    if EOS in ok and rng.random() < 0.7:
        ok = ok[ok != EOS] if len(ok) > 1 else ok
    return int(rng.choice(ok))


def pick_string(m: GrammarMatcher, rng: np.random.Generator) -> str | bytes:
    parts = [VOCAB[pick_token(m, rng) % len(VOCAB)]]
    if rng.random() < 0.5:
        parts.append(chr(int(rng.integers(32, 127))))
    text = "".join(p for p in parts if p != "<eos>")
    return text.encode() if rng.random() < 0.3 else text


@pytest.mark.parametrize("threaded", [False, True])
@pytest.mark.parametrize("seed", range(4))
def test_batch_ops_match_scalar_ops(compiled, monkeypatch, seed, threaded):
    rng = np.random.default_rng(seed)
    if threaded:
        monkeypatch.setattr(matcher_batch, "_INLINE_WORDS", 0)
    names = list(GRAMMARS)
    b = 7
    chosen = [names[int(rng.integers(len(names)))] for _ in range(b)]
    batch = [GrammarMatcher(compiled[n]) for n in chosen]
    scalar = [GrammarMatcher(compiled[n]) for n in chosen]
    accepted = 0
    with BatchGrammarMatcher(max_threads=3 if threaded else 1) as bm:
        for _ in range(40):
            op = rng.choice(["accept", "accept", "string", "rollback", "fill"])
            if op == "accept":
                tokens = [pick_token(m, rng) for m in scalar]
                got = bm.batch_accept_token(batch, np.array(tokens))
                assert got == [m.accept_token(t) for m, t in zip(scalar, tokens, strict=True)]
                accepted += sum(got)
            elif op == "string":
                strings = [pick_string(m, rng) for m in scalar]
                got = bm.batch_accept_string(batch, strings)
                assert got == [m.accept_string(s) for m, s in zip(scalar, strings, strict=True)]
                accepted += sum(got)
            elif op == "rollback":
                if rng.random() < 0.5:
                    k = int(rng.integers(0, 3))
                    if min(m.num_accepted_steps() for m in scalar) < k:
                        continue
                    bm.batch_rollback(batch, k)
                    for m in scalar:
                        m.rollback(k)
                else:
                    counts = [int(rng.integers(0, m.num_accepted_steps() + 1)) for m in scalar]
                    bm.batch_rollback(batch, counts)
                    for m, k in zip(scalar, counts, strict=True):
                        m.rollback(k)
            else:
                live = [i for i, m in enumerate(scalar) if not m.is_terminated()]
                rows = rng.permutation(b + 2)[: len(live)]
                out = np.full((b + 2, W), SENTINEL, dtype=np.int32)
                bm.batch_fill_next_token_bitmask([batch[i] for i in live], out, rows)
                for r, i in zip(rows, live, strict=True):
                    np.testing.assert_array_equal(out[r], mask_of(scalar[i]))
                untouched = np.setdiff1d(np.arange(b + 2), rows)
                assert (out[untouched] == SENTINEL).all()
            assert [snapshot(m) for m in batch] == [snapshot(m) for m in scalar]
    assert accepted >= 30, "the walk should mostly advance"


def test_fill_default_rows_torch_view(compiled):
    torch = pytest.importorskip("torch")
    ms = [GrammarMatcher(compiled[n]) for n in GRAMMARS]
    ms[0].accept_token(tid("q"))
    big = torch.full((len(ms) + 4, W), SENTINEL, dtype=torch.int32)
    with BatchGrammarMatcher() as bm:
        bm.batch_fill_next_token_bitmask(ms, big[2 : 2 + len(ms)])
    for i, m in enumerate(ms):
        np.testing.assert_array_equal(big[2 + i].numpy(), mask_of(m))
    assert (big[:2] == SENTINEL).all() and (big[2 + len(ms) :] == SENTINEL).all()


def test_rollback_too_far_changes_nothing(compiled):
    ms = [GrammarMatcher(compiled["letters"]) for _ in range(4)]
    for i, m in enumerate(ms):
        for _ in range(i + 1):
            assert m.accept_token(tid("a"))
    before = [snapshot(m) for m in ms]
    with BatchGrammarMatcher() as bm:
        with pytest.raises(MatcherStateError):
            bm.batch_rollback(ms, 2)  # matcher 0 has only one step
        with pytest.raises(MatcherStateError):
            bm.batch_rollback(ms, [1, 2, 3, 5])  # the last one is too far
        with pytest.raises(ArgumentError):
            bm.batch_rollback(ms, [1, 1, -1, 1])
        with pytest.raises(ArgumentError):
            bm.batch_rollback(ms, [1, 1, 1])
        with pytest.raises(ArgumentError):
            bm.batch_rollback([*ms, "nope"], 1)
        assert [snapshot(m) for m in ms] == before
        bm.batch_rollback(ms, [1, 2, 3, 4])
        assert [m.num_accepted_steps() for m in ms] == [0, 0, 0, 0]
        bm.batch_rollback(ms, 0)
        bm.batch_rollback([], 1)


def test_accept_token_invalid_input_changes_nothing(compiled):
    ms = [GrammarMatcher(compiled["letters"]) for _ in range(3)]
    before = [snapshot(m) for m in ms]
    with BatchGrammarMatcher() as bm:
        for tokens, err in (
            ([tid("a"), tid("b"), V], InvalidTokenIdError),
            ([tid("a"), tid("b"), -1], InvalidTokenIdError),
            ([tid("a"), tid("b")], ArgumentError),
            ([[tid("a")] * 3], ArgumentError),
        ):
            with pytest.raises(err):
                bm.batch_accept_token(ms, tokens)
            assert [snapshot(m) for m in ms] == before
        assert bm.batch_accept_token([], []) == []
        # a rejected token and a special (padding) id are False, the others advance
        assert bm.batch_accept_token(ms, [tid("a"), tid("A"), len(VOCAB)]) == [True, False, False]
        assert [m.num_accepted_steps() for m in ms] == [1, 0, 0]


def test_fill_after_stop_token_raises_and_writes_nothing(compiled):
    ms = [GrammarMatcher(compiled["letters"]) for _ in range(3)]
    with BatchGrammarMatcher() as bm:
        assert bm.batch_accept_token(ms, [tid("a"), EOS, tid("b")]) == [True, True, True]
        assert [m.is_terminated() for m in ms] == [False, True, False]
        out = np.full((3, W), SENTINEL, dtype=np.int32)
        with pytest.raises(MatcherStateError):
            bm.batch_fill_next_token_bitmask(ms, out)
        assert (out == SENTINEL).all()
        # after the stop token is rolled back the batch fills again
        bm.batch_rollback(ms, [0, 1, 0])
        bm.batch_fill_next_token_bitmask(ms, out)
        for i, m in enumerate(ms):
            np.testing.assert_array_equal(out[i], mask_of(m))
        assert bm.batch_accept_token(ms, [EOS, EOS, EOS]) == [True, True, True]
        assert bm.batch_accept_token(ms, [tid("a")] * 3) == [False] * 3


def test_fill_invalid_rows_and_buffers(compiled):
    ms = [GrammarMatcher(compiled["object"]) for _ in range(3)]
    with BatchGrammarMatcher() as bm:
        for bad, indices, err in (
            (np.full((3, W), SENTINEL, dtype=np.int32), [0, 1, 3], BitmaskError),
            (np.full((3, W), SENTINEL, dtype=np.int32), [0, 1, -1], BitmaskError),
            (np.full((3, W), SENTINEL, dtype=np.int32), [0, 1], ArgumentError),
            (np.full((2, W), SENTINEL, dtype=np.int32), None, BitmaskError),
            (np.full((3, W), SENTINEL, dtype=np.int64), None, BitmaskError),
            (np.full((3, W + 1), SENTINEL, dtype=np.int32), None, BitmaskError),
            (np.full((3, 2 * W), SENTINEL, dtype=np.int32)[:, ::2], None, BitmaskError),
        ):
            keep = bad.copy()
            with pytest.raises(err):
                bm.batch_fill_next_token_bitmask(ms, bad, indices)
            np.testing.assert_array_equal(bad, keep)


def test_accept_string_length_mismatch(compiled):
    ms = [GrammarMatcher(compiled["letters"]) for _ in range(2)]
    with BatchGrammarMatcher() as bm:
        with pytest.raises(ArgumentError):
            bm.batch_accept_string(ms, ["a"])
        assert [m.num_accepted_steps() for m in ms] == [0, 0]


def test_accept_string_bad_entry_changes_nothing(compiled):
    ms = [GrammarMatcher(compiled["letters"]) for _ in range(2)]
    with BatchGrammarMatcher() as bm:
        with pytest.raises(TypeError):
            bm.batch_accept_string(ms, ["ab", 5])
        assert [m.num_accepted_steps() for m in ms] == [0, 0]


def test_empty_batch_fill_accepts_a_real_bitmask(compiled):
    with BatchGrammarMatcher() as bm:
        out = np.full((2, W), SENTINEL, dtype=np.int32)
        bm.batch_fill_next_token_bitmask([], out)
        assert (out == SENTINEL).all()


def test_batch_accept_token_and_string_are_static_like_xgrammar():
    info = tg.TokenizerInfo(["a", "b", "c", "</s>"])
    compiled = tg.GrammarCompiler(info).compile_grammar('root ::= "ab" | "ac"')
    cls = tg.BatchGrammarMatcher
    ms = [tg.GrammarMatcher(compiled) for _ in range(3)]
    # on the class, as xgrammar's static methods (debug_print accepted and ignored)
    assert cls.batch_accept_token(ms, [0, 1, 0]) == [True, False, True]
    assert cls.batch_accept_token(ms[:1], [2], debug_print=True) == [True]
    assert ms[0].is_completed() and not ms[1].is_completed()
    assert cls.batch_accept_string(ms[1:], ["ab", "b"], debug_print=False) == [True, True]
    with pytest.raises(tg.InvalidTokenIdError, match=r"tokens\[1\]"):
        cls.batch_accept_token(ms, [0, 9, 0])
    # on an instance, and the explicit unbound form, as before
    with cls(max_threads=1) as bm:
        fresh = [tg.GrammarMatcher(compiled), tg.GrammarMatcher(compiled)]
        assert bm.batch_accept_token(fresh, [0, 2]) == [True, False]
        assert cls.batch_accept_token(bm, fresh[:1], [1]) == [True]
        assert bm.batch_accept_string(fresh[1:], ["ac"]) == [True]


def test_a_batch_is_recognized_by_its_tuples_item_pointers(monkeypatch):
    """The one-pass claim reads the held tuple's item pointers in place (kernels.same_words
    at the offset found on a probe tuple) and compares them with the last batch's ids."""
    from treegram.kernels import same_words

    offset = matcher_batch._tuple_items_offset()
    assert offset == tuple.__basicsize__  # CPython: the items follow the header
    items = tuple(object() for _ in range(5))
    ids = np.array([id(x) for x in items], dtype=np.int64)
    assert same_words(id(items) + offset, ids)
    assert same_words(id(items) + offset, ids[:2])
    assert not same_words(id(items[::-1]) + offset, ids)
    assert not same_words(id((*items[:4], object())) + offset, ids)
    monkeypatch.setattr(matcher_batch, "_ITEMS", offset)
    assert matcher_batch._same_batch(items, ids)
    assert not matcher_batch._same_batch(items[:4], ids)  # a shorter tuple is not read past
    # where ids are not addresses, they are kept as a list and compared in Python
    assert matcher_batch._same_batch(items, [id(x) for x in items])
    assert not matcher_batch._same_batch(items[:4], [id(x) for x in items])
