#!/usr/bin/env python
"""Grammar-forced draft nodes on MaskBench: decoding steps with and without them.

Replays valid MaskBench instances as model output. Each instance is serialized with
``json.dumps`` (``", "`` and ``": "`` separators, the layout of the schema grammar with
``any_whitespace=False``) and tokenized with the DeepSeek-V4 tokenizer (``tokenizers``, no
special tokens); the "model" proposes exactly the document's next token (then the stop
token), so a draft node is accepted when it continues the document. Instances whose
tokens the compiled grammar does not accept to the end are skipped (counted).

Configurations, each decoding every document of a schema as one batch:

* ``none``: no drafter (one token per step);
* ``none+forced``: the forced chain of the position (``extend_draft_trees`` on root-only
  trees);
* ``ngram``: the demo's n-gram drafter (``treegram.demo.NGramDrafter``, 16 nodes), its
  history being the prompt (the schema's JSON text, tokenized: structured-output prompts
  usually contain the schema) plus the tokens generated so far;
* ``ngram+forced``: its trees extended at their effective leaves.

Reported: decoding steps per document and accepted tokens per step (accepted drafts + the
bonus token), medians over documents and the ratios the issue asks for; and the cost of the
extension per ``ngram+forced`` step. The fair comparison (the issue's "<= 10% of a warm
batched traversal of the same trees") is the one call an engine makes instead of its
traversal, ``extend_draft_trees(..., token_bitmask=rows)``, which extends the trees and fills
every node's mask, against a warm ``batch_traverse_draft_tree`` of the same (extended)
trees: both fill the same rows, so the difference is what the extension adds. Also
reported, against a traversal of the drafted trees: the tree-only call
(``token_bitmask=None``, a separate call that pays its own fixed validation cost) and its
forced-node work (that call minus the same call with budget 0). Timings are the minimum of
``--repeats`` runs after a warm-up run (lazy classification done).

Prints a table, writes ``benchmarks/results/forced_drafts.json`` and, when matplotlib is
importable, a plot of steps per document (``benchmarks/results/forced_drafts.png``).

Run from the repository root: ``python benchmarks/bench_forced_drafts.py --help``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import arg_parser, load_average, pyplot, run_meta, save_figure, write_json  # noqa: E402  (a sibling script module)

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DATA = REPO.parent / "shared" / "data" / "maskbench-sample"
DEFAULT_OUTPUT = REPO / "benchmarks" / "results" / "forced_drafts.json"
CONFIGS = ("none", "none+forced", "ngram", "ngram+forced")


def list_files(data: Path, every: int, limit: int | None) -> list[Path]:
    files = sorted(data.glob("*.json"))
    if not files:
        raise SystemExit(f"--data {data}: no MaskBench *.json files")
    files = files[::every]
    return files[:limit] if limit is not None else files


def load_documents(file: Path, tokenizer, decoded, max_docs: int) -> tuple[Any, list[list[int]]]:
    """The schema and the token ids of its valid instances that round-trip."""
    entry = json.loads(file.read_text(encoding="utf-8"))
    docs = []
    for test in entry.get("tests", []):
        if not test.get("valid"):
            continue
        try:
            text = json.dumps(test["data"], allow_nan=False)
        except ValueError:
            continue
        ids = tokenizer.encode(text, add_special_tokens=False).ids
        if ids and b"".join(decoded[t] for t in ids) == text.encode("utf-8"):
            docs.append(ids)
        if len(docs) >= max_docs:
            break
    return entry["schema"], docs


class Run:
    """Decodes one schema's documents as a batch under one configuration."""

    def __init__(
        self, tg, compiled, docs, prompt, stop_id, batch, forced_budget, drafter, per_leaf=None
    ):
        self.tg = tg
        self.per_leaf = per_leaf
        self.forced_proposed = 0
        self.forced_accepted = 0
        self.compiled = compiled
        self.targets = [list(d) + [stop_id] for d in docs]
        self.prompt = prompt
        self.batch = batch
        self.budget = forced_budget
        self.drafter = drafter
        self.timings: list[dict] = []

    def _trees(self, histories) -> tuple[np.ndarray, np.ndarray]:
        b = len(histories)
        if self.drafter is None:
            return np.zeros((b, 1), dtype=np.int64), np.full((b, 1), -1, dtype=np.int64)
        n = self.drafter.max_nodes
        draft = np.zeros((b, n), dtype=np.int64)
        parents = np.full((b, n), -1, dtype=np.int64)
        for i, h in enumerate(histories):
            toks, pars = self.drafter.propose(h)
            draft[i, : len(toks)] = toks
            parents[i, : len(pars)] = pars
        return draft, parents

    def decode(self, time_steps: bool, repeats: int) -> list[int]:
        """Steps per document."""
        tg = self.tg
        from treegram.matcher import extend_draft_trees
        from treegram.spec import links_from_parents

        matchers = [tg.GrammarMatcher(self.compiled) for _ in self.targets]
        pos = [0] * len(self.targets)
        steps = [0] * len(self.targets)
        histories = [list(self.prompt) for _ in self.targets]
        vocab = self.compiled.tokenizer_info.vocab_size
        active = list(range(len(self.targets)))
        while active:
            ms = [matchers[r] for r in active]
            draft, parents = self._trees([histories[r] for r in active])
            nt, ns = links_from_parents(parents)
            if self.budget:
                ext = extend_draft_trees(
                    ms,
                    nt,
                    ns,
                    draft,
                    budget=self.budget,
                    max_per_leaf=self.per_leaf,
                    batch=self.batch,
                )
                self.forced_proposed += int(ext.num_forced.sum())
                if time_steps:
                    self.timings.append(self._time(ms, nt, ns, draft, ext, vocab, repeats))
                n_input = ext.num_input_nodes
                draft, nt, ns = ext.draft_tokens, ext.next_token, ext.next_sibling
            still = []
            for i, r in enumerate(active):
                target = self.targets[r]
                node, out = 0, []
                while True:
                    tok = target[pos[r] + len(out)]
                    out.append(tok)
                    if pos[r] + len(out) >= len(target):
                        break
                    child = int(nt[i, node])
                    while child >= 0 and int(draft[i, child]) != tok:
                        child = int(ns[i, child])
                    if child < 0:
                        break  # tok was the bonus token
                    node = child
                    if self.budget and node >= n_input:
                        self.forced_accepted += 1
                for tok in out:
                    if not matchers[r].accept_token(tok):
                        raise RuntimeError(f"the grammar rejected document token {tok}")
                pos[r] += len(out)
                steps[r] += 1
                histories[r].extend(out)
                if pos[r] < len(target):
                    still.append(r)
            active = still
        return steps

    def _time(self, ms, nt, ns, draft, ext, vocab, repeats) -> dict:
        """Seconds of the extension calls and of warm traversals, minimum of ``repeats``."""
        from treegram.matcher import extend_draft_trees

        tg = self.tg
        b, n = draft.shape
        m_nodes = ext.num_nodes
        rows_in = tg.allocate_token_bitmask(b * n, vocab)
        rows_ext = tg.allocate_token_bitmask(b * m_nodes, vocab)
        calls = {
            "traverse": lambda: self.batch.batch_traverse_draft_tree(ms, nt, ns, draft, rows_in),
            "extend": lambda: extend_draft_trees(
                ms, nt, ns, draft, budget=self.budget, max_per_leaf=self.per_leaf, batch=self.batch
            ),
            "extend_budget0": lambda: extend_draft_trees(
                ms, nt, ns, draft, budget=0, batch=self.batch
            ),
            "traverse_extended": lambda: self.batch.batch_traverse_draft_tree(
                ms, ext.next_token, ext.next_sibling, ext.draft_tokens, rows_ext
            ),
            "extend_with_masks": lambda: extend_draft_trees(
                ms,
                nt,
                ns,
                draft,
                budget=self.budget,
                token_bitmask=rows_ext,
                max_per_leaf=self.per_leaf,
                batch=self.batch,
            ),
        }
        out = {}
        for name, call in calls.items():
            call()  # warm: every state these calls reach is classified
            best = float("inf")
            for _ in range(repeats):
                t0 = time.perf_counter()
                call()
                best = min(best, time.perf_counter() - t0)
            out[name] = best
        out["forced_nodes"] = int(ext.num_forced.sum())
        return out


