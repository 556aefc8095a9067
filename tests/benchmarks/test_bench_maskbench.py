"""Smoke test: benchmarks/bench_maskbench.py runs end to end on 3 schemas (no timing asserted)."""

from __future__ import annotations

import pytest
from bench_setup import benchmark_fixture, maskbench_folder, run_benchmark

pytest.importorskip("xgrammar")
pytest.importorskip("llguidance")
pytest.importorskip("tokenizers")

COUNTS = (
    "schemas",
    "passing",
    "compile_errors",
    "timeouts",
    "validation_errors",
    "invalidation_errors",
)


bench = benchmark_fixture("bench_maskbench")

# three MaskBench-style files (a clone has no ../shared/data): valid and invalid instances
SCHEMAS = {
    "object": {
        "type": "object",
        "properties": {"name": {"type": "string"}, "n": {"type": "integer", "minimum": 0}},
        "required": ["name"],
    },
    "array": {"type": "array", "items": {"enum": ["a", "b", 3]}, "maxItems": 3},
    "pattern": {"type": "string", "pattern": "^[a-z]{2,4}-[0-9]+$"},
}
TESTS = {
    "object": [
        {"valid": True, "data": {"name": "x", "n": 4}},
        {"valid": False, "data": {"n": -1}},
    ],
    "array": [{"valid": True, "data": ["a", 3]}, {"valid": False, "data": ["a", "b", 3, 3]}],
    "pattern": [{"valid": True, "data": "abc-12"}, {"valid": False, "data": "abcde-1"}],
}


def test_runs_on_three_schemas(bench, tmp_path):
    data = maskbench_folder(tmp_path / "data", SCHEMAS, TESTS)
    result, written = run_benchmark(
        bench,
        tmp_path / "mb.json",
        ["--data", str(data), "--limit", "3", "--every", "1", "--timeout", "60"]
        + ["--repeats", "2", "--quiet"],
    )
    assert set(written) >= {"meta", "engines", "schemas"}
    assert written["meta"]["n_schemas"] == 3 and written["meta"]["vocab_size"] == 129280
    assert len(written["schemas"]) == 3
    # every engine compiles these three and walks each valid instance to the end
    assert written["engines"]["treegram"]["passing"] == 3
    assert written["engines"]["treegram"]["invalidation_errors"] == 0
    for engine in ("treegram", "xgrammar", "llguidance"):
        stats = written["engines"][engine]
        for key in COUNTS:
            assert isinstance(stats[key], int), (engine, key)
        assert stats["schemas"] == 3
        assert (
            stats["passing"] + stats["compile_errors"] + stats["timeouts"] + stats["crashes"] <= 3
        )
        if stats["n_compiled"]:
            assert isinstance(stats["compile_ms_p50"], float)
    for row in written["schemas"]:
        for engine in ("treegram", "xgrammar", "llguidance"):
            if row[engine]["status"] == "ok":  # compile + masks is at least the compile
                assert row[engine]["first_use_ms"] >= row[engine]["compile_ms"]
    common = written["first_use_common"]
    walked_by_all = [
        r
        for r in written["schemas"]
        if all(r[e]["status"] == "ok" for e in ("treegram", "xgrammar", "llguidance"))
    ]
    assert common["n_schemas"] == len(walked_by_all)
    if walked_by_all:
        assert common["ratio_to_xgrammar"]["xgrammar"] == 1.0
    assert result["meta"]["n_schemas"] == 3
    # the repeat of the whole run: the same schemas again, its figures and their spread
    assert written["meta"]["repeats"] == 2 and len(written["repeats"]) == 2
    workers = ("worker_restarts", "worker_start_s", "treegram_file")  # the run's, not a repeat's
    for engine, stats in written["engines"].items():
        first = written["repeats"][0]["engines"][engine]
        assert {k: v for k, v in stats.items() if k not in workers} == first
    for rep in written["repeats"]:
        assert [r["file"] for r in rep["schemas"]] == [r["file"] for r in written["schemas"]]
        for engine in ("treegram", "xgrammar", "llguidance"):
            stats = rep["engines"][engine]
            if stats["n_masks"]:
                assert stats["mask_us_p50"] <= stats["mask_us_p99"] <= stats["mask_us_p999"]
                assert stats["mask_us_p999"] <= stats["mask_us_max"]
    for engine in ("treegram", "xgrammar", "llguidance"):
        spread = written["spread"][engine]["mask_us_mean"]
        assert len(spread["values"]) == 2
        if "max_over_min" in spread:
            assert spread["max_over_min"] >= 1.0


def test_spread_takes_held_out_files_evenly(bench, tmp_path):
    names = [f"f{i:04d}.json" for i in range(100)]
    for name in names:
        (tmp_path / name).write_text("{}", encoding="utf-8")
    files = [f.name for f in bench.list_files(tmp_path, 1, None, spread=30)]
    assert len(files) == len(set(files)) == 30
    tuned = set(names[:: bench.DEFAULT_EVERY])
    assert not tuned & set(files)  # none of the default subset's files
    assert files == sorted(files)
    assert files[0] == "f0001.json" and files[-1] >= "f0090.json"  # spread to the end
    # asking for more than there are takes every held-out file once
    assert len(bench.list_files(tmp_path, 1, None, spread=1000)) == 100 - len(tuned)


def test_spread_between_repeats(bench):
    keys = bench.SPREAD_KEYS
    first = {"e": {k: 2.0 for k in keys}}
    second = {"e": {k: 3.0 for k in keys}}
    second["e"]["timeouts"] = 0
    out = bench.spread_between_repeats([first, second])
    assert out["e"]["mask_us_mean"] == {"values": [2.0, 3.0], "max_over_min": 1.5}
    assert "max_over_min" not in out["e"]["timeouts"]


def test_walk_flags_a_masked_token(bench):
    class Fake:
        words = bench.np.zeros(2, dtype=bench.np.int32)

        def fill(self, matcher):
            self.words[:] = 0
            self.words[0] = 1 << 3  # only token 3 allowed

        def accept(self, matcher, token):
            return True

        def reset(self, matcher):
            pass

    assert bench._walk(Fake(), None, [3, 3], 3)["accepted"]
    r = bench._walk(Fake(), None, [3, 4], 3)
    assert not r["accepted"] and r["step"] == 1 and r["why"] == "masked"
    assert not bench._walk(Fake(), None, [3], 5)["accepted"]  # stop token masked
