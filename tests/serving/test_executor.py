"""StepExecutor state machine (EagerLauncher on CPU) and the CUDA launcher (gpu mark).

The reference for every mask is "by hand": separate GrammarMatcher objects of the same
grammars that accept each step's tokens immediately (no deferral) and fill masks with the
scalar ``traverse_draft_tree`` / ``fill_next_token_bitmask`` into zeroed rows.
"""

from __future__ import annotations

import threading
import time
from collections import Counter

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import treegram as tg  # noqa: E402
import treegram.serving._launcher as launcher_mod  # noqa: E402
from treegram.errors import (  # noqa: E402
    ArgumentError,
    DraftTreeError,
    InvalidTokenIdError,
    MatcherStateError,
    MissingDependencyError,
)
from treegram.serving._executor import (  # noqa: E402
    AcceptedTokensMissingError,
    EagerStepExecutor,
    StepBatch,
    StepExecutor,
)
from treegram.serving._launcher import CudaHostLauncher, EagerLauncher  # noqa: E402

VOCAB = ["a", "b", "c", "d", "e", "ab", "bc", "cd", "<eos>"]
V = len(VOCAB)
W = (V + 31) // 32
EOS = VOCAB.index("<eos>")
T = {s: i for i, s in enumerate(VOCAB)}
GRAMMARS = [
    r'root ::= "a" ("b" | "c")* "d"',
    r'root ::= [a-c]+ "e"',
    r'root ::= ("ab" | "cd")* "e"?',
]
N_NODES = 5
# a branchy tree: 0 -> {1, 2}, 1 -> {3}, 3 -> {4}
PARENTS = np.array([-1, 0, 0, 1, 3])
NEXT_TOKEN = np.array([1, 3, -1, 4, -1], dtype=np.int64)
NEXT_SIBLING = np.array([-1, 2, -1, -1, -1], dtype=np.int64)


@pytest.fixture(scope="module")
def compiled():
    compiler = tg.GrammarCompiler(tg.TokenizerInfo(VOCAB, stop_token_ids=[EOS]))
    return [compiler.compile_grammar(g) for g in GRAMMARS]


@pytest.fixture(scope="module")
def batch():
    with tg.BatchGrammarMatcher(2) as b:
        yield b


def matchers_for(compiled, b):
    return [tg.GrammarMatcher(compiled[i % len(compiled)]) for i in range(b)]


def executor(max_rows, batch_matcher, **kwargs):
    return StepExecutor(
        V, max_rows, launcher=EagerLauncher(), batch_matcher=batch_matcher, **kwargs
    )


def allowed(m):
    row = np.zeros((1, W), np.int32)
    m.fill_next_token_bitmask(row)
    return tg.allowed_token_ids(row[0], V)


def sample_path(m, rng, max_len):
    """Random grammar-valid tokens (ending with EOS when the grammar allows), accepted into
    ``m`` (the by-hand reference matcher)."""
    out = []
    for _ in range(max_len):
        if m.is_terminated():
            break
        choices = allowed(m)
        if len(choices) == 0:
            break
        t = int(rng.choice(choices))
        assert m.accept_token(t)
        out.append(t)
    return out


def reference_rows(ref, kind, draft):
    """Masks of one step, by hand, for reference matchers that are already advanced."""
    n = 1 if kind == "next" else draft.shape[1]
    rows = np.zeros((len(ref) * n, W), np.int32)
    for i, m in enumerate(ref):
        if m.is_terminated():
            rows[i * n : (i + 1) * n] = -1
        elif kind == "next":
            m.fill_next_token_bitmask(rows, i)
        elif kind == "chain":
            m.fill_chain_bitmask(draft[i, 1:], rows[i * n : (i + 1) * n])
        else:
            m.traverse_draft_tree(NEXT_TOKEN, NEXT_SIBLING, draft[i], rows[i * n : (i + 1) * n])
    return rows


def random_draft(ref, rng, kind):
    """Drafts that follow the grammar most of the time (so trees go deep)."""
    b = len(ref)
    if kind == "next":
        return None
    n = N_NODES if kind == "tree" else 4
    draft = rng.integers(0, V, size=(b, n))
    for i, m in enumerate(ref):
        if m.is_terminated():
            continue
        depth_tokens = []
        for _ in range(n - 1):
            choices = allowed(m) if not m.is_terminated() else []
            if len(choices) == 0:
                break
            t = int(rng.choice(choices))
            m.accept_token(t)
            depth_tokens.append(t)
        m.rollback(len(depth_tokens))
        if kind == "chain":
            draft[i, 1 : 1 + len(depth_tokens)] = depth_tokens
        elif depth_tokens:
            path = [1, 3, 4]  # a root-to-leaf path of the tree
            for node, t in zip(path, depth_tokens, strict=False):
                draft[i, node] = t
    return draft


