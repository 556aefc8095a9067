#!/usr/bin/env python
"""treegram vs xgrammar: applying a token bitmask to CPU logits in place, one process.

For each batch size (default 1, 16, 64) on a vocabulary of ``--vocab`` tokens (default
129,280, DeepSeek-V4's), both engines mask the same float32 logits with the same random
bitmask (each bit set with probability ``--density``):

- treegram: ``treegram.serving.apply_token_bitmask_inplace(..., backend="torch")``;
- xgrammar: ``xgrammar.apply_token_bitmask_inplace`` (its C++ CPU kernel, one thread).

torch runs on ``--threads`` intra-op threads (default 1, like for like; 0 keeps torch's
default, which on a busy machine can stall a parallel region for a scheduler time slice).

Each of ``--runs`` rounds restores the logits (untimed) and times one call per engine, the
engines alternating which goes first; the headline is the median per engine, reported as
milliseconds, rows per second and effective bandwidth ((logits + bitmask bytes) / time).
Both outputs are compared after every call (a mismatch is counted and fails the run).

Run from the repository root: ``python benchmarks/bench_apply.py --help``.
"""

from __future__ import annotations

import argparse
import datetime
import statistics
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import arg_parser, command_line, package_versions, platform_meta, write_results  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
DEFAULT_OUTPUT = REPO / "benchmarks" / "results" / "apply.json"
ENGINES = ("treegram", "xgrammar")


def _random_bitmask(rng: np.random.Generator, rows: int, vocab: int, density: float):
    import torch

    from treegram.serving import bool_tensor_to_bitmask

    allowed = torch.from_numpy(rng.random((rows, vocab)) < density)
    return bool_tensor_to_bitmask(allowed)


def measure(batch: int, vocab: int, runs: int, density: float, seed: int) -> dict[str, Any]:
    """Time both engines on one (batch, vocab) shape; return per-engine stats."""
    import torch
    import xgrammar as xgr

    from treegram.serving import apply_token_bitmask_inplace

    rng = np.random.default_rng(seed)
    base = torch.from_numpy(rng.standard_normal((batch, vocab), dtype=np.float32))
    bitmask = _random_bitmask(rng, batch, vocab, density)
    work = {name: base.clone() for name in ENGINES}
    calls = {
        "treegram": lambda t: apply_token_bitmask_inplace(t, bitmask, backend="torch"),
        "xgrammar": lambda t: xgr.apply_token_bitmask_inplace(t, bitmask),
    }
    samples: dict[str, list[int]] = {name: [] for name in ENGINES}
    mismatches = 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an unexpected narrow-mask warning is a setup bug
        for name in ENGINES:  # warm-up: first-call costs (imports, allocator) are not timed
            calls[name](work[name])
        for run in range(runs):
            order = ENGINES if run % 2 == 0 else ENGINES[::-1]
            for name in order:
                work[name].copy_(base)
                start = time.perf_counter_ns()
                calls[name](work[name])
                samples[name].append(time.perf_counter_ns() - start)
            if not torch.equal(work["treegram"], work["xgrammar"]):
                mismatches += 1
    nbytes = base.numel() * base.element_size() + bitmask.numel() * bitmask.element_size()
    result: dict[str, Any] = {
        "batch": batch,
        "vocab": vocab,
        "bytes": nbytes,
        "mismatches": mismatches,
    }
    for name in ENGINES:
        median_s = statistics.median(samples[name]) / 1e9
        result[name] = {
            "median_ms": median_s * 1e3,
            "p10_ms": float(np.percentile(samples[name], 10)) / 1e6,
            "p90_ms": float(np.percentile(samples[name], 90)) / 1e6,
            "rows_per_s": batch / median_s,
            "gb_per_s": nbytes / median_s / 1e9,
            "samples_ms": [round(x / 1e6, 4) for x in samples[name]],
        }
    result["ratio_tg_over_xg"] = result["treegram"]["median_ms"] / result["xgrammar"]["median_ms"]
    return result


def format_table(results: dict) -> str:
    header = (
        f"{'batch':>5}  {'engine':<9}  {'median ms':>9}  {'p10 ms':>8}  {'p90 ms':>8}  "
        f"{'rows/s':>10}  {'GB/s':>6}  {'tg/xg':>6}"
    )
    lines = [header, "-" * len(header)]
    for row in results["shapes"]:
        for name in ENGINES:
            r = row[name]
            ratio = f"{row['ratio_tg_over_xg']:.2f}" if name == "treegram" else ""
            lines.append(
                f"{row['batch']:>5}  {name:<9}  {r['median_ms']:>9.3f}  "
                f"{r['p10_ms']:>8.3f}  {r['p90_ms']:>8.3f}  {r['rows_per_s']:>10.0f}  "
                f"{r['gb_per_s']:>6.2f}  {ratio:>6}"
            )
    meta = results["meta"]
    lines.append("-" * len(header))
    lines.append(
        f"vocab {meta['vocab']}, float32 logits, density {meta['density']}, "
        f"{meta['runs']} runs per engine, torch threads {meta['torch_threads']}; "
        f"mismatching runs: {meta['mismatches']}"
    )
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    ap = arg_parser(__doc__)
    ap.add_argument(
        "--batches", type=int, nargs="+", default=[1, 16, 64], help="batch sizes (rows of logits)"
    )
    ap.add_argument("--vocab", type=int, default=129_280, help="vocabulary size")
    ap.add_argument("--runs", type=int, default=30, help="timed calls per engine and shape")
    ap.add_argument(
        "--density",
        type=float,
        default=0.5,
        help="probability that a token is allowed in the random bitmask",
    )
    ap.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch intra-op threads for treegram (0: torch's default); "
        "xgrammar's CPU kernel is single-threaded, so 1 is like for like",
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help="result JSON file")
    return ap


def main(argv: list[str] | None = None) -> dict:
    args = build_parser().parse_args(argv)
    if args.runs < 1 or args.vocab < 1 or min(args.batches) < 1:
        raise SystemExit("--runs, --vocab and every --batches value must be >= 1")
    if not 0.0 <= args.density <= 1.0:
        raise SystemExit("--density must be in [0, 1]")
    import torch

    if args.threads < 0:
        raise SystemExit("--threads must be >= 0")
    if args.threads:
        torch.set_num_threads(args.threads)
    shapes = [
        measure(batch, args.vocab, args.runs, args.density, args.seed + i)
        for i, batch in enumerate(args.batches)
    ]
    meta = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "vocab": args.vocab,
        "batches": args.batches,
        "runs": args.runs,
        "density": args.density,
        "dtype": "float32",
        "torch_threads": torch.get_num_threads(),
        "mismatches": sum(row["mismatches"] for row in shapes),
        "machine": platform_meta(),
        "versions": package_versions(),
        "command": command_line(argv),
        "notes": (
            "one call per engine per run, engines alternating first place, logits "
            "restored untimed before each call; GB/s = (logits + bitmask bytes) / "
            "median time; treegram uses its torch backend (bool mask + masked_fill_), "
            "xgrammar its C++ CPU kernel."
        ),
    }
    results = {"meta": meta, "shapes": shapes}
    write_results(args.output, results, format_table(results))
    return results


if __name__ == "__main__":
    out = main()
    sys.exit(1 if out["meta"]["mismatches"] else 0)
