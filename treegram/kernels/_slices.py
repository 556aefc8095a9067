"""Vocabulary slices: token sets that a whole family of states accepts, decided once.

A state inside an unconstrained JSON string accepts every token made of string characters
(about 127k of DeepSeek-V4's 129k tokens); walking the whole trie to find that out costs
milliseconds, and every string property of every schema has such states. A *slice* is a
small byte DFA (here: well-formed UTF-8 text without ``"``, ``\\`` and control characters,
possibly cut inside a character) with the set of tokens it reads without dying, computed
once per vocabulary. When a state *contains* the slice — from it, every byte sequence the
slice DFA reads is also read by the state's own rule DFA — every slice token is ACCEPTED
without a walk, and only the few other tokens (their own, much smaller trie) are walked.

Containment is checked by a subset construction over the product of the slice DFA and the
grammar, up to the longest token (see ``slice_reach``). It also tells how many characters
of slice text a state accepts (a string with few characters left accepts only the slice's
short tokens) and whether that bound is exact; a state for which the check cannot conclude
within its limits is walked in full.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ._clock import monotonic_ns
from ._earley import unpack
from ._mask import _sort_unique

DEAD = -1


def json_string_slice_dfa() -> np.ndarray:
    """int16 [8, 256]: the DFA of JSON string contents, any prefix of well-formed UTF-8.

    State 0 is between characters; the others wait for continuation bytes (Unicode's
    well-formed byte sequences: no overlong forms, no surrogates, nothing past U+10FFFF).
    Every state is accepting; DEAD (-1) is the only rejection.
    """
    t = np.full((8, 256), DEAD, dtype=np.int16)
    cont = range(0x80, 0xC0)
    for b in [*range(0x20, 0x22), *range(0x23, 0x5C), *range(0x5D, 0x80)]:
        t[0, b] = 0
    t[0, 0xC2:0xE0] = 1
    t[0, 0xE1:0xED] = 2
    t[0, 0xEE:0xF0] = 2
    t[0, 0xE0] = 4
    t[0, 0xED] = 5
    t[0, 0xF1:0xF4] = 3
    t[0, 0xF0] = 6
    t[0, 0xF4] = 7
    for b in cont:
        t[1, b] = 0
        t[2, b] = 1
        t[3, b] = 2
    t[4, 0xA0:0xC0] = 1
    t[5, 0x80:0xA0] = 1
    t[6, 0x90:0xC0] = 2
    t[7, 0x80:0x90] = 2
    return t


@njit(nogil=True, cache=True)
def slice_members(dfa, offsets, data):
    """int32 [n]: for each sorted token, the number of characters (bytes read at slice
    state 0) if the slice DFA reads it from state 0 without dying, else -1."""
    n = offsets.shape[0] - 1
    leads = np.full(n, -1, dtype=np.int32)
    for i in range(n):
        q = 0
        count = 0
        for p in range(offsets[i], offsets[i + 1]):
            if q == 0:
                count += 1
            q = dfa[q, data[p]]
            if q < 0:
                break
        if q >= 0:
            leads[i] = count
    return leads


_MAX_CLOSURE = 256  # configurations in one zero-byte closure
_NO_FRAMES = np.zeros(0, dtype=np.int64)
_MAX_FRAMES = 1024  # distinct return frames (a key of many names makes hundreds)
_FRAME_SPAN = _MAX_FRAMES + 1  # a configuration key is state * _FRAME_SPAN + frame + 1


def restricted_slice_dfa(dfa: np.ndarray, excluded: np.ndarray) -> np.ndarray:
    """The slice DFA without the characters that start with a byte of ``excluded``
    (uint64 [4], bit ``b & 63`` of word ``b >> 6`` for byte ``b``): an ASCII character or
    the multi-byte characters of one lead byte."""
    out = dfa.copy()
    # the 256 bits in byte order (a loop over numpy scalars took 0.25 ms a build: a regex
    # string's mask built five, 1.2 ms)
    bits = np.unpackbits(excluded.astype("<u8").view(np.uint8), bitorder="little")
    out[0, bits.astype(np.bool_)] = DEAD
    return out


@njit(nogil=True, cache=True)
def bytes_off_loop(byte_class, n_classes, trans, state):
    """(uint64 [4], int): the bytes on which ``state`` does not move back to itself, as
    ``subtree_text_summary`` sets bits, and how many bytes it does loop on. Any text of
    its loop bytes is read from ``state`` staying in it, whatever else the state does."""
    excluded = np.zeros(4, dtype=np.uint64)
    n_loop = 0
    row = state * n_classes
    for b in range(256):
        if trans[row + byte_class[b]] == state:
            n_loop += 1
        else:
            excluded[b >> 6] |= np.uint64(1) << np.uint64(b & 63)
    return excluded, n_loop


@njit(nogil=True, cache=True, inline="always", _nrt=False)
def fill_loop_off(loop_off, x, byte_class, n_classes, trans):
    """Write row ``x`` of ``loop_off``: :func:`bytes_off_loop`'s bits of state ``x``, into
    the caller's table (the walks fill it on first need, without allocating)."""
    for w in range(4):
        loop_off[x, w] = 0
    row = x * n_classes
    for b in range(256):
        if trans[row + byte_class[b]] != x:
            loop_off[x, b >> 6] |= np.uint64(1) << np.uint64(b & 63)


