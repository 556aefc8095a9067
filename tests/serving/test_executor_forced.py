"""StepExecutor with grammar-forced nodes (``forced_budget``): the build extends the trees
after the deferred advance, from the matchers' real positions, and fills every row in one
call. The reference is :func:`treegram.matcher.extend_draft_trees` on twin matchers that
accept each step's tokens immediately."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import treegram as tg  # noqa: E402
from treegram.errors import ArgumentError  # noqa: E402
from treegram.matcher import extend_draft_trees  # noqa: E402
from treegram.serving._executor import EagerStepExecutor, StepBatch  # noqa: E402

VOCAB = ["a", "b", "c", "d", "e", "ab", "bc", "cd", "<eos>"]
V = len(VOCAB)
W = (V + 31) // 32
EOS = VOCAB.index("<eos>")
T = {s: i for i, s in enumerate(VOCAB)}
GRAMMARS = [r'root ::= "abcd" ("e" | "a")', r'root ::= "a" [bc]* "d"']


@pytest.fixture(scope="module")
def compiled():
    compiler = tg.GrammarCompiler(tg.TokenizerInfo(VOCAB, stop_token_ids=[EOS]))
    return [compiler.compile_grammar(g) for g in GRAMMARS]


def test_forced_steps_match_direct_extension_and_advance(compiled):
    budget = 4
    ms = [tg.GrammarMatcher(c) for c in compiled]
    twins = [tg.GrammarMatcher(c) for c in compiled]
    b = len(ms)
    ex = EagerStepExecutor(V, max_rows=b * (1 + budget) * 2)
    roots = np.zeros((b, 1), dtype=np.int64)  # no drafter: root-only trees
    prev = None
    outputs = [[] for _ in ms]
    for _ in range(6):
        step = StepBatch.tree(ms, roots, [-1], [-1], forced_budget=budget)
        assert step.rows_per_request == 1 + budget
        done = ex.enqueue(step)
        ex.launch()
        done.raise_for_build()
        rows = np.asarray(ex.host_bitmask[: b * (1 + budget)]).copy()
        expected_rows = np.zeros_like(rows)
        ref = extend_draft_trees(
            twins, [-1], [-1], roots, budget=budget, token_bitmask=expected_rows
        )
        ext = done.extended
        assert np.array_equal(ext.draft_tokens, ref.draft_tokens)
        assert np.array_equal(ext.parents, ref.parents)
        terminated = [m.is_terminated() for m in twins]
        for i in range(b):
            per = 1 + budget
            if terminated[i]:
                assert (rows[i * per : (i + 1) * per] == -1).all()
            else:
                assert np.array_equal(
                    rows[i * per : (i + 1) * per], expected_rows[i * per : (i + 1) * per]
                )
        # verification: accept the forced chain, then a bonus token the grammar allows
        accepted = []
        for i, twin in enumerate(twins):
            if terminated[i]:
                accepted.append([])
                continue
            toks = ext.draft_tokens[i, 1 : 1 + int(ext.num_forced[i])].tolist()
            for t in toks:
                assert twin.accept_token(t)
            if not twin.is_terminated():
                row = np.zeros((1, W), np.int32)
                twin.fill_next_token_bitmask(row)
                ids = list(tg.allowed_token_ids(row[0], V))
                bonus = T["d"] if T["d"] in ids else int(ids[0])
                assert twin.accept_token(bonus)
                toks.append(bonus)
            accepted.append(toks)
            outputs[i].extend(toks)
        ex.set_accepted(done, accepted)
        prev = done
    ex.advance_now(prev)
    assert all(m.is_terminated() for m in ms)
    assert ["".join(VOCAB[t] for t in out if t != EOS) for out in outputs] == ["abcda", "ad"]


def test_forced_chain_step_rows_and_bad_budget(compiled):
    ms = [tg.GrammarMatcher(compiled[0])]
    ex = EagerStepExecutor(V, max_rows=8)
    step = StepBatch.chain(ms, [[T["a"]]], forced_budget=3)
    assert step.rows_per_request == 2 + 3
    done = ex.enqueue(step)
    ex.launch()
    done.raise_for_build()
    ext = done.extended
    assert ext.parents[0].tolist() == [-1, 0, 1, 2, -1]  # "bcd" is greedily "bc" + "d"
    assert [VOCAB[t] for t in ext.draft_tokens[0, 2:4]] == ["bc", "d"]
    assert ext.num_forced.tolist() == [2]
    with pytest.raises(ArgumentError, match="forced_budget"):
        StepBatch.tree(ms, [[0]], [-1], [-1], forced_budget=-1)
