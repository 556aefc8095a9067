"""Smoke test: benchmarks/bench_forced_drafts.py runs end to end on two schemas (no timing
asserted)."""

from __future__ import annotations

from pathlib import Path

import pytest
from bench_setup import benchmark_fixture, maskbench_folder, read_json

pytest.importorskip("tokenizers")
pytest.importorskip("torch")  # the n-gram drafter lives in treegram.demo


bench = benchmark_fixture("bench_forced_drafts")


def test_runs_on_two_schemas(bench, tmp_path):
    schemas = {
        "order": {
            "type": "object",
            "properties": {"customer_name": {"type": "string"}, "quantity": {"type": "integer"}},
            "required": ["customer_name", "quantity"],
            "additionalProperties": False,
        },
        "status": {"type": "object", "properties": {"state": {"enum": ["running", "stopped"]}}},
    }
    tests = {
        "order": [{"valid": True, "data": {"customer_name": "Ada Lovelace", "quantity": 12}}],
        "status": [{"valid": True, "data": {"state": "stopped"}}],
    }
    data = maskbench_folder(tmp_path / "data", schemas, tests)
    out = tmp_path / "fd.json"
    bench.main(
        [
            "--data", str(data), "--every", "1", "--limit", "2", "--docs-per-schema", "1",
            "--repeats", "1", "--forced-budget", "8", "--quiet", "--output", str(out),
        ]
    )  # fmt: skip
    written = read_json(out)
    assert set(written) == {"meta", "summary", "ratios", "cost", "forced_nodes", "per_document"}
    meta = written["meta"]
    assert {"date", "command", "versions", "machine"} <= set(meta)
    assert meta["documents"] >= 1 and meta["forced_budget"] == 8
    per_doc = written["per_document"]
    for name in bench.CONFIGS:
        assert len(per_doc[name]) == meta["documents"]
        # no configuration takes more steps than tokens, and drafts never add steps
        assert all(1 <= s <= t for s, t in zip(per_doc[name], per_doc["tokens"], strict=True))
    assert per_doc["none"] == per_doc["tokens"]  # no drafter: one token per step
    assert all(f <= n for f, n in zip(per_doc["none+forced"], per_doc["none"], strict=True))
    # the keys and punctuation of these schemas are forced: forced drafts save steps
    assert sum(per_doc["none+forced"]) < sum(per_doc["none"])
    assert written["cost"]["steps_timed"] >= 1
    if meta["plot"] is not None:
        assert Path(meta["plot"]).is_file()
