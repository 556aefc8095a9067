#!/usr/bin/env python
"""MaskBench: treegram vs xgrammar vs llguidance on JSON Schemas, DeepSeek-V4 vocabulary.

For every MaskBench file (``{description, meta, schema, tests: [{description, valid, data}]}``)
each engine compiles the schema (``any_whitespace=True``, ``strict_mode=False`` for treegram
and xgrammar, llguidance's defaults), then walks every test instance token by token: the
instance is serialized with ``json.dumps`` and tokenized with the DeepSeek-V4 tokenizer
(``tokenizers``, no special tokens); per step the engine fills its token bitmask (timed) and
the next token must be allowed by it, then the token is accepted; after the last token the
stop token must be allowed. Counts per engine: compile errors, timeouts, validation errors
(a valid instance rejected), invalidation errors (an invalid instance accepted to the end),
passing schemas (no error of any kind), mask time and compile time percentiles, and per
schema the first use of the grammar: its compile plus every mask of all its instances (what a
serving engine pays for a schema it has not seen), as a median over the schemas every engine
walked, with its ratio to xgrammar's.

Each engine runs in its own worker process (started once, warmed up, restarted after a
timeout), so a compile or walk that exceeds ``--timeout`` seconds can be stopped; the
engines take turns schema by schema. treegram's worker makes its compiler as the SGLang and
vLLM adapters do, with the kernel warm-up (``GrammarCompiler(warm_up=...)``): a serving
process loads every kernel before its first request, so no mask pays a kernel's first load
(the process start is ``bench_startup.py``'s figure).

Run from the repository root: ``python benchmarks/bench_maskbench.py --help``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import pickle
import select
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (  # noqa: E402
    arg_parser,
    command_line,
    llguidance_like,
    package_versions,
    platform_meta,
    write_json,
    xgrammar_like,
)

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DATA = REPO.parent / "shared" / "data" / "maskbench-sample"
DEFAULT_OUTPUT = REPO / "benchmarks" / "results" / "maskbench.json"
WIDE_OUTPUT = REPO / "benchmarks" / "results" / "maskbench_wide.json"  # --wide's default
ENGINES = ("treegram", "xgrammar", "llguidance")
ALL_ENGINES = (*ENGINES, "treegram_base")  # treegram_base: --baseline-src
CHECKPOINT_EVERY = 50  # schemas between writes of the figures so far
WIDE = {"spread": 700, "repeats": 2, "timeout": 30.0}  # --wide: the held-out figures
DEFAULT_EVERY = 12  # default subset: every 12th file in sorted order (see --every)
WARMUP_SCHEMA = {
    "type": "object",
    "properties": {"a": {"type": "string"}, "b": {"type": "array", "items": {"type": "integer"}}},
    "required": ["a"],
}
WARMUP_TEXT = '{"a": "x\\u00e9y", "b": [1, -2, 30]}'


# ---------------------------------------------------------------------------- worker side


class _Worker:
    """An engine in a worker process: ``fill`` the one-row bitmask that ``words`` views,
    ``accept`` a token, ``reset`` a matcher (as treegram's and xgrammar's matchers name them)."""

    def fill(self, matcher) -> None:
        matcher.fill_next_token_bitmask(self.bitmask, 0)

    def accept(self, matcher, token: int) -> bool:
        return bool(matcher.accept_token(token))

    def reset(self, matcher) -> None:
        matcher.reset()


class _TreegramWorker(_Worker):
    def __init__(self) -> None:
        import treegram

        self.tg = treegram
        self.info = treegram.TokenizerInfo.deepseek_v4()
        # as the engine adapters make it: every kernel loaded before the first request
        self.compiler = treegram.GrammarCompiler(self.info, cache_enabled=False, warm_up=True)
        self.bitmask = treegram.allocate_token_bitmask(1, self.info.vocab_size, backend="numpy")
        self.words = self.bitmask[0]

    def compile(self, schema_text: str):
        grammar = self.tg.Grammar.from_json_schema(
            schema_text, any_whitespace=True, strict_mode=False
        )
        return self.tg.GrammarMatcher(self.compiler.compile_grammar(grammar))


class _XgrammarWorker(_Worker):
    def __init__(self) -> None:
        import xgrammar

        import treegram

        info = treegram.TokenizerInfo.deepseek_v4()
        self.xg = xgrammar
        self.compiler, self.bitmask = xgrammar_like(info)
        self.words = self.bitmask.numpy()[0]

    def compile(self, schema_text: str):
        compiled = self.compiler.compile_json_schema(
            schema_text, any_whitespace=True, strict_mode=False
        )
        return self.xg.GrammarMatcher(compiled)


class _LlguidanceWorker(_Worker):
    def __init__(self) -> None:
        import llguidance
        import llguidance.numpy as llnp

        import treegram

        self.ll = llguidance
        self.llnp = llnp
        self.tokenizer, self.bitmask = llguidance_like(treegram.TokenizerInfo.deepseek_v4())
        self.words = self.bitmask[0]

    def compile(self, schema_text: str):
        grammar = self.ll.LLMatcher.grammar_from_json_schema(schema_text)
        matcher = self.ll.LLMatcher(self.tokenizer, grammar, log_level=0)
        if matcher.is_error():
            raise ValueError(matcher.get_error())
        return matcher

    def fill(self, matcher) -> None:
        self.llnp.fill_next_token_bitmask(matcher, self.bitmask, 0)

    def accept(self, matcher, token: int) -> bool:
        return bool(matcher.consume_token(token))


_WORKERS = {
    "treegram": _TreegramWorker,
    "xgrammar": _XgrammarWorker,
    "llguidance": _LlguidanceWorker,
    "treegram_base": _TreegramWorker,  # the same worker over another checkout (--baseline-src)
}


def _allowed(words: np.ndarray, token: int) -> bool:
    return bool((int(words[token >> 5]) >> (token & 31)) & 1)


def _walk(engine, matcher, ids: list[int], stop_id: int) -> dict:
    """One instance: per token fill (timed), check, accept; then the stop token."""
    ns = time.perf_counter_ns
    times: list[int] = []
    words = engine.words
    engine.reset(matcher)
    for step, tok in enumerate(ids):
        t0 = ns()
        engine.fill(matcher)
        times.append(ns() - t0)
        if not _allowed(words, tok):
            return {"accepted": False, "step": step, "why": "masked", "mask_ns": times}
        if not engine.accept(matcher, tok):
            return {"accepted": False, "step": step, "why": "accept", "mask_ns": times}
    t0 = ns()
    engine.fill(matcher)
    times.append(ns() - t0)
    if not _allowed(words, stop_id):
        return {"accepted": False, "step": len(ids), "why": "no stop", "mask_ns": times}
    return {"accepted": True, "step": len(ids), "why": "", "mask_ns": times}


def _send(fh, obj: Any) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    view = memoryview(struct.pack("<Q", len(data)) + data)
    while view:
        written = fh.write(view)
        view = view[written if written is not None else len(view) :]
    fh.flush()


def _read_exact(fh, n: int) -> bytes:
    """Exactly ``n`` bytes from a (possibly unbuffered) binary stream; EOFError at its end."""
    chunks, left = [], n
    while left:
        chunk = fh.read(left)
        if not chunk:
            raise EOFError
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _recv(fh) -> Any:
    (n,) = struct.unpack("<Q", _read_exact(fh, 8))
    return pickle.loads(_read_exact(fh, n))


def worker_main(name: str, stop_id: int, warmup_ids: list[int], src: str | None = None) -> None:
    """Serve compile+walk requests on stdin/stdout (the real stdout moved off fd 1).

    ``src``: a checkout whose ``treegram`` package is imported instead of the installed one.
    """
    if src is not None:
        sys.path.insert(0, src)
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # library chatter on stdout goes to stderr
    inp = os.fdopen(os.dup(0), "rb")
    engine = _WORKERS[name]()
    matcher = engine.compile(json.dumps(WARMUP_SCHEMA))  # load and JIT the code paths
    _walk(engine, matcher, warmup_ids, stop_id)
    module = sys.modules.get("treegram")
    _send(out, ("ready", getattr(module, "__file__", None)))  # which treegram it runs
    while True:
        try:
            schema_text, instances = _recv(inp)
        except EOFError:
            return
        t0 = time.perf_counter_ns()
        try:
            matcher = engine.compile(schema_text)
            err = None
        except Exception as exc:  # noqa: BLE001 - any refusal or crash is a compile error
            matcher, err = None, f"{type(exc).__name__}: {str(exc)[:300]}"
        compile_ns = time.perf_counter_ns() - t0
        _send(out, ("compiled", {"error": err, "compile_ns": compile_ns}))
        if matcher is None:
            continue
        results = []
        for ids in instances:
            try:
                results.append(_walk(engine, matcher, ids, stop_id))
            except Exception as exc:  # noqa: BLE001 - a crash while walking is a rejection
                results.append(
                    {
                        "accepted": False,
                        "step": -1,
                        "why": f"{type(exc).__name__}: {str(exc)[:200]}",
                        "mask_ns": [],
                    }
                )
        # the same instances again on the now warm grammar: warm fill times
        warm: list[int] = []
        for ids, r in zip(instances, results, strict=True):
            if r["accepted"]:
                try:
                    warm.extend(_walk(engine, matcher, ids, stop_id)["mask_ns"])
                except Exception:  # noqa: BLE001, S112 - a crash was reported in the first pass
                    continue
        _send(out, ("walked", {"results": results, "warm_ns": warm}))


# ---------------------------------------------------------------------------- parent side


class WorkerTimeoutError(Exception):
    pass


class Worker:
    """One engine in a subprocess; restarted after a timeout or a crash."""

    def __init__(
        self, name: str, stop_id: int, warmup_ids: list[int], src: str | None = None
    ) -> None:
        self.name = name
        self.src = src
        self.stop_id = stop_id
        self.warmup_ids = warmup_ids
        self.proc: subprocess.Popen | None = None
        self.restarts = 0
        self.start_s: list[float] = []
        self.treegram_file: str | None = None

    def start(self) -> None:
        t0 = time.perf_counter()
        code = (
            f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); "
            f"import bench_maskbench as b; "
            f"b.worker_main({self.name!r}, {self.stop_id}, {self.warmup_ids!r}, {self.src!r})"
        )
        # unbuffered stdout: select() must see every byte the worker wrote
        self.proc = subprocess.Popen(
            [sys.executable, "-c", code],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            cwd=REPO,
            bufsize=0,
        )
        self.treegram_file = self._read(600)
        self.start_s.append(time.perf_counter() - t0)

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None

    def _read(self, timeout: float) -> Any:
        assert self.proc is not None and self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not ready:
            raise WorkerTimeoutError
        return _recv(self.proc.stdout)[1]

    def run(self, schema_text: str, instances: list[list[int]], timeout: float) -> dict:
        """``{"status": ok|compile_error|timeout|crash, ...}`` for one schema."""
        if self.proc is None:
            self.start()
        assert self.proc is not None and self.proc.stdin is not None
        phase = "compile"
        try:
            _send(self.proc.stdin, (schema_text, instances))
            compiled = self._read(timeout)
            if compiled["error"] is not None:
                return {"status": "compile_error", **compiled}
            phase = "walk"
            t0 = time.perf_counter()
            walked = self._read(timeout)
            return {
                "status": "ok",
                **compiled,
                "walk_s": time.perf_counter() - t0,
                "results": walked["results"],
                "warm_ns": walked["warm_ns"],
            }
        except WorkerTimeoutError:
            self.stop()
            self.restarts += 1
            return {"status": "timeout", "phase": phase}
        except (EOFError, BrokenPipeError, OSError) as exc:
            self.stop()
            self.restarts += 1
            return {"status": "crash", "phase": phase, "error": repr(exc)}


def list_files(data: Path, every: int, limit: int | None, spread: int | None = None) -> list[Path]:
    """Every ``every``-th file in sorted order; or, with ``spread``, that many files spread
    evenly over the files outside the default subset (every ``DEFAULT_EVERY``-th file), so
    that none of them is a schema the default run was tuned on."""
    files = sorted(data.glob("*.json"))
    if not files:
        raise SystemExit(f"--data {data}: no MaskBench *.json files")
    if spread is not None:
        held_out = [f for i, f in enumerate(files) if i % DEFAULT_EVERY]
        n = min(spread, len(held_out))
        files = [held_out[(i * len(held_out)) // n] for i in range(n)]
    else:
        files = files[::every]
    return files[:limit] if limit is not None else files


def load_instances(file: Path, tokenizer, decoded_vocab) -> tuple[str, list[dict]]:
    entry = json.loads(file.read_text(encoding="utf-8"))
    tests = []
    for i, test in enumerate(entry.get("tests", [])):
        try:
            text = json.dumps(test["data"], allow_nan=False)
            raw = text.encode("utf-8")
        except (ValueError, UnicodeEncodeError):
            tests.append({"index": i, "valid": bool(test["valid"]), "ids": None})
            continue
        ids = tokenizer.encode(text, add_special_tokens=False).ids
        if b"".join(decoded_vocab[t] for t in ids) != raw:
            ids = None  # the tokenization does not round-trip: not walkable
        tests.append({"index": i, "valid": bool(test["valid"]), "ids": ids, "n_bytes": len(raw)})
    return json.dumps(entry["schema"]), tests


def new_engine_stats() -> dict:
    return {
        "schemas": 0,
        "compile_errors": 0,
        "timeouts": 0,
        "crashes": 0,
        "validation_errors": 0,
        "invalidation_errors": 0,
        "passing": 0,
        "schemas_with_validation_errors": 0,
        "schemas_with_invalidation_errors": 0,
        "compile_ns": [],
        "mask_ns": [],
        "first_mask_ns": [],
        "warm_ns": [],
        "first_use_ns": [],
        "walk_s": [],
        "examples": {
            "compile_error": [],
            "timeout": [],
            "validation_error": [],
            "invalidation_error": [],
        },
    }


def _pct(values: list[int], q: float, scale: float) -> float | None:
    return float(np.percentile(np.asarray(values, dtype=np.float64), q) / scale) if values else None


def summarize(stats: dict) -> dict:
    mask, comp = stats["mask_ns"], stats["compile_ns"]
    out = {
        k: v
        for k, v in stats.items()
        if k not in ("mask_ns", "compile_ns", "first_use_ns", "walk_s", "first_mask_ns", "warm_ns")
    }
    first, warm = stats["first_mask_ns"], stats["warm_ns"]
    out.update(
        {
            "mask_us_mean": float(np.mean(mask) / 1e3) if mask else None,
            "mask_us_p50": _pct(mask, 50, 1e3),
            "mask_us_p99": _pct(mask, 99, 1e3),
            "mask_us_p999": _pct(mask, 99.9, 1e3),
            "mask_us_max": float(max(mask) / 1e3) if mask else None,
            "n_masks": len(mask),
            "first_mask_us_mean": float(np.mean(first) / 1e3) if first else None,
            "first_mask_us_p99": _pct(first, 99, 1e3),
            "warm_mask_us_p50": _pct(warm, 50, 1e3),
            "warm_mask_us_mean": float(np.mean(warm) / 1e3) if warm else None,
            "n_warm_masks": len(warm),
            "compile_ms_p50": _pct(comp, 50, 1e6),
            "compile_ms_p99": _pct(comp, 99, 1e6),
            "compile_ms_max": float(max(comp) / 1e6) if comp else None,
            "compile_ms_mean": float(np.mean(comp) / 1e6) if comp else None,
            "n_compiled": len(comp),
            "first_use_ms_p50": _pct(stats["first_use_ns"], 50, 1e6),
            "walk_s_max": max(stats["walk_s"]) if stats["walk_s"] else None,
        }
    )
    return out


def first_use_on_common_schemas(per_schema: list[dict], engines: list[str]) -> dict:
    """Median first-use time (compile + every mask) over the schemas that every engine
    compiled and walked, per engine, and its ratio to xgrammar's."""
    common = [row for row in per_schema if all(row[e]["status"] == "ok" for e in engines)]
    out = {"n_schemas": len(common)}
    for e in engines:
        out[e] = float(np.median([row[e]["first_use_ms"] for row in common])) if common else None
    if "xgrammar" in engines and out.get("xgrammar"):
        out["ratio_to_xgrammar"] = {e: out[e] / out["xgrammar"] for e in engines}
    return out


