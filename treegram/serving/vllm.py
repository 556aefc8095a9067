"""treegram inside vLLM 0.33.0 (v1 structured output): the grammar object, the backend,
the drop-ins for the structured-output manager's per-step mask loop, and the plug-in that
loads them in every process vLLM starts.

- :class:`VLLMGrammar` implements ``StructuredOutputGrammar`` and :class:`VLLMBackend`
  ``StructuredOutputBackend`` (subclasses of vLLM's own when
  ``vllm.v1.structured_output.backend_types`` is imported, as it always is when vLLM
  calls them); :meth:`VLLMBackend.from_vllm` has the constructor signature vLLM calls its
  backends with.
- :func:`grammar_bitmask` replaces ``StructuredOutputManager.grammar_bitmask``: the rows of
  every request whose grammar is treegram's come from one batched chain call per step,
  the others from vLLM's own loop.
- :func:`plugin` is the ``vllm.general_plugins`` entry point (run in every process vLLM
  starts); ``TREEGRAM_VLLM=1`` switches it on.

See docs/adapters.md. Nothing here imports vLLM at import time.
"""

from __future__ import annotations

import json
import logging
import re
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from treegram.compiler import CompiledGrammar, GrammarCompiler
from treegram.errors import ArgumentError
from treegram.kernels import rows as _rows
from treegram.matcher import (
    BatchGrammarMatcher,
    GrammarMatcher,
    allocate_token_bitmask,
    forced_chain,
)
from treegram.serving._adapters import (
    _VLLM_MODULE,
    _backend_vocab_size,
    _compile,
    _engine_class,
    _engine_module,
    _fill_row,
    _forced_option,
    _is_int,
    _log_once,
    _stop_kwargs,
    _switched_on,
    _unsupported_option,
)

__all__ = ["VLLMGrammar", "VLLMBackend"]

logger = logging.getLogger(__name__)


