"""Issue 11, matcher layer: lifetimes of matchers, grammars and their registry slots.

Each test names the finding of issue 11 it covers. Scenarios that used to crash or hang
(findings 1-4) run in a fresh interpreter with a timeout (``run_scenario``). The last test
drives random sequences of public calls on several threads and checks every mask against
fresh single-threaded matchers.
"""

from __future__ import annotations

import copy
import gc
import threading
import weakref

import numpy as np
import pytest
from adversarial.lifetime_scenarios import EOS, GRAMMAR_TEXTS, VOCAB, W, holding, run_scenario
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import treegram as tg
from treegram import BatchGrammarMatcher, GrammarMatcher
from treegram.kernels._registry import GRAMMARS, MATCHERS

V = len(VOCAB)


@pytest.fixture(scope="module")
def info():
    return tg.TokenizerInfo(VOCAB, stop_token_ids=[EOS])


@pytest.fixture(scope="module")
def blobs(info):
    """Serialized grammars compiled but never matched: each deserialization is a grammar
    whose classification is still empty (so tests exercise classification races)."""
    comp = tg.GrammarCompiler(info, cache_enabled=False, max_threads=1)
    return {name: comp.compile_grammar(text).serialize() for name, text in GRAMMAR_TEXTS.items()}


def tok(text: str) -> int:
    return VOCAB.index(text)


def mask(m: GrammarMatcher) -> np.ndarray:
    row = np.zeros((1, W), dtype=np.int32)
    m.fill_next_token_bitmask(row)
    return row[0].copy()


def replay(g, steps) -> GrammarMatcher:
    """A fresh matcher that accepted ``steps`` (token ids, or strings as one step each)."""
    r = GrammarMatcher(g)
    for t in steps:
        assert r.accept_string(t) if isinstance(t, str) else r.accept_token(t), t
    return r


# --------------------------------------------------------------------------- finding 1
def test_finding01_copy_of_matcher_has_its_own_slot():
    """copy.copy / copy.deepcopy of a registered matcher, the original collected and its
    slot reused by a matcher of another grammar: the copies keep their own state and the
    other matcher is untouched (used to segfault, hang or corrupt the other matcher)."""
    run_scenario("""
    g1, g2 = fresh("letters"), fresh("expr")
    bm = BatchGrammarMatcher(1)
    out = np.zeros((1, W), dtype=np.int32)
    m = GrammarMatcher(g1)
    hist = [tok("a"), tok("b")]
    for t in hist:
        assert m.accept_token(t)
    bm.batch_fill_next_token_bitmask([m], out)  # takes a registry slot
    copies = [copy.copy(m), copy.deepcopy(m), m.fork()]
    del m
    gc.collect()
    others = []
    for _ in range(3):  # reuse every released slot with matchers of another grammar
        o = GrammarMatcher(g2)
        assert o.accept_token(tok("("))
        bm.batch_fill_next_token_bitmask([o], out)
        others.append(o)
    ref_other = mask(replay(g2, [tok("(")]))
    for c in copies:
        bm.batch_fill_next_token_bitmask([c], out)
        assert (out[0] == mask(replay(g1, hist))).all()
        assert bm.batch_accept_token([c], [tok("z")]) == [True]
        bm.batch_fill_next_token_bitmask([c], out)
        assert (out[0] == mask(replay(g1, hist + [tok("z")]))).all()
        assert c.num_accepted_steps() == 3
        for o in others:
            assert o.num_accepted_steps() == 1
            assert (mask(o) == ref_other).all()
    slots = [c._slot for c in copies] + [o._slot for o in others]
    assert len(set(slots)) == len(slots)
    print("OK")
    """)


