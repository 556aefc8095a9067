"""``treegram demo``: what the command prints, for the tiny model and for SmolLM2.

:func:`run_demo` takes the parsed command-line options (see ``treegram.cli``). With the
tiny model it decodes the batch three times (cold, then twice warm) and prints the warm
run; with SmolLM2 it decodes each request once, streaming its text as it is produced (or,
with ``--concurrent``, all requests in one batch behind a progress line), then prints a
summary: tokens/s, tokens per step, accepted forced nodes, the grammar's share of step
time and the first-request latency (compile + first masks). ``--check`` also decodes every
request without speculation and compares; ``--json`` prints one JSON object as the last line.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

import numpy as np

from treegram.errors import TreegramError

__all__ = ["DRAFTERS", "run_demo"]

#: ``--drafter`` choices.
DRAFTERS = ("none", "ngram", "self", "forced", "ngram+forced", "self+forced")

_DEFAULT_FORCED = 16


def _validity(text: str, request) -> str:
    """``"valid"``, ``"valid JSON"`` (no schema), or what is wrong."""
    from treegram.demo._validity import check_output

    return check_output(text, request)


def _requests(args: argparse.Namespace) -> list:
    """The requests: the built-in examples of the model, ``--schema`` or ``--builtin-json``,
    cycled to ``--batch`` requests."""
    from treegram.demo import EXAMPLES, DemoRequest
    from treegram.demo._prompts import SMOLLM2_EXAMPLES, schema_request

    real = args.model != "tiny"
    if args.schema:
        with open(args.schema, encoding="utf-8") as f:
            schema = json.load(f)
        if real:
            base = [schema_request(schema, name=args.schema)]
        else:
            base = [DemoRequest("Answer with JSON: ", schema, args.schema)]
    elif args.builtin_json:
        prompt = "Answer with a small JSON document." if real else "Answer with JSON: "
        base = [DemoRequest(prompt, None, "builtin-json")]
    else:
        base = list(SMOLLM2_EXAMPLES if real else EXAMPLES)
    count = len(base) if args.batch is None else args.batch
    requests = []
    for k in range(count):
        req = base[k % len(base)]
        prompt = args.prompt if args.prompt is not None else req.prompt
        if k >= len(base) and args.prompt is None:  # vary repeated prompts
            prompt = f"(variant {k // len(base)}) {prompt}"
        name = req.name if k < len(base) else f"{req.name}#{k // len(base)}"
        requests.append(DemoRequest(prompt, req.schema, name, req.structural_tag))
    return requests


def _decoding_options(args: argparse.Namespace, engine) -> dict[str, Any]:
    from treegram.demo import NGramDrafter, SelfDrafter

    kind = args.drafter or ("ngram+forced" if args.model != "tiny" else "ngram")
    forced = args.forced_drafts
    if forced is None:
        forced = _DEFAULT_FORCED if kind.endswith("forced") else 0
    base = kind.split("+")[0]
    options: dict[str, Any] = dict(
        max_tokens=args.max_tokens,
        forced_budget=0 if args.unconstrained else forced,
        grammar=None if args.unconstrained else args.grammar_engine,
        mode="sample" if args.sample else "greedy",
        temperature=args.temperature,
        seed=args.sample_seed,
    )
    if base in ("none", "forced"):
        options["tree_nodes"] = 1
    elif base == "self":
        layers = args.self_layers or max(1, engine.model.config.n_layers // 4)
        options["tree_nodes"] = args.tree_nodes
        options["drafter"] = SelfDrafter(layers, max_nodes=args.tree_nodes)
    else:
        options["tree_nodes"] = args.tree_nodes
        options["drafter"] = NGramDrafter(max_nodes=args.tree_nodes)
    return options


def _describe(options: dict[str, Any]) -> str:
    drafter = options.get("drafter")
    parts = []
    if options["tree_nodes"] == 1:
        parts.append("no drafter")
    elif type(drafter).__name__ == "SelfDrafter":
        parts.append(
            f"self-speculative trees of {options['tree_nodes']} nodes (first "
            f"{drafter.layers} blocks)"
        )
    else:
        parts.append(f"n-gram trees of {options['tree_nodes']} nodes")
    if options["forced_budget"]:
        parts.append(f"up to {options['forced_budget']} grammar-forced nodes")
    return " + ".join(parts)


def _fmt_timings(t) -> str:
    return (
        f"grammar {t.grammar * 1e3:8.1f} ms (traverse {t.traverse * 1e3:.1f}, apply "
        f"{t.apply * 1e3:.1f}, advance {t.advance * 1e3:.1f})   model {t.model * 1e3:8.1f} ms"
        f"   draft {t.draft * 1e3:.1f} ms   verify {t.verify * 1e3:.1f} ms"
    )


def _request_json(res, check: str) -> dict[str, Any]:
    steps = len(res.step_lengths)
    return {
        "name": res.request.name,
        "text": res.text,
        "truncated": res.truncated,
        "tokens": len(res.token_ids),
        "steps": steps,
        "tokens_per_step": len(res.token_ids) / steps if steps else 0.0,
        "forced_accepted": res.forced_accepted,
        "validity": check,
        "compile_ms": res.compile_s * 1e3,
        "first_masks_ms": res.first_mask_s * 1e3,
        "first_request_latency_ms": res.first_request_latency_s * 1e3,
    }


def _report_json(report) -> dict[str, Any]:
    return {
        "tokens": report.tokens,
        "steps": report.steps,
        "tokens_per_s": report.tokens_per_s(),
        "tokens_per_s_cpu": report.tokens_per_s(cpu=True),
        "tokens_per_step": report.mean_step_length,
        "grammar_share": report.grammar_share(),
        "grammar_share_cpu": report.grammar_share(cpu=True),
        "timings_s": report.timings.as_dict(),
        "cpu_timings_s": report.cpu.as_dict(),
    }


class _Stream:
    """Prints each request's text as it is produced (``on_step`` callback), and a progress
    line on stderr when stderr is a terminal."""

    def __init__(self, engine, requests, *, echo: bool) -> None:
        self.engine = engine
        self.requests = requests
        self.echo = echo
        self.ids: dict[int, list[int]] = {}
        self.shown: dict[int, int] = {}
        self.steps = 0
        self.t0 = time.perf_counter()
        self.tty = sys.stderr.isatty()

    def __call__(self, row: int, tokens: list[int]) -> None:
        ids = self.ids.setdefault(row, [])
        ids.extend(tokens)
        self.steps += 1
        if self.echo:
            data = self.engine.tokenizer.decode_bytes(ids)
            text = data.decode("utf-8", errors="ignore")  # a cut character waits
            new = text[self.shown.get(row, 0) :]
            if new:
                sys.stdout.write(new)
                sys.stdout.flush()
                self.shown[row] = len(text)
        if self.tty:
            total = sum(map(len, self.ids.values()))
            rate = total / max(time.perf_counter() - self.t0, 1e-9)
            sys.stderr.write(f"\r  [{total} tokens, {rate:.1f} tokens/s]  ")
            sys.stderr.flush()

    def done(self) -> None:
        if self.tty:
            sys.stderr.write("\r" + " " * 40 + "\r")
            sys.stderr.flush()


def run_demo(args: argparse.Namespace) -> int:
    """``treegram demo``: exit status 0 when every output is valid (and, with ``--check``,
    identical to plain decoding), 1 otherwise, 2 on bad options or missing packages."""
    if args.max_tokens < 1 or args.tree_nodes < 1 or (args.batch is not None and args.batch < 1):
        print("treegram demo: --max-tokens, --tree-nodes and --batch must be >= 1", file=sys.stderr)
        return 2
    if args.forced_drafts is not None and args.forced_drafts < 0:
        print("treegram demo: --forced-drafts must be >= 0", file=sys.stderr)
        return 2
    if args.temperature <= 0:
        print("treegram demo: --temperature must be > 0", file=sys.stderr)
        return 2
    try:
        import torch  # noqa: F401
    except ImportError:
        print("treegram demo needs torch: pip install 'treegram[torch]'", file=sys.stderr)
        return 2
    from treegram.demo import DemoEngine

    try:
        requests = _requests(args)
    except (OSError, ValueError) as exc:
        print(f"treegram demo: --schema: {exc}", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    try:
        dtype = None if args.dtype == "auto" else args.dtype
        engine = DemoEngine(model=args.model, seed=args.seed, dtype=dtype)
    except TreegramError as exc:
        print(f"treegram demo: {exc}", file=sys.stderr)
        return 2
    t_setup = time.perf_counter() - t0
    with engine:
        options = _decoding_options(args, engine)
        if args.model == "tiny":
            return _run_tiny(args, engine, requests, options, t_setup)
        return _run_model(args, engine, requests, options, t_setup)


def _run_tiny(args, engine, requests, options, t_setup: float) -> int:
    tok, cfg = engine.tokenizer, engine.model.config
    print(
        f"vocabulary     byte-level: 256 bytes + {tok.vocab_size - 257} merged tokens + <eos> "
        f"= {tok.vocab_size} ids"
    )
    print(
        f"model          seeded random causal LM: d_model {cfg.d_model}, {cfg.n_layers} blocks, "
        f"{cfg.n_heads} heads, seed {cfg.seed}, tree attention, float64"
    )
    print(
        f"decoding       batch {len(requests)}, {_describe(options)}, max {args.max_tokens} "
        f"tokens   (set-up {t_setup * 1e3:.0f} ms)"
    )
    if options["forced_budget"]:
        print(f"forced drafts  up to {options['forced_budget']} grammar-forced nodes per tree")
    try:
        cold = engine.speculative(requests, **options)
        for _ in range(2):  # steady state: every state the trees reach is classified
            warm = engine.speculative(requests, **options)
    except (ValueError, RuntimeError) as exc:
        print(f"treegram demo: {exc}", file=sys.stderr)
        return 1
    status = 0
    checks = []
    for res in warm.results:
        lengths = res.step_lengths
        done = "complete" if res.terminated else "HIT --max-tokens"
        check = _validity(res.text, res.request) if res.terminated else "incomplete"
        checks.append(check)
        if check not in ("valid", "valid JSON") and options["grammar"] is not None:
            status = 1
        print(
            f"\n[{res.request.name}] {len(res.token_ids)} tokens in {len(lengths)} steps, "
            f"{np.mean(lengths):.2f} tokens/step, {done}, {check}"
        )
        print(f"  {res.text}")
        print(f"  tokens per step: {' '.join(map(str, lengths))}")
    print(
        f"\nsteps          {warm.steps} batched steps; mean accepted length "
        f"{warm.mean_step_length:.2f} tokens/step (accepted draft tokens + bonus)"
    )
    print(f"time (cold)    {_fmt_timings(cold.timings)}")
    print("               (first run: includes lazy token classification of new states)")
    print(f"time (warm)    {_fmt_timings(warm.timings)}")
    print("               (third run of the same batch)")
    same = None
    if args.check:
        ref = engine.greedy(requests, max_tokens=args.max_tokens)
        same = [a.token_ids == b.token_ids for a, b in zip(warm.results, ref, strict=True)]
        print(
            "check          identical to plain constrained greedy decoding: "
            f"{'yes' if all(same) else 'NO'}"
        )
        if not all(same):
            status = 1
    if args.json:
        _print_json(warm, checks, same)
    return status


def _run_model(args, engine, requests, options, t_setup: float) -> int:
    cfg = engine.model.config
    print(
        f"model          {args.model}: Llama, {cfg.n_layers} blocks, d_model {cfg.d_model}, "
        f"{engine.model.num_parameters() / 1e6:.1f}M parameters, {cfg.dtype} matmuls, "
        f"{cfg.max_positions}-token context   (loaded in {t_setup:.1f} s)"
    )
    print(
        f"vocabulary     {engine.info.vocab_size} ids, {engine.info.vocab_type.name}, stop id "
        f"{list(engine.info.stop_token_ids)}, {len(engine.tokenizer.control_ids)} control tokens "
        "kept out of grammar text"
    )
    grammar = options["grammar"] or "none (unconstrained)"
    print(
        f"decoding       {_describe(options)}; grammar engine {grammar}; "
        f"{options['mode']}; max {args.max_tokens} tokens; 1 torch thread"
    )
    batches = [requests] if args.concurrent else [[r] for r in requests]
    reports = []
    try:
        for batch in batches:
            stream = _Stream(engine, batch, echo=not args.concurrent and not args.quiet)
            if stream.echo:
                print(f"\n[{batch[0].name}] ", end="", flush=True)
            report = engine.speculative(batch, on_step=stream, **options)
            stream.done()
            if stream.echo:
                print()
            reports.append(report)
    except TreegramError as exc:
        print(f"\ntreegram demo: {exc}", file=sys.stderr)
        return 1
    status = 0
    checks = []
    results = [res for rep in reports for res in rep.results]
    print()
    for res in results:
        check = _validity(res.text, res.request) if res.terminated else "incomplete"
        checks.append(check)
        if check not in ("valid", "valid JSON") and options["grammar"] is not None:
            status = 1
        steps = len(res.step_lengths)
        done = "complete" if res.terminated else "HIT --max-tokens"
        print(
            f"[{res.request.name}] {len(res.token_ids)} tokens in {steps} steps, "
            f"{len(res.token_ids) / max(steps, 1):.2f} tokens/step, {res.forced_accepted} forced "
            f"accepted, {done}, {check}; first-request latency "
            f"{res.first_request_latency_s * 1e3:.0f} ms (compile {res.compile_s * 1e3:.0f} + "
            f"first masks {res.first_mask_s * 1e3:.0f})"
        )
        if args.concurrent or args.quiet:
            print(f"  {res.text}")
    total = _merge(reports)
    print(
        f"\nsummary        {total.tokens} tokens, {total.tokens_per_s():.1f} tokens/s "
        f"({total.tokens_per_s(cpu=True):.1f} per CPU second), "
        f"{total.mean_step_length:.2f} tokens/step, grammar {total.grammar_share() * 100:.1f}% "
        f"of step time ({total.grammar_share(cpu=True) * 100:.1f}% of CPU time)"
    )
    print(f"time           {_fmt_timings(total.timings)}")
    same = None
    if args.check:
        plain = dict(options, tree_nodes=1, forced_budget=0)
        plain.pop("drafter", None)
        ref = [r for b in batches for r in engine.speculative(b, **plain).results]
        same = [a.token_ids == b.token_ids for a, b in zip(results, ref, strict=True)]
        if options["mode"] == "greedy":
            print(
                "check          identical to non-speculative decoding: "
                f"{'yes' if all(same) else 'NO'}"
            )
            if not all(same):
                status = 1
        else:
            print("check          (sampling: outputs differ from a non-speculative run by design)")
    if args.json:
        _print_json(total, checks, same, results=results)
    return status


def _merge(reports):
    from treegram.demo import DemoReport, Timings

    wall, cpu = Timings(), Timings()
    for rep in reports:
        wall.add(rep.timings)
        cpu.add(rep.cpu)
    results = [res for rep in reports for res in rep.results]
    return DemoReport(results, sum(rep.steps for rep in reports), wall, cpu)


def _print_json(report, checks, same, *, results=None) -> None:
    results = report.results if results is None else results
    reqs = []
    for i, res in enumerate(results):
        item = _request_json(res, checks[i])
        if same is not None:
            item["identical_to_non_speculative"] = same[i]
        reqs.append(item)
    out = {"requests": reqs, **_report_json(report)}
    print(json.dumps(out))