class VLLMGrammar:
    """A treegram matcher behind vLLM's ``StructuredOutputGrammar`` interface.

    With vLLM imported, instances are ``StructuredOutputGrammar`` instances (see the
    module docstring).

    Parameters
    ----------
    matcher : GrammarMatcher
        The request's matcher.
    vocab_size : int
        The model's vocabulary size.
    ctx : CompiledGrammar, optional
        The compiled grammar (default: the matcher's).

    Attributes
    ----------
    matcher, vocab_size, ctx
        As given.
    num_processed_tokens : int
        Tokens accepted and not rolled back (vLLM keeps this counter).

    Notes
    -----
    Contract (vLLM 0.33.0's, as its xgrammar grammar implements it):
    :meth:`accept_tokens` accepts the tokens in order and returns False at the first one
    the grammar rejects (or that lies outside the tokenizer's vocabulary), keeping the
    tokens before it; once the grammar has terminated, further tokens (in the same call
    or later ones) are ignored and the call returns True, so a request that samples on
    past its stop token (``ignore_eos``) is not failed. :meth:`validate_tokens` never
    changes the state. One object serves one request; it is not safe to use from two
    threads at once.
    """

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        return object.__new__(_engine_class(cls, _VLLM_MODULE, "StructuredOutputGrammar"))

    def __init__(
        self, matcher: GrammarMatcher, vocab_size: int, ctx: CompiledGrammar | None = None
    ) -> None:
        if not isinstance(matcher, GrammarMatcher):
            raise ArgumentError(
                f"matcher must be a treegram.GrammarMatcher, got {type(matcher).__name__}"
            )
        if not _is_int(vocab_size) or vocab_size <= 0:
            raise ArgumentError(f"vocab_size must be a positive int, got {vocab_size!r}")
        self.matcher = matcher
        self.vocab_size = int(vocab_size)
        self.ctx = matcher.compiled_grammar if ctx is None else ctx
        self.num_processed_tokens = 0
        self._tokenizer_vocab = matcher.compiled_grammar.tokenizer_info.vocab_size
        self._stops = frozenset(matcher.stop_token_ids)

    def accept_tokens(self, request_id: str, tokens: Sequence[int]) -> bool:
        """Accept ``tokens`` in order (the tokens the step committed for ``request_id``).

        Returns
        -------
        bool
            False if a token is rejected or outside the tokenizer's vocabulary (the
            tokens before it stay accepted); True otherwise. Tokens after termination
            are ignored.
        """
        matcher = self.matcher
        if matcher.is_terminated():
            return True
        # without terminate_without_stop_token only a stop token ends the grammar
        by_stop = not matcher.terminates_without_stop_token
        vocab, stops = self._tokenizer_vocab, self._stops
        for token in tokens:
            token = int(token)
            if not 0 <= token < vocab or not matcher.accept_token(token):
                logger.debug("request %s: grammar rejected token %d", request_id, token)
                return False
            self.num_processed_tokens += 1
            if (token in stops) if by_stop else matcher.is_terminated():
                break
        return True

    def validate_tokens(self, tokens: Sequence[int]) -> list[int]:
        """The longest prefix of ``tokens`` the grammar accepts in a row, ending at the
        first stop token (vLLM trims draft tokens with it before scoring them). Empty once
        terminated. The state is unchanged.

        With :attr:`forced_drafts` on, the drafts the grammar rejects are replaced by the
        grammar-forced tokens after the valid prefix (:meth:`extend_draft`), never more
        tokens than were given: vLLM's scheduler then scores forced drafts in their place
        (its slots still fit, and its ``grammar_bitmask`` walks them like any draft).
        """
        valid = self._valid_prefix(tokens)
        if (
            self.forced_drafts
            and len(valid) < len(tokens)
            and not (valid and valid[-1] in self._stops)
            and not self.matcher.is_terminated()
        ):
            return self.extend_draft(valid)[: len(tokens)]
        return valid

    def _valid_prefix(self, tokens: Sequence[int]) -> list[int]:
        matcher = self.matcher
        if matcher.is_terminated():
            return []
        vocab, stops = self._tokenizer_vocab, self._stops
        by_stop = not matcher.terminates_without_stop_token
        valid: list[int] = []
        try:
            for t in tokens:
                t = int(t)
                if not 0 <= t < vocab or not matcher.accept_token(t):
                    break
                valid.append(t)
                if (t in stops) if by_stop else matcher.is_terminated():
                    break
        finally:
            if valid:
                matcher.rollback(len(valid))
        return valid

    def rollback(self, num_tokens: int) -> None:
        """Undo the last ``num_tokens`` accepted tokens (termination included).

        Raises
        ------
        ArgumentError
            ``num_tokens`` is not an int >= 0.
        MatcherStateError
            Fewer than ``num_tokens`` tokens were accepted.
        """
        self.matcher.rollback(num_tokens)
        self.num_processed_tokens -= num_tokens

    def fill_bitmask(self, bitmask: Any, idx: int) -> None:
        """Write the allowed-token mask into row ``idx`` of ``bitmask`` (int32, CPU); after
        termination the row allows only the stop tokens."""
        _fill_row(self.matcher, bitmask, idx)

    def is_terminated(self) -> bool:
        """Whether the grammar accepted a stop token."""
        return self.matcher.is_terminated()

    def reset(self) -> None:
        """Back to the initial state."""
        self.num_processed_tokens = 0
        self.matcher.reset()

    forced_drafts: int = 0
    """Default ``max_tokens`` of :meth:`extend_draft` (0: off); set by
    ``VLLMBackend(forced_drafts=...)``."""

    def extend_draft(self, tokens: Sequence[int] = (), max_tokens: int | None = None) -> list[int]:
        """A chain draft (e.g. vLLM's n-gram proposal) cut to its grammar-valid prefix
        (:meth:`validate_tokens`) and followed by up to ``max_tokens`` (default
        :attr:`forced_drafts`) grammar-forced tokens from the end of that prefix
        (:func:`treegram.matcher.forced_chain`). With no tokens it is the forced chain
        alone, for requests the proposer has nothing for. The state is unchanged."""
        n = self.forced_drafts if max_tokens is None else max_tokens
        if self.matcher.is_terminated():
            return []
        valid = self._valid_prefix(tokens)
        for t in valid:
            self.matcher.accept_token(t)
        try:
            if self.matcher.is_terminated():
                return valid
            return valid + forced_chain(self.matcher, n)
        finally:
            if valid:
                self.matcher.rollback(len(valid))


def _request_kind(request_type: Any) -> str:
    """``StructuredOutputOptions.JSON`` (or ``"json"``, any case) -> ``"json"``."""
    name = getattr(request_type, "name", request_type)
    if not isinstance(name, str):
        raise ArgumentError(
            "request_type must be a StructuredOutputOptions member or its name, got "
            f"{request_type!r}"
        )
    return name.lower()


