"""The registry's reader-writer lock: readers notify only when a writer waits, so a writer
blocked by readers must still wake up when the last reader leaves."""

from __future__ import annotations

import threading

from treegram.kernels._registry import RWLock


def _start_writer(lock: RWLock, acquired: threading.Event) -> threading.Thread:
    def write() -> None:
        lock.acquire_write()
        acquired.set()
        lock.release_write()

    t = threading.Thread(target=write, daemon=True)
    t.start()
    return t


def test_writer_waits_for_readers_and_wakes_when_the_last_leaves():
    lock = RWLock()
    lock.acquire_read()
    lock.acquire_read()
    acquired = threading.Event()
    writer = _start_writer(lock, acquired)
    assert not acquired.wait(0.2)  # two readers hold it
    lock.release_read()
    assert not acquired.wait(0.2)  # one still does
    lock.release_read()
    assert acquired.wait(5.0)  # the last reader's release woke the writer
    writer.join(5.0)
    assert not writer.is_alive()


def test_readers_without_writers_and_a_later_writer():
    lock = RWLock()
    for _ in range(3):  # no writer waits: release_read does not notify, nothing hangs
        lock.acquire_read()
        lock.release_read()
    acquired = threading.Event()
    _start_writer(lock, acquired).join(5.0)
    assert acquired.is_set()
    lock.acquire_read()  # the writer released: readers get in again
    lock.release_read()


def test_two_writers_waiting_on_a_reader_both_get_in():
    lock = RWLock()
    lock.acquire_read()
    events = [threading.Event(), threading.Event()]
    writers = [_start_writer(lock, e) for e in events]
    assert not any(e.wait(0.1) for e in events)
    lock.release_read()
    for w, e in zip(writers, events, strict=True):
        w.join(5.0)
        assert e.is_set()
