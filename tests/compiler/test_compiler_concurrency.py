"""GrammarCompiler under concurrent callers: one bounded pool, identical results, failures.

Eight threads compile 32 distinct large grammars (256-property JSON objects written as
EBNF) with eager classification through one compiler. The results must serialize to the
same bytes as a one-thread compile, the number of live threads must stay within the
compiler's ``max_threads`` (sampled during the run), and an injected failure inside the
pool must reach the caller only after every block finished, with the pool reused after.
The vocabulary is a 4,001-token slice of DeepSeek-V4 (all 256 single bytes plus real
multi-byte tokens) so that classifying ~3,500 states per grammar takes milliseconds.
"""

from __future__ import annotations

import threading
import time

import pytest

import treegram as tg
import treegram.compiler._mask_store as mask_store_module
from treegram.compiler import CompiledGrammar, GrammarCompiler
from treegram.errors import ArgumentError, WorkerError
from treegram.pool import MAX_THREADS_LIMIT

N_GRAMMARS = 32
N_CALLERS = 8
MAX_THREADS = 4
TYPES = ("string", "integer", "boolean", "number")


def object_ebnf(i: int, n_props: int = 256) -> str:
    """A JSON object with ``n_props`` required properties ``f{i}_{k}`` of varied types."""
    members = ' "," ws '.join(
        f'"\\"f{i}_{k}\\"" ws ":" ws {TYPES[(i + k) % 4]}' for k in range(n_props)
    )
    return (
        f'root ::= "{{" ws {members} ws "}}"\n'
        "ws ::= [ \\n\\t]*\n"
        'string ::= "\\"" ([^"\\\\] | "\\\\" ["\\\\/bfnrt])* "\\""\n'
        'integer ::= "-"? ([1-9] [0-9]* | "0")\n'
        'number ::= integer ("." [0-9]+)?\n'
        'boolean ::= "true" | "false"\n'
    )


@pytest.fixture(scope="module")
def info() -> tg.TokenizerInfo:
    decoded = tg.TokenizerInfo.deepseek_v4().decoded_vocab
    vocab = [bytes([b]) for b in range(256)] + [v for v in decoded[:4000] if len(v) > 1]
    vocab.append(b"<eos>")
    return tg.TokenizerInfo(vocab, stop_token_ids=[len(vocab) - 1])


@pytest.fixture(scope="module")
def grammars() -> list[str]:
    return [object_ebnf(i) for i in range(N_GRAMMARS)]


@pytest.fixture(scope="module")
def serial_bytes(info, grammars) -> list[bytes]:
    compiler = GrammarCompiler(info, max_threads=1)
    out = [compiler.compile_grammar(g, classify="eager").serialize() for g in grammars]
    assert compiler._pool._threads == []  # max_threads=1 never starts a thread
    return out


class _ThreadSampler:
    """Samples ``threading.active_count()`` every millisecond in a background thread."""

    def __init__(self) -> None:
        self.samples: list[int] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.samples.append(threading.active_count())
            time.sleep(0.001)

    def __enter__(self) -> _ThreadSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


def _run_callers(fn, n_callers: int) -> list:
    """Start ``n_callers`` threads parked at a barrier; returns (threads, barrier, results)."""
    barrier = threading.Barrier(n_callers + 1)
    results: list = [None] * n_callers

    def body(c: int) -> None:
        barrier.wait()
        try:
            results[c] = fn(c)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            results[c] = exc

    threads = [threading.Thread(target=body, args=(c,)) for c in range(n_callers)]
    for t in threads:
        t.start()
    return threads, barrier, results


