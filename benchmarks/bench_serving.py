#!/usr/bin/env python
"""Grammar overhead of one constrained speculative decoding step on the DeepSeek-V4 vocabulary.

For every batch size ``B`` (default 1, 16, 64) and draft-tree size ``N`` (default 8, 32),
each request gets its own random branchy tree (built from a parent array) whose main chain
follows a real JSON document tokenized with the DeepSeek-V4 tokenizer, and its own grammar
matcher that has accepted a prefix of that document. One step is timed in four parts:

- ``fill``: ``BatchGrammarMatcher.batch_traverse_draft_tree`` fills the bitmask rows of all
  ``B * N`` nodes;
- ``apply``: ``treegram.serving.apply_token_bitmask_inplace`` masks random float32 logits
  ``[B * N, V]`` (biased so the document's next token wins at every chain node);
- ``verify``: ``treegram.serving.verify_tree`` (greedy) picks every request's accepted path
  on the already-masked logits (``bitmask=None, inplace=True, advance=False``);
- ``advance``: the matchers accept the emitted tokens, one
  ``BatchGrammarMatcher.batch_accept_token`` call per path position.

After each step the matchers are rolled back (untimed) and the logits restored (untimed),
so every iteration starts from the same state. The first step's accepted tokens are checked
against the documents (the chain is accepted to its end, plus the bonus token).

Second part: CPU apply-kernel throughput, treegram's torch backend vs xgrammar's CPU kernel
(``xgrammar.apply_token_bitmask_inplace``), both with one torch thread, on ``[B, V]`` logits.

Run from the repository root: ``python benchmarks/bench_serving.py --help``.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import SAMPLE_CITIES, SAMPLE_TAGS, load_average, run_meta, timed_parser, write_results  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
DEFAULT_OUTPUT = REPO / "benchmarks" / "results" / "serving.json"
PARTS = ("fill", "apply", "verify", "advance")
BIAS = 50.0  # added to the logit of the document's next token at every chain node


def chain_length(nodes: int) -> int:
    """Nodes of the main chain below the root (the rest of the tree are side branches)."""
    return max(1, min(nodes - 1, round(nodes * 0.4)))


RECORD_SCHEMA = {
    "type": "object",
    "properties": {
        "id": {"type": "integer"},
        "name": {"type": "string"},
        "email": {"type": "string"},
        "active": {"type": "boolean"},
        "score": {"type": "number"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "address": {
            "type": "object",
            "properties": {
                "street": {"type": "string"},
                "city": {"type": "string"},
                "zip": {"type": "string"},
            },
            "required": ["street", "city", "zip"],
        },
    },
    "required": ["id", "name", "email", "active", "score", "tags", "address"],
}

_FIRST = [
    "Ada",
    "Grace",
    "Alan",
    "Edsger",
    "Barbara",
    "Donald",
    "Frances",
    "Ken",
    "Zoë",
    "José",
    "李",
    "Ольга",
    "Søren",
    "Margaret",
    "Niklaus",
    "Radia",
]
_LAST = [
    "Lovelace",
    "Hopper",
    "Turing",
    "Dijkstra",
    "Liskov",
    "Knuth",
    "Allen",
    "Thompson",
    "Müller",
    "Martínez",
    "雷",
    "Петрова",
    "Kierkegaard",
    "Hamilton",
    "Wirth",
    "Perlman",
]
_TAGS = SAMPLE_TAGS
_CITIES = SAMPLE_CITIES
_STREETS = ["Main St", "Baker Street", "Rue de Rivoli", "Bahnhofstrasse", "Nevsky Prospekt"]


# ---------------------------------------------------------------------------- inputs


def make_documents(n: int, rng: random.Random) -> list[str]:
    """``n`` records valid under RECORD_SCHEMA, in varying ``json.dumps`` styles."""
    docs = []
    for i in range(n):
        first, last = rng.choice(_FIRST), rng.choice(_LAST)
        value = {
            "id": rng.randint(1, 10**6),
            "name": f"{first} {last}",
            "email": f"user{rng.randint(1, 9999)}@example.org",
            "active": rng.random() < 0.5,
            "score": round(rng.uniform(-100, 100), rng.randint(0, 4)),
            "tags": rng.sample(_TAGS, rng.randint(0, 4)),
            "address": {
                "street": f"{rng.randint(1, 999)} {rng.choice(_STREETS)}",
                "city": rng.choice(_CITIES),
                "zip": f"{rng.randint(0, 99999):05d}",
            },
        }
        docs.append(json.dumps(value, indent=(None, 2)[i % 2], ensure_ascii=(i // 2) % 2 == 0))
    return docs


class Oracle:
    """Allowed next tokens after a token sequence, from a scratch treegram matcher."""

    def __init__(self, treegram, compiled, vocab_size: int) -> None:
        self.matcher = treegram.GrammarMatcher(compiled)
        self.bitmask = treegram.allocate_token_bitmask(1, vocab_size, backend="numpy")
        self.vocab_size = vocab_size
        self.cache: dict[tuple[int, ...], np.ndarray] = {}

    def allowed(self, ctx: list[int]) -> np.ndarray:
        key = tuple(ctx)
        if key not in self.cache:
            m = self.matcher
            m.reset()
            for tok in ctx:
                if not m.accept_token(tok):
                    raise AssertionError(f"oracle rejected token {tok}")
            m.fill_next_token_bitmask(self.bitmask)
            bits = np.unpackbits(self.bitmask.view(np.uint8), bitorder="little")
            self.cache[key] = np.flatnonzero(bits[: self.vocab_size])
        return self.cache[key]


def build_tree(
    stream: list[int], other: list[int], nodes: int, oracle: Oracle, rng: random.Random
) -> dict:
    """One request's tree: a main chain following ``stream`` (document + stop token) below a
    root holding the last accepted token, interleaved at random with side branches.

    Side nodes hang off any node whose grammar state is known (not a stop token): a token
    the grammar allows there (from ``oracle``) or another document's token at the same
    offset (usually rejected, so its subtree is never reached). Sibling tokens are distinct.
    """
    doc_len = len(stream) - 1
    chain = chain_length(nodes)
    prefix = rng.randint(1, max(1, doc_len - chain // 2))  # root token: stream[prefix - 1]
    chain = min(chain, len(stream) - prefix)
    parents, tokens, ctxs = [-1], [stream[prefix - 1]], [stream[:prefix]]
    children: dict[int, set[int]] = {0: set()}
    chain_node = {0: 0}  # node -> k (its position on the chain)
    last_chain, added = 0, 0
    stop = stream[-1]
    # The document's next token after every chain node (the chain child's token, or the
    # bonus token after the last one) is reserved, so no side child takes it.
    reserved = {k: stream[prefix + k] for k in range(chain + 1) if prefix + k < len(stream)}
    while len(parents) < nodes:
        remaining = nodes - len(parents)
        if added < chain and (remaining <= chain - added or rng.random() < 0.45):
            k = added
            parent, tok = last_chain, stream[prefix + k]
            ctx = stream[: prefix + k + 1] if tok != stop else None
            last_chain = len(parents)
            chain_node[last_chain] = k + 1
            added += 1
        else:
            candidates = [i for i, c in enumerate(ctxs) if c is not None]
            parent = rng.choice(candidates)
            taken = set(children[parent])
            if parent in chain_node and chain_node[parent] in reserved:
                taken.add(reserved[chain_node[parent]])
            off = len(ctxs[parent])
            if rng.random() < 0.3 and off < len(other) and other[off] not in taken:
                tok, ctx = other[off], None  # another document's token: state unknown
            else:
                allowed = oracle.allowed(ctxs[parent])
                choices = [
                    int(t) for t in allowed[rng.sample(range(len(allowed)), min(8, len(allowed)))]
                ]
                choices = [t for t in choices if t not in taken]
                if choices:
                    tok = choices[0]
                    ctx = ctxs[parent] + [tok] if tok != stop else None
                else:  # only the reserved token is allowed here: a rejected token
                    tok = rng.choice([t for t in range(stop + 1, stop + 20) if t not in taken])
                    ctx = None
        children[parent].add(tok)
        children[len(parents)] = set()
        parents.append(parent)
        tokens.append(tok)
        ctxs.append(ctx)
    expected = stream[prefix : prefix + chain + 1]
    if stop in expected:
        expected = expected[: expected.index(stop) + 1]
    # Rows to bias: chain nodes that are not a stop token and have a next document token.
    chain_rows = {
        node: stream[prefix + k]
        for node, k in chain_node.items()
        if prefix + k < len(stream) and (k == 0 or stream[prefix + k - 1] != stop)
    }
    return {
        "parents": parents,
        "tokens": tokens,
        "prefix": prefix,
        "expected": expected,
        "chain_rows": chain_rows,
        "chain": chain,
    }


def load_inputs(args, treegram) -> dict:
    """Vocabulary, grammar, tokenized documents and the oracle (shared by every config)."""
    import tokenizers

    from treegram.tokenizer import deepseek_v4_tokenizer_json

    info = treegram.TokenizerInfo.deepseek_v4()
    compiler = treegram.GrammarCompiler(info)
    if args.grammar == "schema":
        compiled = compiler.compile_json_schema(RECORD_SCHEMA)
    else:
        compiled = compiler.compile_builtin_json_grammar()
    tokenizer = tokenizers.Tokenizer.from_file(str(deepseek_v4_tokenizer_json()))
    rng = random.Random(args.seed)
    docs = []
    for text in make_documents(64, rng):
        ids = tokenizer.encode(text, add_special_tokens=False).ids
        if b"".join(info.decoded_vocab[t] for t in ids) != text.encode("utf-8"):
            raise AssertionError(f"tokenization does not round-trip: {text!r}")
        docs.append(ids)
    return {
        "info": info,
        "compiled": compiled,
        "docs": docs,
        "rng": rng,
        "oracle": Oracle(treegram, compiled, info.vocab_size),
    }


def setup_config(inputs: dict, batch: int, nodes: int, treegram) -> dict:
    """Trees, matchers (prefix accepted) and biased logits for one (B, N)."""
    import torch

    from treegram.spec import links_from_parents

    info, docs, rng = inputs["info"], inputs["docs"], inputs["rng"]
    stop = int(info.stop_token_ids[0])
    vocab = info.vocab_size
    trees, matchers = [], []
    for b in range(batch):
        stream = docs[b % len(docs)] + [stop]
        other = docs[(b + 7) % len(docs)]
        tree = build_tree(stream, other, nodes, inputs["oracle"], rng)
        m = treegram.GrammarMatcher(inputs["compiled"])
        for tok in stream[: tree["prefix"]]:
            if not m.accept_token(tok):
                raise AssertionError(f"document prefix rejected at token {tok}")
        trees.append(tree)
        matchers.append(m)
    parents = np.array([t["parents"] for t in trees], dtype=np.int64)
    next_token, next_sibling = (torch.from_numpy(a) for a in links_from_parents(parents))
    draft = torch.tensor([t["tokens"] for t in trees], dtype=torch.int64)
    gen = torch.Generator().manual_seed(inputs["rng"].randrange(2**31))
    logits = torch.randn(batch * nodes, vocab, generator=gen, dtype=torch.float32)
    for b, tree in enumerate(trees):
        for node, tok in tree["chain_rows"].items():
            logits[b * nodes + node, tok] += BIAS
    return {
        "trees": trees,
        "matchers": matchers,
        "next_token": next_token,
        "next_sibling": next_sibling,
        "draft": draft,
        "base_logits": logits,
        "vocab": vocab,
    }


# ---------------------------------------------------------------------------- step timing


def advance(batch_matcher, matchers: list, accepted: list[list[int]]) -> bool:
    """Accept every request's tokens, one batch call per path position."""
    ok = True
    for k in range(max((len(t) for t in accepted), default=0)):
        idx = [i for i, t in enumerate(accepted) if len(t) > k]
        ok &= all(
            batch_matcher.batch_accept_token(
                [matchers[i] for i in idx], [accepted[i][k] for i in idx]
            )
        )
    return ok


