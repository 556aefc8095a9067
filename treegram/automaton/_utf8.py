"""Code-point ranges to UTF-8 byte-range sequences.

A character class matches code points, but the automaton reads bytes. Every inclusive
code-point range splits into a few *sequences*, each a tuple of byte ranges whose product
is exactly the UTF-8 encodings of a sub-range (the classic construction used by byte-level
regex engines). Surrogates (U+D800..U+DFFF) have no valid UTF-8 encoding and are dropped.
"""

from __future__ import annotations

from treegram.ir import MAX_CODEPOINT

__all__ = ["utf8_sequences"]

# Largest code point encoded with 1, 2, 3 and 4 bytes.
_LENGTH_LIMITS = (0x7F, 0x7FF, 0xFFFF, MAX_CODEPOINT)
_SURROGATES = (0xD800, 0xDFFF)


def _without_surrogates(lo: int, hi: int) -> list[tuple[int, int]]:
    s_lo, s_hi = _SURROGATES
    if hi < s_lo or lo > s_hi:
        return [(lo, hi)]
    parts = []
    if lo < s_lo:
        parts.append((lo, s_lo - 1))
    if hi > s_hi:
        parts.append((s_hi + 1, hi))
    return parts


def _encode(cp: int) -> bytes:
    return chr(cp).encode("utf-8", "surrogatepass")


def _split_same_length(lo: int, hi: int, out: list[tuple[tuple[int, int], ...]]) -> None:
    """Append sequences for ``lo..hi`` where both encode to the same number of bytes."""
    n = len(_encode(lo))
    for i in range(1, n):
        mask = (1 << (6 * i)) - 1  # code-point bits held by the last i continuation bytes
        if (lo & ~mask) != (hi & ~mask):
            if lo & mask:
                _split_same_length(lo, lo | mask, out)
                _split_same_length((lo | mask) + 1, hi, out)
                return
            if (hi & mask) != mask:
                _split_same_length(lo, (hi & ~mask) - 1, out)
                _split_same_length(hi & ~mask, hi, out)
                return
    a, b = _encode(lo), _encode(hi)
    out.append(tuple((a[k], b[k]) for k in range(n)))


def utf8_sequences(lo: int, hi: int) -> list[tuple[tuple[int, int], ...]]:
    """Byte-range sequences whose union is the UTF-8 encoding of code points ``lo..hi``.

    Parameters
    ----------
    lo, hi : int
        Inclusive code-point bounds, ``0 <= lo <= hi <= 0x10FFFF``.

    Returns
    -------
    list of tuple of (int, int)
        Each sequence is a tuple of inclusive byte ranges, one per encoded byte.
    """
    out: list[tuple[tuple[int, int], ...]] = []
    for a, b in _without_surrogates(lo, hi):
        start = a
        for limit in _LENGTH_LIMITS:
            if start > b:
                break
            if start <= limit:
                end = min(b, limit)
                _split_same_length(start, end, out)
                start = end + 1
    return out