def record(stats: dict, file: Path, tests: list[dict], res: dict) -> dict:
    """Fold one schema's result into the engine's stats; returns the per-schema row."""
    stats["schemas"] += 1
    row: dict[str, Any] = {"status": res["status"]}
    ex = stats["examples"]
    if res["status"] in ("timeout", "crash"):
        stats["timeouts" if res["status"] == "timeout" else "crashes"] += 1
        row["phase"] = res["phase"]
        if len(ex["timeout"]) < 20:
            ex["timeout"].append(
                {"file": file.name, "phase": res["phase"], "status": res["status"]}
            )
        return row
    stats["compile_ns"].append(res["compile_ns"])
    row["compile_ms"] = res["compile_ns"] / 1e6
    if res["status"] == "compile_error":
        stats["compile_errors"] += 1
        row["error"] = res["error"]
        if len(ex["compile_error"]) < 20:
            ex["compile_error"].append({"file": file.name, "error": res["error"]})
        return row
    walkable = [t for t in tests if t["ids"] is not None]
    val_err = inval_err = 0
    first_use_ns = res["compile_ns"]
    stats["warm_ns"].extend(res["warm_ns"])
    slowest = 0
    for test, r in zip(walkable, res["results"], strict=True):
        stats["mask_ns"].extend(r["mask_ns"])
        stats["first_mask_ns"].extend(r["mask_ns"][:1])
        slowest = max([slowest, *r["mask_ns"]])
        first_use_ns += sum(r["mask_ns"])
        if test["valid"] and not r["accepted"]:
            val_err += 1
            if len(ex["validation_error"]) < 20:
                ex["validation_error"].append(
                    {"file": file.name, "test": test["index"], "step": r["step"], "why": r["why"]}
                )
        elif not test["valid"] and r["accepted"]:
            inval_err += 1
            if len(ex["invalidation_error"]) < 20:
                ex["invalidation_error"].append({"file": file.name, "test": test["index"]})
    stats["validation_errors"] += val_err
    stats["invalidation_errors"] += inval_err
    stats["schemas_with_validation_errors"] += bool(val_err)
    stats["schemas_with_invalidation_errors"] += bool(inval_err)
    if not val_err and not inval_err:
        stats["passing"] += 1
    stats["first_use_ns"].append(first_use_ns)
    stats["walk_s"].append(res["walk_s"])
    row.update(
        {
            "validation_errors": val_err,
            "invalidation_errors": inval_err,
            "walk_s": res["walk_s"],
            "first_use_ms": first_use_ns / 1e6,
            "mask_us_max": slowest / 1e3,
        }
    )
    return row


