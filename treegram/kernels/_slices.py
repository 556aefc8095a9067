"""Vocabulary slices: token sets that a whole family of states accepts, decided once.

A state inside an unconstrained JSON string accepts every token made of string characters
(about 127k of DeepSeek-V4's 129k tokens); walking the whole trie to find that out costs
milliseconds, and every string property of every schema has such states. A *slice* is a
small byte DFA (here: well-formed UTF-8 text without ``"``, ``\\`` and control characters,
possibly cut inside a character) with the set of tokens it reads without dying, computed
once per vocabulary. When a state *contains* the slice — from it, every byte sequence the
slice DFA reads is also read by the state's own rule DFA — every slice token is ACCEPTED
without a walk, and only the few other tokens (their own, much smaller trie) are walked.

Containment is checked by exploring pairs (slice state, automaton state) from (start,
state): each byte the slice DFA reads from the first must be read from the second or from a
rule it calls. Such a path goes deeper into calls but never completes the state's rule, so
a slice token is read inside the current call of the rule: ACCEPTED by definition, whatever
the callers. (The check is sufficient, not necessary: a state it misses is walked in full.)
"""

from __future__ import annotations

import numpy as np
from numba import njit

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
    """bool [n]: which sorted tokens the slice DFA reads from state 0 without dying."""
    n = offsets.shape[0] - 1
    member = np.zeros(n, dtype=np.bool_)
    for i in range(n):
        q = 0
        for p in range(offsets[i], offsets[i + 1]):
            q = dfa[q, data[p]]
            if q < 0:
                break
        member[i] = q >= 0
    return member


_MAX_CLOSURE = 64  # configurations in one zero-byte closure
_MAX_FRAMES = 256  # distinct return frames


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


@njit(nogil=True, cache=True)
def slice_contained(dfa, rule_start, rule_nullable, state_final, byte_class, n_classes, trans,
                    ref_ptr, ref_rule, ref_target, state, cap, seen):
    """Whether the walk seeded at ``state`` accepts every token of the slice.

    Explores configurations (slice state, automaton state, return frames) from
    (0, ``state``, none): for every byte the slice DFA reads, some configuration of the
    zero-byte closure (calls into rules, steps over nullable calls, returns from finished
    callees) must read it. A path never returns past the seed's own rule, so every slice
    token is read inside the current call of that rule: ACCEPTED by definition. A call whose
    return state is final and has nothing else to do pushes no frame (a tail call), so
    right-recursive rules stay finite.

    Parameters
    ----------
    dfa : int16 [n_q, 256]
        The slice DFA.
    state : int
        Automaton state.
    cap : int
        Give up (False) after this many configurations.
    seen : int32 [n_states]
        Scratch, all zero; returned all zero.
    """
    cfg_q = np.empty(cap, dtype=np.int64)
    cfg_s = np.empty(cap, dtype=np.int64)
    cfg_f = np.empty(cap, dtype=np.int64)
    cfg_next = np.empty(cap, dtype=np.int64)  # configurations with the same state, chained
    frame_target = np.empty(_MAX_FRAMES, dtype=np.int64)
    frame_parent = np.empty(_MAX_FRAMES, dtype=np.int64)
    cl_s = np.empty(_MAX_CLOSURE, dtype=np.int64)
    cl_f = np.empty(_MAX_CLOSURE, dtype=np.int64)
    stack = np.empty(cap, dtype=np.int64)
    n_frames = 0
    cfg_q[0] = 0
    cfg_s[0] = state
    cfg_f[0] = -1
    cfg_next[0] = -1
    seen[state] = 1  # 1 + first configuration of the state
    n_cfg = 1
    stack[0] = 0
    top = 1
    ok = True
    while top > 0 and ok:
        top -= 1
        c = stack[top]
        q = cfg_q[c]
        # the zero-byte closure of (state, frame)
        cl_s[0] = cfg_s[c]
        cl_f[0] = cfg_f[c]
        n_cl = 1
        i = 0
        while i < n_cl and ok:
            x = cl_s[i]
            fx = cl_f[i]
            i += 1
            for e in range(ref_ptr[x], ref_ptr[x + 1]):
                r = ref_rule[e]
                t = ref_target[e]
                tail = (state_final[t] and ref_ptr[t] == ref_ptr[t + 1]
                        and trans[t * n_classes + byte_class[0]] < 0)
                if tail:
                    for b in range(1, 256):
                        if trans[t * n_classes + byte_class[b]] >= 0:
                            tail = False
                            break
                if tail:
                    fr = fx
                else:
                    fr, n_frames = _frame(frame_target, frame_parent, n_frames, t, fx)
                    if fr == -2:
                        ok = False
                        break
                for ns, nf in ((np.int64(rule_start[r]), fr),
                               (np.int64(t) if rule_nullable[r] else np.int64(-1), fx)):
                    if ns < 0:
                        continue
                    new = True
                    for j in range(n_cl):
                        if cl_s[j] == ns and cl_f[j] == nf:
                            new = False
                            break
                    if new:
                        if n_cl >= _MAX_CLOSURE:
                            ok = False
                            break
                        cl_s[n_cl] = ns
                        cl_f[n_cl] = nf
                        n_cl += 1
                if not ok:
                    break
            if ok and state_final[x] and fx >= 0:  # a callee finished: return
                ns = frame_target[fx]
                nf = frame_parent[fx]
                new = True
                for j in range(n_cl):
                    if cl_s[j] == ns and cl_f[j] == nf:
                        new = False
                        break
                if new:
                    if n_cl >= _MAX_CLOSURE:
                        ok = False
                    else:
                        cl_s[n_cl] = ns
                        cl_f[n_cl] = nf
                        n_cl += 1
        if not ok:
            break
        for b in range(256):
            q2 = dfa[q, b]
            if q2 < 0:
                continue
            t = -1
            ft = -1
            for j in range(n_cl):
                t = trans[cl_s[j] * n_classes + byte_class[b]]
                if t >= 0:
                    ft = cl_f[j]
                    break
            if t < 0:
                ok = False
                break
            known = False
            k = seen[t] - 1
            while k >= 0:
                if cfg_q[k] == q2 and cfg_f[k] == ft:
                    known = True
                    break
                k = cfg_next[k]
            if known:
                continue
            if n_cfg >= cap:
                ok = False
                break
            cfg_q[n_cfg] = q2
            cfg_s[n_cfg] = t
            cfg_f[n_cfg] = ft
            cfg_next[n_cfg] = seen[t] - 1
            seen[t] = n_cfg + 1
            stack[top] = n_cfg
            top += 1
            n_cfg += 1
    for k in range(n_cfg):
        seen[cfg_s[k]] = 0
    return ok


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
