#!/usr/bin/env python
"""Compile time per JSON Schema, by stage: treegram beside xgrammar, DeepSeek-V4 vocabulary.

For every k-th MaskBench file, treegram's compile is timed in its three stages (the JSON
Schema frontend ``Grammar.from_json_schema``, the automaton ``build_automaton``, and the
``CompiledGrammar`` with its token tables), and xgrammar's ``compile_json_schema`` (caching
off) as a whole; both with ``any_whitespace=True, strict_mode=False``. Each schema is
compiled ``--repeat`` times and the fastest run kept (the machine may be shared; the best
of a few runs is the least disturbed one). Prints medians and tails with the ratio to
xgrammar, and writes them with every schema's figures as JSON.

MaskBench's own compile column (``bench_maskbench.py``) also holds matcher creation and
runs each compile once; this script says where a compile's time goes.

Run from the repository root: ``python benchmarks/bench_compile.py --help``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (  # noqa: E402  (a sibling script module)
    command_line,
    load_average,
    machine_meta,
    package_versions,
    xgrammar_like,
)

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DATA = REPO.parent / "shared" / "data" / "maskbench-sample"
DEFAULT_OUTPUT = REPO / "benchmarks" / "results" / "compile.json"
STAGES = ("frontend", "automaton", "tables")
OPTIONS = {"any_whitespace": True, "strict_mode": False}


def _best(run, repeat: int) -> tuple[float, ...] | None:
    """The fastest of ``repeat`` runs of ``run`` (a tuple of stage times), or None when it
    raises. A run slower than a second is not repeated."""
    best = None
    for _ in range(repeat):
        try:
            times = run()
        except Exception:  # noqa: BLE001 - a schema an engine refuses has no time
            return None
        best = times if best is None else tuple(min(a, b) for a, b in zip(best, times, strict=True))
        if sum(times) > 1.0:
            break
    return best


def _treegram_run(tg, build_automaton, info, schema: str):
    def run() -> tuple[float, float, float]:
        t0 = time.perf_counter()
        grammar = tg.Grammar.from_json_schema(schema, **OPTIONS)
        t1 = time.perf_counter()
        automaton = build_automaton(grammar.ir)
        t2 = time.perf_counter()
        tg.CompiledGrammar(grammar, info, automaton)
        return t1 - t0, t2 - t1, time.perf_counter() - t2

    return run


def _xgrammar_run(compiler, schema: str):
    def run() -> tuple[float]:
        t0 = time.perf_counter()
        compiler.compile_json_schema(schema, **OPTIONS)
        return (time.perf_counter() - t0,)

    return run


def _summary(values: list[float]) -> dict[str, float]:
    a = np.asarray(values) * 1e3
    return {
        "p50_ms": float(np.median(a)),
        "p90_ms": float(np.percentile(a, 90)),
        "p99_ms": float(np.percentile(a, 99)),
        "mean_ms": float(a.mean()),
        "max_ms": float(a.max()),
    }


def main(argv: list[str] | None = None) -> dict:
    """Run the benchmark; returns what it writes."""
    ap = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA, help="folder of MaskBench *.json")
    ap.add_argument("--every", type=int, default=12, help="take every k-th file in sorted order")
    ap.add_argument("--limit", type=int, default=None, help="at most N schemas (after --every)")
    ap.add_argument("--repeat", type=int, default=3, help="compiles per schema; the best is kept")
    ap.add_argument("--no-xgrammar", action="store_true", help="time treegram only")
    ap.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help="result JSON file")
    args = ap.parse_args(argv)
    if args.every < 1 or args.repeat < 1:
        ap.error("--every and --repeat must be >= 1")
    files = sorted(args.data.glob("*.json"))[:: args.every][: args.limit]
    if not files:
        ap.error(f"no MaskBench *.json files in {args.data}")

    import treegram as tg
    from treegram.automaton import build_automaton

    load_start = load_average()
    info = tg.TokenizerInfo.deepseek_v4()
    xgc = None if args.no_xgrammar else xgrammar_like(info)[0]
    warm = json.dumps({"type": "object", "properties": {"a": {"type": "string"}}})
    _treegram_run(tg, build_automaton, info, warm)()  # JIT and tables before timing
    if xgc is not None:
        _xgrammar_run(xgc, warm)()

    rows = []
    for path in files:
        schema = json.dumps(json.loads(path.read_text())["schema"])
        tg_times = _best(_treegram_run(tg, build_automaton, info, schema), args.repeat)
        xg_times = None if xgc is None else _best(_xgrammar_run(xgc, schema), args.repeat)
        rows.append(
            {
                "file": path.name,
                "treegram_ms": None if tg_times is None else [t * 1e3 for t in tg_times],
                "xgrammar_ms": None if xg_times is None else xg_times[0] * 1e3,
            }
        )

    done = [r for r in rows if r["treegram_ms"] is not None]
    stages = {
        name: _summary([r["treegram_ms"][k] / 1e3 for r in done]) for k, name in enumerate(STAGES)
    }
    stages["total"] = _summary([sum(r["treegram_ms"]) / 1e3 for r in done])
    both = [r for r in done if r["xgrammar_ms"] is not None]
    result = {
        "meta": {
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "command": command_line(argv),
            "versions": package_versions(),
            "machine": machine_meta(load_start),
            "data": str(args.data),
            "files": len(files),
            "repeat": args.repeat,
            "options": OPTIONS,
        },
        "treegram": {"compiled": len(done), "stages": stages},
        "xgrammar": None,
        "rows": rows,
    }
    print(f"{len(done)} of {len(files)} schemas compiled by treegram (best of {args.repeat})")
    print(f"{'stage':<12}{'p50 ms':>10}{'p90 ms':>10}{'p99 ms':>10}{'max ms':>10}")
    for name, s in stages.items():
        print(
            f"{name:<12}{s['p50_ms']:>10.2f}{s['p90_ms']:>10.1f}{s['p99_ms']:>10.1f}{s['max_ms']:>10.1f}"
        )
    if both:
        tg_total = [sum(r["treegram_ms"]) / 1e3 for r in both]
        xg_total = [r["xgrammar_ms"] / 1e3 for r in both]
        ratios = np.asarray(tg_total) / np.asarray(xg_total)
        result["xgrammar"] = {
            "compiled_by_both": len(both),
            "treegram_total": _summary(tg_total),
            "xgrammar_total": _summary(xg_total),
            "median_ratio_treegram_over_xgrammar": float(np.median(ratios)),
        }
        x = result["xgrammar"]
        print(
            f"on the {len(both)} schemas both compile: treegram p50 "
            f"{x['treegram_total']['p50_ms']:.2f} ms, xgrammar p50 "
            f"{x['xgrammar_total']['p50_ms']:.2f} ms; median per-schema ratio "
            f"treegram/xgrammar {x['median_ratio_treegram_over_xgrammar']:.3f}"
        )
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {args.output}")
    return result


if __name__ == "__main__":
    main()
