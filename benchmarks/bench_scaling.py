#!/usr/bin/env python
"""Hostile scaling: treegram vs xgrammar on grammars that grow with one size parameter.

Families (DeepSeek-V4 vocabulary by default; xgrammar gets treegram's decoded bytes with
``VocabType.RAW``, as in ``bench_maskbench.py``):

- ``optional``: a flat JSON Schema object with N optional integer properties;
- ``recursion``: ``root ::= stmt root | stmt`` over N six-byte statements (``a=00;\\n``);
  besides compile and first mask, the whole input is accepted (``accept_string``) and one
  more mask filled;
- ``nullable``: a chain of N nullable rules ``r_i ::= r_{i+1} | ""`` (``root ::= r0 "x"``);
- ``maxlength``: ``{"type": "string", "maxLength": N}``;
- ``maxlength_pattern``: the same with ``"pattern": "^[a-z0-9 ]*$"``.

Per engine, family and size: compile (caching disabled) and the first mask (a new
matcher's ``fill_next_token_bitmask``), plus accept and the mask after it for
``recursion``. Each engine runs in its own worker process (started once); a case that
exceeds ``--timeout`` seconds is recorded as a timeout and the worker restarted, so one
hang does not stall the run. A case whose first run is cheap (under
``--repeat-below`` seconds) is repeated ``--repeats`` times and the median reported.

Prints a table, writes ``benchmarks/results/scaling.json`` and, when matplotlib is
importable, a log-log plot of time against size per family and engine
(``benchmarks/results/scaling.png``).

Run from the repository root: ``python benchmarks/bench_scaling.py --help``.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import load_average, pyplot, run_meta, save_figure, write_json, xgrammar_like  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
DEFAULT_OUTPUT = REPO / "benchmarks" / "results" / "scaling.json"
ENGINES = ("treegram", "xgrammar")
FAMILIES = ("optional", "recursion", "nullable", "maxlength", "maxlength_pattern")
DEFAULT_SIZES = {
    "optional": [10, 30, 100, 300, 1000],
    "recursion": [500, 1000, 2000, 4000, 8000],
    "nullable": [500, 1000, 2000, 4000],
    "maxlength": [10, 100, 1000, 10000],
    "maxlength_pattern": [10, 100, 1000, 10000],
}
PHASES = ("compile_s", "first_mask_s", "accept_s", "mask_after_s")


# ------------------------------------------------------------------------------- the cases


def statement(i: int) -> str:
    """The i-th six-byte statement of the ``recursion`` input."""
    return f"{chr(97 + i % 26)}={i % 100:02d};\n"


def case_source(family: str, n: int) -> tuple[str, str, str | None]:
    """``(kind, source, input)``: kind ``"schema"`` or ``"ebnf"``, the input to accept."""
    if family == "optional":
        props = {f"p{i}": {"type": "integer"} for i in range(n)}
        return "schema", json.dumps({"type": "object", "properties": props}), None
    if family == "recursion":
        ebnf = 'root ::= stmt root | stmt\nstmt ::= [a-z] "=" [0-9] [0-9] ";" "\\n"\n'
        return "ebnf", ebnf, "".join(statement(i) for i in range(n))
    if family == "nullable":
        lines = ['root ::= r0 "x"'] + [f'r{i} ::= r{i + 1} | ""' for i in range(n)]
        lines.append(f'r{n} ::= "a"')
        return "ebnf", "\n".join(lines) + "\n", None
    if family == "maxlength":
        return "schema", json.dumps({"type": "string", "maxLength": n}), None
    if family == "maxlength_pattern":
        return (
            "schema",
            json.dumps({"type": "string", "maxLength": n, "pattern": "^[a-z0-9 ]*$"}),
            None,
        )
    raise ValueError(f"unknown family {family!r}")


# ------------------------------------------------------------------------------ worker side


def _vocab(kind: str):
    import treegram

    if kind == "deepseek":
        return treegram.TokenizerInfo.deepseek_v4()
    vocab = [bytes([b]) for b in range(256)] + [b"<eos>"]
    return treegram.TokenizerInfo(vocab, stop_token_ids=[256])


class _Engine:
    """One engine's compiler, matcher class and bitmask (treegram mirrors xgrammar's API)."""

    def __init__(self, module, compiler, bitmask) -> None:
        self.module = module
        self.compiler = compiler
        self.bitmask = bitmask

    def compile(self, kind: str, source: str):
        if kind == "schema":
            return self.compiler.compile_json_schema(source)
        return self.compiler.compile_grammar(source)

    def matcher(self, compiled):
        return self.module.GrammarMatcher(compiled)

    def fill(self, matcher) -> None:
        matcher.fill_next_token_bitmask(self.bitmask, 0)

    def accept(self, matcher, text: str) -> bool:
        return bool(matcher.accept_string(text))


def _treegram(vocab: str) -> _Engine:
    import treegram

    info = _vocab(vocab)
    return _Engine(
        treegram,
        treegram.GrammarCompiler(info, cache_enabled=False),
        treegram.allocate_token_bitmask(1, info.vocab_size, backend="numpy"),
    )


def _xgrammar(vocab: str) -> _Engine:
    import xgrammar

    return _Engine(xgrammar, *xgrammar_like(_vocab(vocab)))


def measure_once(engine, family: str, n: int) -> dict:
    """One compile, first mask and (``recursion``) accept + mask, in seconds."""
    kind, source, text = case_source(family, n)
    t0 = time.perf_counter()
    compiled = engine.compile(kind, source)
    t1 = time.perf_counter()
    matcher = engine.matcher(compiled)
    engine.fill(matcher)
    t2 = time.perf_counter()
    out = {"compile_s": t1 - t0, "first_mask_s": t2 - t1}
    if text is not None:
        ok = engine.accept(matcher, text)
        t3 = time.perf_counter()
        engine.fill(matcher)
        t4 = time.perf_counter()
        if not ok:
            raise RuntimeError("the input was rejected")
        out.update(accept_s=t3 - t2, mask_after_s=t4 - t3)
    return out


def worker_main(name: str, vocab: str) -> None:
    """Read one JSON job per line from stdin, answer one JSON result per line."""
    engine = {"treegram": _treegram, "xgrammar": _xgrammar}[name](vocab)
    measure_once(engine, "optional", 2)  # warm-up: first calls compile kernels
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        job = json.loads(line)
        try:
            runs = [measure_once(engine, job["family"], job["size"])]
            total = sum(runs[0].values())
            if total < job["repeat_below"]:
                runs += [
                    measure_once(engine, job["family"], job["size"])
                    for _ in range(job["repeats"] - 1)
                ]
            res = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
            res.update(status="ok", runs=len(runs))
        except Exception as exc:  # noqa: BLE001 - reported, the run goes on
            res = {"status": "error", "error": f"{type(exc).__name__}: {exc}"[:300]}
        print(json.dumps(res), flush=True)


# ------------------------------------------------------------------------------ parent side


class Worker:
    """One engine's worker process, restarted after a timeout."""

    def __init__(self, name: str, vocab: str, start_timeout: float) -> None:
        self.name, self.vocab, self.start_timeout = name, vocab, start_timeout
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        env = dict(
            os.environ,
            PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]).rstrip(
                os.pathsep
            ),
        )
        self.proc = subprocess.Popen(
            [
                sys.executable,
                str(Path(__file__).resolve()),
                "--worker",
                self.name,
                "--vocab",
                self.vocab,
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
            cwd=REPO,
        )
        if self._read(self.start_timeout) is None:
            self.stop()
            raise RuntimeError(f"{self.name} worker did not start")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None

    def _read(self, timeout: float) -> dict | None:
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not ready:
            return None
        line = self.proc.stdout.readline()
        return json.loads(line) if line else None

    def run(self, job: dict, timeout: float) -> dict:
        if self.proc is None:
            self.start()
        self.proc.stdin.write(json.dumps(job) + "\n")
        self.proc.stdin.flush()
        res = self._read(timeout)
        if res is None:
            self.stop()  # a hang or a crash: the next case gets a fresh worker
            return {"status": "timeout", "error": f"no answer within {timeout:g} s"}
        return res


def format_table(results: list[dict], engines: list[str]) -> str:
    """Compile + first mask per size (and accept + mask for ``recursion``) per engine."""
    head = f"{'family':<18} {'size':>6}"
    for e in engines:
        head += f" | {e + ' compile+mask':>22} {'accept+mask':>12}"
    rows = [head, "-" * len(head)]
    keyed = {(r["engine"], r["family"], r["size"]): r for r in results}
    cases = sorted(
        {(r["family"], r["size"]) for r in results}, key=lambda c: (FAMILIES.index(c[0]), c[1])
    )
    for family, size in cases:
        row = f"{family:<18} {size:>6}"
        for e in engines:
            r = keyed.get((e, family, size))
            if r is None or r["status"] != "ok":
                status = "-" if r is None else r["status"]
                row += f" | {status:>22} {'':>12}"
                continue
            first = f"{(r['compile_s'] + r['first_mask_s']) * 1e3:.1f} ms"
            after = f"{(r['accept_s'] + r['mask_after_s']) * 1e3:.1f} ms" if "accept_s" in r else ""
            row += f" | {first:>22} {after:>12}"
        rows.append(row)
    return "\n".join(rows)


def plot(results: list[dict], engines: list[str], path: Path) -> bool:
    """Log-log time (compile + first mask, plus accept for ``recursion``) against size;
    ``False`` when matplotlib is not importable."""
    plt = pyplot()
    if plt is None:
        return False
    families = [f for f in FAMILIES if any(r["family"] == f for r in results)]
    fig, axes = plt.subplots(1, len(families), figsize=(4.2 * len(families), 3.8), squeeze=False)
    for ax, family in zip(axes[0], families, strict=True):
        for engine in engines:
            pts = sorted(
                (r["size"], sum(r.get(k, 0.0) for k in PHASES))
                for r in results
                if r["engine"] == engine and r["family"] == family and r["status"] == "ok"
            )
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=engine)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_title(family)
        ax.set_xlabel("size")
        ax.set_ylabel("seconds")
        ax.grid(True, which="both", alpha=0.3)
        if ax.get_legend_handles_labels()[0]:  # no engine may have finished any size
            ax.legend()
    save_figure(fig, path)
    return True


