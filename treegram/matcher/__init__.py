"""Per-request matching: GrammarMatcher, BatchGrammarMatcher and token bitmask helpers.

Also exported for the serving layer (not part of ``treegram.__all__``): the draft-tree
input checks ``as_index_array``, ``link_arrays`` and ``check_draft_trees``.
"""

from ._batch import BatchGrammarMatcher
from ._bitmask import (
    allocate_token_bitmask,
    allowed_token_ids,
    as_bitmask_array,
    bitmask_dtype,
    bitmask_to_bool,
    bool_to_bitmask,
    check_row_index,
    get_bitmask_shape,
    reset_token_bitmask,
)
from ._forced import (
    MAX_FORCED_NODES,
    ExtendedTrees,
    batch_forced_chains,
    extend_draft_trees,
    forced_chain,
)
from ._matcher import GrammarMatcher
from ._tree_input import as_index_array, check_draft_trees, link_arrays

__all__ = [
    "BatchGrammarMatcher",
    "ExtendedTrees",
    "MAX_FORCED_NODES",
    "GrammarMatcher",
    "allocate_token_bitmask",
    "allowed_token_ids",
    "as_bitmask_array",
    "batch_forced_chains",
    "extend_draft_trees",
    "forced_chain",
    "bitmask_dtype",
    "bitmask_to_bool",
    "bool_to_bitmask",
    "check_row_index",
    "get_bitmask_shape",
    "reset_token_bitmask",
    "as_index_array",
    "check_draft_trees",
    "link_arrays",
]
