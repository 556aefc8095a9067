#!/usr/bin/env python
"""treegram vs xgrammar: built-in JSON grammar on the DeepSeek-V4 vocabulary, one process.

Measures, for both engines on the same vocabulary and the same token streams:

- compile time of the built-in JSON grammar (median of ``--compile-repeats`` fresh compiles,
  caching disabled); treegram classifies automaton states lazily, so its
  "compile + classify all states" time is reported too (xgrammar's compile already
  precomputes its per-state token masks, so that row is the like-for-like one);
- per-token ``fill_next_token_bitmask``, ``accept_token`` and ``rollback(1)`` times while
  walking real JSON documents tokenized with the real tokenizer, run ``--passes`` times:
  the first pass is cold (it includes treegram's lazy classification), the headline
  figures are over every later pass;
- a correctness guard: both engines must accept every token, and their bitmasks must be
  identical at every step of every pass (mismatches are counted and reported);
- first-import cost: a subprocess that imports the engine, builds a matcher on a tiny
  vocabulary and fills one mask, with a cold and then a warm numba cache.

Run from the repository root: ``python benchmarks/bench_matcher.py --help``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import arg_parser, command_line, package_versions, platform_meta, write_results  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
DEFAULT_OUTPUT = REPO / "benchmarks" / "results" / "matcher.json"
FALLBACK_CORPUS = REPO / "benchmarks" / "data" / "json_docs.jsonl"
MASKBENCH_DIR = "maskbench-sample"

# json.dumps styles, cycled over the documents: (indent, ensure_ascii)
STYLES = ((None, True), (2, False), (None, False), (2, True))

MAX_MISMATCH_EXAMPLES = 10

_TG_IMPORT_SCRIPT = """
import treegram
vocab = [b"{", b"}", b"[", b"]", b'"', b"a", b"1", b",", b":", b" ", b"\\n", b"</s>"]
info = treegram.TokenizerInfo(vocab, stop_token_ids=[11])
compiled = treegram.GrammarCompiler(info).compile_builtin_json_grammar()
matcher = treegram.GrammarMatcher(compiled)
bitmask = treegram.allocate_token_bitmask(1, info.vocab_size, backend="numpy")
matcher.fill_next_token_bitmask(bitmask)
assert matcher.accept_token(0)
"""

_XG_IMPORT_SCRIPT = """
import xgrammar
vocab = [b"{", b"}", b"[", b"]", b'"', b"a", b"1", b",", b":", b" ", b"\\n", b"</s>"]
info = xgrammar.TokenizerInfo(vocab, xgrammar.VocabType.RAW, stop_token_ids=[11])
compiled = xgrammar.GrammarCompiler(info).compile_builtin_json_grammar()
matcher = xgrammar.GrammarMatcher(compiled)
bitmask = xgrammar.allocate_token_bitmask(1, info.vocab_size)
matcher.fill_next_token_bitmask(bitmask)
assert matcher.accept_token(0)
"""


# ---------------------------------------------------------------------------- documents


def default_data() -> Path | None:
    """``<repo>/../shared/data`` when it exists, else None (use the shipped corpus)."""
    path = REPO.parent / "shared" / "data"
    return path if path.is_dir() else None


def _maskbench_candidates(folder: Path) -> Iterator[tuple[str, Any]]:
    for file in sorted(folder.glob("*.json")):
        with open(file, encoding="utf-8") as fh:
            entry = json.load(fh)
        tests = entry.get("tests", []) if isinstance(entry, dict) else []
        for i, test in enumerate(tests):
            if test.get("valid") is True:
                yield f"{file.name}#{i}", test.get("data")


def _jsonl_candidates(file: Path) -> Iterator[tuple[str, Any]]:
    with open(file, encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                row = json.loads(line)
                yield row["source"], row["data"]


def _candidates(data: Path | None) -> tuple[str, Iterator[tuple[str, Any]]]:
    if data is None:
        return str(FALLBACK_CORPUS), _jsonl_candidates(FALLBACK_CORPUS)
    if data.is_file():
        return str(data), _jsonl_candidates(data)
    folder = data / MASKBENCH_DIR if (data / MASKBENCH_DIR).is_dir() else data
    if not any(folder.glob("*.json")):
        raise SystemExit(f"--data {data}: no {MASKBENCH_DIR}/*.json (or *.json) files there")
    return str(folder), _maskbench_candidates(folder)


def serialize(data: Any, index: int) -> str | None:
    """The document's text in style ``index % len(STYLES)``; None if it is not usable."""
    if not isinstance(data, (dict, list)):
        return None
    indent, ensure_ascii = STYLES[index % len(STYLES)]
    try:
        text = json.dumps(data, indent=indent, ensure_ascii=ensure_ascii, allow_nan=False)
        text.encode("utf-8")  # lone surrogates are not encodable
    except (ValueError, UnicodeEncodeError):
        return None
    return text


