"""Jump-forward: the bytes that every continuation of the current prefix starts with."""

from __future__ import annotations

import numpy as np
from numba import njit

from ._earley import can_end, scan_byte, unpack
from ._layout import (
    OVERFLOW,
    PACK_ROOT_RULE,
)


@njit(nogil=True, cache=True)
def jump_forward(ab, items_s, items_o, set_starts, top, out):
    """Write into ``out`` the longest byte string forced from set ``top``: stop where the
    grammar may end or where more than one byte may follow. Uses the chart above ``top``
    as scratch. ``ab`` is the packed automaton. Returns its length, or OVERFLOW."""
    (
        rule_start,
        rule_nullable,
        state_rule,
        state_final,
        byte_class,
        n_classes,
        trans,
        ref_ptr,
        ref_rule,
        ref_target,
        _tokens,  # token-id elements are not text: the forced bytes read past none
    ) = unpack(ab)
    root_rule = ab[PACK_ROOT_RULE]
    n_out = 0
    pos = top
    seen = np.zeros(n_classes, dtype=np.bool_)
    while n_out < out.shape[0]:
        if pos + 2 >= set_starts.shape[0]:
            return OVERFLOW
        if can_end(state_rule, state_final, items_s, items_o, set_starts, pos, root_rule):
            break
        seen[:] = False
        for j in range(set_starts[pos], set_starts[pos + 1]):
            base = items_s[j] * n_classes
            for c in range(n_classes):
                if trans[base + c] >= 0:
                    seen[c] = True
        only = -1
        count = 0
        for b in range(256):
            if seen[byte_class[b]]:
                count += 1
                only = b
                if count > 1:
                    break
        if count != 1:
            break
        st = scan_byte(
            rule_start,
            rule_nullable,
            state_rule,
            state_final,
            byte_class,
            n_classes,
            trans,
            ref_ptr,
            ref_rule,
            ref_target,
            items_s,
            items_o,
            set_starts,
            pos,
            only,
        )
        if st < 0:
            return st
        out[n_out] = only
        n_out += 1
        pos += 1
    return n_out


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