@njit(nogil=True, cache=True, inline="always")
def loops_below(suffix_bits, k, loop_off, x):
    """Whether state ``x`` moves back to itself on every byte below trie node ``k``: no
    byte of the node's subtree (``suffix_bits[k]``, as ``subtree_suffix_bits`` sets them)
    is one of the state's off-loop bytes (``loop_off[x]``, as ``bytes_off_loop``)."""
    return (
        (suffix_bits[k, 0] & loop_off[x, 0]) == 0
        and (suffix_bits[k, 1] & loop_off[x, 1]) == 0
        and (suffix_bits[k, 2] & loop_off[x, 2]) == 0
        and (suffix_bits[k, 3] & loop_off[x, 3]) == 0
    )


@njit(nogil=True, cache=True)
def looping_leads(dfa, byte_class, n_classes, trans, ref_ptr, state):
    """bool [256]: the lead bytes of multi-byte slice characters that ``state`` reads back
    into itself, every character that starts with them (by its own transitions; a call
    on the way counts as not)."""
    out = np.zeros(256, dtype=np.bool_)
    stack_q = np.empty(256, dtype=np.int64)
    stack_x = np.empty(256, dtype=np.int64)
    for lead in range(0x80, 256):
        q1 = dfa[0, lead]
        if q1 <= 0:
            continue
        ok = True
        n = 1
        stack_q[0] = q1
        stack_x[0] = trans[state * n_classes + byte_class[lead]]
        while n > 0 and ok:
            n -= 1
            q, x = stack_q[n], stack_x[n]
            if x < 0 or ref_ptr[x + 1] > ref_ptr[x]:
                ok = False
            elif q == 0:
                ok = x == state
            else:
                prev = -1
                for b in range(0x80, 0xC0):
                    q2 = dfa[q, b]
                    if q2 < 0:
                        continue
                    x2 = trans[x * n_classes + byte_class[b]]
                    key = q2 * 1_000_003 + x2
                    if key == prev:  # the same step as the byte before
                        continue
                    prev = key
                    if n >= stack_q.shape[0]:
                        ok = False
                        break
                    stack_q[n] = q2
                    stack_x[n] = x2
                    n += 1
        out[lead] = ok
    return out


