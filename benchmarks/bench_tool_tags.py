#!/usr/bin/env python
"""Tool-call structural tags: compile and first mask, treegram beside xgrammar and llguidance.

For every built-in model format (``get_model_structural_tag``) and 1, 8 and 32 tools, each
engine builds the format's structural tag with its own ``get_model_structural_tag`` from the
same OpenAI-style tools, compiles it with a fresh compiler (caching off) and fills the first
token mask of a new matcher; DeepSeek-V4 vocabulary. The tools' parameter schemas are
MaskBench's function-calling schemas (``BFCL_*`` and ``Glaiveai2K---*`` files, in sorted
order, spread evenly over the list; a schema treegram refuses in some format is replaced by
the next file, see :func:`usable`), named after their files.

Each (format, tools) cell is compiled ``--repeat`` times; the table gives medians and the
first compile of the cell in the process (``cold``: nothing of this tag cached yet, the
kernels loaded and the vocabulary's tables built by ``GrammarCompiler(warm_up=True)``, as the
engine adapters start it, and a warm-up on another tag). The time is wall
time (``--clock cpu`` for process CPU time, which a shared machine disturbs less; both are
written to the JSON).
llguidance has no model formats: where every tag of the format's triggered tags has a JSON
argument schema, it compiles the same triggers, begins, schemas and ends as its
``StructTag`` list (``StructTag.to_grammar``, text outside the tags unconstrained); other
formats are left out for it. A cell an engine refuses is recorded with its error.

Run from the repository root: ``python benchmarks/bench_tool_tags.py --help``.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import llguidance_like, load_average, run_meta, write_results, xgrammar_like  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DATA = REPO.parent / "shared" / "data" / "maskbench-sample"
DEFAULT_OUTPUT = REPO / "benchmarks" / "results" / "tool_tags.json"
TOOL_FILES = re.compile(r"^(BFCL_|Glaiveai2K---)")
ENGINES = ("treegram", "xgrammar", "llguidance")


def load_tools(data: Path, n: int) -> list[dict]:
    """``n`` OpenAI-style function tools whose parameters are MaskBench function-calling
    schemas: the files spread evenly over the sorted list, each replaced by the next one
    when treegram refuses it in a format (see :func:`usable`)."""
    files = sorted(p for p in data.glob("*.json") if TOOL_FILES.match(p.name))
    if not files:
        raise SystemExit(f"no BFCL_*/Glaiveai2K---* MaskBench files in {data}")
    step = max(1, len(files) // n)
    tools: list[dict] = []
    taken: set[Path] = set()
    for k in range(n):
        for path in files[k * step :] + files[: k * step]:
            if path in taken:
                continue
            tool = _tool(path)
            if usable(tool):
                tools.append(tool)
                taken.add(path)
                break
    return tools


def _tool(path: Path) -> dict:
    schema = json.loads(path.read_text())["schema"]
    name = re.sub(r"[^A-Za-z0-9_]", "_", path.stem)
    return {"type": "function", "function": {"name": name, "parameters": schema}}


def usable(tool: dict) -> bool:
    """Whether treegram builds the tag of ``tool`` alone in every model format. Refused:
    schemas no value satisfies, and in the XML argument styles constraints beside the
    argument object's properties (``oneOf``, ``dependencies``) and, for ``minimax_m3``,
    unconstrained values and open objects (docs/xgrammar_compat.md)."""
    import treegram

    for fmt in treegram.structural_tag.builtin_structural_tag_models():
        try:
            tag = treegram.get_model_structural_tag(fmt, tools=[tool])
            treegram.Grammar.from_structural_tag(tag)
        except treegram.errors.TreegramError:
            return False
    return True


class _Treegram:
    def __init__(self) -> None:
        import treegram

        self.tg = treegram
        self.info = treegram.TokenizerInfo.deepseek_v4()
        self.bitmask = treegram.allocate_token_bitmask(1, self.info.vocab_size, backend="numpy")

    def tag(self, fmt: str, tools: list[dict]):
        return self.tg.get_model_structural_tag(fmt, tools=tools)

    def compile(self, tag):
        return self.tg.GrammarCompiler(self.info, cache_enabled=False).compile_structural_tag(tag)

    def first_mask(self, compiled) -> None:
        self.tg.GrammarMatcher(compiled).fill_next_token_bitmask(self.bitmask, 0)


class _Xgrammar:
    def __init__(self, info) -> None:
        import xgrammar

        self.xgr = xgrammar
        self.xinfo = xgrammar.TokenizerInfo(  # as _common.xgrammar_like: the same vocabulary
            list(info.decoded_vocab),
            xgrammar.VocabType.RAW,
            vocab_size=info.vocab_size,
            stop_token_ids=list(info.stop_token_ids),
        )
        self.bitmask = xgrammar_like(info)[1]

    def tag(self, fmt: str, tools: list[dict]):
        return self.xgr.get_model_structural_tag(fmt, tools=tools)

    def compile(self, tag):
        compiler = self.xgr.GrammarCompiler(self.xinfo, cache_enabled=False)
        return compiler.compile_structural_tag(tag)

    def first_mask(self, compiled) -> None:
        self.xgr.GrammarMatcher(compiled).fill_next_token_bitmask(self.bitmask, 0)


class _Llguidance:
    def __init__(self, info) -> None:
        import llguidance
        import llguidance.numpy as llnp

        self.ll = llguidance
        self.llnp = llnp
        self.tokenizer, self.bitmask = llguidance_like(info)

    def tag(self, fmt: str, tools: list[dict]):
        """The format's triggered tags as llguidance ``StructTag``s (a Lark grammar), or
        None where a tag has no JSON argument schema."""
        import treegram
        from treegram.structural_tag import JSONSchemaFormat, TriggeredTagsFormat

        found: list = []

        def walk(node) -> None:
            if isinstance(node, TriggeredTagsFormat):
                found.append(node)
            for value in vars(node).values() if hasattr(node, "__dict__") else ():
                for item in value if isinstance(value, list) else [value]:
                    if hasattr(item, "__dict__"):
                        walk(item)

        walk(treegram.get_model_structural_tag(fmt, tools=tools).format)
        tags = []
        for group in found:
            for t in group.tags:
                content = t.content
                if not (isinstance(content, JSONSchemaFormat) and content.style == "json"):
                    return None
                trigger = next((g for g in group.triggers if t.begin.startswith(g)), None)
                if trigger is None:
                    return None
                schema = content.json_schema if content.json_schema is not True else {}
                tags.append(
                    self.ll.StructTag(trigger=trigger, begin=t.begin, grammar=schema, end=t.end)
                )
        if not tags:
            return None
        return self.ll.StructTag.to_grammar(tags, assume_special=False)

    def compile(self, lark: str):
        matcher = self.ll.LLMatcher(self.tokenizer, self.ll.grammar_from("lark", lark), log_level=0)
        if matcher.is_error():
            raise ValueError(matcher.get_error())
        return matcher

    def first_mask(self, matcher) -> None:
        self.llnp.fill_next_token_bitmask(matcher, self.bitmask, 0)


def _time(run) -> tuple[float, float]:
    """(wall, process CPU) seconds of ``run()``."""
    w, c = time.perf_counter(), time.process_time()
    run()
    return time.perf_counter() - w, time.process_time() - c


def measure(engine, fmt: str, tools: list[dict], repeat: int) -> dict:
    """Compile and first-mask times of one cell (ms): first run and medians."""
    try:
        tag = engine.tag(fmt, tools)
    except Exception as err:  # noqa: BLE001 - a format an engine refuses has no time
        return {"error": f"{type(err).__name__}: {err}"[:300]}
    if tag is None:
        return {"error": "not expressible"}
    compile_w, compile_c, mask_w, mask_c = [], [], [], []
    for _ in range(repeat):
        box: dict = {}
        try:
            w, c = _time(lambda box=box: box.setdefault("g", engine.compile(tag)))
            mw, mc = _time(lambda box=box: engine.first_mask(box["g"]))
        except Exception as err:  # noqa: BLE001
            return {"error": f"{type(err).__name__}: {err}"[:300]}
        compile_w.append(w * 1e3)
        compile_c.append(c * 1e3)
        mask_w.append(mw * 1e3)
        mask_c.append(mc * 1e3)
    return {
        "compile_ms": statistics.median(compile_w),
        "compile_cpu_ms": statistics.median(compile_c),
        "first_mask_ms": statistics.median(mask_w),
        "first_mask_cpu_ms": statistics.median(mask_c),
        "cold_compile_ms": compile_w[0],
        "cold_compile_cpu_ms": compile_c[0],
        "cold_first_mask_ms": mask_w[0],
        "cold_first_mask_cpu_ms": mask_c[0],
    }


def main(argv: list[str] | None = None) -> dict:
    """Run the benchmark; returns what it writes."""
    import treegram

    ap = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA, help="folder of MaskBench *.json")
    ap.add_argument(
        "--formats",
        default=",".join(treegram.structural_tag.builtin_structural_tag_models()),
        help="comma-separated model formats",
    )
    ap.add_argument("--tools", default="1,8,32", help="comma-separated tool counts")
    ap.add_argument("--repeat", type=int, default=5, help="compiles per cell; medians reported")
    ap.add_argument("--engines", default=",".join(ENGINES), help="comma-separated engines")
    ap.add_argument(
        "--clock", choices=("wall", "cpu"), default="wall", help="the times the table shows"
    )
    ap.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help="result JSON file")
    args = ap.parse_args(argv)
    if args.repeat < 1:
        ap.error("--repeat must be >= 1")
    formats = [f for f in args.formats.split(",") if f]
    counts = [int(n) for n in args.tools.split(",") if n]
    names = [e for e in args.engines.split(",") if e]
    if set(names) - set(ENGINES) or "treegram" not in names:
        ap.error(f"--engines must include treegram and be among {ENGINES}")

    load_start = load_average()
    tg = _Treegram()
    engines: dict = {"treegram": tg}
    if "xgrammar" in names:
        engines["xgrammar"] = _Xgrammar(tg.info)
    if "llguidance" in names:
        engines["llguidance"] = _Llguidance(tg.info)
    # treegram's documented warm-up, as the SGLang and vLLM adapters run it at start: every
    # kernel loaded (the first 32-tool llama mask otherwise loaded two from disk, ~46 ms)
    # and the vocabulary's tables built (a first string otherwise builds them); then a
    # warm-up on a tag none of the cells has
    import treegram

    treegram.GrammarCompiler(tg.info, warm_up=True)
    warm = [{"type": "function", "function": {"name": "warm", "parameters": {"type": "object"}}}]
    for engine in engines.values():
        measure(engine, "llama", warm, 1)

    key = "" if args.clock == "wall" else "_cpu"
    tools_of = {n: load_tools(args.data, n) for n in counts}
    rows = []
    for fmt in formats:
        for n in counts:
            tools = tools_of[n]
            row = {"format": fmt, "tools": n}
            for name, engine in engines.items():
                row[name] = measure(engine, fmt, tools, args.repeat)
            rows.append(row)
            _print_row(row, key, names)

    def ratio(row: dict, field: str) -> float | None:
        a, b = row["treegram"].get(field), row.get("xgrammar", {}).get(field)
        return None if a is None or not b else a / b

    for row in rows:
        row["compile_ratio_treegram_over_xgrammar"] = ratio(row, "compile_ms")
        row["compile_cpu_ratio_treegram_over_xgrammar"] = ratio(row, "compile_cpu_ms")
    result = {
        "meta": {
            **run_meta(argv, load_start),
            "data": str(args.data),
            "repeat": args.repeat,
            "tools": {str(n): [t["function"]["name"] for t in tools_of[n]] for n in counts},
            "note": "ms; medians of --repeat fresh compiles, cold_* the first of them",
        },
        "rows": rows,
        "summary": {"wall": _summary(rows, ""), "cpu": _summary(rows, "_cpu")},
    }
    s = result["summary"][args.clock]
    summary = (
        f"{args.clock} time: treegram compile max {s['treegram_compile_max_ms']:.1f} ms, "
        f"with 8 tools max "
        f"{s['treegram_compile_max_ms_8_tools']:.1f} ms; first mask max "
        f"{s['treegram_first_mask_max_ms']:.2f} ms; compile / xgrammar's: max "
        f"{_fmt(s['max_compile_ratio'])}, median {_fmt(s['median_compile_ratio'])}"
    )
    write_results(args.output, result, summary, indent=1, strict=False)
    return result


def _fmt(v: float | None, digits: int = 3) -> str:
    return "-" if v is None else f"{v:.{digits}f}"


_HEADER_DONE: list[bool] = []


def _print_row(row: dict, key: str, names: list[str]) -> None:
    if not _HEADER_DONE:
        _HEADER_DONE.append(True)
        head = f"{'format':<15}{'tools':>6}"
        for name in names:
            head += f"{name + ' compile':>22}{'mask':>8}"
        print(head + f"{'ratio':>8}   (ms; compile median / cold)")
    line = f"{row['format']:<15}{row['tools']:>6}"
    for name in names:
        cell = row[name]
        if "error" in cell:
            line += f"{cell['error'][:20]:>22}{'':>8}"
        else:
            both = f"{cell['compile' + key + '_ms']:.1f} / {cell['cold_compile' + key + '_ms']:.1f}"
            line += f"{both:>22}{cell['first_mask' + key + '_ms']:>8.2f}"
    tg, xg = row["treegram"], row.get("xgrammar", {})
    r = None
    if "compile_ms" in tg and xg.get("compile" + key + "_ms"):
        r = tg["compile" + key + "_ms"] / xg["compile" + key + "_ms"]
    print(line + f"{_fmt(r):>8}", flush=True)


def _summary(rows: list[dict], key: str) -> dict:
    """Maxima and the median ratio over the cells, in wall (``key=""``) or CPU time."""
    ok = [r for r in rows if "compile_ms" in r["treegram"]]
    field = "compile" + key + "_ms"
    ratios = [
        r["treegram"][field] / r["xgrammar"][field] for r in ok if r.get("xgrammar", {}).get(field)
    ]
    eight = [r["treegram"][field] for r in ok if r["tools"] == 8]
    masks = [r["treegram"][m + key + "_ms"] for r in ok for m in ("first_mask", "cold_first_mask")]
    return {
        "cells": len(rows),
        "treegram_compiled": len(ok),
        "treegram_errors": {
            f"{r['format']}/{r['tools']}": r["treegram"]["error"]
            for r in rows
            if "error" in r["treegram"]
        },
        "treegram_compile_max_ms": max((r["treegram"][field] for r in ok), default=0.0),
        "treegram_compile_max_ms_8_tools": max(eight, default=0.0),
        "treegram_first_mask_max_ms": max(masks, default=0.0),
        "max_compile_ratio": max(ratios, default=None),
        "median_compile_ratio": statistics.median(ratios) if ratios else None,
    }


if __name__ == "__main__":
    main()