def _sizes(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--engines",
        default=",".join(ENGINES),
        help="comma-separated engines (default: %(default)s)",
    )
    p.add_argument(
        "--families", default=",".join(FAMILIES), help="comma-separated families (default: all)"
    )
    for family in FAMILIES:
        p.add_argument(
            f"--sizes-{family.replace('_', '-')}",
            type=_sizes,
            default=DEFAULT_SIZES[family],
            help=f"sizes for {family} (default: {','.join(map(str, DEFAULT_SIZES[family]))})",
        )
    p.add_argument(
        "--timeout",
        type=float,
        default=60.0,
        help="seconds per case before the worker is restarted (default: 60)",
    )
    p.add_argument(
        "--repeats",
        type=int,
        default=3,
        help="runs per case whose first run is cheap; median reported",
    )
    p.add_argument(
        "--repeat-below",
        type=float,
        default=2.0,
        help="a case is repeated only when its first run took less (seconds)",
    )
    p.add_argument(
        "--vocab",
        choices=("deepseek", "bytes"),
        default="deepseek",
        help="DeepSeek-V4 (default) or 256 single-byte tokens (smoke tests)",
    )
    p.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    p.add_argument(
        "--plot", type=Path, default=None, help="PNG path (default: the output path with .png)"
    )
    p.add_argument("--worker", help=argparse.SUPPRESS)
    return p


