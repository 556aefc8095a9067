"""CompiledGrammar: a grammar's automaton bound to one tokenizer vocabulary."""

from __future__ import annotations

import base64
import binascii
import threading
import weakref
from collections.abc import Callable

import numpy as np

from .._json import dump_json, load_json
from ..automaton import Automaton
from ..errors import ArgumentError, DeserializeFormatError
from ..kernels import GRAMMARS
from ._mask_store import MaskStore
from ._serialize import decode_bytes, decode_file, encode_compiled
from ._store import write_atomic

__all__ = [
    "CompiledGrammar",
    "serialize_compiled",
    "deserialize_compiled",
    "save_compiled",
    "load_compiled",
]


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
        # token-id elements become bitsets over this vocabulary (never a special token)
        never = np.asarray(tokenizer_info.special_token_ids, dtype=np.int64)
        automaton = automaton.with_vocabulary(
            tokenizer_info.vocab_size, never, _token_lookup(tokenizer_info)
        )
        self._automaton = automaton
        self._store = MaskStore(automaton, tokenizer_info.sorted_vocab, tokenizer_info.vocab_size)
        self._tokens = tokenizer_info.token_table
        self._reset_slot()

    def _reset_slot(self) -> None:
        self._slot = -1
        self._slot_lock = threading.Lock()
        self._on_publish: Callable[[tuple], None] | None = (
            None  # keeps the store's (weakly held) listener alive
        )

    def __copy__(self) -> CompiledGrammar:
        twin = object.__new__(type(self))
        twin.__dict__.update(self.__dict__)
        twin._reset_slot()  # a registry slot belongs to exactly one object
        return twin

    def __deepcopy__(self, memo: dict) -> CompiledGrammar:
        return self.__copy__()

    @classmethod
    def from_parts(cls, grammar, tokenizer_info, automaton: Automaton, classes) -> CompiledGrammar:
        """A compiled grammar from validated parts: the deserializer's constructor.

        ``classes`` is :meth:`MaskStore.export_classes` output (or the loader's validated
        equivalent), installed before anything else can see the new grammar.
        """
        compiled = cls(grammar, tokenizer_info, automaton)
        compiled._store.install_classes(*classes)
        return compiled

    def export_classes(self) -> tuple:
        """The classification so far, as the serializer writes it
        (:meth:`MaskStore.export_classes`)."""
        return self._store.export_classes()

    def _registry_entry(self, snapshot: tuple | None = None) -> tuple:
        sv = self.tokenizer_info.sorted_vocab
        snap = self._store.snapshot() if snapshot is None else snapshot
        return (
            self._automaton.packed,
            *snap,
            sv.token_ids,
            sv.offsets,
            sv.data,
            sv.by_length,
            self._tokens.offsets,
            self._tokens.data,
        )

    def registry_slot(self) -> int:
        """This grammar's slot in the batch registry (taken on first batch use; for the
        matcher)."""
        slot = self._slot
        if slot < 0:
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
                        sv.by_length,
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
    def mask_store(self) -> MaskStore:
        """The token classification, filled lazily (internal; for the matcher)."""
        return self._store

    @property
    def token_table(self):
        """The vocabulary's token bytes (``offsets``, ``data``; internal, for the matcher)."""
        return self._tokens

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
        return deserialize_compiled(data, tokenizer_info)

    def serialize_json(self) -> str:
        """:meth:`serialize`'s binary form in a versioned JSON document (base64), for
        xgrammar's ``serialize_json`` name.

        Returns
        -------
        str
        """
        data = base64.b64encode(bytes(self.serialize())).decode("ascii")
        return dump_json("CompiledGrammar", {"data_base64": data})

    @staticmethod
    def deserialize_json(json_str: str, tokenizer_info) -> CompiledGrammar:
        """Rebuild a compiled grammar from :meth:`serialize_json` output.

        Raises
        ------
        DeserializeFormatError
            Not such a document, or corrupt data.
        DeserializeVersionError
            Another JSON or binary format version.
        TokenizerMismatchError
            Compiled for another vocabulary than ``tokenizer_info``.
        """
        obj = load_json(json_str, "CompiledGrammar", {"data_base64": str})
        try:
            data = base64.b64decode(obj["data_base64"], validate=True)
        except (binascii.Error, ValueError) as exc:
            raise DeserializeFormatError(
                f"CompiledGrammar.deserialize_json: data_base64 is not base64: {exc}"
            ) from None
        return deserialize_compiled(data, tokenizer_info)

    def save(self, path) -> None:
        """Write :meth:`serialize` output to ``path`` atomically (temporary file + rename)."""
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


