"""CompiledGrammar: a grammar's automaton bound to one tokenizer vocabulary."""

from __future__ import annotations

import threading
import weakref

from ..automaton._build import Automaton
from ._mask_store import MaskStore

__all__ = ["CompiledGrammar"]


class CompiledGrammar:
    """A grammar compiled against a tokenizer vocabulary; shared by any number of matchers.

    Build it with :class:`GrammarCompiler`. The token classification is filled lazily and
    thread-safely as matchers reach new states, so one instance can serve many threads.

    Attributes
    ----------
    grammar : Grammar
        The source grammar.
    tokenizer_info : TokenizerInfo
        The vocabulary it was compiled for.

    Notes
    -----
    Thread safety: an instance is logically immutable (its masks depend only on the
    grammar and the vocabulary) and may be shared by any number of threads and matchers.
    The lazily filled token classification takes an internal lock to classify and
    publishes re-allocated arrays atomically, also to the batch registry, so neither
    scalar nor batch matchers ever see a half-built or outdated classification.
    ``classify_all_states``, ``serialize`` and ``save`` may run while matchers use the
    grammar.

    ``copy.copy`` and ``copy.deepcopy`` return a new instance that shares the immutable
    automaton, grammar, tokenizer and the thread-safe classification, but has its own
    batch-registry slot; ``copy.deepcopy`` does not duplicate the (read-only) tokenizer.
    """

    def __init__(self, grammar, tokenizer_info, automaton: Automaton) -> None:
        self.grammar = grammar
        self.tokenizer_info = tokenizer_info
        self._automaton = automaton
        self._store = MaskStore(automaton, tokenizer_info.sorted_vocab, tokenizer_info.vocab_size)
        self._tokens = tokenizer_info.token_table
        self._reset_slot()

    def _reset_slot(self) -> None:
        self._slot = -1
        self._slot_lock = threading.Lock()
        self._on_publish = None  # keeps the store's (weakly held) listener alive

    def __copy__(self) -> CompiledGrammar:
        twin = object.__new__(type(self))
        twin.__dict__.update(self.__dict__)
        twin._reset_slot()  # a registry slot belongs to exactly one object
        return twin

    def __deepcopy__(self, memo: dict) -> CompiledGrammar:
        return self.__copy__()

    def _registry_entry(self, snapshot: tuple | None = None) -> tuple:
        sv = self.tokenizer_info.sorted_vocab
        snap = self._store.snapshot() if snapshot is None else snapshot
        return (
            self._automaton.packed,
            *snap,
            sv.token_ids,
            sv.offsets,
            sv.data,
            self._tokens.offsets,
            self._tokens.data,
        )

    def _registry_slot(self) -> int:
        """This grammar's slot in the batch registry (taken on first batch use)."""
        slot = self._slot
        if slot < 0:
            from ..matcher._registry import GRAMMARS

            with self._slot_lock:
                if self._slot < 0:
                    owner = object()  # only this grammar and its finalizer hold it
                    slot = GRAMMARS.add(
                        self._registry_entry(), owner, self.tokenizer_info.vocab_size
                    )
                    head = (self._automaton.packed,)
                    sv = self.tokenizer_info.sorted_vocab
                    tail = (
                        sv.token_ids,
                        sv.offsets,
                        sv.data,
                        self._tokens.offsets,
                        self._tokens.data,
                    )

                    def on_publish(snap: tuple) -> None:  # must not reference self
                        GRAMMARS.update(slot, (*head, *snap, *tail), owner)

                    # Subscribing re-publishes the current snapshot under the store's lock,
                    # so a re-allocation since the add above cannot leave the row stale.
                    self._store.subscribe(on_publish)
                    self._on_publish = on_publish
                    weakref.finalize(self, GRAMMARS.release, slot, owner)
                    self._slot = slot  # last: readers without the lock see a complete slot
                slot = self._slot
        return slot

    @property
    def automaton(self) -> Automaton:
        """The flat automaton (internal representation)."""
        return self._automaton

    @property
    def memory_size_bytes(self) -> int:
        """Approximate bytes held by the automaton and the token classification."""
        a = self._automaton
        arrays = (
            a.rule_start,
            a.rule_nullable,
            a.rule_lookahead,
            a.state_rule,
            a.state_final,
            a.byte_class,
            a.trans,
            a.ref_ptr,
            a.ref_rule,
            a.ref_target,
        )
        return int(sum(x.nbytes for x in arrays)) + self._store.memory_size_bytes

    # --------------------------------------------------------- serialization
    def serialize(self) -> bytes:
        """The compact, versioned, checksummed binary form (see docs/serialization.md):
        the automaton, the grammar text and every token class classified so far."""
        from ._serialize import serialize_compiled

        return serialize_compiled(self)

    @staticmethod
    def deserialize(data: bytes | memoryview, tokenizer_info) -> CompiledGrammar:
        """Rebuild a compiled grammar from :meth:`serialize` output.

        Everything is validated before anything is built; nothing is returned on failure.

        Raises
        ------
        DeserializeFormatError
            Corrupt, truncated or inconsistent data.
        DeserializeVersionError
            Data written by another format version.
        TokenizerMismatchError
            Data compiled for another vocabulary than ``tokenizer_info``.
        """
        from ._serialize import deserialize_compiled

        return deserialize_compiled(data, tokenizer_info)

    def save(self, path) -> None:
        """Write :meth:`serialize` output to ``path`` atomically (temporary file + rename)."""
        from ._serialize import save_compiled

        save_compiled(self, path)

    @staticmethod
    def load(path, tokenizer_info, *, mmap: bool = True) -> CompiledGrammar:
        """Load a file written by :meth:`save` (see :func:`load_compiled`).

        The file is read once into private memory, so the loaded grammar is isolated from
        later writes to the file (a copy-on-write mapping would not be); ``mmap`` is
        accepted for compatibility and ignored.

        Raises
        ------
        DeserializeFormatError, DeserializeVersionError, TokenizerMismatchError
            As :meth:`deserialize`.
        ArgumentError
            ``path`` is not a regular file.
        """
        from ._serialize import load_compiled

        return load_compiled(path, tokenizer_info, mmap=mmap)

    def classify_all_states(self) -> None:
        """Classify every automaton state now instead of on first use."""
        self._store.classify_all()

    def __repr__(self) -> str:
        a = self._automaton
        return (
            f"CompiledGrammar(rules={a.n_rules}, states={a.n_states}, "
            f"vocab_size={self.tokenizer_info.vocab_size})"
        )
