"""Decoding of encoded vocabulary entries back to the bytes they stand for.

Three encodings exist (see :class:`treegram.tokenizer.VocabType`):

* RAW: the token is its own text (``str`` entries are UTF-8 encoded).
* BYTE_FALLBACK: ``<0xHH>`` is the single byte ``0xHH``; otherwise every ``▁`` (U+2581) is
  a space.
* BYTE_LEVEL: every character is one byte of GPT-2's byte-to-unicode table. A token that
  uses any character outside that table (added tokens such as ``<｜User｜>``) or that is not
  valid UTF-8 is kept as it is.

The rules reproduce xgrammar 0.2.8 token for token, including two corner cases of its C++
implementation in BYTE_LEVEL vocabularies: the token is read only up to its first NUL
byte, and its UTF-8 is parsed leniently (overlong forms are accepted).
"""

from __future__ import annotations

import bisect
import itertools
import re
from collections.abc import Callable, Iterable, Sequence

from treegram.errors import TokenizerError
from treegram.tokenizer._vocab_type import VocabType

__all__ = [
    "BYTE_LEVEL_CHAR_TO_BYTE",
    "BYTE_LEVEL_CHARSET",
    "decode_byte_fallback",
    "decode_byte_level",
    "decode_raw",
    "decode_vocab",
    "is_byte_level_spelling",
]