def make_batch(kind, ms, draft, **kwargs):
    if kind == "tree":
        return StepBatch.tree(ms, draft, NEXT_TOKEN, NEXT_SIBLING, **kwargs)
    if kind == "chain":
        return StepBatch.chain(ms, draft[:, 1:], **kwargs)
    return StepBatch.plain(ms, **kwargs)


def rows_of(ex, done):
    b = done.batch
    return ex.host_bitmask.numpy()[b.row_offset : b.row_offset + b.num_rows]


# --------------------------------------------------------------------------- queue


def test_fifo_order_and_empty_fetch(compiled, batch):
    ms = matchers_for(compiled, 2)
    ex = executor(8, batch)
    steps = [ex.enqueue(StepBatch.plain(ms, row_offset=2 * k)) for k in range(3)]
    assert [d.step_id for d in steps] == [0, 1, 2]
    assert ex.num_queued == 3
    for k, done in enumerate(steps):
        ex.launch()
        assert [d.built for d in steps] == [j <= k for j in range(3)]
        assert done.build_error is None
        ex.set_accepted(done, [[], []])
    ex.launch()  # nothing queued: a no-op that is counted
    assert ex.stats["empty_fetches"] == 1
    assert ex.stats["builds"] == 3
    assert ex.pending_steps == [2]
    host = ex.host_bitmask.numpy()
    assert np.array_equal(host[:6], np.tile(host[:2], (3, 1)))
    assert np.array_equal(ex.device_bitmask.numpy(), host)


# --------------------------------------------------------------------------- deferred advance


@pytest.mark.parametrize("seed", range(4))
def test_deferred_advance_matches_by_hand(compiled, batch, seed):
    rng = np.random.default_rng(seed)
    b = 5
    ms = matchers_for(compiled, b)
    ref = matchers_for(compiled, b)
    ex = executor(b * N_NODES, batch)
    prev = before = None
    for step in range(8):
        kind = ("tree", "chain", "next")[step % 3]
        draft = random_draft(ref, rng, kind)
        done = ex.enqueue(make_batch(kind, ms, draft))
        if prev is not None:
            # deferred: set_accepted changed nothing yet
            assert [m.num_accepted_steps() for m in ms] == before
        ex.launch()
        assert done.build_error is None
        if prev is not None:
            assert prev.advanced and prev.advanced_by == "build"
            assert [m.num_accepted_steps() for m in ms] == [m.num_accepted_steps() for m in ref]
        assert np.array_equal(rows_of(ex, done), reference_rows(ref, kind, draft))
        assert np.array_equal(ex.device_bitmask.numpy(), ex.host_bitmask.numpy())
        if kind != "next":
            assert done.tree_complete == [not m.is_terminated() for m in ref]
        accepted = [sample_path(m, rng, int(rng.integers(0, 4))) for m in ref]
        before = [m.num_accepted_steps() for m in ms]
        ex.set_accepted(done.step_id, accepted)
        prev = done
    assert ex.advance_now(prev) is True
    assert prev.advanced_by == "fallback"
    assert [m.num_accepted_steps() for m in ms] == [m.num_accepted_steps() for m in ref]
    assert [m.is_terminated() for m in ms] == [m.is_terminated() for m in ref]


def test_accepted_as_padded_array(compiled, batch):
    ms = matchers_for(compiled, 2)
    ex = executor(2, batch)
    done = ex.enqueue(StepBatch.plain(ms))
    ex.launch()
    ex.set_accepted(done, np.array([[T["a"], T["b"], -1], [T["c"], -1, -1]]))
    ex.advance_now(done)
    assert done.num_accepted.tolist() == [2, 1]
    assert [m.num_accepted_steps() for m in ms] == [2, 1]


