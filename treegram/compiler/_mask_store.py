"""Lazily built, de-duplicated token classification of one compiled grammar.

A state is classified the first time a matcher reaches it (the compile itself does not
walk the vocabulary), and identical classifications are stored once. Readers take a
:meth:`MaskStore.snapshot` (a tuple of arrays) without locking; writers append under a
lock into spare capacity and publish a state's class id last, so a reader either sees the
finished class or ``-1`` (and asks for classification, which then finds it done). When
capacity runs out every array is re-allocated, so old snapshots stay consistent.
"""

from __future__ import annotations

import hashlib
import threading
import weakref

import numpy as np

from ..kernels._classify import ACCEPTED, UNCERTAIN, classify

__all__ = ["MaskStore"]

KIND_LIST = 0
KIND_BITSET = 1


def _bitset(token_ids: np.ndarray, n_words: int) -> np.ndarray:
    words = np.zeros(n_words, dtype=np.uint32)
    np.bitwise_or.at(words, token_ids >> 5, np.uint32(1) << (token_ids & 31).astype(np.uint32))
    return words.view(np.int32)


def _digest(verdicts: np.ndarray) -> bytes:
    """BLAKE2b-128 of a verdict array: the de-duplication key of its class."""
    return hashlib.blake2b(verdicts.tobytes(), digest_size=16).digest()


class _Pool:
    """A growable flat int32 array with spare capacity."""

    def __init__(self) -> None:
        self.data = np.zeros(1024, dtype=np.int32)
        self.size = 0

    def append(self, values: np.ndarray) -> tuple[int, bool]:
        """Append; returns (offset, reallocated)."""
        need = self.size + values.shape[0]
        grown = need > self.data.shape[0]
        if grown:
            bigger = np.zeros(max(need, 2 * self.data.shape[0]), dtype=np.int32)
            bigger[: self.size] = self.data[: self.size]
            self.data = bigger
        off = self.size
        self.data[off:need] = values
        self.size = need
        return off, grown


