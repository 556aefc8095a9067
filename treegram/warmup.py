"""Compile (or load) every numba kernel ahead of the first request.

numba compiles a kernel the first time it is called in a process, unless its machine code is
in the kernel cache (see :mod:`treegram._kernel_cache`). :func:`warm_up` runs a small
workload that calls every kernel treegram has, with the argument types real requests use,
on a 300-token vocabulary: grammars from every frontend, masks, accepts and rollbacks, draft
trees scalar and batched, forced drafts, tree links and a serialized grammar. Afterwards no
request in the process waits on the JIT; with a warm kernel cache it only loads machine code.

A wheel built from source runs it at build time, so a fresh install starts warm; serving
engines run it when they set up treegram, in the background where they can.
"""

from __future__ import annotations

import sys
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass

import numpy as np
from numba.core.registry import CPUDispatcher

from treegram import kernels, spec
from treegram._kernel_cache import kernel_cache_dir, kernel_seconds
from treegram.compiler import CompiledGrammar, GrammarCompiler, register_warm_up
from treegram.matcher import (
    BatchGrammarMatcher,
    GrammarMatcher,
    allocate_token_bitmask,
    batch_forced_chains,
    extend_draft_trees,
    forced_chain,
)
from treegram.structural_tag import (
    AnyTextFormat,
    JSONSchemaFormat,
    SequenceFormat,
    StructuralTag,
    TagFormat,
    TokenFormat,
    TriggeredTagsFormat,
)
from treegram.tokenizer import TokenizerInfo, VocabType

__all__ = [
    "WarmUpReport",
    "kernel_cache_dir",
    "kernel_counts",
    "kernel_dispatchers",
    "kernel_seconds",
    "warm_up",
]


@dataclass(frozen=True)
class WarmUpReport:
    """What :func:`warm_up` did.

    Attributes
    ----------
    seconds : float
        Wall time of the whole warm-up.
    kernel_seconds : float
        Of which numba spent compiling or loading kernels.
    compiled : int
        Kernel specializations compiled (not found in the kernel cache).
    loaded : int
        Kernel specializations loaded from the kernel cache.
    cache_dir : str or None
        The kernel cache directory.
    """

    seconds: float
    kernel_seconds: float
    compiled: int
    loaded: int
    cache_dir: str | None


def kernel_dispatchers() -> list[CPUDispatcher]:
    """Every numba kernel defined in treegram's modules (imported so far), once each."""
    seen: dict[int, CPUDispatcher] = {}
    for name, module in list(sys.modules.items()):
        if module is None or not (name == "treegram" or name.startswith("treegram.")):
            continue
        for value in vars(module).values():
            if isinstance(value, CPUDispatcher) and value.py_func.__module__.startswith("treegram"):
                seen[id(value)] = value
    return list(seen.values())


def kernel_counts() -> tuple[int, int]:
    """Kernel specializations this process has compiled, and loaded from the kernel cache."""
    compiled = loaded = 0
    for d in kernel_dispatchers():
        compiled += sum(d.stats.cache_misses.values())
        loaded += sum(d.stats.cache_hits.values())
    return compiled, loaded


# ----------------------------------------------------------------------------- workload

_SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "minLength": 1, "maxLength": 80},
        # a counted string (its length bound kept by the matcher): automaton._counted's kernel
        "mail": {"type": "string", "format": "email", "maxLength": 300},
        "code": {"type": "string", "pattern": "^[a-z]+-[0-9]{2,4}$"},
        "when": {"type": "string", "format": "date-time"},
        "count": {"type": "integer", "minimum": 0, "maximum": 500, "multipleOf": 4},
        "ratio": {"type": "number"},
        "kind": {"enum": ["alpha", "beta", 3, None]},
        "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 4},
        "child": {"$ref": "#"},
        "any": {"anyOf": [{"type": "boolean"}, {"type": "object"}]},
        "extra": {
            "type": "object",
            "properties": {"k": {"type": "integer"}},
            "additionalProperties": {"type": "string", "maxLength": 3},
        },
    },
    "required": ["name", "count"],
    "additionalProperties": False,
}
_DOC = '{"name": "x", "count": 12, "tags": ["a"], "child": {"name": "y", "count": 0}}'
_LARK = 'start: "(" item ("," item)* ")"\nitem: /[0-9]+/ | "x"\n'
_EBNF = 'root ::= "a" [0-9]{2,5} rest? "."\nrest ::= ("b" rest | "c") (= ".")\n'


def _vocabulary() -> TokenizerInfo:
    """Every byte, JSON pieces, tags, a token read by id and the stop token."""
    pieces = [bytes([b]) for b in range(256)]
    pieces += [b'{"', b'":', b' "', b'",', b"name", b"count", b"true", b"null", b"12", b"ab"]
    pieces += [b"<tool_call>", b"</tool_call>", b"abc", b"<|tool|>", b"</s>"]
    return TokenizerInfo(pieces, VocabType.RAW, stop_token_ids=[len(pieces) - 1])