def load_documents(data: Path | None, n_docs: int, tokenizer, decoded_vocab) -> dict:
    """The first ``n_docs`` usable documents (sorted file order), serialized and tokenized.

    Usable: a valid test instance that is a JSON object or array, serializable without
    NaN/Infinity, whose tokenization decodes back to exactly its UTF-8 bytes.
    """
    source, candidates = _candidates(data)
    docs: list[dict] = []
    skipped = 0
    for name, value in candidates:
        if len(docs) >= n_docs:
            break
        text = serialize(value, len(docs))
        if text is None:
            skipped += 1
            continue
        ids = tokenizer.encode(text, add_special_tokens=False).ids
        if b"".join(decoded_vocab[t] for t in ids) != text.encode("utf-8") or not ids:
            skipped += 1
            continue
        indent, ensure_ascii = STYLES[len(docs) % len(STYLES)]
        docs.append(
            {
                "source": name,
                "value": value,
                "text": text,
                "ids": ids,
                "indent": indent,
                "ensure_ascii": ensure_ascii,
            }
        )
    return {"source": source, "docs": docs, "skipped": skipped}


# ---------------------------------------------------------------------------- timing


def _median_ms(samples_ns: list[int]) -> float:
    return statistics.median(samples_ns) / 1e6


def time_compiles(engines: dict[str, Callable[[], Any]], repeats: int) -> dict[str, list[int]]:
    """Interleaved fresh compiles: ``repeats`` rounds, each engine once per round (ns)."""
    out: dict[str, list[int]] = {name: [] for name in engines}
    for _ in range(repeats):
        for name, fn in engines.items():
            t0 = time.perf_counter_ns()
            fn()
            out[name].append(time.perf_counter_ns() - t0)
    return out


def _stats_us(samples_ns: list[int]) -> dict[str, float]:
    arr = np.asarray(samples_ns, dtype=np.float64) / 1e3
    if arr.size == 0:
        return {"p50": float("nan"), "p99": float("nan"), "mean": float("nan"), "max": float("nan")}
    return {
        "p50": float(np.percentile(arr, 50)),
        "p99": float(np.percentile(arr, 99)),
        "mean": float(arr.mean()),
        "max": float(arr.max()),
    }


def _diff_example(tg_row: np.ndarray, xg_row: np.ndarray, vocab_size: int) -> dict:
    def bits(row: np.ndarray) -> np.ndarray:
        return np.unpackbits(row.view(np.uint8), bitorder="little")[:vocab_size].astype(bool)

    a, b = bits(tg_row), bits(xg_row)
    only_tg = np.flatnonzero(a & ~b)
    only_xg = np.flatnonzero(b & ~a)
    return {
        "n_only_treegram": int(only_tg.size),
        "n_only_xgrammar": int(only_xg.size),
        "only_treegram": only_tg[:8].tolist(),
        "only_xgrammar": only_xg[:8].tolist(),
    }