def _grammar_is_lark(text: Any) -> bool:
    """Whether a vLLM ``GRAMMAR`` request is Lark rather than EBNF, by vLLM 0.33.0's rule
    (``grammar_is_likely_lark``): non-empty text with no line, once ``#`` and ``//``
    comments are cut off, that contains ``::=``."""
    if not text or not isinstance(text, str):
        return False
    return not any("::=" in _LARK_COMMENT.sub("", line) for line in text.split("\n"))


_LARK_COMMENT = re.compile(r"(#|//).*$")


class VLLMBackend:
    """vLLM's ``StructuredOutputBackend`` over a GrammarCompiler.

    With vLLM imported, instances are ``StructuredOutputBackend`` instances.
    :meth:`from_vllm` has the constructor signature vLLM calls its backends with.

    Parameters
    ----------
    compiler : GrammarCompiler
        Shared by every request (thread-safe; vLLM compiles on a thread pool).
    vocab_size : int, optional
        The model's vocabulary size, the width of the bitmask (default: the tokenizer's).
    override_stop_tokens : int or list of int, optional
        Stop tokens for every matcher instead of the tokenizer's (a request's own
        ``stop_token_ids`` take precedence, as in vLLM).
    forced_drafts : int, default 0
        Grammar-forced tokens :meth:`VLLMGrammar.extend_draft` appends; 0 turns them off.
    disable_any_whitespace : bool, default False
        vLLM's ``structured_outputs_config.disable_any_whitespace``: JSON requests allow
        no whitespace outside strings (separators ``","`` and ``":"``).
    unsupported : "error", "warn" or collection of str, default "error"
        ``compile_json_schema``'s option for ``JSON`` requests: ``"warn"`` (or the keywords
        named) serves a schema treegram cannot compile exactly by widening each
        unsupported keyword to the language without it, with a ``UserWarning`` naming the
        keyword and its pointer; ``"error"`` raises the refusal to vLLM.
    full_vocab_compiler : GrammarCompiler, optional
        The compiler of ``STRUCTURAL_TAG`` and Lark ``GRAMMAR`` requests (default:
        ``compiler``). vLLM's xgrammar backend compiles those against the whole vocabulary,
        special tokens included (a tool-call tag may be one), and the other requests
        against the vocabulary without them; :meth:`from_vllm` builds both.
    vllm_config, tokenizer : optional
        Kept as the attributes of the same names vLLM's backends have.
    """

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        return object.__new__(_engine_class(cls, _VLLM_MODULE, "StructuredOutputBackend"))

    def __init__(
        self,
        compiler: GrammarCompiler,
        vocab_size: int | None = None,
        *,
        override_stop_tokens: int | list[int] | None = None,
        forced_drafts: int = 0,
        disable_any_whitespace: bool = False,
        unsupported: str | Sequence[str] | frozenset[str] = "error",
        full_vocab_compiler: GrammarCompiler | None = None,
        vllm_config: Any = None,
        tokenizer: Any = None,
    ) -> None:
        if not isinstance(disable_any_whitespace, bool):
            raise ArgumentError(
                f"disable_any_whitespace must be a bool, got {disable_any_whitespace!r}"
            )
        if full_vocab_compiler is not None and not isinstance(full_vocab_compiler, GrammarCompiler):
            raise ArgumentError(
                "full_vocab_compiler must be a treegram.GrammarCompiler, got "
                f"{type(full_vocab_compiler).__name__}"
            )
        self.compiler = compiler
        self.vocab_size = _backend_vocab_size(compiler, vocab_size)
        self.full_vocab_compiler = compiler if full_vocab_compiler is None else full_vocab_compiler
        self.override_stop_tokens = override_stop_tokens
        self.forced_drafts = _forced_option(forced_drafts)
        self.disable_any_whitespace = disable_any_whitespace
        self.unsupported = _unsupported_option(unsupported)
        self.vllm_config = vllm_config
        self.tokenizer = tokenizer

    @classmethod
    def from_vllm(
        cls, vllm_config: Any, tokenizer: Any, vocab_size: int, **kwargs: Any
    ) -> VLLMBackend:
        """A backend built the way vLLM builds its own: ``VLLMBackend.from_vllm(
        vllm_config, tokenizer=..., vocab_size=...)``.

        Two compilers, as vLLM's xgrammar backend has: JSON, regex, EBNF and choice
        requests compile against the Hugging Face tokenizer's vocabulary without its
        special added tokens (``TokenizerInfo.from_huggingface(...,
        exclude_special_tokens=True)``: begin-of-sentence can never appear inside a JSON
        string), structural tags and Lark grammars against the whole vocabulary.
        ``disable_any_whitespace`` comes from ``vllm_config.structured_outputs_config``.
        Other keyword arguments go to the constructor.
        """
        from treegram.tokenizer import TokenizerInfo

        full = TokenizerInfo.from_huggingface(tokenizer, vocab_size=vocab_size)
        info = TokenizerInfo.from_huggingface(
            tokenizer, vocab_size=vocab_size, exclude_special_tokens=True
        )
        # One compiler when no token was excluded (a tokenizer without special tokens).
        full_compiler = None if full.decoded_vocab == info.decoded_vocab else GrammarCompiler(full)
        so_config = getattr(vllm_config, "structured_outputs_config", None)
        kwargs.setdefault(
            "disable_any_whitespace", bool(getattr(so_config, "disable_any_whitespace", False))
        )
        kwargs.setdefault("full_vocab_compiler", full_compiler)
        return cls(
            # the kernels load (or compile) on a daemon thread while the engine starts
            GrammarCompiler(info, warm_up="background"),
            vocab_size,
            vllm_config=vllm_config,
            tokenizer=tokenizer,
            **kwargs,
        )

    def compile_grammar(
        self,
        request_type: Any,
        grammar_spec: str,
        stop_token_ids: Any = None,
    ) -> VLLMGrammar:
        """Compile one request's grammar and return its grammar object.

        Parameters
        ----------
        request_type : StructuredOutputOptions member or str
            ``JSON`` (a JSON Schema; needs ``GrammarCompiler.compile_json_schema``),
            ``JSON_OBJECT`` (any JSON object; the schema ``{"type": "object"}`` where JSON
            Schema is supported, else the built-in JSON grammar, which also allows a
            top-level array), ``REGEX``, ``GRAMMAR`` (EBNF, or Lark when no line defines a
            rule with ``::=``, vLLM's rule), ``CHOICE`` (a JSON
            list of strings), ``STRUCTURAL_TAG`` (xgrammar's structural tag JSON, or the
            legacy ``{"structures": [...], "triggers": [...]}``). Matched by member name,
            case-insensitively. Lark grammars and structural tags compile with
            :attr:`full_vocab_compiler`, the others with :attr:`compiler`.
        grammar_spec : str
            The schema, pattern, grammar or choice list.
        stop_token_ids : set or list of int, optional
            The request's stop tokens (vLLM passes ``SamplingParams.all_stop_token_ids``):
            the grammar ends on these instead of the tokenizer's when non-empty.

        Raises
        ------
        ArgumentError
            Unsupported request type or a malformed choice list / structural tag request.
        GrammarError
            The grammar does not compile (a ``ValueError``).
        """
        kind = _request_kind(request_type)
        stops = self.override_stop_tokens
        if stop_token_ids:
            stops = sorted(int(t) for t in stop_token_ids)
        if kind in ("json", "json_object") and (
            self.disable_any_whitespace or self.unsupported != "error"
        ):
            schema = '{"type": "object"}' if kind == "json_object" else grammar_spec
            if not isinstance(schema, str):
                schema = json.dumps(schema)
            options: dict[str, Any] = {"unsupported": self.unsupported}
            if self.disable_any_whitespace:
                options.update(any_whitespace=False, separators=(",", ":"))
            ctx = self.compiler.compile_json_schema(schema, **options)
        elif kind == "grammar" and _grammar_is_lark(grammar_spec):
            ctx = self.full_vocab_compiler.compile_lark(grammar_spec)
        elif kind == "structural_tag":
            ctx = _compile(self.full_vocab_compiler, kind, grammar_spec)
        else:
            ctx = _compile(self.compiler, kind, grammar_spec)
        matcher = GrammarMatcher(ctx, **_stop_kwargs(stops))
        grammar = VLLMGrammar(matcher, self.vocab_size, ctx)
        grammar.forced_drafts = self.forced_drafts
        return grammar

    def allocate_token_bitmask(self, max_num_seqs: int) -> Any:
        """An int32 bitmask ``(max_num_seqs, ceil(vocab_size / 32))`` on the CPU, all -1
        (every token allowed)."""
        return allocate_token_bitmask(max_num_seqs, self.vocab_size)

    def destroy(self) -> None:
        """Drop the compilers' cached grammars."""
        self.compiler.clear_cache()
        self.full_vocab_compiler.clear_cache()