@njit(nogil=True, cache=True)
def subtree_text_summary(offsets, data, node_end, node_tok_lo, node_tok_hi):
    """uint64 [n_nodes, 4]: the bytes of the tokens below each trie node (bit ``b & 63`` of
    word ``b >> 6`` when some token of the subtree holds byte ``b``), for restricted
    slices: a subtree without an excluded byte is made of the restricted slice's text when
    it is made of slice text."""
    n_nodes = node_end.shape[0]
    bits = np.zeros((n_nodes, 4), dtype=np.uint64)
    for k in range(n_nodes - 1, -1, -1):  # children (later in preorder) first
        for p in range(node_tok_lo[k], node_tok_hi[k]):
            for j in range(offsets[p], offsets[p + 1]):
                b = data[j]
                bits[k, b >> 6] |= np.uint64(1) << np.uint64(b & 63)
        u = k + 1
        while u < node_end[k]:  # the children
            for w in range(4):
                bits[k, w] |= bits[u, w]
            u = node_end[u]
    return bits


@njit(nogil=True, cache=True)
def subtree_suffix_bits(node_byte, node_end):
    """uint64 [n_nodes, 4]: the bytes strictly below each trie node (of its descendants),
    bit ``b & 63`` of word ``b >> 6`` for byte ``b``: what a token of the subtree reads
    after the node's own prefix."""
    n_nodes = node_end.shape[0]
    bits = np.zeros((n_nodes, 4), dtype=np.uint64)
    for k in range(n_nodes - 1, -1, -1):  # children (later in preorder) first
        u = k + 1
        while u < node_end[k]:
            b = node_byte[u]
            bits[k, b >> 6] |= np.uint64(1) << np.uint64(b & 63)
            for w in range(4):
                bits[k, w] |= bits[u, w]
            u = node_end[u]
    return bits


@njit(nogil=True, cache=True)
def subtree_max_leads(leads, node_end, node_tok_lo, node_tok_hi):
    """int32 [n_nodes]: the most characters of a token below each trie node when every
    one of them is slice text (``leads >= 0``, see ``slice_members``), else -1."""
    n_nodes = node_end.shape[0]
    out = np.zeros(n_nodes, dtype=np.int32)
    for k in range(n_nodes - 1, -1, -1):
        for p in range(node_tok_lo[k], node_tok_hi[k]):
            if leads[p] < 0:
                out[k] = -1
            elif out[k] >= 0 and leads[p] > out[k]:
                out[k] = leads[p]
        u = k + 1
        while u < node_end[k]:
            if out[u] < 0:
                out[k] = -1
            elif out[k] >= 0 and out[u] > out[k]:
                out[k] = out[u]
            u = node_end[u]
    return out


@njit(nogil=True, cache=True, inline="always")
def _frame(frame_target, frame_parent, n_frames, target, parent):
    """Intern the frame (return to ``target``, then to frame ``parent``); returns
    (frame id, new frame count), or (-2, n_frames) when the table is full."""
    for f in range(n_frames):
        if frame_target[f] == target and frame_parent[f] == parent:
            return f, n_frames
    if n_frames >= frame_target.shape[0]:
        return -2, n_frames
    frame_target[n_frames] = target
    frame_parent[n_frames] = parent
    return n_frames, n_frames + 1


@njit(nogil=True, cache=True, inline="always")
def _add_key(keys, n, key):
    """Append ``key`` to ``keys[:n]`` unless present; returns the new count, -1 if full."""
    for j in range(n):
        if keys[j] == key:
            return n
    if n >= keys.shape[0]:
        return -1
    keys[n] = key
    return n + 1


@njit(nogil=True, cache=True)
def joint_byte_classes(dfa, byte_class):
    """int64 [n]: the first byte of each class of bytes that no slice state and no
    automaton byte class tells apart."""
    reps = np.empty(256, dtype=np.int64)
    n_reps = 0
    for b in range(256):
        fresh = True
        for k in range(n_reps):
            b2 = reps[k]
            if byte_class[b2] != byte_class[b]:
                continue
            same = True
            for q in range(dfa.shape[0]):
                if dfa[q, b2] != dfa[q, b]:
                    same = False
                    break
            if same:
                fresh = False
                break
        if fresh:
            reps[n_reps] = b
            n_reps += 1
    return reps[:n_reps].copy()