# --------------------------------------------------------------------------- finding 2
def test_finding02_batch_call_holds_its_matchers():
    """Another thread replaces entries of the list a batch call works on and registers
    new matchers (reusing released slots): every row the call writes is the mask of a
    matcher that was in the list (used to segfault or allocate 16 GiB)."""
    run_scenario("""
    sys.setswitchinterval(1e-6)  # switch threads as often as possible: widen every race
    g1, g2 = fresh("expr"), fresh("letters")
    a = GrammarMatcher(g1)
    assert a.accept_token(tok("1"))
    mask_a, mask_b = mask(a), mask(GrammarMatcher(g2))
    assert not (mask_a == mask(GrammarMatcher(g1))).all()  # a foreign slot would show
    n = 64
    ms = [a.fork() for _ in range(n)]
    bm = BatchGrammarMatcher(4)
    side = BatchGrammarMatcher(1)
    out = np.zeros((n, W), dtype=np.int32)
    stop = threading.Event()
    errors = []

    def churn():
        try:
            i = 0
            scratch = np.zeros((1, W), dtype=np.int32)
            while not stop.is_set():
                ms[i % n] = GrammarMatcher(g2)  # drops a matcher the other call may be using
                side.batch_fill_next_token_bitmask([GrammarMatcher(g1)], scratch)  # reuse
                i += 1
        except BaseException as exc:
            errors.append(exc)

    t = threading.Thread(target=churn)
    t.start()
    deadline = time.monotonic() + 2.0
    calls = 0
    import treegram.matcher._batch as mb
    mb._INLINE_WORDS = 1  # split every call across the workers
    while time.monotonic() < deadline:
        out[:] = 0x5A5A5A5A
        bm.batch_fill_next_token_bitmask(ms, out)
        for row in out:
            assert (row == mask_a).all() or (row == mask_b).all(), row
        calls += 1
    stop.set()
    t.join()
    assert not errors, errors
    assert calls > 0
    print("OK")
    """)


# --------------------------------------------------------------------------- finding 3
def test_finding03_first_batch_use_blocked_while_scalar_classifies():
    """A grammar's first batch use waits behind another batch call while a scalar matcher
    of the same grammar classifies (re-allocating the classification arrays): the batch
    call must see the new arrays and finish (it used to spin forever)."""
    run_scenario("""
    from treegram.compiler import _mask_store
    from treegram.kernels._registry import REGISTRY_LOCK
    # a class table with room for two classes, so that classifying re-allocates it
    _mask_store._CLASSES_ROOM = 2
    g = fresh("object")
    store = g._store
    before = store.snapshot()
    m = GrammarMatcher(g)
    out = np.zeros((1, W), dtype=np.int32)
    bm = BatchGrammarMatcher(1)
    REGISTRY_LOCK.acquire_read()  # another batch call in flight
    done = threading.Event()

    def first_batch_use():
        bm.batch_fill_next_token_bitmask([m], out)
        done.set()

    t = threading.Thread(target=first_batch_use, daemon=True)
    t.start()
    time.sleep(0.3)  # the batch call is now waiting for the registry
    g.classify_all_states()  # classification by a scalar user of the same grammar
    assert store.snapshot()[0] is not before[0], "the scenario needs a re-allocation"
    REGISTRY_LOCK.release_read()
    assert done.wait(20), "batch_fill_next_token_bitmask did not finish"
    assert (out[0] == mask(GrammarMatcher(g))).all()
    # Walk into states classified after the re-allocation: batch calls must see them.
    walked = threading.Event()
    text = '{"ab": -12, "x_y": true, "z": null}'
    hist = []

    def walk():
        for ch in text:
            assert bm.batch_accept_token([m], [tok(ch)]) == [True]
            hist.append(tok(ch))
            bm.batch_fill_next_token_bitmask([m], out)
            assert (out[0] == mask(replay(g, hist))).all() or len(hist) == len(text)
        walked.set()

    threading.Thread(target=walk, daemon=True).start()
    if not walked.wait(20):
        print("batch calls spin on an outdated classification", flush=True)
        os._exit(3)
    print("OK")
    """)


# --------------------------------------------------------------------------- finding 4
def test_finding04_copied_grammar_both_registered_then_classified():
    """copy.copy(compiled_grammar), both registered, then classify_all_states(): batch
    calls on matchers of both finish with the right masks (used to busy-loop)."""
    run_scenario("""
    g = fresh("object")
    for twin in (copy.copy(g), copy.deepcopy(g)):
        bm = BatchGrammarMatcher(1)
        ms = [GrammarMatcher(g), GrammarMatcher(twin)]
        out = np.zeros((2, W), dtype=np.int32)
        bm.batch_fill_next_token_bitmask(ms, out)  # registers both grammars
        assert g._slot != twin._slot
        twin.classify_all_states()
        assert bm.batch_accept_token(ms, [tok("{")] * 2) == [True, True]
        bm.batch_fill_next_token_bitmask(ms, out)
        ref = mask(replay(g, [tok("{")]))
        assert (out == ref).all()
    print("OK")
    """)