def time_steps(cfg: dict, args, treegram) -> dict:
    """``warmup`` + ``iterations`` steps from the same state; per-part samples in ns."""
    import torch

    from treegram.serving import apply_token_bitmask_inplace, verify_tree

    matchers, draft = cfg["matchers"], cfg["draft"]
    nt, ns = cfg["next_token"], cfg["next_sibling"]
    base = cfg["base_logits"]
    logits = torch.empty_like(base)
    bitmask = treegram.allocate_token_bitmask(base.shape[0], cfg["vocab"], backend="torch")
    threads = args.matcher_threads if args.matcher_threads == "auto" else int(args.matcher_threads)
    batch = treegram.BatchGrammarMatcher(max_threads=threads)
    samples: dict[str, list[int]] = {p: [] for p in (*PARTS, "total")}
    clock = time.perf_counter_ns
    check: dict[str, Any] = {}
    try:
        for it in range(args.warmup + args.iterations):
            logits.copy_(base)
            steps_before = [m.num_accepted_steps() for m in matchers]
            t0 = clock()
            filled = batch.batch_traverse_draft_tree(matchers, nt, ns, draft, bitmask)
            t1 = clock()
            apply_token_bitmask_inplace(logits, bitmask, backend=args.backend)
            t2 = clock()
            res = verify_tree(
                logits, draft, nt, ns, None, matchers, mode="greedy", advance=False, inplace=True
            )
            t3 = clock()
            advanced = advance(batch, matchers, res.accepted_tokens)
            t4 = clock()
            lengths = [len(t) for t in res.accepted_tokens]
            if it == 0:
                expected = [t["expected"] for t in cfg["trees"]]
                wrong = [
                    b
                    for b, (got, exp) in enumerate(zip(res.accepted_tokens, expected, strict=True))
                    if got != exp
                ]
                check = {
                    "paths_as_expected": not wrong,
                    "unexpected_paths": wrong[:10],
                    "all_filled": all(filled),
                    "all_advanced": bool(advanced),
                    "accept_length_mean": statistics.fmean(lengths),
                    "accept_length_max": max(lengths),
                    "terminated": int(res.terminated.sum()),
                }
            treegram.BatchGrammarMatcher.batch_rollback(matchers, lengths)
            if [m.num_accepted_steps() for m in matchers] != steps_before:
                raise AssertionError("rollback did not restore the matchers")
            if it >= args.warmup:
                for part, dt in zip(PARTS, (t1 - t0, t2 - t1, t3 - t2, t4 - t3), strict=True):
                    samples[part].append(dt)
                samples["total"].append(t4 - t0)
    finally:
        batch.close()
    return {"samples": samples, **check}


