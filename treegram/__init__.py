"""treegram: structured generation for speculative decoding.

``import treegram`` needs only numpy and numba; torch integrations are imported when used.
"""

from __future__ import annotations

# Before any module defines a kernel: numba picks a kernel's cache location at definition.
from treegram import _kernel_cache  # noqa: F401

# isort: split
from treegram import errors, structural_tag, testing
from treegram._json import (
    get_max_recursion_depth,
    get_serialization_version,
    max_recursion_depth,
    set_max_recursion_depth,
)
from treegram.compiler import CompiledGrammar, GrammarCompiler
from treegram.errors import *  # noqa: F403  (every error type, listed once in errors.__all__)
from treegram.grammar import Grammar
from treegram.matcher import (
    BatchGrammarMatcher,
    GrammarMatcher,
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
from treegram.serving import apply_token_bitmask_inplace
from treegram.structural_tag import (
    StructuralTag,
    StructuralTagItem,
    get_builtin_structural_tag,
    get_model_structural_tag,
    normalize_tool_choice,
    register_model_structural_tag,
)
from treegram.tokenizer import TokenizerInfo, VocabType
from treegram.warmup import WarmUpReport, warm_up

__version__ = "0.1.0"

__all__ = [
    "get_serialization_version",
    "get_max_recursion_depth",
    "set_max_recursion_depth",
    "max_recursion_depth",
    "__version__",
    # bitmask
    "bitmask_dtype",
    "get_bitmask_shape",
    "allocate_token_bitmask",
    "reset_token_bitmask",
    "as_bitmask_array",
    "check_row_index",
    "bitmask_to_bool",
    "bool_to_bitmask",
    "allowed_token_ids",
    # grammars, vocabularies, compilation and matching
    "Grammar",
    "structural_tag",
    "testing",
    "StructuralTag",
    "StructuralTagItem",
    "get_model_structural_tag",
    "get_builtin_structural_tag",
    "normalize_tool_choice",
    "register_model_structural_tag",
    "TokenizerInfo",
    "VocabType",
    "CompiledGrammar",
    "GrammarCompiler",
    "GrammarMatcher",
    "BatchGrammarMatcher",
    "apply_token_bitmask_inplace",
    "warm_up",
    "WarmUpReport",
]
__all__ += errors.__all__  # the error types
