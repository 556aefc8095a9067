"""Smoke test: benchmarks/bench_serialization.py runs end to end at tiny sizes (no timing
asserted)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from bench_setup import benchmark_fixture, read_json

pytest.importorskip("xgrammar")

MASKBENCH = Path(__file__).resolve().parents[3] / "shared" / "data"


bench = benchmark_fixture("bench_serialization")


def test_runs_at_tiny_sizes(bench, tmp_path):
    out = tmp_path / "serialization.json"
    data = ["--data", str(MASKBENCH)] if MASKBENCH.is_dir() else ["--maskbench", "0"]
    result = bench.main(
        [
            "--props",
            "4",
            "--repeats",
            "1",
            "--vocab",
            "600",
            "--maskbench",
            "1",
            *data,
            "--output",
            str(out),
        ]
    )
    written = read_json(out)
    assert written == json.loads(json.dumps(result))
    assert written["meta"]["vocab_size"] == 600
    big = written["cases"][0]
    assert big["name"] == "4-property"
    assert "ebnf (hand-written)" in [row["frontend"] for row in big["treegram"]]
    assert set(written["bars_props_schema"]) == {row["frontend"] for row in big["treegram"]}
    for case in written["cases"]:
        assert case["xgrammar"]["bytes"] > 0
        for row in case["treegram"]:
            assert 0 < row["bytes_lazy"] <= row["bytes_classified"]
            for key in (
                "compile_lazy_ms",
                "compile_classified_ms",
                "load_lazy_ms",
                "serialize_classified_ms",
            ):
                assert row[key] > 0, key
    if MASKBENCH.is_dir() and written["meta"]["treegram_frontend"]:
        assert len(written["cases"]) == 2


def test_props_ebnf_matches_the_schema(bench):
    import treegram as tg

    info = tg.TokenizerInfo([bytes([b]) for b in range(128)] + [b"<eos>"], stop_token_ids=[128])
    compiled = tg.GrammarCompiler(info).compile_grammar(bench.props_ebnf(2))
    doc = '{ "field_0": "a\\u00e9\\n", "field_1" :""}'
    matcher = tg.GrammarMatcher(compiled)
    assert all(matcher.accept_token(b) for b in doc.encode())
    assert matcher.accept_token(128) and matcher.is_terminated()
    for bad in ('{"field_1": "", "field_0": ""}', '{"field_0": ""}'):
        matcher = tg.GrammarMatcher(compiled)
        ok = all(matcher.accept_token(b) for b in bad.encode()) and matcher.accept_token(128)
        assert not ok, bad
