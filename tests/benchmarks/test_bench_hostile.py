"""Smoke test: benchmarks/bench_hostile.py runs a case end to end in a fresh process (no
timing asserted)."""

from __future__ import annotations

from bench_setup import load_benchmark, read_json


def test_runs_one_case(tmp_path):
    bench = load_benchmark("bench_hostile")
    out = tmp_path / "hostile.json"
    result = bench.main(
        ["--cases", "regex_nested16", "--engines", "treegram", "--output", str(out)]
    )
    row = result["cases"]["regex_nested16"]["treegram"]
    assert row["outcome"] == "compiled" and row["seconds"] >= 0
    assert read_json(out)["meta"]["engines"] == ["treegram"]
