"""Smoke test: benchmarks/bench_startup.py runs end to end with one fresh process of
treegram (no timing asserted; the wheel install and the cold JIT are left to real runs)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_startup.py"


def _load():
    spec = importlib.util.spec_from_file_location("bench_startup", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_runs_one_fresh_process(tmp_path):
    out = tmp_path / "startup.json"
    result = _load().main(
        ["--repeats", "1", "--cold-repeats", "0", "--engines", "treegram", "--output", str(out)]
    )
    row = result["fresh_process"]["treegram"]
    marks = [row[k] for k in ("import", "vocabulary", "compile", "first_mask")]
    assert marks == sorted(marks) and row["process_wall"] >= marks[-1]
    assert row["kernels_compiled"] + row["kernels_loaded"] > 0
    assert json.loads(out.read_text())["meta"]["repeats"] == 1