ROWS = (  # (label, key, format)
    ("schemas", "schemas", "{:d}"),
    ("passing schemas", "passing", "{:d}"),
    ("compile errors", "compile_errors", "{:d}"),
    ("timeouts", "timeouts", "{:d}"),
    ("crashes (worker died)", "crashes", "{:d}"),
    ("validation errors (valid rejected)", "validation_errors", "{:d}"),
    ("invalidation errors (invalid accepted)", "invalidation_errors", "{:d}"),
    ("mask mean (us)", "mask_us_mean", "{:.1f}"),
    ("mask p50 (us)", "mask_us_p50", "{:.1f}"),
    ("mask p99 (us)", "mask_us_p99", "{:.1f}"),
    ("mask p99.9 (us)", "mask_us_p999", "{:.0f}"),
    ("mask max (us)", "mask_us_max", "{:.0f}"),
    ("first mask of an instance, mean (us)", "first_mask_us_mean", "{:.1f}"),
    ("warm fill p50 (us, second pass)", "warm_mask_us_p50", "{:.1f}"),
    ("compile p50 (ms)", "compile_ms_p50", "{:.2f}"),
    ("compile p99 (ms)", "compile_ms_p99", "{:.1f}"),
    ("compile max (ms)", "compile_ms_max", "{:.1f}"),
    ("longest walk of a schema (s)", "walk_s_max", "{:.2f}"),
    ("first use p50: compile + masks (ms)", "first_use_ms_p50", "{:.2f}"),
)


