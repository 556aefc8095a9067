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

Automaton arrays
----------------
``AutomatonArrays`` is the unpacked automaton ``A = kernels._earley.unpack(packed)``:
kernels read its arrays by name (``A.rule_start``). Its first ten fields are
``Automaton.arrays()``, in that order; ``A_*`` are their positions, for Python code that
indexes that tuple. ``PACK_*`` name the header words of the packed int32 buffer
(``Automaton.packed``): counts, the root rule, then ``PACK_OFFSETS + k``, where array ``k``
of the buffer starts.

Bundles
-------
Arrays that always travel together go to kernels as one argument: a namedtuple of arrays
below (numba passes one as a single argument and folds each attribute to its field, so a
bundle costs nothing inside compiled code). Kernels build them from their flat arguments
or a registry row; Python hands kernels flat arrays or slot ids (numba types a namedtuple
argument in Python, about 1 us per call, against some 25 ns per plain array).

===================  =======================================================================
``AutomatonArrays``  the unpacked automaton ``A`` (above)
``Chart``            an Earley chart: ``items_s``, ``items_o``, ``set_starts``, ``text``
``MatcherState``     a matcher's position: its ``chart``, ``meta``, ``hist``, ``stop_ids``
``Scratch``          a matcher's mask scratch: ``bufs``, the memo, ``cand``
``Classes``          a grammar's token classes (``MaskStore.snapshot()``)
``Vocab``            the sorted vocabulary and the token table of a vocabulary
``Grammar``          the unpacked automaton ``A``, its root rule, ``Classes`` and ``Vocab``
``Tree``             a draft tree: ``next_token``, ``next_sibling``, ``draft`` links and tokens
``TokenTrie``        the token trie of forced drafts (``kernels._trie``) with its byte tables
``Walk``             a tree walk's scratch and limits: ``stack``, ``clock``, ``deadline_ns``
===================  =======================================================================

