"""Earley recognition over the flat automaton, one byte at a time.

The chart is three flat arrays: ``items_s`` / ``items_o`` hold the automaton state and the
origin set of each item, and ``set_starts[i] .. set_starts[i + 1]`` delimits Earley set
``i`` (set ``i`` is reached after ``i`` bytes). Sets are only ever appended past the
current top, so a failed scan leaves the chart exactly as it was and rollback is a matter
of forgetting sets. Nullable calls use the Aycock-Horspool rule (predicting a nullable
rule also steps over the call), so no completion ever targets the set being built.

Kernels take the unpacked automaton ``A`` (an ``_layout.AutomatonArrays``) and the chart
as one ``_layout.Chart`` bundle.

Every function returns a negative status instead of raising: ``OVERFLOW`` when the caller
must grow the arrays and retry, ``REJECT`` when the input does not match.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ._layout import (
    OVERFLOW,
    PACK_N_CLASSES,
    PACK_OFFSETS,
    PACK_ROOT_RULE,
    REJECT,
    AutomatonArrays,
    Chart,
)


@njit(nogil=True, cache=True, inline="always", _nrt=False)
def add_item(items_s, items_o, set_lo, n, s, o):
    """Append item (s, o) to the set starting at ``set_lo`` unless present. Returns the
    new end, or OVERFLOW when the arrays are full."""
    for j in range(set_lo, n):
        if items_s[j] == s and items_o[j] == o:
            return n
    if n >= items_s.shape[0]:
        return OVERFLOW
    items_s[n] = s
    items_o[n] = o
    return n + 1


@njit(nogil=True, cache=True, inline="always", _nrt=False)
def _complete(A, chart, lo, n, callers_lo, callers_hi, r):
    """Complete rule ``r``: add to the set at ``lo`` (ending at ``n``) of ``chart`` every
    item of ``items[callers_lo:callers_hi]`` that calls ``r``, stepped over the call.

    Returns the new end of the set, or OVERFLOW.
    """
    items_s, items_o, _ = chart
    for j in range(callers_lo, callers_hi):
        s = items_s[j]
        for e in range(A.ref_ptr[s], A.ref_ptr[s + 1]):
            if A.ref_rule[e] == r:
                n = add_item(items_s, items_o, lo, n, A.ref_target[e], items_o[j])
                if n < 0:
                    return n
    return n


@njit(nogil=True, cache=True, inline="always", _nrt=False)
def closure(A, chart, pos, lo, n):
    """Predict and complete the items of set ``pos`` (``items[lo:n]``) of ``chart`` to a
    fixpoint, on the unpacked automaton ``A``.

    Returns the new end of the set, or OVERFLOW.
    """
    items_s, items_o, set_starts = chart
    j = lo
    while j < n:
        s = items_s[j]
        k = items_o[j]
        for e in range(A.ref_ptr[s], A.ref_ptr[s + 1]):
            r = A.ref_rule[e]
            n = add_item(items_s, items_o, lo, n, A.rule_start[r], pos)
            if n < 0:
                return n
            if A.rule_nullable[r]:
                n = add_item(items_s, items_o, lo, n, A.ref_target[e], k)
                if n < 0:
                    return n
        if A.state_final[s] and k < pos:
            n = _complete(A, chart, lo, n, set_starts[k], set_starts[k + 1], A.state_rule[s])
            if n < 0:
                return n
        j += 1
    return n


@njit(nogil=True, cache=True, inline="always", _nrt=False)
def scan_byte(A, chart, pos, b):
    """Build set ``pos + 1`` of ``chart`` from set ``pos`` by reading byte ``b``.

    ``set_starts[pos + 1]`` must be the end of set ``pos``. On success writes
    ``set_starts[pos + 2]`` and returns it; returns REJECT if no item reads ``b``
    (nothing is written then), or OVERFLOW.
    """
    items_s, items_o, set_starts = chart
    lo = set_starts[pos]
    hi = set_starts[pos + 1]
    c = A.byte_class[b]
    n = hi
    for j in range(lo, hi):
        t = A.trans[items_s[j] * A.n_classes + c]
        if t >= 0:
            n = add_item(items_s, items_o, hi, n, t, items_o[j])
            if n < 0:
                return n
    if n == hi:
        return REJECT
    n = closure(A, chart, pos + 1, hi, n)
    if n < 0:
        return n
    set_starts[pos + 2] = n
    return n


@njit(nogil=True, cache=True, _nrt=False)
def scan_one(A, chart, pos, b):
    """``scan_byte`` as a call of its own, for kernels that run with reference counting
    (they allocate): inlined there, every field it reads from a bundle would cost an
    atomic increment and decrement per byte."""
    return scan_byte(A, chart, pos, b)


@njit(nogil=True, cache=True, _nrt=False)
def closure_one(A, chart, pos, lo, n):
    """``closure`` as a call of its own, for kernels that run with reference counting
    (see ``scan_one``)."""
    return closure(A, chart, pos, lo, n)


@njit(nogil=True, cache=True, _nrt=False)
def scan_bytes(A, chart, top, data, lo, hi):
    """Read ``data[lo:hi]`` starting from set ``top`` of ``chart``.

    Returns the index of the new top set, REJECT, or OVERFLOW (also when ``set_starts``
    has no room). Sets above ``top`` are scratch until the caller commits the new top.
    """
    if top + 1 + (hi - lo) >= chart.set_starts.shape[0]:
        return OVERFLOW
    pos = top
    for i in range(lo, hi):
        st = scan_byte(A, chart, pos, data[i])
        if st < 0:
            return st
        pos += 1
    return pos


# The accept kernels inline the byte loop (``_ops.accept_token_op``): a call of its own
# passes the unpacked automaton and the chart field by field, some 100 words, which on a
# small grammar costs more than reading a one-byte token.
scan_bytes_inlined = njit(nogil=True, cache=True, inline="always", _nrt=False)(scan_bytes.py_func)


@njit(nogil=True, cache=True, inline="always", _nrt=False)
def _in_token_set(tokens, k, token):
    """Whether token set ``k`` of ``tokens`` (``A.tokens``) holds ``token``."""
    n = tokens[0]
    w = tokens[2 + n + k * tokens[1] + (token >> 5)]
    return (w >> (token & 31)) & 1


@njit(nogil=True, cache=True, inline="always", _nrt=False)
def waits_on_token(A, chart, pos):
    """Whether an item of set ``pos`` waits on a token-id element (is the start of a
    token rule): then the next token may also be read by id, not only by its bytes."""
    tokens = A.tokens
    items_s = chart.items_s
    n = tokens[0]
    for j in range(chart.set_starts[pos], chart.set_starts[pos + 1]):
        s = items_s[j]
        for k in range(n):
            if A.rule_start[tokens[2 + k]] == s:
                return True
    return False


@njit(nogil=True, cache=True, inline="always", _nrt=False)
def or_token_sets(A, chart, pos, out, r):
    """OR into row ``r`` of ``out`` the token sets that items of set ``pos`` wait on."""
    tokens = A.tokens
    items_s = chart.items_s
    n = tokens[0]
    n_words = min(tokens[1], out.shape[1])
    for j in range(chart.set_starts[pos], chart.set_starts[pos + 1]):
        s = items_s[j]
        for k in range(n):
            if A.rule_start[tokens[2 + k]] == s:
                base = 2 + n + k * tokens[1]
                for w in range(n_words):
                    out[r, w] |= tokens[base + w]


@njit(nogil=True, cache=True, inline="always", _nrt=False)
def scan_token(A, chart, top, new_top, token, n_bytes):
    """Read ``token`` (``n_bytes`` >= 1 bytes long) by id from set ``top``: every token
    rule waiting there whose set holds it completes, in set ``top + n_bytes``: the set its
    bytes reached (``new_top``, already built) or, when they were rejected
    (``new_top < 0``), a new one after empty sets. Sets stay byte positions, so captures
    read the token's text off them like any other.

    Returns the new top, REJECT when neither way reads the token (nothing is written
    then), or OVERFLOW.
    """
    items_s, set_starts = chart.items_s, chart.set_starts
    tokens = A.tokens
    n_tok = tokens[0]
    if new_top < 0:
        pos = top + n_bytes
        if pos + 1 >= set_starts.shape[0]:
            return OVERFLOW
        lo = set_starts[top + 1]  # the end of set top: the sets above are scratch
        n = lo
    else:
        pos = new_top
        lo = set_starts[new_top]
        n = set_starts[new_top + 1]
    n_old = n
    t_lo = set_starts[top]
    t_hi = set_starts[top + 1]
    for j in range(t_lo, t_hi):
        s = items_s[j]
        for k in range(n_tok):
            r = tokens[2 + k]
            if A.rule_start[r] != s or not _in_token_set(tokens, k, token):
                continue
            n = _complete(A, chart, lo, n, t_lo, t_hi, r)  # its callers in set top
            if n < 0:
                return n
    if n == n_old:  # no token rule read it, or the bytes' set held every completion
        return new_top if new_top >= 0 else REJECT
    if new_top < 0:
        for p in range(top + 2, pos + 1):  # the bytes inside the token: empty sets
            set_starts[p] = lo
    # predict and complete from the new items (the set's old items are closed already;
    # closure over them again only finds what is there)
    n = closure(A, chart, pos, lo, n)
    if n < 0:
        return n
    set_starts[pos + 1] = n
    return pos


@njit(nogil=True, cache=True, _nrt=False)
def init_chart(A, chart, root_rule):
    """Write set 0 of ``chart``: the root rule's start item and its closure. Returns 0 or
    OVERFLOW."""
    items_s, items_o, set_starts = chart
    set_starts[0] = 0
    items_s[0] = A.rule_start[root_rule]
    items_o[0] = 0
    n = closure(A, chart, 0, 0, 1)
    if n < 0:
        return n
    set_starts[1] = n
    return 0


@njit(nogil=True, cache=True, inline="always", _nrt=False)
def can_end(A, chart, pos, root_rule):
    """Whether the root rule is complete at set ``pos`` of ``chart``."""
    items_s, items_o, set_starts = chart
    for j in range(set_starts[pos], set_starts[pos + 1]):
        s = items_s[j]
        if items_o[j] == 0 and A.state_final[s] and A.state_rule[s] == root_rule:
            return True
    return False


@njit(nogil=True, cache=True, inline="always", _nrt=False)
def unpack(ab):
    """The ``AutomatonArrays`` of a packed automaton (``Automaton.packed``): views."""
    o = PACK_OFFSETS  # ab[o + k] .. ab[o + k + 1]: packed array k
    return AutomatonArrays(
        ab[ab[o] : ab[o + 1]],
        ab[ab[o + 1] : ab[o + 2]],
        ab[ab[o + 2] : ab[o + 3]],
        ab[ab[o + 3] : ab[o + 4]],
        ab[ab[o + 4] : ab[o + 5]],
        ab[PACK_N_CLASSES],
        ab[ab[o + 5] : ab[o + 6]],
        ab[ab[o + 6] : ab[o + 7]],
        ab[ab[o + 7] : ab[o + 8]],
        ab[ab[o + 8] : ab[o + 9]],
        ab[ab[o + 9] : ab[o + 10]],
    )


@njit(nogil=True, cache=True, _nrt=False)
def accept_bytes(ab, items_s, items_o, set_starts, top, data, lo, hi):
    """``scan_bytes`` on a packed automaton: the matcher's accept entry point."""
    return scan_bytes(unpack(ab), Chart(items_s, items_o, set_starts), top, data, lo, hi)


@njit(nogil=True, cache=True, _nrt=False)
def start_chart(ab, items_s, items_o, set_starts):
    """``init_chart`` on a packed automaton for its root rule."""
    return init_chart(unpack(ab), Chart(items_s, items_o, set_starts), ab[PACK_ROOT_RULE])


@njit(nogil=True, cache=True, _nrt=False)
def chart_can_end(ab, items_s, items_o, set_starts, top):
    """``can_end`` on a packed automaton for its root rule."""
    return can_end(unpack(ab), Chart(items_s, items_o, set_starts), top, ab[PACK_ROOT_RULE])


def new_chart(item_capacity: int = 256, set_capacity: int = 64):
    """Allocate empty chart arrays."""
    return (
        np.zeros(item_capacity, dtype=np.int32),
        np.zeros(item_capacity, dtype=np.int32),
        np.zeros(set_capacity, dtype=np.int32),
    )
