"""Smoke test: benchmarks/bench_hostile.py runs a case end to end in a fresh process (no
timing asserted)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_hostile.py"


def test_runs_one_case(tmp_path):
    spec = importlib.util.spec_from_file_location("bench_hostile", SCRIPT)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    out = tmp_path / "hostile.json"
    result = bench.main(
        ["--cases", "regex_nested16", "--engines", "treegram", "--output", str(out)]
    )
    row = result["cases"]["regex_nested16"]["treegram"]
    assert row["outcome"] == "compiled" and row["seconds"] >= 0
    assert json.loads(out.read_text())["meta"]["engines"] == ["treegram"]
