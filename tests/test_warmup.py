"""treegram.warm_up: after it, real work on a real vocabulary compiles no kernel.

The check runs in a fresh process: warm_up() first, then a broad workload on the DeepSeek-V4
vocabulary (grammars from every frontend, tool-call structural tags, masks, accepts,
rollbacks, scalar and batched draft trees, forced drafts, verification, a grammar read back
from its binary form); no treegram kernel may gain a specialization during the workload.
A specialization the warm-up misses would be compiled inside a request.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import treegram
from treegram.warmup import WarmUpReport, kernel_dispatchers

DATA = Path(__file__).parent / "data"

_WORKLOAD = textwrap.dedent(
    r"""
    import json, sys
    import numpy as np
    import treegram
    from treegram.warmup import kernel_dispatchers

    report = treegram.warm_up()
    before = {id(d): set(d.signatures) for d in kernel_dispatchers()}

    cases = json.loads(sys.argv[1])
    info = treegram.TokenizerInfo.deepseek_v4()
    compiler = treegram.GrammarCompiler(info, max_threads=2, cache_enabled=False)
    weather = {"type": "object", "properties": {"city": {"type": "string"},
               "days": {"type": "integer", "minimum": 1}}, "required": ["city"]}
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": weather}}]
    grammars = [(compiler.compile_builtin_json_grammar(), '{"a": [1, true, "x"]}')]
    for kind, source, text in cases:
        method = {"json_schema": compiler.compile_json_schema, "regex": compiler.compile_regex,
                  "ebnf": compiler.compile_grammar}[kind]
        grammars.append((method(source), text))
    for fmt in ("qwen_3", "llama", "harmony", "qwen_3_coder", "kimi_k3", "deepseek_v4"):
        tag = treegram.get_model_structural_tag(fmt, tools=tools)
        grammars.append((compiler.compile_structural_tag(tag), "Let me check."))
    grammars.append((compiler.compile_lark('start: "[" NUM ("," NUM)* "]"\nNUM: /[0-9]+/\n'),
                     "[1,22]"))
    # a long bounded format string: counted by the matcher (automaton._counted's analysis)
    mail = {"type": "string", "format": "email", "maxLength": 500}
    grammars.append((compiler.compile_json_schema(mail), '"ab@cd.io"'))
    restored = treegram.CompiledGrammar.deserialize(grammars[1][0].serialize(), info)
    grammars.append((restored, cases[0][2]))

    vocab = info.vocab_size
    mask = treegram.allocate_token_bitmask(8, vocab)
    matchers = []
    for compiled, text in grammars:
        m = treegram.GrammarMatcher(compiled)
        m.fill_next_token_bitmask(mask)
        m.accept_string(text)
        m.fill_next_token_bitmask(mask, 3)
        m.find_jump_forward_string()
        m.is_terminated()
        if m.num_accepted_steps():
            m.rollback(1)
        m.reset()
        matchers.append(m)
    restored.classify_all_states()
    # the treegram command's walk: a mask before every token of a document
    from treegram.cli import _greedy_tokenize
    walker = treegram.GrammarMatcher(grammars[0][0])
    doc = '{"name": "treegram", "version": [0, 1], "fast": true, "note": "h\u00e9llo"}'
    for token in _greedy_tokenize(info, doc):
        walker.fill_next_token_bitmask(mask)
        assert walker.accept_token(token)

    from treegram.spec import links_from_tree_mask, tree_mask_from_parents
    parents = np.array([-1, 0, 0, 1, 2, 2, 4], dtype=np.int64)
    nt, ns = links_from_tree_mask(tree_mask_from_parents(parents))
    n, b = len(parents), len(matchers)
    draft = np.array([[0, 90, 515, 1, 3, 2, 9]] * b, dtype=np.int64)
    rows = treegram.allocate_token_bitmask(b * n, vocab)
    plain = matchers[: 1 + len(cases)]  # no token budgets: forced drafts apply
    for m in matchers:
        m.traverse_draft_tree(nt, ns, draft[0], rows[:n])
        m.fill_chain_bitmask(draft[0, 1:3], rows[:3])
    with treegram.BatchGrammarMatcher(max_threads=2) as batch:
        batch.batch_fill_next_token_bitmask(matchers, rows)
        batch.batch_traverse_draft_tree(matchers, nt, ns, draft, rows)
        batch.batch_traverse_draft_tree(matchers, np.tile(nt, (b, 1)), np.tile(ns, (b, 1)),
                                        draft, rows, time_threshold=10.0)
        last = np.empty(b, dtype=np.int64)
        batch.batch_traverse_draft_tree(matchers, nt, ns, draft, rows, unfilled_rows=-1,
                                        last_nodes=last)
        ok = batch.batch_accept_token(matchers, draft[:, 1])
        batch.batch_rollback(matchers, [int(x) for x in ok])
        from treegram.matcher import batch_forced_chains, extend_draft_trees, forced_chain
        forced_chain(plain[0], 8)
        batch_forced_chains(plain, 4, batch=batch)
        extend_draft_trees(plain, nt, ns, draft[: len(plain)], budget=6, batch=batch)
    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None:
        # vLLM's chain drop-in, through its own kernels, on a torch bitmask's numpy view
        from treegram.kernels import rows as row_kernels
        chains = np.array([[90, 515]] * b, dtype=np.int64)
        links = np.empty((b, 3), dtype=np.int64), np.empty((b, 3), dtype=np.int64)
        row_kernels.chain_trees(chains, vocab, *links)
        zeros = np.zeros(b, dtype=np.int64)
        row_kernels.chain_rejections(chains, np.arange(b), zeros, zeros, rows.numpy(), 3,
                                     np.empty(b, dtype=np.int64))
        from treegram.serving import verify_tree
        logits = torch.zeros(2 * n, vocab)
        verify_tree(logits, draft[:2], nt, ns, rows[: 2 * n], matchers[:2])

    fresh = []
    for d in kernel_dispatchers():
        for sig in set(d.signatures) - before.get(id(d), set()):
            fresh.append(f"{d.py_func.__module__}.{d.py_func.__qualname__}{sig}")
    print(json.dumps({"fresh": fresh, "report": report.__dict__}))
    """
)


def _cases() -> list[tuple[str, object, str]]:
    """A few accepted inputs per grammar kind from xgrammar's recorded test cases."""
    picked: list[tuple[str, object, str]] = []
    for kind, limit in (("json_schema", 8), ("regex", 6), ("ebnf", 6)):
        seen = set()
        with open(DATA / f"xgrammar_cases_{kind}.jsonl", encoding="utf-8") as f:
            for line in f:
                case = json.loads(line)
                key = json.dumps(case["source"], sort_keys=True)
                if case["kind"] != kind or case["options"] or not case["expected"] or key in seen:
                    continue
                seen.add(key)
                picked.append((kind, case["source"], case["input"]))
                if len(seen) == limit:
                    break
    return picked