# ------------------------------------------------------------ the bitmask drop-ins
_SO_MODULE = "vllm.v1.structured_output"
_SO_UTILS = "vllm.v1.structured_output.utils"
_SWITCH = "TREEGRAM_VLLM"

_installed: dict[str, Any] = {}  # the engine's originals replaced by install()
_install_lock = threading.Lock()
_batcher_lock = threading.Lock()
_batcher: BatchGrammarMatcher | None = None
_siblings: dict[tuple[int, int], np.ndarray] = {}  # all -1 sibling links per shape


def _batch_matcher() -> BatchGrammarMatcher:
    """The drop-in's BatchGrammarMatcher (one per process, made at first use)."""
    global _batcher
    with _batcher_lock:
        if _batcher is None:
            _batcher = BatchGrammarMatcher(max_threads="auto")
        return _batcher


def _no_siblings(b: int, s: int) -> np.ndarray:
    """int64 [b, s] of -1 (chains have no siblings), made once per shape. Writable, though
    nothing writes it: the kernels are compiled for writable arrays, and a read-only one
    would be a second numba specialization of the traversal (tens of seconds of JIT at
    the first speculative step)."""
    arr = _siblings.get((b, s))
    if arr is None:
        arr = np.full((b, s), -1, dtype=np.int64)
        if len(_siblings) > 64:
            _siblings.clear()
        _siblings[(b, s)] = arr
    return arr