@njit(nogil=True, cache=True)
def _reads_every_lead(dfa, reps, A, state, chain_targets, top_targets):
    """False when the seed surely cannot read some first byte of a slice character: no
    state it reaches without reading (calls, nullable calls, its return states; an
    over-approximation) has a transition on it. True when it may (or the closure is too
    large to tell)."""
    # locals: with reference counting on, a field read in a loop may take a count
    rule_start = A.rule_start
    rule_nullable = A.rule_nullable
    byte_class = A.byte_class
    n_classes = A.n_classes
    trans = A.trans
    ref_ptr = A.ref_ptr
    ref_rule = A.ref_rule
    ref_target = A.ref_target
    seen = np.empty(_MAX_CLOSURE, dtype=np.int64)
    n = 1
    seen[0] = state
    for i in range(chain_targets.shape[0]):
        n = _add_key(seen, n, chain_targets[i])
    for i in range(top_targets.shape[0]):
        n = _add_key(seen, n, top_targets[i])
    i = 0
    while i < n:
        x = seen[i]
        i += 1
        for e in range(ref_ptr[x], ref_ptr[x + 1]):
            n = _add_key(seen, n, rule_start[ref_rule[e]])
            if n >= 0 and rule_nullable[ref_rule[e]]:
                n = _add_key(seen, n, ref_target[e])
            if n < 0:
                return True
    for k in range(reps.shape[0]):
        b = reps[k]
        if dfa[0, b] < 0:
            continue
        cls = byte_class[b]
        readable = False
        for j in range(n):
            if trans[seen[j] * n_classes + cls] >= 0:
                readable = True
                break
        if not readable:
            return False
    return True


@njit(nogil=True, cache=True)
def _grown_table(table, node_hash, n_nodes):
    """``slice_reach``'s node table at twice the size, nodes 1 .. n_nodes - 1 re-inserted."""
    out = np.zeros(2 * table.shape[0], dtype=np.int64)
    mask = out.shape[0] - 1
    for m in range(1, n_nodes):
        slot = np.int64(node_hash[m] & np.uint64(mask))
        while out[slot] != 0:
            slot = (slot + 1) & mask
        out[slot] = m + 1
    return out


@njit(nogil=True, cache=True)
def reads_string_text(dfa, reps, ab, state):
    """Whether ``state`` may read every first byte of a slice character without a context:
    it has a call (``_reads_every_lead`` decides it) or a transition on each such byte.
    Otherwise ``_reads_every_lead`` is False with no context, so ``slice_reach`` gives no
    reach and ``wide_near_rule_end`` is False: a check of the state's own row spares those
    kernels (and asks nothing of the rest of the automaton, so a grammar's first mask
    does not pay for a pass over all its states)."""
    A = unpack(ab)
    byte_class = A.byte_class
    n_classes = A.n_classes
    trans = A.trans
    ref_ptr = A.ref_ptr
    if ref_ptr[state + 1] > ref_ptr[state]:
        return True
    for k in range(reps.shape[0]):
        if dfa[0, reps[k]] >= 0 and trans[state * n_classes + byte_class[reps[k]]] < 0:
            return False
    return True