def main(argv: list[str] | None = None) -> dict:
    args = build_parser().parse_args(argv)
    if args.worker:
        worker_main(args.worker, args.vocab)
        return {}
    engines = [e for e in args.engines.split(",") if e]
    families = [f for f in args.families.split(",") if f]
    for name in engines:
        if name not in ENGINES:
            raise SystemExit(f"unknown engine {name!r} (choose from {', '.join(ENGINES)})")
    for family in families:
        if family not in FAMILIES:
            raise SystemExit(f"unknown family {family!r} (choose from {', '.join(FAMILIES)})")
    load_start = load_average()
    workers = {e: Worker(e, args.vocab, max(args.timeout, 120.0)) for e in engines}
    results: list[dict] = []
    try:
        for family in families:
            for size in getattr(args, f"sizes_{family}"):
                job = {
                    "family": family,
                    "size": size,
                    "repeats": args.repeats,
                    "repeat_below": args.repeat_below,
                }
                for engine in engines:  # interleaved: machine noise hits both alike
                    res = workers[engine].run(job, args.timeout)
                    results.append({"engine": engine, "family": family, "size": size, **res})
                    print(
                        f"  {engine:<9} {family:<18} {size:>6}: {res['status']}",
                        file=sys.stderr,
                        flush=True,
                    )
    finally:
        for w in workers.values():
            w.stop()
    out = {
        "meta": {
            **run_meta(argv, load_start, date=False, flat=True),
            "vocab": args.vocab,
            "timeout_s": args.timeout,
            "repeats": args.repeats,
            "repeat_below_s": args.repeat_below,
        },
        "results": results,
    }
    print(format_table(results, engines))
    png = args.plot if args.plot is not None else args.output.with_suffix(".png")
    out["meta"]["plot"] = str(png) if plot(results, engines, png) else None
    if out["meta"]["plot"] is None:
        print("matplotlib is not importable: no plot written", file=sys.stderr)
    write_json(args.output, out, indent=1, strict=False)
    return out


if __name__ == "__main__":
    main()
