"""Detection of a Hugging Face tokenizer's vocabulary type and prefix-space behaviour.

The rules follow xgrammar 0.2.8 (found by probing it):

* Vocabulary type from the serialized backend's ``decoder``: type ``ByteLevel`` ->
  BYTE_LEVEL, ``ByteFallback`` -> BYTE_FALLBACK; for a ``Sequence`` the first of its direct
  ``decoders`` that is one of those two decides (a malformed entry before it means RAW);
  anything else is RAW.
* ``add_prefix_space`` is true when the ``normalizer`` (or a direct member of a
  ``Sequence`` normalizer) is ``Prepend`` with ``prepend == "▁"``, or when the
  ``pre_tokenizer`` itself is ``Metaspace`` with ``prepend_scheme`` ``"first"`` or
  ``"always"``.
* The vocabulary then overrides the decoder when it is decisive: at least 128 of the 256
  ``<0xHH>`` pieces means BYTE_FALLBACK; otherwise at least 128 single-character tokens of
  the byte-level alphabet and at least 99 % of tokens spelled with that alphabet means
  BYTE_LEVEL.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from treegram.tokenizer._decode import BYTE_LEVEL_CHAR_TO_BYTE, is_byte_level_spelling
from treegram.tokenizer._vocab_type import VocabType

__all__ = ["detect_metadata", "detect_vocab_type_from_vocab"]

_METASPACE = "\u2581"
_BYTE_LEVEL_CHARS = frozenset(chr(cp) for cp in BYTE_LEVEL_CHAR_TO_BYTE)


def detect_metadata(backend: Mapping[str, Any]) -> tuple[VocabType, bool]:
    """Detect ``(vocab_type, add_prefix_space)`` from a parsed ``tokenizer.json`` object.

    Parameters
    ----------
    backend : Mapping[str, Any]
        The JSON object of a Hugging Face fast tokenizer.

    Returns
    -------
    tuple[VocabType, bool]
        The vocabulary type and whether the tokenizer prepends a space to the text.
    """
    return _vocab_type_from_decoder(backend.get("decoder")), _adds_prefix_space(backend)


def _type_of(node: Any) -> str | None:
    if isinstance(node, dict) and isinstance(node.get("type"), str):
        return node["type"]
    return None


def _vocab_type_from_decoder(decoder: Any) -> VocabType:
    kind = _type_of(decoder)
    if kind == "ByteLevel":
        return VocabType.BYTE_LEVEL
    if kind == "ByteFallback":
        return VocabType.BYTE_FALLBACK
    if kind != "Sequence" or not isinstance(decoder.get("decoders"), list):
        return VocabType.RAW
    for member in decoder["decoders"]:
        member_kind = _type_of(member)
        if member_kind is None:
            return VocabType.RAW
        if member_kind == "ByteLevel":
            return VocabType.BYTE_LEVEL
        if member_kind == "ByteFallback":
            return VocabType.BYTE_FALLBACK
    return VocabType.RAW


def _is_prepend_metaspace(node: Any) -> bool:
    return _type_of(node) == "Prepend" and node.get("prepend") == _METASPACE


def _adds_prefix_space(backend: Mapping[str, Any]) -> bool:
    normalizer = backend.get("normalizer")
    if isinstance(normalizer, dict):
        if _is_prepend_metaspace(normalizer):
            return True
        members = normalizer.get("normalizers")
        if (
            _type_of(normalizer) == "Sequence"
            and isinstance(members, list)
            and any(_is_prepend_metaspace(member) for member in members)
        ):
            return True
    pre_tokenizer = backend.get("pre_tokenizer")
    return _type_of(pre_tokenizer) == "Metaspace" and pre_tokenizer.get("prepend_scheme") in (
        "first",
        "always",
    )


def detect_vocab_type_from_vocab(tokens: Mapping[str, int]) -> VocabType | None:
    """Detect the vocabulary type from the token texts alone.

    Parameters
    ----------
    tokens : Mapping[str, int]
        Token text -> id (the tokenizer's ``get_vocab()``, added tokens included).

    Returns
    -------
    VocabType or None
        BYTE_FALLBACK or BYTE_LEVEL when the vocabulary clearly uses that encoding,
        otherwise ``None`` (no evidence either way).
    """
    byte_pieces = sum(f"<0x{byte:02X}>" in tokens for byte in range(256))
    if byte_pieces >= 128:
        return VocabType.BYTE_FALLBACK
    single_chars = sum(char in tokens for char in _BYTE_LEVEL_CHARS)
    if single_chars < 128:
        return None
    spelled = sum(is_byte_level_spelling(tokens))
    if spelled >= 0.99 * len(tokens):
        return VocabType.BYTE_LEVEL
    return None
