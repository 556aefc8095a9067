"""Per-request matching: GrammarMatcher and token bitmask helpers."""

from ._batch import BatchGrammarMatcher
from ._bitmask import (
    allocate_token_bitmask,
    bitmask_dtype,
    get_bitmask_shape,
    reset_token_bitmask,
)
from ._matcher import GrammarMatcher

__all__ = [
    "BatchGrammarMatcher",
    "GrammarMatcher",
    "allocate_token_bitmask",
    "bitmask_dtype",
    "get_bitmask_shape",
    "reset_token_bitmask",
]