def _byte_level_table() -> dict[int, int]:
    """Map each code point of GPT-2's byte-to-unicode alphabet to the byte it encodes."""
    printable = [*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    kept = set(printable)
    table = {byte: byte for byte in printable}
    shifted = 0
    for byte in range(256):
        if byte not in kept:
            table[0x100 + shifted] = byte
            shifted += 1
    return table


BYTE_LEVEL_CHAR_TO_BYTE: dict[int, int] = _byte_level_table()
"""Code point of a byte-level character -> the byte it encodes (256 entries)."""

BYTE_LEVEL_CHARSET: frozenset[str] = frozenset(chr(cp) for cp in BYTE_LEVEL_CHAR_TO_BYTE)
"""The 256 characters of GPT-2's byte-to-unicode alphabet (BYTE_LEVEL vocabularies)."""

# str.translate table for the fast path: alphabet characters become the Latin-1 character of
# their byte; Latin-1 characters outside the alphabet become U+FFFF so that a later
# ``encode("latin-1")`` fails for any token using a character outside the alphabet.
_SENTINEL = "\uffff"
_FAST_TABLE: dict[int, str] = {cp: _SENTINEL for cp in range(0x100)}
_FAST_TABLE.update({cp: chr(byte) for cp, byte in BYTE_LEVEL_CHAR_TO_BYTE.items()})

_BYTE_PIECE = re.compile(rb"<0x([0-9A-Fa-f]{2})>")
_METASPACE = "\u2581".encode()


def decode_raw(token: bytes) -> bytes:
    """Decode a RAW token: the token is its own byte string."""
    return token


def decode_byte_fallback(token: bytes) -> bytes:
    """Decode a BYTE_FALLBACK token, given as its UTF-8 bytes (``<0x1B>`` -> ``b"\\x1b"``,
    ``▁a`` -> ``b" a"``)."""
    if len(token) == 6:
        match = _BYTE_PIECE.fullmatch(token)
        if match is not None:
            return bytes((int(match.group(1), 16),))
    return token.replace(_METASPACE, b" ")


def decode_byte_level(token: bytes) -> bytes:
    """Decode a BYTE_LEVEL token, given as its UTF-8 bytes (``Ġhello`` -> ``b" hello"``):
    ``token`` itself when it uses a character outside the byte-level alphabet or is not
    valid UTF-8."""
    try:
        return token.decode("utf-8").translate(_FAST_TABLE).encode("latin-1")
    except (UnicodeDecodeError, UnicodeEncodeError):
        return _decode_byte_level_slow(token)


def _decode_byte_level_slow(token: bytes) -> bytes:
    """Exact xgrammar semantics for tokens the fast path cannot handle."""
    head = token.split(b"\x00", 1)[0]  # the C++ side reads the token as a C string
    code_points = _parse_utf8_lenient(head)
    if code_points is None:
        return token
    out = bytearray()
    for cp in code_points:
        byte = BYTE_LEVEL_CHAR_TO_BYTE.get(cp)
        if byte is None:
            return token
        out.append(byte)
    return bytes(out)


def _parse_utf8_lenient(data: bytes) -> list[int] | None:
    """Parse UTF-8 without rejecting overlong forms; ``None`` when malformed."""
    code_points: list[int] = []
    i, n = 0, len(data)
    while i < n:
        lead = data[i]
        if lead < 0x80:
            width, cp = 1, lead
        elif lead & 0xE0 == 0xC0:
            width, cp = 2, lead & 0x1F
        elif lead & 0xF0 == 0xE0:
            width, cp = 3, lead & 0x0F
        elif lead & 0xF8 == 0xF0:
            width, cp = 4, lead & 0x07
        else:
            return None
        if i + width > n:
            return None
        for cont in data[i + 1 : i + width]:
            if cont & 0xC0 != 0x80:
                return None
            cp = (cp << 6) | (cont & 0x3F)
        code_points.append(cp)
        i += width
    return code_points


_OUTSIDE_ALPHABET = re.compile(
    f"[^{re.escape(''.join(chr(cp) for cp in BYTE_LEVEL_CHAR_TO_BYTE))}]"
)


def _token_starts(tokens: Sequence[str]) -> list[int]:
    """Where each token starts in ``"".join(tokens)``, and the total length last."""
    return [0, *itertools.accumulate(map(len, tokens))]


def _tokens_at(starts: list[int], positions: Iterable[int]) -> set[int]:
    """Indices of the tokens holding these positions of the joined text."""
    return {bisect.bisect_right(starts, p) - 1 for p in positions}


def is_byte_level_spelling(tokens: Iterable[str]) -> list[bool]:
    """Tell, for each token text, whether it only uses byte-level alphabet characters."""
    tokens = list(tokens)
    starts = _token_starts(tokens)
    joined = "".join(tokens)
    outside = _tokens_at(starts, (m.start() for m in _OUTSIDE_ALPHABET.finditer(joined)))
    return [i not in outside for i in range(len(tokens))]


def _utf8(token: str | bytes, index: int) -> bytes:
    if isinstance(token, bytes):
        return token
    if isinstance(token, str):
        try:
            return token.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise TokenizerError(
                f"encoded_vocab[{index}] is not encodable as UTF-8: {exc.reason}"
            ) from None
    raise TokenizerError(f"encoded_vocab[{index}] must be str or bytes, got {type(token).__name__}")


def _decode_byte_level_str(token: str | bytes, index: int) -> bytes:
    # Fast path straight from the str, skipping a UTF-8 round trip for the common case.
    if isinstance(token, str):
        try:
            return token.translate(_FAST_TABLE).encode("latin-1")
        except UnicodeEncodeError:
            pass
    return decode_byte_level(_utf8(token, index))


def _decode_byte_level_strs(tokens: Sequence[str]) -> list[bytes]:
    """:func:`_decode_byte_level_str` of every token, in a few passes over their join: one
    translation and one Latin-1 encoding of the whole text (a character either way), then
    the tokens that keep a character past U+00FF go through the exact per-token path."""
    starts = _token_starts(tokens)
    translated = "".join(tokens).translate(_FAST_TABLE)
    blob = translated.encode("latin-1", errors="replace")  # "?" keeps every length
    odd = _tokens_at(starts, (m.start() for m in _PAST_LATIN1.finditer(translated)))
    out = [blob[a:b] for a, b in itertools.pairwise(starts)]
    for i in odd:
        out[i] = _decode_byte_level_str(tokens[i], i)
    return out


_PAST_LATIN1 = re.compile("[^\x00-\xff]")


def decode_vocab(tokens: Sequence[str | bytes], vocab_type: VocabType) -> list[bytes]:
    """Decode every entry of an encoded vocabulary.

    Parameters
    ----------
    tokens : Sequence[str | bytes]
        Encoded tokens; ``str`` entries are UTF-8 encoded first.
    vocab_type : VocabType
        The encoding of the tokens.

    Returns
    -------
    list[bytes]
        One decoded byte string per entry.

    Raises
    ------
    TokenizerError
        An entry is neither ``str`` nor ``bytes`` or is not encodable as UTF-8.
    """
    if vocab_type is VocabType.BYTE_LEVEL:
        if all(isinstance(tok, str) for tok in tokens):
            return _decode_byte_level_strs(tokens)  # type: ignore[arg-type]
        return [_decode_byte_level_str(tok, i) for i, tok in enumerate(tokens)]
    decode: Callable[[bytes], bytes] = (
        decode_byte_fallback if vocab_type is VocabType.BYTE_FALLBACK else decode_raw
    )
    return [decode(_utf8(tok, i)) for i, tok in enumerate(tokens)]
