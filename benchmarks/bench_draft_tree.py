#!/usr/bin/env python
"""treegram vs xgrammar: filling the masks of speculative draft trees, one process.

Two cases, each with one grammar matcher per request and every engine on the same inputs:

- ``seed``: the setup of xgrammar PR #740 (the one that added ``traverse_draft_tree``): a
  101-token vocabulary (``string.printable`` plus ``<eos>``, stop id 100), the grammar
  ``root ::= "abcde"`` and a 6-node chain (root, then ``a b c d e``) for every request;
- ``json``: the DeepSeek-V4 vocabulary (129,280 tokens), a JSON Schema for a record with a
  nested object and an array of strings (each engine compiles it with its own JSON Schema
  compiler, default options), and a different 16-node branchy tree per request, built from
  real tokenized documents so most nodes are accepted (deep trees).

Rows: xgrammar's per-request loop (``bitmask.fill_(-1)`` then one ``traverse_draft_tree``
per request on its slice of rows), treegram's per-request loop (one scalar
``traverse_draft_tree`` per request) and treegram's single ``batch_traverse_draft_tree`` call
with ``max_threads`` 1, 2 and "auto". Before timing, the masks of every engine are compared
row by row (both buffers zeroed first, so unreached rows compare too).

Run from the repository root: ``python benchmarks/bench_draft_tree.py --help``.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import string
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import SAMPLE_CITIES, SAMPLE_TAGS, load_average, run_meta, timed_parser, write_results  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
DEFAULT_OUTPUT = REPO / "benchmarks" / "results" / "draft_tree.json"
CASES = ("seed", "json")

XG_LOOP = "xgrammar loop"
TG_LOOP = "treegram loop"
TG_BATCH = {"treegram batch t=1": 1, "treegram batch t=2": 2, "treegram batch t=auto": "auto"}
ROWS = (XG_LOOP, TG_LOOP, *TG_BATCH)

SEED_GRAMMAR = 'root ::= "abcde"'

# A JSON record with a nested object and an array of strings.
RECORD_SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "address": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "zip": {"type": "number"}},
            "required": ["city", "zip"],
        },
    },
    "required": ["name", "tags", "address"],
}

# The same records as hand-written EBNF (kept for reference; ``--json-grammar ebnf``).
# Strings are right-recursive like xgrammar's built-in JSON grammar: written as
# "\"" (char)* "\"" with a rule or group for char, xgrammar 0.2.8 cannot precompute the mask
# inside a string and spends ~30 ms per fill on this vocabulary (see benchmarks/README.md).
RECORD_GRAMMAR = r"""
root ::= "{" ws "\"name\"" ws ":" ws string ws "," ws "\"tags\"" ws ":" ws tags ws ","
         ws "\"address\"" ws ":" ws address ws "}"