Registry rows
-------------
A batch kernel finds each grammar's and each matcher's arrays through a row of the slot
tables of :mod:`._registry`: the addresses of the arrays in the orders below, then their
lengths (along the axis in ``*_LENGTH_AXES``; the other axis of a 2-D array is fixed).
"""

from __future__ import annotations

from collections import namedtuple
from typing import NamedTuple

import numpy as np

__all__ = [
    "AutomatonArrays",
    "Chart",
    "MatcherState",
    "Scratch",
    "Classes",
    "Vocab",
    "Grammar",
    "Tree",
    "TokenTrie",
    "Walk",
    "REJECT",
    "OVERFLOW",
    "OVER_BUDGET",
    "HIST_FULL",
    "TIMEOUT",
    "BUFS_FULL",
    "CAND_FULL",
    "NEED_CLASSIFY",
    "UNCLASSIFIED",
    "CONTEXT_FIRST",
    "M_TOP",
    "M_STEPS",
    "M_STOPPED",
    "M_NO_STOP",
    "A_RULE_START",
    "A_RULE_NULLABLE",
    "A_STATE_RULE",
    "A_STATE_FINAL",
    "A_BYTE_CLASS",
    "A_N_CLASSES",
    "A_TRANS",
    "A_REF_PTR",
    "A_REF_RULE",
    "A_REF_TARGET",
    "A_TOKENS",
    "PACK_N_STATES",
    "PACK_N_RULES",
    "PACK_N_CLASSES",
    "PACK_ROOT_RULE",
    "PACK_OFFSETS",
    "PACK_UNIQUE",
    "PACK_HEADER",
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

# ``state_class`` entries: a class id (>= 0); UNCLASSIFIED; CONTEXT_FIRST: no class yet, and
# the state is to be looked up in its callers' context first (``kernels._mask``); below
# that, ``CONTEXT_FIRST - 1 - class id``: the same with a class of its own.
UNCLASSIFIED = -1
CONTEXT_FIRST = -2

M_TOP = 0
M_STEPS = 1
M_STOPPED = 2
M_NO_STOP = 3


class AutomatonArrays(NamedTuple):
    """The unpacked automaton ``A`` (``kernels._earley.unpack``: views of the packed
    buffer). Kernels read a field by name; numba folds it to the field as it would an
    index. Without reference counting (``_nrt=False``) a field read costs what a local
    does; in a kernel that counts references, one inside a loop may take a count, so the
    hot ones bind the fields their loops read to locals first."""

    rule_start: np.ndarray  # int32 [rules]: first state of each rule
    rule_nullable: np.ndarray  # int32 [rules]: 1 if the rule derives the empty string
    state_rule: np.ndarray  # int32 [states]: the rule a state belongs to
    state_final: np.ndarray  # int32 [states]: 1 for a rule's end state
    byte_class: np.ndarray  # int32 [256]: byte -> byte class
    n_classes: int  # number of byte classes
    trans: np.ndarray  # int32 [states * n_classes]: byte-class transitions (-1: none)
    ref_ptr: np.ndarray  # int32 [states + 1]: CSR offsets of each state's rule references
    ref_rule: np.ndarray  # int32 [refs]: the rule a reference calls
    ref_target: np.ndarray  # int32 [refs]: the state after the called rule
    # int32: the token sets of token-id rules, ``[n, n_words, rule ids..., n bitsets]``
    # (``Automaton.token_bits``; ``[0, 0]`` for a grammar without any)
    tokens: np.ndarray
    # 1 when some rule's completions must differ from their siblings' (``Rule.unique``):
    # a mask then depends on the text read, not on the chart's items alone
    unique: int
    # int32 [2 * states] where some rule is counted (``Rule.max_string_chars``), else
    # empty: the most characters its string may hold when an item enters the state (the
    # bound less the fewest characters still needed), NOT_COUNTED outside counted rules;
    # then, at ``states + s``, the least of those ahead of state ``s``
    state_chars: np.ndarray
    # the least of those over the states that can still end (``PACK_CHARS_FLOOR``)
    chars_floor: int


# Positions of those fields, for Python code that indexes ``Automaton.arrays()`` (the first
# ten) by number.
A_RULE_START = 0
A_RULE_NULLABLE = 1
A_STATE_RULE = 2
A_STATE_FINAL = 3
A_BYTE_CLASS = 4
A_N_CLASSES = 5
A_TRANS = 6
A_REF_PTR = 7
A_REF_RULE = 8
A_REF_TARGET = 9
A_TOKENS = 10

# ---- bundles (see the module docstring); fields in the orders of the registry rows below
Chart = namedtuple("Chart", ["items_s", "items_o", "set_starts", "text"])
"""Earley chart: item states and origins (int32 [cap]), set ``i`` at ``set_starts[i]``, and
the byte read after set ``i`` at ``text[i]`` (int64, as long as ``set_starts``: the byte in
the low 8 bits, above them the running character count that counted rules read, see
``kernels._earley.span_chars``; written only for a grammar with unique or counted rules,
which alone read it; empty in a classification walk's
scratch chart, which has no text before its seed)."""
MatcherState = namedtuple("MatcherState", ["chart", "meta", "hist", "stop_ids"])
"""A matcher's position: its ``Chart``, ``meta`` int64 [4] (``M_*``), ``hist`` int32 [cap]
(the top set before each step) and ``stop_ids`` int32."""
Scratch = namedtuple("Scratch", ["bufs", "memo_key", "memo_meta", "memo_row", "cand"])
"""A matcher's mask scratch: ``bufs`` int32 [2, cap], the one-entry memo (``memo_key`` int32
[2, cap], ``memo_meta`` int64 [3]: items in the key, the floor, and the vocabulary's longest
token in bytes; ``memo_row`` int32 [n_words]) and ``cand`` int32 [cap]."""
Classes = namedtuple("Classes", ["state_class", "cls_meta", "acc_pool", "unc_pool"])
"""A grammar's token classes: ``state_class`` int32, ``cls_meta`` int64 [n, 5], the pools."""
Vocab = namedtuple(
    "Vocab", ["sv_ids", "sv_offsets", "sv_data", "sv_by_length", "tok_offsets", "tok_data"]
)
"""The sorted vocabulary (ids int32, offsets int64, bytes uint8, its positions from the
longest token to the shortest int32; read-only) and the token table (``tok_offsets`` int64
[V + 1], ``tok_data`` uint8)."""
Grammar = namedtuple("Grammar", ["automaton", "root", "classes", "vocab"])
"""One compiled grammar: the unpacked automaton (``A``), its root rule, ``Classes``, ``Vocab``."""
Tree = namedtuple("Tree", ["next_token", "next_sibling", "draft"])
"""A draft tree: first-child and next-sibling links and node tokens (int64 [N] each)."""
TokenTrie = namedtuple(
    "TokenTrie", ["node_byte", "node_end", "node_tok_lo", "node_tok_hi", "single", "max_len"]
)
"""The preorder token trie (``kernels._trie``) as forced drafts cut bytes into tokens with
it, ``single`` bool [256] (a one-byte token exists) and ``max_len`` (the longest token)."""
Walk = namedtuple("Walk", ["stack", "clock", "deadline_ns"])
"""A tree walk's scratch and limit: ``stack`` int32 [N + 1], ``clock`` int64 [2] (the
monotonic clock's scratch), ``deadline_ns`` (0: none)."""