def format_table(results: dict) -> str:
    engines = [e for e in ALL_ENGINES if e in results["engines"]]
    width = max(len(r[0]) for r in ROWS)
    lines = [
        f"{'metric':<{width}}" + "".join(f"  {e:>11}" for e in engines),
        "-" * (width + 13 * len(engines)),
    ]
    for label, key, fmt in ROWS:
        cells = []
        for e in engines:
            v = results["engines"][e].get(key)
            cells.append(fmt.format(v) if v is not None else "-")
        lines.append(f"{label:<{width}}" + "".join(f"  {c:>11}" for c in cells))
    common = results.get("first_use_common", {})
    if common.get("n_schemas"):
        cells = [f"{common[e]:.2f}" for e in engines]
        lines.append(
            f"{'  same, schemas all engines walked':<{width}}"
            + "".join(f"  {c:>11}" for c in cells)
        )
        ratios = common.get("ratio_to_xgrammar")
        if ratios:
            lines.append(
                f"{'  ratio to xgrammar':<{width}}"
                + "".join(f"  {ratios[e]:>11.3f}" for e in engines)
            )
    meta = results["meta"]
    lines.append("-" * (width + 13 * len(engines)))
    lines.append(
        f"{meta['n_schemas']} schemas ({meta['subset']}), {meta['n_instances']} "
        f"instances ({meta['n_unwalkable']} not walkable), timeout "
        f"{meta['timeout_s']} s, vocab {meta['vocab_size']}"
    )
    lines.append(
        "treegram compile is lazy (states are classified on first use): that cost "
        "is in its mask times and in the first-use rows"
    )
    return "\n".join(lines)