def summarize(per_doc: dict[str, list[int]], tokens: list[int]) -> dict:
    res: dict[str, Any] = {}
    for name, steps in per_doc.items():
        s = np.asarray(steps, dtype=float)
        tps = np.asarray(tokens, dtype=float) / s
        res[name] = {
            "median_steps_per_doc": float(np.median(s)),
            "mean_steps_per_doc": float(np.mean(s)),
            "median_tokens_per_step": float(np.median(tps)),
            "total_tokens_per_step": float(np.sum(tokens) / np.sum(s)),
        }
    return res


def ratios(summary: dict, per_doc: dict, tokens: list[int]) -> dict:
    none = np.asarray(per_doc["none"], dtype=float)
    forced = np.asarray(per_doc["none+forced"], dtype=float)
    ng = np.asarray(per_doc["ngram"], dtype=float)
    ngf = np.asarray(per_doc["ngram+forced"], dtype=float)
    tok = np.asarray(tokens, dtype=float)
    return {
        # the targets, on the sample median
        "forced_alone_steps_cut_vs_none": 1.0
        - summary["none+forced"]["median_steps_per_doc"] / summary["none"]["median_steps_per_doc"],
        "forced_tokens_per_step_gain_over_ngram": summary["ngram+forced"]["median_tokens_per_step"]
        / summary["ngram"]["median_tokens_per_step"]
        - 1.0,
        # the same, as medians of per-document ratios
        "median_per_doc_steps_cut_vs_none": float(np.median(1.0 - forced / none)),
        "median_per_doc_tokens_per_step_gain_over_ngram": float(
            np.median((tok / ngf) / (tok / ng) - 1.0)
        ),
        "ngram_steps_cut_vs_none": 1.0
        - summary["ngram"]["median_steps_per_doc"] / summary["none"]["median_steps_per_doc"],
        "ngram_forced_steps_cut_vs_none": 1.0
        - summary["ngram+forced"]["median_steps_per_doc"] / summary["none"]["median_steps_per_doc"],
    }