class MaskStore:
    """Per-state ACCEPTED / UNCERTAIN token sets, filled on demand.

    Thread-safe: any number of readers; classification is serialised by a lock.
    """

    def __init__(self, automaton, sorted_vocab, vocab_size: int) -> None:
        self._automaton_arrays = automaton.arrays()
        self._state_rule = automaton.state_rule
        self._rule_follow = automaton.rule_follow
        self._sorted_vocab = sorted_vocab
        self._n_words = (vocab_size + 31) // 32
        self._lock = threading.Lock()
        self._state_class = np.full(automaton.n_states, -1, dtype=np.int32)
        # per class: kind, accepted offset, accepted length, uncertain offset, length
        self._cls_meta = np.zeros((16, 5), dtype=np.int64)
        self._acc = _Pool()
        self._unc = _Pool()
        self._n_classes = 0
        self._index: dict[bytes, int] = {}
        # Weak references to callables called, under the lock, with every new snapshot.
        self._listeners: list[weakref.ref] = []
        self._publish()

    def _publish(self) -> None:
        # Called with the lock held (or before the store is shared).
        self._snap = (self._state_class, self._cls_meta, self._acc.data, self._unc.data)
        alive = []
        for ref in self._listeners:
            listener = ref()
            if listener is not None:
                listener(self._snap)
                alive.append(ref)
        self._listeners = alive

    def snapshot(self) -> tuple:
        """(state_class, cls_meta, acc_pool, unc_pool), as ``fill_row`` takes them."""
        return self._snap

    def subscribe(self, listener) -> None:
        """Call ``listener(snapshot)`` now and after every re-allocation, under the lock.

        Subscribing and the first call happen under the lock that every publication
        takes, so a listener never misses a snapshot published while it subscribed (the
        batch registry relies on this: a stale snapshot would make batch kernels ask for
        classification forever). ``listener`` is held weakly: calls stop once the caller
        drops it, so stores shared by several grammars do not accumulate dead listeners.
        """
        with self._lock:
            self._listeners.append(weakref.ref(listener))
            listener(self._snap)

    @property
    def n_classes(self) -> int:
        """Number of distinct classifications stored."""
        return self._n_classes

    @property
    def n_classified_states(self) -> int:
        """Number of states classified so far."""
        return int(np.count_nonzero(self._state_class >= 0))

    @property
    def memory_size_bytes(self) -> int:
        """Bytes held by the stored token sets."""
        return int(4 * (self._acc.size + self._unc.size) + 33 * self._n_classes
                   + self._state_class.nbytes)

    def classify_states(self, states) -> None:
        """Make sure every state in ``states`` has a class."""
        with self._lock:
            for s in states:
                s = int(s)
                if self._state_class[s] >= 0:
                    continue
                verdicts = self._verdicts(s)
                key = _digest(verdicts)
                encoded = (None, None, None) if key in self._index else self._encode(verdicts)
                self._assign(s, *self._insert(key, *encoded))

    def classify_all(self) -> None:
        """Classify every state now (eager compilation)."""
        self.classify_states(self.unclassified_states())

    # -- parallel classification: compute outside the lock, insert in order ---------------

    def unclassified_states(self) -> np.ndarray:
        """int64 [n]: the states without a class yet, in increasing order."""
        return np.flatnonzero(self._state_class < 0)

    def compute_classes(self, states) -> tuple[list[bytes], dict[bytes, tuple]]:
        """Classify ``states`` without taking the lock (safe from any number of threads).

        The vocabulary walk is a numba ``nogil`` kernel, so threads run it in parallel.
        Nothing is stored: hand the result to :meth:`insert_classes`.

        Returns
        -------
        keys : list of bytes
            The class digest of each state, in the order of ``states``.
        encoded : dict
            digest -> (kind, payload, uncertain), one entry per distinct class.
        """
        keys: list[bytes] = []
        encoded: dict[bytes, tuple] = {}
        for s in states:
            verdicts = self._verdicts(int(s))
            key = _digest(verdicts)
            if key not in encoded and key not in self._index:
                encoded[key] = self._encode(verdicts)
            keys.append(key)
        return keys, encoded

    def insert_classes(self, states, keys: list[bytes], encoded: dict[bytes, tuple]) -> None:
        """Store classes computed by :meth:`compute_classes`, under the lock, in the order of
        ``states``: new class ids are given exactly as :meth:`classify_states` would give
        them over the same states, so the result does not depend on how the states were
        split between threads. States classified meanwhile keep their class."""
        with self._lock:
            for s, key in zip(states, keys, strict=True):
                s = int(s)
                if self._state_class[s] >= 0:
                    continue
                self._assign(s, *self._insert(key, *encoded.get(key, (None, None, None))))

    # -- internals -------------------------------------------------------------------------

    def _verdicts(self, s: int) -> np.ndarray:
        follow = self._rule_follow[self._state_rule[s]]
        return classify(self._automaton_arrays, s, follow, self._sorted_vocab)

    def _assign(self, s: int, cid: int, grown: bool) -> None:
        # Called with the lock held; the class is complete, so publishing its id is last.
        if grown:
            # Old snapshots keep their own state_class, whose ids fit their arrays.
            self._state_class = self._state_class.copy()
            self._state_class[s] = cid
            self._publish()
        else:
            self._state_class[s] = cid

    def _encode(self, verdicts: np.ndarray) -> tuple[int, np.ndarray, np.ndarray]:
        """(kind, accepted payload, uncertain positions) of one verdict array."""
        sv = self._sorted_vocab
        accepted = np.sort(sv.token_ids[verdicts == ACCEPTED]).astype(np.int32)
        uncertain = np.flatnonzero(verdicts == UNCERTAIN).astype(np.int32)
        if accepted.shape[0] >= self._n_words:
            return KIND_BITSET, _bitset(accepted, self._n_words), uncertain
        return KIND_LIST, accepted, uncertain

    def _insert(self, key: bytes, kind, payload, uncertain) -> tuple[int, bool]:
        """Class id of ``key``, appending the class if it is new; (cid, reallocated)."""
        cid = self._index.get(key)
        if cid is not None:
            return cid, False
        if payload is None:
            raise KeyError("MaskStore.insert_classes: a new class digest comes without payload")
        cid = self._n_classes
        grown = False
        if cid >= self._cls_meta.shape[0]:
            grown = True
            bigger = np.zeros((2 * cid, 5), dtype=np.int64)
            bigger[:cid] = self._cls_meta
            self._cls_meta = bigger
        acc_off, g1 = self._acc.append(payload)
        unc_off, g2 = self._unc.append(uncertain)
        self._cls_meta[cid] = (kind, acc_off, payload.shape[0], unc_off, uncertain.shape[0])
        self._n_classes += 1
        self._index[key] = cid
        return cid, grown or g1 or g2
