"""The constrained speculative decoding loop of the demo, and plain greedy decoding to check it.

One step of :meth:`DemoEngine.speculative`, for every unfinished request of the batch at
once:

1. the drafter proposes a tree (parent array) rooted at the last verified token;
2. :func:`treegram.spec.links_from_parents` gives first-child / next-sibling links;
3. one :meth:`treegram.BatchGrammarMatcher.batch_traverse_draft_tree` call fills the mask
   of every node of every tree (grammar work);
4. the model scores prefix + tree with tree attention (KV cache for the prefix, positions
   = prefix length + node depth) giving logits ``[B * N, V]`` (model work);
5. :func:`treegram.serving.apply_token_bitmask_inplace` masks them (grammar work);
6. greedy verification walks from the root, accepting the child whose token is the argmax
   of the masked logits at the current node; the argmax at the last accepted node is the
   bonus token;
7. each matcher accepts exactly the accepted tokens and the bonus (grammar work), the KV
   cache keeps the keys/values of the accepted path.

A request stops when its matcher terminates (it accepted a stop token) or after
``max_tokens`` tokens. :meth:`DemoEngine.greedy` decodes the same requests one token per
step with a plain causal pass (no cache, no tree) and the matcher's own mask: the
speculative loop must reproduce it token for token.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from treegram.demo._drafter import NGramDrafter
from treegram.demo._model import ByteTokenizer, KVCache, TinyCausalLM, TinyLMConfig

__all__ = ["EXAMPLES", "DemoEngine", "DemoReport", "DemoRequest", "RequestResult", "Timings"]


@dataclass(frozen=True)
class DemoRequest:
    """One generation request.

    Parameters
    ----------
    prompt : str
        Text the model is conditioned on (and the drafter looks tokens up in).
    schema : dict, optional
        JSON Schema the output must satisfy; ``None`` means the built-in JSON grammar.
    name : str
        Label for printing.
    """

    prompt: str
    schema: dict | None = None
    name: str = ""


_PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 12},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "is_student": {"type": "boolean"},
        "email": {"type": "string", "maxLength": 16},
    },
    "required": ["name", "age", "is_student"],
    "additionalProperties": False,
}

_ORDER = {
    "type": "object",
    "properties": {
        "items": {
            "type": "array",
            "minItems": 1,
            "maxItems": 4,
            "items": {
                "type": "object",
                "properties": {
                    "sku": {"enum": ["apple", "bread", "milk", "tea"]},
                    "qty": {"type": "integer", "minimum": 1, "maximum": 99},
                    "size": {"enum": ["S", "M", "L"]},
                },
                "required": ["sku", "qty", "size"],
                "additionalProperties": False,
            },
        },
        "priority": {"enum": ["low", "normal", "high"]},
        "paid": {"type": "boolean"},
    },
    "required": ["items", "priority", "paid"],
    "additionalProperties": False,
}

_BOOK = {
    "type": "object",
    "properties": {
        "title": {"type": "string", "maxLength": 20},
        "author": {
            "type": "object",
            "properties": {
                "name": {"type": "string", "maxLength": 12},
                "born": {"type": "integer", "minimum": 1000, "maximum": 2025},
            },
            "required": ["name", "born"],
            "additionalProperties": False,
        },
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 8}, "maxItems": 3},
        "in_print": {"type": ["boolean", "null"]},
    },
    "required": ["title", "author", "tags", "in_print"],
    "additionalProperties": False,
}

#: The built-in example requests (``treegram demo`` without ``--schema``).
EXAMPLES: tuple[DemoRequest, ...] = (
    DemoRequest(
        'A person, as JSON: {"name": "Ada", "age": 36, "is_student": false}. Another: ',
        _PERSON,
        "person",
    ),
    DemoRequest(
        'An order: {"items": [{"sku": "tea", "qty": 2, "size": "M"}, {"sku": "milk", '
        '"qty": 1, "size": "L"}], "priority": "high", "paid": true}. Next order: ',
        _ORDER,
        "order",
    ),
    DemoRequest(
        'A book: {"title": "Dune", "author": {"name": "Frank Herbert", "born": 1920}, '
        '"tags": ["sf", "classic"], "in_print": true}. Another book: ',
        _BOOK,
        "book",
    ),
)


@dataclass
class Timings:
    """Seconds spent per kind of work, summed over a run."""

    draft: float = 0.0
    traverse: float = 0.0
    apply: float = 0.0
    model: float = 0.0
    verify: float = 0.0
    advance: float = 0.0

    @property
    def grammar(self) -> float:
        """Grammar work: tree traversal (masks), applying masks, advancing matchers."""
        return self.traverse + self.apply + self.advance


@dataclass
class RequestResult:
    """What one request produced.

    Attributes
    ----------
    request : DemoRequest
    token_ids : list of int
        Generated tokens, the stop token (if any) included.
    text : str
        Their text, stop token left out.
    terminated : bool
        The matcher accepted a stop token (the output is complete).
    step_lengths : list of int
        Tokens produced per step (accepted draft tokens + the bonus token); all ones for
        plain greedy decoding.
    """

    request: DemoRequest
    token_ids: list[int]
    text: str
    terminated: bool
    step_lengths: list[int] = field(default_factory=list)


@dataclass
class DemoReport:
    """Results of a batch plus where the time went.

    Attributes
    ----------
    results : list of RequestResult
    steps : int
        Batched decoding steps (model forward passes after the prefill).
    timings : Timings
    """

    results: list[RequestResult]
    steps: int
    timings: Timings

    @property
    def mean_step_length(self) -> float:
        """Mean tokens produced per request-step (accepted drafts + bonus)."""
        lengths = [n for r in self.results for n in r.step_lengths]
        return float(np.mean(lengths)) if lengths else 0.0


def _first_child_with(
    next_token: np.ndarray, next_sibling: np.ndarray, draft: np.ndarray, node: int, token: int
) -> int:
    child = int(next_token[node])
    while child >= 0:
        if int(draft[child]) == token:
            return child
        child = int(next_sibling[child])
    return -1


@contextlib.contextmanager
def _torch_threads(n: int | None) -> Iterator[None]:
    """Run with ``n`` intra-op torch threads (restored afterwards); ``None``: unchanged."""
    import torch

    if n is None:
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


class DemoEngine:
    """Tokenizer, compiler, model and batch matcher of the demo, built without downloads.

    Parameters
    ----------
    seed : int, default 0
        Seed of the model's weights.
    max_threads : int or "auto", default 1
        Worker threads of the :class:`treegram.BatchGrammarMatcher`.
    torch_threads : int or None, default 1
        Intra-op torch threads while decoding (restored afterwards). The model is so small
        that thread hand-offs cost more than they save; ``None`` leaves torch's setting.
    """

    def __init__(
        self, *, seed: int = 0, max_threads: int | str = 1, torch_threads: int | None = 1
    ) -> None:
        from treegram import BatchGrammarMatcher, GrammarCompiler

        self.tokenizer = ByteTokenizer()
        self.info = self.tokenizer.tokenizer_info()
        self.compiler = GrammarCompiler(self.info)
        self.model = TinyCausalLM(TinyLMConfig.for_tokenizer(self.tokenizer, seed=seed))
        self.batch = BatchGrammarMatcher(max_threads=max_threads)
        self.torch_threads = torch_threads

    def close(self) -> None:
        """Release the batch matcher's worker pool."""
        self.batch.close()

    def __enter__(self) -> DemoEngine:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def compile(self, request: DemoRequest):
        """The compiled grammar of ``request`` (compact JSON layout: ``", "`` and ``": "``)."""
        from treegram import Grammar

        if request.schema is None:
            return self.compiler.compile_builtin_json_grammar()
        return self.compiler.compile_grammar(
            Grammar.from_json_schema(request.schema, any_whitespace=False)
        )

    def _prompt_ids(self, request: DemoRequest) -> list[int]:
        ids = self.tokenizer.encode(request.prompt)
        return ids if ids else self.tokenizer.encode("\n")

    def _result(
        self, request: DemoRequest, ids: list[int], matcher, lengths: list[int]
    ) -> RequestResult:
        return RequestResult(
            request, ids, self.tokenizer.decode(ids), matcher.is_terminated(), lengths
        )

    # ------------------------------------------------------------------ speculative

    def speculative(
        self,
        requests: Sequence[DemoRequest],
        *,
        max_tokens: int = 256,
        tree_nodes: int = 16,
        drafter: NGramDrafter | None = None,
        forced_budget: int = 0,
    ) -> DemoReport:
        """Decode a batch with draft trees, grammar masks and greedy tree verification.

        Parameters
        ----------
        requests : sequence of DemoRequest
        max_tokens : int, default 256
            Most tokens generated per request.
        tree_nodes : int, default 16
            Nodes per draft tree (root included): ``N`` of the ``[B, N]`` tree arrays.
        drafter : NGramDrafter, optional
            Default: ``NGramDrafter(max_nodes=tree_nodes)``.
        forced_budget : int, default 0
            Grammar-forced nodes appended to each tree
            (:func:`treegram.matcher.extend_draft_trees`, which also fills every node's mask
            in place of the traversal); 0 turns it off.

        Returns
        -------
        DemoReport
        """
        with _torch_threads(self.torch_threads):
            return self._speculative(requests, max_tokens, tree_nodes, drafter, forced_budget)

    def _speculative(
        self,
        requests: Sequence[DemoRequest],
        max_tokens: int,
        tree_nodes: int,
        drafter: NGramDrafter | None,
        forced_budget: int = 0,
    ) -> DemoReport:
        import torch

        from treegram import GrammarMatcher, allocate_token_bitmask
        from treegram.matcher import extend_draft_trees
        from treegram.serving import apply_token_bitmask_inplace
        from treegram.spec import depths_from_parents, links_from_parents, tree_mask_from_parents

        if max_tokens < 1 or tree_nodes < 1:
            raise ValueError("max_tokens and tree_nodes must be >= 1")
        if forced_budget < 0:
            raise ValueError("forced_budget must be >= 0")
        drafter = drafter or NGramDrafter(max_nodes=tree_nodes)
        if drafter.max_nodes > tree_nodes:
            raise ValueError(
                f"the drafter proposes up to {drafter.max_nodes} nodes, more than "
                f"tree_nodes={tree_nodes}"
            )
        n, vocab = tree_nodes, self.info.vocab_size
        stops = set(self.info.stop_token_ids)
        timings = Timings()
        matchers = [GrammarMatcher(self.compile(r)) for r in requests]
        prompts = [self._prompt_ids(r) for r in requests]
        cache = KVCache(
            self.model.config, len(requests), max(map(len, prompts), default=1) + max_tokens + 1
        )
        t0 = time.perf_counter()
        with torch.inference_mode():
            for row, ids in enumerate(prompts):  # prefill all but the last prompt token
                if len(ids) > 1:
                    _, k, v = self.model.forward(
                        torch.as_tensor(ids[:-1])[None],
                        torch.arange(len(ids) - 1)[None],
                        torch.ones(len(ids) - 1, len(ids) - 1, dtype=torch.bool).tril()[None],
                    )
                    cache.append(row, k[:, 0], v[:, 0])
        timings.model += time.perf_counter() - t0
        history = [list(p) for p in prompts]
        generated: list[list[int]] = [[] for _ in requests]
        lengths: list[list[int]] = [[] for _ in requests]
        bitmask = allocate_token_bitmask(len(requests) * (n + forced_budget), vocab)
        active = list(range(len(requests)))
        steps = 0
        while active:
            steps += 1
            nb = len(active)
            t0 = time.perf_counter()
            draft = np.zeros((nb, n), dtype=np.int64)
            parents = np.full((nb, n), -1, dtype=np.int64)  # padding nodes: unreachable roots
            for i, row in enumerate(active):
                toks, pars = drafter.propose(history[row])
                draft[i, : len(toks)] = toks
                parents[i, : len(pars)] = pars
            next_token, next_sibling = links_from_parents(parents)
            t1 = time.perf_counter()
            if forced_budget:
                # one call: forced nodes below every effective leaf, and every node's mask
                rows = bitmask[: nb * (n + forced_budget)]
                ext = extend_draft_trees(
                    [matchers[r] for r in active],
                    next_token,
                    next_sibling,
                    draft,
                    budget=forced_budget,
                    token_bitmask=rows,
                    batch=self.batch,
                )
                draft, parents = ext.draft_tokens, ext.parents
                next_token, next_sibling = ext.next_token, ext.next_sibling
            else:
                rows = bitmask[: nb * n]
                self.batch.batch_traverse_draft_tree(
                    [matchers[r] for r in active], next_token, next_sibling, draft, rows
                )
            width = draft.shape[1]
            t2 = time.perf_counter()
            with torch.inference_mode():
                positions = cache.lengths[active][:, None] + depths_from_parents(parents)
                logits, k_new, v_new = self.model.forward(
                    torch.as_tensor(draft),
                    torch.as_tensor(positions),
                    torch.as_tensor(tree_mask_from_parents(parents)),
                    past=cache.past(active),
                )
                logits = logits.reshape(nb * width, vocab).float()
            t3 = time.perf_counter()
            apply_token_bitmask_inplace(logits, rows)
            t4 = time.perf_counter()
            choice = logits.argmax(dim=-1).view(nb, width).numpy()
            accepted: list[tuple[int, list[int], list[int]]] = []
            for i, row in enumerate(active):
                budget = max_tokens - len(generated[row])
                path, out, node = [0], [], 0
                while True:
                    tok = int(choice[i, node])
                    out.append(tok)
                    if tok in stops or len(out) >= budget:
                        break
                    node = _first_child_with(next_token[i], next_sibling[i], draft[i], node, tok)
                    if node < 0:
                        break  # tok is the bonus token
                    path.append(node)
                accepted.append((i, path, out))
            t5 = time.perf_counter()
            for i, _path, out in accepted:
                matcher = matchers[active[i]]
                for tok in out:
                    if not matcher.accept_token(tok):  # pragma: no cover - a masking bug
                        raise RuntimeError(f"the grammar rejected verified token {tok}")
            t6 = time.perf_counter()
            still = []
            for i, path, out in accepted:
                row = active[i]
                idx = torch.as_tensor(path)
                cache.append(row, k_new[:, i][:, :, idx], v_new[:, i][:, :, idx])
                history[row].extend(out)
                generated[row].extend(out)
                lengths[row].append(len(out))
                if not matchers[row].is_terminated() and len(generated[row]) < max_tokens:
                    still.append(row)
            active = still
            t7 = time.perf_counter()
            timings.draft += t1 - t0
            timings.traverse += t2 - t1
            timings.model += t3 - t2 + t7 - t6
            timings.apply += t4 - t3
            timings.verify += t5 - t4
            timings.advance += t6 - t5
        results = [
            self._result(r, generated[i], matchers[i], lengths[i]) for i, r in enumerate(requests)
        ]
        return DemoReport(results, steps, timings)

    # ------------------------------------------------------------------ reference

    def greedy(
        self, requests: Sequence[DemoRequest], *, max_tokens: int = 256
    ) -> list[RequestResult]:
        """Plain constrained greedy decoding: one token per step, full causal pass, no cache.

        Parameters
        ----------
        requests : sequence of DemoRequest
        max_tokens : int, default 256

        Returns
        -------
        list of RequestResult
        """
        with _torch_threads(self.torch_threads):
            return self._greedy(requests, max_tokens)

    def _greedy(self, requests: Sequence[DemoRequest], max_tokens: int) -> list[RequestResult]:
        import torch

        from treegram import GrammarMatcher, allocate_token_bitmask
        from treegram.serving import apply_token_bitmask_inplace

        results = []
        bitmask = allocate_token_bitmask(1, self.info.vocab_size)
        for request in requests:
            matcher = GrammarMatcher(self.compile(request))
            ids = self._prompt_ids(request)
            out: list[int] = []
            while len(out) < max_tokens and not matcher.is_terminated():
                matcher.fill_next_token_bitmask(bitmask)
                with torch.inference_mode():
                    logits = self.model.causal_logits(ids)[-1:].float()
                apply_token_bitmask_inplace(logits, bitmask)
                tok = int(logits.argmax())
                if not matcher.accept_token(tok):  # pragma: no cover - a masking bug
                    raise RuntimeError(f"the grammar rejected allowed token {tok}")
                ids.append(tok)
                out.append(tok)
            results.append(self._result(request, out, matcher, [1] * len(out)))
        return results