def _engine_original(name: str) -> Any:
    """The manager method ``name`` that :func:`install` replaced (vLLM's own); the class
    attribute itself when not installed (the drop-ins may be called directly)."""
    original = _installed.get(name)
    if original is None:
        so = _engine_module(_SO_MODULE)
        original = getattr(so.StructuredOutputManager, name)
        if original is _DROP_INS.get(name):  # pragma: no cover - installed elsewhere
            raise ArgumentError(f"vLLM's own StructuredOutputManager.{name} is unknown")
    return original


def _chain_grammar(manager: Any, request: Any, tokens: Sequence[int]) -> VLLMGrammar | None:
    """The treegram grammar of ``request`` when its rows can come from the batched chain
    walk: a :class:`VLLMGrammar` (not made with ``terminate_without_stop_token``)
    constrained from its first scheduled position (no reasoning still going on: vLLM's
    constraint bounds are (0, 0)), with no more draft tokens than a mask block holds."""
    so_req = request.structured_output_request
    grammar = so_req.grammar
    if not isinstance(grammar, VLLMGrammar) or grammar.matcher.terminates_without_stop_token:
        return None
    if not (manager.enable_in_reasoning or so_req.reasoning_ended or manager.reasoner_cls is None):
        strip = _engine_module(_SO_UTILS).strip_speculative_padding
        if tuple(manager._get_constraint_bounds(request, strip(list(tokens)))) != (0, 0):
            return None
    return grammar


