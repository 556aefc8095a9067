#!/usr/bin/env python
"""Time budgets of draft-tree traversals on fresh grammars: treegram vs xgrammar, one process.

A serving engine passes ``time_threshold`` to ``traverse_draft_tree`` so that a slow mask
never stalls a decoding step. On a grammar nobody has used yet the first traversal is where
the work is (treegram classifies the states it meets on the way). For every k-th MaskBench
schema, each engine compiles the schema (caching off, outside the timed call), then
traverses a chain draft tree of the first ``--nodes`` tokens of the schema's first walkable
instance once per budget, each time on a freshly compiled grammar; the wall time of that
one call is divided by its budget. Every case is first run once without a budget, untimed
(kernels loaded; treegram's per-vocabulary class cache warm, as in a serving process that
has run a while), and the first case once more with a budget it cannot meet (the code a
timeout runs loaded too).

Reported per engine and budget: the median and maximum of that ratio, the share of calls
within twice their budget, and how many calls finished (returned True) rather than
stopping at the budget. DeepSeek-V4 vocabulary.

Run from the repository root: ``python benchmarks/bench_deadlines.py --help``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import arg_parser, load_average, run_meta, write_json, xgrammar_like  # noqa: E402
from bench_maskbench import DEFAULT_DATA, list_files, load_instances  # noqa: E402

DEFAULT_OUTPUT = Path(__file__).resolve().parent / "results" / "deadlines.json"
ENGINES = ("treegram", "xgrammar")


def chain(n: int) -> tuple[np.ndarray, np.ndarray]:
    """``retrieve_next_token`` / ``retrieve_next_sibling`` of a chain of ``n`` nodes."""
    next_token = np.arange(1, n + 1, dtype=np.int64)
    next_token[-1] = -1
    return next_token, np.full(n, -1, dtype=np.int64)


class TreegramEngine:
    def __init__(self, tg, info) -> None:
        self.tg, self.info = tg, info

    def fresh(self, schema: str):
        compiler = self.tg.GrammarCompiler(self.info, cache_enabled=False)
        grammar = self.tg.Grammar.from_json_schema(schema, any_whitespace=True, strict_mode=False)
        return self.tg.GrammarMatcher(compiler.compile_grammar(grammar))

    def traverse(self, matcher, tree, draft, budget: float) -> bool:
        rows = self.tg.allocate_token_bitmask(len(draft), self.info.vocab_size, backend="numpy")
        return bool(matcher.traverse_draft_tree(*tree, draft, rows, time_threshold=budget))


class XgrammarEngine:
    def __init__(self, xgr, info) -> None:
        import torch

        self.xgr, self.info, self.torch = xgr, info, torch
        self.compiler, _ = xgrammar_like(info)

    def fresh(self, schema: str):
        compiled = self.compiler.compile_json_schema(schema, any_whitespace=True, strict_mode=False)
        return self.xgr.GrammarMatcher(compiled)

    def traverse(self, matcher, tree, draft, budget: float) -> bool:
        t = self.torch
        rows = self.xgr.allocate_token_bitmask(len(draft), self.info.vocab_size)
        return bool(
            matcher.traverse_draft_tree(
                t.from_numpy(tree[0]),
                t.from_numpy(tree[1]),
                t.from_numpy(draft),
                rows,
                time_threshold=budget,
            )
        )


def cases(args, tokenizer, info) -> list[tuple[str, str, np.ndarray]]:
    """(file name, schema, draft tokens) for every k-th schema with a walkable instance."""
    out = []
    for file in list_files(args.data, args.every, args.limit):
        schema, tests = load_instances(file, tokenizer, info.decoded_vocab)
        ids = next((t["ids"] for t in tests if t["valid"] and t["ids"]), None)
        if ids is not None and len(ids) >= 2:
            # node 0 is the root (its token is not read); nodes 1.. hold the draft tokens
            draft = np.array([0, *ids[: args.nodes - 1]], dtype=np.int64)
            out.append((file.name, schema, draft))
    return out


def summarize(ratios: list[float], finished: list[bool]) -> dict:
    return {
        "calls": len(ratios),
        "ratio_p50": statistics.median(ratios) if ratios else None,
        "ratio_max": max(ratios) if ratios else None,
        "within_2x": sum(r <= 2.0 for r in ratios) / len(ratios) if ratios else None,
        "finished": sum(finished),
    }


def format_table(results: dict) -> str:
    lines = [
        "| budget | engine | calls | elapsed / budget, median | max | within 2x | finished |",
        "|---:|---|---:|---:|---:|---:|---:|",
    ]
    for budget, per_engine in results.items():
        for engine, s in per_engine.items():
            lines.append(
                f"| {float(budget) * 1e3:g} ms | {engine} | {s['calls']} | {s['ratio_p50']:.2f} "
                f"| {s['ratio_max']:.2f} | {100 * s['within_2x']:.1f} % | {s['finished']} |"
            )
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    ap = arg_parser(__doc__)
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA, help="MaskBench *.json folder")
    ap.add_argument("--every", type=int, default=48, help="take every k-th file in sorted order")
    ap.add_argument("--limit", type=int, default=None, help="at most N schemas")
    ap.add_argument("--nodes", type=int, default=16, help="nodes of the chain draft tree")
    ap.add_argument(
        "--budgets", default="0.0005,0.002,0.01", help="comma-separated budgets in seconds"
    )
    ap.add_argument("--engines", default=",".join(ENGINES), help="comma-separated")
    ap.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help="result JSON file")
    return ap


def main(argv: list[str] | None = None) -> dict:
    args = build_parser().parse_args(argv)
    load_start = load_average()
    import tokenizers

    import treegram as tg
    from treegram.tokenizer import deepseek_v4_tokenizer_json

    info = tg.TokenizerInfo.deepseek_v4()
    tokenizer = tokenizers.Tokenizer.from_file(str(deepseek_v4_tokenizer_json()))
    engines = {}
    for name in args.engines.split(","):
        if name == "treegram":
            engines[name] = TreegramEngine(tg, info)
        elif name == "xgrammar":
            import xgrammar

            engines[name] = XgrammarEngine(xgrammar, info)
        else:
            raise SystemExit(f"unknown engine {name!r}")
    budgets = [float(b) for b in args.budgets.split(",")]
    todo = cases(args, tokenizer, info)
    # Warm up each engine on every case, untimed and without a budget: compiled kernels
    # are loaded, and treegram's per-vocabulary class cache holds what these schemas
    # share, as in a serving process that has run a while. Every timed call still gets a
    # freshly compiled grammar whose states are unclassified.
    for name, engine in engines.items():
        # xgrammar keeps nothing between grammars: its first case loads it enough
        for _, schema, draft in todo if name == "treegram" else todo[:1]:
            try:
                engine.traverse(engine.fresh(schema), chain(len(draft)), draft, -1.0)
            except Exception:  # refused schemas are skipped below as well
                continue
        # one call that runs out of its budget, so that the code after a timeout (treegram
        # fills the root's row with its scalar fill kernel) is loaded too
        for _, schema, draft in todo:
            try:
                engine.traverse(engine.fresh(schema), chain(len(draft)), draft, 1e-6)
            except Exception:  # a refused schema: the next one
                continue
            break
    results: dict = {}
    for budget in budgets:
        results[str(budget)] = {}
        for name, engine in engines.items():
            ratios, finished = [], []
            for _, schema, draft in todo:
                try:
                    matcher = engine.fresh(schema)
                except Exception:  # a schema this engine refuses: not a budget case
                    continue
                tree = chain(len(draft))
                t0 = time.perf_counter()
                done = engine.traverse(matcher, tree, draft, budget)
                ratios.append((time.perf_counter() - t0) / budget)
                finished.append(done)
            results[str(budget)][name] = summarize(ratios, finished)
    out = {
        "meta": {
            **run_meta(argv, load_start, flat=True),
            "data": str(args.data),
            "schemas": len(todo),
            "nodes": args.nodes,
        },
        "results": results,
    }
    write_json(args.output, out, indent=1, strict=False)
    print(format_table(results))
    return out


if __name__ == "__main__":
    main()
