"""Import shim: treegram's public API under xgrammar 0.2.8's names.

Put ``benchmarks/xgrammar_suite/shim`` first on ``sys.path`` and ``import xgrammar`` gives
treegram. Name mapping only: every behaviour lives in treegram. A name xgrammar exports that
treegram lacks is left undefined here, so a test that needs it fails as missing API.
"""

from treegram import (
    BatchGrammarMatcher,
    CompiledGrammar,
    DeserializeFormatError,
    DeserializeVersionError,
    Grammar,
    GrammarCompiler,
    GrammarMatcher,
    InvalidJSONError,
    InvalidStructuralTagError,
    StructuralTag,
    StructuralTagItem,
    TokenizerInfo,
    VocabType,
    allocate_token_bitmask,
    apply_token_bitmask_inplace,
    bitmask_dtype,
    get_bitmask_shape,
    get_builtin_structural_tag,
    get_max_recursion_depth,
    get_model_structural_tag,
    get_serialization_version,
    max_recursion_depth,
    normalize_tool_choice,
    register_model_structural_tag,
    reset_token_bitmask,
    set_max_recursion_depth,
)

from . import exception, structural_tag, testing

__all__ = [
    "exception",
    "structural_tag",
    "testing",
    "CompiledGrammar",
    "GrammarCompiler",
    "get_serialization_version",
    "get_max_recursion_depth",
    "set_max_recursion_depth",
    "max_recursion_depth",
    "DeserializeFormatError",
    "DeserializeVersionError",
    "InvalidJSONError",
    "InvalidStructuralTagError",
    "Grammar",
    "StructuralTagItem",
    "BatchGrammarMatcher",
    "GrammarMatcher",
    "allocate_token_bitmask",
    "apply_token_bitmask_inplace",
    "bitmask_dtype",
    "get_bitmask_shape",
    "reset_token_bitmask",
    "StructuralTag",
    "TokenizerInfo",
    "VocabType",
    "get_model_structural_tag",
    "normalize_tool_choice",
    "register_model_structural_tag",
    "get_builtin_structural_tag",
]
