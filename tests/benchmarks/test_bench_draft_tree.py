"""Smoke test: benchmarks/bench_draft_tree.py runs end to end at tiny sizes (no timing asserted)."""

from __future__ import annotations

import pytest
from bench_setup import benchmark_fixture, run_benchmark

bench = benchmark_fixture("bench_draft_tree", requires=("xgrammar", "tokenizers"))


def test_runs_at_tiny_sizes(bench, tmp_path):
    result, written = run_benchmark(
        bench, tmp_path / "dt.json", ["--iterations", "3", "--warmup", "1", "--requests", "4"]
    )
    assert set(written) >= {"meta", "cases"}
    meta = written["meta"]
    assert meta["iterations"] == 3 and meta["warmup"] == 1
    assert {"platform", "cpu_count"} <= set(meta["machine"])
    assert {"date", "command", "versions"} <= set(meta)
    assert set(written["cases"]) == {"seed", "json"}
    for name, case in written["cases"].items():
        assert case["masks_identical"] is True, (name, case["mismatched_rows"])
        assert case["all_completed"] is True, name
        assert case["requests"] == 4
        assert set(case["median_ms"]) == set(bench.ROWS) == set(case["p90_ms"])
        assert set(case["speedup_vs_xgrammar_loop"]) == set(bench.ROWS) - {bench.XG_LOOP}
        for row in bench.ROWS:
            assert case["median_ms"][row] > 0, (name, row)
            assert len(case["samples_ms"][row]) == 3
    seed, js = written["cases"]["seed"], written["cases"]["json"]
    assert seed["nodes_per_tree"] == 6 and seed["vocab_size"] == 101
    assert seed["rows_written"] == seed["rows_total"] == 4 * 6  # every chain node reached
    assert js["nodes_per_tree"] == 16 and js["vocab_size"] == 129280
    assert js["rows_written"] > 4 * 2  # deep trees: more than root + one child per request
    assert result["cases"]["json"]["masks_identical"] is True


def test_cases_option(bench, tmp_path):
    out = tmp_path / "seed.json"
    result, _ = run_benchmark(
        bench, out, ["--cases", "seed", "--iterations", "1", "--warmup", "0", "--requests", "2"]
    )
    assert set(result["cases"]) == {"seed"}
    with pytest.raises(SystemExit):
        bench.main(["--cases", "nope", "--output", str(out)])
