#!/usr/bin/env python
"""Which MaskBench schemas treegram refuses, and why: every schema of the sample, grouped by cause.

For every MaskBench file (``{description, meta, schema, tests}``) of the sample, in sorted
order and with nothing left out, treegram compiles the schema the way a new user would
(``Grammar.from_json_schema`` with the default options, then ``GrammarCompiler.compile_grammar``
over a byte-level vocabulary: whether a schema compiles does not depend on the vocabulary)
and records the outcome:

- ``ok``: compiled; warnings (unknown formats, widened keywords) are counted by text, and
  every test instance of the file (``json.dumps``) is walked with ``accept_string``: a valid
  one rejected or an invalid one accepted to the end is counted and listed;
- ``refused``: an exception (``UnsupportedSchemaError``, ``GrammarError``, or any other),
  with its type and first line;
- ``timeout``: the compile ran past ``--timeout`` seconds (the worker process is restarted).

Refusals are grouped by *cause*: the keyword and reason of an ``UnsupportedSchemaError``
(``unsupported JSON Schema keyword 'K' at PTR: WHY``) with the pointer, quoted texts and
numbers taken out, or the exception type and message likewise normalised. Each cause lists
its schemas with their full messages.

By default three passes run: ``strict_mode=True`` (the default a new user gets),
``strict_mode=False`` (JSON Schema's semantics, which ``bench_maskbench.py`` uses) and
``widen``: ``unsupported="warn"`` (the opt-in widening) with ``strict_mode=False``, to count
what still fails then and to check that a widened grammar rejects no valid instance (under
JSON Schema's semantics, so ``strict_mode``'s closed objects do not count).

Run from the repository root: ``python benchmarks/refusals_json_schema.py --help``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing as mp
import re
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import load_average, run_meta, write_results  # noqa: E402  (a sibling script module)

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DATA = REPO.parent / "shared" / "data" / "maskbench-sample"
DEFAULT_OUTPUT = REPO / "benchmarks" / "results" / "json_schema_refusals.json"
MODES = {
    "default": {},
    "strict_mode=False": {"strict_mode": False},
    "widen": {"unsupported": "warn", "strict_mode": False},
}

# ---------------------------------------------------------------------------- worker


def _worker(conn, options: dict) -> None:
    """Compile the ``(schema text, tests)`` sent on ``conn`` and walk the tests; answer
    ``(status, detail, warnings, ms, walked)`` with ``walked`` the indices of the valid tests
    rejected and of the invalid tests accepted."""
    import warnings

    import treegram

    vocab = [bytes([b]) for b in range(256)] + [b"<eos>"]
    compiler = treegram.GrammarCompiler(
        treegram.TokenizerInfo(vocab, stop_token_ids=[256]), cache_enabled=False
    )
    while True:
        job = conn.recv()
        if job is None:
            return
        text, tests = job
        t0 = time.perf_counter()
        compiled = None
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                grammar = treegram.Grammar.from_json_schema(text, **options)
                compiled = compiler.compile_grammar(grammar)
                status, detail = "ok", ""
            except Exception as exc:  # noqa: BLE001 - every failure is a refusal to report
                first = str(exc).splitlines()[0] if str(exc) else ""
                status, detail = "refused", f"{type(exc).__name__}: {first}"
        ms = (time.perf_counter() - t0) * 1e3
        walked: dict[str, list[int]] = {"valid_rejected": [], "invalid_accepted": []}
        if compiled is not None:
            for i, (instance, valid) in enumerate(tests):
                matcher = treegram.GrammarMatcher(compiled)
                accepted = matcher.accept_string(instance) and matcher.is_completed()
                if accepted != valid:
                    walked["valid_rejected" if valid else "invalid_accepted"].append(i)
        warned = [str(w.message).splitlines()[0] for w in caught]
        conn.send((status, detail, warned, ms, walked))


class Worker:
    """One compile worker process with a per-schema timeout (restarted after one)."""

    def __init__(self, options: dict) -> None:
        self.options = options
        self._start()

    def _start(self) -> None:
        ctx = mp.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_worker, args=(child, self.options), daemon=True)
        self.proc.start()
        child.close()

    def compile(self, text: str, tests: list, timeout: float) -> tuple:
        self.conn.send((text, tests))
        if self.conn.poll(timeout):
            try:
                return self.conn.recv()
            except EOFError:
                pass
            self.proc.join()
            code = self.proc.exitcode
            self._start()
            return "refused", f"worker died (exit code {code})", [], timeout * 1e3, {}
        self.proc.kill()
        self.proc.join()
        self._start()
        return "timeout", f"no result within {timeout:g} s", [], timeout * 1e3, {}

    def close(self) -> None:
        with contextlib.suppress(BrokenPipeError, OSError):
            self.conn.send(None)
        self.proc.join(timeout=10)
        if self.proc.is_alive():
            self.proc.kill()


# ---------------------------------------------------------------------------- causes

_KEYWORD = re.compile(r"unsupported JSON Schema keyword '([^']*)' at (\S*): (.*)")


def cause_of(detail: str) -> str:
    """A refusal's cause: its keyword and reason without pointers, quoted texts, numbers."""
    exc_type, _, message = detail.partition(": ")
    m = _KEYWORD.search(message)
    if m:
        keyword, why = m.group(1), m.group(3)
        why = why.split(" (compile with unsupported=")[0]  # the hint every refusal carries
        return f"{keyword}: {_normalise(why)}"
    return f"{exc_type}: {_normalise(message)}"


