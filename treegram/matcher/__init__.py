"""Per-request matching: GrammarMatcher and token bitmask helpers."""

from ._batch import BatchGrammarMatcher
from ._bitmask import (
    allocate_token_bitmask,
    bitmask_dtype,
    get_bitmask_shape,
    reset_token_bitmask,
)
from ._forced import ExtendedTrees, batch_forced_chains, extend_draft_trees, forced_chain
from ._matcher import GrammarMatcher

__all__ = [
    "BatchGrammarMatcher",
    "ExtendedTrees",
    "GrammarMatcher",
    "allocate_token_bitmask",
    "batch_forced_chains",
    "extend_draft_trees",
    "forced_chain",
    "bitmask_dtype",
    "get_bitmask_shape",
    "reset_token_bitmask",
]
