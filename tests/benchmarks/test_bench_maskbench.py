"""Smoke test: benchmarks/bench_maskbench.py runs end to end on 3 schemas (no timing asserted)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

pytest.importorskip("xgrammar")
pytest.importorskip("llguidance")
pytest.importorskip("tokenizers")

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_maskbench.py"
COUNTS = (
    "schemas",
    "passing",
    "compile_errors",
    "timeouts",
    "validation_errors",
    "invalidation_errors",
)


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_maskbench", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_runs_on_three_schemas(bench, tmp_path):
    if not bench.DEFAULT_DATA.is_dir():
        pytest.skip(f"no MaskBench data at {bench.DEFAULT_DATA}")
    out = tmp_path / "mb.json"
    result = bench.main(
        ["--limit", "3", "--every", "1", "--timeout", "60", "--quiet", "--output", str(out)]
    )
    written = json.loads(out.read_text(encoding="utf-8"))
    assert set(written) >= {"meta", "engines", "schemas"}
    assert written["meta"]["n_schemas"] == 3 and written["meta"]["vocab_size"] == 129280
    assert len(written["schemas"]) == 3
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