def walk(
    docs: list[dict], passes: int, tg, xg, tg_bitmask, xg_bitmask, vocab_size: int, stop_id: int
) -> dict:
    """Walk every document ``passes`` times with both matchers in lock step.

    Per step: fill both masks (order alternates by step), compare them, accept the token in
    both (order alternates too), time a ``rollback(1)`` of it and accept it again. After
    the last token of a document: one more fill + compare (the stop token must be
    allowed), accept the stop token, reset.
    """
    tg_np = tg_bitmask.numpy() if hasattr(tg_bitmask, "numpy") else tg_bitmask
    xg_np = xg_bitmask.numpy() if hasattr(xg_bitmask, "numpy") else xg_bitmask
    full_words = vocab_size // 32
    tail_bits = vocab_size % 32
    tail_mask = np.int32(np.uint32((1 << tail_bits) - 1).view(np.int32)) if tail_bits else 0
    ns = time.perf_counter_ns
    names = ("treegram", "xgrammar")
    per_pass = []
    mismatches = 0
    examples: list[dict] = []
    rejections: list[dict] = []
    for p in range(passes):
        fill = {n: [] for n in names}
        accept = {n: [] for n in names}
        rollback = {n: [] for n in names}
        for d, doc in enumerate(docs):
            ids = doc["ids"] + [stop_id]
            for step, tok in enumerate(ids):
                order = (tg, xg) if step % 2 == 0 else (xg, tg)
                for m in order:
                    bm = tg_bitmask if m is tg else xg_bitmask
                    t0 = ns()
                    m.fill_next_token_bitmask(bm, 0)
                    dt = ns() - t0
                    fill["treegram" if m is tg else "xgrammar"].append(dt)
                a, b = tg_np[0], xg_np[0]
                same = np.array_equal(a[:full_words], b[:full_words]) and (
                    not tail_bits or (a[full_words] & tail_mask) == (b[full_words] & tail_mask)
                )
                if not same:
                    mismatches += 1
                    if len(examples) < MAX_MISMATCH_EXAMPLES:
                        examples.append(
                            {
                                "pass": p,
                                "doc": d,
                                "source": doc["source"],
                                "step": step,
                                **_diff_example(a, b, vocab_size),
                            }
                        )
                ok = {}
                for m in order:
                    t0 = ns()
                    r = m.accept_token(tok)
                    dt = ns() - t0
                    name = "treegram" if m is tg else "xgrammar"
                    ok[name] = bool(r)
                    accept[name].append(dt)
                    if r:  # rollback(1) of the token just accepted, timed; accepted again
                        t0 = ns()
                        m.rollback(1)
                        rollback[name].append(ns() - t0)
                        m.accept_token(tok)
                if not all(ok.values()):
                    rejections.append(
                        {
                            "pass": p,
                            "doc": d,
                            "source": doc["source"],
                            "step": step,
                            "token": int(tok),
                            **ok,
                        }
                    )
                    break
            tg.reset()
            xg.reset()
        walk_ns = {n: sum(fill[n]) + sum(accept[n]) for n in names}
        per_pass.append({"fill": fill, "accept": accept, "rollback": rollback, "walk_ns": walk_ns})
    return {
        "per_pass": per_pass,
        "mismatches": mismatches,
        "mismatch_examples": examples,
        "rejections": rejections,
    }


def import_cost(engine: str, cache_dir: str) -> float:
    """Wall seconds of a subprocess that imports ``engine`` and fills one tiny mask."""
    script = _TG_IMPORT_SCRIPT if engine == "treegram" else _XG_IMPORT_SCRIPT
    # an empty kernel cache, not seeded from kernels a build shipped: every kernel is compiled
    env = dict(
        os.environ,
        NUMBA_CACHE_DIR=cache_dir,
        TREEGRAM_KERNEL_CACHE_DIR=cache_dir,
        TREEGRAM_KERNEL_CACHE_SEED="0",
    )
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", script], check=True, env=env, cwd=REPO, timeout=900)
    return time.perf_counter() - t0


def measure_imports() -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix="bench_matcher_numba_") as tmp:
        base = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], check=True, timeout=60)
        interpreter = time.perf_counter() - base
        for engine in ("treegram", "xgrammar"):
            cache = os.path.join(tmp, engine)
            os.makedirs(cache)
            cold = import_cost(engine, cache)
            warm = import_cost(engine, cache)
            out[engine] = {"import_s_cold": cold, "import_s_warm": warm}
        out["interpreter_s"] = interpreter  # type: ignore[assignment]
    return out


# ---------------------------------------------------------------------------- report