def run_config(inputs: dict, batch: int, nodes: int, args, treegram) -> dict:
    cfg = setup_config(inputs, batch, nodes, treegram)
    timed = time_steps(cfg, args, treegram)
    samples = timed.pop("samples")
    median = {p: statistics.median(s) / 1e6 for p, s in samples.items()}
    p90 = {p: float(np.percentile(np.asarray(s) / 1e6, 90)) for p, s in samples.items()}
    trees = cfg["trees"]
    return {
        "batch_size": batch,
        "nodes_per_tree": nodes,
        "chain_nodes": chain_length(nodes),
        "median_ms": median,
        "p90_ms": p90,
        "per_request_median_us": {p: v * 1e3 / batch for p, v in median.items()},
        **timed,
        "prefix_lengths": [t["prefix"] for t in trees],
        "samples_ms": {p: [round(x / 1e6, 4) for x in s] for p, s in samples.items()},
    }


# ---------------------------------------------------------------------------- apply kernels


def measure_apply(batch: int, vocab: int, runs: int, seed: int) -> dict:
    """treegram torch backend vs xgrammar CPU kernel on [batch, vocab] float32 logits."""
    import torch
    import xgrammar as xgr

    from treegram.serving import apply_token_bitmask_inplace, bool_tensor_to_bitmask

    gen = torch.Generator().manual_seed(seed)
    base = torch.randn(batch, vocab, generator=gen, dtype=torch.float32)
    bitmask = bool_tensor_to_bitmask(torch.rand(batch, vocab, generator=gen) < 0.5)
    calls = {
        "treegram": lambda t: apply_token_bitmask_inplace(t, bitmask, backend="torch"),
        "xgrammar": lambda t: xgr.apply_token_bitmask_inplace(t, bitmask),
    }
    work = {name: base.clone() for name in calls}
    samples: dict[str, list[int]] = {name: [] for name in calls}
    mismatches = 0
    clock = time.perf_counter_ns
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for r in range(runs + 2):  # two warm-up rounds
            order = list(calls) if r % 2 == 0 else list(calls)[::-1]
            for name in order:
                work[name].copy_(base)
                t0 = clock()
                calls[name](work[name])
                dt = clock() - t0
                if r >= 2:
                    samples[name].append(dt)
            mismatches += int(not torch.equal(work["treegram"], work["xgrammar"]))
    nbytes = base.numel() * 4 + bitmask.numel() * 4
    out: dict[str, Any] = {"batch_size": batch, "vocab_size": vocab, "mismatches": mismatches}
    for name, s in samples.items():
        ms = statistics.median(s) / 1e6
        out[name] = {
            "median_ms": ms,
            "p90_ms": float(np.percentile(np.asarray(s) / 1e6, 90)),
            "rows_per_s": batch / (ms / 1e3),
            "gb_per_s": nbytes / (ms / 1e3) / 1e9,
        }
    out["tg_over_xg"] = out["treegram"]["median_ms"] / out["xgrammar"]["median_ms"]
    return out