def format_spread(spread: dict) -> str:
    """max/min of each figure across repeats, one line per engine."""
    keys = [k for k in SPREAD_KEYS if k.startswith(("mask", "warm"))]
    lines = ["spread between repeats (max/min): " + ", ".join(keys)]
    for name, figs in spread.items():
        cells = [f"{figs[k].get('max_over_min', float('nan')):.2f}" for k in keys]
        lines.append(f"  {name:>13}: " + "  ".join(cells))
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    ap = arg_parser(__doc__)
    ap.add_argument(
        "--data", type=Path, default=DEFAULT_DATA, help="folder of MaskBench *.json files"
    )
    ap.add_argument(
        "--every",
        type=int,
        default=DEFAULT_EVERY,
        help="take every k-th file in sorted order (1 = all files)",
    )
    ap.add_argument("--limit", type=int, default=None, help="at most N schemas (after --every)")
    ap.add_argument(
        "--spread",
        type=int,
        default=None,
        help="instead of --every: N files spread evenly over those outside the default subset",
    )
    ap.add_argument(
        "--repeats",
        type=int,
        default=1,
        help="run the whole selection this many times (figures per repeat and their spread)",
    )
    ap.add_argument(
        "--wide",
        action="store_true",
        help=f"held-out figures: --spread {WIDE['spread']} --repeats {WIDE['repeats']} "
        f"--timeout {WIDE['timeout']:g} (overrides those options)",
    )
    ap.add_argument(
        "--treegram-src",
        type=Path,
        default=None,
        help="run engine treegram from the treegram package of this checkout (a frozen "
        "export, so that edits during a long run do not reach a restarted worker)",
    )
    ap.add_argument(
        "--baseline-src",
        type=Path,
        default=None,
        help="also run engine treegram_base: the treegram package of this checkout "
        "(e.g. an export of main), interleaved with the others",
    )
    ap.add_argument(
        "--timeout",
        type=float,
        default=20.0,
        help="per-schema limit in seconds, for the compile and for the walk",
    )
    ap.add_argument("--engines", nargs="+", default=list(ENGINES), choices=ENGINES)
    ap.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help="result JSON file")
    ap.add_argument("--quiet", action="store_true", help="no progress lines")
    return ap