def test_advance_mask_leaves_requests_unchanged(compiled, batch):
    ms = matchers_for(compiled, 3)
    ref = matchers_for(compiled, 3)
    ex = executor(3, batch)
    first = ex.enqueue(StepBatch.plain(ms))
    ex.launch()
    tokens = [[T["a"], T["b"]], [T["a"]], [T["ab"]]]
    ex.set_accepted(first, tokens, advance_mask=np.array([True, False, True]))
    second = ex.enqueue(StepBatch.plain(ms))
    ex.launch()
    assert first.num_accepted.tolist() == [2, 0, 1]
    assert [m.num_accepted_steps() for m in ms] == [2, 0, 1]
    for m, toks, adv in zip(ref, tokens, [True, False, True], strict=True):
        if adv:
            for t in toks:
                assert m.accept_token(t)
    assert np.array_equal(rows_of(ex, second), reference_rows(ref, "next", None))


def test_terminated_at_and_nothing_after_stop(compiled, batch):
    ms = matchers_for(compiled, 3)
    ex = executor(3 * N_NODES, batch)
    first = ex.enqueue(StepBatch.plain(ms))
    ex.launch()
    a, b, d, e = T["a"], T["b"], T["d"], T["e"]
    ex.set_accepted(
        first,
        [
            [a, b, d, EOS, a, b],  # terminates at index 3; a, b after it are never accepted
            [a, e, EOS],  # terminates at index 2
            [T["ab"], d],  # "d" is rejected by grammar 2: rejected_at 1
        ],
    )
    draft = np.zeros((3, N_NODES), np.int64)
    second = ex.enqueue(StepBatch.tree(ms, draft, NEXT_TOKEN, NEXT_SIBLING))
    ex.launch()
    assert second.build_error is None
    assert first.terminated_at.tolist() == [3, 2, -1]
    assert first.rejected_at.tolist() == [-1, -1, 1]
    assert first.num_accepted.tolist() == [4, 3, 1]
    assert [m.num_accepted_steps() for m in ms] == [4, 3, 1]
    assert [m.is_terminated() for m in ms] == [True, True, False]
    # terminated requests get all-allowed rows and are skipped; the live one is filled
    assert second.skipped.tolist() == [True, True, False]
    assert second.tree_complete == [False, False, True]
    rows = rows_of(ex, second)
    assert (rows[: 2 * N_NODES] == -1).all()
    ref = tg.GrammarMatcher(compiled[2])
    assert ref.accept_token(T["ab"])
    assert np.array_equal(rows[2 * N_NODES :], reference_rows([ref], "tree", draft[2:]))
    # a later step accepts nothing into the terminated matchers
    ex.set_accepted(second, [[a], [a], [T["cd"]]])
    ex.advance_now(second)
    assert second.num_accepted.tolist() == [0, 0, 1]
    assert second.terminated_at.tolist() == [-1, -1, -1]


# --------------------------------------------------------------------------- exactly once


class CountingBatch(tg.BatchGrammarMatcher):
    """Counts, per matcher, the tokens handed to batch_accept_token."""

    def __init__(self) -> None:
        super().__init__(1)
        self.calls: Counter = Counter()
        self._count_lock = threading.Lock()

    def batch_accept_token(self, matchers, tokens):
        with self._count_lock:
            for m in matchers:
                self.calls[id(m)] += 1
        return super().batch_accept_token(matchers, tokens)


@pytest.mark.parametrize("n_threads", [1, 4])
def test_fallback_race_advances_each_step_exactly_once(compiled, n_threads):
    rng = np.random.default_rng(n_threads)
    counting = CountingBatch()
    b = 4
    ms = matchers_for(compiled, b)
    ref = matchers_for(compiled, b)
    ex = executor(b, counting, accepted_timeout=0.0)
    expected = Counter()
    winners = []
    done = ex.enqueue(StepBatch.plain(ms))
    ex.launch()
    for it in range(30):
        # head starts of 2 ms for either side on two thirds of the rounds, a plain race on
        # the rest, so that both the build and the fallback win some rounds
        delay_build, delay_fallback = [(0.002, 0.0), (0.0, 0.002), (0.0, 0.0)][it % 3]
        accepted = [sample_path(m, rng, int(rng.integers(0, 3))) for m in ref]
        for m, toks in zip(ms, accepted, strict=True):
            expected[id(m)] += len(toks)
        ex.set_accepted(done, accepted)
        nxt = ex.enqueue(StepBatch.plain(ms))
        barrier = threading.Barrier(n_threads + 1)
        results = []
        errors = []

        def fallback(
            step=done,
            barrier=barrier,
            results=results,
            errors=errors,
            delay_fallback=delay_fallback,
        ):
            barrier.wait()
            time.sleep(delay_fallback)
            try:
                results.append(ex.advance_now(step))
            except Exception as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        def build(barrier=barrier, delay=delay_build):
            barrier.wait()
            time.sleep(delay)
            ex.launch()

        threads = [threading.Thread(target=fallback) for _ in range(n_threads)]
        threads.append(threading.Thread(target=build))
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors
        assert nxt.build_error is None
        assert done.advanced
        by_build = done.advanced_by == "build"
        assert sum(results) + by_build == 1
        winners.append(done.advanced_by)
        assert [m.num_accepted_steps() for m in ms] == [m.num_accepted_steps() for m in ref]
        assert np.array_equal(rows_of(ex, nxt), reference_rows(ref, "next", None))
        done = nxt
    assert {id(m): counting.calls[id(m)] for m in ms} == {id(m): expected[id(m)] for m in ms}
    assert set(winners) == {"build", "fallback"}
    assert ex.stats["advanced_by_build"] + ex.stats["advanced_by_fallback"] == 30
    counting.close()


