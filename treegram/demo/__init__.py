"""End-to-end constrained speculative decoding on CPU, with nothing downloaded.

A byte-level tokenizer (:class:`ByteTokenizer`), a tiny causal LM with seeded random weights
and tree attention (:class:`TinyCausalLM`), an n-gram / prompt-lookup drafter that proposes
branchy trees (:class:`NGramDrafter`) and the decoding loop (:class:`DemoEngine`): draft
trees, masks for every node of every request from one
:meth:`treegram.BatchGrammarMatcher.batch_traverse_draft_tree` call, tree-attention scoring,
masked greedy verification and matcher advance. ``treegram demo`` runs it.

Needs torch (``treegram[torch]``); importing this package does not import it.
"""

from __future__ import annotations

from treegram.demo._drafter import NGramDrafter
from treegram.demo._loop import (
    EXAMPLES,
    DemoEngine,
    DemoReport,
    DemoRequest,
    RequestResult,
    Timings,
)
from treegram.demo._model import (
    MERGED_TOKENS,
    ByteTokenizer,
    KVCache,
    TinyCausalLM,
    TinyLMConfig,
    structural_logit_bias,
)

__all__ = [
    "EXAMPLES",
    "MERGED_TOKENS",
    "ByteTokenizer",
    "DemoEngine",
    "DemoReport",
    "DemoRequest",
    "KVCache",
    "NGramDrafter",
    "RequestResult",
    "Timings",
    "TinyCausalLM",
    "TinyLMConfig",
    "structural_logit_bias",
]