@njit(nogil=True, cache=True)
def wide_near_rule_end(dfa, reps, ab, state, max_len):
    """Whether ``state`` may read any first byte of a slice character and its rule may end
    after fewer than ``max_len`` bytes of slice text: a state inside a string body close to
    the end of its rule (a block of a length-bounded string), not one whose rule ends with
    the closing quote. Most tokens then run past the rule's end, so its class alone leaves
    them UNCERTAIN and its walk visits nearly the whole trie; the mask looks it up in its
    callers' context instead (``kernels._mask``).

    The distance is a lower bound (a call counts as reading nothing; a byte class counts as
    slice text when one of its bytes is), so the answer may be True for a state that
    cannot end that soon; that only costs a context lookup."""
    A = unpack(ab)
    # locals: with reference counting on, a field read in a loop may take a count
    state_final = A.state_final
    byte_class = A.byte_class
    n_classes = A.n_classes
    trans = A.trans
    ref_ptr = A.ref_ptr
    ref_target = A.ref_target
    if not _reads_every_lead(dfa, reps, A, state, _NO_FRAMES, _NO_FRAMES):
        return False
    # breadth first, one level per byte read; a call is followed to its return state at
    # no cost (it is put in the current level)
    in_slice = np.zeros(n_classes, dtype=np.bool_)  # classes with a byte of slice text
    for b in range(256):
        for q in range(dfa.shape[0]):
            if dfa[q, b] >= 0:
                in_slice[byte_class[b]] = True
                break
    n_states = state_final.shape[0]
    seen = np.zeros(n_states, dtype=np.bool_)
    queue = np.empty(n_states, dtype=np.int64)
    queue[0] = state
    seen[state] = True
    lo, hi = 0, 1
    for _ in range(max_len):
        end = hi
        i = lo
        while i < hi:
            x = queue[i]
            i += 1
            if state_final[x]:
                return True
            for e in range(ref_ptr[x], ref_ptr[x + 1]):
                t = ref_target[e]
                if not seen[t]:
                    seen[t] = True
                    # same level: insert before the next level's entries
                    queue[end] = queue[hi]
                    queue[hi] = t
                    hi += 1
                    end += 1
            for c in range(n_classes):
                t = trans[x * n_classes + c]
                if t >= 0 and in_slice[c] and not seen[t]:
                    seen[t] = True
                    queue[end] = t
                    end += 1
        if end == hi:
            return False
        lo, hi = hi, end
    return False


@njit(nogil=True, cache=True)
def _bytes_by_slice_state(dfa, reps):
    """(ptr int64 [n_q + 1], bytes int64): the bytes of ``reps`` that each slice state
    reads, ``bytes[ptr[q]:ptr[q + 1]]`` for state ``q``."""
    n_q = dfa.shape[0]
    ptr = np.zeros(n_q + 1, dtype=np.int64)
    out = np.empty(n_q * reps.shape[0], dtype=np.int64)
    for q in range(n_q):
        at = ptr[q]
        for k in range(reps.shape[0]):
            if dfa[q, reps[k]] >= 0:
                out[at] = reps[k]
                at += 1
        ptr[q + 1] = at
    return ptr, out