def test_finding04_grammar_copy_is_a_fork(info, blobs):
    g = tg.CompiledGrammar.deserialize(blobs["letters"], info)
    twin = copy.copy(g)
    assert twin is not g and copy.deepcopy(g) is not g
    assert twin.tokenizer_info is g.tokenizer_info and twin.automaton is g.automaton
    bm = BatchGrammarMatcher(1)
    out = np.zeros((2, W), dtype=np.int32)
    bm.batch_fill_next_token_bitmask([GrammarMatcher(g), GrammarMatcher(twin)], out)
    assert g._slot >= 0 and twin._slot >= 0 and g._slot != twin._slot
    assert (out[0] == out[1]).all()


# --------------------------------------------------------------------------- finding 13
def test_finding13_deleted_matchers_release_registry_memory(info, blobs):
    """The arrays of a deleted batch-registered matcher are freed when it is collected,
    not when its slot is reused (2,000 of them used to keep 96 MB)."""
    g = tg.CompiledGrammar.deserialize(blobs["letters"], info)
    bm = BatchGrammarMatcher(1)
    ms = [GrammarMatcher(g) for _ in range(200)]
    out = np.zeros((len(ms), W), dtype=np.int32)
    bm.batch_fill_next_token_bitmask(ms, out)
    refs = [weakref.ref(m._memo_row) for m in ms]
    slots = [m._slot for m in ms]
    assert all(MATCHERS.owner_of(s) is not None for s in slots)
    del ms
    gc.collect()
    assert all(r() is None for r in refs), "registry still holds deleted matchers' arrays"
    assert all(MATCHERS.owner_of(s) is None for s in slots)
    gslot = g._slot
    state = weakref.ref(g._store.snapshot()[0])
    del g
    gc.collect()
    assert GRAMMARS.owner_of(gslot) is None
    assert state() is None