def cost_summary(timings: list[dict]) -> dict:
    if not timings:
        return {}
    t = {k: np.asarray([x[k] for x in timings]) for k in timings[0]}
    return {
        "steps_timed": len(timings),
        "median_us": {k: float(np.median(v) * 1e6) for k, v in t.items() if k != "forced_nodes"},
        "median_forced_nodes_per_step": float(np.median(t["forced_nodes"])),
        # the target, compared fairly: the one call that extends the trees and fills
        # every node's mask, against a traversal of the same (extended) trees, which fills
        # the same rows; the extra is what the extension costs
        "extend_with_masks_over_traverse_extended": float(
            np.median(t["extend_with_masks"] / t["traverse_extended"])
        ),
        "extend_with_masks_extra_over_traverse_extended": float(
            np.median((t["extend_with_masks"] - t["traverse_extended"]) / t["traverse_extended"])
        ),
        # the tree-only extension call (a separate call with its own fixed cost) against a
        # warm traversal of the drafted trees
        "extend_over_traverse": float(np.median(t["extend"] / t["traverse"])),
        # the forced-node work alone: that call minus the same call with budget 0 (its
        # validation, allocation and tree walk, which the traversal pays too)
        "forced_work_over_traverse": float(
            np.median((t["extend"] - t["extend_budget0"]) / t["traverse"])
        ),
        "extend_with_masks_extra_over_traverse": float(
            np.median((t["extend_with_masks"] - t["traverse_extended"]) / t["traverse"])
        ),
    }