tags ::= "[" ws "]" | "[" ws string (ws "," ws string)* ws "]"
address ::= "{" ws "\"city\"" ws ":" ws string ws "," ws "\"zip\"" ws ":" ws number ws "}"
string ::= "\"" string_rest
string_rest ::= "\"" | [^"\\\x00-\x1f] string_rest | "\\" escape string_rest
escape ::= ["\\/bfnrt] | "u" hex hex hex hex
hex ::= [0-9a-fA-F]
number ::= "-"? int frac? exp?
int ::= "0" | [1-9] [0-9]*
frac ::= "." [0-9]+
exp ::= [eE] [+-]? [0-9]+
ws ::= [ \n\t]*
"""

JSON_TREE_NODES = 16
JSON_MAIN_CHAIN = 8  # nodes of the main chain below the root (fewer near a document's end)

_NAMES = [
    "Ada Lovelace",
    "Grace Hopper",
    "Alan Turing",
    "Edsger Dijkstra",
    "Barbara Liskov",
    "Donald Knuth",
    "Frances Allen",
    "Ken Thompson",
    "Margaret Hamilton",
    "Niklaus Wirth",
    "José Martínez",
    "Zoë Müller",
    "李雷",
    "Ольга Петрова",
    'Søren "Sø" Kierkegaard',
]
_TAGS = [*SAMPLE_TAGS, "x"]
_CITIES = SAMPLE_CITIES


# ---------------------------------------------------------------------------- inputs


def make_documents(n: int, rng: random.Random) -> list[str]:
    """``n`` records valid under RECORD_GRAMMAR, in varying ``json.dumps`` styles."""
    docs = []
    for i in range(n):
        value = {
            "name": rng.choice(_NAMES),
            "tags": rng.sample(_TAGS, rng.randint(0, 5)),
            "address": {
                "city": rng.choice(_CITIES),
                "zip": rng.choice(
                    [
                        rng.randint(0, 99999),
                        round(rng.uniform(-1e3, 1e5), 3),
                        rng.randint(10**6, 10**9),
                        0.5e-7,
                    ]
                ),
            },
        }
        indent = (None, 2, None, 4)[i % 4]
        docs.append(json.dumps(value, indent=indent, ensure_ascii=(i % 3 == 0)))
    return docs


def allowed_after(matcher, bitmask, tokens: list[int], vocab_size: int) -> np.ndarray | None:
    """Token ids the grammar allows after ``tokens`` (None if one is rejected); resets."""
    matcher.reset()
    try:
        if not all(matcher.accept_token(t) for t in tokens) or matcher.is_terminated():
            return None
        matcher.fill_next_token_bitmask(bitmask)
        row = bitmask.numpy()[0] if hasattr(bitmask, "numpy") else bitmask[0]
        bits = np.unpackbits(row.view(np.uint8), bitorder="little")[:vocab_size]
        return np.flatnonzero(bits)
    finally:
        matcher.reset()


def build_json_tree(
    doc_ids: list[int],
    other_ids: list[int],
    oracle,
    bitmask,
    vocab_size: int,
    stop_id: int,
    rng: random.Random,
) -> tuple[list[int], list[int], int]:
    """A 16-node tree for a request that has accepted ``doc_ids[:prefix]``.

    Returns ``(parents, tokens, prefix)`` with a random ``prefix >= 1``. Node 0 holds the last
    accepted token; nodes 1..k follow the document (the main chain, up to 8 nodes, ending with
    the stop token when the document ends). The other nodes are side branches: a sibling of a
    chain node, either another document's token at the same offset (often rejected) or a
    token the grammar allows there; half of the allowed ones get one allowed child of their
    own. ``oracle`` is a scratch matcher of the same grammar (left reset).
    """
    stream = list(doc_ids) + [stop_id]
    prefix = rng.randint(1, max(1, len(doc_ids) - 2))
    chain_len = min(JSON_MAIN_CHAIN, len(stream) - prefix)
    parents = [-1] + list(range(chain_len))  # node j + 1 hangs below node j
    tokens = [doc_ids[prefix - 1]] + stream[prefix : prefix + chain_len]
    # allowed[j]: tokens allowed below chain node j (the main chain's token excluded)
    allowed = []
    for j in range(chain_len):
        ids = allowed_after(oracle, bitmask, stream[: prefix + j], vocab_size)
        if ids is None:
            break
        allowed.append(ids[ids != tokens[j + 1]])
    while len(parents) < JSON_TREE_NODES:
        j = rng.randrange(len(allowed))
        if rng.random() < 0.3 or len(allowed[j]) == 0:
            tok = int(other_ids[min(prefix + j, len(other_ids) - 1)])
            parents.append(j)
            tokens.append(tok)
            continue
        tok = int(allowed[j][rng.randrange(len(allowed[j]))])
        parents.append(j)
        tokens.append(tok)
        if len(parents) < JSON_TREE_NODES and tok != stop_id and rng.random() < 0.5:
            below = allowed_after(oracle, bitmask, stream[: prefix + j] + [tok], vocab_size)
            if below is not None and len(below):
                parents.append(len(parents) - 1)
                tokens.append(int(below[rng.randrange(len(below))]))
    return parents, tokens, prefix


def _tensor(rows: list[list[int]]):
    import torch

    return torch.tensor(rows, dtype=torch.int64)


def setup_seed(requests: int, xgr, treegram) -> dict:
    """PR #740: printable vocabulary, ``root ::= "abcde"``, a shared 6-node chain."""
    vocab = list(string.printable) + ["<eos>"]
    stop_id = len(vocab) - 1
    tg_info = treegram.TokenizerInfo(vocab, stop_token_ids=[stop_id])
    xg_info = xgr.TokenizerInfo(vocab, xgr.VocabType.RAW, stop_token_ids=[stop_id])
    tg_compiled = treegram.GrammarCompiler(tg_info).compile_grammar(SEED_GRAMMAR)
    xg_compiled = xgr.GrammarCompiler(xg_info).compile_grammar(SEED_GRAMMAR)
    parents = [-1, 0, 1, 2, 3, 4]
    draft = [vocab.index(c) for c in "xabcde"]
    return {
        "vocab_size": len(vocab),
        "stop_id": stop_id,
        "grammar": SEED_GRAMMAR,
        "tg_matchers": [treegram.GrammarMatcher(tg_compiled) for _ in range(requests)],
        "xg_matchers": [xgr.GrammarMatcher(xg_compiled) for _ in range(requests)],
        "parents": _tensor([parents])[0],
        "draft_tokens": _tensor([draft] * requests),
        "prefix_lengths": [0] * requests,
        "tree": "one 6-node chain shared by all requests (root 'x', then a b c d e)",
    }


def setup_json(requests: int, seed: int, xgr, treegram, grammar_kind: str = "schema") -> dict:
    """DeepSeek-V4 vocabulary, RECORD_SCHEMA (or RECORD_GRAMMAR), a 16-node tree per request
    from real tokens."""
    import tokenizers

    from treegram.tokenizer import deepseek_v4_tokenizer_json

    info = treegram.TokenizerInfo.deepseek_v4()
    vocab_size = info.vocab_size
    stop_ids = list(info.stop_token_ids)
    stop_id = stop_ids[0]
    xg_info = xgr.TokenizerInfo(
        list(info.decoded_vocab), xgr.VocabType.RAW, vocab_size=vocab_size, stop_token_ids=stop_ids
    )
    tg_compiler = treegram.GrammarCompiler(info)
    xg_compiler = xgr.GrammarCompiler(xg_info)
    if grammar_kind == "schema":
        tg_compiled = tg_compiler.compile_grammar(treegram.Grammar.from_json_schema(RECORD_SCHEMA))
        xg_compiled = xg_compiler.compile_json_schema(json.dumps(RECORD_SCHEMA))
    else:
        tg_compiled = tg_compiler.compile_grammar(RECORD_GRAMMAR)
        xg_compiled = xg_compiler.compile_grammar(RECORD_GRAMMAR)
    tokenizer = tokenizers.Tokenizer.from_file(str(deepseek_v4_tokenizer_json()))
    rng = random.Random(seed)
    texts = make_documents(max(32, requests), rng)
    docs = []
    for text in texts:
        ids = tokenizer.encode(text, add_special_tokens=False).ids
        if b"".join(info.decoded_vocab[t] for t in ids) != text.encode("utf-8"):
            raise AssertionError(f"tokenization does not round-trip: {text!r}")
        docs.append(ids)
    oracle = xgr.GrammarMatcher(xg_compiled)
    scratch = xgr.allocate_token_bitmask(1, vocab_size)
    parents, draft, prefixes, tg_matchers, xg_matchers = [], [], [], [], []
    for i in range(requests):
        doc, other = docs[i % len(docs)], docs[(i + 7) % len(docs)]
        p, t, k = build_json_tree(doc, other, oracle, scratch, vocab_size, stop_id, rng)
        parents.append(p)
        draft.append(t)
        prefixes.append(k)
        tg_m, xg_m = treegram.GrammarMatcher(tg_compiled), xgr.GrammarMatcher(xg_compiled)
        for tok in doc[:k]:
            if not (tg_m.accept_token(tok) and xg_m.accept_token(tok)):
                raise AssertionError(f"document prefix rejected at token {tok}")
        tg_matchers.append(tg_m)
        xg_matchers.append(xg_m)
    return {
        "vocab_size": vocab_size,
        "stop_id": stop_id,
        "grammar": RECORD_GRAMMAR.strip(),
        "tg_matchers": tg_matchers,
        "xg_matchers": xg_matchers,
        "parents": _tensor(parents),
        "draft_tokens": _tensor(draft),
        "prefix_lengths": prefixes,
        "doc_tokens": [len(d) for d in docs],
        "tree": (
            f"{JSON_TREE_NODES} nodes per request, different per request: a main chain "
            f"of up to {JSON_MAIN_CHAIN} document tokens below the root plus side "
            "branches (allowed alternatives, some with a child, and another document's "
            "tokens)"
        ),
    }


# ---------------------------------------------------------------------------- runners


def make_runners(case: dict, xgr, treegram) -> tuple[dict, dict]:
    """One zero-argument callable per row, and the bitmask buffer each row writes."""
    import torch

    from treegram.spec import links_from_parents

    B = len(case["tg_matchers"])
    parents = case["parents"]
    next_token, next_sibling = (torch.from_numpy(a) for a in links_from_parents(parents))
    draft = case["draft_tokens"]
    N = draft.shape[1]
    vocab_size = case["vocab_size"]
    per_request = [
        (
            next_token if next_token.dim() == 1 else next_token[i],
            next_sibling if next_sibling.dim() == 1 else next_sibling[i],
            draft[i],
        )
        for i in range(B)
    ]
    buffers = {
        row: (
            xgr.allocate_token_bitmask(B * N, vocab_size)
            if row == XG_LOOP
            else treegram.allocate_token_bitmask(B * N, vocab_size, backend="torch")
        )
        for row in ROWS
    }
    views = {row: [buf[i * N : (i + 1) * N] for i in range(B)] for row, buf in buffers.items()}
    xg_m, tg_m = case["xg_matchers"], case["tg_matchers"]

    def xg_loop(fill: bool = True) -> list[bool]:
        if fill:
            buffers[XG_LOOP].fill_(-1)
        out = views[XG_LOOP]
        return [
            m.traverse_draft_tree(nt, ns, dt, out[i])
            for i, (m, (nt, ns, dt)) in enumerate(zip(xg_m, per_request, strict=True))
        ]

    def tg_loop() -> list[bool]:
        out = views[TG_LOOP]
        return [
            m.traverse_draft_tree(nt, ns, dt, out[i])
            for i, (m, (nt, ns, dt)) in enumerate(zip(tg_m, per_request, strict=True))
        ]

    runners: dict[str, Any] = {XG_LOOP: xg_loop, TG_LOOP: tg_loop}
    for row, threads in TG_BATCH.items():
        batch = treegram.BatchGrammarMatcher(max_threads=threads)

        def run(batch=batch, out=buffers[row]) -> list[bool]:
            return batch.batch_traverse_draft_tree(tg_m, next_token, next_sibling, draft, out)

        runners[row] = run
    return runners, buffers


def _valid_bits(buf, vocab_size: int) -> np.ndarray:
    arr = buf.numpy() if hasattr(buf, "numpy") else np.asarray(buf)
    return np.unpackbits(arr.view(np.uint8), axis=1, bitorder="little")[:, :vocab_size]


def check_masks(runners: dict, buffers: dict, vocab_size: int) -> dict:
    """Run every row once on a fresh buffer and compare its masks with xgrammar's."""
    buffers[XG_LOOP].zero_()
    flags = {XG_LOOP: runners[XG_LOOP](fill=False)}
    for row in ROWS[1:]:
        buffers[row].fill_(-1)  # treegram must zero the rows of unreached nodes itself
        flags[row] = runners[row]()
    ref = _valid_bits(buffers[XG_LOOP], vocab_size)
    mismatched = {}
    for row in ROWS[1:]:
        diff = np.any(_valid_bits(buffers[row], vocab_size) != ref, axis=1)
        mismatched[row] = np.flatnonzero(diff)[:10].tolist() if diff.any() else []
    return {
        "masks_identical": not any(mismatched.values()),
        "mismatched_rows": mismatched,
        "all_completed": all(all(f) for f in flags.values()),
        "rows_written": int(np.count_nonzero(ref.any(axis=1))),
        "rows_total": int(ref.shape[0]),
    }


def time_rows(runners: dict, iterations: int, warmup: int) -> dict[str, list[int]]:
    """``warmup`` + ``iterations`` rounds; each round times every row once, order rotating."""
    samples: dict[str, list[int]] = {row: [] for row in ROWS}
    ns = time.perf_counter_ns
    for it in range(warmup + iterations):
        k = it % len(ROWS)
        for row in ROWS[k:] + ROWS[:k]:
            fn = runners[row]
            t0 = ns()
            fn()
            dt = ns() - t0
            if it >= warmup:
                samples[row].append(dt)
    return samples


def run_case(name: str, args, xgr, treegram) -> dict:
    if name == "seed":
        case = setup_seed(args.requests or 96, xgr, treegram)
    else:
        case = setup_json(args.requests or 32, args.seed, xgr, treegram)
    runners, buffers = make_runners(case, xgr, treegram)
    check = check_masks(runners, buffers, case["vocab_size"])
    samples = time_rows(runners, args.iterations, args.warmup)
    median = {row: statistics.median(s) / 1e6 for row, s in samples.items()}
    p90 = {row: float(np.percentile(np.asarray(s) / 1e6, 90)) for row, s in samples.items()}
    draft = case["draft_tokens"]
    return {
        "requests": int(draft.shape[0]),
        "nodes_per_tree": int(draft.shape[1]),
        "vocab_size": case["vocab_size"],
        "grammar": case["grammar"],
        "tree": case["tree"],
        "median_ms": median,
        "p90_ms": p90,
        "speedup_vs_xgrammar_loop": {row: median[XG_LOOP] / median[row] for row in ROWS[1:]},
        **check,
        "prefix_lengths": case["prefix_lengths"],
        "samples_ms": {row: [round(x / 1e6, 4) for x in s] for row, s in samples.items()},
    }


# ---------------------------------------------------------------------------- report


def _load(meta: dict, when: str) -> str:
    value = meta["machine"]["load_average_1m"][when]
    return "?" if value is None else f"{value:.2f}"


def format_table(results: dict) -> str:
    head = f"{'case':<6}  {'row':<22}  {'median ms':>10}  {'p90 ms':>9}  {'vs xg loop':>10}"
    lines = [head, "-" * len(head)]
    for name, case in results["cases"].items():
        for row in ROWS:
            speed = case["speedup_vs_xgrammar_loop"].get(row)
            cell = f"{speed:.2f}x" if speed is not None else "1.00x"
            lines.append(
                f"{name:<6}  {row:<22}  {case['median_ms'][row]:>10.4f}  "
                f"{case['p90_ms'][row]:>9.4f}  {cell:>10}"
            )
        lines.append(
            f"{name:<6}  {case['requests']} requests x {case['nodes_per_tree']} nodes, "
            f"vocab {case['vocab_size']}, non-empty rows {case['rows_written']}/"
            f"{case['rows_total']}, masks_identical: "
            f"{str(case['masks_identical']).lower()}"
        )
        lines.append("-" * len(head))
    meta = results["meta"]
    lines.append(
        f"median/p90 of {meta['iterations']} iterations after {meta['warmup']} warm-up; "
        f"{meta['machine']['cpu_count']} CPUs, load avg "
        f"{_load(meta, 'start')} -> {_load(meta, 'end')}"
    )
    lines.append("vs xg loop = xgrammar loop median / row median (above 1: treegram faster)")
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    ap = timed_parser(__doc__, iterations=200, warmup=20, unit="iterations", per="row")
    ap.add_argument(
        "--requests",
        type=int,
        default=None,
        help="requests per case (default: 96 for seed, 32 for json)",
    )
    ap.add_argument("--cases", default=",".join(CASES), help="comma-separated, of: seed,json")
    ap.add_argument("--seed", type=int, default=0, help="random seed of the json trees")
    ap.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help="result JSON file")
    return ap


def main(argv: list[str] | None = None) -> dict:
    args = build_parser().parse_args(argv)
    cases = [c.strip() for c in args.cases.split(",") if c.strip()]
    if not cases or any(c not in CASES for c in cases):
        raise SystemExit(f"--cases: a comma-separated list of {', '.join(CASES)}")
    if args.iterations < 1 or args.warmup < 0 or (args.requests is not None and args.requests < 1):
        raise SystemExit("--iterations and --requests must be >= 1, --warmup >= 0")

    import xgrammar as xgr

    import treegram

    load_start = load_average()
    results: dict[str, Any] = {"cases": {}}
    for name in cases:
        results["cases"][name] = run_case(name, args, xgr, treegram)
    results["meta"] = {
        **run_meta(argv, load_start),
        "iterations": args.iterations,
        "warmup": args.warmup,
        "seed": args.seed,
        "rows": {
            XG_LOOP: "bitmask.fill_(-1), then GrammarMatcher.traverse_draft_tree per request "
            "on its slice of rows",
            TG_LOOP: "GrammarMatcher.traverse_draft_tree per request on its slice of rows "
            "(treegram zeroes unreached rows itself, no fill needed)",
            **{
                row: f"one BatchGrammarMatcher(max_threads={t!r}).batch_traverse_draft_tree "
                "call for all requests"
                for row, t in TG_BATCH.items()
            },
        },
        "notes": (
            "engines in one process on identical torch int64 inputs and torch int32 "
            "bitmasks; per-request row slices are made before timing; each iteration "
            "times every row once, the row order rotating per iteration; masks compared "
            "before timing over the valid vocabulary bits of every row, xgrammar's "
            "buffer zeroed first and treegram's filled with -1 first."
        ),
    }
    results = {"meta": results.pop("meta"), **results}

    write_results(args.output, results, format_table(results))
    return results


if __name__ == "__main__":
    out = main()
    sys.exit(0 if all(c["masks_identical"] for c in out["cases"].values()) else 1)
