#!/usr/bin/env python
"""Compile time per JSON Schema, by stage: treegram beside xgrammar, DeepSeek-V4 vocabulary.

For every k-th MaskBench file (``--every 1``: the whole sample), treegram's compile is timed
in its three stages (the JSON Schema frontend ``Grammar.from_json_schema``, the automaton
``build_automaton``, and the ``CompiledGrammar`` with its token tables), and xgrammar's
``compile_json_schema`` (caching off) as a whole; both with ``any_whitespace=True,
strict_mode=False``. Each schema is compiled ``--repeat`` times and the fastest run kept
(the machine may be shared; the best of a few runs is the least disturbed one). Times are
wall time, or with ``--clock cpu`` the process's CPU time (helper threads included: deep
schemas are converted on one), which other jobs on a shared machine disturb less. The
compiles run in a worker process: a schema past ``--timeout`` seconds is recorded as a
timeout (and counted apart), the worker restarted. Prints medians and tails with the ratio
to xgrammar, and writes them with every schema's figures as JSON.

MaskBench's own compile column (``bench_maskbench.py``) also holds matcher creation and
runs each compile once; this script says where a compile's time goes.

Run from the repository root: ``python benchmarks/bench_compile.py --help``.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import load_average, run_meta, write_results, xgrammar_like  # noqa: E402

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


def _treegram_run(tg, build_automaton, info, schema: str, clock=time.perf_counter):
    def run() -> tuple[float, float, float]:
        t0 = clock()
        grammar = tg.Grammar.from_json_schema(schema, **OPTIONS)
        t1 = clock()
        automaton = build_automaton(grammar.ir)
        t2 = clock()
        tg.CompiledGrammar(grammar, info, automaton)
        return t1 - t0, t2 - t1, clock() - t2

    return run


def _xgrammar_run(compiler, schema: str, clock=time.perf_counter):
    def run() -> tuple[float]:
        t0 = clock()
        compiler.compile_json_schema(schema, **OPTIONS)
        return (clock() - t0,)

    return run


def _worker(conn, with_xgrammar: bool, repeat: int, cpu: bool) -> None:
    """Compile the schemas the parent sends, answering with their best times; warmed up
    first (kernels compiled, vocabulary tables built)."""
    import warnings

    import treegram as tg
    from treegram.automaton import build_automaton

    warnings.simplefilter("ignore")  # unknown formats are annotations: said once per schema
    clock = time.process_time if cpu else time.perf_counter
    info = tg.TokenizerInfo.deepseek_v4()
    xgc = xgrammar_like(info)[0] if with_xgrammar else None
    warm = json.dumps({"type": "object", "properties": {"a": {"type": "string"}}})
    _treegram_run(tg, build_automaton, info, warm)()
    if xgc is not None:
        _xgrammar_run(xgc, warm)()
    conn.send("ready")
    while True:
        schema = conn.recv()
        if schema is None:
            return
        tg_times = _best(_treegram_run(tg, build_automaton, info, schema, clock), repeat)
        xg_times = None if xgc is None else _best(_xgrammar_run(xgc, schema, clock), repeat)
        conn.send((tg_times, xg_times))


class _Worker:
    """The worker process, restarted after a timeout."""

    def __init__(self, with_xgrammar: bool, repeat: int, cpu: bool) -> None:
        self.args = (with_xgrammar, repeat, cpu)
        self.proc = None
        self.conn = None

    def compile(self, schema: str, timeout: float):
        if self.proc is None:
            ctx = multiprocessing.get_context("spawn")
            self.conn, child = ctx.Pipe()
            self.proc = ctx.Process(target=_worker, args=(child, *self.args), daemon=True)
            self.proc.start()
            if self.conn.recv() != "ready":  # pragma: no cover - the worker died
                raise RuntimeError("the compile worker did not start")
        start = time.perf_counter()
        self.conn.send(schema)
        if self.conn.poll(timeout):
            got = self.conn.recv()
            # an answer read after the deadline (the parent was descheduled) is still late
            if time.perf_counter() - start <= timeout:
                return got
            return "timeout"
        self.stop(kill=True)
        return "timeout"

    def stop(self, kill: bool = False) -> None:
        if self.proc is None:
            return
        if kill:
            self.proc.kill()
        else:
            self.conn.send(None)
        self.proc.join()
        self.proc = self.conn = None


def _summary(values: list[float]) -> dict[str, float]:
    if not values:
        return {k: float("nan") for k in ("p50_ms", "p90_ms", "p99_ms", "mean_ms", "max_ms")}
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
    ap.add_argument(
        "--only", nargs="*", default=[], help="run only these file names (before --every)"
    )
    ap.add_argument("--repeat", type=int, default=3, help="compiles per schema; the best is kept")
    ap.add_argument("--no-xgrammar", action="store_true", help="time treegram only")
    ap.add_argument(
        "--clock", choices=("wall", "cpu"), default="wall", help="wall time or process CPU time"
    )
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds per schema (both engines)")
    ap.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help="result JSON file")
    args = ap.parse_args(argv)
    if args.every < 1 or args.repeat < 1:
        ap.error("--every and --repeat must be >= 1")
    files = sorted(args.data.glob("*.json"))
    if args.only:
        files = [f for f in files if f.name in args.only]
    files = files[:: args.every][: args.limit]
    if not files:
        ap.error(f"no MaskBench *.json files in {args.data}")

    load_start = load_average()
    worker = _Worker(not args.no_xgrammar, args.repeat, args.clock == "cpu")
    rows = []
    try:
        for path in files:
            schema = json.dumps(json.loads(path.read_text())["schema"])
            got = worker.compile(schema, args.timeout)
            timed_out = got == "timeout"
            tg_times, xg_times = (None, None) if timed_out else got
            rows.append(
                {
                    "file": path.name,
                    "treegram_ms": None if tg_times is None else [t * 1e3 for t in tg_times],
                    "xgrammar_ms": None if xg_times is None else xg_times[0] * 1e3,
                    "timeout": timed_out,
                }
            )
    finally:
        worker.stop()

    done = [r for r in rows if r["treegram_ms"] is not None]
    stages = {
        name: _summary([r["treegram_ms"][k] / 1e3 for r in done]) for k, name in enumerate(STAGES)
    }
    stages["total"] = _summary([sum(r["treegram_ms"]) / 1e3 for r in done])
    both = [r for r in done if r["xgrammar_ms"] is not None]
    result = {
        "meta": {
            **run_meta(argv, load_start),
            "data": str(args.data),
            "files": len(files),
            "repeat": args.repeat,
            "clock": args.clock,
            "timeout_s": args.timeout,
            "options": OPTIONS,
        },
        "treegram": {
            "compiled": len(done),
            "timeouts": [r["file"] for r in rows if r["timeout"]],
            "stages": stages,
        },
        "xgrammar": None,
        "rows": rows,
    }
    n_timeouts = sum(r["timeout"] for r in rows)
    print(
        f"{len(done)} of {len(files)} schemas compiled by treegram (best of {args.repeat}, "
        f"{args.clock} time); {n_timeouts} past the {args.timeout:g} s limit"
    )
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
    write_results(args.output, result, indent=1, strict=False)
    return result


if __name__ == "__main__":
    main()
