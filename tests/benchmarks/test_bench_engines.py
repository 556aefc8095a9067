"""Smoke test: benchmarks/bench_engines.py runs end to end at tiny sizes through SGLang's
and vLLM's own code (no timing asserted; the engines as for tests/engines)."""

from __future__ import annotations

from bench_setup import BENCHMARKS, benchmark_fixture, read_json
from engine_setup import require

require("sglang.srt.speculative.spec_utils")
require("vllm.v1.structured_output")


bench = benchmark_fixture("bench_engines")


def test_runs_at_tiny_sizes(bench, tmp_path):
    out = tmp_path / "engines.json"
    bench.main(
        [
            "--data", str(BENCHMARKS / "data" / "engine_schemas.jsonl"),
            "--schemas", "2",
            "--batch", "1,3",
            "--tree-nodes", "8",
            "--chains", "2",
            "--iterations", "2",
            "--warmup", "0",
            "--budget", "1",
            "--output", str(out),
        ]
    )  # fmt: skip
    written = read_json(out)
    assert set(written) == {"meta", "sglang", "vllm"}
    assert {"date", "command", "versions", "machine", "schemas"} <= set(written["meta"])
    assert len(written["meta"]["schemas"]) == 2
    assert set(written["sglang"]) == {"B=1 N=8", "B=3 N=8"}
    assert set(written["vllm"]) == {"B=1 k=2", "B=3 k=2"}
    for engine, rows in (("sglang", 3), ("vllm", 3)):
        for case in written[engine].values():
            assert case["masks_identical"] is True, (engine, case)
            assert len(case["cpu_ms"]) == rows and all(v > 0 for v in case["cpu_ms"].values())
            assert case["iterations"] >= 2
    assert set(written["vllm"]["B=3 k=2"]["parts_cpu_ms"]["treegram drop-in"]) == {
        "validate",
        "grammar_bitmask",
        "accept",
    }