def serialize_compiled(compiled: CompiledGrammar, *, cache_key: str | None = None) -> bytes:
    """Serialize a compiled grammar to the binary format (see ``docs/serialization.md``).

    The classification done so far is included (classify more first with
    :meth:`CompiledGrammar.classify_all_states` to ship a fully classified grammar). The
    output is deterministic: equal grammars with equal classifications give equal bytes.

    Parameters
    ----------
    compiled : CompiledGrammar
    cache_key : str or None, keyword-only
        The cache-store key (16 to 128 lowercase hex digits) the blob is written under;
        it is stored in the blob, and a load that names another key rejects it (see
        :func:`deserialize_compiled`). None (the default) binds the blob to no key.

    Returns
    -------
    bytes

    Raises
    ------
    ArgumentError
        ``compiled`` is not a CompiledGrammar, ``cache_key`` is not a valid key, or a
        count does not fit the format.
    """
    if not isinstance(compiled, CompiledGrammar):
        raise ArgumentError(f"compiled must be a CompiledGrammar, got {type(compiled).__name__}")
    return encode_compiled(
        compiled.grammar,
        compiled.tokenizer_info,
        compiled.automaton,
        compiled.export_classes(),
        cache_key,
    )


def save_compiled(compiled: CompiledGrammar, path) -> None:
    """Write :func:`serialize_compiled` output to ``path`` atomically.

    The bytes go to a temporary file in the same directory, are flushed to disk, and the
    file is renamed over ``path``: readers see the old file or the complete new one, never
    a torn write.
    """
    write_atomic(path, serialize_compiled(compiled))


def _token_lookup(tokenizer_info) -> Callable[[str], list[int]]:
    """Token ids by exact text (the decoded vocabulary), for token names in grammars."""
    table: dict[bytes, list[int]] | None = None

    def lookup(name: str) -> list[int]:
        nonlocal table
        if table is None:
            table = {}
            special = set(tokenizer_info.special_token_ids)
            for i, text in enumerate(tokenizer_info.decoded_vocab):
                if i not in special:
                    table.setdefault(bytes(text), []).append(i)
        return table.get(name.encode("utf-8"), [])

    return lookup


def deserialize_compiled(data, tokenizer_info, *, cache_key: str | None = None) -> CompiledGrammar:
    """Load a compiled grammar from :func:`serialize_compiled` output.

    Everything is validated before anything is built; the input is copied once (into one
    aligned buffer that the loaded arrays view), so the caller may reuse ``data``.

    Parameters
    ----------
    data : bytes, bytearray or memoryview
        The serialized grammar.
    tokenizer_info : TokenizerInfo
        The tokenizer to bind to; must be the one the grammar was compiled for.
    cache_key : str or None, keyword-only
        The cache-store key the blob was read from: the blob must have been serialized
        with exactly this ``cache_key``, so an entry of one grammar stored under another
        grammar's key is refused. None (the default) accepts any blob, keyed or not.

    Returns
    -------
    CompiledGrammar

    Raises
    ------
    DeserializeFormatError
        Corrupt, truncated or inconsistent data, or data bound to another ``cache_key``
        (the message says what failed).
    DeserializeVersionError
        Data written by another format version.
    TokenizerMismatchError
        Data compiled for another tokenizer.
    ArgumentError
        ``data`` is not bytes-like, or ``cache_key`` is not a valid key.
    TokenizerError
        ``tokenizer_info`` is not a TokenizerInfo.
    """
    grammar, automaton, classes = decode_bytes(data, tokenizer_info, cache_key)
    return CompiledGrammar.from_parts(grammar, tokenizer_info, automaton, classes)


def load_compiled(path, tokenizer_info, *, mmap: bool = True) -> CompiledGrammar:
    """Load a compiled grammar from a file written by :func:`save_compiled`.

    The file is read once into private memory that the loaded arrays view: the grammar
    is isolated from anything that later happens to the file (overwritten in place,
    truncated, deleted). A copy-on-write mapping would not be: on Linux a
    ``MAP_PRIVATE`` page that this process has not written still shows later writes by
    others to the file, so a file rewritten in place would change the live grammar.

    Parameters
    ----------
    path : str or os.PathLike
        A regular file.
    tokenizer_info : TokenizerInfo
    mmap : bool, default True, keyword-only
        Accepted for compatibility and ignored: up to format version 2 the file was
        memory-mapped, which did not isolate the grammar from later writes.

    Returns
    -------
    CompiledGrammar

    Raises
    ------
    DeserializeFormatError, DeserializeVersionError, TokenizerMismatchError
        As :func:`deserialize_compiled`.
    ArgumentError
        ``path`` is not a regular file, or ``mmap`` is not a bool.
    OSError
        The file cannot be read.
    """
    grammar, automaton, classes = decode_file(path, tokenizer_info, mmap)
    return CompiledGrammar.from_parts(grammar, tokenizer_info, automaton, classes)