def test_advance_now_contract(compiled, batch):
    ms = matchers_for(compiled, 1)
    ex = executor(2, batch)
    first = ex.enqueue(StepBatch.plain(ms))
    with pytest.raises(MatcherStateError, match="not built"):
        ex.advance_now(first)
    ex.launch()
    with pytest.raises(AcceptedTokensMissingError, match="set_accepted"):
        ex.advance_now(first)
    ex.set_accepted(first, [[T["a"]]])
    with pytest.raises(ArgumentError, match="already set"):
        ex.set_accepted(first, [[T["a"]]])
    assert ex.advance_now(first) is True
    assert ex.advance_now(first) is False
    assert ms[0].num_accepted_steps() == 1
    with pytest.raises(ArgumentError, match="already set"):
        ex.set_accepted(first, [[T["b"]]])
    with pytest.raises(ArgumentError, match="not a queued or pending"):
        ex.set_accepted(first.step_id, [[T["b"]]])
    with pytest.raises(ArgumentError, match="unknown step"):
        ex.advance_now(99)


def test_advance_now_advances_earlier_steps_first(compiled, batch):
    ms = matchers_for(compiled, 1)
    ex = executor(2, batch)
    s0 = ex.enqueue(StepBatch.plain(ms))
    ex.launch()
    ex.set_accepted(s0, [[T["a"]]])
    s1 = ex.enqueue(StepBatch.plain(ms, row_offset=1))
    # the build of s1 cannot see s0's tokens yet in a real engine; here they are set, so
    # the build advances s0; s1 is advanced by the fallback
    ex.launch()
    ex.set_accepted(s1, [[T["b"]]])
    assert s0.advanced_by == "build"
    assert ex.advance_now(s1) is True
    assert ms[0].num_accepted_steps() == 2


def test_missing_accepted_fails_build_then_recovers(compiled, batch):
    ms = matchers_for(compiled, 2)
    ex = executor(4, batch)
    s0 = ex.enqueue(StepBatch.plain(ms))
    ex.launch()
    s1 = ex.enqueue(StepBatch.plain(ms, row_offset=2))
    ex.launch()  # s0's tokens were never set
    assert isinstance(s1.build_error, AcceptedTokensMissingError)
    with pytest.raises(AcceptedTokensMissingError):
        s1.raise_for_build()
    assert (rows_of(ex, s1) == -1).all()
    assert ex.pending_steps == [0, 1]
    ex.set_accepted(s0, [[T["a"]], [T["b"]]])
    ex.set_accepted(s1, [[T["b"]], []])
    assert ex.advance_now(s1) is True  # advances s0 first, then s1
    assert s0.advanced_by == s1.advanced_by == "fallback"
    assert [m.num_accepted_steps() for m in ms] == [2, 1]


def test_read_accepted_callable(compiled, batch):
    ms = matchers_for(compiled, 1)
    ex = executor(2, batch)
    s0 = ex.enqueue(StepBatch.plain(ms, read_accepted=lambda: ([[T["a"]]], None)))
    ex.launch()
    s1 = ex.enqueue(StepBatch.plain(ms))
    ex.launch()
    assert s1.build_error is None
    assert s0.advanced_by == "build"
    assert ms[0].num_accepted_steps() == 1