def _tags() -> StructuralTag:
    call = TagFormat(
        begin="<tool_call>",
        content=JSONSchemaFormat(json_schema={"type": "object"}),
        end="</tool_call>",
    )
    return StructuralTag(
        format=SequenceFormat(
            elements=[
                AnyTextFormat(max_tokens=64),
                TokenFormat(token="<|tool|>"),
                TriggeredTagsFormat(triggers=["<tool_call>"], tags=[call]),
            ]
        )
    )


def _grammars(compiler: GrammarCompiler) -> list[tuple[CompiledGrammar, str]]:
    """Grammars from every frontend, each with a document it accepts (or a prefix)."""
    return [
        (compiler.compile_builtin_json_grammar(), '{"a": [1, 2.5e3, true, null], "b": "c"}'),
        (compiler.compile_json_schema(_SCHEMA), _DOC),
        (compiler.compile_regex(r"(ab|c)+[0-9]{1,3}\.?"), "ababc12."),
        (compiler.compile_grammar(_EBNF), "a123bc."),
        (compiler.compile_lark(_LARK), "(1,x,23)"),
        (compiler.compile_structural_tag(_tags()), "hi"),  # token budget: no forced drafts
    ]


def _matcher_ops(compiled: CompiledGrammar, text: str, info: TokenizerInfo) -> GrammarMatcher:
    matcher = GrammarMatcher(compiled, max_rollback_tokens=-1)
    mask = allocate_token_bitmask(4, info.vocab_size, backend="numpy")
    matcher.fill_next_token_bitmask(mask, 1)
    matcher.find_jump_forward_string()
    ids = [b for b in text.encode()]
    for tid in ids[:3]:
        matcher.fill_next_token_bitmask(mask)
        matcher.accept_token(tid)
    matcher.accept_string(text.encode()[3:])
    matcher.fill_next_token_bitmask(mask)
    matcher.is_terminated()
    matcher.is_completed()
    for stop in info.stop_token_ids:
        if matcher.accept_token(stop):
            matcher.rollback(1)
    matcher.rollback(min(2, matcher.num_accepted_steps()))
    matcher.count_acceptable_tokens(np.array(ids[:2], dtype=np.int64))
    matcher.fill_chain_bitmask(np.array(ids[:2], dtype=np.int64), mask)
    matcher.reset()
    return matcher


def _draft_trees(matchers: list[GrammarMatcher], info: TokenizerInfo) -> None:
    """Scalar and batched traversals, forced drafts and tree links (the matchers have no
    token budgets)."""
    parents = np.array([-1, 0, 0, 1, 3, 2], dtype=np.int64)
    tree_mask = spec.tree_mask_from_parents(parents)
    next_token, next_sibling = spec.links_from_tree_mask(tree_mask)
    spec.links_from_parents(parents)
    spec.parents_from_tree_mask(tree_mask[None])
    spec.depths_from_parents(parents)
    spec.positions_from_parents(parents, 3)
    spec.validate_tree(next_token, next_sibling)
    n, b = parents.shape[0], len(matchers)
    draft = np.tile(np.array([0, ord("{"), ord("a"), ord('"'), ord("1"), ord("(")]), (b, 1))
    mask = allocate_token_bitmask(b * n, info.vocab_size, backend="numpy")
    temps = np.zeros(n, dtype=np.float32)
    for i, m in enumerate(matchers):
        m.traverse_draft_tree(next_token, next_sibling, draft[i], mask[:n], temperatures=temps)
        m.traverse_draft_tree(next_token, next_sibling, draft[i], mask[:n], time_threshold=5.0)
    with BatchGrammarMatcher(max_threads=1) as batch:
        batch.batch_fill_next_token_bitmask(matchers, mask)
        batch.batch_traverse_draft_tree(matchers, next_token, next_sibling, draft, mask)
        per_request = (np.tile(next_token, (b, 1)), np.tile(next_sibling, (b, 1)))
        batch.batch_traverse_draft_tree(
            matchers,
            *per_request,
            draft,
            mask,
            indices=np.arange(b),
            root_positions=np.zeros(b, dtype=np.int64),
            time_threshold=5.0,
        )
        # the engine drop-ins' form: unfilled rows left -1, the last node each walk reached
        last = np.empty(b, dtype=np.int64)
        batch.batch_traverse_draft_tree(
            matchers, next_token, next_sibling, draft, mask, unfilled_rows=-1, last_nodes=last
        )
        accepted = batch.batch_accept_token(matchers, np.array(draft[:, 1]))
        batch.batch_accept_string(matchers, ["a"] * b)
        batch.batch_rollback(matchers, [int(a) for a in accepted])
        temperatures = np.zeros(b * n, dtype=np.float32)
        batch.batch_fill_temperature(matchers, temperatures)
        forced_chain(matchers[0], 4)
        batch_forced_chains(matchers, 3, batch=batch)
        extend_draft_trees(matchers, next_token, next_sibling, draft, budget=4, token_bitmask=None)
        extend_draft_trees(matchers, *per_request, draft, budget=np.full(b, 3), batch=batch)
    # vLLM's draft chains as trees, and the rows after a rejected draft (serving.vllm)
    chains = np.full((b, 2), -1, dtype=np.int64)
    chain_links = np.empty((b, 3), dtype=np.int64), np.empty((b, 3), dtype=np.int64)
    kernels.rows.chain_trees(chains, info.vocab_size, *chain_links)
    zeros = np.zeros(b, dtype=np.int64)
    kernels.rows.chain_rejections(
        chains, np.arange(b, dtype=np.int64), zeros, zeros, mask, 3, np.empty(b, dtype=np.int64)
    )
    # serving.verify_tree's path walk (its torch wrapper is not needed to load the kernel)
    target = np.full(b * n, -1, dtype=np.int64)
    kernels.tree.walk_target_paths(
        next_token[None],
        next_sibling[None],
        draft,
        target,
        np.zeros(b, dtype=np.int64),
        np.full((b, 1), -1, dtype=np.int64),
        np.zeros((b, n), dtype=np.int64),
        np.zeros((b, n), dtype=np.int64),
        np.zeros(b, dtype=np.int64),
        np.zeros(b, dtype=bool),
    )


