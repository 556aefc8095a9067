"""WorkerPool: chunking, exception propagation, concurrency and thread lifetime."""

from __future__ import annotations

import gc
import threading
import time

import pytest

from treegram.errors import TreegramError, WorkerError
from treegram.pool import WorkerPool, chunk_bounds


def _pool_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("treegram-pool-")]


@pytest.fixture
def pool():
    p = WorkerPool(4)
    yield p
    p.close()


# -- chunking --------------------------------------------------------------------------------

CHUNKS = [
    # (n_items, max_chunks, min_chunk, expected sizes)
    (0, 4, 1, []),
    (1, 4, 1, [1]),
    (3, 4, 1, [1, 1, 1]),
    (4, 4, 1, [1, 1, 1, 1]),
    (10, 4, 1, [3, 3, 2, 2]),
    (10, 1, 1, [10]),
    (10, 4, 3, [4, 3, 3]),
    (10, 4, 5, [5, 5]),
    (10, 4, 6, [10]),
    (5, 4, 100, [5]),
    (1000, 8, 1, [125] * 8),
]


@pytest.mark.parametrize(("n", "k", "m", "sizes"), CHUNKS)
def test_chunk_bounds_table(n, k, m, sizes):
    bounds = chunk_bounds(n, k, min_chunk=m)
    assert [b - a for a, b in bounds] == sizes
    flat = [i for a, b in bounds for i in range(a, b)]
    assert flat == list(range(n))


@pytest.mark.parametrize("n", range(0, 40))
@pytest.mark.parametrize("k", [1, 2, 3, 7])
@pytest.mark.parametrize("m", [1, 2, 5])
def test_chunk_bounds_properties(n, k, m):
    bounds = chunk_bounds(n, k, min_chunk=m)
    assert len(bounds) <= k
    if n:
        assert len(bounds) >= 1
        sizes = [b - a for a, b in bounds]
        assert max(sizes) - min(sizes) <= 1
        if len(bounds) > 1:
            assert min(sizes) >= m
    assert [i for a, b in bounds for i in range(a, b)] == list(range(n))


@pytest.mark.parametrize(
    ("args", "kwargs", "exc"),
    [
        ((-1, 4), {}, ValueError),
        ((4, 0), {}, ValueError),
        ((4, 2), {"min_chunk": 0}, ValueError),
        ((4.0, 2), {}, TypeError),
        ((True, 2), {}, TypeError),
    ],
)
def test_chunk_bounds_rejects(args, kwargs, exc):
    with pytest.raises(exc):
        chunk_bounds(*args, **kwargs)


@pytest.mark.parametrize("bad", [0, -3, 2.5, "4", None, True])
def test_constructor_rejects(bad):
    with pytest.raises((TypeError, ValueError), match="max_workers"):
        WorkerPool(bad)


def test_run_chunks_uses_at_most_one_chunk_per_worker(pool):
    calls = []
    lock = threading.Lock()

    def fn(start, stop):
        with lock:
            calls.append((start, stop, threading.current_thread().name))

    pool.run_chunks(fn, 103)
    assert sorted(c[:2] for c in calls) == chunk_bounds(103, 4)
    assert len(calls) == pool.num_workers == 4
    pool.run_chunks(fn, 2)
    assert len(calls) == 6


def test_chunks_run_in_parallel(pool):
    # All four chunks must be in flight together, or the barrier times out.
    barrier = threading.Barrier(4, timeout=5)
    names = set()

    def fn(start, stop):
        names.add(threading.current_thread().name)
        barrier.wait()

    pool.run_chunks(fn, 4)
    assert threading.current_thread().name in names  # the caller runs a chunk itself
    assert len(names) == 4


def test_single_chunk_runs_inline_without_threads():
    p = WorkerPool(4)
    seen = []
    p.run_chunks(lambda a, b: seen.append((a, b, threading.current_thread())), 10, min_chunk=10)
    assert seen == [(0, 10, threading.current_thread())]
    assert p._threads == []  # no hand-off: the lazy threads were never started
    p.run_chunks(lambda a, b: seen.append((a, b)), 0)  # no items: nothing called
    assert len(seen) == 1
    p.close()