def test_accepted_timeout_waits_for_host(compiled, batch):
    ms = matchers_for(compiled, 1)
    ex = executor(2, batch, accepted_timeout=5.0)
    s0 = ex.enqueue(StepBatch.plain(ms))
    ex.launch()
    s1 = ex.enqueue(StepBatch.plain(ms))
    builder = threading.Thread(target=ex.launch)
    builder.start()
    ex.set_accepted(s0, [[T["a"]]])  # while the build waits, as a host thread would
    builder.join()
    assert s1.build_error is None
    assert s0.advanced_by == "build"


# --------------------------------------------------------------------------- reset


def test_reset_after_simulated_capture(compiled, batch):
    dummy = matchers_for(compiled, 2)
    ex = executor(2 * N_NODES, batch)
    # warm-up/capture: the engine runs the step with dummy data
    cap = ex.enqueue(
        StepBatch.tree(dummy, np.zeros((2, N_NODES), np.int64), NEXT_TOKEN, NEXT_SIBLING)
    )
    ex.launch()
    ex.launch()  # a second warm-up pass with nothing queued
    ex.set_accepted(cap, [[T["a"]], [T["a"]]])
    extra = ex.enqueue(StepBatch.plain(dummy))
    ex.reset()
    assert ex.num_queued == 0 and ex.pending_steps == []
    assert ex.stats == {
        "builds": 0,
        "empty_fetches": 0,
        "advanced_by_build": 0,
        "advanced_by_fallback": 0,
    }
    assert ex.advance_now(cap) is False  # dropped, never advanced
    assert not extra.built
    # real steps: the first build has nothing to advance, the dummy matchers stay put
    ms = matchers_for(compiled, 2)
    s0 = ex.enqueue(StepBatch.plain(ms))
    assert s0.step_id > extra.step_id
    ex.launch()
    ex.set_accepted(s0, [[T["a"]], [T["c"]]])
    s1 = ex.enqueue(StepBatch.plain(ms))
    ex.launch()
    assert s1.build_error is None
    assert [m.num_accepted_steps() for m in dummy] == [0, 0]
    assert [m.num_accepted_steps() for m in ms] == [1, 1]


# --------------------------------------------------------------------------- validation


def test_bad_input(compiled, batch):
    ms = matchers_for(compiled, 2)
    ex = executor(4, batch)
    with pytest.raises(ArgumentError, match="max_rows=4"):
        ex.enqueue(StepBatch.tree(ms, np.zeros((2, N_NODES), np.int64), NEXT_TOKEN, NEXT_SIBLING))
    with pytest.raises(ArgumentError, match="must be a StepBatch"):
        ex.enqueue("step")
    with pytest.raises(ArgumentError, match=r"matchers\[1\]"):
        StepBatch.plain([ms[0], "x"])
    with pytest.raises(DraftTreeError, match="draft_tokens"):
        StepBatch.tree(ms, np.zeros((3, N_NODES), np.int64), NEXT_TOKEN, NEXT_SIBLING)
    with pytest.raises(DraftTreeError, match="reached twice"):
        StepBatch.tree(ms, np.zeros((2, 2), np.int64), [1, 0], [-1, -1])
    other = tg.GrammarCompiler(tg.TokenizerInfo(VOCAB + ["zz"])).compile_grammar(GRAMMARS[0])
    with pytest.raises(ArgumentError, match="vocab_size"):
        ex.enqueue(StepBatch.plain([tg.GrammarMatcher(other)]))
    done = ex.enqueue(StepBatch.plain(ms))
    with pytest.raises(InvalidTokenIdError):
        ex.set_accepted(done, [[V], []])
    with pytest.raises(ArgumentError, match="2 requests"):
        ex.set_accepted(done, [[1]])
    with pytest.raises(ArgumentError, match="advance_mask"):
        ex.set_accepted(done, [[], []], advance_mask=[1, 0])


def test_eager_step_executor(compiled):
    ms = matchers_for(compiled, 2)
    with EagerStepExecutor(V, 2, max_threads=1) as ex:
        assert isinstance(ex.launcher, EagerLauncher)
        done = ex.enqueue(StepBatch.plain(ms))
        ex.launch()
        assert np.array_equal(
            ex.device_bitmask.numpy(), reference_rows(matchers_for(compiled, 2), "next", None)
        )
        ex.set_accepted(done, [[T["a"]], [T["a"]]])
        assert ex.advance_now(done)


