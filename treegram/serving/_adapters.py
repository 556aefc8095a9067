"""Grammar objects with the method sets SGLang and vLLM call, backed by treegram.

Neither engine is a dependency. The classes implement every method and attribute SGLang
0.5.23 and vLLM 0.33.0 read on their grammar objects and backends, and they *become*
subclasses of the engine's own base classes when the engine is already imported in the
process (as it always is when the engine itself calls them; importing an engine costs
seconds, so an adapter never imports one):

- :class:`SGLangGrammar` is then a ``BaseGrammarObject`` and :class:`SGLangGrammarBackend`
  a ``BaseGrammarBackend`` of ``sglang.srt.constrained.base_grammar_backend``; an invalid
  grammar gives SGLang's ``InvalidGrammarObject`` and grammar objects carry its
  ``GrammarStats``.
- :class:`VLLMGrammar` is then a ``StructuredOutputGrammar`` and :class:`VLLMBackend` a
  ``StructuredOutputBackend`` of ``vllm.v1.structured_output.backend_types``.

See docs/adapters.md for how to plug them in. torch is needed only by the methods that
allocate, move or apply masks.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import re
import sys
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from treegram.compiler import CompiledGrammar, GrammarCompiler
from treegram.errors import ArgumentError, GrammarError, TreegramError
from treegram.frontends import downgraded_keywords
from treegram.matcher import (
    GrammarMatcher,
    allocate_token_bitmask,
    as_bitmask_array,
    check_row_index,
    forced_chain,
)
from treegram.serving._apply import apply_token_bitmask_inplace

__all__ = [
    "TokenRejectedError",
    "SGLangInvalidGrammar",
    "SGLangGrammar",
    "SGLangGrammarBackend",
    "VLLMGrammar",
    "VLLMBackend",
]

logger = logging.getLogger(__name__)


class TokenRejectedError(TreegramError, ValueError):
    """The grammar rejected a token an engine asked an adapter to accept.

    A ``ValueError``, which is what SGLang's decode and speculative-verify loops catch
    around ``grammar.accept_token``.
    """


def _is_int(value: Any) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def _fill_row(matcher: GrammarMatcher, bitmask: Any, idx: int) -> None:
    """Fill row ``idx`` with the matcher's mask; once it has terminated, allow only its stop
    tokens (a finished request may be scheduled for one more step; whatever it samples
    then is a stop token, which ends it again)."""
    if not matcher.is_terminated():
        matcher.fill_next_token_bitmask(bitmask, idx)
        return
    vocab = matcher.compiled_grammar.tokenizer_info.vocab_size
    arr = as_bitmask_array(bitmask, vocab_size=vocab, name="bitmask")
    r = check_row_index(idx, arr.shape[0], "idx")
    row = np.zeros(arr.shape[1], dtype=np.uint32)
    for t in matcher.stop_token_ids:
        row[t // 32] |= np.uint32(1) << np.uint32(t % 32)
    arr[r] = row.view(np.int32)


def _stop_kwargs(override_stop_tokens: Any) -> dict:
    return {} if override_stop_tokens is None else {"override_stop_tokens": override_stop_tokens}


# Where each engine defines the base classes the adapters join when it is imported.
_SGLANG_MODULE = "sglang.srt.constrained.base_grammar_backend"
_VLLM_MODULE = "vllm.v1.structured_output.backend_types"

_engine_classes: dict[tuple[type, type], type] = {}
_engine_classes_lock = threading.Lock()


def _engine_module(name: str) -> Any:
    """The engine module ``name`` if the process has imported it, else None."""
    return sys.modules.get(name)


def _engine_class(cls: type, module: str, base_name: str) -> type:
    """``cls``, or its subclass that also derives from the engine's ``base_name`` when the
    engine's ``module`` is imported (made once per pair and reused)."""
    mod = _engine_module(module)
    base = getattr(mod, base_name, None) if mod is not None else None
    if base is None or issubclass(cls, base):
        return cls
    with _engine_classes_lock:
        sub = _engine_classes.get((cls, base))
        if sub is None:
            namespace = {"__module__": cls.__module__, "__doc__": cls.__doc__}
            sub = type(cls.__name__, (cls, base), namespace)
            sub.__qualname__ = cls.__qualname__
            _engine_classes[(cls, base)] = sub
    return sub


# ------------------------------------------------------------------------------- SGLang


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


def _forced_option(value: Any) -> int:
    if not _is_int(value) or value < 0:
        raise ArgumentError(f"forced_drafts must be an int >= 0, got {value!r}")
    return int(value)


