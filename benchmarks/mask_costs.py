#!/usr/bin/env python
"""Where treegram's slow first masks go: a per-mask cost report over MaskBench schemas.

Every schema of the selection (by default the 700 held-out files of ``bench_maskbench.py
--wide``) is compiled fresh and its test instances are walked token by token, as
``bench_maskbench.py`` does, in this process. Every fill that takes over ``--threshold-ms``
(wall clock) is kept with

* the construct the matcher stands in: the JSON position at that byte of the instance
  (in an object's keys, in a string value, at the start of a value, in a number) and the
  schema at that path (``pattern``, ``maxLength``, ``enum`` sizes, ``anyOf`` widths,
  property counts), bucketed into a few constructs (see ``construct_of``);
* where its time went, in thread CPU time, from timers wrapped around the mask store's
  kernels: the trie walks (``classify``; alone, in a context, or refined from the state's
  own class), the slice DFA walks, the slice byte groupings and their tries, the string
  slice checks (``slice_reach`` and the restricted slice's helpers), signatures, bitsets,
  subset tries, garbage collections, the Python around them in
  ``MaskStore.classify_states``, the mask kernel itself (the fill minus its
  classification), and the wall-clock time the thread was not on a CPU.

The totals per construct and per part, a histogram of slow-mask times per construct and
the slowest masks are printed and written as JSON (``benchmarks/results/mask_costs.json``).
The timers add a few microseconds per kernel call; the figures say where time goes, not
what a mask costs (``bench_maskbench.py`` measures that, against the peers).

Run from the repository root: ``python benchmarks/mask_costs.py --help``.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import os
import signal
import sys
import time
import warnings
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_maskbench as mb  # noqa: E402  (a sibling script module)
from _common import package_versions, write_results  # noqa: E402

DEFAULT_OUTPUT = mb.REPO / "benchmarks" / "results" / "mask_costs.json"
# mask store kernels by the part of a classification they belong to
PARTS = {
    "classify": "trie walk",
    "slice_dfa_walk": "slice DFA walk",
    "slice_reach": "slice check",
    "looping_leads": "slice check",
    "restricted_slice_dfa": "slice check",
    "joint_byte_classes": "slice check",
    "wide_near_rule_end": "slice check",
    "reads_string_text": "slice check",
    "bytes_off_loop": "slice check",
    "slice_byte_groups": "slice grouping",
    "group_trie": "slice grouping",
    "grouped_slice_walk": "slice DFA walk",
    "multi_slice_dfa_walk": "slice DFA walk",
    "state_signature": "signature",
    "positions_to_bitset": "bitsets",
    "bitset_positions": "bitsets",
    "subset_tokens": "subset tries",
    "build_trie": "subset tries",
}
# kernels that modules other than the mask store call (the vocabulary's class cache, the
# sorted vocabulary's subset tries)
_KERNEL_MODULES = {
    "restricted_slice_dfa": "cc",
    "group_trie": "cc",
    "subset_tokens": "sv",
    "build_trie": "sv",
}
HIST_EDGES_MS = (1, 2, 5, 10, 20, 50, 100, 1e9)


class Timers:
    """Nanoseconds per part since the last :meth:`take`, from wrapped kernels."""

    def __init__(self) -> None:
        self.ns: dict[str, int] = defaultdict(int)
        self.context = ""  # "", " (context)" or " (refined)": the walk being classified
        self.requests = 0
        self.inside = False  # in MaskStore.classify_states

    def take(self) -> dict[str, int]:
        out, self.ns, self.requests = dict(self.ns), defaultdict(int), 0
        return out


def install_timers() -> Timers:
    """Wrap the mask store's kernels and its classification entry points with timers."""
    from treegram.compiler import _class_cache as cc
    from treegram.compiler import _mask_store as ms
    from treegram.tokenizer import _sorted_vocab as sv

    timers = Timers()
    # thread CPU time: on a shared machine a wall-clock part would hold the time the
    # thread was descheduled (one scheduler slice, a few ms), wherever it fell
    clock = time.thread_time_ns
    modules = {"cc": cc, "sv": sv, "ms": ms}

    def wrap_kernel(name: str, part: str):
        module = modules[_KERNEL_MODULES.get(name, "ms")]
        fn = getattr(module, name, None)
        if fn is None:  # a kernel an older checkout does not have
            return

        def timed(*args, **kwargs):
            t0 = clock()
            try:
                return fn(*args, **kwargs)
            finally:
                label = part + timers.context if part == "trie walk" else part
                timers.ns[label] += clock() - t0

        setattr(module, name, timed)

    for name, part in PARTS.items():
        wrap_kernel(name, part)

    store = ms.MaskStore
    classify_states, refined, class_of = store.classify_states, store._refined, store._class_of

    def timed_classify_states(self, states, *args, **kwargs):
        t0 = clock()
        timers.inside = True
        try:
            return classify_states(self, states, *args, **kwargs)
        finally:
            timers.inside = False
            timers.ns["classify_states"] += clock() - t0
            timers.requests += 1

    def timed_refined(self, own, s, context_key, *args, **kwargs):
        timers.context = " (refined)"
        try:
            return refined(self, own, s, context_key, *args, **kwargs)
        finally:
            timers.context = ""

    def timed_class_of(self, s, scratch, context_key=(), *args, **kwargs):
        timers.context = " (context)" if context_key else ""
        try:
            return class_of(self, s, scratch, context_key, *args, **kwargs)
        finally:
            timers.context = ""

    store.classify_states = timed_classify_states
    store._refined = timed_refined
    store._class_of = timed_class_of

    started = [0]

    def gc_timer(phase: str, info: dict) -> None:
        # collections of the cyclic garbage collector (any generation) during a fill
        if phase == "start":
            started[0] = clock()
        else:
            took = clock() - started[0]
            timers.ns["garbage collection"] += took
            if timers.inside:
                timers.ns["gc in classify_states"] += took

    gc.callbacks.append(gc_timer)
    return timers


