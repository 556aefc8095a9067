"""Slots that let one kernel call reach the arrays of many matchers and grammars.

A batch call must not pay Python work per request, yet every request has its own
matcher state and often its own compiled grammar. Each GrammarMatcher and each
CompiledGrammar therefore owns a *slot* in a numba typed list of array tuples; a batch
kernel receives the two lists plus an int array of slot ids and finds everything itself.

Entries are replaced when their arrays are re-allocated (a chart grows, a grammar's token
classes grow). A typed list must not change while a kernel reads it, so kernels run under
the read side of :data:`REGISTRY_LOCK` and every change takes the write side.
"""

from __future__ import annotations

import threading

import numpy as np
from numba import typed

__all__ = ["REGISTRY_LOCK", "Registry", "GRAMMARS", "MATCHERS"]


class RWLock:
    """Many readers or one writer; writers wait for running readers (no re-entrance)."""

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._readers = 0
        self._writer = False

    def acquire_read(self) -> None:
        with self._cond:
            while self._writer:
                self._cond.wait()
            self._readers += 1

    def release_read(self) -> None:
        with self._cond:
            self._readers -= 1
            if self._readers == 0:
                self._cond.notify_all()

    def acquire_write(self) -> None:
        with self._cond:
            while self._writer or self._readers:
                self._cond.wait()
            self._writer = True

    def release_write(self) -> None:
        with self._cond:
            self._writer = False
            self._cond.notify_all()


REGISTRY_LOCK = RWLock()


class Registry:
    """A typed list of same-typed array tuples, with slot reuse.

    Released slots keep their old entry (it is overwritten on reuse): releasing runs from
    garbage-collection finalizers, which must never block on the lock.
    """

    def __init__(self) -> None:
        self.entries = None  # typed.List, created with the first entry (fixes its type)
        self.tags = np.zeros(16, dtype=np.int64)  # one int per slot (a grammar's vocab size)
        self._free: list[int] = []
        self._free_lock = threading.Lock()

    def add(self, entry: tuple, tag: int = 0) -> int:
        """Store ``entry`` (and an int ``tag``) in a free or new slot; return the slot id."""
        with self._free_lock:
            slot = self._free.pop() if self._free else -1
        REGISTRY_LOCK.acquire_write()
        try:
            if self.entries is None:
                self.entries = typed.List([entry])
                slot = 0
            elif slot >= 0:
                self.entries[slot] = entry
            else:
                self.entries.append(entry)
                slot = len(self.entries) - 1
            if slot >= self.tags.shape[0]:
                self.tags = np.concatenate([self.tags, np.zeros_like(self.tags)])
            self.tags[slot] = tag
            return slot
        finally:
            REGISTRY_LOCK.release_write()

    def update(self, slot: int, entry: tuple) -> None:
        """Replace the entry of ``slot`` (its arrays were re-allocated)."""
        REGISTRY_LOCK.acquire_write()
        try:
            self.entries[slot] = entry
        finally:
            REGISTRY_LOCK.release_write()

    def release(self, slot: int) -> None:
        """Mark ``slot`` reusable (called by finalizers; never blocks on the lock)."""
        with self._free_lock:
            self._free.append(slot)


GRAMMARS = Registry()
MATCHERS = Registry()
