"""Smoke test: benchmarks/bench_compile.py times two schemas end to end (no timing asserted)."""

from __future__ import annotations

import pytest
from bench_setup import benchmark_fixture, maskbench_folder, run_benchmark

pytest.importorskip("xgrammar")


bench = benchmark_fixture("bench_compile", register=True)


def test_stages_and_ratio_on_two_schemas(bench, tmp_path):
    schemas = {
        "s0": {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
        "s1": {"type": "array", "items": {"type": "string", "maxLength": 5}},
        "refused": {"type": "nonsense"},
    }
    data = maskbench_folder(tmp_path / "data", schemas)
    result, written = run_benchmark(
        bench,
        tmp_path / "compile.json",
        ["--data", str(data), "--every", "1", "--repeat", "2", "--clock", "cpu"],
    )
    assert written == result
    assert result["meta"]["files"] == 3
    assert result["treegram"]["compiled"] == 2  # the bad schema has no time, not a crash
    assert set(result["treegram"]["stages"]) == {"frontend", "automaton", "tables", "total"}
    refused = next(r for r in result["rows"] if r["file"] == "refused.json")
    assert refused["treegram_ms"] is None
    ok = [r for r in result["rows"] if r["treegram_ms"] is not None]
    assert all(len(r["treegram_ms"]) == 3 and min(r["treegram_ms"]) >= 0 for r in ok)
    assert result["xgrammar"]["compiled_by_both"] == 2
    assert result["xgrammar"]["median_ratio_treegram_over_xgrammar"] > 0
    assert result["meta"]["clock"] == "cpu" and result["treegram"]["timeouts"] == []


def test_a_schema_past_the_time_limit_is_counted_apart(bench, tmp_path):
    ok = {"type": "object", "properties": {"a": {"type": "integer"}}}
    data = maskbench_folder(tmp_path / "data", {"a": ok})
    # a limit no compile can meet: the schema times out, its worker is stopped
    result, _ = run_benchmark(
        bench,
        tmp_path / "compile.json",
        ["--data", str(data), "--every", "1", "--repeat", "1", "--no-xgrammar", "--timeout", "0"],
    )
    assert result["treegram"]["timeouts"] == ["a.json"]
    assert result["treegram"]["compiled"] == 0


def test_only_runs_the_named_files(bench, tmp_path):
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    data = maskbench_folder(tmp_path / "data", {"a": schema, "b": schema, "c": schema})
    result, _ = run_benchmark(
        bench,
        tmp_path / "compile.json",
        [
            "--data",
            str(data),
            "--only",
            "c.json",
            "a.json",
            "--every",
            "1",
            "--repeat",
            "1",
            "--no-xgrammar",
        ],
    )
    assert [r["file"] for r in result["rows"]] == ["a.json", "c.json"]