@pytest.mark.slow
def test_no_kernel_compiles_after_warm_up_on_a_real_workload():
    proc = subprocess.run(
        [sys.executable, "-c", _WORKLOAD, json.dumps(_cases())],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["fresh"] == [], "kernels the warm-up missed:\n" + "\n".join(result["fresh"])
    assert result["report"]["compiled"] + result["report"]["loaded"] > 0


def test_warm_up_is_idempotent_and_reports():
    first = treegram.warm_up()
    assert isinstance(first, WarmUpReport)
    assert treegram.warm_up() is first
    future = treegram.warm_up(background=True)
    assert future.result(timeout=60) is first
    # every kernel the package defines has been compiled or loaded, or inlined into one
    assert kernel_dispatchers()
    assert first.seconds >= first.kernel_seconds >= 0


def test_a_compiler_starts_the_warm_up():
    info = treegram.TokenizerInfo([b"a", b"b", b"</s>"], stop_token_ids=[2])
    report = treegram.warm_up()
    compiler = treegram.GrammarCompiler(info, warm_up="background")
    assert treegram.warm_up() is report  # once per process
    assert treegram.GrammarCompiler(info, warm_up=True).tokenizer_info is info
    assert compiler.compile_regex("ab") is not None
    with pytest.raises(treegram.ArgumentError, match="warm_up"):
        treegram.GrammarCompiler(info, warm_up="later")


def _slice_limits(info) -> set[int]:
    """The token length limits of the string slices built for ``info``'s vocabulary."""
    from treegram.compiler._class_cache import class_cache_for

    return {max_bytes for _, max_bytes in class_cache_for(info.sorted_vocab)._slices}


def _long_token_info():
    # tokens up to 70 bytes: every limited slice (8, 16, 32, 64 bytes) is below the longest
    words = [bytes([c]) for c in range(32, 127)] + [b"x" * n for n in (9, 17, 33, 65, 70)]
    return treegram.TokenizerInfo([*words, b"</s>"], stop_token_ids=[len(words)])


def test_a_compiler_warm_up_builds_the_vocabulary_tables():
    from treegram.compiler._mask_store import _SLICE_BYTES

    info = _long_token_info()
    assert info._sorted_vocab is None and info._token_table is None
    treegram.GrammarCompiler(info, warm_up=True)
    assert info._sorted_vocab is not None and info._token_table is not None
    assert _slice_limits(info) == {70, *_SLICE_BYTES}

    later = _long_token_info()  # in the background: the same tables, soon
    treegram.GrammarCompiler(later, warm_up="background")
    deadline = time.monotonic() + 60
    while _slice_limits(later) != {70, *_SLICE_BYTES} and time.monotonic() < deadline:
        time.sleep(0.01)
    assert _slice_limits(later) == {70, *_SLICE_BYTES}


def test_a_failed_background_warm_up_is_logged(monkeypatch, caplog):
    import treegram.compiler._compiler as compiler_module

    def fail(info):
        raise RuntimeError("no tables today")

    monkeypatch.setattr(compiler_module, "prepare_vocabulary", fail)
    info = treegram.TokenizerInfo([b"a", b"</s>"], stop_token_ids=[1])
    with caplog.at_level(logging.ERROR, logger=compiler_module.logger.name):
        treegram.GrammarCompiler(info, warm_up="background")
        deadline = time.monotonic() + 60
        while "no tables today" not in caplog.text and time.monotonic() < deadline:
            time.sleep(0.01)
    assert "background warm-up failed" in caplog.text and "no tables today" in caplog.text
    with pytest.raises(RuntimeError, match="no tables today"):  # in the foreground: raised
        treegram.GrammarCompiler(info, warm_up=True)