def test_one_worker_pool_never_starts_threads():
    p = WorkerPool(1)
    out = [0] * 50
    p.run_chunks(lambda a, b: out.__setitem__(slice(a, b), [1] * (b - a)), 50)
    assert out == [1] * 50
    assert p.map(lambda x: x * 2, range(5)) == [0, 2, 4, 6, 8]
    assert p._threads == []
    p.close()


@pytest.mark.parametrize("n", [0, 1, 2, 5, 97, 1000])
@pytest.mark.parametrize("min_chunk", [1, 7, 64])
def test_every_index_exactly_once(pool, n, min_chunk):
    counts = [0] * n

    def fn(start, stop):
        for i in range(start, stop):
            counts[i] += 1  # each chunk owns its slice: no lock needed

    pool.run_chunks(fn, n, min_chunk=min_chunk)
    assert counts == [1] * n


def test_map_preserves_order(pool):
    def slow_square(x):
        time.sleep(0.001 * (x % 3))
        return x * x

    assert pool.map(slow_square, range(40)) == [x * x for x in range(40)]
    assert pool.map(slow_square, []) == []
    assert pool.map(str, iter([1, 2])) == ["1", "2"]


# -- errors ----------------------------------------------------------------------------------


def test_exception_propagates_after_all_chunks_finished(pool):
    finished = []
    lock = threading.Lock()
    failing_started = threading.Event()

    def fn(start, stop):
        if start == 0:
            failing_started.set()
            raise KeyError("boom")
        failing_started.wait(5)
        time.sleep(0.05)  # still running well after the failure
        with lock:
            finished.append(start)

    with pytest.raises(WorkerError) as info:
        pool.run_chunks(fn, 8)
    assert sorted(finished) == [2, 4, 6]  # every other chunk completed before the raise
    err = info.value
    assert isinstance(err, TreegramError) and isinstance(err, RuntimeError)
    assert isinstance(err.__cause__, KeyError)
    assert "[0, 2)" in str(err) and "KeyError" in str(err) and "boom" in str(err)


def test_first_failure_by_index_is_reported_once_then_clear(pool):
    def fn(start, stop):
        if start >= 4:
            raise ValueError(f"bad {start}")

    with pytest.raises(WorkerError, match=r"\[4, 6\).*bad 4.*1 other") as info:
        pool.run_chunks(fn, 8)
    assert isinstance(info.value.__cause__, ValueError)
    # The next call starts clean and the pool is reusable.
    out = [0] * 8

    def ok(start, stop):
        for i in range(start, stop):
            out[i] = i

    pool.run_chunks(ok, 8)
    assert out == list(range(8))
    assert pool.map(lambda x: x + 1, range(8)) == list(range(1, 9))


def test_inline_chunk_failure_is_wrapped():
    p = WorkerPool(4)

    def fn(start, stop):
        raise ZeroDivisionError("x")

    with pytest.raises(WorkerError, match=r"\[0, 3\)") as info:
        p.run_chunks(fn, 3, min_chunk=5)
    assert isinstance(info.value.__cause__, ZeroDivisionError)
    p.close()


def test_map_failure_names_item_and_runs_all(pool):
    done = []

    def fn(x):
        if x == 3:
            raise RuntimeError("three")
        time.sleep(0.01)
        done.append(x)
        return x

    with pytest.raises(WorkerError, match="item 3 of 10") as info:
        pool.map(fn, range(10))
    assert isinstance(info.value.__cause__, RuntimeError)
    assert sorted(done) == [0, 1, 2, 4, 5, 6, 7, 8, 9]


def test_base_exception_is_not_wrapped(pool):
    def fn(start, stop):
        if start == 0:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        pool.run_chunks(fn, 4)
    pool.run_chunks(lambda a, b: None, 4)  # still usable


def test_workers_survive_failures(pool):
    for _ in range(5):
        with pytest.raises(WorkerError):
            pool.run_chunks(lambda a, b: 1 / 0, 4)
    assert len(_threads_of(pool)) == 3
    assert all(t.is_alive() for t in _threads_of(pool))


def _threads_of(p):
    return list(p._threads)


# -- concurrency -----------------------------------------------------------------------------