def _run_once(
    args,
    files,
    workers,
    engines,
    tokenizer,
    decoded,
    carried: set,
    rep: int,
    t_start: float,
    checkpoint=None,
) -> tuple[dict, list[dict], int, int]:
    """One pass over ``files``; the engines take turns per schema (the first one rotates,
    and each repeat starts the rotation one engine later). ``carried``: (file, engine)
    pairs that timed out in an earlier repeat are counted as timeouts without a rerun."""
    stats = {name: new_engine_stats() for name in engines}
    per_schema: list[dict] = []
    n_instances = n_unwalkable = 0
    for k, file in enumerate(files):
        schema_text, tests = load_instances(file, tokenizer, decoded)
        n_instances += len(tests)
        n_unwalkable += sum(t["ids"] is None for t in tests)
        instances = [t["ids"] for t in tests if t["ids"] is not None]
        row: dict[str, Any] = {
            "file": file.name,
            "n_tests": len(tests),
            "n_tokens": sum(len(i) for i in instances),
        }
        turn = (k + rep) % len(engines)
        for name in engines[turn:] + engines[:turn]:
            if (file.name, name) in carried:
                res = {"status": "timeout", "phase": "carried from an earlier repeat"}
            else:
                res = workers[name].run(schema_text, instances, args.timeout)
                if res["status"] == "timeout":
                    carried.add((file.name, name))
            row[name] = record(stats[name], file, tests, res)
        per_schema.append(row)
        if checkpoint is not None and (k + 1) % CHECKPOINT_EVERY == 0 and k + 1 < len(files):
            checkpoint(stats, per_schema, rep)
        if not args.quiet and (k + 1) % 25 == 0:
            done = {n: stats[n]["passing"] for n in engines}
            print(
                f"[repeat {rep + 1}: {k + 1}/{len(files)}] "
                f"{time.perf_counter() - t_start:.0f} s, passing {done}",
                file=sys.stderr,
                flush=True,
            )
    return stats, per_schema, n_instances, n_unwalkable


