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

Lifetime rules (what keeps a kernel from reading freed or foreign memory):

* a slot has exactly one owner, identified by an ``owner`` token that only the owning
  object holds; :meth:`Registry.update` and :meth:`Registry.release` do nothing unless
  they come with the slot's current token, so a stale slot id can neither rewrite nor
  free a row that was reused by another object;
* the owner's finalizer releases the slot (and drops the row's arrays at once) only when
  the owner is unreachable, and every batch call holds strong references to the matchers
  (and through them the grammars) whose slot ids it hands to a kernel, for the whole
  call; so no kernel ever sees a released slot;
* copying a matcher or a grammar never copies its slot (their ``__copy__`` /
  ``__deepcopy__`` fork with no slot).
"""

from __future__ import annotations

import threading

import numpy as np
from numba import literal_unroll, njit

from ._layout import GRAMMAR_LENGTH_AXES, MATCHER_LENGTH_AXES

__all__ = ["REGISTRY_LOCK", "Registry", "GRAMMARS", "MATCHERS"]


class RWLock:
    """Many readers or one writer; writers wait for running readers (no re-entrance).

    Readers take a plain lock (a C-level ``with``) and only fall back to the condition
    when a writer holds the lock: a batch call takes the read side once or twice, so
    the uncontended path must cost far less than the call's own work.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._readers = 0
        self._writer = False
        self._writers_waiting = 0  # readers notify only when one waits (notify is not free)

    def acquire_read(self) -> None:
        with self._lock:
            while self._writer:
                self._cond.wait()
            self._readers += 1

    def release_read(self) -> None:
        with self._lock:
            self._readers -= 1
            if self._readers == 0 and self._writers_waiting:
                self._cond.notify_all()

    def acquire_write(self) -> None:
        with self._lock:
            self._writers_waiting += 1
            try:
                while self._writer or self._readers:
                    self._cond.wait()
            finally:
                self._writers_waiting -= 1
            self._writer = True

    def release_write(self) -> None:
        with self._lock:
            self._writer = False
            self._cond.notify_all()


REGISTRY_LOCK = RWLock()


@njit(nogil=True, cache=True)
def _write_row(row, entry, axes):
    """Write the addresses of the arrays of the tuple ``entry`` into ``row[:n]`` and their
    lengths along ``axes`` into ``row[n:2n]`` (n = len(axes)), in one call: a call per
    array cost about 0.3 us each (a matcher's row has 22). Returns the index of the first
    array that is not C-contiguous, writing nothing then, else -1."""
    n = axes.shape[0]
    k = 0
    for a in literal_unroll(entry):
        if not a.flags.c_contiguous:
            return k
        k += 1  # noqa: SIM113 - numba cannot enumerate a literal_unroll
    k = 0
    for a in literal_unroll(entry):
        row[k] = a.ctypes.data
        row[n + k] = a.shape[axes[k]]
        k += 1  # noqa: SIM113
    return -1


class Registry:
    """Rows of (address, length) pairs for a fixed number of arrays, with slot reuse.

    Column ``k`` holds the address of array ``k``, column ``n_fields + k`` its length along
    ``length_axes[k]`` (the other axis of a 2-D array is fixed and known to the kernels).
    Each slot belongs to one owner token (any object the owner alone holds). Releasing
    runs from garbage-collection finalizers, which must never block on the lock: it drops
    the row's arrays at once (no kernel can be using the row, see the module notes) and
    makes the slot reusable.
    """

    def __init__(self, length_axes: tuple[int, ...]) -> None:
        self.n_fields = n_fields = len(length_axes)
        self._axes = length_axes
        self._axes_array = np.array(length_axes, dtype=np.int64)
        self.table = np.zeros((16, 2 * n_fields), dtype=np.int64)
        self.tags = np.zeros(16, dtype=np.int64)  # one int per slot (a grammar's vocab size)
        # Counts slot assignments (each add): while it is unchanged, a slot id names the
        # same owner as before, so what callers derived from slot ids and tags (a batch's
        # slot arrays and vocabulary) still holds.
        self.generation = 0
        # Counts releases: while it is unchanged, no owner was collected, so no object
        # has since reused the id (address) of one (``matcher._batch._claim`` compares ids).
        self.releases = 0
        self._keep: list[tuple | None] = []
        self._owner: list[object | None] = []
        self._free: list[int] = []
        # Guards _free, _owner and _keep. Re-entrant, and nothing is freed while it is held:
        # a garbage collection inside a critical section may run a finalizer (release)
        # in the same thread.
        self._free_lock = threading.RLock()

    def _write(self, slot: int, entry: tuple) -> None:
        if len(entry) != self.n_fields:
            raise ValueError(f"registry entry needs {self.n_fields} arrays, got {len(entry)}")
        bad = _write_row(self.table[slot], entry, self._axes_array)
        if bad >= 0:
            raise ValueError(f"registry array {bad} must be C-contiguous")
        with self._free_lock:
            old, self._keep[slot] = self._keep[slot], entry
        del old  # freed outside the lock

    def add(self, entry: tuple, owner: object, tag: int = 0) -> int:
        """Store ``entry`` (and an int ``tag``) in a free or new slot owned by ``owner``;
        return the slot id."""
        with self._free_lock:
            slot = self._free.pop() if self._free else -1
        REGISTRY_LOCK.acquire_write()
        try:
            if slot < 0:
                with self._free_lock:
                    slot = len(self._keep)
                    self._keep.append(None)
                    self._owner.append(None)
                if slot >= self.table.shape[0]:
                    self.table = np.concatenate([self.table, np.zeros_like(self.table)])
                    self.tags = np.concatenate([self.tags, np.zeros_like(self.tags)])
            try:
                self._write(slot, entry)
            except BaseException:
                with self._free_lock:
                    self._free.append(slot)
                raise
            self.tags[slot] = tag
            with self._free_lock:
                self._owner[slot] = owner
                self.generation += 1
            return slot
        finally:
            REGISTRY_LOCK.release_write()

    def update(self, slot: int, entry: tuple, owner: object) -> None:
        """Point ``slot`` at re-allocated arrays; ignored unless ``owner`` owns the slot."""
        REGISTRY_LOCK.acquire_write()
        try:
            if self._owner[slot] is owner:
                self._write(slot, entry)
        finally:
            REGISTRY_LOCK.release_write()

    def release(self, slot: int, owner: object) -> None:
        """Free ``slot`` if ``owner`` owns it (called by finalizers; never blocks on the
        registry lock). The row's arrays are dropped now, not when the slot is reused."""
        with self._free_lock:
            if slot >= len(self._owner) or self._owner[slot] is not owner:
                return
            self._owner[slot] = None
            entry, self._keep[slot] = self._keep[slot], None
            self._free.append(slot)
            self.releases += 1
        del entry  # the arrays are freed here, outside the lock

    def owner_of(self, slot: int) -> object | None:
        """The owner token of ``slot`` (None when free); for checks and tests."""
        with self._free_lock:
            return self._owner[slot] if 0 <= slot < len(self._owner) else None

    def live_slots(self) -> int:
        """Number of slots that have an owner."""
        with self._free_lock:
            return sum(o is not None for o in self._owner)


# Rows in the orders of ``_layout.GRAMMAR_ROW`` and ``_layout.MATCHER_ROW``.
GRAMMARS = Registry(GRAMMAR_LENGTH_AXES)
MATCHERS = Registry(MATCHER_LENGTH_AXES)
