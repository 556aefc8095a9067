"""Characters of a JSON string's content, counted as its bytes arrive.

A counted rule (``Rule.max_string_chars``: JSON Schema's ``maxLength`` beside a pattern or
a format) reads the content of one JSON string, and the matcher bounds the characters it
decodes to. Both sides count with the one byte machine below: the kernels over the text
the chart read (:func:`json_chars`), and the automaton builder over the rule's automaton,
to label each state with what is pending there (``automaton._counted``).

The machine's state says what the bytes read so far leave pending: nothing (a character
boundary), the rest of an escape, or the continuation bytes of a UTF-8 sequence. A
character counts when its last byte arrives; a ``\\uD8xx`` escape (the high half of a
surrogate pair) counts at its last hex digit, and the ``\\uDCxx`` escape that completes it
counts nothing, so a pair is one character and a prefix that ends between its halves
already holds it.
"""

from __future__ import annotations

from numba import njit

__all__ = ["BOUNDARY", "N_PENDING", "char_step", "json_chars"]

BOUNDARY = 0  # between characters
_ESCAPE = 1  # after a backslash
_HEX4, _HEX3, _HEX2, _HEX1 = 2, 3, 4, 5  # hex digits of a \u escape left
_HEX3_D = 6  # after "\uD": a surrogate when the next digit is 8-B
_HIGH2, _HIGH1 = 7, 8  # a high surrogate's last two digits
_LOW6, _LOW5, _LOW4, _LOW3, _LOW2, _LOW1 = 9, 10, 11, 12, 13, 14  # its low half's bytes
_CONT3, _CONT2, _CONT1 = 15, 16, 17  # UTF-8 continuation bytes left
N_PENDING = 18


@njit(nogil=True, cache=True, inline="always", _nrt=False)
def char_step(pending, b):
    """The machine's step from ``pending`` on byte ``b``: ``2 * next + counted`` (counted is
    1 when ``b`` completes a character), or -1 when no JSON string content reads ``b``
    there (a continuation byte at a boundary, say)."""
    if pending == BOUNDARY:
        if b == 92:
            return 2 * _ESCAPE
        if b < 0x80:
            return 2 * BOUNDARY + 1
        if b < 0xC0:
            return -1
        if b < 0xE0:
            return 2 * _CONT1
        if b < 0xF0:
            return 2 * _CONT2
        return 2 * _CONT3 if b < 0xF8 else -1
    if pending == _ESCAPE:
        return 2 * _HEX4 if b == 117 else 2 * BOUNDARY + 1
    if pending == _HEX4:
        return 2 * _HEX3_D if (b | 32) == 100 else 2 * _HEX3
    if pending == _HEX3_D:
        high = b == 56 or b == 57 or (b | 32) == 97 or (b | 32) == 98  # 8 9 a b
        return 2 * _HIGH2 if high else 2 * _HEX2
    if pending == _HEX1:
        return 2 * BOUNDARY + 1
    if pending == _HIGH1:
        return 2 * _LOW6 + 1  # the pair counts once, here
    if pending == _CONT1:
        return 2 * BOUNDARY + 1
    if pending == _LOW1:
        return 2 * BOUNDARY
    return 2 * (pending + 1)  # one more byte of the same escape or sequence


@njit(nogil=True, cache=True, inline="always", _nrt=False)
def json_chars(text, lo, hi):
    """The characters complete in the JSON string content ``text[lo:hi]`` (bytes in the low
    8 bits of each word; see the module docstring; a byte no content reads ends the
    count)."""
    pending = BOUNDARY
    count = 0
    for i in range(lo, hi):
        x = char_step(pending, text[i] & 0xFF)
        if x < 0:
            break
        pending = x >> 1
        count += x & 1
    return count
