"""Smoke test: benchmarks/bench_serving.py runs end to end at tiny sizes (no timing asserted)."""

from __future__ import annotations

import pytest
from bench_setup import benchmark_fixture, load_benchmark, read_json, run_benchmark

bench = benchmark_fixture("bench_serving", requires=("torch", "xgrammar", "tokenizers"))


def test_runs_at_tiny_sizes(bench, tmp_path):
    result, written = run_benchmark(
        bench,
        tmp_path / "serving.json",
        [
            "--iterations", "2",
            "--warmup", "1",
            "--batch-sizes", "1,3",
            "--tree-sizes", "4,8",
            "--apply-runs", "2",
        ],
    )  # fmt: skip
    assert set(written) == {"meta", "steps", "apply"}
    meta = written["meta"]
    assert {"date", "command", "versions", "machine"} <= set(meta)
    assert {"platform", "cpu_count"} <= set(meta["machine"])
    assert meta["iterations"] == 2 and meta["warmup"] == 1
    assert meta["vocab_size"] == 129280
    configs = [(c["batch_size"], c["nodes_per_tree"]) for c in written["steps"]]
    assert configs == [(1, 4), (1, 8), (3, 4), (3, 8)]
    for c in written["steps"]:
        assert c["paths_as_expected"] is True, c["unexpected_paths"]
        assert c["all_filled"] is True and c["all_advanced"] is True
        assert c["accept_length_mean"] >= 2  # the chain is accepted, not just the root
        assert set(c["median_ms"]) == {*bench.PARTS, "total"}
        for part in (*bench.PARTS, "total"):
            assert c["median_ms"][part] > 0
            assert len(c["samples_ms"][part]) == 2
    assert [a["batch_size"] for a in written["apply"]] == [1, 3]
    for a in written["apply"]:
        assert a["mismatches"] == 0
        assert a["treegram"]["median_ms"] > 0 and a["xgrammar"]["median_ms"] > 0
    assert bench.all_ok(result)
    assert "fill" in bench.format_table(result)


def test_builtin_grammar_and_bad_options(bench, tmp_path):
    out = tmp_path / "builtin.json"
    result, _ = run_benchmark(
        bench,
        out,
        [
            "--grammar", "builtin",
            "--iterations", "1",
            "--warmup", "0",
            "--batch-sizes", "2",
            "--tree-sizes", "6",
            "--apply-runs", "0",
        ],
    )  # fmt: skip
    assert result["apply"] == []
    assert result["steps"][0]["paths_as_expected"] is True
    for bad in (
        ["--batch-sizes", "x"],
        ["--tree-sizes", "1"],
        ["--iterations", "0"],
        ["--matcher-threads", "two"],
    ):
        with pytest.raises(SystemExit):
            bench.main([*bad, "--output", str(out)])


def test_gpu_check_skips_without_cuda(tmp_path, monkeypatch, capsys):
    """benchmarks/gpu_check.py exits 0 with a skip message on a machine without CUDA, and
    its executor check's own logic holds on CPU (eager twin instead of a CUDA graph)."""
    torch = pytest.importorskip("torch")

    if torch.cuda.is_available():
        pytest.skip("CUDA is available: run benchmarks/gpu_check.py itself")
    gpu_check = load_benchmark("gpu_check")
    monkeypatch.setenv("OUT", str(tmp_path))
    assert gpu_check.main([]) == 0
    assert "no CUDA device: skipped" in capsys.readouterr().out
    written = read_json(tmp_path / "gpu_check.json")
    assert written["skipped"] is True and written["ok"] is True
    result = gpu_check.check_graph_executor(3, dry_run=True)
    assert result["ok"] is True, result