# --------------------------------------------------------------------------- CUDA launcher


def test_cuda_launcher_missing_binding(monkeypatch):
    def no_module(name):
        raise ImportError(name)

    def no_lib(name, *args, **kwargs):
        raise OSError(name)

    monkeypatch.setattr(launcher_mod.importlib, "import_module", no_module)
    monkeypatch.setattr(launcher_mod.ctypes, "CDLL", no_lib)
    with pytest.raises(MissingDependencyError, match="cuda-python"):
        launcher_mod._find_binding()
    with pytest.raises(MissingDependencyError, match=r"libcuda\.so\.1"):
        launcher_mod._find_binding("ctypes")
    with pytest.raises(ArgumentError, match="binding"):
        launcher_mod._find_binding("cffi")


def test_cuda_launcher_needs_cuda():
    if torch.cuda.is_available():
        pytest.skip("CUDA is available")
    with pytest.raises(ArgumentError, match="EagerLauncher"):
        CudaHostLauncher()


def _available_bindings():
    kinds = ["ctypes"]
    try:
        launcher_mod._find_binding("cuda-python")
        kinds.append("cuda-python")
    except MissingDependencyError:
        pass
    return kinds


@pytest.mark.gpu
@pytest.mark.parametrize("binding", ["ctypes", "cuda-python"])
def test_cuda_launcher_matches_eager(compiled, batch, binding):
    if binding not in _available_bindings():
        pytest.skip(f"{binding} binding not available")
    rng = np.random.default_rng(7)
    b = 3
    ms, ref = matchers_for(compiled, b), matchers_for(compiled, b)
    launcher = CudaHostLauncher(binding=binding)
    ex = StepExecutor(V, b * N_NODES, launcher=launcher, batch_matcher=batch)
    assert ex.host_bitmask.is_pinned()
    for _ in range(4):
        draft = random_draft(ref, rng, "tree")
        done = ex.enqueue(make_batch("tree", ms, draft))
        ex.launch()
        torch.cuda.synchronize()
        assert done.build_error is None and not ex.launcher.errors
        got = ex.device_bitmask.cpu().numpy()[: b * N_NODES]
        assert np.array_equal(got, reference_rows(ref, "tree", draft))
        ex.set_accepted(done, [sample_path(m, rng, 2) for m in ref])
    ex.advance_now(done)
    assert [m.num_accepted_steps() for m in ms] == [m.num_accepted_steps() for m in ref]


@pytest.mark.gpu
def test_cuda_graph_capture_and_replay(compiled, batch):
    rng = np.random.default_rng(8)
    b = 2
    ms, ref = matchers_for(compiled, b), matchers_for(compiled, b)
    dummy = matchers_for(compiled, b)
    ex = StepExecutor(V, b * N_NODES, launcher=CudaHostLauncher(), batch_matcher=batch)
    logits = torch.zeros(b * N_NODES, V, device="cuda")
    out = torch.empty_like(logits)
    bits = torch.arange(32, device="cuda", dtype=torch.int32)

    def step():
        ex.launch()
        words = ex.device_bitmask[:, :1]
        allowed_bits = ((words >> bits) & 1)[:, :V].bool()
        out.copy_(torch.where(allowed_bits, logits, torch.full_like(logits, -float("inf"))))

    zeros = np.zeros((b, N_NODES), np.int64)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up with dummy data
        ex.enqueue(StepBatch.tree(dummy, zeros, NEXT_TOKEN, NEXT_SIBLING))
        step()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    torch.cuda.synchronize()
    ex.reset()
    for _ in range(4):
        draft = random_draft(ref, rng, "tree")
        done = ex.enqueue(make_batch("tree", ms, draft))
        graph.replay()
        torch.cuda.synchronize()
        assert done.built and done.build_error is None and not ex.launcher.errors
        expected = reference_rows(ref, "tree", draft)
        assert np.array_equal(ex.device_bitmask.cpu().numpy(), expected)
        ok = tg.bitmask_to_bool(expected, V)
        assert torch.equal(torch.isfinite(out).cpu(), torch.from_numpy(ok))
        ex.set_accepted(done, [sample_path(m, rng, 2) for m in ref])
    ex.advance_now(done)
    assert [m.num_accepted_steps() for m in ms] == [m.num_accepted_steps() for m in ref]
    assert [m.num_accepted_steps() for m in dummy] == [0, 0]