_WIDENED = re.compile(r"JSON Schema keyword '([^']*)' at (\S*) widened[^:]*: (.*)")


def warning_of(text: str) -> str:
    """A warning's kind: the widened keyword and reason, or the normalised text."""
    m = _WIDENED.search(text)
    if m:
        why = m.group(3).split("; the grammar accepts")[0]
        return f"{m.group(1)} widened: {_normalise(why)}"
    return _normalise(text)


def _normalise(text: str) -> str:
    text = re.sub(r"'(?:[^'\\]|\\.)*'", "'…'", text)
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '"…"', text)
    text = re.sub(r"(?<![\w])#?/[^\s,:;)]*", "PTR", text)
    text = re.sub(r"\d+(?:\.\d+)?", "N", text)
    return text.strip()


# ---------------------------------------------------------------------------- harness


def load_sample(
    data: Path, limit: int | None = None, only: list[str] | None = None
) -> list[tuple[str, str, list[tuple[str, bool]]]]:
    """``(file name, schema JSON text, [(test instance JSON text, valid), ...])`` for every
    file of the sample (or those named in ``only``), sorted by name."""
    files = sorted(data.glob("*.json"))
    if only:
        files = [f for f in files if f.name in set(only)]
    if not files:
        raise SystemExit(f"--data {data}: no MaskBench *.json files")
    out = []
    for f in files[:limit]:
        with open(f, encoding="utf-8") as fh:
            doc = json.load(fh)
        tests = [(json.dumps(t["data"]), bool(t["valid"])) for t in doc.get("tests", [])]
        out.append((f.name, json.dumps(doc["schema"]), tests))
    return out