# ---------------------------------------------------------------------------- report


def format_table(results: dict) -> str:
    meta = results["meta"]
    head = (
        f"{'B':>3} {'N':>3}  {'fill':>8} {'apply':>9} {'verify':>9} {'advance':>8} "
        f"{'total':>9}  {'grammar':>8}  {'acc len':>7}  {'paths ok':>8}"
    )
    lines = [
        f"grammar step, DeepSeek-V4 vocabulary ({meta['vocab_size']:,} tokens), "
        f"{meta['grammar']}: median ms per step (whole batch)",
        head,
        "-" * len(head),
    ]
    for c in results["steps"]:
        m = c["median_ms"]
        grammar = m["fill"] + m["apply"] + m["advance"]
        lines.append(
            f"{c['batch_size']:>3} {c['nodes_per_tree']:>3}  {m['fill']:>8.3f} "
            f"{m['apply']:>9.3f} {m['verify']:>9.3f} {m['advance']:>8.3f} "
            f"{m['total']:>9.3f}  {grammar:>8.3f}  {c['accept_length_mean']:>7.2f}  "
            f"{str(c['paths_as_expected']).lower():>8}"
        )
    lines.append("-" * len(head))
    lines.append(
        "total = median of per-step sums; grammar = fill + apply + advance medians; "
        "acc len = mean tokens emitted per request (incl. bonus)"
    )
    lines.append(
        f"median of {meta['iterations']} steps after {meta['warmup']} warm-up; "
        f"torch threads {meta['torch_threads']}, matcher threads "
        f"{meta['matcher_threads']}, {meta['machine']['cpu_count']} CPUs"
    )
    if results.get("apply"):
        lines.append("")
        head2 = (
            f"{'B':>3}  {'treegram ms':>11} {'xgrammar ms':>11}  {'tg/xg':>6}  "
            f"{'tg GB/s':>8} {'xg GB/s':>8}  {'equal':>5}"
        )
        lines += [
            f"CPU apply kernel, [B, {meta['vocab_size']:,}] float32, 1 torch thread "
            f"(median of {meta['apply_runs']})",
            head2,
            "-" * len(head2),
        ]
        for a in results["apply"]:
            lines.append(
                f"{a['batch_size']:>3}  {a['treegram']['median_ms']:>11.3f} "
                f"{a['xgrammar']['median_ms']:>11.3f}  {a['tg_over_xg']:>6.2f}  "
                f"{a['treegram']['gb_per_s']:>8.2f} {a['xgrammar']['gb_per_s']:>8.2f}  "
                f"{str(a['mismatches'] == 0).lower():>5}"
            )
        lines.append("tg/xg = treegram median / xgrammar median (below 1: treegram faster)")
    return "\n".join(lines)


