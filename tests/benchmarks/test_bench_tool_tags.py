"""Smoke test: benchmarks/bench_tool_tags.py runs end to end on two formats and two tools
(no timing asserted)."""

from __future__ import annotations

import pytest
from bench_setup import benchmark_fixture, maskbench_folder, run_benchmark

pytest.importorskip("xgrammar")
pytest.importorskip("llguidance")


bench = benchmark_fixture("bench_tool_tags", register=True)


def test_two_formats_two_tool_counts(bench, tmp_path):
    weather = {
        "type": "object",
        "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
        "required": ["city"],
    }
    # no value satisfies it: replaced by the next file in the list
    nothing = {"type": "object", "required": ["a"], "properties": {"a": False}}
    files = {"BFCL_simple_1": weather, "BFCL_simple_2": nothing, "Glaiveai2K---x_1": weather}
    data = maskbench_folder(tmp_path / "data", {**files, "Github_easy---o1": weather})
    result, written = run_benchmark(
        bench,
        tmp_path / "tool_tags.json",
        [
            "--data", str(data),
            "--formats", "qwen_3,qwen_3_coder",
            "--tools", "1,2",
            "--repeat", "2",
            "--clock", "cpu",
        ],
    )  # fmt: skip
    assert written == result
    assert result["meta"]["tools"] == {
        "1": ["BFCL_simple_1"],
        "2": ["BFCL_simple_1", "Glaiveai2K___x_1"],
    }
    assert [(r["format"], r["tools"]) for r in result["rows"]] == [
        ("qwen_3", 1), ("qwen_3", 2), ("qwen_3_coder", 1), ("qwen_3_coder", 2)
    ]  # fmt: skip
    for row in result["rows"]:
        for engine in ("treegram", "xgrammar"):
            cell = row[engine]
            assert cell["compile_ms"] > 0 and cell["first_mask_cpu_ms"] >= 0, (row, engine)
        assert row["compile_ratio_treegram_over_xgrammar"] > 0
        # llguidance's StructTag carries JSON arguments only
        expressible = row["format"] == "qwen_3"
        assert ("error" not in row["llguidance"]) == expressible, row
    summary = result["summary"]["cpu"]
    assert summary["treegram_compiled"] == 4 and not summary["treegram_errors"]
    assert summary["max_compile_ratio"] >= summary["median_compile_ratio"] > 0
