"""Smoke test: benchmarks/bench_matcher.py runs end to end at tiny sizes (no timing asserted)."""

from __future__ import annotations

import pytest
from bench_setup import benchmark_fixture, run_benchmark

pytest.importorskip("xgrammar")
pytest.importorskip("tokenizers")

REQUIRED = ("compile_ms", "fill_us_p50", "accept_us_p50", "fill_us_p99")


bench = benchmark_fixture("bench_matcher")


def test_runs_at_tiny_sizes(bench, tmp_path):
    result, written = run_benchmark(
        bench,
        tmp_path / "m.json",
        [
            "--data", str(bench.FALLBACK_CORPUS),
            "--docs", "3",
            "--passes", "2",
            "--compile-repeats", "1",
            "--no-import-cost",
        ],
    )  # fmt: skip
    assert set(written) >= {"meta", "treegram", "xgrammar", "ratios"}
    for engine in ("treegram", "xgrammar"):
        for key in REQUIRED:
            assert isinstance(written[engine][key], float), (engine, key)
    meta = written["meta"]
    assert meta["n_docs"] == 3 and meta["passes"] == 2 and meta["n_tokens"] > 0
    assert meta["vocab_size"] == 129280
    assert meta["mask_mismatches"] == 0, meta["mismatch_examples"]
    assert meta["rejections"] == []
    assert result["meta"]["mask_mismatches"] == 0


def test_fallback_corpus_matches_shared_data(bench):
    shared = bench.default_data()
    if shared is None:
        pytest.skip("no ../shared/data here")
    from_file = [value for _, value in bench._candidates(bench.FALLBACK_CORPUS)[1]]
    from_dir = []
    for _, value in bench._candidates(shared)[1]:
        if isinstance(value, (dict, list)):
            from_dir.append(value)
        if len(from_dir) == len(from_file):
            break
    assert from_dir == from_file
