"""Shared helpers of the matcher tests: one matcher's mask row and a comparable snapshot
of its state, sized from the matcher's own vocabulary."""

from __future__ import annotations

import numpy as np

from treegram import GrammarMatcher


def mask_of(m: GrammarMatcher) -> np.ndarray | None:
    """The current mask row, or None for a matcher that accepted a stop token."""
    if m.is_terminated():
        return None
    words = (m.compiled_grammar.tokenizer_info.vocab_size + 31) // 32
    row = np.zeros((1, words), dtype=np.int32)
    m.fill_next_token_bitmask(row)
    return row[0]


def snapshot(m: GrammarMatcher) -> tuple:
    """Steps, completion, termination and mask bytes: equal exactly for equal states."""
    mask = mask_of(m)
    return (
        m.num_accepted_steps(),
        m.is_completed(),
        m.is_terminated(),
        None if mask is None else mask.tobytes(),
    )
