"""Slots that let one kernel call reach the arrays of many matchers and grammars.

A batch call must not pay Python work per request, yet every request has its own
matcher state and often its own compiled grammar. Each GrammarMatcher and each
CompiledGrammar therefore owns a *slot*: a row of an int64 table holding the address and
length of each of its arrays (``kernels/_views.py`` turns them back into arrays). A batch
kernel receives the two tables plus int arrays of slot ids and finds everything itself,
without reference counting.

A row is rewritten when its arrays are re-allocated (a chart grows, a grammar's token
classes grow); the registry keeps the arrays of every live row referenced, so addresses
stay valid. Kernels run under the read side of :data:`REGISTRY_LOCK` and every change
takes the write side.
"""

from __future__ import annotations

import threading

import numpy as np

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
    """Rows of (address, length) pairs for a fixed number of arrays, with slot reuse.

    Column ``k`` holds the address of array ``k``, column ``n_fields + k`` its length along
    ``length_axes[k]`` (the other axis of a 2-D array is fixed and known to the kernels).
    Released slots keep their arrays referenced until reused: releasing runs from
    garbage-collection finalizers, which must never block on the lock.
    """

    def __init__(self, length_axes: tuple[int, ...]) -> None:
        self.n_fields = n_fields = len(length_axes)
        self._axes = length_axes
        self.table = np.zeros((16, 2 * n_fields), dtype=np.int64)
        self.tags = np.zeros(16, dtype=np.int64)  # one int per slot (a grammar's vocab size)
        self._keep: list[tuple | None] = []
        self._free: list[int] = []
        self._free_lock = threading.Lock()

    def _write(self, slot: int, entry: tuple) -> None:
        if len(entry) != self.n_fields:
            raise ValueError(f"registry entry needs {self.n_fields} arrays, got {len(entry)}")
        row = self.table[slot]
        for k, arr in enumerate(entry):
            if not arr.flags.c_contiguous:
                raise ValueError(f"registry array {k} must be C-contiguous")
            row[k] = arr.ctypes.data
            row[self.n_fields + k] = arr.shape[self._axes[k]]
        self._keep[slot] = entry

    def add(self, entry: tuple, tag: int = 0) -> int:
        """Store ``entry`` (and an int ``tag``) in a free or new slot; return the slot id."""
        with self._free_lock:
            slot = self._free.pop() if self._free else -1
        REGISTRY_LOCK.acquire_write()
        try:
            if slot < 0:
                slot = len(self._keep)
                self._keep.append(None)
                if slot >= self.table.shape[0]:
                    self.table = np.concatenate([self.table, np.zeros_like(self.table)])
                    self.tags = np.concatenate([self.tags, np.zeros_like(self.tags)])
            self._write(slot, entry)
            self.tags[slot] = tag
            return slot
        finally:
            REGISTRY_LOCK.release_write()

    def update(self, slot: int, entry: tuple) -> None:
        """Point ``slot`` at re-allocated arrays."""
        REGISTRY_LOCK.acquire_write()
        try:
            self._write(slot, entry)
        finally:
            REGISTRY_LOCK.release_write()

    def release(self, slot: int) -> None:
        """Mark ``slot`` reusable (called by finalizers; never blocks on the lock)."""
        with self._free_lock:
            self._free.append(slot)


# Grammar rows: packed automaton, state_class, cls_meta [n, 5], acc_pool, unc_pool, sv_ids,
# sv_offsets, sv_data, tok_offsets, tok_data.
GRAMMARS = Registry((0, 0, 0, 0, 0, 0, 0, 0, 0, 0))
# Matcher rows: items_s, items_o, set_starts, meta, hist, stop_ids, bufs [2, cap],
# memo_key [2, cap], memo_meta, memo_row, cand.
MATCHERS = Registry((0, 0, 0, 0, 0, 0, 1, 1, 0, 0, 0))