def grammar_bitmask(
    self: Any,
    requests: dict[str, Any],
    structured_output_request_ids: list[str],
    scheduled_spec_decode_tokens: dict[str, list[int]],
) -> Any:
    """vLLM's ``StructuredOutputManager.grammar_bitmask`` with one batched call per step.

    Installed as the manager's method (``self`` is the manager). The result is vLLM
    0.33.0's: the manager's bitmask (allocated as vLLM allocates it) as a numpy array of
    ``len(structured_output_request_ids) * (1 + k)`` rows, ``k`` =
    ``num_speculative_tokens``, request ``p``'s block starting at row ``p * (1 + k)``: a
    row per scheduled draft position and one for the bonus token. Requests whose grammar
    is treegram's and constrained from the start (:func:`_chain_grammar`) get their rows
    from one :meth:`~treegram.BatchGrammarMatcher.batch_traverse_draft_tree` call over
    chains (``unfilled_rows=-1``), with vLLM's semantics: a terminated grammar's rows,
    and every row after a stop token or a ``-1`` padding draft, all -1; after a draft
    the grammar rejects (logged as vLLM logs it), the rows copy the last valid row; rows
    past a request's drafts left as they were. The other requests (no treegram grammar,
    reasoning not ended, a diffusion model) get vLLM's own loop, and so does the whole
    step if the batched call fails (every matcher as it was; logged once). Every grammar
    ends where it started.
    """
    original = _engine_original("grammar_bitmask")
    ids = structured_output_request_ids
    config = self.vllm_config
    if not ids or config.model_config.is_diffusion:
        return original(self, requests, ids, scheduled_spec_decode_tokens)
    k_max = config.num_speculative_tokens
    stride = k_max + 1
    positions: list[int] = []
    grammars: list[VLLMGrammar] = []
    drafts: list[Sequence[int]] = []
    others: list[int] = []
    for p, rid in enumerate(ids):
        request = requests[rid]
        tokens = scheduled_spec_decode_tokens.get(rid, ())
        grammar = _chain_grammar(self, request, tokens) if len(tokens) <= k_max else None
        if grammar is None:
            others.append(p)
        else:
            positions.append(p)
            grammars.append(grammar)
            drafts.append(tokens)
    if not positions:
        return original(self, requests, ids, scheduled_spec_decode_tokens)
    if self._grammar_bitmask is None:  # as vLLM allocates it
        self._grammar_bitmask = self.backend.allocate_token_bitmask(
            config.scheduler_config.max_num_seqs * stride
        )
    bitmask = self._grammar_bitmask
    rows = _rows_of(self, bitmask)
    theirs = _their_rows(self, original, requests, ids, others, scheduled_spec_decode_tokens)
    try:
        if len(positions) <= _SCALAR_MAX:  # a batched call's fixed cost is not worth it
            for p, g, d in zip(positions, grammars, drafts, strict=True):
                _chain_rows_scalar(ids, p, g, d, k_max, rows)
        else:
            _chain_rows(ids, positions, grammars, drafts, len(ids), k_max, bitmask, rows)
    except Exception as exc:  # vLLM's own loop for the whole step; matchers unchanged
        _log_once(
            "vllm-batch",
            "batched structured-output masks failed (%s: %s); vLLM fills this step's masks itself",
            type(exc).__name__,
            exc,
        )
        return original(self, requests, ids, scheduled_spec_decode_tokens)
    for start, block in theirs:
        rows[start : start + len(block)] = block
    num_masks = len(ids) * stride
    # vLLM returns ``bitmask[:num_masks].numpy()``: the same rows, as a numpy slice of the
    # kept view (slicing the tensor and converting it cost 2 us, a tenth of a step at batch 1)
    return rows[:num_masks] if num_masks < rows.shape[0] else rows


def _rows_of(manager: Any, bitmask: Any) -> np.ndarray:
    """The manager's bitmask as a numpy array, kept on the manager while it is the same
    tensor over the same memory and shape (``Tensor.numpy()`` costs about 0.8 us a step)."""
    if not hasattr(bitmask, "numpy"):
        return bitmask
    ptr, shape = bitmask.data_ptr(), bitmask.shape
    kept = getattr(manager, "_treegram_rows", None)
    if kept is not None and kept[0] is bitmask and kept[1] == ptr and kept[2] == shape:
        return kept[3]
    rows = bitmask.numpy()
    manager._treegram_rows = (bitmask, ptr, shape, rows)
    return rows


def _their_rows(manager, original, requests, ids, others, scheduled) -> list[tuple[int, Any]]:
    """vLLM's own rows for the requests at ``others``: its loop run on those alone (it
    writes from row 0), their used rows kept, and the rows it overwrote put back, so
    every other row stays as it was. Returns ``(first row, rows)`` per request."""
    if not others:
        return []
    stride = manager.vllm_config.num_speculative_tokens + 1
    rows = _rows_of(manager, manager._grammar_bitmask)
    subset = [ids[p] for p in others]
    span = len(subset) * stride
    saved = rows[:span].copy()
    original(manager, requests, subset, scheduled)
    blocks = []
    for j, p in enumerate(others):
        used = 1 + len(scheduled.get(ids[p], ()))
        blocks.append((p * stride, rows[j * stride : j * stride + used].copy()))
    rows[:span] = saved
    return blocks


_SCALAR_MAX = 2  # at most this many chains: the grammar calls one by one, no batch call