# Header words of the packed automaton buffer.
PACK_N_STATES = 0
PACK_N_RULES = 1
PACK_N_CLASSES = 2
PACK_ROOT_RULE = 3
PACK_OFFSETS = 4  # PACK_OFFSETS + k: start of packed array k (k = 0..10), then the end
PACK_UNIQUE = 16  # 1 when a rule is unique (``AutomatonArrays.unique``)
PACK_CHARS_FLOOR = 17  # ``AutomatonArrays.chars_floor``
PACK_HEADER = 18  # header words in all
# ``state_chars`` of a state outside every counted rule: no bound
NOT_COUNTED = 2**31 - 1

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
    ("sv_by_length", 0),
    ("tok_offsets", 0),
    ("tok_data", 0),
)
# (name, length axis) of each array of a matcher row (``GrammarMatcher._state_arrays``):
# the Earley chart (its text int64), the meta fields, the history, the stop tokens, and the
# scratch arrays (bufs and memo_key are [2, cap]: their length is along axis 1); then what
# only the scalar entry points read (``kernels._batch``, ``*_slot``): the vocabulary the
# matcher holds (the grammar row's, fixed) and the scratch of a scalar traversal (its stack
# int32, clock int64 [2], root int64 [1], then the tree check's seen flags bool, stack int64
# and report int64).
_MATCHER_FIELDS = (
    ("items_s", 0),
    ("items_o", 0),
    ("set_starts", 0),
    ("text", 0),
    ("meta", 0),
    ("hist", 0),
    ("stop_ids", 0),
    ("bufs", 1),
    ("memo_key", 1),
    ("memo_meta", 0),
    ("memo_row", 0),
    ("cand", 0),
    ("sv_ids", 0),
    ("sv_offsets", 0),
    ("sv_data", 0),
    ("sv_by_length", 0),
    ("tok_offsets", 0),
    ("tok_data", 0),
    ("walk_stack", 0),
    ("walk_clock", 0),
    ("walk_root", 0),
    ("check_seen", 0),
    ("check_stack", 0),
    ("check_report", 0),
)
GRAMMAR_ROW = tuple(name for name, _ in _GRAMMAR_FIELDS)
GRAMMAR_LENGTH_AXES = tuple(axis for _, axis in _GRAMMAR_FIELDS)
MATCHER_ROW = tuple(name for name, _ in _MATCHER_FIELDS)
MATCHER_LENGTH_AXES = tuple(axis for _, axis in _MATCHER_FIELDS)
N_GRAMMAR_ARRAYS = 11
N_MATCHER_ARRAYS = 24
assert len(GRAMMAR_ROW) == N_GRAMMAR_ARRAYS and len(MATCHER_ROW) == N_MATCHER_ARRAYS