def _compile(compiler: GrammarCompiler, kind: str, spec: Any) -> CompiledGrammar:
    """Compile ``spec`` of request ``kind`` (json, json_object, regex, grammar/ebnf,
    choice) with ``compiler``."""
    if kind == "json":
        if not hasattr(compiler, "compile_json_schema"):
            raise ArgumentError(
                "JSON Schema requests need GrammarCompiler.compile_json_schema, which this "
                "treegram build does not have"
            )
        if not isinstance(spec, str):
            spec = json.dumps(spec)
        return compiler.compile_json_schema(spec)
    if kind == "json_object":
        if hasattr(compiler, "compile_json_schema"):
            return compiler.compile_json_schema('{"type": "object"}')
        return compiler.compile_builtin_json_grammar()
    if kind == "regex":
        return compiler.compile_regex(spec)
    if kind in ("grammar", "ebnf"):
        return compiler.compile_grammar(spec)
    if kind == "structural_tag":
        return _compile_structural_tag(compiler, spec)
    if kind == "choice":
        choices = json.loads(spec) if isinstance(spec, str) else spec
        if (
            not isinstance(choices, (list, tuple))
            or not choices
            or not all(isinstance(c, str) for c in choices)
        ):
            raise ArgumentError(f"a choice request needs a non-empty list of str, got {spec!r}")
        alts = " | ".join(json.dumps(c, ensure_ascii=False) for c in choices)
        return compiler.compile_grammar(f"root ::= {alts}")
    raise ArgumentError(
        f"request type {kind!r} is not supported (json, json_object, regex, grammar, choice, "
        "structural_tag)"
    )


def _compile_structural_tag(compiler: GrammarCompiler, spec: Any) -> CompiledGrammar:
    """A structural tag request: xgrammar's ``{"type": "structural_tag", "format": ...}``
    or the engines' legacy ``{"structures": [{"begin", "schema", "end"}...], "triggers":
    [...]}`` (what SGLang and vLLM send for tool calling), as JSON text or a dict."""
    if not hasattr(compiler, "compile_structural_tag"):
        raise ArgumentError("this treegram build has no GrammarCompiler.compile_structural_tag")
    value = spec
    if isinstance(spec, str):
        try:
            value = json.loads(spec)
        except json.JSONDecodeError as exc:
            raise ArgumentError(f"a structural tag request must be JSON: {exc}") from None
    if isinstance(value, dict) and "structures" in value:
        structures = value["structures"]
        if not isinstance(structures, list) or not all(isinstance(x, dict) for x in structures):
            raise ArgumentError("structural tag 'structures' must be a list of objects")
        return compiler.compile_structural_tag(structures, value.get("triggers"))
    return compiler.compile_structural_tag(value)


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


def _unsupported_option(unsupported: Any) -> str | frozenset[str]:
    """Check a backend's ``unsupported`` option (as ``compile_json_schema`` takes it)."""
    try:
        downgraded_keywords(unsupported)
    except GrammarError as exc:
        raise ArgumentError(str(exc)) from None
    return unsupported if isinstance(unsupported, str) else frozenset(unsupported)


def _backend_vocab_size(compiler, vocab_size: int | None) -> int:
    """Check an engine backend's compiler; its mask width (default: the tokenizer's)."""
    if not isinstance(compiler, GrammarCompiler):
        raise ArgumentError(
            f"compiler must be a treegram.GrammarCompiler, got {type(compiler).__name__}"
        )
    return compiler.tokenizer_info.vocab_size if vocab_size is None else int(vocab_size)


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


# --------------------------------------------------------------------------------- vLLM


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

    def accept_tokens(self, request_id: str, tokens: Sequence[int]) -> bool:
        """Accept ``tokens`` in order (the tokens the step committed for ``request_id``).

        Returns
        -------
        bool
            False if a token is rejected or outside the tokenizer's vocabulary (the
            tokens before it stay accepted); True otherwise. Tokens after termination
            are ignored.
        """
        if self.matcher.is_terminated():
            return True
        for token in tokens:
            token = int(token)
            if not 0 <= token < self._tokenizer_vocab or not self.matcher.accept_token(token):
                logger.debug("request %s: grammar rejected token %d", request_id, token)
                return False
            self.num_processed_tokens += 1
            if self.matcher.is_terminated():
                break
        return True

    def validate_tokens(self, tokens: Sequence[int]) -> list[int]:
        """The longest prefix of ``tokens`` the grammar accepts in a row, ending at the
        first stop token (vLLM trims draft tokens with it before scoring them). Empty once
        terminated. The state is unchanged."""
        tokens = [int(t) for t in tokens]
        limit = 0
        while limit < len(tokens) and 0 <= tokens[limit] < self._tokenizer_vocab:
            limit += 1
        if self.matcher.is_terminated() or limit == 0:
            return []
        n = self.matcher.count_acceptable_tokens(np.asarray(tokens[:limit], dtype=np.int64))
        stops = set(self.matcher.stop_token_ids)
        for i, t in enumerate(tokens[:n]):
            if t in stops:
                return tokens[: i + 1]
        return tokens[:n]

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
        valid = self.validate_tokens(tokens)
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
            GrammarCompiler(info),
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
