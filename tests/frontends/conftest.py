"""Fixtures shared by the frontend tests."""

from __future__ import annotations

import pytest
from schema_matching import byte_compiler
from xgrammar_diff import deepseek_infos

from treegram import GrammarCompiler


@pytest.fixture(scope="session")
def compiler() -> GrammarCompiler:
    """The compiler over the byte-level vocabulary (see schema_matching.byte_compiler); a test
    module may define its own ``compiler`` instead."""
    return byte_compiler()


@pytest.fixture(scope="session")
def infos():
    """treegram's and xgrammar's TokenizerInfo for DeepSeek-V4 (skips without xgrammar)."""
    xgr = pytest.importorskip("xgrammar")
    return deepseek_infos(xgr)
