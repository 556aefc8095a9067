"""Jump-forward: the bytes that every continuation of the current prefix starts with.

:func:`forced_bytes` serves both the matcher's jump-forward string and the grammar-forced
draft nodes (``kernels._forced``)."""

from __future__ import annotations

import numpy as np
from numba import njit

from ._earley import can_end, scan_byte, unpack, waits_on_token
from ._layout import OVERFLOW, PACK_ROOT_RULE, Chart


@njit(nogil=True, cache=True, inline="always", _nrt=False)
def mark_bytes(A, chart, pos, seen):
    """``seen[c]`` = some item of set ``pos`` reads a byte of class ``c``."""
    for c in range(A.n_classes):
        seen[c] = False
    for j in range(chart.set_starts[pos], chart.set_starts[pos + 1]):
        base = chart.items_s[j] * A.n_classes
        for c in range(A.n_classes):
            if A.trans[base + c] >= 0:
                seen[c] = True
    return A.byte_class


@njit(nogil=True, cache=True, inline="always", _nrt=False)
def _only_byte(byte_class, seen):
    """The one byte whose class is ``seen``, or -1 when none or several are."""
    only = -1
    count = 0
    for b in range(256):
        if seen[byte_class[b]]:
            count += 1
            only = b
            if count > 1:
                return -1
    return only


@njit(nogil=True, cache=True, _nrt=False)
def forced_bytes(A, root_rule, chart, top, fb, limit, seen, by_id):
    """Write into ``fb`` the bytes forced from set ``top`` of ``chart`` (at most
    ``limit``): stop where the grammar may end or more than one byte may follow, and with
    ``by_id`` where a token-id element waits (a token may be read by id there). Scans into
    the sets above ``top`` (scratch). Returns the count, or OVERFLOW."""
    n = 0
    pos = top
    while n < limit:
        if pos + 2 >= chart.set_starts.shape[0]:
            return OVERFLOW
        if can_end(A, chart, pos, root_rule):
            break
        if by_id and A.tokens[0] > 0 and waits_on_token(A, chart, pos):
            break  # a token may also be read by id here: no byte is forced
        only = _only_byte(mark_bytes(A, chart, pos, seen), seen)
        if only < 0:
            break
        st = scan_byte(A, chart, pos, only)
        if st < 0:
            return st
        fb[n] = only
        n += 1
        pos += 1
    return n


@njit(nogil=True, cache=True)
def jump_forward(ab, items_s, items_o, set_starts, text, top, out):
    """Write into ``out`` the longest byte string forced from set ``top``: stop where the
    grammar may end or where more than one byte may follow (token-id elements are not
    text: the forced bytes read past them). Uses the chart above ``top`` as scratch.
    ``ab`` is the packed automaton. Returns its length, or OVERFLOW."""
    seen = np.zeros(256, dtype=np.bool_)
    return forced_bytes(
        unpack(ab),
        ab[PACK_ROOT_RULE],
        Chart(items_s, items_o, set_starts, text),
        top,
        out,
        out.shape[0],
        seen,
        np.bool_(False),  # not a literal: one specialization for both callers
    )


@njit(nogil=True, cache=True, _nrt=False)
def row_allows_all(row, vocab_size):
    """Whether every token id below ``vocab_size`` is allowed in ``row``."""
    full = vocab_size >> 5
    for w in range(full):
        if row[w] != -1:
            return False
    rest = vocab_size & 31
    if rest:
        want = (np.int64(1) << rest) - 1
        if (np.int64(row[full]) & want) != want:
            return False
    return True