def format_table(result: dict) -> str:
    s = result["summary"]
    lines = [
        f"{result['meta']['documents']} documents of {result['meta']['schemas']} schemas, "
        f"forced budget {result['meta']['forced_budget']} nodes, n-gram trees of "
        f"{result['meta']['ngram_nodes']} nodes",
        f"{'config':<14}{'steps/doc (median)':>20}{'tokens/step (median)':>22}"
        f"{'tokens/step (total)':>21}",
    ]
    for name in CONFIGS:
        r = s[name]
        lines.append(
            f"{name:<14}{r['median_steps_per_doc']:>20.1f}{r['median_tokens_per_step']:>22.2f}"
            f"{r['total_tokens_per_step']:>21.2f}"
        )
    q = result["ratios"]
    lines.append(
        f"forced alone vs none: steps/doc cut {q['forced_alone_steps_cut_vs_none']:.1%} "
        f"(target >= 20%); per-doc median {q['median_per_doc_steps_cut_vs_none']:.1%}"
    )
    lines.append(
        f"ngram+forced vs ngram: tokens/step +{q['forced_tokens_per_step_gain_over_ngram']:.1%} "
        f"(target >= 10%); per-doc median "
        f"+{q['median_per_doc_tokens_per_step_gain_over_ngram']:.1%}"
    )
    for name, f in result["forced_nodes"].items():
        if f["proposed"]:
            lines.append(
                f"{name}: {f['accepted']} of {f['proposed']} forced nodes accepted "
                f"({f['accepted_fraction']:.1%})"
            )
    c = result["cost"]
    if c:
        us = c["median_us"]
        lines.append(
            f"cost per ngram+forced step (median of {c['steps_timed']}): extend + fill masks "
            f"(one call) {us['extend_with_masks']:.1f} us vs traverse of the same extended "
            f"trees {us['traverse_extended']:.1f} us: extra "
            f"{c['extend_with_masks_extra_over_traverse_extended']:+.1%} (target <= 10%)"
        )
        lines.append(
            f"  tree-only extend call {us['extend']:.1f} us = {c['extend_over_traverse']:.1%} of "
            f"a traversal of the drafted trees ({us['traverse']:.1f} us); of which forced-node "
            f"work {c['forced_work_over_traverse']:.1%} (the rest, {us['extend_budget0']:.1f} us, "
            "is the same call with budget 0: validation and the tree walk)"
        )
    return "\n".join(lines)


def plot(result: dict, path: Path) -> bool:
    plt = pyplot()
    if plt is None:
        return False
    per_doc = result["per_document"]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.5))
    for ax, (base, forced, title) in zip(
        axes,
        (("none", "none+forced", "no drafter"), ("ngram", "ngram+forced", "n-gram drafter")),
        strict=True,
    ):
        x = np.asarray(per_doc[base])
        y = np.asarray(per_doc[forced])
        ax.scatter(x, y, s=10, alpha=0.6)
        hi = max(x.max(), y.max(), 2)
        ax.plot([1, hi], [1, hi], "k--", lw=0.8, label="equal")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel(f"steps per document, {base}")
        ax.set_ylabel(f"steps per document, {forced}")
        ax.set_title(f"{title}: with vs without forced nodes")
        ax.legend()
    save_figure(fig, path)
    return True


def build_parser() -> argparse.ArgumentParser:
    ap = arg_parser(__doc__)
    ap.add_argument(
        "--data", type=Path, default=DEFAULT_DATA, help="folder of MaskBench *.json files"
    )
    ap.add_argument("--every", type=int, default=40, help="take every k-th file in sorted order")
    ap.add_argument("--limit", type=int, default=None, help="at most N schemas (after --every)")
    ap.add_argument("--docs-per-schema", type=int, default=4, help="valid instances per schema")
    ap.add_argument("--forced-budget", type=int, default=16, help="forced nodes per request")
    ap.add_argument("--ngram-nodes", type=int, default=16, help="n-gram tree nodes (root incl.)")
    ap.add_argument(
        "--max-per-leaf", type=int, default=None, help="forced nodes per leaf (default: budget)"
    )
    ap.add_argument(
        "--prompt",
        choices=("schema", "none"),
        default="schema",
        help="what the n-gram drafter sees before the output",
    )
    ap.add_argument("--repeats", type=int, default=3, help="timed runs per call (minimum kept)")
    ap.add_argument(
        "--time-every", type=int, default=1, help="time every k-th schema's ngram+forced steps"
    )
    ap.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help="result JSON file")
    ap.add_argument("--plot", type=Path, default=None, help="PNG (default: output with .png)")
    ap.add_argument("--quiet", action="store_true", help="no progress lines")
    return ap