def _workload() -> None:
    info = _vocabulary()
    compiler = GrammarCompiler(info, cache_enabled=False, max_threads=1)
    grammars = _grammars(compiler)
    matchers = [_matcher_ops(compiled, text, info) for compiled, text in grammars]
    # a grammar read back from its binary form holds read-only arrays: other specializations
    restored = CompiledGrammar.deserialize(grammars[0][0].serialize(), info)
    matchers.append(_matcher_ops(restored, grammars[0][1], info))
    restored.classify_all_states()
    # walks past the budget share classes by signature (a large vocabulary's expensive states)
    tight = compiler.compile_regex("[a-z]+[0-9]")
    tight.mask_store.walk_budget = 1
    _matcher_ops(tight, "ab1", info)
    # slice walks over grouped tries (kernels._slice_groups; built after a walk that cost
    # about a build, none on this vocabulary: noted here)
    store = tight.mask_store
    for s in range(tight.automaton.n_states):
        context = store._context_of(s, ())
        grouping = store._slice_grouping(s, *store._slice_follow(s, context))
        if grouping is not None:
            store._shared.note_grouping(grouping[0])
        store._slice_dfa_walk(s, context)
        # a table of one pair set: the grouped walk gives up, the whole trie's walk runs
        store._slice_dfa_walk(s, store._context_of(s, ()), max_sets=1)
    # the branches of a union walked in one pass (MaskStore._joint_slice_walks)
    store._joint_slice_walks(list(range(tight.automaton.n_states)))
    _draft_trees(matchers[:-2] + matchers[-1:], info)
    # a class whose accepted tokens a walk did not all meet (rare on a small vocabulary)
    kernels.bitset_positions(np.zeros(2, dtype=np.int32))


def _run() -> WarmUpReport:
    compiled0, loaded0 = kernel_counts()
    kernel0 = kernel_seconds()
    t0 = time.perf_counter()
    _workload()
    seconds = time.perf_counter() - t0
    compiled1, loaded1 = kernel_counts()
    return WarmUpReport(
        seconds=seconds,
        kernel_seconds=kernel_seconds() - kernel0,
        compiled=compiled1 - compiled0,
        loaded=loaded1 - loaded0,
        cache_dir=kernel_cache_dir(),
    )


_lock = threading.Lock()
_done: Future[WarmUpReport] | None = None


def warm_up(*, background: bool = False) -> WarmUpReport | Future[WarmUpReport]:
    """Compile or load every treegram kernel now, so that no request waits on the JIT.

    Idempotent: the workload runs once per process; later calls return the first call's
    result (or its future); after a failure the next call tries again. Threads that need a
    kernel while the warm-up runs wait for numba's compiler lock, then find the kernel
    ready or compile it themselves. Safe to call from any thread.

    Parameters
    ----------
    background : bool, default False
        Run on a daemon thread and return at once. numba compiles holding the GIL for
        much of the work, so a background warm-up slows Python running beside it; it pays
        off where the process has other start-up work (loading a model) to overlap with.

    Returns
    -------
    WarmUpReport, or a concurrent.futures.Future of one when ``background`` is true.
    """
    global _done
    with _lock:
        future, start = _done, _done is None
        if future is None:
            future = _done = Future()
    if start:
        if background:
            name = "treegram-warm-up"
            threading.Thread(target=_complete, args=(future,), name=name, daemon=True).start()
        else:
            _complete(future)
    return future if background else future.result()


def _complete(future: Future[WarmUpReport]) -> None:
    global _done
    try:
        report = _run()
    except BaseException as exc:  # reported through the future; the next call retries
        with _lock:
            _done = None
        future.set_exception(exc)
    else:
        future.set_result(report)


register_warm_up(warm_up)  # GrammarCompiler(warm_up=...) starts it
