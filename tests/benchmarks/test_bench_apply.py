"""Smoke test: benchmarks/bench_apply.py runs end to end at tiny sizes (no timing asserted)."""

from __future__ import annotations

import json

from bench_setup import benchmark_fixture, run_benchmark

bench = benchmark_fixture("bench_apply", requires=("torch", "xgrammar"))


def test_runs_at_tiny_sizes(bench, tmp_path):
    result, written = run_benchmark(
        bench, tmp_path / "apply.json", ["--batches", "1", "3", "--vocab", "1000", "--runs", "3"]
    )
    assert written == json.loads(json.dumps(result))
    assert written["meta"]["mismatches"] == 0
    assert [row["batch"] for row in written["shapes"]] == [1, 3]
    for row in written["shapes"]:
        assert row["vocab"] == 1000
        for engine in ("treegram", "xgrammar"):
            stats = row[engine]
            assert len(stats["samples_ms"]) == 3
            for key in ("median_ms", "rows_per_s", "gb_per_s"):
                assert isinstance(stats[key], float) and stats[key] > 0, (engine, key)