@pytest.mark.slow
def test_eight_callers_share_one_bounded_pool(info, grammars, serial_bytes):
    compiler = GrammarCompiler(info, max_threads=MAX_THREADS)

    def caller(c: int) -> dict[int, bytes]:
        # every caller asks for every grammar, each in its own rotated order: same-key
        # requests overlap, and must compile once
        order = [(c * N_GRAMMARS // N_CALLERS + j) % N_GRAMMARS for j in range(N_GRAMMARS)]
        return {
            i: compiler.compile_grammar(grammars[i], classify="eager").serialize() for i in order
        }

    with _ThreadSampler() as sampler:
        threads, barrier, results = _run_callers(caller, N_CALLERS)
        time.sleep(0.05)
        baseline = threading.active_count()  # main + sampler + the parked callers
        barrier.wait()
        for t in threads:
            t.join()
    for r in results:
        if isinstance(r, BaseException):
            raise r
    for r in results:
        assert [r[i] for i in range(N_GRAMMARS)] == serial_bytes
    stats = compiler.cache_stats
    assert stats["compiles"] == N_GRAMMARS
    assert stats["memory_hits"] == N_CALLERS * N_GRAMMARS - N_GRAMMARS
    # the pool owns max_threads - 1 threads (the caller is the last worker), never more
    assert len(compiler._pool._threads) == MAX_THREADS - 1
    peak = max(sampler.samples)
    assert peak <= baseline + MAX_THREADS - 1, (peak, baseline, MAX_THREADS)
    assert peak <= baseline + MAX_THREADS


def test_parallel_precompile_matches_lazy_classify_all(info, grammars, serial_bytes):
    # the serial MaskStore path (classify_all_states) and the pooled one give equal bytes
    lazy = GrammarCompiler(info, cache_enabled=False).compile_grammar(grammars[3])
    lazy.classify_all_states()
    assert lazy.serialize() == serial_bytes[3]
    pooled = GrammarCompiler(info, max_threads=8, cache_enabled=False)
    compiled = pooled.compile_grammar(grammars[3])
    assert compiled._store.n_classified_states == 0
    assert pooled.precompile(compiled) is compiled
    assert compiled.serialize() == serial_bytes[3]
    pooled.precompile(compiled)  # nothing left to do
    assert compiled.serialize() == serial_bytes[3]


def test_precompile_after_partial_lazy_classification(info, grammars, serial_bytes):
    compiler = GrammarCompiler(info, max_threads=4, cache_enabled=False)
    compiled = compiler.compile_grammar(grammars[5])
    compiled._store.classify_states(range(0, 3000, 7))  # as matchers would, first
    compiler.precompile(compiled)
    assert compiled._store.unclassified_states().shape[0] == 0
    again = GrammarCompiler(info, cache_enabled=False).compile_grammar(grammars[5])
    again._store.classify_states(range(0, 3000, 7))
    again.classify_all_states()
    assert compiled.serialize() == again.serialize()


@pytest.mark.slow
def test_pool_reused_after_injected_failure(info, grammars, serial_bytes, monkeypatch):
    # Fail inside the per-state classification step (a trie walk or a hit in the
    # vocabulary's shared class cache, which the earlier tests have filled).
    real = mask_store_module.MaskStore._class_of
    calls = {"n": 0}
    lock = threading.Lock()

    def flaky(*args, **kwargs):
        with lock:
            calls["n"] += 1
            n = calls["n"]
        if n == 40:  # once, in the middle of a parallel precompile
            raise RuntimeError("injected classify failure")
        return real(*args, **kwargs)

    monkeypatch.setattr(mask_store_module.MaskStore, "_class_of", flaky)
    compiler = GrammarCompiler(info, max_threads=MAX_THREADS)
    with pytest.raises(WorkerError) as err:
        compiler.compile_grammar(grammars[0], classify="eager")
    assert isinstance(err.value.__cause__, RuntimeError)
    assert "injected classify failure" in str(err.value)
    # every block had finished before the error reached us: no classify call afterwards
    n_at_raise = calls["n"]
    time.sleep(0.2)
    assert calls["n"] == n_at_raise
    n_states = GrammarCompiler(info).compile_grammar(grammars[0]).automaton.n_states
    assert n_at_raise <= n_states  # each state was tried at most once
    # nothing half-done: the failed compile is not cached, its key is free again
    assert compiler.get_cache_size_bytes() == 0
    assert compiler.cache_stats["compiles"] == 1
    threads_before = list(compiler._pool._threads)
    assert len(threads_before) == MAX_THREADS - 1

    # the same pool (same threads) serves the next calls, from several threads
    threads, barrier, results = _run_callers(
        lambda c: compiler.compile_grammar(grammars[c], classify="eager").serialize(), 4
    )
    barrier.wait()
    for t in threads:
        t.join()
    assert results == serial_bytes[:4]
    assert compiler._pool._threads == threads_before
    assert all(t.is_alive() for t in threads_before)


def test_failed_precompile_stores_nothing(info, grammars, monkeypatch):
    compiler = GrammarCompiler(info, max_threads=2, cache_enabled=False)
    compiled = compiler.compile_grammar(grammars[1])

    def broken(*args, **kwargs):
        raise ValueError("boom")

    monkeypatch.setattr(mask_store_module.MaskStore, "_class_of", broken)
    with pytest.raises(WorkerError):
        compiler.precompile(compiled)
    assert compiled._store.n_classified_states == 0
    assert compiled._store.n_classes == 0


@pytest.mark.parametrize("bad", [0, -1, 10**9, 2**70, True, 2.0])
def test_max_threads_is_bounded(bad):
    info = tg.TokenizerInfo(["a", "b"])
    with pytest.raises(ValueError, match="max_threads"):
        GrammarCompiler(info, max_threads=bad)
    assert GrammarCompiler(info, max_threads=MAX_THREADS_LIMIT).max_threads == MAX_THREADS_LIMIT


def test_small_work_runs_inline():
    vocab = [b"a", b"b", b"ab", b"<eos>"]
    small = tg.TokenizerInfo(vocab, stop_token_ids=[3])
    compiler = GrammarCompiler(small, max_threads=8)
    compiled = compiler.compile_grammar('root ::= ("a" | "b")+', classify="eager")
    assert compiled._store.unclassified_states().shape[0] == 0
    assert compiler._pool._threads == []  # one block: no thread was started


def test_classify_argument_and_cache_accounting(info, grammars):
    compiler = GrammarCompiler(info, max_threads=2)
    with pytest.raises(ArgumentError, match="classify"):
        compiler.compile_grammar(grammars[0], classify="sometimes")
    with pytest.raises(ArgumentError, match="compiled"):
        compiler.precompile("not a grammar")
    lazy = compiler.compile_grammar(grammars[2])
    lazy_size = compiler.get_cache_size_bytes()
    assert lazy_size == lazy.memory_size_bytes > 0
    eager = compiler.compile_grammar(grammars[2], classify="eager")  # a hit, classified now
    assert eager is lazy
    assert eager._store.unclassified_states().shape[0] == 0
    assert compiler.get_cache_size_bytes() == eager.memory_size_bytes > lazy_size
    assert compiler.compile_regex("[ab]+", classify="eager")._store.n_classes > 0
    assert isinstance(compiler.compile_builtin_json_grammar(), CompiledGrammar)
    compiler.clear_cache()
    assert compiler.get_cache_size_bytes() == 0
    assert compiler.compile_grammar(grammars[2]) is not lazy


def test_masks_while_the_pool_classifies_in_the_background(info, grammars):
    """A decoding thread fills masks (classifying what it meets) while ``precompile``
    classifies the same grammar on the pool in another thread: every mask equals a lone
    matcher's, during the race and after it (then from the classes both threads stored)."""
    import numpy as np

    compiler = GrammarCompiler(info, max_threads=MAX_THREADS, cache_enabled=False)
    compiled = compiler.compile_grammar(grammars[1])
    lone = GrammarCompiler(info, cache_enabled=False).compile_grammar(grammars[1])
    text = (
        "{"
        + ", ".join(f'"f1_{k}": ' + ('"v"', "12", "true", "1.5")[(1 + k) % 4] for k in range(256))
        + "}"
    )
    ours, theirs = tg.GrammarMatcher(compiled), tg.GrammarMatcher(lone)
    rows = tg.allocate_token_bitmask(2, info.vocab_size, backend="numpy")
    tokens = [info.decoded_vocab.index(ch.encode()) for ch in text]

    def walk() -> None:
        ours.reset()
        theirs.reset()
        for token in tokens:
            ours.fill_next_token_bitmask(rows, 0)
            theirs.fill_next_token_bitmask(rows, 1)
            assert np.array_equal(rows[0], rows[1])
            assert ours.accept_token(token) and theirs.accept_token(token)
        assert ours.is_completed()

    background = threading.Thread(target=compiler.precompile, args=(compiled,))
    background.start()
    walk()
    background.join()
    assert compiled._store.unclassified_states().shape[0] == 0
    walk()