def run_mode(sample: list, options: dict, timeout: float, quiet: bool = True) -> dict[str, Any]:
    """Compile every schema under ``options`` and walk its tests; outcomes, causes, warning
    counts and the instances the grammar got wrong."""
    worker = Worker(options)
    records = []
    t0 = time.perf_counter()
    try:
        for i, (name, text, tests) in enumerate(sample):
            status, detail, caught, ms, walked = worker.compile(text, tests, timeout)
            records.append(
                {
                    "file": name,
                    "status": status,
                    "detail": detail,
                    "warnings": caught,
                    "ms": ms,
                    "tests": len(tests) if status == "ok" else 0,
                    **{k: walked.get(k, []) for k in ("valid_rejected", "invalid_accepted")},
                }
            )
            if not quiet and (i + 1) % 200 == 0:
                print(f"  {i + 1}/{len(sample)}", file=sys.stderr)
    finally:
        worker.close()
    causes: dict[str, list[dict]] = {}
    for r in records:
        if r["status"] != "ok":
            cause = "timeout" if r["status"] == "timeout" else cause_of(r["detail"])
            causes.setdefault(cause, []).append({"file": r["file"], "error": r["detail"]})
    warned: Counter = Counter()
    for r in records:
        for w in {warning_of(w) for w in r["warnings"]}:
            warned[w] += 1
    walks: dict[str, Any] = {"tests_walked": sum(r["tests"] for r in records)}
    for key in ("valid_rejected", "invalid_accepted"):
        hit = {r["file"]: r[key] for r in records if r[key]}
        walks[key] = sum(len(v) for v in hit.values())
        walks[f"{key}_schemas"] = hit
        # the same, over the schemas compiled with a widened keyword
        walks[f"{key}_widened"] = sum(
            len(r[key]) for r in records if any(_WIDENED.search(w) for w in r["warnings"])
        )
    n = len(records)
    refused = sum(r["status"] != "ok" for r in records)
    return {
        "options": options,
        "schemas": n,
        "compiled": n - refused,
        "refused": refused,
        "refused_pct": 100.0 * refused / n if n else 0.0,
        "timeouts": sum(r["status"] == "timeout" for r in records),
        "seconds": time.perf_counter() - t0,
        "causes": dict(sorted(causes.items(), key=lambda kv: (-len(kv[1]), kv[0]))),
        "warnings": dict(warned.most_common()),
        "widened_schemas": sum(any(_WIDENED.search(w) for w in r["warnings"]) for r in records),
        **walks,
    }


def format_table(results: dict) -> str:
    lines = []
    for mode, r in results["modes"].items():
        lines.append(
            f"{mode}: {r['refused']} of {r['schemas']} schemas refused "
            f"({r['refused_pct']:.2f} %), {r['timeouts']} timeouts; "
            f"{r['tests_walked']} tests walked: {r['valid_rejected']} valid rejected "
            f"({len(r['valid_rejected_schemas'])} schemas), {r['invalid_accepted']} invalid "
            f"accepted ({len(r['invalid_accepted_schemas'])} schemas); "
            f"{r['widened_schemas']} schemas widened (valid rejected there: "
            f"{r['valid_rejected_widened']})"
        )
        for cause, items in r["causes"].items():
            lines.append(f"  {len(items):>4}  {cause[:150]}")
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA, help="MaskBench sample folder")
    ap.add_argument(
        "--modes",
        nargs="+",
        default=["default", "strict_mode=False", "widen"],
        choices=list(MODES),
        help="option sets to compile with",
    )
    ap.add_argument("--limit", type=int, default=None, help="only the first N files (smoke)")
    ap.add_argument("--only", nargs="+", default=None, help="only these file names")
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds per compile")
    ap.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help="result JSON file")
    ap.add_argument("--quiet", action="store_true", help="no progress on stderr")
    return ap


def main(argv: list[str] | None = None) -> dict:
    load_start = load_average()
    args = build_parser().parse_args(argv)
    sample = load_sample(args.data, args.limit, args.only)
    modes = {}
    for mode in args.modes:
        if not args.quiet:
            print(f"{mode}: {len(sample)} schemas", file=sys.stderr)
        modes[mode] = run_mode(sample, MODES[mode], args.timeout, args.quiet)
    results = {
        "meta": {
            **run_meta(argv, load_start),
            "data": str(args.data),
            "source": "guidance-ai/jsonschemabench maskbench/data @ ba103c7 (repository sample)",
            "n_schemas": len(sample),
            "timeout_s": args.timeout,
            "vocabulary": "256 single-byte tokens + <eos> (refusals do not depend on it)",
        },
        "modes": modes,
    }
    write_results(args.output, results, format_table(results), indent=1)
    return results


if __name__ == "__main__":
    main()
