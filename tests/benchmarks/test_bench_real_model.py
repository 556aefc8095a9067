"""Smoke test: benchmarks/bench_real_model.py runs end to end on the tiny model (two schema
prompts and one tool call, every kind of configuration; no timing asserted)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from bench_setup import benchmark_fixture, read_json

pytest.importorskip("torch")
pytest.importorskip("xgrammar")
pytest.importorskip("llguidance")


bench = benchmark_fixture("bench_real_model")


def test_prompt_set_is_shipped(bench):
    payload = json.loads(bench.DEFAULT_PROMPTS.read_text(encoding="utf-8"))
    assert len(payload["schemas"]) + len(payload["tools"]) >= 30
    assert all(bench._usable(e["schema"]) for e in payload["schemas"])
    assert "maskbench" in payload["source"]


def test_runs_every_kind_of_configuration(bench, tmp_path):
    out = tmp_path / "rm.json"
    configs = [
        "unconstrained/none",
        "treegram/none",
        "treegram/ngram+forced",
        "treegram/self",
        "xgrammar/none",
        "xgrammar/forced",
        "llguidance/none",
        "llguidance/ngram",
    ]
    results = bench.main(
        [
            "--model", "tiny", "--limit", "2", "--tools", "1", "--max-tokens", "24",
            "--tree-nodes", "6", "--self-nodes", "4", "--self-layers", "1",
            "--configs", ",".join(configs), "--quiet", "--output", str(out),
        ]
    )  # fmt: skip
    written = read_json(out)
    assert written["summary"].keys() == set(configs)
    assert {"meta", "summary", "ratios", "bars", "first_request_latency_ms"} <= set(written)
    meta = written["meta"]
    assert len(meta["prompts"]) == 3 and meta["model"] == "tiny"
    assert {"date", "command", "versions", "machine"} <= set(meta)
    for config, s in written["summary"].items():
        assert s["prompts"] == 3 and s["tokens"] >= s["steps"] >= 1, config
        assert s["valid"] + s["invalid"] + s["cut_by_max_tokens"] == 3
        if config.startswith("treegram"):  # (xgrammar 0.2.8 drops minLength next to a
            assert s["invalid"] == 0, (config, s["invalid_examples"])  # pattern: not here)
        if not config.startswith("unconstrained"):
            # greedy speculative output is plain decoding's, for every drafter and engine
            assert s["identical_to_none"] == 3, config
    for engine in ("treegram", "xgrammar", "llguidance"):
        assert len(written["first_request_latency_ms"]["per_schema"][engine]) == 3
    assert "treegram/ngram+forced vs treegram/none (cpu)" in written["ratios"]
    assert results["bars"]["identical to the same engine's none run"]
    if meta["plot"] is not None:
        assert Path(meta["plot"]).is_file()


def test_latency_only_on_every_nth_schema(bench, tmp_path):
    out = tmp_path / "latency.json"
    results = bench.main(
        [
            "--model", "tiny", "--every", "16", "--tools", "0", "--latency-only",
            "--configs", "treegram/none,llguidance/none", "--quiet", "--output", str(out),
        ]
    )  # fmt: skip
    payload = json.loads(bench.DEFAULT_PROMPTS.read_text(encoding="utf-8"))
    expected = [e["file"] for e in payload["schemas"][::16]]
    assert results["meta"]["prompts"] == expected and results["meta"]["latency_only"]
    assert results["summary"] == {} and results["meta"]["plot"] is None
    latency = read_json(out)["first_request_latency_ms"]
    for key in ("per_schema", "per_schema_cpu"):
        assert set(latency[key]) == {"treegram", "llguidance"}
        assert all(len(v) == len(expected) and min(v) > 0 for v in latency[key].values())
