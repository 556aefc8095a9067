"""numba nopython, nogil kernels over flat arrays: the hot loops of treegram.

Every kernel takes arrays and scalars only and reports through the status codes of
:mod:`._layout` (which also names the array orders kernels exchange, once); Python
callers (compiler, matcher, spec, tokenizer) validate, allocate and orchestrate. The slot
tables of :mod:`._registry` let one batch kernel reach the arrays of many matchers and
grammars. The batch, forced-draft, row and tree kernels are exported as namespaces
(``batch``, ``forced``, ``rows``, ``tree``) because their callers look them up per call (a
test may swap one in); ``layout`` is :mod:`._layout` itself (the ``PACK_*`` / registry
array-order names and the bundles kernels pass arrays in, ``layout.AutomatonArrays``,
``layout.Chart`` and the rest).
"""

from treegram.kernels import _batch as batch
from treegram.kernels import _forced as forced
from treegram.kernels import _layout as layout
from treegram.kernels import _rows as rows
from treegram.kernels import _tree as tree
from treegram.kernels._classify import NO_LOOPS, NO_SKIP, DeadlineExceededError, classify
from treegram.kernels._earley import accept_bytes, chart_can_end, start_chart
from treegram.kernels._json_chars import BOUNDARY as CHAR_BOUNDARY
from treegram.kernels._json_chars import N_PENDING as CHAR_N_PENDING
from treegram.kernels._json_chars import char_step
from treegram.kernels._jump import jump_forward, row_allows_all
from treegram.kernels._layout import (
    BUFS_FULL,
    CAND_FULL,
    HIST_FULL,
    M_NO_STOP,
    M_STEPS,
    M_STOPPED,
    M_TOP,
    NEED_CLASSIFY,
    OVER_BUDGET,
    OVERFLOW,
    REJECT,
    TIMEOUT,
)
from treegram.kernels._mask import CONTEXT_MAX_CALLERS, CONTEXT_MAX_CHAIN, context_hash
from treegram.kernels._multi_slice_walk import multi_slice_dfa_walk, new_multi_sets
from treegram.kernels._ops import accept_token_entry, rollback_op
from treegram.kernels._registry import GRAMMARS, MATCHERS, REGISTRY_LOCK, Registry
from treegram.kernels._signature import splitmix, state_signature
from treegram.kernels._slice_groups import SETS_FULL as SLICE_GROUPS_FULL
from treegram.kernels._slice_groups import TOO_MANY_GROUPS as SLICE_TOO_MANY_GROUPS
from treegram.kernels._slice_groups import group_trie, grouped_slice_walk, slice_byte_groups
from treegram.kernels._slice_walk import MAX_FRAMES as SLICE_WALK_FRAMES
from treegram.kernels._slice_walk import MAX_PAIRS as SLICE_WALK_PAIRS
from treegram.kernels._slice_walk import MAX_SETS as SLICE_WALK_SETS
from treegram.kernels._slice_walk import new_sets as new_slice_walk_sets
from treegram.kernels._slice_walk import slice_dfa_walk
from treegram.kernels._slices import (
    bitset_positions,
    bytes_off_loop,
    joint_byte_classes,
    json_string_slice_dfa,
    looping_leads,
    positions_to_bitset,
    reads_string_text,
    restricted_slice_dfa,
    slice_members,
    slice_reach,
    subtree_max_leads,
    subtree_suffix_bits,
    subtree_text_summary,
    wide_near_rule_end,
)
from treegram.kernels._trie import build_trie, subset_tokens
from treegram.kernels._views import same_words

__all__ = [
    "batch",
    "forced",
    "layout",
    "rows",
    "tree",
    "classify",
    "NO_SKIP",
    "NO_LOOPS",
    "DeadlineExceededError",
    "context_hash",
    "CONTEXT_MAX_CALLERS",
    "CONTEXT_MAX_CHAIN",
    "OVERFLOW",
    "REJECT",
    "accept_bytes",
    "chart_can_end",
    "start_chart",
    "jump_forward",
    "row_allows_all",
    "CHAR_BOUNDARY",
    "CHAR_N_PENDING",
    "char_step",
    "BUFS_FULL",
    "CAND_FULL",
    "NEED_CLASSIFY",
    "OVER_BUDGET",
    "HIST_FULL",
    "M_NO_STOP",
    "M_STEPS",
    "M_STOPPED",
    "M_TOP",
    "TIMEOUT",
    "accept_token_entry",
    "rollback_op",
    "GRAMMARS",
    "MATCHERS",
    "REGISTRY_LOCK",
    "Registry",
    "splitmix",
    "state_signature",
    "joint_byte_classes",
    "json_string_slice_dfa",
    "bitset_positions",
    "positions_to_bitset",
    "slice_dfa_walk",
    "new_slice_walk_sets",
    "multi_slice_dfa_walk",
    "new_multi_sets",
    "SLICE_WALK_PAIRS",
    "SLICE_WALK_FRAMES",
    "SLICE_WALK_SETS",
    "slice_byte_groups",
    "group_trie",
    "grouped_slice_walk",
    "SLICE_GROUPS_FULL",
    "SLICE_TOO_MANY_GROUPS",
    "slice_members",
    "slice_reach",
    "subtree_max_leads",
    "subtree_suffix_bits",
    "subtree_text_summary",
    "looping_leads",
    "bytes_off_loop",
    "reads_string_text",
    "restricted_slice_dfa",
    "wide_near_rule_end",
    "build_trie",
    "subset_tokens",
    "same_words",
]
