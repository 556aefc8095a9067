"""Earley recognition over the flat automaton, one byte at a time.

The chart is three flat arrays: ``items_s`` / ``items_o`` hold the automaton state and the
origin set of each item, and ``set_starts[i] .. set_starts[i + 1]`` delimits Earley set
``i`` (set ``i`` is reached after ``i`` bytes). Sets are only ever appended past the
current top, so a failed scan leaves the chart exactly as it was and rollback is a matter
of forgetting sets. Nullable calls use the Aycock-Horspool rule (predicting a nullable
rule also steps over the call), so no completion ever targets the set being built.

Kernels take the unpacked automaton ``A`` (an ``_layout.AutomatonArrays``) and the chart
as one ``_layout.Chart`` bundle.

Unique rules (``Rule.unique``, JSON Schema's ``uniqueItems`` over strings): a final state
of such a rule is marked 2 in ``state_final``. A completion of the rule advances a caller
only when its text, decoded as a JSON string, differs from the text of every earlier
completion called by the same occurrence of the caller's rule (the same rule begun in the
same set); a scan that would complete it for no caller adds nothing. The chart keeps the
bytes it read (``Chart.text``) for this; a classification walk's scratch chart has none, and
marks a token it would accept through such a completion UNCERTAIN instead
(``kernels._classify``). The checks are calls of their own, not inlined: every scan site
of every kernel inlines the Earley step, and inlined they doubled a cold kernel compile.

Counted rules (``Rule.max_string_chars``, JSON Schema's ``maxLength`` beside a pattern or a
format) read the content of one JSON string and call only rules that read one character.
``A.state_chars[t]`` is the most characters such a rule may have read when an item enters
state ``t``: the bound less the fewest characters any way on from ``t`` still needs. An
item past it is left out, and a call is not predicted unless one more character fits the
state it returns to, so every item kept can still end within the bound, and a scan that
keeps none is rejected.
The count reads the chart's text from the item's origin (``_json_chars``); a
classification walk's scratch chart has no text and ignores the bounds: its classes hold
a superset, which the mask narrows near a bound (``kernels._mask``).

Every function returns a negative status instead of raising: ``OVERFLOW`` when the caller
must grow the arrays and retry, ``REJECT`` when the input does not match.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ._json_chars import BOUNDARY, char_step, json_chars
from ._layout import (
    NOT_COUNTED,
    OVERFLOW,
    PACK_CHARS_FLOOR,
    PACK_N_CLASSES,
    PACK_OFFSETS,
    PACK_ROOT_RULE,
    PACK_UNIQUE,
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
def _add_step(A, chart, lo, n, t, o, pos):
    """``add_item`` of ``(t, o)`` to set ``pos`` (starting at ``lo``) of ``chart``, an item
    reached by a byte or a completed call; left out when ``t`` completes a unique rule that
    no caller may take (each has read the same text before), or when ``t``'s counted rule
    has read more characters than it may hold there: the text is a dead end."""
    if A.unique and A.state_final[t] == 2 and _refused(A, chart, t, o, np.int64(pos)):
        return n
    # (a character is at least a byte: only a span longer than the bound is counted)
    counted = A.state_chars.shape[0] > 0 and pos - o > A.state_chars[t]
    if (
        counted
        and chart.text.shape[0] > 0
        and _over_bound(chart.text, np.int64(o), np.int64(pos), np.int64(A.state_chars[t]))
    ):  # (int64 arguments: one specialization of _over_bound, not one per int type)
        return n
    return add_item(chart.items_s, chart.items_o, lo, n, t, o)


@njit(nogil=True, cache=True, inline="always", _nrt=False)
def _complete(A, chart, lo, n, callers_lo, callers_hi, r, pos):
    """Complete rule ``r``: add to set ``pos`` (starting at ``lo``, ending at ``n``) of
    ``chart`` every item of ``items[callers_lo:callers_hi]`` that calls ``r``, stepped over
    the call.

    Returns the new end of the set, or OVERFLOW.
    """
    items_s, items_o, _, _ = chart
    for j in range(callers_lo, callers_hi):
        s = items_s[j]
        for e in range(A.ref_ptr[s], A.ref_ptr[s + 1]):
            if A.ref_rule[e] == r:
                n = _add_step(A, chart, lo, n, A.ref_target[e], items_o[j], pos)
                if n < 0:
                    return n
    return n


# out of line: only grammars with unique or counted rules call it, and its byte machine
# (char_step) inlined into every scan site cost ~4 s CPU of a cold start
@njit(nogil=True, cache=True, _nrt=False)
def text_word(text, pos, b):
    """The word of ``Chart.text`` for byte ``b`` read after set ``pos``: ``b`` in the low
    8 bits, above them the running count of the text up to set ``pos + 1`` (see
    ``span_chars``)."""
    run = text[pos - 1] >> 8 if pos > 0 else np.int64(0)
    x = char_step(run & 31, b)
    if x < 0:  # no string content reads it (JSON outside strings never does): restart
        x = 2 * BOUNDARY
    return (((run >> 5) + (x & 1)) << 13) | ((x >> 1) << 8) | b


@njit(nogil=True, cache=True, inline="always", _nrt=False)
def span_chars(text, o, pos):
    """The characters complete in the JSON string content read from set ``o`` to set
    ``pos``. ``text[p] >> 8`` holds the running count of the whole text up to set
    ``p + 1`` (``32 * characters + pending``, ``kernels._json_chars``): where the run is at
    a character boundary at ``o`` (always, after the opening quote of JSON text), the
    count is a difference; elsewhere the span is counted byte by byte."""
    if pos <= o:
        return 0
    start = text[o - 1] >> 8 if o > 0 else np.int64(0)
    if start & 31 == BOUNDARY:
        return (text[pos - 1] >> 13) - (start >> 5)
    return json_chars(text, o, pos)


@njit(nogil=True, cache=True, _nrt=False)  # out of line: every scan site inlines its caller
def _over_bound(text, o, pos, most):
    """Whether the string content read from set ``o`` to set ``pos`` holds more than
    ``most`` characters."""
    return span_chars(text, o, pos) > most


@njit(nogil=True, cache=True, inline="always", _nrt=False)
def _hex4(text, i):
    """The value of the four hex digits at ``text[i:i + 4]``."""
    v = 0
    for q in range(i, i + 4):
        c = np.int64(text[q] & 0xFF)
        v = v * 16 + (c - 48 if c <= 57 else (c | 32) - 87)
    return v


@njit(nogil=True, cache=True, _nrt=False)  # out of line: inlined twice, it doubles a compile
def _json_char(text, i, hi):
    """The code point of the JSON string character at ``text[i]`` (``i < hi``) and where
    the next one starts: escapes decoded, a surrogate pair of ``\\u`` escapes read as one
    character. Never reads at or past ``hi`` (a rule body that is no JSON string, from a
    hand-written grammar, compares as whatever its bytes decode to)."""
    b = np.int64(text[i] & 0xFF)
    if b == 92 and i + 1 < hi:  # a backslash
        e = np.int64(text[i + 1] & 0xFF)
        if e == 117 and i + 6 <= hi:  # \uXXXX
            cp = _hex4(text, i + 2)
            i += 6
            if (
                0xD800 <= cp < 0xDC00
                and i + 6 <= hi
                and text[i] & 0xFF == 92
                and text[i + 1] & 0xFF == 117
            ):
                low = _hex4(text, i + 2)
                if 0xDC00 <= low < 0xE000:
                    return 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00), i + 6
            return cp, i
        if e == 98:
            return 8, i + 2
        if e == 102:
            return 12, i + 2
        if e == 110:
            return 10, i + 2
        if e == 114:
            return 13, i + 2
        if e == 116:
            return 9, i + 2
        return e, i + 2  # \" \\ \/
    n = 1 if b < 0xC0 else (2 if b < 0xE0 else (3 if b < 0xF0 else 4))
    if n == 1 or i + n > hi:
        return b, i + 1
    cp = b & (0xFF >> (n + 1))
    for q in range(i + 1, i + n):
        cp = (cp << 6) | (text[q] & 0x3F)
    return cp, i + n


@njit(nogil=True, cache=True, inline="always", _nrt=False)
def _same_string(text, a, a_end, b, b_end):
    """Whether the JSON strings ``text[a:a_end]`` and ``text[b:b_end]`` decode to the same
    characters."""
    while a < a_end and b < b_end:
        x = text[a] & 0xFF
        if x == text[b] & 0xFF and x < 0x80 and x != 92:
            a += 1
            b += 1
            continue
        cx, a = _json_char(text, a, a_end)
        cy, b = _json_char(text, b, b_end)
        if cx != cy:
            return False
    return a == a_end and b == b_end


@njit(nogil=True, cache=True, inline="always", _nrt=False)
def _calls(A, s, r):
    """Whether state ``s`` calls rule ``r``."""
    for e in range(A.ref_ptr[s], A.ref_ptr[s + 1]):  # noqa: SIM110 - numba: no generators
        if A.ref_rule[e] == r:
            return True
    return False


@njit(nogil=True, cache=True, _nrt=False)
def repeats_sibling(A, chart, caller_rule, a, r, k, pos):
    """Whether the completion of unique rule ``r`` over sets ``k .. pos`` of ``chart``
    reads the same JSON string as an earlier completion of ``r`` called by the occurrence
    of ``caller_rule`` begun in set ``a``: one whose call an item ``(s, a)`` of that rule
    made in a set ``o`` (``a < o < k``) and which completed before set ``k``. A unique rule
    reads one JSON string, so each call completes at one set at most."""
    items_s, items_o, set_starts, text = chart
    for o in range(a + 1, k):
        called = False
        for j in range(set_starts[o], set_starts[o + 1]):
            s = items_s[j]
            if items_o[j] == a and A.state_rule[s] == caller_rule and _calls(A, s, r):
                called = True
                break
        if not called:
            continue
        for p in range(o + 2, k):
            done = False
            for j in range(set_starts[p], set_starts[p + 1]):
                f = items_s[j]
                if items_o[j] == o and A.state_final[f] == 2 and A.state_rule[f] == r:
                    done = True
                    break
            if done:
                if _same_string(text, o, p, k, pos):
                    return True
                break
    return False


@njit(nogil=True, cache=True, _nrt=False)  # out of line: every scan site inlines its caller
def _refused(A, chart, t, k, pos):
    """Whether a step to ``t``, a final state of a unique rule ``r``, over sets ``k ..
    pos`` of ``chart`` is left out: the chart keeps its text and no item of set ``k``
    that calls ``r`` may take the completion (each one's occurrence has an earlier
    completion with the same text)."""
    items_s, items_o, set_starts, text = chart
    if text.shape[0] == 0:
        return False
    r = np.int64(A.state_rule[t])  # int64 as _complete_unique's: one repeats_sibling
    k = np.int64(k)
    for j in range(set_starts[k], set_starts[k + 1]):
        s = items_s[j]
        if _calls(A, s, r) and not repeats_sibling(
            A, chart, A.state_rule[s], items_o[j], r, k, pos
        ):
            return False
    return True


@njit(nogil=True, cache=True, _nrt=False)  # out of line: every scan site inlines its caller
def _complete_unique(A, chart, lo, n, k, pos, r):
    """``_complete`` of unique rule ``r`` over sets ``k .. pos``: each caller steps over
    the call unless its occurrence read the same text in an earlier call (every caller,
    when the chart keeps no text)."""
    items_s, items_o, set_starts, text = chart
    if text.shape[0] == 0:
        return _complete(A, chart, lo, n, set_starts[k], set_starts[k + 1], r, pos)
    for j in range(set_starts[k], set_starts[k + 1]):
        s = items_s[j]
        if not _calls(A, s, r):
            continue
        if repeats_sibling(A, chart, A.state_rule[s], items_o[j], r, k, pos):
            continue
        for e in range(A.ref_ptr[s], A.ref_ptr[s + 1]):
            if A.ref_rule[e] == r:
                n = _add_step(A, chart, lo, n, A.ref_target[e], items_o[j], pos)
                if n < 0:
                    return n
    return n


@njit(nogil=True, cache=True, inline="always", _nrt=False)
def _call_fits(A, chart, s, o, pos, t):
    """Whether item ``(s, o)`` of set ``pos`` may call a rule that returns to state ``t``:
    always, but in a counted rule, whose calls read one character each, where one more
    character must fit ``t``'s limit (else its caller could not take it back: the call's
    items would be a dead end)."""
    if A.state_chars.shape[0] == 0 or A.state_chars[s] == NOT_COUNTED:
        return True
    most = A.state_chars[t] - 1
    return (
        pos - o <= most
        or chart.text.shape[0] == 0
        or not _over_bound(chart.text, np.int64(o), np.int64(pos), np.int64(most))
    )


@njit(nogil=True, cache=True, inline="always", _nrt=False)
def closure(A, chart, pos, lo, n):
    """Predict and complete the items of set ``pos`` (``items[lo:n]``) of ``chart`` to a
    fixpoint, on the unpacked automaton ``A``.

    Returns the new end of the set, or OVERFLOW.
    """
    items_s, items_o, set_starts, _ = chart
    j = lo
    while j < n:
        s = items_s[j]
        k = items_o[j]
        for e in range(A.ref_ptr[s], A.ref_ptr[s + 1]):
            r = A.ref_rule[e]
            if not _call_fits(A, chart, s, k, pos, A.ref_target[e]):
                continue
            n = add_item(items_s, items_o, lo, n, A.rule_start[r], pos)
            if n < 0:
                return n
            if A.rule_nullable[r]:
                n = _add_step(A, chart, lo, n, A.ref_target[e], k, pos)
                if n < 0:
                    return n
        if A.state_final[s] and k < pos:
            r = A.state_rule[s]
            if A.unique and A.state_final[s] == 2:
                n = _complete_unique(
                    A, chart, np.int64(lo), np.int64(n), np.int64(k), np.int64(pos), np.int64(r)
                )
            else:
                n = _complete(A, chart, lo, n, set_starts[k], set_starts[k + 1], r, pos)
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
    items_s, items_o, set_starts, text = chart
    lo = set_starts[pos]
    hi = set_starts[pos + 1]
    c = A.byte_class[b]
    n = hi
    if (A.unique or A.state_chars.shape[0] > 0) and text.shape[0] > 0:  # their rules read it
        text[pos] = text_word(text, np.int64(pos), np.int64(b))  # int64: one specialization
    for j in range(lo, hi):
        t = A.trans[items_s[j] * A.n_classes + c]
        if t >= 0:
            n = _add_step(A, chart, hi, n, t, items_o[j], pos + 1)
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


@njit(nogil=True, cache=True, _nrt=False)  # out of line: only token-id elements need it
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
            n = _complete(A, chart, lo, n, t_lo, t_hi, r, pos)  # its callers in set top
            if n < 0:
                return n
    if n == n_old:  # no token rule read it, or the bytes' set held every completion
        return new_top if new_top >= 0 else REJECT
    if new_top < 0:
        for p in range(top + 2, pos + 1):  # the bytes inside the token: empty sets
            set_starts[p] = lo
        text = chart.text
        if (A.unique or A.state_chars.shape[0] > 0) and text.shape[0] > 0:
            for p in range(top, pos):  # no bytes read there: the running count stands
                text[p] = text[top - 1] & ~0xFF if top > 0 else 0
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
    items_s, items_o, set_starts, _ = chart
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
    items_s, items_o, set_starts, _ = chart
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
        ab[PACK_UNIQUE],
        ab[ab[o + 10] : ab[o + 11]],
        ab[PACK_CHARS_FLOOR],
    )


@njit(nogil=True, cache=True, _nrt=False)
def accept_bytes(ab, items_s, items_o, set_starts, text, top, data, lo, hi):
    """``scan_bytes`` on a packed automaton: the matcher's accept entry point."""
    return scan_bytes(unpack(ab), Chart(items_s, items_o, set_starts, text), top, data, lo, hi)


@njit(nogil=True, cache=True, _nrt=False)
def start_chart(ab, items_s, items_o, set_starts, text):
    """``init_chart`` on a packed automaton for its root rule."""
    return init_chart(unpack(ab), Chart(items_s, items_o, set_starts, text), ab[PACK_ROOT_RULE])


@njit(nogil=True, cache=True, _nrt=False)
def chart_can_end(ab, items_s, items_o, set_starts, text, top):
    """``can_end`` on a packed automaton for its root rule."""
    return can_end(unpack(ab), Chart(items_s, items_o, set_starts, text), top, ab[PACK_ROOT_RULE])


def new_chart(item_capacity: int = 256, set_capacity: int = 64):
    """Allocate empty chart arrays (``Chart``'s: items, sets and text)."""
    return (
        np.zeros(item_capacity, dtype=np.int32),
        np.zeros(item_capacity, dtype=np.int32),
        np.zeros(set_capacity, dtype=np.int32),
        np.zeros(set_capacity, dtype=np.int64),
    )