ROWS = (  # (label, key, unit format)
    ("compile builtin JSON, median (ms)", "compile_ms", "{:.2f}"),
    ("compile + classify all states (ms) [1]", "compile_classify_ms", "{:.2f}"),
    ("first compile in process (ms)", "compile_ms_first", "{:.2f}"),
    ("fill p50 (us), warm passes", "fill_us_p50", "{:.1f}"),
    ("fill p99 (us), warm passes", "fill_us_p99", "{:.1f}"),
    ("fill mean (us), warm passes", "fill_us_mean", "{:.1f}"),
    ("fill max (us), warm passes", "fill_us_max", "{:.1f}"),
    ("accept p50 (us), warm passes", "accept_us_p50", "{:.1f}"),
    ("accept p99 (us), warm passes", "accept_us_p99", "{:.1f}"),
    ("rollback(1) p50 (us), warm passes", "rollback_us_p50", "{:.1f}"),
    ("rollback(1) p99 (us), warm passes", "rollback_us_p99", "{:.1f}"),
    ("fill p50 (us), cold pass 1", "fill_us_p50_cold", "{:.1f}"),
    ("fill p99 (us), cold pass 1", "fill_us_p99_cold", "{:.1f}"),
    ("fill max (us), cold pass 1", "fill_us_max_cold", "{:.1f}"),
    ("accept p50 (us), cold pass 1", "accept_us_p50_cold", "{:.1f}"),
    ("walk all docs (ms), cold pass 1", "walk_ms_cold", "{:.2f}"),
    ("walk all docs (ms), warm median", "walk_ms_warm", "{:.2f}"),
    ("import+tiny mask (s), cold cache", "import_s_cold", "{:.2f}"),
    ("import+tiny mask (s), warm cache", "import_s_warm", "{:.2f}"),
)


def _ratio(tg: float | None, xg: float | None) -> float | None:
    if tg is None or xg is None or not xg or xg != xg or tg != tg:
        return None
    return tg / xg


def format_table(results: dict) -> str:
    tg, xg, ratios = results["treegram"], results["xgrammar"], results["ratios"]
    width = max(len(r[0]) for r in ROWS)
    lines = [
        f"{'metric':<{width}}  {'treegram':>10}  {'xgrammar':>10}  {'tg/xg':>7}",
        "-" * (width + 33),
    ]
    for label, key, fmt in ROWS:
        if key not in tg and key not in xg:
            continue
        xg_key = "compile_ms" if key == "compile_classify_ms" else key
        a, b, r = tg.get(key), xg.get(xg_key), ratios.get(key)
        cells = [fmt.format(v) if v is not None else "-" for v in (a, b)]
        lines.append(
            f"{label:<{width}}  {cells[0]:>10}  {cells[1]:>10}  "
            f"{(f'{r:.2f}' if r is not None else '-'):>7}"
        )
    meta = results["meta"]
    lines.append("-" * (width + 33))
    lines.append(
        f"docs {meta['n_docs']}, tokens/pass {meta['n_tokens']} "
        f"(+{meta['n_docs']} end-of-doc steps), passes {meta['passes']} "
        f"(headline: {meta['headline_passes']}), vocab {meta['vocab_size']}"
    )
    lines.append(
        f"mask mismatches: {meta['mask_mismatches']} / {meta['mask_comparisons']} "
        f"compared steps; rejected tokens: {len(meta['rejections'])}"
    )
    if "interpreter_s" in meta:
        lines.append(f"interpreter start alone (python -c pass): {meta['interpreter_s']:.2f} s")
    lines.append("[1] xgrammar column: its compile (it precomputes every state's token masks)")
    return "\n".join(lines)


# ---------------------------------------------------------------------------- main


