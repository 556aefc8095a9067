"""The ``treegram`` command's default run (the README's first command)."""

from __future__ import annotations

import re

from treegram.cli import main


def test_default_run_walks_the_document_and_reports_kernels_apart(capsys):
    assert main([]) == 0
    out = capsys.readouterr().out
    assert "complete       True   stop token allowed: True" in out
    compile_ms = float(re.search(r"^compile\s+([\d.]+) ms", out, re.M).group(1))
    assert compile_ms >= 0
    kernels = re.search(
        r"^kernels\s+(\d+) ms  numba: (\d+) kernels loaded, (\d+) compiled", out, re.M
    )
    assert kernels is not None, out
    assert re.search(r"^\s+cache \S+", out, re.M)


def test_default_run_stops_where_the_grammar_rejects_the_text(capsys):
    assert main(["--text", '{"a": tru}']) == 1
    assert "the grammar rejects this text here" in capsys.readouterr().out