SPREAD_KEYS = (
    "mask_us_mean",
    "mask_us_p50",
    "mask_us_p99",
    "mask_us_p999",
    "mask_us_max",
    "warm_mask_us_p50",
    "passing",
    "timeouts",
    "invalidation_errors",
)


def spread_between_repeats(repeats: list[dict]) -> dict:
    """Per engine and figure: the value in each repeat and max/min across them."""
    out: dict[str, dict] = {}
    for name in repeats[0]:
        out[name] = {}
        for key in SPREAD_KEYS:
            vals = [r[name][key] for r in repeats]
            entry: dict[str, Any] = {"values": vals}
            if all(isinstance(v, float) and v > 0 for v in vals):
                entry["max_over_min"] = max(vals) / min(vals)
            out[name][key] = entry
    return out


def main(argv: list[str] | None = None) -> dict:
    args = build_parser().parse_args(argv)
    if args.wide:
        args.spread, args.repeats, args.timeout = WIDE["spread"], WIDE["repeats"], WIDE["timeout"]
        if args.output == DEFAULT_OUTPUT:
            args.output = WIDE_OUTPUT
    if (
        args.every < 1
        or (args.limit is not None and args.limit < 1)
        or (args.spread is not None and args.spread < 1)
        or args.repeats < 1
        or args.timeout <= 0
    ):
        raise SystemExit("--every, --limit, --spread and --repeats must be >= 1, --timeout > 0")
    import tokenizers

    import treegram
    from treegram.tokenizer import deepseek_v4_tokenizer_json

    info = treegram.TokenizerInfo.deepseek_v4()
    stop_id = int(info.stop_token_ids[0])
    decoded = info.decoded_vocab
    tokenizer = tokenizers.Tokenizer.from_file(str(deepseek_v4_tokenizer_json()))
    files = list_files(args.data, args.every, args.limit, args.spread)
    warmup_ids = tokenizer.encode(WARMUP_TEXT, add_special_tokens=False).ids

    engines = list(dict.fromkeys(args.engines))
    srcs: dict[str, str | None] = {name: None for name in engines}
    given = (("--treegram-src", args.treegram_src), ("--baseline-src", args.baseline_src))
    for flag, path in given:
        if path is not None and not (path / "treegram" / "__init__.py").is_file():
            raise SystemExit(f"{flag} {path}: no treegram package there")
    if args.treegram_src is not None and "treegram" in srcs:
        srcs["treegram"] = str(args.treegram_src.resolve())
    if args.baseline_src is not None:
        engines.append("treegram_base")
        srcs["treegram_base"] = str(args.baseline_src.resolve())
    workers = {name: Worker(name, stop_id, warmup_ids, srcs[name]) for name in engines}
    repeats: list[dict] = []
    rows: list[list[dict]] = []
    loads: list[dict] = []
    carried: set = set()
    n_instances = n_unwalkable = 0
    t_start = time.perf_counter()

    def build(repeats: list[dict], rows: list[list[dict]], partial: dict | None) -> dict:
        """The results JSON of the repeats so far (``partial``: where a checkpoint is)."""
        engines_out = {name: dict(s) for name, s in repeats[0].items()}
        for name in engines:
            engines_out[name]["worker_restarts"] = workers[name].restarts
            engines_out[name]["worker_start_s"] = workers[name].start_s
            engines_out[name]["treegram_file"] = workers[name].treegram_file
        if args.spread is not None:
            subset = (
                f"{args.spread} files spread evenly over the sample files outside the default "
                f"every-{DEFAULT_EVERY}th subset"
            )
        else:
            subset = f"every {args.every}th file in sorted order" if args.every > 1 else "all files"
        subset += f", first {args.limit}" if args.limit else ""
        meta = {
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "data": str(args.data),
            "subset": subset,
            "repeats": args.repeats,
            "partial": partial,
            "load_average": loads,
            "n_schemas": len(files),
            "n_files_in_data": len(list(args.data.glob("*.json"))),
            "n_instances": n_instances,
            "n_unwalkable": n_unwalkable,
            "timeout_s": args.timeout,
            "vocab_size": info.vocab_size,
            "stop_token_id": stop_id,
            "options": {
                "treegram": "Grammar.from_json_schema(any_whitespace=True, "
                "strict_mode=False), compile_grammar (lazy)",
                "xgrammar": "compile_json_schema(any_whitespace=True, strict_mode=False)",
                "llguidance": "LLMatcher.grammar_from_json_schema(schema) defaults "
                "(flexible whitespace) + LLMatcher construction",
            },
            "serialization": "json.dumps(data) (separators ', ' and ': ', ensure_ascii=True), "
            "tokenized without special tokens; an instance whose tokens do not "
            "decode back to its bytes is not walked",
            "wall_s": time.perf_counter() - t_start,
            "machine": platform_meta(processor=False),
            "versions": package_versions(),
            "treegram_src": srcs.get("treegram"),
            "baseline_src": srcs.get("treegram_base"),
            "command": command_line(argv),
            "notes": "engines run in separate worker processes, one schema at a time, taking "
            "turns (the first engine rotates per schema); compile time is measured in "
            "the worker around the compile call only; mask time is one "
            "fill_next_token_bitmask call. treegram's compile is lazy: the state "
            "classification it defers is paid in its first masks. Mask figures are first-use "
            "masks: every fill while walking a freshly compiled grammar's instances, first "
            "masks included; warm fills are a second pass over the accepted instances on the "
            "same grammar. With --repeats, `engines` is the first repeat, `repeats` every "
            "repeat, `spread` the max/min of each figure across repeats; a schema that timed "
            "out for an engine is counted as a timeout in later repeats without a rerun.",
        }
        results = {
            "meta": meta,
            "engines": engines_out,
            "first_use_common": first_use_on_common_schemas(rows[0], engines),
            "schemas": rows[0],
        }
        if len(repeats) > 1 or args.repeats > 1:
            results["repeats"] = [
                {
                    "engines": summary,
                    "first_use_common": first_use_on_common_schemas(per_schema, engines),
                    "schemas": per_schema,
                }
                for summary, per_schema in zip(repeats, rows, strict=True)
            ]
            if len(repeats) > 1:
                results["spread"] = spread_between_repeats(repeats)
        return results

    def write(results: dict) -> None:
        tmp = args.output.with_suffix(".partial")
        write_json(tmp, results, indent=1)
        tmp.replace(args.output)

    def checkpoint(stats: dict, per_schema: list[dict], rep: int) -> None:
        """Write the figures so far (a long run cut short still leaves them)."""
        now = [*repeats, {name: summarize(stats[name]) for name in engines}]
        partial = {"repeat": rep + 1, "schemas_done": len(per_schema)}
        write(build(now, [*rows, per_schema], partial))

    try:
        for w in workers.values():
            w.start()
        for rep in range(args.repeats):
            if rep:  # fresh workers: treegram's per-vocabulary class cache starts empty again
                for w in workers.values():
                    w.stop()
                    w.start()
            load_before = os.getloadavg()
            stats, per_schema, n_instances, n_unwalkable = _run_once(
                args, files, workers, engines, tokenizer, decoded, carried, rep, t_start, checkpoint
            )
            loads.append({"before": load_before, "after": os.getloadavg()})
            summary = {}
            for name in engines:
                summary[name] = summarize(stats[name])
            repeats.append(summary)
            rows.append(per_schema)
    finally:
        for w in workers.values():
            w.stop()

    results = build(repeats, rows, None)
    write(results)
    if args.repeats > 1:
        for i, rep in enumerate(results["repeats"]):
            print(f"repeat {i + 1}")
            print(format_table({**results, **rep}))
        print(format_spread(results["spread"]))
    else:
        print(format_table(results))
    print(f"wrote {args.output}")
    return results


if __name__ == "__main__":
    main()
