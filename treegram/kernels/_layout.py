"""Kernel status codes and the orders of the arrays kernels exchange, named once.

Every constant here is a module-level int or tuple of ints: numba freezes globals into
compiled code, so kernels read them as constants.

Status codes
------------
A kernel returns a status instead of raising. ``0`` or a positive count means done;
a negative status asks the (Python) caller to act and call again, with the matcher state
exactly as before the call:

========================  =====  ==========================================================
``REJECT``                 -1     the input is not in the language (nothing changed)
``OVERFLOW``               -2     the chart is full: grow it
``OVER_BUDGET``            -3     classification scanned its budget of trie nodes
``HIST_FULL``              -4     the rollback history is full: grow it
``TIMEOUT``                -5     the deadline passed
``BUFS_FULL``              -6     the ``bufs`` scratch is smaller than the top set: grow it
``CAND_FULL``              -7     the candidate scratch is too small: grow it
``NEED_CLASSIFY - k``      <= -10 the ``k`` states in ``bufs[1, :k]`` must be classified
========================  =====  ==========================================================

Matcher meta fields
-------------------
``meta`` (int64) of a matcher: ``M_TOP`` (top Earley set), ``M_STEPS`` (tokens accepted),
``M_STOPPED`` (1 after a stop token), ``M_NO_STOP`` (1 when stop tokens are not accepted).

Registry rows
-------------
A batch kernel finds each grammar's and each matcher's arrays through a row of the slot
tables of :mod:`._registry`: the addresses of the arrays in the orders below, then their
lengths (along the axis in ``*_LENGTH_AXES``; the other axis of a 2-D array is fixed).
"""

from __future__ import annotations

__all__ = [
    "REJECT",
    "OVERFLOW",
    "OVER_BUDGET",
    "HIST_FULL",
    "TIMEOUT",
    "BUFS_FULL",
    "CAND_FULL",
    "NEED_CLASSIFY",
    "M_TOP",
    "M_STEPS",
    "M_STOPPED",
    "M_NO_STOP",
    "GRAMMAR_ROW",
    "GRAMMAR_LENGTH_AXES",
    "MATCHER_ROW",
    "MATCHER_LENGTH_AXES",
    "N_GRAMMAR_ARRAYS",
    "N_MATCHER_ARRAYS",
]

REJECT = -1
OVERFLOW = -2
OVER_BUDGET = -3
HIST_FULL = -4
TIMEOUT = -5
BUFS_FULL = -6
CAND_FULL = -7
NEED_CLASSIFY = -10

M_TOP = 0
M_STEPS = 1
M_STOPPED = 2
M_NO_STOP = 3

# (name, length axis) of each array of a grammar row: the packed automaton
# (``Automaton.packed``), the token classification (``MaskStore.snapshot()``: state_class,
# cls_meta [n, 5], acc_pool, unc_pool), the sorted vocabulary and the token table.
_GRAMMAR_FIELDS = (
    ("packed_automaton", 0),
    ("state_class", 0),
    ("cls_meta", 0),
    ("acc_pool", 0),
    ("unc_pool", 0),
    ("sv_ids", 0),
    ("sv_offsets", 0),
    ("sv_data", 0),
    ("tok_offsets", 0),
    ("tok_data", 0),
)
# (name, length axis) of each array of a matcher row (``GrammarMatcher._state_arrays``):
# the Earley chart, the meta fields, the history, the stop tokens, and the scratch arrays
# (bufs and memo_key are [2, cap]: their length is along axis 1).
_MATCHER_FIELDS = (
    ("items_s", 0),
    ("items_o", 0),
    ("set_starts", 0),
    ("meta", 0),
    ("hist", 0),
    ("stop_ids", 0),
    ("bufs", 1),
    ("memo_key", 1),
    ("memo_meta", 0),
    ("memo_row", 0),
    ("cand", 0),
)
GRAMMAR_ROW = tuple(name for name, _ in _GRAMMAR_FIELDS)
GRAMMAR_LENGTH_AXES = tuple(axis for _, axis in _GRAMMAR_FIELDS)
MATCHER_ROW = tuple(name for name, _ in _MATCHER_FIELDS)
MATCHER_LENGTH_AXES = tuple(axis for _, axis in _MATCHER_FIELDS)
N_GRAMMAR_ARRAYS = 10
N_MATCHER_ARRAYS = 11
assert len(GRAMMAR_ROW) == N_GRAMMAR_ARRAYS and len(MATCHER_ROW) == N_MATCHER_ARRAYS
