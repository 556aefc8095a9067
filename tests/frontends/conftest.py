"""Fixtures shared by the frontend tests."""

from __future__ import annotations

import pytest
from xgrammar_diff import deepseek_infos


@pytest.fixture(scope="session")
def infos():
    """treegram's and xgrammar's TokenizerInfo for DeepSeek-V4 (skips without xgrammar)."""
    xgr = pytest.importorskip("xgrammar")
    return deepseek_infos(xgr)
