"""The :class:`VocabType` enumeration (its own module so that detection code can use it)."""

from __future__ import annotations

import enum

__all__ = ["VocabType"]


class VocabType(enum.Enum):
    """How a tokenizer spells the bytes of its tokens.

    Attributes
    ----------
    RAW
        Tokens are their own text (tiktoken-style vocabularies).
    BYTE_FALLBACK
        SentencePiece style: ``<0x1B>`` is the byte ``0x1B`` and ``▁`` is a space.
    BYTE_LEVEL
        GPT-2 style byte-level BPE: every byte is one character of a 256-character alphabet
        (``Ġ`` is a space, ``Ċ`` a newline).
    """

    RAW = 0
    BYTE_FALLBACK = 1
    BYTE_LEVEL = 2
