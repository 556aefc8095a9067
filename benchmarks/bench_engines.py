#!/usr/bin/env python
"""SGLang's and vLLM's own grammar mask functions per decoding step: treegram plugged in
vs the engine's own xgrammar backend, one process, CPU time.

Both engines are driven through their real code (SGLang 0.5.23, vLLM 0.33.0, installed
as in CI from ``.ci/engines.txt``; no GPU, no weights) on the DeepSeek-V4 vocabulary
(129,280-wide model vocabulary), one JSON Schema per request from the MaskBench sample,
every request at a random position inside a valid document of its schema:

- **SGLang, EAGLE-shaped trees** of 8, 16 and 64 nodes: the function the EAGLE and NGRAM
  workers call, ``spec_utils.generate_token_bitmask``. Rows: SGLang's own function on its
  xgrammar backend's grammars; SGLang's own function on treegram's grammars (its Python
  walk, one call per node); treegram's drop-in
  (``treegram.serving.sglang.generate_token_bitmask``, one batched call per step).
- **vLLM, n-gram chains** of 1, 3 and 7 draft tokens (``num_speculative_tokens``): what
  the scheduler and its ``StructuredOutputManager`` call per step: ``validate_tokens``
  for every request's draft, ``grammar_bitmask`` for the batch, ``accept_tokens`` for
  every request's committed tokens (the valid drafts and a bonus token). Rows: vLLM's own
  manager methods on its xgrammar backend; vLLM's own methods on treegram's backend;
  treegram's drop-ins (``treegram.serving.vllm``).

Batch sizes 1, 8, 64 and 256. Before timing, each case compares the masks of every row
(bit for bit): the three rows must agree. Each iteration times every row once, the order
rotating; the step's grammars end where they started (SGLang's walks leave them there;
the vLLM rows roll the accepted tokens back, untimed). CPU time is
``time.process_time`` (every thread of this process: the drop-ins' worker threads count);
wall time is reported beside it.

Run from the repository root: ``python benchmarks/bench_engines.py --help``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import sys
import time
import types
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import load_average, package_versions, run_meta, timed_parser, write_results  # noqa: E402

# the engines as the engine tests build them (tests/engine_setup.py)
sys.path.append(str(Path(__file__).resolve().parents[1] / "tests"))
from engine_setup import (  # noqa: E402
    EOS,
    MODEL_VOCAB,
    sglang_backends,
    sglang_tokenizer,
    torchvision_stub,
    write_vllm_model_dir,
)

REPO = Path(__file__).resolve().parents[1]
DEFAULT_OUTPUT = REPO / "benchmarks" / "results" / "engines.json"
SHIPPED_DATA = REPO / "benchmarks" / "data" / "engine_schemas.jsonl"

SGL_ROWS = ("xgrammar", "treegram, SGLang's walk", "treegram drop-in")
VLLM_ROWS = ("xgrammar", "treegram, vLLM's loop", "treegram drop-in")
TOPK = {8: 2, 16: 4, 64: 8}  # EAGLE-shaped trees: candidates per level (depth follows)


def default_data() -> Path:
    """``<repo>/../shared/data/maskbench-sample`` when it exists, else the schemas shipped
    in ``benchmarks/data/engine_schemas.jsonl``."""
    path = REPO.parent / "shared" / "data" / "maskbench-sample"
    return path if path.is_dir() else SHIPPED_DATA


# ---------------------------------------------------------------------------- inputs


def _candidates(data: Path, every: int | None, n: int):
    """``(name, schema text, document)`` from a MaskBench folder (each file's first valid
    test instance; every ``every``-th file, default spread over the whole folder: every
    ``len / (4 n)``-th) or a ``.jsonl`` of ``{"name", "schema", "document"}`` entries."""
    if data.is_dir():
        files = sorted(data.glob("*.json"))
        every = every or max(1, len(files) // (4 * n))
        for file in files[::every]:
            entry = json.loads(file.read_text(encoding="utf-8"))
            for test in entry.get("tests", []):
                if test.get("valid"):
                    yield file.stem, json.dumps(entry["schema"]), test["data"]
                    break
    else:
        for line in data.read_text(encoding="utf-8").splitlines():
            if line.strip():
                entry = json.loads(line)
                yield entry["name"], json.dumps(entry["schema"]), entry["document"]


def allowed(row) -> np.ndarray:
    arr = row.numpy() if hasattr(row, "numpy") else np.asarray(row)
    bits = np.unpackbits(np.ascontiguousarray(arr).view(np.uint8), bitorder="little")
    return np.flatnonzero(bits[:MODEL_VOCAB])


def select_schemas(env: dict, data: Path, n: int, every: int | None, min_tokens: int) -> list[dict]:
    """The first ``n`` schemas whose document tokenizes exactly, is at least
    ``min_tokens`` long, compiles with both SGLang backends, and whose every mask along
    the document (and after it: the stop token) is the same in both."""
    tok, ours, theirs = env["tokenizer"], env["sgl_ours"], env["sgl_theirs"]
    decoded = env["decoded_vocab"]
    chosen = []
    for name, schema, doc in _candidates(data, every, n):
        if len(chosen) >= n:
            break
        try:
            text = json.dumps(doc, allow_nan=False)
        except ValueError:
            continue
        ids = tok.encode(text, add_special_tokens=False)
        if len(ids) < min_tokens or b"".join(decoded[t] for t in ids) != text.encode():
            continue
        o, t = ours.dispatch_json(schema), theirs.dispatch_json(schema)
        if not hasattr(o, "matcher") or not hasattr(t, "matcher"):
            continue  # refused by one backend
        same = True
        for step, token in enumerate([*ids, EOS]):
            mo = o.allocate_vocab_mask(MODEL_VOCAB, 1, "cpu")
            mt = t.allocate_vocab_mask(MODEL_VOCAB, 1, "cpu")
            o.fill_vocab_mask(mo, 0)
            t.fill_vocab_mask(mt, 0)
            if not np.array_equal(mo.numpy(), mt.numpy()) or token not in allowed(mt[0]):
                same = False
                break
            try:
                o.accept_token(token)
                t.accept_token(token)
            except ValueError:
                same = False
                break
            if step > 200:  # long documents: the first 200 tokens decide
                break
        if same:
            chosen.append({"name": name, "schema": schema, "ids": ids, "document": doc})
    if len(chosen) < n:
        raise SystemExit(f"only {len(chosen)} usable schemas in {data} (wanted {n})")
    return chosen


# ---------------------------------------------------------------------------- engines


def load_engines() -> dict:
    """Import the engines (with SGLang's torchvision stub when needed), the tokenizer and
    both SGLang backends, built as tests/engine_setup.py builds them for the engine tests."""
    torchvision_stub()
    import treegram as tg
    from treegram.serving import sglang as tg_sglang
    from treegram.serving import vllm as tg_vllm

    spec_utils = __import__("sglang.srt.speculative.spec_utils", fromlist=["x"])
    so = __import__("vllm.v1.structured_output", fromlist=["x"])
    tokenizer = sglang_tokenizer()
    sgl_ours, sgl_theirs = sglang_backends(tokenizer)
    return {
        "tg": tg,
        "tg_sglang": tg_sglang,
        "tg_vllm": tg_vllm,
        "spec_utils": spec_utils,
        "so": so,
        "tokenizer": tokenizer,
        "decoded_vocab": sgl_ours.grammar_compiler.tokenizer_info.decoded_vocab,
        "sgl_ours": sgl_ours,
        "sgl_theirs": sgl_theirs,
        "engine_generate": spec_utils.generate_token_bitmask,
        "engine_bitmask": so.StructuredOutputManager.grammar_bitmask,
        "engine_validate": so.StructuredOutputManager.validate_tokens,
        "engine_xgrammar": so.XgrammarBackend,
    }


# ---------------------------------------------------------------------------- timing


def time_rows(fns: dict, iterations: int, warmup: int, budget_s: float, after=None) -> dict:
    """Median CPU and wall ms per row over ``iterations`` rounds (each times every row
    once, order rotating), fewer when a round's first pass predicts more than
    ``budget_s`` seconds for the whole case; ``after(row)`` runs untimed after each call."""
    rows = list(fns)
    cpu: dict[str, list[int]] = {r: [] for r in rows}
    wall: dict[str, list[int]] = {r: [] for r in rows}
    rounds = warmup + iterations
    it = 0
    while it < rounds:
        k = it % len(rows)
        for row in rows[k:] + rows[:k]:
            c0, w0 = time.process_time_ns(), time.perf_counter_ns()
            fns[row]()
            c1, w1 = time.process_time_ns(), time.perf_counter_ns()
            if after is not None:
                after(row)
            if it >= warmup:
                cpu[row].append(c1 - c0)
                wall[row].append(w1 - w0)
        if it == warmup and budget_s > 0:  # the first timed round: fit the budget
            per_round = sum(wall[r][-1] for r in rows) / 1e9
            rounds = min(rounds, warmup + max(3, int(budget_s / max(per_round, 1e-9))))
        it += 1
    return {
        "cpu_ms": {r: statistics.median(cpu[r]) / 1e6 for r in rows},
        "wall_ms": {r: statistics.median(wall[r]) / 1e6 for r in rows},
        "iterations": len(cpu[rows[0]]),
    }


# ---------------------------------------------------------------------------- SGLang


def eagle_tree(rng: random.Random, probe, doc: list[int], n: int) -> tuple[list, list]:
    """Parents and tokens of an EAGLE-shaped tree of ``n`` nodes for a request that has
    accepted ``doc[:p]`` (``probe``: a treegram matcher there, left as it was). Level by
    level, ``TOPK[n]`` candidates below the best node of the level above: the first is
    the document's next token (the best, expanded next), the others an alternative the
    grammar allows (half of them) or a random token (usually rejected). Nodes are in
    breadth-first order, parents first; a tree the document cannot fill is padded with
    random leaves below the root."""
    tg_mask = np.zeros((1, (MODEL_VOCAB + 31) // 32), dtype=np.int32)
    topk = TOPK.get(n, max(2, int(math.sqrt(n))))
    parents, tokens = [-1], [0]
    best, accepted = 0, 0
    for token in doc:
        if len(parents) >= n or probe.is_terminated():
            break
        probe.fill_next_token_bitmask(tg_mask, 0)
        choices = allowed(tg_mask[0])
        level_parent = best
        for c in range(topk):
            if len(parents) >= n:
                break
            parents.append(level_parent)
            if c == 0:
                tokens.append(token)
                best = len(parents) - 1
            elif rng.random() < 0.5 and len(choices):
                tokens.append(int(choices[rng.randrange(len(choices))]))
            else:
                tokens.append(rng.randrange(MODEL_VOCAB))
        if not probe.accept_token(token):
            break
        accepted += 1
    if accepted:
        probe.rollback(accepted)
    while len(parents) < n:
        parents.append(0)
        tokens.append(rng.randrange(MODEL_VOCAB))
    return parents, tokens


def sglang_case(env: dict, schemas: list[dict], b: int, n: int, seed: int) -> dict:
    """The three SGLang rows for ``b`` requests with ``n``-node trees."""
    import torch

    from treegram.spec import links_from_parents

    rng = random.Random(seed * 1009 + b * 31 + n)
    ours_b, theirs_b = env["sgl_ours"], env["sgl_theirs"]
    cached = {}
    ours, theirs, parents, tokens = [], [], [], []
    for i in range(b):
        s = schemas[i % len(schemas)]
        if s["name"] not in cached:
            schema = s["schema"]
            cached[s["name"]] = (ours_b.dispatch_json(schema), theirs_b.dispatch_json(schema))
        o, t = (g.copy() for g in cached[s["name"]])
        doc = s["ids"]
        p = rng.randrange(1, max(2, len(doc) - 1))
        for token in doc[:p]:
            o.accept_token(token)
            t.accept_token(token)
        par, tok = eagle_tree(rng, o.matcher.fork(), doc[p:] + [EOS], n)
        ours.append(types.SimpleNamespace(grammar=o))
        theirs.append(types.SimpleNamespace(grammar=t))
        parents.append(par)
        tokens.append(tok)
    nxt, sib = links_from_parents(np.asarray(parents, dtype=np.int64))
    nxt, sib = torch.from_numpy(nxt), torch.from_numpy(sib)
    draft = torch.tensor(tokens, dtype=torch.int64)
    generate, drop_in = env["engine_generate"], env["tg_sglang"].generate_token_bitmask
    fns = {
        SGL_ROWS[0]: lambda: generate(theirs, nxt, sib, draft, MODEL_VOCAB),
        SGL_ROWS[1]: lambda: generate(ours, nxt, sib, draft, MODEL_VOCAB),
        SGL_ROWS[2]: lambda: drop_in(ours, nxt, sib, draft, MODEL_VOCAB),
    }
    masks = {row: fn()[0] for row, fn in fns.items()}
    ref = masks[SGL_ROWS[0]]
    identical = all(torch.equal(m, ref) for m in masks.values())
    reached = int((ref != -1).any(dim=1).sum())
    return {"fns": fns, "masks_identical": identical, "rows_filled": reached, "rows": b * n}


# ---------------------------------------------------------------------------- vLLM


def vllm_manager(env: dict, model_dir: Path, k: int, max_seqs: int):
    from vllm import config

    spec = None
    if k:
        spec = config.SpeculativeConfig(
            method="ngram", num_speculative_tokens=k, prompt_lookup_max=3, prompt_lookup_min=1
        )
    sched = config.SchedulerConfig(
        max_num_seqs=max_seqs,
        max_num_batched_tokens=max(2048, max_seqs * (k + 1)),
        max_model_len=4096,
        is_encoder_decoder=False,
    )
    vllm_config = config.VllmConfig(
        model_config=config.ModelConfig(model=str(model_dir), dtype="float32"),
        device_config=config.DeviceConfig(device="cpu"),
        speculative_config=spec,
        scheduler_config=sched,
        structured_outputs_config=config.StructuredOutputsConfig(backend="xgrammar"),
    )
    return env["so"].StructuredOutputManager(vllm_config)


def vllm_requests(env: dict, manager, schemas, b: int, prefixes, xgrammar: bool) -> dict:
    from vllm import sampling_params
    from vllm.v1.request import Request

    so = env["so"]
    installed = so.XgrammarBackend
    if xgrammar:
        so.XgrammarBackend = env["engine_xgrammar"]
    reqs = {}
    try:
        for i in range(b):
            s = schemas[i % len(schemas)]
            params = sampling_params.StructuredOutputsParams(json=s["schema"])
            params._backend = "xgrammar"
            sp = sampling_params.SamplingParams(structured_outputs=params, max_tokens=4096)
            req = Request(f"r{i}", [0], sp, None)
            manager.grammar_init(req)
            reqs[req.request_id] = req
    finally:
        so.XgrammarBackend = installed
    deadline = time.monotonic() + 600
    for req in reqs.values():
        while not req.structured_output_request.is_grammar_ready:
            if time.monotonic() > deadline:
                raise SystemExit("vLLM grammars did not compile")
            time.sleep(0.005)
    for i, req in enumerate(reqs.values()):
        s = schemas[i % len(schemas)]
        assert req.structured_output_request.grammar.accept_tokens(
            req.request_id, s["ids"][: prefixes[i]]
        )
    return reqs


def vllm_case(env: dict, schemas, b: int, k: int, seed: int, model_dir: Path, managers) -> dict:
    """The three vLLM rows for ``b`` requests with ``k``-token n-gram chains."""
    rng = random.Random(seed * 7919 + b * 13 + k)
    prefixes, drafts, bonus = [], {}, {}
    for i in range(b):
        ids = schemas[i % len(schemas)]["ids"] + [EOS]
        p = rng.randrange(1, max(2, len(ids) - k - 1))
        prefixes.append(p)
        chain = ids[p : p + k]
        chain += [EOS] * (k - len(chain))
        if k and rng.random() < 0.3:
            chain[rng.randrange(k)] = rng.randrange(MODEL_VOCAB)  # a rejected draft
        drafts[f"r{i}"] = chain
        bonus[f"r{i}"] = ids[p:]  # the document's continuation: the committed tokens
    if k not in managers:
        managers[k] = (
            vllm_manager(env, model_dir, k, 256),
            vllm_manager(env, model_dir, k, 256),
        )
    ours_m, theirs_m = managers[k]
    ours = vllm_requests(env, ours_m, schemas, b, prefixes, xgrammar=False)
    theirs = vllm_requests(env, theirs_m, schemas, b, prefixes, xgrammar=True)
    ids = list(ours)
    bitmask, validate = env["engine_bitmask"], env["engine_validate"]  # vLLM's own
    committed: dict[str, dict[str, int]] = {row: {} for row in VLLM_ROWS}
    parts: dict[str, dict[str, list[int]]] = {
        row: {"validate": [], "grammar_bitmask": [], "accept": []} for row in VLLM_ROWS
    }
    last_mask: dict[str, Any] = {}

    def step(row: str, manager, reqs: dict, own: bool) -> None:
        t0 = time.process_time_ns()
        sched = {}
        for rid in ids:
            v = validate(manager, reqs[rid], list(drafts[rid]))
            sched[rid] = v + [-1] * (k - len(v))  # as the scheduler pads invalid drafts
        t1 = time.process_time_ns()
        fill = manager.grammar_bitmask if own else bitmask.__get__(manager)
        last_mask[row] = fill(reqs, ids, sched)
        t2 = time.process_time_ns()
        for rid in ids:
            n_valid = sched[rid].index(-1) if -1 in sched[rid] else k
            new = bonus[rid][: n_valid + 1]
            assert manager.accept_tokens(reqs[rid], new)
            committed[row][rid] = len(new)
        t3 = time.process_time_ns()
        parts[row]["validate"].append(t1 - t0)
        parts[row]["grammar_bitmask"].append(t2 - t1)
        parts[row]["accept"].append(t3 - t2)

    def undo(row: str) -> None:  # untimed: back to the step's start
        reqs = theirs if row == VLLM_ROWS[0] else ours
        for rid, n in committed[row].items():
            reqs[rid].structured_output_request.grammar.rollback(n)

    fns = {
        VLLM_ROWS[0]: lambda: step(VLLM_ROWS[0], theirs_m, theirs, own=False),
        VLLM_ROWS[1]: lambda: step(VLLM_ROWS[1], ours_m, ours, own=False),
        VLLM_ROWS[2]: lambda: step(VLLM_ROWS[2], ours_m, ours, own=True),
    }
    masks = {}
    for row, fn in fns.items():
        fn()
        masks[row] = np.array(last_mask[row], copy=True)
        undo(row)
    identical = all(np.array_equal(m, masks[VLLM_ROWS[0]]) for m in masks.values())
    for p in parts.values():
        for v in p.values():
            v.clear()
    return {
        "fns": fns,
        "after": undo,
        "parts": parts,
        "masks_identical": identical,
        "rows": int(masks[VLLM_ROWS[0]].shape[0]),
        "cleanup": (ours, theirs),
    }


# ---------------------------------------------------------------------------- main


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def build_parser() -> argparse.ArgumentParser:
    ap = timed_parser(__doc__, iterations=15, warmup=2, unit="rounds", per="case")
    ap.add_argument(
        "--data",
        type=Path,
        default=None,
        help="MaskBench folder or .jsonl (default: ../shared/data/maskbench-sample "
        "when it exists, else benchmarks/data/engine_schemas.jsonl)",
    )
    ap.add_argument("--schemas", type=int, default=16, help="distinct schemas in a batch")
    ap.add_argument(
        "--every",
        type=int,
        default=None,
        help="every n-th MaskBench file (default: spread over the folder)",
    )
    ap.add_argument("--batch", type=_ints, default=[1, 8, 64, 256], help="batch sizes")
    ap.add_argument("--tree-nodes", type=_ints, default=[8, 16, 64], help="SGLang tree sizes")
    ap.add_argument("--chains", type=_ints, default=[1, 3, 7], help="vLLM draft lengths")
    ap.add_argument("--engines", default="sglang,vllm", help="sglang, vllm or both")
    ap.add_argument(
        "--budget",
        type=float,
        default=20.0,
        help="seconds a case may take (fewer rounds, at least 3, beyond it)",
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help="result JSON file")
    ap.add_argument(
        "--write-data",
        type=Path,
        default=None,
        help="write the selected schemas and documents as .jsonl and stop "
        "(how benchmarks/data/engine_schemas.jsonl was made)",
    )
    return ap


def main(argv: list[str] | None = None) -> dict:
    args = build_parser().parse_args(argv)
    engines = {e.strip() for e in args.engines.split(",") if e.strip()}
    if not engines <= {"sglang", "vllm"} or not engines:
        raise SystemExit("--engines: sglang, vllm or both")
    data = args.data or default_data()
    load_start = load_average()
    import torch

    # One intra-op thread: with more, every torch.full of the engines' per-step mask pays
    # OpenMP wake-ups (about 8 ms of CPU per call on a shared 2-core machine), in both
    # engines alike, which would drown what is measured here.
    torch_threads = torch.get_num_threads()
    torch.set_num_threads(1)
    env = load_engines()
    schemas = select_schemas(env, data, args.schemas, args.every, min_tokens=10)
    if args.write_data is not None:
        with open(args.write_data, "w", encoding="utf-8") as fh:
            for s in schemas:
                entry = {
                    "name": s["name"],
                    "schema": json.loads(s["schema"]),
                    "document": s["document"],
                }
                fh.write(json.dumps(entry, ensure_ascii=False) + "\n")
        print(f"wrote {len(schemas)} schemas to {args.write_data}")
        return {"schemas": [s["name"] for s in schemas]}
    results: dict[str, Any] = {"sglang": {}, "vllm": {}}
    lines = []
    if "sglang" in engines:
        for n in args.tree_nodes:
            for b in args.batch:
                case = sglang_case(env, schemas, b, n, args.seed)
                timing = time_rows(case["fns"], args.iterations, args.warmup, args.budget)
                cpu = timing["cpu_ms"]
                entry = {
                    "batch": b,
                    "nodes": n,
                    **timing,
                    "xgrammar_over_drop_in_cpu": cpu[SGL_ROWS[0]] / cpu[SGL_ROWS[2]],
                    "masks_identical": case["masks_identical"],
                    "rows_filled": case["rows_filled"],
                    "rows": case["rows"],
                }
                results["sglang"][f"B={b} N={n}"] = entry
                lines.append(_line("sglang", f"B={b:<3} N={n:<2}", entry, SGL_ROWS))
                print(lines[-1], flush=True)
    if "vllm" in engines:
        import tempfile

        tg_vllm = env["tg_vllm"]
        tg_vllm.install()  # the drop-ins on the manager class; vLLM's own called directly
        try:
            with tempfile.TemporaryDirectory(prefix="bench_engines_model_") as tmp:
                model_dir = write_vllm_model_dir(Path(tmp))
                managers: dict = {}
                for k in args.chains:
                    for b in args.batch:
                        case = vllm_case(env, schemas, b, k, args.seed, model_dir, managers)
                        timing = time_rows(
                            case["fns"],
                            args.iterations,
                            args.warmup,
                            args.budget,
                            after=case["after"],
                        )
                        cpu = timing["cpu_ms"]
                        parts = {
                            row: {part: statistics.median(v) / 1e6 for part, v in p.items() if v}
                            for row, p in case["parts"].items()
                        }
                        entry = {
                            "batch": b,
                            "draft_tokens": k,
                            **timing,
                            "parts_cpu_ms": parts,
                            "xgrammar_over_drop_in_cpu": cpu[VLLM_ROWS[0]] / cpu[VLLM_ROWS[2]],
                            "masks_identical": case["masks_identical"],
                            "rows": case["rows"],
                        }
                        results["vllm"][f"B={b} k={k}"] = entry
                        lines.append(_line("vllm", f"B={b:<3} k={k:<2}", entry, VLLM_ROWS))
                        print(lines[-1], flush=True)
        finally:
            tg_vllm.uninstall()
    results["meta"] = {
        **run_meta(argv, load_start),
        "data": str(data),
        "schemas": [s["name"] for s in schemas],
        "iterations": args.iterations,
        "warmup": args.warmup,
        "budget_s": args.budget,
        "seed": args.seed,
        "versions": {**package_versions(), **_engine_versions()},
        "timing": "median per step; cpu_ms = time.process_time (all threads of the process), "
        "wall_ms = time.perf_counter; rows interleaved, order rotating per round",
        "torch_threads": f"1 (was {torch_threads}): torch.set_num_threads(1), see the script",
        "rows": {
            "sglang": {
                SGL_ROWS[0]: "spec_utils.generate_token_bitmask (SGLang's own) on "
                "XGrammarGrammarBackend grammars",
                SGL_ROWS[1]: "spec_utils.generate_token_bitmask (SGLang's own) on "
                "treegram SGLangGrammarBackend grammars",
                SGL_ROWS[2]: "treegram.serving.sglang.generate_token_bitmask (one batched "
                "traversal) on the same treegram grammars",
            },
            "vllm": {
                VLLM_ROWS[0]: "StructuredOutputManager.validate_tokens per request + "
                "grammar_bitmask + accept_tokens per request, vLLM's own methods, vLLM's "
                "xgrammar backend",
                VLLM_ROWS[1]: "the same vLLM methods on treegram's VLLMBackend",
                VLLM_ROWS[2]: "vLLM's validate_tokens and accept_tokens, "
                "treegram.serving.vllm.grammar_bitmask (the drop-in), on treegram's "
                "VLLMBackend",
            },
        },
        "trees": "EAGLE-shaped: level by level, topk candidates below the best node of the "
        f"level above (topk {TOPK}), the first the document's next token, the others an "
        "allowed alternative (half) or a random token; breadth-first order",
        "chains": "n-gram chains: the document's next k tokens, 30 % with one replaced by a "
        "random token; validated, padded with -1 as vLLM's scheduler does; committed: the "
        "valid drafts and the document's next token",
    }
    results = {"meta": results.pop("meta"), **results}
    write_results(args.output, results)
    return results


def _line(engine: str, label: str, entry: dict, rows) -> str:
    cpu = entry["cpu_ms"]
    cells = "  ".join(f"{cpu[r]:9.3f}" for r in rows)
    ratio = entry["xgrammar_over_drop_in_cpu"]
    same = str(entry["masks_identical"]).lower()
    return f"{engine:<6} {label}  {cells}   xgrammar/drop-in {ratio:6.2f}x  identical={same}"


def _engine_versions() -> dict:
    import importlib.metadata

    out = {}
    for pkg in ("sglang", "vllm", "transformers"):
        try:
            out[pkg] = importlib.metadata.version(pkg)
        except importlib.metadata.PackageNotFoundError:
            out[pkg] = "not installed"
    return out


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    out = main()
    ok = all(c["masks_identical"] for e in ("sglang", "vllm") for c in out.get(e, {}).values())
    sys.exit(0 if ok else 1)
