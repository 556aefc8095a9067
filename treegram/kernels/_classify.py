"""Per-state token classification against the sorted vocabulary.

For an automaton state ``s`` of rule ``R``, every token is one of

* ACCEPTED: some path reads all of its bytes without leaving the current call of ``R``,
  so it is allowed whatever the parser stack below ``R`` holds;
* REJECTED: every path fails before the end of the token and none of them finishes
  ``R`` on the way;
* UNCERTAIN: otherwise - some path finishes ``R`` with bytes left over whose first byte
  may follow ``R`` (its LL(1) follow set), so the answer depends on the callers and is
  decided at mask time with the full chart.

The walk runs an Earley chart seeded with the single item ``(s, origin=0)`` where set 0
is an empty *virtual* set that stands for the unknown caller; an item with origin 0 that
reaches a final state therefore means "R has finished". Tokens are visited in sorted
order, so a shared prefix is scanned once, and a failed prefix decides every following
token that starts with it without touching them.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ._earley import OVERFLOW, REJECT, closure, scan_byte

REJECTED = 0
ACCEPTED = 1
UNCERTAIN = 2


@njit(nogil=True, cache=True)
def _rule_ends(state_final, items_s, items_o, set_starts, pos):
    for j in range(set_starts[pos], set_starts[pos + 1]):
        if items_o[j] == 0 and state_final[items_s[j]]:
            return True
    return False


@njit(nogil=True, cache=True)
def classify_state(
    rule_start, rule_nullable, state_rule, state_final, byte_class, n_classes, trans,
    ref_ptr, ref_rule, ref_target, state, follow, sv_offsets, sv_data, sv_lcp, items_s,
    items_o, set_starts, out,
):
    """Classify every sorted-vocabulary token for ``state``.

    Parameters
    ----------
    state : int
        Automaton state to classify.
    follow : uint8 [256]
        Follow set of the state's rule: bytes that may be read right after it ends.
    sv_offsets : int64 [n + 1]
        Byte offsets of the sorted tokens in ``sv_data``.
    sv_data : uint8 [total_bytes]
        Concatenated token bytes in sorted order.
    sv_lcp : int32 [n]
        Common prefix length of each token with its predecessor.
    items_s, items_o, set_starts : int32 arrays
        Scratch chart; ``set_starts`` needs ``max_token_len + 3`` entries.
    out : uint8 [n]
        Receives REJECTED / ACCEPTED / UNCERTAIN per sorted token.

    Returns
    -------
    int
        0, or OVERFLOW if the scratch chart is too small (retry with larger arrays).
    """
    n_tok = sv_lcp.shape[0]
    # set 0 is the virtual caller set (empty); set 1 holds the seed item.
    set_starts[0] = 0
    set_starts[1] = 0
    items_s[0] = state
    items_o[0] = 0
    n = closure(
        rule_start, rule_nullable, state_rule, state_final, ref_ptr, ref_rule, ref_target,
        items_s, items_o, set_starts, 1, 0, 1,
    )
    if n < 0:
        return n
    set_starts[2] = n
    # ends[d]: R can have finished after d bytes. d = 0 stays False: when R can finish
    # before any byte, Earley completion has already put the caller's items in the same set,
    # and their own classification covers every token read after R.
    ends = np.zeros(set_starts.shape[0], dtype=np.bool_)
    any_end = np.zeros(set_starts.shape[0], dtype=np.bool_)  # ends[1..d] has a True
    depth = 0
    i = 0
    while i < n_tok:
        lcp = sv_lcp[i]
        if lcp < depth:
            depth = lcp
        lo = sv_offsets[i]
        length = sv_offsets[i + 1] - lo
        fail_at = -1
        while depth < length:
            st = scan_byte(
                rule_start, rule_nullable, state_rule, state_final, byte_class, n_classes,
                trans, ref_ptr, ref_rule, ref_target, items_s, items_o, set_starts,
                1 + depth, sv_data[lo + depth],
            )
            if st == REJECT:
                fail_at = depth
                break
            if st == OVERFLOW:
                return OVERFLOW
            depth += 1
            ends[depth] = _rule_ends(state_final, items_s, items_o, set_starts, 1 + depth)
            any_end[depth] = any_end[depth - 1] or ends[depth]
        if fail_at < 0:
            out[i] = ACCEPTED
            i += 1
            continue
        verdict = REJECTED
        if any_end[fail_at]:
            # R ended after d bytes and the byte after it may follow R: ask the callers.
            for d in range(1, fail_at + 1):
                if ends[d] and follow[sv_data[lo + d]]:
                    verdict = UNCERTAIN
                    break
        out[i] = verdict
        i += 1
        # Every following token sharing the failed prefix fails the same way.
        while i < n_tok and sv_lcp[i] > fail_at:
            out[i] = verdict
            i += 1
    return 0


def classify(automaton_arrays: tuple, state: int, follow: np.ndarray, sorted_vocab
             ) -> np.ndarray:
    """Classify all sorted tokens for ``state``; grows the scratch chart as needed.

    Returns
    -------
    uint8 [n_sorted_tokens]
        REJECTED / ACCEPTED / UNCERTAIN per token in sorted order.
    """
    n_tok = sorted_vocab.lcp.shape[0]
    out = np.zeros(n_tok, dtype=np.uint8)
    cap = 1024
    set_starts = np.zeros(int(sorted_vocab.max_len) + 3, dtype=np.int32)
    while True:
        items_s = np.zeros(cap, dtype=np.int32)
        items_o = np.zeros(cap, dtype=np.int32)
        st = classify_state(
            *automaton_arrays, state, follow, sorted_vocab.offsets, sorted_vocab.data,
            sorted_vocab.lcp, items_s, items_o, set_starts, out,
        )
        if st != OVERFLOW:
            return out
        cap *= 4