def build_parser() -> argparse.ArgumentParser:
    ap = arg_parser(__doc__)
    default = default_data()
    ap.add_argument(
        "--data",
        type=Path,
        default=default,
        help="shared data folder (holding maskbench-sample/), a folder of "
        "MaskBench *.json files, or a .jsonl corpus; without it the "
        f"shipped corpus {FALLBACK_CORPUS.relative_to(REPO)} is used",
    )
    ap.add_argument("--docs", type=int, default=60, help="number of documents to walk")
    ap.add_argument(
        "--passes",
        type=int,
        default=3,
        help="passes over the corpus; pass 1 is cold, the headline is passes 2..K",
    )
    ap.add_argument(
        "--compile-repeats",
        type=int,
        default=10,
        help="fresh compiles per engine (median reported)",
    )
    ap.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help="result JSON file")
    ap.add_argument(
        "--no-import-cost",
        action="store_true",
        help="skip the first-import subprocess measurements",
    )
    return ap


def main(argv: list[str] | None = None) -> dict:
    args = build_parser().parse_args(argv)
    if args.docs < 1 or args.passes < 1 or args.compile_repeats < 1:
        raise SystemExit("--docs, --passes and --compile-repeats must be >= 1")

    import tokenizers
    import xgrammar as xgr

    import treegram
    from treegram.tokenizer import deepseek_v4_tokenizer_json

    info = treegram.TokenizerInfo.deepseek_v4()
    vocab_size = info.vocab_size
    stop_ids = list(info.stop_token_ids)
    xinfo = xgr.TokenizerInfo(
        list(info.decoded_vocab), xgr.VocabType.RAW, vocab_size=vocab_size, stop_token_ids=stop_ids
    )
    tokenizer = tokenizers.Tokenizer.from_file(str(deepseek_v4_tokenizer_json()))
    corpus = load_documents(args.data, args.docs, tokenizer, info.decoded_vocab)
    docs = corpus["docs"]
    if not docs:
        raise SystemExit(f"no usable documents in {corpus['source']}")

    # ---- compile
    tg_compiler = treegram.GrammarCompiler(info, cache_enabled=False)
    xg_compiler = xgr.GrammarCompiler(xinfo, cache_enabled=False)

    def tg_compile_classify():
        tg_compiler.compile_builtin_json_grammar().classify_all_states()

    compiles = time_compiles(
        {
            "treegram": tg_compiler.compile_builtin_json_grammar,
            "treegram_classify": tg_compile_classify,
            "xgrammar": xg_compiler.compile_builtin_json_grammar,
        },
        args.compile_repeats,
    )

    # ---- walk: warm both engines' code on throwaway grammars, then a fresh compile each
    tg_bitmask = treegram.allocate_token_bitmask(1, vocab_size)
    xg_bitmask = xgr.allocate_token_bitmask(1, vocab_size)
    treegram.GrammarMatcher(tg_compiler.compile_builtin_json_grammar()).fill_next_token_bitmask(
        tg_bitmask
    )
    xgr.GrammarMatcher(xg_compiler.compile_builtin_json_grammar()).fill_next_token_bitmask(
        xg_bitmask
    )
    tg_matcher = treegram.GrammarMatcher(tg_compiler.compile_builtin_json_grammar())
    xg_matcher = xgr.GrammarMatcher(xg_compiler.compile_builtin_json_grammar())
    walked = walk(
        docs, args.passes, tg_matcher, xg_matcher, tg_bitmask, xg_bitmask, vocab_size, stop_ids[0]
    )

    imports = None if args.no_import_cost else measure_imports()

    # ---- aggregate
    per_pass = walked["per_pass"]
    warm = per_pass[1:] if len(per_pass) > 1 else per_pass
    results: dict[str, dict] = {}
    for name in ("treegram", "xgrammar"):
        fill_warm = [x for pp in warm for x in pp["fill"][name]]
        acc_warm = [x for pp in warm for x in pp["accept"][name]]
        rb_warm = [x for pp in warm for x in pp["rollback"][name]]
        fw, aw, rw = _stats_us(fill_warm), _stats_us(acc_warm), _stats_us(rb_warm)
        fc, ac = _stats_us(per_pass[0]["fill"][name]), _stats_us(per_pass[0]["accept"][name])
        r = {
            "compile_ms": _median_ms(compiles[name]),
            "compile_ms_first": compiles[name][0] / 1e6,
            "compile_ms_samples": [round(x / 1e6, 3) for x in compiles[name]],
            "fill_us_p50": fw["p50"],
            "fill_us_p99": fw["p99"],
            "fill_us_mean": fw["mean"],
            "fill_us_max": fw["max"],
            "accept_us_p50": aw["p50"],
            "accept_us_p99": aw["p99"],
            "rollback_us_p50": rw["p50"],
            "rollback_us_p99": rw["p99"],
            "fill_us_p50_cold": fc["p50"],
            "fill_us_p99_cold": fc["p99"],
            "fill_us_max_cold": fc["max"],
            "accept_us_p50_cold": ac["p50"],
            "walk_ms_cold": per_pass[0]["walk_ns"][name] / 1e6,
            "walk_ms_warm": statistics.median(pp["walk_ns"][name] for pp in warm) / 1e6,
        }
        if name == "treegram":
            r["compile_classify_ms"] = _median_ms(compiles["treegram_classify"])
            r["compile_classify_ms_first"] = compiles["treegram_classify"][0] / 1e6
            r["compile_classify_ms_samples"] = [
                round(x / 1e6, 3) for x in compiles["treegram_classify"]
            ]
        if imports is not None:
            r.update(imports[name])
        results[name] = r
    tg_r, xg_r = results["treegram"], results["xgrammar"]
    ratios = {}
    for _, key, _ in ROWS:
        xg_key = "compile_ms" if key == "compile_classify_ms" else key
        if key in tg_r:
            ratios[key] = _ratio(tg_r.get(key), xg_r.get(xg_key))
    results["ratios"] = ratios
    n_tokens = sum(len(d["ids"]) for d in docs)
    meta: dict[str, Any] = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "vocab_size": vocab_size,
        "n_docs": len(docs),
        "n_tokens": n_tokens,
        "n_steps_per_pass": n_tokens + len(docs),
        "passes": args.passes,
        "headline_passes": (
            f"passes 2..{args.passes}"
            if args.passes > 1
            else "pass 1 (only one pass: headline = cold)"
        ),
        "compile_repeats": args.compile_repeats,
        "mask_mismatches": walked["mismatches"],
        "mask_comparisons": (n_tokens + len(docs)) * args.passes,
        "mismatch_examples": walked["mismatch_examples"],
        "rejections": walked["rejections"],
        "data_source": corpus["source"],
        "docs_skipped": corpus["skipped"],
        "docs": [
            {
                "source": d["source"],
                "indent": d["indent"],
                "ensure_ascii": d["ensure_ascii"],
                "n_tokens": len(d["ids"]),
                "n_bytes": len(d["text"].encode("utf-8")),
            }
            for d in docs
        ],
        "bitmask": {
            "treegram": type(tg_bitmask).__module__ + "." + type(tg_bitmask).__name__,
            "xgrammar": type(xg_bitmask).__module__ + "." + type(xg_bitmask).__name__,
        },
        "machine": platform_meta(),
        "versions": package_versions(),
        "command": command_line(argv),
        "notes": (
            "compile: median of fresh compiles, cache disabled, engines interleaved; "
            "walk: both engines in lock step on the same token ids, fill order "
            "alternating per step; code of both engines warmed on a throwaway "
            "grammar before pass 1, so pass 1 measures treegram's lazy state "
            "classification, not JIT loading; import: subprocess wall time including "
            "interpreter start, treegram with a fresh kernel cache (TREEGRAM_KERNEL_CACHE_DIR, "
            "not seeded: cold) then the "
            "same dir (warm); xgrammar has no JIT cache, its cold/warm differ only by "
            "OS file caches."
        ),
    }
    if imports is not None:
        meta["interpreter_s"] = imports["interpreter_s"]
    results = {"meta": meta, "treegram": tg_r, "xgrammar": xg_r, "ratios": ratios}

    write_results(args.output, results, format_table(results), default=_json_default)
    if walked["rejections"]:
        raise AssertionError(
            f"an engine rejected a token of a valid document: {walked['rejections'][:3]}"
        )
    return results


def _json_default(value: Any) -> Any:
    if isinstance(value, (np.integer, np.floating)):
        return value.item()
    raise TypeError(f"not JSON serializable: {type(value).__name__}")


if __name__ == "__main__":
    out = main()
    sys.exit(1 if out["meta"]["mask_mismatches"] else 0)