def _int_list(text: str, name: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise SystemExit(f"{name}: a comma-separated list of integers, got {text!r}") from None
    if not values or any(v < 1 for v in values):
        raise SystemExit(f"{name}: a comma-separated list of integers >= 1, got {text!r}")
    return values


def build_parser() -> argparse.ArgumentParser:
    ap = timed_parser(__doc__, iterations=20, warmup=3, unit="steps", per="configuration")
    ap.add_argument("--batch-sizes", default="1,16,64", help="comma-separated batch sizes")
    ap.add_argument("--tree-sizes", default="8,32", help="comma-separated nodes per tree")
    ap.add_argument(
        "--grammar",
        choices=("schema", "builtin"),
        default="schema",
        help="RECORD_SCHEMA (JSON Schema) or the built-in JSON grammar",
    )
    ap.add_argument(
        "--backend",
        choices=("torch", "auto"),
        default="torch",
        help="apply_token_bitmask_inplace backend in the step",
    )
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    ap.add_argument(
        "--matcher-threads", default="1", help="BatchGrammarMatcher max_threads (an int or 'auto')"
    )
    ap.add_argument(
        "--apply-runs",
        type=int,
        default=50,
        help="timed calls per engine in the apply comparison (0: skip it)",
    )
    ap.add_argument("--seed", type=int, default=0, help="random seed")
    ap.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help="result JSON file")
    return ap


