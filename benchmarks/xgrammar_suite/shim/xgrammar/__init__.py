"""Import shim: treegram's public API under xgrammar 0.2.8's names.

Put ``benchmarks/xgrammar_suite/shim`` first on ``sys.path`` and ``import xgrammar`` gives
treegram. Name mapping only: every behaviour lives in treegram. A name xgrammar exports that
treegram lacks is left undefined here, so a test that needs it fails as missing API.
"""

from treegram import (
    CompiledGrammar,
    DeserializeFormatError,
    DeserializeVersionError,
    Grammar,
    GrammarCompiler,
    InvalidJSONError,
    InvalidStructuralTagError,
    StructuralTag,
    StructuralTagItem,
    TokenizerInfo,
    VocabType,
    get_builtin_structural_tag,
    get_max_recursion_depth,
    get_model_structural_tag,
    get_serialization_version,
    max_recursion_depth,
    normalize_tool_choice,
    register_model_structural_tag,
    set_max_recursion_depth,
)

from . import exception, matcher, structural_tag, testing
from .matcher import *  # noqa: F403  (matchers and bitmask helpers: matcher.__all__)

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
    *matcher.__all__,
    "StructuralTag",
    "TokenizerInfo",
    "VocabType",
    "get_model_structural_tag",
    "normalize_tool_choice",
    "register_model_structural_tag",
    "get_builtin_structural_tag",
]
