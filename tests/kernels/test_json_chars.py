"""The character count of JSON string content (``kernels._json_chars``), against the
characters an encoding was built from, at every prefix of the encoded bytes.

Each character is written in one of the ways JSON allows (raw UTF-8, a short escape, a
``\\u`` escape, a surrogate pair of them), and the oracle knows where each ends: a prefix
holds the characters whose last byte it holds, and an astral character written as a pair
counts once its first escape is whole.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from treegram.kernels._earley import span_chars, text_word
from treegram.kernels._json_chars import json_chars

_SHORT = {'"': '\\"', "\\": "\\\\", "/": "\\/", "\b": "\\b", "\f": "\\f", "\n": "\\n"}


def _encode(ch: str, how: int) -> tuple[bytes, int]:
    """``ch`` written the ``how``-th way it can be, and the length after which it counts."""
    cp = ord(ch)
    ways = [ch.encode("utf-8")] if cp >= 0x20 and ch not in '"\\' else []
    if ch in _SHORT:
        ways.append(_SHORT[ch].encode())
    if cp < 0x10000:
        ways.append(f"\\u{cp:04x}".encode())
        ways.append(f"\\u{cp:04X}".encode())
    else:
        hi, lo = 0xD800 + ((cp - 0x10000) >> 10), 0xDC00 + ((cp - 0x10000) & 0x3FF)
        ways.append(f"\\u{hi:04x}\\u{lo:04X}".encode())
    data = ways[how % len(ways)]
    counts_at = 6 if data.startswith(b"\\u") and len(data) == 12 else len(data)
    return data, counts_at


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.characters(exclude_categories=("Cs",)),
            st.integers(min_value=0, max_value=3),
        ),
        max_size=12,
    )
)
def test_every_prefix_counts_the_characters_it_completes(chars):
    data = b""
    marks = []  # the byte offset after which each character counts
    for ch, how in chars:
        enc, counts_at = _encode(ch, how)
        marks.append(len(data) + counts_at)
        data += enc
    text = np.frombuffer(data, dtype=np.uint8).astype(np.int64)
    # the chart's text words: byte and running count, as scan_byte writes them
    words = np.zeros(len(data), dtype=np.int64)
    for i, b in enumerate(data):
        words[i] = text_word(words, i, b)
    for i in range(len(data) + 1):
        want = sum(1 for m in marks if m <= i)
        assert json_chars(text, 0, i) == want, (data, i)
        assert span_chars(words, 0, i) == want, (data, i)


def test_a_span_after_a_string_counts_from_its_own_start():
    # the text before a string's content (an object's key, say) holds characters too:
    # the count of the content is the difference of the running counts
    data = '{"k\\u00e9y": "a\\ud83d\\ude00\u00e9'.encode()
    words = np.zeros(len(data), dtype=np.int64)
    for i, b in enumerate(data):
        words[i] = text_word(words, i, b)
    start = data.index(b': "') + 3
    assert [span_chars(words, start, start + k) for k in (0, 1, 2, 7, 13, 14, 15)] == [
        0,
        1,
        1,
        2,  # the pair's first escape is whole: the character counts
        2,
        2,  # half of a two-byte character
        3,
    ]
