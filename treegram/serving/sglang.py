"""treegram inside SGLang 0.5.23: grammar objects, the grammar backend, the drop-in for
its speculative tree masks, and the plug-in that loads them in every scheduler process.

- :class:`SGLangGrammar` has every method and attribute SGLang calls and reads on its
  grammar objects, :class:`SGLangGrammarBackend` the whole ``BaseGrammarBackend`` contract;
  with SGLang imported (as it always is when SGLang calls them) they are subclasses of
  ``BaseGrammarObject`` / ``BaseGrammarBackend`` of
  ``sglang.srt.constrained.base_grammar_backend``, an invalid grammar gives SGLang's
  ``InvalidGrammarObject`` and grammar objects carry its ``GrammarStats``.
- :func:`generate_token_bitmask` replaces ``sglang.srt.speculative.spec_utils.
  generate_token_bitmask`` (the EAGLE and NGRAM workers' tree masks): every request whose
  grammar is treegram's gets its rows from one batched traversal per step, the others
  SGLang's own walk.
- :func:`plugin` is the ``sglang.srt.plugins`` entry point (SGLang's plug-in group, run
  in every scheduler process it spawns); ``TREEGRAM_SGLANG=1`` switches it on.

See docs/adapters.md. Nothing here imports SGLang at import time; torch is needed only by
the methods that allocate, move or apply masks.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from treegram.compiler import CompiledGrammar, GrammarCompiler
from treegram.errors import ArgumentError, GrammarError
from treegram.matcher import (
    BatchGrammarMatcher,
    GrammarMatcher,
    allocate_token_bitmask,
    as_bitmask_array,
    check_row_index,
    forced_chain,
)
from treegram.serving._adapters import (
    _SGLANG_MODULE,
    TokenRejectedError,
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
from treegram.serving._apply import apply_token_bitmask_inplace

__all__ = [
    "TokenRejectedError",
    "SGLangInvalidGrammar",
    "SGLangGrammar",
    "SGLangGrammarBackend",
]

logger = logging.getLogger(__name__)


class SGLangInvalidGrammar:
    """What :class:`SGLangGrammarBackend` returns for a grammar that does not compile when
    SGLang is not imported (with SGLang imported it is SGLang's own
    ``InvalidGrammarObject``, which its ``GrammarManager`` turns into an aborted request).

    Attributes
    ----------
    error_message : str
        Why the grammar was rejected.
    """

    def __init__(self, error_message: str = "Unknown grammar error") -> None:
        self.error_message = error_message
        self.grammar_stats = None
        self.current_token = None
        self.finished = False

    def copy(self) -> SGLangInvalidGrammar:
        """Itself (it has no state)."""
        return self

    def maybe_init_reasoning(self, reasoning: bool) -> None:
        """Nothing to initialise."""

    def __repr__(self) -> str:
        return f"SGLangInvalidGrammar(error_message={self.error_message!r})"


def _sglang_invalid(message: str) -> Any:
    mod = _engine_module(_SGLANG_MODULE)
    if mod is not None and hasattr(mod, "InvalidGrammarObject"):
        return mod.InvalidGrammarObject(message)
    return SGLangInvalidGrammar(message)


def _sglang_stats(dispatch_type: str) -> Any:
    """SGLang's ``GrammarStats`` for a new grammar object (None without SGLang, as its
    base class has)."""
    mod = _engine_module(_SGLANG_MODULE)
    stats = getattr(mod, "GrammarStats", None) if mod is not None else None
    return None if stats is None else stats(dispatch_type=dispatch_type)


def _set_token_filter(
    vocab_mask: Any,
    token_ids: Sequence[int],
    batch_idx: int,
    is_allowed: bool = True,
    reset_vocab_mask: bool = True,
) -> None:
    """SGLang's token filter on a CPU mask row: with ``reset_vocab_mask`` the row first
    allows nothing (``is_allowed``) or everything; then the bits of ``token_ids`` are set
    (``is_allowed``) or cleared."""
    arr = as_bitmask_array(vocab_mask, vocab_size=32 * vocab_mask.shape[-1], name="vocab_mask")
    r = check_row_index(batch_idx, arr.shape[0], "batch_idx")
    row = arr[r].view(np.uint32)
    if reset_vocab_mask:
        row[:] = np.uint32(0) if is_allowed else np.uint32(0xFFFFFFFF)
    ids = np.asarray(list(token_ids), dtype=np.int64)
    if ids.size == 0:
        return
    if ids.min() < 0 or ids.max() >= 32 * row.shape[0]:
        raise ArgumentError(f"token_ids must lie in [0, {32 * row.shape[0]}), got {ids.tolist()}")
    bits = np.zeros(row.shape[0], dtype=np.uint32)
    np.bitwise_or.at(bits, ids // 32, np.left_shift(np.uint32(1), (ids % 32).astype(np.uint32)))
    if is_allowed:
        row |= bits
    else:
        row &= ~bits


class SGLangGrammar:
    """A treegram matcher behind SGLang's ``BaseGrammarObject`` interface.

    With SGLang imported, instances are also ``BaseGrammarObject`` instances (see the
    module docstring).

    Parameters
    ----------
    matcher : GrammarMatcher
        The request's matcher (its state is the grammar's state).
    vocab_size : int
        The model's vocabulary size (width of the masks SGLang allocates).
    ctx : CompiledGrammar, optional
        The compiled grammar, needed by :meth:`copy` (default: the matcher's).
    override_stop_tokens : int or list of int, optional
        Stop tokens given to the matchers :meth:`copy` creates.
    key_string : str, optional
        The grammar cache key SGLang keeps with the object (stored, not used).
    grammar_stats : optional
        SGLang's ``GrammarStats`` of this grammar (its scheduler records compile time,
        cache hits and tree-traversal times in it), or None.

    Attributes
    ----------
    matcher, vocab_size, ctx, override_stop_tokens, key_string, grammar_stats
        As given.
    accepted_tokens : list of int
        Every token accepted and not rolled back, in order (as SGLang's xgrammar object
        keeps it for debugging).
    current_token : int or None
        The last token passed to :meth:`accept_token` (None before the first); SGLang's
        disaggregated decode reads it to skip re-accepting a retracted request's token.
    finished : bool
        Set by the engine when the request finished (SGLang's scheduler writes it); not
        read by the grammar itself.

    Notes
    -----
    Contract: :meth:`accept_token` raises :class:`TokenRejectedError` (a ``ValueError``)
    for a token the grammar rejects and leaves the state unchanged; after termination it
    ignores tokens, as SGLang's xgrammar object does. One object serves one request; it is
    not safe to use from two threads at once. Mask filling releases the GIL.
    """

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        return object.__new__(_engine_class(cls, _SGLANG_MODULE, "BaseGrammarObject"))

    def __init__(
        self,
        matcher: GrammarMatcher,
        vocab_size: int,
        ctx: CompiledGrammar | None = None,
        override_stop_tokens: int | list[int] | None = None,
        key_string: str | None = None,
        grammar_stats: Any = None,
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
        self.override_stop_tokens = override_stop_tokens
        self.key_string = key_string
        self.grammar_stats = grammar_stats
        self.current_token: int | None = None
        self.accepted_tokens: list[int] = []
        self._finished = False

    @classmethod
    def from_compiled(
        cls,
        compiled: CompiledGrammar,
        vocab_size: int | None = None,
        *,
        override_stop_tokens: int | list[int] | None = None,
        key_string: str | None = None,
        grammar_stats: Any = None,
    ) -> SGLangGrammar:
        """A grammar object with a fresh matcher on ``compiled``.

        ``vocab_size`` defaults to the compiled grammar's tokenizer vocabulary size.
        """
        matcher = GrammarMatcher(compiled, **_stop_kwargs(override_stop_tokens))
        if vocab_size is None:
            vocab_size = compiled.tokenizer_info.vocab_size
        return cls(matcher, vocab_size, compiled, override_stop_tokens, key_string, grammar_stats)

    # -------------------------------------------------------------------- flags
    @property
    def finished(self) -> bool:
        """Whether the engine marked the request finished."""
        return self._finished

    @finished.setter
    def finished(self, finished: bool) -> None:
        self._finished = bool(finished)

    def maybe_init_reasoning(self, reasoning: bool) -> None:
        """Called by SGLang on every cache hit; a plain grammar has no reasoning state
        (SGLang's ``ReasonerGrammarBackend`` wraps the object for that)."""

    # --------------------------------------------------------------- state
    def accept_token(self, token: int) -> None:
        """Advance by one sampled (or verified) token.

        Ignored once the grammar has terminated.

        Raises
        ------
        TokenRejectedError
            The grammar rejects ``token`` (state unchanged).
        InvalidTokenIdError
            ``token`` is not an id in the tokenizer's vocabulary.
        """
        if self.matcher.is_terminated():
            return
        token = int(token)
        self.current_token = token
        if not self.matcher.accept_token(token):
            raise TokenRejectedError(
                f"token {token} is not accepted by the grammar after "
                f"{len(self.accepted_tokens)} tokens (last: {self.accepted_tokens[-8:]})"
            )
        self.accepted_tokens.append(token)

    def rollback(self, k: int) -> None:
        """Undo the last ``k`` accepted tokens (speculative tokens the verifier rejected).

        Raises
        ------
        ArgumentError
            ``k`` is not an int >= 0.
        MatcherStateError
            Fewer than ``k`` tokens were accepted.
        """
        self.matcher.rollback(k)
        if k:
            del self.accepted_tokens[-k:]

    def is_terminated(self) -> bool:
        """Whether the grammar accepted a stop token (generation must end)."""
        return self.matcher.is_terminated()

    def copy(self) -> SGLangGrammar:
        """A new grammar object for the same compiled grammar, in its *initial* state.

        SGLang keeps one object per grammar key in its cache and calls ``copy()`` to get a
        request's own object, so, like SGLang's xgrammar object, this does not copy the
        parse state (use :meth:`fork` for that). The copy's ``grammar_stats`` is a copy
        marked as a cache hit with no traversal times, as SGLang's xgrammar object does.
        """
        stats = self.grammar_stats
        if stats is not None and dataclasses.is_dataclass(stats) and not isinstance(stats, type):
            stats = dataclasses.replace(stats, is_cache_hit=True, tree_traversal_time=[])
        twin = type(self).from_compiled(
            self.ctx,
            self.vocab_size,
            override_stop_tokens=self.override_stop_tokens,
            key_string=self.key_string,
            grammar_stats=stats,
        )
        twin.forced_drafts = self.forced_drafts
        return twin

    def fork(self) -> SGLangGrammar:
        """An independent copy of this object, parse state and accepted tokens included."""
        twin = type(self)(
            self.matcher.fork(),
            self.vocab_size,
            self.ctx,
            self.override_stop_tokens,
            self.key_string,
            self.grammar_stats,
        )
        twin.accepted_tokens = list(self.accepted_tokens)
        twin.current_token = self.current_token
        twin._finished = self._finished
        twin.forced_drafts = self.forced_drafts
        return twin

    # ---------------------------------------------------------------- masks
    @staticmethod
    def allocate_vocab_mask(vocab_size: int, batch_size: int, device: Any) -> Any:
        """An int32 bitmask ``(batch_size, ceil(vocab_size / 32))`` on the CPU, all -1
        (every token allowed: SGLang leaves the rows of unconstrained, finished and
        terminated requests as allocated).

        ``device`` is accepted for the interface and ignored: masks are filled on the host
        and moved with :meth:`move_vocab_mask`.
        """
        return allocate_token_bitmask(batch_size, vocab_size)

    def fill_vocab_mask(self, vocab_mask: Any, idx: int) -> None:
        """Write this request's allowed-token mask into row ``idx`` of ``vocab_mask``.

        After termination the row allows only the stop tokens.
        """
        _fill_row(self.matcher, vocab_mask, idx)

    @staticmethod
    def fill_vocab_mask_batched(entries: Sequence[Any], vocab_mask: Any) -> None:
        """Fill the listed rows, leaving the other rows as they are.

        ``entries`` are SGLang's ``GrammarRow(row, grammar)`` pairs (any objects with
        ``row`` and ``grammar`` attributes); this is what SGLang's sampler calls every
        decode step.
        """
        for entry in entries:
            entry.grammar.fill_vocab_mask(vocab_mask, entry.row)

    @staticmethod
    def reset_vocab_mask(vocab_mask: Any) -> None:
        """Make every row of a reused mask allow every token (all -1)."""
        vocab_mask.fill_(-1) if hasattr(vocab_mask, "fill_") else vocab_mask.fill(-1)

    @staticmethod
    def move_vocab_mask(vocab_mask: Any, device: Any) -> Any:
        """``vocab_mask`` on ``device`` (an asynchronous copy from pinned memory)."""
        return vocab_mask.to(device, non_blocking=True)

    @staticmethod
    def apply_vocab_mask(logits: Any, vocab_mask: Any) -> None:
        """Set the logits of disallowed tokens to ``-inf`` in place (one row per request);
        see :func:`treegram.serving.apply_token_bitmask_inplace`."""
        apply_token_bitmask_inplace(logits, vocab_mask)

    # --------------------------------------------------------- jump forward
    def try_jump_forward(self, tokenizer: Any) -> tuple[list[int], str] | None:
        """The forced continuation, if any: ``([], s)`` where ``s`` is the longest string
        every continuation of the grammar starts with, else None.

        The token list is empty: SGLang appends ``s`` to the output text and re-tokenizes
        it (see :meth:`jump_and_retokenize`); ``tokenizer`` is not needed for that.
        """
        s = self.matcher.find_jump_forward_string()
        return ([], s) if s else None

    def jump_forward_str_state(self, helper: tuple[list[int], str]) -> tuple[str, int]:
        """``(jump string, next state)`` for :meth:`try_jump_forward`'s result; the state is
        always -1 (the matcher keeps its own state)."""
        _, s = helper
        return s, -1

    def jump_and_retokenize(
        self, old_output_ids: Sequence[int], new_output_ids: Sequence[int], next_state: int
    ) -> None:
        """Move the matcher from the tokens ``old_output_ids`` ended with to the
        re-tokenized ``new_output_ids`` (old text + jump string).

        The common prefix of the two lists is kept; the rest of the old tokens is rolled
        back and the rest of the new ones accepted. ``next_state`` is ignored.

        Raises
        ------
        TokenRejectedError
            A new token is rejected; the matcher is restored to its state before the call.
        """
        old = [int(t) for t in old_output_ids]
        new = [int(t) for t in new_output_ids]
        k = 0
        while k < min(len(old), len(new)) and old[k] == new[k]:
            k += 1
        dropped = old[k:]
        self.rollback(len(dropped))
        for j, token in enumerate(new[k:]):
            if not self.matcher.accept_token(token):
                self.rollback(j)
                for t in dropped:
                    self.matcher.accept_token(t)
                self.accepted_tokens.extend(dropped)
                raise TokenRejectedError(
                    f"re-tokenized output: token {token} (position {k + j}) is not accepted"
                )
            self.accepted_tokens.append(token)

    # ---------------------------------------------------- forced draft nodes
    forced_drafts: int = 0
    """Default ``max_tokens`` of :meth:`forced_draft_tokens` (0: off); set by
    ``SGLangGrammarBackend(forced_drafts=...)``."""

    def forced_draft_tokens(self, max_tokens: int | None = None) -> list[int]:
        """Grammar-forced draft tokens from the current state (at most ``max_tokens``,
        default :attr:`forced_drafts`): put them below the draft tree's leaves, or use them
        as the whole draft when there is no draft model (see
        :func:`treegram.matcher.forced_chain`; batches: ``extend_draft_trees``). Empty after
        termination. The state is unchanged."""
        n = self.forced_drafts if max_tokens is None else max_tokens
        if self.matcher.is_terminated():
            return []
        return forced_chain(self.matcher, n)


def _sglang_structural_tag(key_string: str) -> dict[str, Any]:
    """A structural tag request as SGLang 0.5.23's xgrammar backend reads it: the legacy
    ``{"structures", "triggers", "at_least_one"}`` form becomes triggered tags (a structure
    whose ``schema`` is null or missing takes ``{}``; ``at_least_one`` is kept), and in the
    format form a ``json_schema`` / ``qwen_xml_parameter`` content without a
    ``json_schema`` takes ``{}``, at any depth."""
    try:
        value = json.loads(key_string)
    except json.JSONDecodeError as exc:
        raise ArgumentError(f"a structural tag request must be JSON: {exc}") from None
    if not isinstance(value, dict):
        raise ArgumentError(f"a structural tag request must be a JSON object, got {value!r}")
    if value.get("structures") is not None:
        structures, triggers = value["structures"], value.get("triggers")
        if not isinstance(structures, list) or not all(isinstance(x, dict) for x in structures):
            raise ArgumentError("structural tag 'structures' must be a list of objects")
        if triggers is None:
            raise ArgumentError("a structural tag with 'structures' needs 'triggers'")
        try:
            tags = [
                {
                    "type": "tag",
                    "begin": x["begin"],
                    "content": {
                        "type": "json_schema",
                        "json_schema": {} if x.get("schema") is None else x["schema"],
                    },
                    "end": x["end"],
                }
                for x in structures
            ]
        except KeyError as exc:
            raise ArgumentError(f"structural tag structure without {exc.args[0]!r}") from None
        return {
            "type": "structural_tag",
            "format": {
                "type": "triggered_tags",
                "triggers": triggers,
                "tags": tags,
                "at_least_one": value.get("at_least_one", False),
            },
        }
    if value.get("format") is None:
        raise ArgumentError("a structural tag request needs 'format' or 'structures'")
    _fill_missing_schemas(value["format"])
    return value


def _fill_missing_schemas(fmt: Any) -> None:
    """SGLang's ``_sanitize_structural_format``: ``json_schema: {}`` where a schema
    content has none, through tags, sequences, alternatives and tag lists."""
    if not isinstance(fmt, dict):
        return
    kind = fmt.get("type")
    if kind in ("json_schema", "qwen_xml_parameter") and fmt.get("json_schema") is None:
        fmt["json_schema"] = {}
    if kind == "tag":
        _fill_missing_schemas(fmt.get("content"))
    elif kind in ("sequence", "or"):
        for element in fmt.get("elements", ()):
            _fill_missing_schemas(element)
    elif kind in ("triggered_tags", "tags_with_separator"):
        for tag in fmt.get("tags", ()):
            _fill_missing_schemas(tag)


class SGLangGrammarBackend:
    """An SGLang grammar backend over a GrammarCompiler.

    It has the whole contract of SGLang 0.5.23's ``BaseGrammarBackend`` that its
    ``GrammarManager``, sampler, speculative workers and ``ReasonerGrammarBackend`` use:
    the ``dispatch_*`` factories, the grammar cache (``get_request_grammar_key``,
    ``get_cached_or_future_value``, ``set_cache``, ``reset``), the compile executor, the
    mask helpers and the token filter of strict thinking. With SGLang imported, instances
    are ``BaseGrammarBackend`` instances.

    Every ``dispatch_*`` returns an :class:`SGLangGrammar` in its initial state, or, for a
    grammar that does not compile, SGLang's ``InvalidGrammarObject`` carrying the error
    (:class:`SGLangInvalidGrammar` without SGLang): SGLang then aborts that request.

    Parameters
    ----------
    compiler : GrammarCompiler
        Shared by every request (thread-safe, caches compiled grammars).
    vocab_size : int, optional
        The model's vocabulary size (default: the tokenizer's).
    override_stop_tokens : int or list of int, optional
        Stop tokens for every matcher instead of the tokenizer's.
    forced_drafts : int, default 0
        Grammar-forced draft tokens each grammar object proposes
        (:meth:`SGLangGrammar.forced_draft_tokens`); 0 turns them off.
    any_whitespace : bool, default True
        JSON Schema grammars allow any whitespace between tokens; False is SGLang's
        ``--constrained-json-disable-any-whitespace`` (xgrammar's compact layout).
    max_whitespace_cnt : int, optional
        At most this many whitespace characters in a row in JSON Schema grammars
        (``--constrained-json-max-whitespace-cnt``).
    unsupported : "error", "warn" or collection of str, default "error"
        ``compile_json_schema``'s option for JSON Schema requests: ``"warn"`` (or the
        keywords named) serves a schema treegram cannot compile exactly by widening each
        unsupported keyword to the language without it, with a ``UserWarning`` naming the
        keyword and its pointer; ``"error"`` gives SGLang the refusal (the request fails).
    """

    _enable_strict_thinking: bool = False

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        return object.__new__(_engine_class(cls, _SGLANG_MODULE, "BaseGrammarBackend"))

    def __init__(
        self,
        compiler: GrammarCompiler,
        vocab_size: int | None = None,
        *,
        override_stop_tokens: int | list[int] | None = None,
        forced_drafts: int = 0,
        any_whitespace: bool = True,
        max_whitespace_cnt: int | None = None,
        unsupported: str | Sequence[str] | frozenset[str] = "error",
    ) -> None:
        self.grammar_compiler = compiler
        self.vocab_size = _backend_vocab_size(compiler, vocab_size)
        self.override_stop_tokens = override_stop_tokens
        self.forced_drafts = _forced_option(forced_drafts)
        if not isinstance(any_whitespace, bool):
            raise ArgumentError(f"any_whitespace must be a bool, got {any_whitespace!r}")
        if max_whitespace_cnt is not None and (
            not _is_int(max_whitespace_cnt) or max_whitespace_cnt < 1
        ):
            raise ArgumentError(
                f"max_whitespace_cnt must be None or an int >= 1, got {max_whitespace_cnt!r}"
            )
        self.any_whitespace = any_whitespace
        self.max_whitespace_cnt = max_whitespace_cnt
        self.unsupported = _unsupported_option(unsupported)
        self.cache: dict[tuple[str, str], Any] = {}
        self._executor: ThreadPoolExecutor | None = None
        self._executor_lock = threading.Lock()

    @property
    def executor(self) -> ThreadPoolExecutor:
        """The thread pool grammars compile on (made at first use)."""
        with self._executor_lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(thread_name_prefix="treegram-sglang")
            return self._executor

    # ------------------------------------------------------------ dispatch
    def _dispatch(self, kind: str, key_string: str) -> Any:
        try:
            if kind == "json":
                ctx = self._compile_json(key_string)
            elif kind == "structural_tag":
                ctx = _compile(self.grammar_compiler, kind, _sglang_structural_tag(key_string))
            else:
                ctx = _compile(self.grammar_compiler, kind, key_string)
        except (GrammarError, ArgumentError) as exc:
            logger.warning("invalid %s grammar %r: %s", kind, key_string[:200], exc)
            return _sglang_invalid(str(exc))
        return self._grammar(ctx, key_string, kind)

    def _compile_json(self, key_string: str) -> CompiledGrammar:
        if (
            not self.any_whitespace
            or self.max_whitespace_cnt is not None
            or self.unsupported != "error"
        ):
            return self.grammar_compiler.compile_json_schema(
                key_string,
                any_whitespace=self.any_whitespace,
                max_whitespace_cnt=self.max_whitespace_cnt,
                unsupported=self.unsupported,
            )
        return _compile(self.grammar_compiler, "json", key_string)

    def _grammar(self, ctx: CompiledGrammar, key_string: str, kind: str) -> SGLangGrammar:
        grammar = SGLangGrammar.from_compiled(
            ctx,
            self.vocab_size,
            override_stop_tokens=self.override_stop_tokens,
            key_string=key_string,
            grammar_stats=_sglang_stats(kind),
        )
        grammar.forced_drafts = self.forced_drafts
        return grammar

    def dispatch_json(self, key_string: str) -> Any:
        """A JSON Schema; ``"$$ANY$$"`` means any JSON (the built-in JSON grammar)."""
        if key_string == "$$ANY$$":
            ctx = self.grammar_compiler.compile_builtin_json_grammar()
            return self._grammar(ctx, key_string, "json")
        return self._dispatch("json", key_string)

    def dispatch_regex(self, key_string: str) -> Any:
        """A regular expression (whole-output match)."""
        return self._dispatch("regex", key_string)

    def dispatch_ebnf(self, key_string: str) -> Any:
        """An EBNF grammar (xgrammar's dialect, root rule ``root``)."""
        return self._dispatch("ebnf", key_string)

    def dispatch_structural_tag(self, key_string: str) -> Any:
        """A structural tag (tool calls in free text): xgrammar's ``{"type":
        "structural_tag", "format": ...}`` or SGLang's ``{"structures": [...], "triggers":
        [...], "at_least_one": ...}``, read as SGLang's xgrammar backend reads them (a
        missing schema is ``{}``)."""
        return self._dispatch("structural_tag", key_string)

    def dispatch_fallback(self, key_type: str, key_string: str) -> Any:
        """An unknown grammar kind (SGLang never sends one).

        Raises
        ------
        ArgumentError
            Always (a ``ValueError``, as SGLang's base class raises).
        """
        raise ArgumentError(f"unknown grammar key type {key_type!r} for {key_string[:200]!r}")

    def _init_value_dispatch(self, key: tuple[str, str], require_reasoning: bool) -> Any:
        """Compile the grammar of cache key ``key`` (runs on :attr:`executor`); records
        the compile time in the object's ``grammar_stats``."""
        start = time.perf_counter()
        key_type, key_string = key
        if key_type == "json":
            grammar = self.dispatch_json(key_string)
        elif key_type == "regex":
            grammar = self.dispatch_regex(key_string)
        elif key_type in ("ebnf", "full_assistant_ebnf"):
            grammar = self.dispatch_ebnf(key_string)
        elif key_type == "structural_tag":
            grammar = self.dispatch_structural_tag(key_string)
        else:
            grammar = self.dispatch_fallback(key_type, key_string)
        stats = getattr(grammar, "grammar_stats", None)
        if stats is not None:
            stats.compilation_time = time.perf_counter() - start
        return grammar

    # --------------------------------------------------------------- cache
    def get_request_grammar_key(
        self,
        key: tuple[str, str],
        *,
        input_ids: Sequence[int],
        thinking_budget: int | None,
    ) -> tuple[str, str]:
        """The cache key of a request's grammar: ``key`` itself (a plain backend's grammar
        does not depend on the prompt or the thinking budget)."""
        return key

    def get_cached_or_future_value(
        self, key: tuple[str, str], require_reasoning: bool
    ) -> tuple[Any, bool]:
        """``(a copy of the cached object, True)`` on a cache hit (reasoning state
        initialised), else ``(a Future of the compiled object, False)``."""
        value = self.cache.get(key)
        if value is not None:
            copied = value.copy()
            copied.maybe_init_reasoning(require_reasoning)
            return copied, True
        return self.executor.submit(self._init_value_dispatch, key, require_reasoning), False

    def set_cache(self, key: tuple[str, str], value: Any) -> None:
        """Keep ``value`` (a compiled object or an invalid-grammar object) for ``key``."""
        self.cache[key] = value

    def reset(self) -> None:
        """Drop the cached objects and the compiler's cached grammars."""
        self.cache.clear()
        self.grammar_compiler.clear_cache()

    # ------------------------------------------------- reasoning and masks
    @property
    def enable_strict_thinking(self) -> bool:
        """False: strict thinking is configured on SGLang's ``ReasonerGrammarBackend``."""
        return self._enable_strict_thinking

    def reserve_framing_tokens(self, token_ids: Sequence[int]) -> None:
        """Nothing to do: treegram grammars do not embed framing tokens (see
        :meth:`compile_framed_grammar`)."""

    def compile_framed_grammar(self, grammar: Any, frame: Any) -> None:
        """None: answer framing is not built; SGLang then wraps the plain grammar in its
        reasoning object."""
        return None

    def init_strict_reasoning_grammar(self, reasoning: bool) -> None:
        """None (SGLang's default for a backend that is not a reasoner)."""
        return None

    def initialize_vocab_mask_buffer(
        self, name: str, vocab_size: int, max_rows: int, device: Any
    ) -> None:
        """None: masks are allocated per step (SGLang's default)."""
        return None

    @property
    def is_support_token_filter(self) -> bool:
        """True: :meth:`set_token_filter` works on the CPU masks this backend allocates."""
        return True

    @staticmethod
    def set_token_filter(
        vocab_mask: Any,
        token_ids: Sequence[int],
        batch_idx: int,
        is_allowed: bool = True,
        reset_vocab_mask: bool = True,
    ) -> None:
        """Allow (``is_allowed``) or forbid ``token_ids`` in row ``batch_idx``; with
        ``reset_vocab_mask`` the row first allows nothing, or everything. Used by SGLang's
        strict thinking and thinking budget."""
        _set_token_filter(vocab_mask, token_ids, batch_idx, is_allowed, reset_vocab_mask)

    allocate_vocab_mask = staticmethod(SGLangGrammar.allocate_vocab_mask)
    move_vocab_mask = staticmethod(SGLangGrammar.move_vocab_mask)
    apply_vocab_mask = staticmethod(SGLangGrammar.apply_vocab_mask)


# ------------------------------------------------------------ the tree-mask drop-in
_SPEC_UTILS = "sglang.srt.speculative.spec_utils"
_REASONER_MODULE = "sglang.srt.constrained.reasoner_grammar_backend"

_batcher_lock = threading.Lock()
_batcher: BatchGrammarMatcher | None = None


def _batch_matcher() -> BatchGrammarMatcher:
    """The drop-in's BatchGrammarMatcher (one per process, made at first use; its pool
    serves every step)."""
    global _batcher
    with _batcher_lock:
        if _batcher is None:
            _batcher = BatchGrammarMatcher(max_threads="auto")
        return _batcher


def _tree_grammar(grammar: Any) -> SGLangGrammar | None:
    """The treegram grammar whose walk ``grammar``'s tree walk is, or None (SGLang walks
    it itself): an :class:`SGLangGrammar`, or SGLang's ``ReasonerGrammarObject`` around
    one once its reasoning has ended (every call it then makes goes to the inner grammar,
    and its own counters end where they started). A matcher made with
    ``terminate_without_stop_token`` ends without a stop token, which the batched walk
    does not model: SGLang walks those."""
    if isinstance(grammar, SGLangGrammar):
        inner = grammar
    else:
        reasoner = _engine_module(_REASONER_MODULE)
        cls = getattr(reasoner, "ReasonerGrammarObject", None) if reasoner else None
        if (
            cls is None
            or not isinstance(grammar, cls)
            or not isinstance(grammar.grammar, SGLangGrammar)
            or grammar.reasoning_in_grammar
            or grammar.tokens_after_end < 0
        ):
            return None
        inner = grammar.grammar
    if inner.matcher.terminates_without_stop_token:
        return None
    return inner


def generate_token_bitmask(
    reqs: Sequence[Any],
    retrieve_next_token_cpu: Any,
    retrieve_next_sibling_cpu: Any,
    draft_tokens_cpu: Any,
    vocab_size: int,
) -> tuple[Any, Any]:
    """SGLang's ``spec_utils.generate_token_bitmask`` with one batched call per step.

    The same arguments and result as SGLang 0.5.23's function (the EAGLE and NGRAM
    workers call it through ``build_grammar_vocab_mask``): the draft-tree masks of every
    request with a grammar, in one CPU bitmask of ``B * N`` rows allocated by the first
    grammar (all -1), row ``i * N + j`` for node ``j`` of request ``i``, and the last
    request's grammar object. Requests whose grammar is treegram's (:func:`_tree_grammar`)
    are traversed together by one
    :meth:`~treegram.BatchGrammarMatcher.batch_traverse_draft_tree` call
    (``unfilled_rows=-1``: the rows SGLang's walk leaves as allocated stay all -1, and each
    grammar's ``current_token`` ends as that walk leaves it); the others, and every
    request of a step whose batched call fails, are walked by SGLang's own
    ``traverse_tree``. A failure leaves every matcher as it was and is logged once.
    """
    spec_utils = _engine_module(_SPEC_UTILS)
    if spec_utils is None:  # pragma: no cover - SGLang calls this from that module
        raise ArgumentError("generate_token_bitmask needs SGLang (sglang.srt.speculative)")
    n = int(draft_tokens_cpu.shape[-1])
    if len(reqs) != retrieve_next_token_cpu.shape[0]:
        raise ArgumentError(
            f"{len(reqs)} requests for {retrieve_next_token_cpu.shape[0]} draft trees"
        )
    mask = grammar = None
    batched: list[int] = []
    inner: list[SGLangGrammar] = []
    walked: list[int] = []
    for i, req in enumerate(reqs):
        g = req.grammar
        if g is None:
            continue
        if mask is None:
            mask = g.allocate_vocab_mask(
                vocab_size=vocab_size, batch_size=draft_tokens_cpu.numel(), device="cpu"
            )
        grammar = g
        tree_grammar = _tree_grammar(g)
        if tree_grammar is None:
            walked.append(i)
        else:
            batched.append(i)
            inner.append(tree_grammar)
    if batched:
        walked += _traverse_batched(
            reqs,
            batched,
            inner,
            retrieve_next_token_cpu,
            retrieve_next_sibling_cpu,
            draft_tokens_cpu,
            mask,
            n,
            spec_utils,
        )
    for i in sorted(walked):
        _sglang_walk(
            spec_utils,
            reqs[i].grammar,
            i,
            n,
            retrieve_next_token_cpu,
            retrieve_next_sibling_cpu,
            draft_tokens_cpu,
            mask,
            vocab_size,
        )
    return mask, grammar


def _sglang_walk(
    spec_utils, grammar, i, n, next_token, next_sibling, draft, mask, vocab_size
) -> None:
    """One request through SGLang's own ``traverse_tree``, timed and warned about as
    SGLang's loop does."""
    start = time.perf_counter()
    spec_utils.traverse_tree(
        next_token[i],
        next_sibling[i],
        draft[i],
        grammar,
        mask[i * n : (i + 1) * n],
        vocab_size=vocab_size,
    )
    elapsed = time.perf_counter() - start
    if elapsed > spec_utils.TREE_TRAVERSE_TIME_THRESHOLD:
        spec_utils.logger.warning(
            f"Bit mask generation took {elapsed} seconds with grammar: {grammar}"
        )


def _traverse_batched(
    reqs, batched, inner, next_token, next_sibling, draft, mask, n, spec_utils
) -> list[int]:
    """Fill the rows of the ``batched`` requests with one traversal; returns the requests
    SGLang must walk itself (all of them when the call fails, the incomplete ones)."""
    matchers = [g.matcher for g in inner]
    b = len(reqs)
    full = len(batched) == b
    if not full:  # other positions hold a batched matcher; only `indices` are walked
        filler = matchers[0]
        every = [filler] * b
        for k, i in enumerate(batched):
            every[i] = matchers[k]
        matchers = every
    last = np.empty(len(batched), dtype=np.int64)
    start = time.perf_counter()
    try:
        done = _batch_matcher().batch_traverse_draft_tree(
            matchers,
            next_token,
            next_sibling,
            draft,
            mask,
            indices=None if full else np.asarray(batched, dtype=np.int64),
            unfilled_rows=-1,
            last_nodes=last,
        )
    except Exception as exc:  # the engine's own walk takes over; every matcher unchanged
        _log_once(
            "sglang-batch",
            "batched draft-tree masks failed (%s: %s); SGLang walks the trees of this step itself",
            type(exc).__name__,
            exc,
        )
        for i in batched:
            mask[i * n : (i + 1) * n].fill_(-1)
        return list(batched)
    elapsed = time.perf_counter() - start
    if elapsed > spec_utils.TREE_TRAVERSE_TIME_THRESHOLD:
        spec_utils.logger.warning(
            f"Bit mask generation took {elapsed} seconds for {len(batched)} grammars"
        )
    draft_np = draft.numpy() if hasattr(draft, "numpy") else np.asarray(draft)
    rows = np.asarray(batched, dtype=np.int64)
    accepted = np.flatnonzero(last >= 0)
    tokens = draft_np[rows[accepted], last[accepted]].tolist()
    for k, token in zip(accepted.tolist(), tokens, strict=True):
        g = reqs[batched[k]].grammar
        g.current_token = token  # where SGLang's walk leaves it (wrapper and inner)
        inner[k].current_token = token
    retry = [batched[k] for k, ok in enumerate(done) if not ok]
    for i in retry:
        mask[i * n : (i + 1) * n].fill_(-1)
    return retry


# ------------------------------------------------------------- plugging in
_BASE_MODULE = _SGLANG_MODULE
_SWITCH = "TREEGRAM_SGLANG"
_installed: dict[str, Any] = {}  # what install() replaced, for uninstall()
_install_lock = threading.Lock()
_NOT_REGISTERED = object()


def backend_factory(
    server_args: Any, tokenizer: Any, vocab_size: int, eos_token_ids: Any = None
) -> Any:
    """The grammar backend SGLang's ``create_grammar_backend`` gets from the registry:
    treegram's, built as SGLang builds its xgrammar backend from the server's options.

    The vocabulary is the tokenizer's at the model's ``vocab_size``, stopped by the
    model's ``eos_token_ids``; the JSON whitespace options come from the server's
    ``--constrained-json-disable-any-whitespace`` / ``--constrained-json-max-whitespace-cnt``.
    With ``--reasoning-parser`` the backend is wrapped in SGLang's
    ``ReasonerGrammarBackend`` (strict thinking from ``--enable-strict-thinking``) exactly
    when SGLang would wrap its own: when the parser's reasoning terminator encodes to
    token ids (a registered backend is otherwise returned unwrapped, and the factory gets
    no terminator ids: it asks the parser, as SGLang's scheduler does).
    """
    from sglang.srt.runtime_context import get_serving

    from treegram.tokenizer import TokenizerInfo

    serving = get_serving()
    info = TokenizerInfo.from_huggingface(
        tokenizer,
        vocab_size=vocab_size,
        stop_token_ids=sorted(eos_token_ids) if eos_token_ids else None,
    )
    backend: Any = SGLangGrammarBackend(
        # the kernels load (or compile) on a daemon thread while the server starts
        GrammarCompiler(info, warm_up="background"),
        vocab_size,
        any_whitespace=not serving.constrained_json_disable_any_whitespace,
        max_whitespace_cnt=serving.constrained_json_max_whitespace_cnt,
    )
    if serving.reasoning_parser:
        from sglang.srt.constrained.reasoner_grammar_backend import ReasonerGrammarBackend
        from sglang.srt.parser.reasoning_parser import ReasoningParser

        parser = ReasoningParser(
            model_type=serving.reasoning_parser, stream_reasoning=False, tokenizer=tokenizer
        )
        if parser.detector.get_think_end_token_ids(tokenizer):
            backend = ReasonerGrammarBackend(
                backend,
                parser,
                tokenizer,
                enable_strict_thinking=serving.enable_strict_thinking,
            )
    return backend


def install(*, name: str = "xgrammar") -> None:
    """Plug treegram into SGLang in this process: register :func:`backend_factory` as
    grammar backend ``name`` (the default replaces SGLang's xgrammar backend, SGLang's
    default ``--grammar-backend``; a registered name wins over SGLang's own of that name)
    and put :func:`generate_token_bitmask` in place of SGLang's. Idempotent; undone by
    :func:`uninstall`. Imports SGLang.

    In a server, set ``TREEGRAM_SGLANG=1`` instead: SGLang runs :func:`plugin` in every
    scheduler process it starts.
    """
    import importlib

    base = importlib.import_module(_BASE_MODULE)
    spec_utils = importlib.import_module(_SPEC_UTILS)
    with _install_lock:
        if "name" in _installed:
            if _installed["name"] == name:
                return
            _uninstall_locked()
        registry = base.GRAMMAR_BACKEND_REGISTRY
        _installed["registered"] = registry.get(name, _NOT_REGISTERED)
        _installed["generate_token_bitmask"] = spec_utils.generate_token_bitmask
        base.register_grammar_backend(name, backend_factory)
        setattr(spec_utils, "generate_token_bitmask", generate_token_bitmask)  # noqa: B010
        _installed["name"] = name


def uninstall() -> None:
    """Undo :func:`install`: SGLang's registry entry and ``generate_token_bitmask`` are
    what they were before (a no-op when not installed)."""
    with _install_lock:
        _uninstall_locked()


def _uninstall_locked() -> None:
    if "name" not in _installed:
        return
    base = _engine_module(_BASE_MODULE)
    spec_utils = _engine_module(_SPEC_UTILS)
    name = _installed.pop("name")
    previous = _installed.pop("registered")
    original = _installed.pop("generate_token_bitmask")
    if base is not None:
        if previous is _NOT_REGISTERED:
            base.GRAMMAR_BACKEND_REGISTRY.pop(name, None)
        else:
            base.GRAMMAR_BACKEND_REGISTRY[name] = previous
    if spec_utils is not None and spec_utils.generate_token_bitmask is generate_token_bitmask:
        spec_utils.generate_token_bitmask = original


def installed() -> bool:
    """Whether :func:`install` is in effect in this process."""
    return "name" in _installed


def plugin() -> None:
    """SGLang's general plug-in entry point (group ``sglang.srt.plugins``, name
    ``treegram``): SGLang calls it at the start of every scheduler process, including
    the ones it starts with ``spawn``. It installs treegram (:func:`install`) when the
    environment variable ``TREEGRAM_SGLANG`` is 1 (or true, yes, on) and does nothing
    otherwise, so installing the package changes no server by itself."""
    if _switched_on(_SWITCH):
        install()
