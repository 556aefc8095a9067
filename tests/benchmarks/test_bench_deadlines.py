"""Smoke test: benchmarks/bench_deadlines.py runs end to end on two schemas (no timing
asserted)."""

from __future__ import annotations

import json

import pytest
from bench_setup import benchmark_fixture, maskbench_folder, read_json

pytest.importorskip("xgrammar")
pytest.importorskip("torch")
pytest.importorskip("tokenizers")

bench = benchmark_fixture("bench_deadlines")

SCHEMAS = {
    "object": {
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "string"}},
        "required": ["a"],
    },
    "array": {"type": "array", "items": {"type": "integer"}},
}
# one valid instance each: its tokens are the chain draft the budgets are timed on
TESTS = {
    "object": [{"data": {"a": 12, "b": "xy"}, "valid": True}],
    "array": [{"data": [1, 22, 333], "valid": True}],
}


def test_runs_on_two_schemas(bench, tmp_path):
    data = maskbench_folder(tmp_path / "data", SCHEMAS, TESTS)
    out = tmp_path / "deadlines.json"
    result = bench.main(
        ["--data", str(data), "--every", "1", "--nodes", "6", "--budgets", "0.002,30",
         "--output", str(out)]
    )  # fmt: skip
    written = read_json(out)
    assert written == json.loads(json.dumps(result))
    meta = written["meta"]
    assert {"date", "command", "versions", "platform", "cpu_count", "python"} <= set(meta)
    assert "load_average_1m" in meta and "machine" not in meta  # machine facts at the top
    assert meta["schemas"] == 2 and meta["nodes"] == 6
    assert set(written["results"]) == {"0.002", "30.0"}
    for budget, per_engine in written["results"].items():
        assert set(per_engine) == {"treegram", "xgrammar"}
        for engine, stats in per_engine.items():
            assert stats["calls"] == 2, (budget, engine)
            assert stats["ratio_p50"] > 0 and stats["ratio_max"] >= stats["ratio_p50"]
    # a 30 s budget is never reached by a six-node chain: both calls finish
    assert all(s["finished"] == 2 for s in written["results"]["30.0"].values())
    assert "| treegram |" in bench.format_table(written["results"])
