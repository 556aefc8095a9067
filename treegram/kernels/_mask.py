"""Next-token bitmask of one chart position.

mask = union of the ACCEPTED sets of the states live in the top Earley set (those not
       inside a call made at the top itself, see ``collect_classes``)
     + the UNCERTAIN tokens of those states that a real scan on the full chart accepts
     + the stop tokens when the root rule can end here.

Near the character bound of a counted rule (``Rule.max_string_chars``), which the classes
ignore, every token longer than the margin left is read for real as well
(``counted_margin``).

Token sets live in a class store (see ``treegram.compiler._mask_store``): each class is
an accepted set, stored either as a sorted token-id list (kind 0) or as a bitset of
``n_words`` int32 words (kind 1), plus a sorted list of UNCERTAIN sorted-vocabulary
indices. The real scans reuse the chart above the top set as scratch, walking the
candidates in sorted order so shared prefixes are scanned once.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ._earley import can_end, or_token_sets, scan_byte, span_chars
from ._layout import (
    BUFS_FULL,
    CAND_FULL,
    CONTEXT_FIRST,
    M_TOP,
    NEED_CLASSIFY,
    NOT_COUNTED,
    OVERFLOW,
    REJECT,
)

# The mask kernels run without numba's reference counting (``_nrt=False``): every array
# reference they create would otherwise cost atomic increments and decrements, which on
# small masks cost more than the work itself. They therefore never allocate; callers
# pass scratch arrays and get a *_FULL status when one is too small.


# A state whose class leaves at least this many tokens UNCERTAIN is classified again with
# its callers in the chart as context (see ``collect_classes``).
CONTEXT_MIN_UNCERTAIN = 16
# At most this many distinct callers at a context's top level (more: no callers there).
CONTEXT_MAX_CALLERS = 8
# At most this many tail callers are followed up the chart (see ``_context_key``).
CONTEXT_MAX_CHAIN = 6

# A context key, as requested and stored: [-(3 + m + k), s, m, chain_1 .. chain_m,
# caller_1 .. caller_k]. The context table lives after the states in ``state_class``
# (``n_states`` = the length of ``state_rule``): [capacity T (a power of two), pool words
# used, T slots (0: empty, else 1 + the entry's offset in the pool), pool]; a pool entry is
# a key followed by its class id.


@njit(nogil=True, cache=True, inline="always", _nrt=False)
def context_hash(key, lo, n):
    """64-bit hash of the words ``key[1, lo:lo + n]`` (a context key; the table's slot
    order, shared with ``compiler._mask_store``)."""
    h = np.uint64(0x9E3779B97F4A7C15)
    for i in range(lo, lo + n):
        h = (h ^ np.uint64(key[1, i])) * np.uint64(0xBF58476D1CE4E5B9)
        h ^= h >> np.uint64(31)
    return h


@njit(nogil=True, cache=True, _nrt=False)
def context_class(state_class, n_states, key, lo, n):
    """Class id stored for the context key ``key[1, lo:lo + n]``, or -1."""
    if state_class.shape[0] <= n_states:
        return -1
    cap = state_class[n_states]
    slots = n_states + 2
    pool = slots + cap
    slot = np.int64(context_hash(key, lo, n) & np.uint64(cap - 1))
    while True:
        at = state_class[slots + slot]
        if at == 0:
            return -1
        e = pool + at - 1
        if state_class[e] == key[1, lo]:
            same = True
            for i in range(1, n):
                if state_class[e + i] != key[1, lo + i]:
                    same = False
                    break
            if same:
                return state_class[e + n]
        slot = (slot + 1) & (cap - 1)


@njit(nogil=True, cache=True, inline="always", _nrt=False)
def _request_present(bufs, n_missing, lo, n):
    """Whether the request ``bufs[1, lo:lo + n]`` is among the first ``n_missing`` words
    (requests are parsed: a word < 0 starts a context key ``-word`` words long)."""
    m = 0
    while m < n_missing:
        length = 1 if bufs[1, m] >= 0 else -bufs[1, m]
        if length == n:
            same = True
            for i in range(n):
                if bufs[1, m + i] != bufs[1, lo + i]:
                    same = False
                    break
            if same:
                return True
        m += length
    return False


@njit(nogil=True, cache=True, inline="always", _nrt=False)
def _callers(A, chart, origin, rule, bufs, at):
    """Write the distinct states of set ``origin`` that call ``rule`` into ``bufs[1, at:]``,
    increasing; returns how many (-1 when there are more than CONTEXT_MAX_CALLERS or the
    buffer is too small)."""
    items_s = chart.items_s
    k = 0
    for j in range(chart.set_starts[origin], chart.set_starts[origin + 1]):
        c = items_s[j]
        calls = False
        for e in range(A.ref_ptr[c], A.ref_ptr[c + 1]):
            if A.ref_rule[e] == rule:
                calls = True
                break
        if not calls:
            continue
        # insert c in order, unless present
        pos = 0
        while pos < k and bufs[1, at + pos] < c:
            pos += 1
        if pos < k and bufs[1, at + pos] == c:
            continue
        if k >= CONTEXT_MAX_CALLERS or at + k >= bufs.shape[1]:
            return -1
        for i in range(k, pos, -1):
            bufs[1, at + i] = bufs[1, at + i - 1]
        bufs[1, at + pos] = c
        k += 1
    return k


@njit(nogil=True, cache=True, inline="always", _nrt=False)
def _tail_origin(A, chart, origin, caller, rule, same_set):
    """The origin of the one item of set ``origin`` in state ``caller``, when there is one
    and ``caller``'s rule may end right after ``rule`` returns (a tail call: the context
    continues at the caller's own callers); else -1. With ``same_set``, that origin may be
    ``origin`` itself (the caller's rule had read nothing before the call)."""
    target = -1
    for e in range(A.ref_ptr[caller], A.ref_ptr[caller + 1]):
        if A.ref_rule[e] == rule:
            target = A.ref_target[e]
    if target < 0 or not A.state_final[target]:
        return -1
    found = -1
    for j in range(chart.set_starts[origin], chart.set_starts[origin + 1]):
        if chart.items_s[j] == caller:
            if found >= 0:
                return -1
            found = chart.items_o[j]
    if found == origin and same_set:
        return found  # its callers are in the same set; CONTEXT_MAX_CHAIN bounds the chain
    return found if 0 <= found < origin else -1


@njit(nogil=True, cache=True, inline="always", _nrt=False)
def _context_key(A, chart, s, o, bufs, lo, same_set):
    """Write the context key of item ``(s, o)`` of ``chart`` at ``bufs[1, lo:]``; returns
    its length, 0 when the item has no usable context, or -1 when ``bufs`` is too small.

    Level 1 is the states of set ``o`` that call ``s``'s rule. While that is a single item
    whose own rule may end right after the call (the second half of a doubled block, say),
    the key records it in the chain and looks one level up, in that item's origin set: a
    token running past ``s``'s rule then reads on in the rules that actually continue.

    With ``same_set`` (``s`` is CONTEXT_FIRST: a string body near its rule's end) the chain
    also climbs through tail callers whose rule began in the same set: the nested choice
    rules of a length-bounded string's blocks (``automaton._repeats``) all begin where the
    string does, and only above them does the context say how many characters remain.
    Elsewhere such a caller ends the chain, so that keys stay shared between positions."""
    at = lo + 3
    if at >= bufs.shape[1]:
        return -1
    rule = A.state_rule[s]
    origin = o
    m = 0
    k = 0
    while True:
        k = _callers(A, chart, origin, rule, bufs, at + m)
        if k != 1 or m >= CONTEXT_MAX_CHAIN:
            break
        c = bufs[1, at + m]
        up = _tail_origin(A, chart, origin, c, rule, same_set)
        if up < 0:
            break
        m += 1  # c joins the chain (it is already in place)
        rule = A.state_rule[c]
        origin = up
    if k < 0:
        k = 0  # too many callers up there: the chain's top rule ends the context
    if m + k == 0:
        return 0
    bufs[1, lo] = -(3 + m + k)
    bufs[1, lo + 1] = s
    bufs[1, lo + 2] = m
    return 3 + m + k


@njit(nogil=True, cache=True, inline="always", _nrt=False)
def collect_classes(A, root, classes, chart, top, bufs):
    """Distinct classes of the states in set ``top`` that the mask needs into ``bufs[0]``.

    An item whose origin is ``top`` itself lies inside a call made at ``top``: it was
    predicted (or stepped over a nullable call) from a caller in the same set, and the
    caller's classification already walks every path through that call, including the
    bytes after it returns. Only items with an earlier origin, plus the root rule's items
    of set 0 (the one call without a caller), are therefore collected. This keeps a first
    mask from classifying every rule a deep prediction chain touched.

    A state whose own class leaves many tokens UNCERTAIN (its rule often ends inside a
    token) is looked up with its *context*: the states of its origin set that call its rule.
    Classified with those callers as the virtual caller set, the tokens that run past the
    rule's end into a caller are decided once instead of being scanned at every mask. A
    state marked CONTEXT_FIRST (inside a string body near its rule's end: its own class
    would be mostly UNCERTAIN and costly) goes to its context without a class of its own,
    and is requested alone only when its item has no usable context; once it has one, its
    entry is ``CONTEXT_FIRST - 1 - class id`` and it still goes to its context first.

    Returns (n_classes, n_missing). Missing classifications go to ``bufs[1]`` as requests:
    a state ``s >= 0``, or a context key ``[-(3 + m + k), s, m, chain.., callers..]``;
    ``n_missing`` counts words. Returns (-1, -1) when a buffer is too small (no bounds
    checks in nopython mode).
    """
    state_class = classes.state_class
    cls_meta = classes.cls_meta
    items_s, items_o, set_starts, _ = chart
    n_states = A.state_rule.shape[0]
    n_cls = 0
    n_missing = np.int64(0)  # not a literal: one specialization of context_class
    for j in range(set_starts[top], set_starts[top + 1]):
        s = items_s[j]
        o = items_o[j]
        if o == top and (top > 0 or A.state_rule[s] != root):
            continue
        c = state_class[s]
        first = c <= CONTEXT_FIRST  # marked; below the mark: with its own class too
        if c < CONTEXT_FIRST:
            c = CONTEXT_FIRST - 1 - c
        # (not after a unique rule's completion: its context classes would assume every
        # caller took it, while the chart's may have refused it as a repeat)
        wide = first or (c >= 0 and cls_meta[c, 4] >= CONTEXT_MIN_UNCERTAIN)
        if o < top and wide and not (A.unique and A.state_final[s] == 2):
            # try the class of this state in its context (the key is written after the
            # requests, and becomes one if it is missing)
            n = _context_key(A, chart, s, o, bufs, n_missing, first)
            if n < 0:
                return -1, -1
            if n > 0:
                cc = context_class(state_class, n_states, bufs, n_missing, n)
                if cc >= 0:
                    c = cc
                else:
                    if not _request_present(bufs, n_missing, n_missing, n):
                        n_missing += n
                    continue
        if c < 0:
            if n_missing >= bufs.shape[1]:
                return -1, -1
            bufs[1, n_missing] = s
            if not _request_present(bufs, n_missing, n_missing, 1):
                n_missing += 1
            continue
        dup = False
        for m in range(n_cls):
            if bufs[0, m] == c:
                dup = True
                break
        if not dup:
            if n_cls >= bufs.shape[1]:
                return -1, -1
            bufs[0, n_cls] = c
            n_cls += 1
    return n_cls, n_missing


# Rows are addressed as (2-D array, row index), never sliced: in nopython mode every slice
# is a new reference whose atomic refcounting costs more than these loops.
@njit(nogil=True, cache=True, inline="always", _nrt=False)
def _test_bit(out, r, t):
    return (out[r, t >> 5] >> (t & 31)) & 1


@njit(nogil=True, cache=True, inline="always", _nrt=False)
def _set_bit(out, r, t):
    out[r, t >> 5] |= np.int32(1) << np.int32(t & 31)


@njit(nogil=True, cache=True, _nrt=False)
def fill_row(G, M, S, out, r, memo_src=-2):
    """Write the next-token mask of matcher position ``M`` into row ``r`` of ``out``.

    Parameters
    ----------
    G : Grammar
        The grammar (``_layout.Grammar``): the unpacked automaton, its root rule, its token
        classes (``Classes``: ``state_class`` int32 [n_states], a class id per state, -1
        while unclassified; ``cls_meta`` int64 [n_classes, 5], per class its kind (0 list,
        1 bitset), accepted offset and length in ``acc_pool``, uncertain offset and length
        in ``unc_pool``) and the vocabulary (``Vocab``).
    M : MatcherState
        The chart, whose top set (``meta[M_TOP]``) is masked, and the stop tokens.
    S : Scratch
        ``bufs`` int32 [2, >= items in the top set] (distinct classes in row 0,
        unclassified states in row 1), the one-entry memo (see :func:`memo_lookup`) and
        ``cand`` int32 (uncertain candidates; CAND_FULL asks for a larger one).
    out : int32 [rows, n_words]
        Output bitmask; only row ``r`` is written.

    A one-entry memo returns the previous row when the top set and every set it refers
    to are unchanged - the common case while decoding the body of a string, where each
    token leaves the parser in the same items.

    Returns
    -------
    int
        0 when the row is written; OVERFLOW when the chart must grow; BUFS_FULL when
        ``bufs`` must grow; or
        ``NEED_CLASSIFY - k`` when the ``k`` words in ``bufs[1, :k]`` are classification
        requests (states, or context keys: see ``collect_classes``; nothing useful is
        written then).

    A traversal's fill (``memo_src`` >= -1, through ``fill_traversal_row_inlined``) is
    the same with two differences. A traversal zeroes its rows before the walk and writes
    each row once, so its fill neither clears row ``r`` nor copies it into the memo when it
    stores one: the memo's row is ``out[memo_src]`` (-1: the memo's own ``memo_row``), and
    the traversal copies it into ``memo_row`` when it ends (on wide vocabularies each copy
    is a row of thousands of words). And it returns 1 when it wrote the memo's row (the
    memo is unchanged).
    """
    A = G.automaton
    chart = M.chart
    top = M.meta[M_TOP]
    bufs = S.bufs
    memo_row = S.memo_row
    # a mask near a counted rule's bound depends on the characters read, not only on items
    margin = NO_MARGIN
    if A.state_chars.shape[0] > 0:
        margin = counted_margin(A, chart, top, S.memo_meta[2])
    if margin == NO_MARGIN and memo_lookup(chart, top, S):
        if memo_src >= 0:
            for w in range(memo_row.shape[0]):
                out[r, w] = out[memo_src, w]
            return 1
        for w in range(memo_row.shape[0]):
            out[r, w] = memo_row[w]
        return 0 if memo_src == -2 else 1
    n_cls, n_missing = collect_classes(A, G.root, G.classes, chart, top, bufs)
    if n_cls < 0:
        return BUFS_FULL
    if n_missing > 0:
        return NEED_CLASSIFY - n_missing
    cls_meta = G.classes.cls_meta
    acc_pool = G.classes.acc_pool
    unc_pool = G.classes.unc_pool
    n_words = memo_row.shape[0]  # ceil(vocab_size / 32): the width of every stored bitset
    if memo_src == -2:
        for w in range(out.shape[1]):
            out[r, w] = 0
    n_unc = 0
    for m in range(n_cls):
        c = bufs[0, m]
        off = cls_meta[c, 1]
        if cls_meta[c, 0] == 1:
            for w in range(n_words):
                out[r, w] |= acc_pool[off + w]
        else:
            for q in range(cls_meta[c, 2]):
                _set_bit(out, r, acc_pool[off + q])
        n_unc += cls_meta[c, 4]
    if n_unc > 0:
        cand = S.cand
        if n_unc > cand.shape[0]:
            return CAND_FULL
        sv_ids = G.vocab.sv_ids
        k = 0
        for m in range(n_cls):
            c = bufs[0, m]
            off = cls_meta[c, 3]
            for q in range(cls_meta[c, 4]):
                idx = unc_pool[off + q]
                if not _test_bit(out, r, sv_ids[idx]):
                    cand[k] = idx
                    k += 1
        k = _sort_unique(cand, np.int64(k))  # sorted order = lexicographic order of the tokens
        st = check_candidates(A, G.vocab, chart, top, cand, k, out, r)
        if st < 0:
            return st
    if margin != NO_MARGIN:
        st = recheck_long_tokens(A, G.vocab, chart, top, S.cand, out, r, margin)
        if st < 0:
            return st
    if A.tokens[0] > 0:  # token-id elements waiting here allow their sets wholesale
        or_token_sets(A, chart, top, out, r)
    # Stop tokens are stops only: allowed exactly when the root rule can end here, even if
    # their text would also match the grammar.
    ends = can_end(A, chart, top, G.root)
    stop_ids = M.stop_ids
    for q in range(stop_ids.shape[0]):
        t = stop_ids[q]
        if ends:
            _set_bit(out, r, t)
        else:
            out[r, t >> 5] &= ~(np.int32(1) << np.int32(t & 31))
    # with unique rules, equal items may have read different texts
    if not A.unique and margin == NO_MARGIN:
        memo_store(chart, top, S, out, r, memo_src == -2)
    return 0


# The traversal inlines its one call of fill_row (``_ops.traverse_op``): a call of its own
# passes the grammar, state and scratch bundles field by field, some 200 words, which costs
# more than a small mask itself (measured 43 ns a call against 5 ns inlined, on a memo hit).
# Its rows are zeroed before the walk, and the memo's row stays in them (``memo_src`` >= -1,
# see fill_row). fill_row's own body, not a wrapper of it: numba's inliner copies an
# inlined function's whole IR once per level, which with an empty kernel cache costs
# seconds on a body this size.
fill_traversal_row_inlined = njit(nogil=True, cache=True, inline="always", _nrt=False)(
    fill_row.py_func
)


@njit(nogil=True, cache=True, inline="always", _nrt=False)
def memo_keep_row(S, out, memo_src):
    """End a traversal's fills: copy row ``memo_src`` of ``out`` (>= 0) into the memo's
    own ``memo_row``, whose key the fills stored."""
    if memo_src >= 0:
        memo_row = S.memo_row
        for w in range(memo_row.shape[0]):
            memo_row[w] = out[memo_src, w]


# ``counted_margin`` when no token can pass a counted rule's bound
NO_MARGIN = -(2**62)


@njit(nogil=True, cache=True, _nrt=False)
def counted_margin(A, chart, top, longest):
    """How many characters a token read from set ``top`` may put into counted rules
    (``Rule.max_string_chars``) without passing a bound, or NO_MARGIN when that is at least
    ``longest`` (the vocabulary's longest token in bytes, so no token can).

    ``A.chars_floor`` is the least number of characters any state of a counted rule
    allows, so a string a token begins holds at most that many within the token. A string
    begun before holds some already: its items in ``top``, or, inside a character's rule
    it called, its items in the set where that call began; the token may take each to any
    state ahead of it (``A.state_chars``' second half: the least limit there)."""
    chars = A.state_chars
    ahead = chars.shape[0] // 2  # where the least limits ahead of each state start
    margin = np.int64(A.chars_floor)
    items_s, items_o, set_starts, text = chart
    for j in range(set_starts[top], set_starts[top + 1]):
        o = items_o[j]
        if o >= top:
            continue
        s = items_s[j]
        if chars[s] != NOT_COUNTED:
            margin = _less_margin(text, o, top, longest, chars[ahead + s], margin)
            continue
        for q in range(set_starts[o], set_starts[o + 1]):
            c = items_s[q]
            if chars[c] != NOT_COUNTED:
                margin = _less_margin(text, items_o[q], top, longest, chars[ahead + c], margin)
    return NO_MARGIN if margin >= longest else margin


@njit(nogil=True, cache=True, inline="always", _nrt=False)
def _less_margin(text, o, top, longest, least, margin):
    """``margin``, or less: the characters left to a string begun at set ``o`` whose
    states ahead allow at least ``least``."""
    if top - o + longest <= least:  # a character is at least a byte: any token fits
        return margin
    return min(margin, least - span_chars(text, o, top))


# Tokens longer than a recheck's margin past which it scans the whole sorted vocabulary
# rather than sorting the ones it read off ``Vocab.sv_by_length`` (a heap sort of a few
# thousand costs about what the scan does).
_LONG_LIST_MAX = 2048


@njit(nogil=True, cache=True, _nrt=False)
def recheck_long_tokens(A, vocab, chart, top, cand, out, r, margin):
    """Scan on the real chart every token allowed in row ``r`` that is longer than
    ``margin`` bytes, and keep its bit only when the scan reads it whole: the classes do
    not count characters, and such a token may pass a counted rule's bound. Returns 0,
    OVERFLOW or CAND_FULL (nothing changed then).

    The tokens longer than ``margin`` are read off the front of ``vocab.sv_by_length``
    (longest first): a margin is usually the grammar's ``chars_floor``, a few dozen bytes,
    beyond which a vocabulary holds a handful of tokens, and a scan of the whole
    vocabulary at every mask cost 150 us on 129k tokens. Past _LONG_LIST_MAX of them the
    whole sorted vocabulary is scanned, in order. Either way the candidates are the same,
    in ascending order."""
    sv_ids = vocab.sv_ids
    sv_offsets = vocab.sv_offsets
    by_length = vocab.sv_by_length
    n_long = 0
    while n_long < by_length.shape[0] and n_long <= _LONG_LIST_MAX:
        idx = by_length[n_long]
        if sv_offsets[idx + 1] - sv_offsets[idx] <= margin:
            break
        n_long += 1
    k = 0
    if n_long <= _LONG_LIST_MAX:
        for q in range(n_long):
            idx = by_length[q]
            if _test_bit(out, r, sv_ids[idx]):
                k += 1
        if k > cand.shape[0]:
            return CAND_FULL
        k = 0
        for q in range(n_long):
            idx = by_length[q]
            if _test_bit(out, r, sv_ids[idx]):
                cand[k] = idx
                k += 1
        k = _sort_unique(cand, np.int64(k))  # (distinct already) ascending, as below
        for q in range(k):
            t = sv_ids[cand[q]]
            out[r, t >> 5] &= ~(np.int32(1) << np.int32(t & 31))
        return check_candidates(A, vocab, chart, top, cand, np.int64(k), out, r)  # one variant
    for idx in range(sv_ids.shape[0]):
        if sv_offsets[idx + 1] - sv_offsets[idx] > margin and _test_bit(out, r, sv_ids[idx]):
            k += 1
    if k > cand.shape[0]:
        return CAND_FULL
    k = 0
    for idx in range(sv_ids.shape[0]):  # ascending: the sorted order check_candidates needs
        t = sv_ids[idx]
        if sv_offsets[idx + 1] - sv_offsets[idx] > margin and _test_bit(out, r, t):
            cand[k] = idx
            k += 1
            out[r, t >> 5] &= ~(np.int32(1) << np.int32(t & 31))
    return check_candidates(A, vocab, chart, top, cand, np.int64(k), out, r)  # one variant


@njit(nogil=True, cache=True, _nrt=False)
def _sort_unique(a, n):
    """Sort ``a[:n]`` in place (insertion sort for short runs, heap sort otherwise) and
    drop duplicates; returns the new length. Allocation-free."""
    if n < 32:
        for i in range(1, n):
            x = a[i]
            j = i - 1
            while j >= 0 and a[j] > x:
                a[j + 1] = a[j]
                j -= 1
            a[j + 1] = x
    else:
        for start in range(n // 2 - 1, -1, -1):
            _sift_down(a, start, n)
        for end in range(n - 1, 0, -1):
            a[0], a[end] = a[end], a[0]
            _sift_down(a, np.int64(0), end)
    k = 0
    for i in range(n):
        if k == 0 or a[i] != a[k - 1]:
            a[k] = a[i]
            k += 1
    return k


@njit(nogil=True, cache=True, _nrt=False)
def _sift_down(a, start, end):
    root = start
    while True:
        child = 2 * root + 1
        if child >= end:
            return
        if child + 1 < end and a[child] < a[child + 1]:
            child += 1
        if a[root] >= a[child]:
            return
        a[root], a[child] = a[child], a[root]
        root = child


# memo_meta[0]: items in the memo key (-1: empty); memo_meta[1]: the floor - every chart set
# at or below it is unchanged since the memo was stored (rollback lowers it).
@njit(nogil=True, cache=True, inline="always", _nrt=False)
def memo_lookup(chart, top, S):
    """Whether the memo row of ``S`` is the mask of set ``top``.

    The key is the top set's items, with origins equal to the top written as -1; any other
    origin must be at or below the floor so that the sets it reaches are the same."""
    items_s, items_o, set_starts, _ = chart
    memo_key = S.memo_key
    memo_meta = S.memo_meta
    lo = set_starts[top]
    n = set_starts[top + 1] - lo
    if memo_meta[0] != n:
        return False
    floor = memo_meta[1]
    for q in range(n):
        if items_s[lo + q] != memo_key[0, q]:
            return False
        o = items_o[lo + q]
        mo = memo_key[1, q]
        if mo == -1:
            if o != top:
                return False
        elif o != mo or mo > floor:
            return False
    return True


@njit(nogil=True, cache=True, inline="always", _nrt=False)
def memo_store(chart, top, S, out, r, copy_row):
    """Remember row ``r`` of ``out`` as the mask of set ``top`` (skipped if the set is too
    large for the key); without ``copy_row`` the row is not copied into ``memo_row`` (a
    traversal's fill: it keeps the row in ``out`` meanwhile)."""
    items_s, items_o, set_starts, _ = chart
    memo_key = S.memo_key
    memo_meta = S.memo_meta
    memo_row = S.memo_row
    lo = set_starts[top]
    n = set_starts[top + 1] - lo
    if n > memo_key.shape[1]:
        memo_meta[0] = -1
        return
    for q in range(n):
        memo_key[0, q] = items_s[lo + q]
        o = items_o[lo + q]
        memo_key[1, q] = -1 if o == top else o
    if copy_row:
        for w in range(memo_row.shape[0]):
            memo_row[w] = out[r, w]
    memo_meta[0] = n
    memo_meta[1] = top


@njit(nogil=True, cache=True, _nrt=False)
def check_candidates(A, vocab, chart, top, cand, n, out, r):
    """Scan each candidate ``cand[:n]`` (sorted-vocabulary indices, ascending) on the real
    chart and set its bit in row ``r`` when all of its bytes are read (token ids are ORed
    in later). Returns 0 or OVERFLOW."""
    sv_ids = vocab.sv_ids
    sv_offsets = vocab.sv_offsets
    sv_data = vocab.sv_data
    if n == 0:
        return 0
    max_len = 0
    for q in range(n):
        ln = sv_offsets[cand[q] + 1] - sv_offsets[cand[q]]
        if ln > max_len:
            max_len = ln
    if top + 2 + max_len >= chart.set_starts.shape[0]:
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
            st = scan_byte(A, chart, top + depth, sv_data[lo + depth])
            if st == REJECT:
                fail_at = depth
                break
            if st == OVERFLOW:
                return OVERFLOW
            depth += 1
        q += 1
        if fail_at < 0:
            _set_bit(out, r, sv_ids[idx])
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