def test_batch_calls_see_a_new_vocabulary_in_reused_slots(info, blobs):
    """A batch call reuses the last batch's slot arrays and vocabulary while the matchers
    it gets have the same slots (an engine passes the same requests every step). Once
    those matchers and their grammar are collected and a grammar of a larger vocabulary
    takes the same slots, the next call must check against the new vocabulary."""
    g = tg.CompiledGrammar.deserialize(blobs["letters"], info)
    bm = BatchGrammarMatcher(1)
    m = GrammarMatcher(g)
    bm.batch_fill_next_token_bitmask([m], np.zeros((1, W), np.int32))
    slots = (g._slot, m._slot)
    del m, g
    gc.collect()
    wide = tg.TokenizerInfo(VOCAB + [f"<x{i}>" for i in range(64)], stop_token_ids=[EOS])
    g2 = tg.GrammarCompiler(wide, cache_enabled=False).compile_grammar(GRAMMAR_TEXTS["letters"])
    m2 = GrammarMatcher(g2)
    assert m2.accept_token(tok("a"))  # takes its slots
    assert (g2._slot, m2._slot) == slots  # the freed ones, reused
    assert bm.batch_accept_token([m2], [V + 5]) == [False]  # a special token, not invalid
    out = np.zeros((1, (V + 64 + 31) // 32), np.int32)
    bm.batch_fill_next_token_bitmask([m2], out)
    np.testing.assert_array_equal(out[0], mask_of_wide(m2, out.shape[1]))
    with pytest.raises(tg.errors.InvalidTokenIdError):
        bm.batch_accept_token([m2], [V + 64])


def test_batch_claims_the_matchers_it_gets_when_slots_are_reused(info, blobs):
    """A batch call reuses the last batch's lock list while the matchers it gets have the
    same keys. After those matchers are collected and new ones take the same slots (the
    same keys), a new matcher busy in another thread must still make the call raise: its
    own lock is claimed, not the collected matcher's."""
    g = tg.CompiledGrammar.deserialize(blobs["letters"], info)
    bm = BatchGrammarMatcher(1)
    out = np.zeros((2, W), np.int32)
    ms = [GrammarMatcher(g) for _ in range(2)]
    bm.batch_fill_next_token_bitmask(ms, out)
    bm.batch_fill_next_token_bitmask(ms, out)  # the lock list reused
    keys = [m._batch_key for m in ms]
    del ms
    gc.collect()
    new = [GrammarMatcher(g) for _ in range(2)]
    for m in new:  # the freed slots, reused
        m._register()
    new.sort(key=lambda m: keys.index(m._batch_key))  # in the order of the last batch
    assert [m._batch_key for m in new] == keys
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with holding(new[1]):
            held.set()
            release.wait(10)

    t = threading.Thread(target=hold)
    t.start()
    try:
        held.wait(10)
        with pytest.raises(tg.errors.MatcherStateError, match=r"matchers\[1\]"):
            bm.batch_fill_next_token_bitmask(new, out)
    finally:
        release.set()
        t.join()
    bm.batch_fill_next_token_bitmask(new, out)  # free again: claimed and filled


def test_batch_claims_the_matchers_it_gets_when_ids_are_reused(info, blobs):
    """The one-pass claim knows the last batch by its matchers' ids (their addresses),
    while no matcher slot was released. Once a matcher of it is collected, a new one may
    take its address: the next call must claim the new matcher itself (and register it),
    not the kept lock list and key of the collected one."""
    from treegram.matcher import _batch

    g = tg.CompiledGrammar.deserialize(blobs["letters"], info)
    bm = BatchGrammarMatcher(1)
    out = np.zeros((2, W), np.int32)
    for _ in range(500):  # until a new matcher takes the collected one's address
        ms = [GrammarMatcher(g) for _ in range(2)]
        bm.batch_fill_next_token_bitmask(ms, out)
        bm.batch_fill_next_token_bitmask(ms, out)  # the one-pass claim
        gone, releases = id(ms[1]), MATCHERS.releases
        del ms[1]  # collected here (no cycle): its slot released
        m = GrammarMatcher.__new__(GrammarMatcher)  # the freed block, often
        if id(m) == gone:
            break
    else:
        pytest.skip("no new matcher took the collected one's address")
    assert MATCHERS.releases > releases
    m.__init__(g)
    batch = (ms[0], m)  # the last batch's ids, in order
    taken, keys = _batch._claim(batch)
    try:
        assert type(taken) is list  # the per-matcher claim, not the kept lists
        assert not m._free and keys[1] == -1  # the new matcher, not registered yet
    finally:
        _batch._release(taken)
    assert m._free and ms[0]._free
    bm.batch_fill_next_token_bitmask(list(batch), out)  # registers it
    assert m._batch_key >= 0 and m._batch_key != ms[0]._batch_key
    np.testing.assert_array_equal(out[1], mask(m))
    assert m.accept_token(tok("a")) and ms[0].accept_token(tok("1"))
    bm.batch_fill_next_token_bitmask(list(batch), out)  # the one-pass claim again
    np.testing.assert_array_equal(out[0], mask(ms[0]))
    np.testing.assert_array_equal(out[1], mask(m))


def mask_of_wide(m: GrammarMatcher, words: int) -> np.ndarray:
    row = np.zeros((1, words), dtype=np.int32)
    m.fill_next_token_bitmask(row)
    return row[0]


def test_registry_ignores_stale_slot_ids(info, blobs):
    """A slot id alone cannot rewrite or free a row: only its owner's token can."""
    g = tg.CompiledGrammar.deserialize(blobs["letters"], info)
    m = GrammarMatcher(g)
    BatchGrammarMatcher(1).batch_fill_next_token_bitmask([m], np.zeros((1, W), np.int32))
    row = MATCHERS.table[m._slot].copy()
    MATCHERS.release(m._slot, object())
    MATCHERS.update(m._slot, tuple(np.zeros(4, np.int32) for _ in range(11)), object())
    assert MATCHERS.owner_of(m._slot) is m._slot_owner
    assert (MATCHERS.table[m._slot] == row).all()


# --------------------------------------------------------------------------- finding 15
def test_finding15_max_threads_is_bounded():
    from treegram.errors import ArgumentError
    from treegram.matcher._batch import MAX_THREADS_LIMIT

    for bad in (10**9, MAX_THREADS_LIMIT + 1, 0, -1, 2.0, True, "many"):
        with pytest.raises(ArgumentError, match="max_threads"):
            BatchGrammarMatcher(max_threads=bad)
    with BatchGrammarMatcher(max_threads=MAX_THREADS_LIMIT) as bm:
        assert bm.max_threads == MAX_THREADS_LIMIT


def test_finding15_pool_that_cannot_start_threads_cleans_up(monkeypatch):
    """The system refusing a thread: a WorkerError, no worker left running, and the pool
    works once threads can start again."""
    from treegram.errors import TreegramError, WorkerError
    from treegram.pool import WorkerPool

    real_start = threading.Thread.start
    started = []

    def flaky_start(self):
        if self.name.startswith("treegram-pool-") and len(started) >= 3:
            raise RuntimeError("can't start new thread")
        real_start(self)
        if self.name.startswith("treegram-pool-"):
            started.append(self)

    pool = WorkerPool(8)
    monkeypatch.setattr(threading.Thread, "start", flaky_start)
    with pytest.raises(WorkerError, match="could not start") as err:
        pool.run_chunks(lambda a, b: None, 16)
    assert isinstance(err.value, TreegramError) and isinstance(err.value, RuntimeError)
    for t in started:
        t.join(5)
    assert not any(t.is_alive() for t in started)
    monkeypatch.setattr(threading.Thread, "start", real_start)
    seen = []
    pool.run_chunks(lambda a, b: seen.append((a, b)), 16)
    assert sorted(seen)[0][0] == 0 and sum(b - a for a, b in seen) == 16
    pool.close()


def test_batch_matcher_copy_has_its_own_pool(info, blobs):
    g = tg.CompiledGrammar.deserialize(blobs["letters"], info)
    bm = BatchGrammarMatcher(2)
    for twin in (copy.copy(bm), copy.deepcopy(bm)):
        assert twin._pool is not bm._pool and twin.max_threads == 2
        twin.close()
    out = np.zeros((1, W), dtype=np.int32)
    bm.batch_fill_next_token_bitmask([GrammarMatcher(g)], out)  # still usable
    assert out.any()
    bm.close()


# --------------------------------------------------------------- random public calls
GRAMMAR_NAMES = sorted(GRAMMAR_TEXTS)
OPS = (
    "create",
    "copy",
    "deepcopy",
    "fork",
    "accept",
    "accept_string",
    "rollback",
    "fill",
    "batch_fill",
    "batch_accept",
    "batch_rollback",
    "batch_traverse",
    "delete",
    "gc",
)
op_strategy = st.tuples(st.sampled_from(OPS), st.integers(0, 2**16))


def _run_thread(ops, grammars, bm, failures):
    """Apply ``ops`` to this thread's own matchers; compare with fresh matchers."""
    own: list[tuple[GrammarMatcher, object, list[int]]] = []  # matcher, grammar, tokens

    def expect(m, g, hist, row, what):
        if not (row == mask(replay(g, hist))).all():
            failures.append(f"{what}: mask differs after {hist}")

    def allowed(m):
        return [int(t) for t in np.flatnonzero(tg.bitmask_to_bool(mask(m), V)) if t != EOS]

    try:
        for op, arg in ops:
            if op == "create" or not own:
                g = grammars[GRAMMAR_NAMES[arg % len(GRAMMAR_NAMES)]]
                own.append((GrammarMatcher(g), g, []))
                continue
            k = arg % len(own)
            m, g, hist = own[k]
            if op in ("copy", "deepcopy", "fork"):
                twin = {"copy": copy.copy, "deepcopy": copy.deepcopy, "fork": GrammarMatcher.fork}[
                    op
                ](m)
                own.append((twin, g, list(hist)))
            elif op == "accept":
                ok = allowed(m)
                if ok:
                    t = ok[(arg >> 4) % len(ok)]
                    if not m.accept_token(t):
                        failures.append(f"accept {t} refused after {hist}")
                    hist.append(t)
            elif op == "accept_string":
                ok = allowed(m)
                if ok:
                    text = VOCAB[ok[(arg >> 4) % len(ok)]]
                    if not m.accept_string(text):
                        failures.append(f"accept_string {text!r} refused after {hist}")
                    hist.append(text)
            elif op == "rollback" and hist:
                n = 1 + (arg >> 4) % len(hist)
                m.rollback(n)
                del hist[len(hist) - n :]
            elif op == "fill":
                expect(m, g, hist, mask(m), "fill")
            elif op in ("batch_fill", "batch_accept", "batch_rollback", "batch_traverse"):
                pick = [own[(k + j) % len(own)] for j in range(1 + (arg >> 4) % 3)]
                pick = list({id(p[0]): p for p in pick}.values())
                ms = [p[0] for p in pick]
                if op == "batch_fill":
                    out = np.zeros((len(ms), W), dtype=np.int32)
                    bm.batch_fill_next_token_bitmask(ms, out)
                    for (pm, pg, ph), row in zip(pick, out, strict=True):
                        expect(pm, pg, ph, row, "batch_fill")
                elif op == "batch_accept":
                    toks = []
                    for pm, _, _ in pick:
                        ok = allowed(pm)
                        toks.append(ok[(arg >> 6) % len(ok)] if ok else EOS)
                    live = [i for i, t in enumerate(toks) if t != EOS]
                    res = bm.batch_accept_token([ms[i] for i in live], [toks[i] for i in live])
                    if res != [True] * len(live):
                        failures.append(f"batch_accept refused {res}")
                    for i in live:
                        pick[i][2].append(toks[i])
                elif op == "batch_rollback":
                    counts = [(arg >> 6) % (len(p[2]) + 1) for p in pick]
                    bm.batch_rollback(ms, counts)
                    for (_, _, ph), c in zip(pick, counts, strict=True):
                        del ph[len(ph) - c :]
                else:  # a chain of two drafted tokens after the root
                    draft = np.array(
                        [[0, (arg >> 6) % V, (arg >> 9) % V]] * len(ms), dtype=np.int64
                    )
                    nt = np.array([1, 2, -1], dtype=np.int64)
                    ns = np.full(3, -1, dtype=np.int64)
                    out = np.zeros((3 * len(ms), W), dtype=np.int32)
                    bm.batch_traverse_draft_tree(ms, nt, ns, draft, out)
                    for i, (_, pg, ph) in enumerate(pick):
                        ref = np.zeros((3, W), dtype=np.int32)
                        replay(pg, ph).traverse_draft_tree(nt, ns, draft[i], ref)
                        if not (out[3 * i : 3 * i + 3] == ref).all():
                            failures.append(f"batch_traverse differs after {ph}")
            elif op == "delete":
                del own[k]
                del m
            elif op == "gc":
                gc.collect()
    except Exception as exc:  # noqa: BLE001 - reported by the test
        failures.append(f"{type(exc).__name__}: {exc}")


@settings(
    max_examples=8,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(st.lists(st.lists(op_strategy, min_size=5, max_size=25), min_size=2, max_size=3))
def test_random_public_calls_on_threads_match_reference(info, blobs, programs):
    """Random sequences of public calls (create, copy, fork, accept, rollback, fill, batch
    fill/accept/rollback/traverse, delete, gc) on 2-3 threads sharing fresh grammars and one
    BatchGrammarMatcher; every mask equals that of a fresh single-threaded matcher."""
    grammars = {name: tg.CompiledGrammar.deserialize(blob, info) for name, blob in blobs.items()}
    failures: list[str] = []
    with BatchGrammarMatcher(3) as bm:
        import treegram.matcher._batch as mb

        saved, mb._INLINE_WORDS = mb._INLINE_WORDS, 1  # use the workers for every call
        try:
            threads = [
                threading.Thread(target=_run_thread, args=(ops, grammars, bm, failures))
                for ops in programs
            ]
            for t in threads:
                t.start()
            for t in threads:
                t.join(60)
        finally:
            mb._INLINE_WORDS = saved
    assert not any(t.is_alive() for t in threads), "a thread hung"
    assert not failures, failures