def main(argv: list[str] | None = None) -> dict:
    args = build_parser().parse_args(argv)
    batch_sizes = _int_list(args.batch_sizes, "--batch-sizes")
    tree_sizes = _int_list(args.tree_sizes, "--tree-sizes")
    if any(n < 2 for n in tree_sizes):
        raise SystemExit("--tree-sizes: trees need at least 2 nodes")
    if args.iterations < 1 or args.warmup < 0 or args.apply_runs < 0 or args.threads < 1:
        raise SystemExit("--iterations and --threads must be >= 1, --warmup and --apply-runs >= 0")
    if args.matcher_threads != "auto" and not args.matcher_threads.isdigit():
        raise SystemExit("--matcher-threads: an int >= 1 or 'auto'")

    import torch

    import treegram

    torch.set_num_threads(args.threads)
    load_start = load_average()
    inputs = load_inputs(args, treegram)
    vocab = inputs["info"].vocab_size
    steps = [run_config(inputs, b, n, args, treegram) for b in batch_sizes for n in tree_sizes]
    applied = []
    if args.apply_runs:
        torch.set_num_threads(1)
        applied = [measure_apply(b, vocab, args.apply_runs, args.seed + b) for b in batch_sizes]
        torch.set_num_threads(args.threads)
    meta = {
        **run_meta(argv, load_start),
        "vocab_size": vocab,
        "grammar": (
            "JSON Schema RECORD_SCHEMA" if args.grammar == "schema" else "built-in JSON grammar"
        ),
        "schema": RECORD_SCHEMA if args.grammar == "schema" else None,
        "iterations": args.iterations,
        "warmup": args.warmup,
        "apply_runs": args.apply_runs,
        "seed": args.seed,
        "backend": args.backend,
        "torch_threads": args.threads,
        "matcher_threads": args.matcher_threads,
        "parts": {
            "fill": "BatchGrammarMatcher.batch_traverse_draft_tree over the B trees of N nodes",
            "apply": "treegram.serving.apply_token_bitmask_inplace on float32 logits [B*N, V]",
            "verify": "treegram.serving.verify_tree(mode='greedy', bitmask=None, inplace=True, "
            "advance=False) on the masked logits",
            "advance": "BatchGrammarMatcher.batch_accept_token, one call per path position",
            "total": "fill + apply + verify + advance of the same step",
        },
        "notes": (
            "trees from parent arrays: a main chain of chain_nodes document tokens below "
            "the root, side branches (grammar-allowed alternatives and other documents' "
            "tokens) interleaved at random; logits of chain nodes biased by +50 on the "
            "document's next token; matchers rolled back and logits restored untimed "
            "after every step; the apply comparison uses a random bitmask of density "
            "0.5 and compares both outputs after every round."
        ),
    }
    results = {"meta": meta, "steps": steps, "apply": applied}
    write_results(args.output, results, format_table(results))
    return results


def all_ok(results: dict) -> bool:
    """Every step's paths, fills and advances as expected, and both apply kernels equal."""
    return all(
        c["paths_as_expected"] and c["all_filled"] and c["all_advanced"] for c in results["steps"]
    ) and all(a["mismatches"] == 0 for a in results["apply"])


if __name__ == "__main__":
    sys.exit(0 if all_ok(main()) else 1)