def test_concurrent_callers_share_workers(pool):
    n_callers = 8
    results = [None] * n_callers
    errors = []
    start_gate = threading.Barrier(n_callers)

    def caller(k):
        try:
            start_gate.wait(5)
            for rep in range(20):
                n = 50 + k * 13 + rep
                out = [0] * n

                def fn(a, b, out=out, k=k):
                    for i in range(a, b):
                        out[i] += i * k + 1

                if rep == 7 and k % 2 == 0:
                    with pytest.raises(WorkerError):
                        pool.run_chunks(lambda a, b: 1 / 0, n)
                pool.run_chunks(fn, n)
                assert out == [i * k + 1 for i in range(n)]
            results[k] = pool.map(lambda x, k=k: x * k, range(30))
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=caller, args=(k,)) for k in range(n_callers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors, errors
    assert results == [[x * k for x in range(30)] for k in range(n_callers)]
    assert len(_threads_of(pool)) == pool.num_workers - 1  # shared, not multiplied


def test_nested_calls_do_not_deadlock(pool):
    out = [[0] * 10 for _ in range(8)]

    def outer(a, b):
        for row in range(a, b):

            def inner(c, d, row=row):
                for i in range(c, d):
                    out[row][i] = row * 10 + i

            pool.run_chunks(inner, 10)

    pool.run_chunks(outer, 8)
    assert out == [[r * 10 + i for i in range(10)] for r in range(8)]


# -- lifetime --------------------------------------------------------------------------------


def test_close_joins_threads_and_is_idempotent():
    before = threading.active_count()
    p = WorkerPool(5)
    p.run_chunks(lambda a, b: None, 10)
    assert threading.active_count() == before + 4
    threads = _threads_of(p)
    p.close()
    assert not any(t.is_alive() for t in threads)
    assert threading.active_count() == before
    p.close()  # idempotent
    assert p.closed
    assert "closed" in repr(p)


def test_use_after_close_raises():
    p = WorkerPool(3)
    p.close()
    with pytest.raises(WorkerError, match="closed"):
        p.run_chunks(lambda a, b: None, 10)
    with pytest.raises(WorkerError, match="closed"):
        p.run_chunks(lambda a, b: None, 1)
    with pytest.raises(WorkerError, match="closed"):
        p.map(str, [1, 2])


def test_context_manager_closes():
    before = threading.active_count()
    with WorkerPool(3) as p:
        assert p.map(abs, [-1, -2, -3]) == [1, 2, 3]
        assert threading.active_count() == before + 2
    assert p.closed
    assert threading.active_count() == before


def test_unreferenced_pool_does_not_leak_threads():
    # Compare thread sets, not counts: a pool an earlier test dropped may be collected (and
    # its threads end) during this test's gc.collect(), which lowers the count.
    before = set(threading.enumerate())
    p = WorkerPool(4)
    p.run_chunks(lambda a, b: None, 8)
    threads = _threads_of(p)
    assert len(threads) == 3
    del p
    gc.collect()
    for t in threads:
        t.join(5)
    assert not any(t.is_alive() for t in threads)
    assert set(threading.enumerate()) <= before  # no thread of this call is left


def test_close_lets_inflight_call_finish():
    p = WorkerPool(4)
    started = threading.Event()
    release = threading.Event()
    out = [0] * 4

    def fn(a, b):
        started.set()
        release.wait(5)
        out[a] = 1

    t = threading.Thread(target=p.run_chunks, args=(fn, 4))
    t.start()
    started.wait(5)
    closer = threading.Thread(target=p.close)
    closer.start()
    time.sleep(0.05)
    release.set()
    t.join(5)
    closer.join(5)
    assert out == [1, 1, 1, 1]
    assert not any(th.is_alive() for th in _threads_of(p))


def test_many_pools_leave_no_threads():
    before = threading.active_count()
    pool_threads_before = set(_pool_threads())
    for _ in range(20):
        with WorkerPool(3) as p:
            p.run_chunks(lambda a, b: None, 3)
    assert threading.active_count() == before
    assert set(_pool_threads()) == pool_threads_before


@pytest.mark.parametrize(
    ("args", "exc"),
    [((4.0, 2), TypeError), ((True, 2), TypeError), ((-1, 4), ValueError)],
)
def test_chunk_bounds_errors_are_treegram_errors(args, exc):
    from treegram.errors import ArgumentError, ArgumentTypeError, TreegramError

    with pytest.raises(exc) as info:
        chunk_bounds(*args)
    assert isinstance(info.value, TreegramError) and isinstance(info.value, ArgumentError)
    assert isinstance(info.value, ArgumentTypeError) == (exc is TypeError)
    assert "n_items" in str(info.value)
