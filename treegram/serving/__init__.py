"""Engine-facing helpers that run inside a serving engine's decoding step (torch).

torch is optional: importing :mod:`treegram.serving` does not import it; the functions import
it when called (and raise :class:`~treegram.errors.MissingDependencyError` without it).
Triton is imported only by the ``"triton"`` backend of :func:`apply_token_bitmask_inplace`.

The engine adapters live in one public module per engine, :mod:`treegram.serving.sglang`
and :mod:`treegram.serving.vllm` (their classes are also exported here); neither imports
its engine.
"""

from __future__ import annotations

from treegram.serving._adapters import TokenRejectedError
from treegram.serving._apply import (
    apply_token_bitmask_inplace,
    apply_token_bitmask_inplace_cpu,
    bitmask_to_bool_tensor,
    bool_tensor_to_bitmask,
)
from treegram.serving._executor import (
    AcceptedTokensMissingError,
    EagerStepExecutor,
    StepBatch,
    StepCompletion,
    StepExecutor,
)
from treegram.serving._launcher import CudaHostLauncher, EagerLauncher
from treegram.serving._verify import TreeVerifyResult, verify_tree
from treegram.serving.sglang import SGLangGrammar, SGLangGrammarBackend
from treegram.serving.vllm import VLLMBackend, VLLMGrammar

__all__ = [
    "apply_token_bitmask_inplace",
    "apply_token_bitmask_inplace_cpu",
    "bitmask_to_bool_tensor",
    "bool_tensor_to_bitmask",
    "verify_tree",
    "TreeVerifyResult",
    "SGLangGrammar",
    "SGLangGrammarBackend",
    "VLLMGrammar",
    "VLLMBackend",
    "TokenRejectedError",
    "StepBatch",
    "StepCompletion",
    "StepExecutor",
    "EagerStepExecutor",
    "AcceptedTokensMissingError",
    "EagerLauncher",
    "CudaHostLauncher",
]