# ---------------------------------------------------------------------------- constructs


class JsonPosition:
    """The lexical place and JSON path at growing byte offsets of one JSON text (ASCII),
    read incrementally: ``at(offset)`` for offsets that never decrease."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.stack: list[list] = []  # [kind, key or index, expecting a key?]
        self.place, self.i, self.key_start = "value", 0, -1
        self.in_string = self.escape = False

    def at(self, offset: int) -> tuple[str, list]:
        """(place, path) at ``offset``: the place is ``key`` (in or before an object key;
        the path is the object's), ``string`` (in a string value), ``number``, ``literal``,
        ``value`` (before a value) or ``after`` (after a value)."""
        text, stack = self.text, self.stack
        while self.i < offset:
            c = text[self.i]
            if self.in_string:
                if self.escape:
                    self.escape = False
                elif c == "\\":
                    self.escape = True
                elif c == '"':
                    self.in_string = False
                    if self.key_start >= 0:
                        stack[-1][1] = json.loads(text[self.key_start : self.i + 1])
                        self.key_start, self.place = -1, "colon"
                    else:
                        self.place = "after"
            elif c == '"':
                self.in_string = True
                if stack and stack[-1][0] == "obj" and stack[-1][2]:
                    stack[-1][2], self.key_start, self.place = False, self.i, "key"
                else:
                    self.place = "string"
            elif c == "{":
                stack.append(["obj", None, True])
                self.place = "key"
            elif c == "[":
                stack.append(["arr", 0, False])
                self.place = "value"
            elif c in "}]":
                stack.pop()
                self.place = "after"
            elif c == ",":
                if stack[-1][0] == "obj":
                    stack[-1][2], self.place = True, "key"
                else:
                    stack[-1][1] += 1
                    self.place = "value"
            elif c == ":":
                self.place = "value"
            elif c in "-0123456789.eE+":
                self.place = "number"
            elif c.isalpha():
                self.place = "literal"
            self.i += 1
        place = self.place
        if place in ("number", "literal") and offset < len(text) and text[offset] in ",}] ":
            place = "after"
        if place == "key" and stack and stack[-1][0] == "obj":  # the key is being chosen
            return "key", [e[1] for e in stack[:-1] if e[1] is not None]
        return place, [e[1] for e in stack if e[1] is not None]


def position_at(text: str, offset: int) -> tuple[str, list]:
    """:meth:`JsonPosition.at` of one offset."""
    return JsonPosition(text).at(offset)


def _resolve(schema: Any, root: Any, depth: int = 0) -> Any:
    while isinstance(schema, dict) and isinstance(schema.get("$ref"), str) and depth < 20:
        ref = schema["$ref"]
        if not ref.startswith("#"):
            return schema
        target: Any = root
        for part in ref[1:].lstrip("/").split("/"):
            if not part:
                continue
            part = part.replace("~1", "/").replace("~0", "~")
            if isinstance(target, dict) and part in target:
                target = target[part]
            elif isinstance(target, list) and part.isdigit() and int(part) < len(target):
                target = target[int(part)]
            else:
                return schema
        schema, depth = target, depth + 1
    return schema


def subschema_at(root: Any, path: list) -> tuple[Any, int]:
    """The schema at ``path`` (best effort: properties, items, additionalProperties,
    the first branch of a union that has the key) and the widest union met on the way."""
    schema, widest = _resolve(root, root), 0
    for step in path:
        if not isinstance(schema, dict):
            return None, widest
        for union in ("anyOf", "oneOf"):
            if isinstance(schema.get(union), list):
                widest = max(widest, len(schema[union]))
        nxt = None
        if isinstance(step, str):
            nxt = (schema.get("properties") or {}).get(step)
            if nxt is None:
                for branch in (
                    schema.get("anyOf", []) + schema.get("oneOf", []) + schema.get("allOf", [])
                ):
                    branch = _resolve(branch, root)
                    if isinstance(branch, dict) and step in (branch.get("properties") or {}):
                        nxt = branch["properties"][step]
                        break
            if nxt is None and isinstance(schema.get("additionalProperties"), dict):
                nxt = schema["additionalProperties"]
        else:
            items = schema.get("prefixItems")
            if isinstance(items, list) and step < len(items):
                nxt = items[step]
            elif isinstance(schema.get("items"), dict):
                nxt = schema["items"]
            elif isinstance(schema.get("items"), list) and step < len(schema["items"]):
                nxt = schema["items"][step]
        schema = _resolve(nxt, root)
    return schema, widest


def construct_of(schema: Any, place: str, root: Any) -> tuple[str, dict]:
    """A construct bucket for a mask at ``place`` whose path's schema is ``schema``."""
    sub, widest = schema
    facts: dict[str, Any] = {"place": place, "widest_union_on_path": widest}
    if not isinstance(sub, dict):
        return f"unresolved ({place})", facts
    union = max(len(sub.get(k, [])) for k in ("anyOf", "oneOf")) if sub else 0
    facts.update({k: sub[k] for k in ("type", "format", "pattern") if k in sub})
    if place == "key":
        props = sub.get("properties") or {}
        required = sub.get("required") or []
        optional = len([p for p in props if p not in required])
        facts.update({"properties": len(props), "optional": optional})
        if union >= 2:
            return "object keys, union of objects", facts
        if optional >= 8:
            return "object keys, many optional properties", facts
        if sub.get("additionalProperties", True) is not False and not props:
            return "object keys, free-form", facts
        return "object keys", facts
    if place == "after":
        return "after a value", facts
    if "enum" in sub or "const" in sub:
        n = len(sub.get("enum", [0]))
        facts["enum"] = n
        return ("large enum" if n >= 20 else "enum/const"), facts
    if union >= 2:
        facts["union"] = union
        return ("wide anyOf" if union >= 4 else "anyOf"), facts
    kind = sub.get("type")
    if isinstance(kind, list):
        return "type list", facts
    bounds = {
        k: sub[k]
        for k in (
            "minLength",
            "maxLength",
            "minimum",
            "maximum",
            "exclusiveMinimum",
            "exclusiveMaximum",
            "multipleOf",
            "minItems",
            "maxItems",
        )
        if k in sub
    }
    facts.update(bounds)
    if kind == "string" or place == "string":
        if "pattern" in sub:
            return "pattern string", facts
        if "format" in sub:
            return "format string", facts
        if "maxLength" in sub or "minLength" in sub:
            long = sub.get("maxLength", 0) >= 64 or sub.get("minLength", 0) >= 16
            return ("long bounded string" if long else "short bounded string"), facts
        return "plain string", facts
    if kind in ("number", "integer"):
        return ("number with bounds" if bounds else "number"), facts
    if kind == "array":
        return ("bounded array" if bounds else "array"), facts
    if kind == "object":
        return "object value", facts
    return f"other ({place})", facts


# ---------------------------------------------------------------------------- the run


def run(args) -> dict:
    import tokenizers

    import treegram
    from treegram.tokenizer import deepseek_v4_tokenizer_json

    warnings.filterwarnings("ignore", category=UserWarning)  # unknown formats, per schema
    timers = install_timers()
    info = treegram.TokenizerInfo.deepseek_v4()
    tokenizer = tokenizers.Tokenizer.from_file(str(deepseek_v4_tokenizer_json()))
    engine = mb._TreegramWorker()
    warm = engine.compile(json.dumps(mb.WARMUP_SCHEMA))
    mb._walk(engine, warm, tokenizer.encode(mb.WARMUP_TEXT, add_special_tokens=False).ids, 0)
    files = mb.list_files(args.data, args.every, args.limit, args.spread)
    decoded = info.decoded_vocab
    slow: list[dict] = []
    timeouts: list[str] = []
    stats = args.stats = {
        "n_masks": 0,
        "total_ns": 0,
        "cpu_ns": 0,
        "by_part_ns": defaultdict(int),
    }
    signal.signal(signal.SIGALRM, _alarm)
    t_start = time.perf_counter()
    for k, file in enumerate(files):
        if file.name in args.skip or (args.only and file.name not in args.only):
            continue
        entry = json.loads(file.read_text(encoding="utf-8"))
        schema_text, tests = mb.load_instances(file, tokenizer, decoded)
        try:
            matcher = engine.compile(schema_text)
        except Exception:  # noqa: BLE001 - refused schemas have no masks
            continue
        signal.setitimer(signal.ITIMER_REAL, args.timeout)
        try:
            slow += walk_schema(engine, matcher, file.name, entry, tests, decoded, timers, args)
        except _TimeoutError:
            timeouts.append(file.name)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        if not args.quiet and (k + 1) % 50 == 0:
            print(
                f"[{k + 1}/{len(files)}] {time.perf_counter() - t_start:.0f} s, "
                f"{len(slow)} slow masks",
                file=sys.stderr,
                flush=True,
            )
    return summarize(slow, stats, timeouts, files, args, time.perf_counter() - t_start)


def walk_schema(engine, matcher, name, entry, tests, decoded, timers, args) -> list[dict]:
    """Walk one schema's instances; the slow masks with their constructs and parts."""
    slow = []
    stats = args.stats
    clock = time.perf_counter_ns
    root = entry["schema"]
    for test in tests:
        ids = test["ids"]
        if ids is None:
            continue
        text = json.dumps(entry["tests"][test["index"]]["data"], allow_nan=False)
        matcher.reset()
        offset = 0
        position = JsonPosition(text)
        for step in range(len(ids) + 1):
            timers.take()
            c0 = time.thread_time_ns()
            t0 = clock()
            engine.fill(matcher)
            ns = clock() - t0
            cpu_ns = time.thread_time_ns() - c0
            stats["cpu_ns"] += cpu_ns
            stats["n_masks"] += 1
            stats["total_ns"] += ns
            parts = split_parts(timers.take(), ns, cpu_ns)
            for p, v in parts.items():
                stats["by_part_ns"][p] += v
            if ns >= args.threshold_ms * 1e6:
                place, path = position.at(offset)
                construct, facts = construct_of(subschema_at(root, path), place, root)
                slow.append(
                    {
                        "file": name,
                        "test": test["index"],
                        "step": step,
                        "offset": offset,
                        "ms": ns / 1e6,
                        "cpu_ms": cpu_ns / 1e6,
                        "construct": construct,
                        "path": path[-4:],
                        "facts": facts,
                        "parts_ms": {p: v / 1e6 for p, v in parts.items()},
                    }
                )
            if step == len(ids) or not engine.accept(matcher, ids[step]):
                break
            offset += len(decoded[ids[step]])
    return slow


def split_parts(parts: dict[str, int], ns: int, cpu_ns: int) -> dict[str, int]:
    """The parts of one fill of ``ns`` wall-clock and ``cpu_ns`` thread CPU nanoseconds
    from its timers (``Timers.take``): the kernels', then the rest of the classification,
    of the fill, and of the wall clock."""
    inside = parts.pop("classify_states", 0)
    gc_inside = parts.pop("gc in classify_states", 0)
    gc_outside = parts.get("garbage collection", 0) - gc_inside
    kernels = sum(parts.values()) - gc_inside - gc_outside
    parts["python in classify_states"] = max(inside - kernels - gc_inside, 0)
    parts["mask kernel and matcher"] = max(cpu_ns - inside - gc_outside, 0)
    # the wall clock's rest: the thread descheduled on a loaded machine
    parts["not on CPU"] = max(ns - cpu_ns, 0)
    return parts


class _TimeoutError(Exception):
    pass


def _alarm(signum, frame):
    raise _TimeoutError


def summarize(slow: list[dict], stats: dict, timeouts: list[str], files, args, wall_s) -> dict:
    n_masks, total_ns = stats["n_masks"], stats["total_ns"]
    by_construct: dict[str, dict] = {}
    by_part: dict[str, float] = defaultdict(float)
    for m in slow:
        c = by_construct.setdefault(
            m["construct"],
            {
                "n": 0,
                "total_ms": 0.0,
                "max_ms": 0.0,
                "parts_ms": defaultdict(float),
                "histogram": [0] * (len(HIST_EDGES_MS) - 1),
            },
        )
        c["n"] += 1
        c["total_ms"] += m["ms"]
        c["max_ms"] = max(c["max_ms"], m["ms"])
        for p, v in m["parts_ms"].items():
            c["parts_ms"][p] += v
            by_part[p] += v
        c["histogram"][int(np.searchsorted(HIST_EDGES_MS, m["ms"], side="right")) - 1] += 1
    ordered = dict(sorted(by_construct.items(), key=lambda kv: -kv[1]["total_ms"]))
    return {
        "meta": {
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "data": str(args.data),
            "n_schemas": len(files),
            "selection": f"--spread {args.spread}" if args.spread else f"--every {args.every}",
            "threshold_ms": args.threshold_ms,
            "n_masks": n_masks,
            "all_masks_total_ms": total_ns / 1e6,
            "all_masks_thread_cpu_ms": stats["cpu_ns"] / 1e6,
            "all_masks_by_part_ms": {
                p: v / 1e6 for p, v in sorted(stats["by_part_ns"].items(), key=lambda kv: -kv[1])
            },
            "n_slow": len(slow),
            "timeout_s": args.timeout,
            "timeouts": timeouts,
            "skipped": args.skip,
            "slow_total_ms": sum(m["ms"] for m in slow),
            "histogram_edges_ms": list(HIST_EDGES_MS[:-1]) + ["inf"],
            "wall_s": wall_s,
            "load_average": os.getloadavg(),
            "versions": package_versions(),
            "treegram_file": sys.modules["treegram"].__file__,
            "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
            "notes": "wall-clock fills with timers around the mask store's kernels "
            "(a few microseconds per call added), each part in thread CPU time; parts: trie "
            "walk (classify; alone, in a context, refined from the own class), slice DFA walk "
            "(plain and grouped), slice grouping (slice_byte_groups, group_trie), slice check, "
            "signature, bitsets, subset tries, garbage collection, python in classify_states "
            "(the rest of the classification), mask kernel and matcher (the fill's CPU time "
            "minus its classification), not on CPU (wall minus thread CPU time: descheduled)",
        },
        "by_part_ms": dict(sorted(by_part.items(), key=lambda kv: -kv[1])),
        "by_construct": ordered,
        "slowest": sorted(slow, key=lambda m: -m["ms"])[: args.keep],
    }


def format_report(result: dict) -> str:
    meta = result["meta"]
    lines = [
        f"{meta['n_slow']} of {meta['n_masks']} masks over {meta['threshold_ms']} ms: "
        f"{meta['slow_total_ms']:.0f} of {meta['all_masks_total_ms']:.0f} ms of all masks "
        f"({meta['n_schemas']} schemas; all masks {meta['all_masks_thread_cpu_ms']:.0f} ms "
        "of thread CPU time)",
        "",
        f"{'construct':<40} {'n':>5} {'total ms':>9} {'max ms':>8}  top parts (ms)",
    ]
    for name, c in result["by_construct"].items():
        top = sorted(c["parts_ms"].items(), key=lambda kv: -kv[1])[:3]
        lines.append(
            f"{name:<40} {c['n']:>5} {c['total_ms']:>9.1f} {c['max_ms']:>8.1f}  "
            + ", ".join(f"{p} {v:.0f}" for p, v in top)
        )
    lines += ["", "where the time of all masks goes (ms):"]
    lines += [f"  {p:<36} {v:>9.1f}" for p, v in meta.get("all_masks_by_part_ms", {}).items()]
    lines += ["", "where the time of slow masks goes (ms):"]
    lines += [f"  {p:<36} {v:>9.1f}" for p, v in result["by_part_ms"].items()]
    edges = meta["histogram_edges_ms"]
    spans = zip(edges[:-1], edges[1:], strict=True)
    lines += ["", "histogram (ms): " + " ".join(f"[{a},{b})" for a, b in spans)]
    for name, c in result["by_construct"].items():
        lines.append(f"  {name:<38} " + " ".join(f"{n:>6}" for n in c["histogram"]))
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    ap.add_argument("--data", type=Path, default=mb.DEFAULT_DATA, help="MaskBench folder")
    ap.add_argument(
        "--spread",
        type=int,
        default=mb.WIDE["spread"],
        help="files spread over the held-out sample (0: use --every)",
    )
    ap.add_argument("--every", type=int, default=mb.DEFAULT_EVERY, help="with --spread 0")
    ap.add_argument("--limit", type=int, default=None, help="at most N schemas")
    ap.add_argument("--threshold-ms", type=float, default=1.0, help="a slow mask takes more")
    ap.add_argument(
        "--timeout", type=float, default=30.0, help="seconds per schema's walks (then skipped)"
    )
    ap.add_argument(
        "--skip",
        nargs="*",
        default=[],
        help="file names not run (a compile that does not end: it cannot be interrupted)",
    )
    ap.add_argument("--only", nargs="*", default=[], help="run only these file names")
    ap.add_argument("--keep", type=int, default=200, help="slowest masks kept in the JSON")
    ap.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help="result JSON file")
    ap.add_argument("--quiet", action="store_true", help="no progress lines")
    return ap


def main(argv: list[str] | None = None) -> dict:
    args = build_parser().parse_args(argv)
    args.spread = args.spread or None
    result = run(args)
    write_results(args.output, result, format_report(result), indent=1)
    return result


if __name__ == "__main__":
    main()
