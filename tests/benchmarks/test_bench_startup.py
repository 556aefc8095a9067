"""Smoke test: benchmarks/bench_startup.py runs end to end with one fresh process of
treegram (no timing asserted; the wheel install and the cold JIT are left to real runs)."""

from __future__ import annotations

from bench_setup import load_benchmark, read_json


def test_runs_one_fresh_process(tmp_path):
    out = tmp_path / "startup.json"
    result = load_benchmark("bench_startup").main(
        ["--repeats", "1", "--cold-repeats", "0", "--engines", "treegram", "--output", str(out)]
    )
    row = result["fresh_process"]["treegram"]
    marks = [row[k] for k in ("import", "vocabulary", "compile", "first_mask")]
    assert marks == sorted(marks) and row["process_wall"] >= marks[-1]
    assert row["kernels_compiled"] + row["kernels_loaded"] > 0
    assert read_json(out)["meta"]["repeats"] == 1