def _chain_rows_scalar(ids, p: int, grammar: VLLMGrammar, draft, k_max: int, rows) -> None:
    """:func:`_chain_rows` for one request, without the batch call's fixed cost: rows
    ``p * (1 + k_max) ..`` of ``rows`` (the numpy view of the manager's buffer, the same
    object every step) for the drafts and the bonus token, from one scalar traversal of
    the chain (:func:`_chain_by_traversal`; with no draft, the mask alone). The matcher
    ends where it started, also when this raises."""
    m = grammar.matcher
    base = p * (k_max + 1)
    end = base + len(draft) + 1
    if m.is_terminated():
        rows[base:end] = -1
        if draft and draft[0] != -1:
            _log_rejected(draft[0], ids[p])
        return
    _chain_by_traversal(ids, p, grammar, draft, base, end, rows)


def _chain_by_traversal(ids, p: int, grammar: VLLMGrammar, draft, base: int, end: int, rows):
    """:func:`_chain_rows_scalar`'s rows from one traversal of the chain (its drafts up to
    padding or a token outside the vocabulary), then vLLM's rows after a draft the grammar
    does not take (the draft at ``j`` was taken when row ``j`` allows it). One kernel call
    instead of a mask, an accept and a rollback per draft, on buffers the matcher checked
    at the first step (``GrammarMatcher._traverse_kept``)."""
    vocab, stops = grammar._tokenizer_vocab, grammar._stops
    n = 0
    for t in draft:
        if not 0 <= t < vocab:
            break
        n += 1
    next_token, next_sibling, tokens, out, words = _chain_buffers(rows, base, n)
    if n == 1:
        tokens[1] = draft[0]
    elif n:
        tokens[1 : n + 1] = draft[:n]
    grammar.matcher._traverse_kept(next_token, next_sibling, tokens, out)
    for j, t in enumerate(draft):
        row = base + j + 1
        if t == -1:  # padding: vLLM leaves the rest unconstrained
            rows[row:end] = -1
            return
        if j >= n or not (words[row - 1, t >> 5] >> (t & 31)) & 1:
            rows[row:end] = rows[row - 1]  # the last valid row, as vLLM copies it
            _log_rejected(t, ids[p])
            return
        if t in stops:  # terminated: the rest unconstrained; a further draft fails
            rows[row:end] = -1
            if j + 1 < len(draft) and draft[j + 1] != -1:
                _log_rejected(draft[j + 1], ids[p])
            return


_chains = threading.local()  # per thread: (rows, {(first row, drafts): buffers})


def _chain_buffers(rows: np.ndarray, base: int, n: int) -> tuple:
    """The traversal's buffers for a chain of ``n`` drafts whose rows start at ``base``
    of ``rows``: links, tokens (the caller writes them) and the rows' view, the same
    objects while ``rows`` is, so the matcher reuses its checks of them; and ``rows`` to
    read words from (a memoryview when ``rows`` is C-contiguous: a word read costs a
    fifth of numpy's)."""
    kept = getattr(_chains, "kept", None)
    if kept is None or kept[0] is not rows:
        views: dict[tuple[int, int], tuple] = {}
        words: np.ndarray | memoryview = rows
        if rows.flags.c_contiguous and rows.ndim == 2 and rows.dtype == np.int32:
            words = memoryview(rows)  # type: ignore[arg-type]  # numpy arrays are buffers
        kept = _chains.kept = (rows, views, words)
    views = kept[1]
    got = views.get((base, n))
    if got is None:
        if len(views) >= 512:
            views.clear()
        next_token = np.arange(1, n + 2, dtype=np.int64)
        next_token[n] = -1
        got = views[(base, n)] = (
            next_token,
            np.full(n + 1, -1, dtype=np.int64),
            np.zeros(n + 1, dtype=np.int64),
            rows[base : base + n + 1],
            kept[2],
        )
    return got


def _log_rejected(token: int, request_id: str) -> None:
    logger.error(
        "Unexpected: grammar terminated or rejected draft token %s for request %s during "
        "bitmask fill.",
        int(token),
        request_id,
    )


