"""Next-token bitmask of one chart position.

mask = union of the ACCEPTED sets of the states live in the top Earley set
     + the UNCERTAIN tokens of those states that a real scan on the full chart accepts
     + the stop tokens when the root rule can end here.

Token sets live in a class store (see ``treegram.compiler._mask_store``): each class is
an accepted set, stored either as a sorted token-id list (kind 0) or as a bitset of
``n_words`` int32 words (kind 1), plus a sorted list of UNCERTAIN sorted-vocabulary
indices. The real scans reuse the chart above the top set as scratch, walking the
candidates in sorted order so shared prefixes are scanned once.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ._earley import OVERFLOW, REJECT, can_end, scan_byte, unpack

# fill_row returns NEED_CLASSIFY - k when k states of the top set are not classified yet.
NEED_CLASSIFY = -10


@njit(nogil=True, cache=True)
def collect_classes(state_class, items_s, set_starts, top, classes_out, missing_out):
    """Distinct classes of the states in set ``top``.

    Returns (n_classes, n_missing); states without a class yet go to ``missing_out``.
    """
    n_cls = 0
    n_missing = 0
    for j in range(set_starts[top], set_starts[top + 1]):
        s = items_s[j]
        c = state_class[s]
        if c < 0:
            dup = False
            for m in range(n_missing):
                if missing_out[m] == s:
                    dup = True
                    break
            if not dup:
                missing_out[n_missing] = s
                n_missing += 1
            continue
        dup = False
        for m in range(n_cls):
            if classes_out[m] == c:
                dup = True
                break
        if not dup:
            classes_out[n_cls] = c
            n_cls += 1
    return n_cls, n_missing


@njit(nogil=True, cache=True, inline="always")
def _test_bit(row, t):
    return (row[t >> 5] >> (t & 31)) & 1


@njit(nogil=True, cache=True, inline="always")
def _set_bit(row, t):
    row[t >> 5] |= np.int32(1) << np.int32(t & 31)


@njit(nogil=True, cache=True)
def fill_row(
    ab, state_class, cls_meta, acc_pool, unc_pool, sv_ids, sv_offsets, sv_data,
    items_s, items_o, set_starts, top, stop_ids, row, bufs, memo_key, memo_meta, memo_row,
):
    """Write the next-token mask of chart set ``top`` into ``row`` (int32 words).

    Parameters
    ----------
    ab : int32 [:]
        Packed automaton (``Automaton.packed``).
    state_class : int32 [n_states]
        Class id per state, -1 while unclassified.
    cls_meta : int64 [n_classes, 5]
        Per class: kind (0 list, 1 bitset), accepted offset and length in ``acc_pool``,
        uncertain offset and length in ``unc_pool``.
    sv_ids, sv_offsets, sv_data : arrays of the sorted vocabulary.
    bufs : int32 [2, >= items in the top set]
        Scratch for distinct classes (row 0) and unclassified states (row 1).
    memo_key, memo_meta, memo_row : the one-entry memo (see :func:`memo_lookup`).

    A one-entry memo returns the previous row when the top set and every set it refers
    to are unchanged - the common case while decoding the body of a string, where each
    token leaves the parser in the same items.

    Returns
    -------
    int
        0 when the row is written; OVERFLOW when the chart must grow; or
        ``NEED_CLASSIFY - k`` when the ``k`` states in ``bufs[1, :k]`` have no
        classification yet (nothing useful is written then).
    """
    (rule_start, rule_nullable, state_rule, state_final, byte_class, n_classes, trans,
     ref_ptr, ref_rule, ref_target) = unpack(ab)
    classes_buf = bufs[0]
    missing_buf = bufs[1]
    memo_s = memo_key[0]
    memo_o = memo_key[1]
    if memo_lookup(items_s, items_o, set_starts, top, memo_s, memo_o, memo_meta):
        for w in range(memo_row.shape[0]):
            row[w] = memo_row[w]
        return 0
    n_cls, n_missing = collect_classes(
        state_class, items_s, set_starts, top, classes_buf, missing_buf
    )
    if n_missing > 0:
        return NEED_CLASSIFY - n_missing
    n_words = memo_row.shape[0]  # ceil(vocab_size / 32): the width of every stored bitset
    for w in range(row.shape[0]):
        row[w] = 0
    n_unc = 0
    for m in range(n_cls):
        c = classes_buf[m]
        off = cls_meta[c, 1]
        if cls_meta[c, 0] == 1:
            for w in range(n_words):
                row[w] |= acc_pool[off + w]
        else:
            for q in range(cls_meta[c, 2]):
                _set_bit(row, acc_pool[off + q])
        n_unc += cls_meta[c, 4]
    if n_unc > 0:
        cand = np.empty(n_unc, dtype=np.int32)
        k = 0
        for m in range(n_cls):
            c = classes_buf[m]
            off = cls_meta[c, 3]
            for q in range(cls_meta[c, 4]):
                idx = unc_pool[off + q]
                if not _test_bit(row, sv_ids[idx]):
                    cand[k] = idx
                    k += 1
        cand = np.unique(cand[:k])  # sorted order = lexicographic order of the tokens
        st = check_candidates(
            rule_start, rule_nullable, state_rule, state_final, byte_class, n_classes,
            trans, ref_ptr, ref_rule, ref_target, sv_ids, sv_offsets, sv_data,
            items_s, items_o, set_starts, top, cand, row,
        )
        if st < 0:
            return st
    # Stop tokens are stops only: allowed exactly when the root rule can end here, even if
    # their text would also match the grammar.
    ends = can_end(state_rule, state_final, items_s, items_o, set_starts, top, ab[3])
    for q in range(stop_ids.shape[0]):
        t = stop_ids[q]
        if ends:
            _set_bit(row, t)
        else:
            row[t >> 5] &= ~(np.int32(1) << np.int32(t & 31))
    memo_store(items_s, items_o, set_starts, top, memo_s, memo_o, memo_meta, memo_row, row)
    return 0


# memo_meta[0]: items in the memo key (-1: empty); memo_meta[1]: the floor - every chart set
# at or below it is unchanged since the memo was stored (rollback lowers it).
@njit(nogil=True, cache=True)
def memo_lookup(items_s, items_o, set_starts, top, memo_s, memo_o, memo_meta):
    """Whether the memo row is the mask of set ``top``.

    The key is the top set's items, with origins equal to the top written as -1; any other
    origin must be at or below the floor so that the sets it reaches are the same."""
    lo = set_starts[top]
    n = set_starts[top + 1] - lo
    if memo_meta[0] != n:
        return False
    floor = memo_meta[1]
    for q in range(n):
        if items_s[lo + q] != memo_s[q]:
            return False
        o = items_o[lo + q]
        mo = memo_o[q]
        if mo == -1:
            if o != top:
                return False
        elif o != mo or mo > floor:
            return False
    return True


@njit(nogil=True, cache=True)
def memo_store(items_s, items_o, set_starts, top, memo_s, memo_o, memo_meta, memo_row, row):
    """Remember ``row`` as the mask of set ``top`` (skipped if the set is too large)."""
    lo = set_starts[top]
    n = set_starts[top + 1] - lo
    if n > memo_s.shape[0]:
        memo_meta[0] = -1
        return
    for q in range(n):
        memo_s[q] = items_s[lo + q]
        o = items_o[lo + q]
        memo_o[q] = -1 if o == top else o
    for w in range(memo_row.shape[0]):
        memo_row[w] = row[w]
    memo_meta[0] = n
    memo_meta[1] = top


@njit(nogil=True, cache=True)
def check_candidates(
    rule_start, rule_nullable, state_rule, state_final, byte_class, n_classes, trans,
    ref_ptr, ref_rule, ref_target, sv_ids, sv_offsets, sv_data,
    items_s, items_o, set_starts, top, cand, row,
):
    """Scan each candidate (sorted-vocabulary index, ascending) on the real chart and set
    its bit when all of its bytes are read. Returns 0 or OVERFLOW."""
    n = cand.shape[0]
    if n == 0:
        return 0
    max_len = 0
    for q in range(n):
        ln = sv_offsets[cand[q] + 1] - sv_offsets[cand[q]]
        if ln > max_len:
            max_len = ln
    if top + 2 + max_len >= set_starts.shape[0]:
        return OVERFLOW
    depth = 0
    prev_lo = 0
    prev_len = 0
    q = 0
    while q < n:
        idx = cand[q]
        lo = sv_offsets[idx]
        length = sv_offsets[idx + 1] - lo
        # common prefix with the previous candidate bounds the reusable depth
        lcp = 0
        lim = min(length, prev_len, depth)
        while lcp < lim and sv_data[lo + lcp] == sv_data[prev_lo + lcp]:
            lcp += 1
        depth = lcp
        prev_lo = lo
        prev_len = length
        fail_at = -1
        while depth < length:
            st = scan_byte(
                rule_start, rule_nullable, state_rule, state_final, byte_class, n_classes,
                trans, ref_ptr, ref_rule, ref_target, items_s, items_o, set_starts,
                top + depth, sv_data[lo + depth],
            )
            if st == REJECT:
                fail_at = depth
                break
            if st == OVERFLOW:
                return OVERFLOW
            depth += 1
        q += 1
        if fail_at < 0:
            _set_bit(row, sv_ids[idx])
            continue
        # skip candidates that share the failed prefix
        while q < n:
            nlo = sv_offsets[cand[q]]
            nlen = sv_offsets[cand[q] + 1] - nlo
            if nlen <= fail_at:
                break
            same = True
            for b in range(fail_at + 1):
                if sv_data[nlo + b] != sv_data[lo + b]:
                    same = False
                    break
            if not same:
                break
            q += 1
    return 0