@njit(nogil=True, cache=True)
def slice_reach(
    dfa, reps, ab, state, chain_targets, top_targets, max_leads, min_inexact, cap, deadline, clock
):
    """How many characters of slice text the walk seeded at ``state`` surely accepts.

    A subset construction over the product of the slice DFA and the grammar: a node is a
    slice state with the set of configurations (automaton state, return frames) that some
    path may be in after reading the same bytes. Nodes are explored by the number of
    characters read (lead bytes: every byte read at slice state 0), from (0, {``state``}),
    up to ``max_leads``; each byte the slice DFA reads takes the closure of a node's set
    (calls into rules, steps over nullable calls, returns from finished callees) to its
    successors. A node met again later needs no second look: its first visit had read at
    most as many characters. A path never returns past the seed's own rule, so every slice
    text whose reads all succeed is read inside the current call of that rule: a slice token
    of at most ``reach`` characters is ACCEPTED by definition. A call whose return state is
    final and has nothing else to do pushes no frame (a tail call), so right recursion stays
    finite.

    Parameters
    ----------
    dfa : int16 [n_q, 256]
        The slice DFA (state 0 between characters).
    reps : int64 [n_reps]
        One byte of each class of bytes that neither the slice DFA nor the automaton tells
        apart (``joint_byte_classes``).
    ab : int32 array
        The packed automaton (``Automaton.packed``: one array to type per call, not ten).
    state : int
        Automaton state.
    chain_targets, top_targets : int64 [m], int64 [k]
        The seed's context (``kernels._classify``): the return states through the chain of
        tail callers (innermost first), then into each top-level caller. The seed then
        starts with that stack of return frames (once per top-level caller), and "the
        seed's rule" below means the top level's rules.
    max_leads : int
        Characters to look ahead (at least the longest token's).
    min_inexact : int
        The smallest reach worth knowing when it is not exact; the search stops as soon
        as the answer is known to be of no use.
    cap : int
        Give up after this many nodes.
    deadline : int
        Stop once the monotonic clock passes it (nanoseconds, checked every 64 nodes; 0:
        none); ``clock`` is the clock's int64 [2] scratch.

    Returns
    -------
    (int, bool)
        ``(reach, exact)``: every slice text of at most ``reach`` characters is read
        (``reach == max_leads``: all of them); ``exact`` when moreover no slice text of
        more characters is read and the seed's rule cannot end on the way, so a longer slice
        token is REJECTED. ``(0, False)`` when a limit was reached, ``(-1, False)`` at the
        deadline.
    """
    A = unpack(ab)
    # locals: with reference counting on, a field read in a loop may take a count
    rule_start = A.rule_start
    rule_nullable = A.rule_nullable
    state_final = A.state_final
    byte_class = A.byte_class
    n_classes = A.n_classes
    trans = A.trans
    ref_ptr = A.ref_ptr
    ref_rule = A.ref_rule
    ref_target = A.ref_target
    if not _reads_every_lead(dfa, reps, A, state, chain_targets, top_targets):
        return 0, False  # some one-character slice text fails: no reach (before allocating)
    node_q = np.empty(cap, dtype=np.int64)
    node_d = np.empty(cap, dtype=np.int64)
    node_off = np.empty(cap + 1, dtype=np.int64)
    node_hash = np.empty(cap, dtype=np.uint64)
    pool = np.empty(cap * 8, dtype=np.int64)
    # open addressing: node index + 1; starts small (most searches make few nodes) and
    # doubles at half load
    table = np.zeros(256, dtype=np.int64)
    cur = np.empty(cap, dtype=np.int64)  # nodes of the current character count, in order
    nxt = np.empty(cap, dtype=np.int64)  # nodes one character further
    frame_target = np.empty(_MAX_FRAMES, dtype=np.int64)
    frame_parent = np.empty(_MAX_FRAMES, dtype=np.int64)
    cl = np.empty(_MAX_CLOSURE, dtype=np.int64)
    succ = np.empty(_MAX_CLOSURE, dtype=np.int64)
    prev = np.empty(_MAX_CLOSURE, dtype=np.int64)
    cl_x = np.empty(_MAX_CLOSURE, dtype=np.int64)  # a closure's states, times n_classes
    cl_f = np.empty(_MAX_CLOSURE, dtype=np.int64)  # and their frames (+ 1)
    # the bytes each slice state reads: inside a character, only continuation bytes
    q_rep_ptr, q_reps = _bytes_by_slice_state(dfa, reps)
    n_frames = 0
    node_q[0] = 0
    node_d[0] = 0
    node_off[0] = 0
    n_seed = np.int64(0)  # not a literal: one specialization of _sort_unique
    for i in range(max(top_targets.shape[0], 1)):
        fr = -1
        if top_targets.shape[0] > 0:
            fr, n_frames = _frame(frame_target, frame_parent, n_frames, top_targets[i], -1)
        for j in range(chain_targets.shape[0] - 1, -1, -1):  # outermost first
            if fr == -2:
                break
            fr, n_frames = _frame(frame_target, frame_parent, n_frames, chain_targets[j], fr)
        if fr == -2:
            return 0, False
        n_seed = _add_key(pool, n_seed, np.int64(state) * _FRAME_SPAN + fr + 1)
    _sort_unique(pool, n_seed)
    node_off[1] = n_seed
    n_nodes = np.int64(1)  # not a literal: one specialization of _grown_table
    cur[0] = 0
    n_cur = 1
    fail_leads = max_leads + 1  # fewest characters of a slice text that is not read
    deepest = 0
    rule_ends = False  # the seed's rule can end after some bytes
    root_again = False
    root_ends = False
    longer = False
    ok = True
    while n_cur > 0 and ok:
        n_nxt = 0
        i_cur = 0
        while i_cur < n_cur and ok:
            c = cur[i_cur]
            i_cur += 1
            if deadline > 0 and (c & 63) == 0 and monotonic_ns(clock) > deadline:
                return -1, False
            if node_d[c] >= fail_leads:
                continue  # already beyond the reach: its existence is all that counts
            q = node_q[c]
            # the zero-byte closure of the node's configurations
            n_cl = 0
            for p in range(node_off[c], node_off[c + 1]):
                n_cl = _add_key(cl, n_cl, pool[p])
            i = 0
            while i < n_cl and ok:
                x = cl[i] // _FRAME_SPAN
                fx = cl[i] % _FRAME_SPAN - 1
                i += 1
                if fx < 0 and state_final[x]:
                    if c == 0:
                        root_ends = True
                    else:
                        rule_ends = True
                for e in range(ref_ptr[x], ref_ptr[x + 1]):
                    r = ref_rule[e]
                    t = ref_target[e]
                    tail = state_final[t] and ref_ptr[t] == ref_ptr[t + 1]
                    if tail:
                        for b in range(256):
                            if trans[t * n_classes + byte_class[b]] >= 0:
                                tail = False
                                break
                    fr = fx
                    if not tail:
                        fr, n_frames = _frame(frame_target, frame_parent, n_frames, t, fx)
                        if fr == -2:
                            ok = False
                            break
                    n_cl = _add_key(cl, n_cl, np.int64(rule_start[r]) * _FRAME_SPAN + fr + 1)
                    if n_cl >= 0 and rule_nullable[r]:
                        n_cl = _add_key(cl, n_cl, np.int64(t) * _FRAME_SPAN + fx + 1)
                    if n_cl < 0:
                        ok = False
                        break
                if ok and state_final[x] and fx >= 0:  # a callee finished: return
                    n_cl = _add_key(cl, n_cl, frame_target[fx] * _FRAME_SPAN + frame_parent[fx] + 1)
                    if n_cl < 0:
                        ok = False
            if not ok:
                break
            for j in range(n_cl):  # split the keys once, not once per byte
                cl_x[j] = cl[j] // _FRAME_SPAN * n_classes
                cl_f[j] = cl[j] % _FRAME_SPAN
            prev_q2 = -1  # the previous byte's successor (before sorting), often the same
            n_prev = -1
            for k in range(q_rep_ptr[q], q_rep_ptr[q + 1]):
                b = q_reps[k]
                q2 = dfa[q, b]
                d2 = node_d[c] + (1 if q == 0 else 0)
                if d2 > max_leads:
                    continue
                n_succ = np.int64(0)
                cls = byte_class[b]
                # one successor at most per configuration: no overflow; the sort below
                # drops duplicates
                for j in range(n_cl):
                    t = trans[cl_x[j] + cls]
                    if t >= 0:
                        succ[n_succ] = np.int64(t) * _FRAME_SPAN + cl_f[j]
                        n_succ += 1
                if q2 == prev_q2 and n_succ == n_prev:
                    same = True
                    for j in range(n_succ):
                        if prev[j] != succ[j]:
                            same = False
                            break
                    if same:
                        continue  # the same node as the previous byte's: already done
                prev_q2 = q2
                n_prev = n_succ
                for j in range(n_succ):
                    prev[j] = succ[j]
                if n_succ == 0:
                    fail_leads = min(fail_leads, max(d2, 1))
                    if fail_leads <= 1 or (deepest >= fail_leads and fail_leads <= min_inexact):
                        return 0, False  # no reach, or an inexact one too short to use
                    continue
                n_succ = _sort_unique(succ, n_succ)  # canonical order, then look it up
                h = np.uint64(q2) * np.uint64(0x9E3779B97F4A7C15)
                for j in range(n_succ):
                    h = (h ^ np.uint64(succ[j])) * np.uint64(0xBF58476D1CE4E5B9)
                    h ^= h >> np.uint64(29)
                slot = np.int64(h & np.uint64(table.shape[0] - 1))
                found = False
                while table[slot] != 0:
                    m = table[slot] - 1
                    size = node_off[m + 1] - node_off[m]
                    if node_hash[m] == h and node_q[m] == q2 and size == n_succ:
                        same = True
                        for j in range(n_succ):
                            if pool[node_off[m] + j] != succ[j]:
                                same = False
                                break
                        if same:
                            found = True
                            root_again = root_again or m == 0
                            deepest = max(deepest, d2)
                            # a longer path into a node seen before: what follows it is
                            # read after more characters too (a loop), so a longer slice
                            # text may be read (not exact)
                            longer = longer or d2 > node_d[m]
                            break
                    slot = (slot + 1) & (table.shape[0] - 1)
                if found:
                    continue
                if n_nodes >= cap or node_off[n_nodes] + n_succ > pool.shape[0]:
                    ok = False
                    break
                if 2 * n_nodes >= table.shape[0]:
                    table = _grown_table(table, node_hash, n_nodes)
                    slot = np.int64(h & np.uint64(table.shape[0] - 1))
                    while table[slot] != 0:
                        slot = (slot + 1) & (table.shape[0] - 1)
                node_q[n_nodes] = q2
                node_d[n_nodes] = d2
                deepest = max(deepest, d2)
                if deepest >= fail_leads and fail_leads <= min_inexact:
                    return 0, False
                node_hash[n_nodes] = h
                for j in range(n_succ):
                    pool[node_off[n_nodes] + j] = succ[j]
                node_off[n_nodes + 1] = node_off[n_nodes] + n_succ
                table[slot] = n_nodes + 1
                if d2 == node_d[c]:
                    cur[n_cur] = n_nodes
                    n_cur += 1
                else:
                    nxt[n_nxt] = n_nodes
                    n_nxt += 1
                n_nodes += 1
        for k in range(n_nxt):
            cur[k] = nxt[k]
        n_cur = n_nxt
    if not ok:
        return 0, False
    reach = min(fail_leads - 1, max_leads)
    ends = rule_ends or (root_again and root_ends)
    exact = reach == max_leads or (deepest <= reach and not ends and not longer)
    return reach, exact


@njit(nogil=True, cache=True)
def positions_to_bitset(token_ids, positions, n_words, base):
    """int32 [n_words]: ``base`` (or zeros when empty) with the bits of
    ``token_ids[positions]`` set."""
    out = np.zeros(n_words, dtype=np.int32)
    if base.shape[0] == n_words:
        for w in range(n_words):
            out[w] = base[w]
    for q in range(positions.shape[0]):
        t = token_ids[positions[q]]
        out[t >> 5] |= np.int32(1) << np.int32(t & 31)
    return out


@njit(nogil=True, cache=True)
def bitset_positions(bitset):
    """int32 [n]: the indices of the set bits of ``bitset`` (int32 words, bit ``i & 31``
    of word ``i >> 5``), increasing."""
    n = 0
    for w in range(bitset.shape[0]):
        v = np.uint32(bitset[w])
        while v:
            v &= v - np.uint32(1)
            n += 1
    out = np.empty(n, dtype=np.int32)
    n = 0
    for w in range(bitset.shape[0]):
        v = np.uint32(bitset[w])
        b = 0
        while v:
            if v & np.uint32(1):
                out[n] = 32 * w + b
                n += 1
            v >>= np.uint32(1)
            b += 1
    return out
