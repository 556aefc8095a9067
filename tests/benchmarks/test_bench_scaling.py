"""Smoke test: benchmarks/bench_scaling.py runs end to end at tiny sizes (no timing asserted)."""

from __future__ import annotations

import pytest
from bench_setup import benchmark_fixture, read_json

pytest.importorskip("xgrammar")
pytest.importorskip("tokenizers")

TINY = [
    "--sizes-optional",
    "2,4",
    "--sizes-recursion",
    "3,6",
    "--sizes-nullable",
    "3,6",
    "--sizes-maxlength",
    "3,5",
    "--sizes-maxlength-pattern",
    "3",
    "--repeats",
    "2",
]


bench = benchmark_fixture("bench_scaling")


def test_runs_at_tiny_sizes(bench, tmp_path, capsys):
    out = tmp_path / "scaling.json"
    result = bench.main([*TINY, "--output", str(out), "--timeout", "120"])
    written = read_json(out)
    assert written["meta"]["vocab"] == "deepseek"
    rows = written["results"]
    assert len(rows) == 2 * 9  # two engines, nine family/size cases
    by_key = {(r["engine"], r["family"], r["size"]): r for r in rows}
    for engine in ("treegram", "xgrammar"):
        for family, size in [
            ("optional", 2),
            ("optional", 4),
            ("recursion", 3),
            ("recursion", 6),
            ("nullable", 3),
            ("nullable", 6),
            ("maxlength", 3),
            ("maxlength", 5),
        ]:
            r = by_key[(engine, family, size)]
            assert r["status"] == "ok", r
            assert r["compile_s"] > 0 and r["first_mask_s"] > 0
            assert ("accept_s" in r) == (family == "recursion")
        assert by_key[(engine, "maxlength_pattern", 3)]["status"] in ("ok", "error")
    assert by_key[("treegram", "maxlength_pattern", 3)]["status"] == "ok"
    table = capsys.readouterr().out
    assert "recursion" in table and "treegram compile+mask" in table
    assert result["results"] == rows
    png = out.with_suffix(".png")
    assert png.exists() == (written["meta"]["plot"] is not None)


def test_a_slow_case_times_out_and_the_run_goes_on(bench, tmp_path):
    out = tmp_path / "scaling.json"
    # 300 properties take tens of milliseconds to compile: far past a 1 ms timeout
    bench.main(
        [
            "--engines", "treegram",
            "--families", "optional,nullable",
            "--sizes-optional", "300",
            "--sizes-nullable", "3",
            "--timeout", "0.001",
            "--vocab", "bytes",
            "--output", str(out),
            "--plot", str(tmp_path / "p.png"),
        ]
    )  # fmt: skip
    rows = read_json(out)["results"]
    assert [r["family"] for r in rows] == ["optional", "nullable"]
    assert rows[0]["status"] == "timeout"
    assert rows[1]["status"] in ("ok", "timeout")  # a fresh worker answered or timed out


def test_recursion_input_is_six_byte_statements(bench):
    kind, source, text = bench.case_source("recursion", 40)
    assert kind == "ebnf" and "root ::= stmt root | stmt" in source
    assert len(text) == 6 * 40 and all(bench.statement(i) in text for i in range(40))