def main(argv: list[str] | None = None) -> dict:
    args = build_parser().parse_args(argv)
    if min(args.every, args.docs_per_schema, args.ngram_nodes, args.repeats) < 1 or (
        args.limit is not None and args.limit < 1
    ):
        raise SystemExit("--every, --limit, --docs-per-schema, --ngram-nodes, --repeats >= 1")
    if args.forced_budget < 1:
        raise SystemExit("--forced-budget must be >= 1")
    import tokenizers

    import treegram as tg
    from treegram.demo import NGramDrafter
    from treegram.tokenizer._deepseek import deepseek_v4_tokenizer_json

    load_start = load_average()
    info = tg.TokenizerInfo.deepseek_v4()
    stop_id = int(info.stop_token_ids[0])
    decoded = info.decoded_vocab
    tokenizer = tokenizers.Tokenizer.from_file(str(deepseek_v4_tokenizer_json()))
    compiler = tg.GrammarCompiler(info)
    batch = tg.BatchGrammarMatcher(max_threads=1)
    files = list_files(args.data, args.every, args.limit)
    per_doc: dict[str, list[int]] = {c: [] for c in CONFIGS}
    tokens: list[int] = []
    timings: list[dict] = []
    forced_counts = {c: [0, 0] for c in CONFIGS if "forced" in c}  # proposed, accepted
    skipped = {"compile": 0, "not_accepted": 0, "no_documents": 0}
    schemas = 0
    t_start = time.perf_counter()
    for k, file in enumerate(files):
        schema, docs = load_documents(file, tokenizer, decoded, args.docs_per_schema)
        if not docs:
            skipped["no_documents"] += 1
            continue
        try:
            compiled = compiler.compile_grammar(
                tg.Grammar.from_json_schema(
                    json.dumps(schema), any_whitespace=False, strict_mode=False
                )
            )
        except Exception:  # noqa: BLE001 - a schema treegram cannot compile is skipped
            skipped["compile"] += 1
            continue
        ok_docs = []
        for ids in docs:
            m = tg.GrammarMatcher(compiled)
            if all(m.accept_token(t) for t in ids) and m.accept_token(stop_id):
                ok_docs.append(ids)
            else:
                skipped["not_accepted"] += 1
        if not ok_docs:
            continue
        schemas += 1
        prompt = tokenizer.encode(json.dumps(schema), add_special_tokens=False).ids or [stop_id]
        if args.prompt == "none":
            prompt = [stop_id]
        for name in CONFIGS:
            drafter = NGramDrafter(max_nodes=args.ngram_nodes) if "ngram" in name else None
            budget = args.forced_budget if "forced" in name else 0
            run = Run(
                tg, compiled, ok_docs, prompt, stop_id, batch, budget, drafter, args.max_per_leaf
            )
            timed = name == "ngram+forced" and k % args.time_every == 0
            per_doc[name].extend(run.decode(timed, args.repeats))
            timings.extend(run.timings)
            if budget:
                forced_counts[name][0] += run.forced_proposed
                forced_counts[name][1] += run.forced_accepted
        tokens.extend(len(d) + 1 for d in ok_docs)
        if not args.quiet:
            print(
                f"[{k + 1}/{len(files)}] {file.name}: {len(ok_docs)} docs, steps "
                + " ".join(f"{c}={sum(per_doc[c][-len(ok_docs) :])}" for c in CONFIGS),
                flush=True,
            )
    batch.close()
    if not tokens:
        raise SystemExit("no document could be replayed")
    summary = summarize(per_doc, tokens)
    result = {
        "meta": {
            **run_meta(argv, load_start),
            "data": str(args.data),
            "files": len(files),
            "schemas": schemas,
            "documents": len(tokens),
            "skipped": skipped,
            "forced_budget": args.forced_budget,
            "ngram_nodes": args.ngram_nodes,
            "max_per_leaf": args.max_per_leaf,
            "prompt": args.prompt,
            "repeats": args.repeats,
            "seconds": time.perf_counter() - t_start,
        },
        "summary": summary,
        "ratios": ratios(summary, per_doc, tokens),
        "cost": cost_summary(timings),
        "forced_nodes": {
            name: {
                "proposed": p,
                "accepted": a,
                "accepted_fraction": a / p if p else None,
            }
            for name, (p, a) in forced_counts.items()
        },
        "per_document": {**per_doc, "tokens": tokens},
    }
    png = args.plot if args.plot is not None else args.output.with_suffix(".png")
    result["meta"]["plot"] = str(png) if plot(result, png) else None
    write_json(args.output, result, indent=1, strict=False)
    print(format_table(result))
    return result


if __name__ == "__main__":
    main()