def _chain_rows(ids, positions, grammars, drafts, b, k_max, bitmask, rows) -> None:
    """The rows of the requests at ``positions`` (their grammars and draft tokens): one
    batched traversal of chains, then vLLM's rows after a draft the grammar does not take,
    with the rows past each request's drafts left as they were.

    Raises
    ------
    Exception
        Whatever the traversal raises; no matcher is changed then, and the rows it may
        have written are rewritten by the caller's fallback.
    """
    stride = k_max + 1
    k = len(positions)
    lens_list = [len(d) for d in drafts]
    lens = np.array(lens_list, dtype=np.int64)
    pos = np.array(positions, dtype=np.int64)
    if k == b and min(lens_list) == k_max:
        tokens = np.array(drafts, dtype=np.int64).reshape(b, k_max)
    else:
        tokens = np.full((b, k_max), -1, dtype=np.int64)
        for p, d in zip(positions, drafts, strict=True):
            if d:
                tokens[p, : len(d)] = d
    vocab = grammars[0].matcher.compiled_grammar.tokenizer_info.vocab_size
    next_token = np.empty((b, stride), dtype=np.int64)
    draft = np.empty((b, stride), dtype=np.int64)
    _rows.chain_trees(tokens, vocab, next_token, draft)
    # rows past a request's drafts are vLLM's to leave alone: kept aside, put back
    kept = None
    if min(lens_list) < k_max:
        nodes = np.arange(stride, dtype=np.int64)
        past = nodes[None, :] > lens[:, None]
        kept_rows = (pos[:, None] * stride + nodes[None, :])[past]
        kept = (kept_rows, rows[kept_rows])
    matchers = [g.matcher for g in grammars]
    if k < b:  # other positions hold a batched matcher; only `indices` are walked
        every = [matchers[0]] * b
        for p, m in zip(positions, matchers, strict=True):
            every[p] = m
        matchers = every
    last = np.empty(k, dtype=np.int64)
    try:
        done = _batch_matcher().batch_traverse_draft_tree(
            matchers,
            next_token,
            _no_siblings(b, stride),
            draft,
            bitmask,
            indices=None if k == b else pos,
            unfilled_rows=-1,
            last_nodes=last,
        )
    finally:
        if kept is not None:
            rows[kept[0]] = kept[1]
    if False in done:
        raise ArgumentError("a chain walk did not complete")
    failed_at = np.empty(k, dtype=np.int64)
    _rows.chain_rejections(tokens, pos, lens, last, rows, stride, failed_at)
    for j in np.flatnonzero(failed_at >= 0).tolist():
        p, c = positions[j], int(failed_at[j])
        _log_rejected(tokens[p, c], ids[p])


_DROP_INS = {"grammar_bitmask": grammar_bitmask}


# ------------------------------------------------------------- plugging in
def install() -> None:
    """Plug treegram into vLLM in this process: vLLM's ``xgrammar`` structured-output
    backend becomes :meth:`VLLMBackend.from_vllm`, and :func:`grammar_bitmask` replaces
    ``StructuredOutputManager.grammar_bitmask``. (The manager's per-request
    ``validate_tokens`` and ``accept_tokens`` stay vLLM's: the scheduler calls them once
    per request, and they reach :class:`VLLMGrammar`'s one-pass methods.) Idempotent;
    undone by :func:`uninstall`. Imports vLLM's structured-output module.

    vLLM runs its scheduler in a separate engine-core process by default: set
    ``TREEGRAM_VLLM=1`` instead, and vLLM runs :func:`plugin` in every process it starts.
    """
    import importlib

    so = importlib.import_module(_SO_MODULE)
    importlib.import_module(_SO_UTILS)
    with _install_lock:
        if _installed:
            return
        manager = so.StructuredOutputManager
        _installed["XgrammarBackend"] = so.XgrammarBackend
        for name, drop_in in _DROP_INS.items():
            _installed[name] = getattr(manager, name)
            setattr(manager, name, drop_in)
        setattr(so, "XgrammarBackend", VLLMBackend.from_vllm)  # noqa: B010


def uninstall() -> None:
    """Undo :func:`install` (a no-op when not installed)."""
    with _install_lock:
        if not _installed:
            return
        so = _engine_module(_SO_MODULE)
        if so is not None:
            so.XgrammarBackend = _installed["XgrammarBackend"]
            for name in _DROP_INS:
                setattr(so.StructuredOutputManager, name, _installed[name])
        _installed.clear()


def installed() -> bool:
    """Whether :func:`install` is in effect in this process."""
    return bool(_installed)


def plugin() -> None:
    """vLLM's general plug-in entry point (group ``vllm.general_plugins``, name
    ``treegram``): vLLM calls it in every process it starts (the API server, the engine
    core, the workers). It installs treegram (:func:`install`) when the environment
    variable ``TREEGRAM_VLLM`` is 1 (or true, yes, on) and does nothing otherwise, so
    installing the package changes no engine by itself."""
    if _switched_on(_SWITCH):
        install()
