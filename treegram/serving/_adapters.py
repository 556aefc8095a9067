"""Grammar objects with the method sets SGLang and vLLM call, backed by treegram.

Neither engine is imported: the classes are duck-typed to the interfaces the engines call
on their grammar objects, so an engine (or a fork of one) can return them from its grammar
backend without treegram depending on it.

- :class:`SGLangGrammar` has the method set of SGLang's ``BaseGrammarObject`` as its
  xgrammar backend implements it (``accept_token``, ``rollback``, ``is_terminated``,
  ``copy``, ``allocate_vocab_mask``, ``fill_vocab_mask``, ``move_vocab_mask``,
  ``apply_vocab_mask``, the jump-forward trio and the ``finished`` flag);
  :class:`SGLangGrammarBackend` has its ``dispatch_*`` factory methods.
- :class:`VLLMGrammar` has the method set of vLLM's v1 ``StructuredOutputGrammar``
  (``accept_tokens``, ``validate_tokens``, ``rollback``, ``fill_bitmask``,
  ``is_terminated``, ``reset``); :class:`VLLMBackend` has the ``compile_grammar`` /
  ``allocate_token_bitmask`` / ``destroy`` methods of a ``StructuredOutputBackend``.

See docs/adapters.md for how to plug them in. torch is needed only by the methods that
allocate, move or apply masks.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import Any

import numpy as np

from treegram.compiler import CompiledGrammar, GrammarCompiler
from treegram.errors import ArgumentError, GrammarError, TreegramError
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


# ------------------------------------------------------------------------------- SGLang


class SGLangGrammar:
    """A treegram matcher behind SGLang's ``BaseGrammarObject`` interface.

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

    Attributes
    ----------
    matcher, vocab_size, ctx, override_stop_tokens, key_string
        As given.
    accepted_tokens : list of int
        Every token accepted and not rolled back, in order (as SGLang's xgrammar object
        keeps it for debugging).
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

    def __init__(
        self,
        matcher: GrammarMatcher,
        vocab_size: int,
        ctx: CompiledGrammar | None = None,
        override_stop_tokens: int | list[int] | None = None,
        key_string: str | None = None,
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
    ) -> SGLangGrammar:
        """A grammar object with a fresh matcher on ``compiled``.

        ``vocab_size`` defaults to the compiled grammar's tokenizer vocabulary size.
        """
        matcher = GrammarMatcher(compiled, **_stop_kwargs(override_stop_tokens))
        if vocab_size is None:
            vocab_size = compiled.tokenizer_info.vocab_size
        return cls(matcher, vocab_size, compiled, override_stop_tokens, key_string)

    # -------------------------------------------------------------------- flags
    @property
    def finished(self) -> bool:
        """Whether the engine marked the request finished."""
        return self._finished

    @finished.setter
    def finished(self, finished: bool) -> None:
        self._finished = bool(finished)

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
        parse state. Use :meth:`fork` for a copy of the current state.
        """
        twin = SGLangGrammar.from_compiled(
            self.ctx,
            self.vocab_size,
            override_stop_tokens=self.override_stop_tokens,
            key_string=self.key_string,
        )
        twin.forced_drafts = self.forced_drafts
        return twin

    def fork(self) -> SGLangGrammar:
        """An independent copy of this object, parse state and accepted tokens included."""
        twin = SGLangGrammar(
            self.matcher.fork(),
            self.vocab_size,
            self.ctx,
            self.override_stop_tokens,
            self.key_string,
        )
        twin.accepted_tokens = list(self.accepted_tokens)
        twin._finished = self._finished
        twin.forced_drafts = self.forced_drafts
        return twin

    # ---------------------------------------------------------------- masks
    def allocate_vocab_mask(self, vocab_size: int, batch_size: int, device: Any) -> Any:
        """A zeroed int32 bitmask ``(batch_size, ceil(vocab_size / 32))`` on the CPU.

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


def _backend_vocab_size(compiler, vocab_size: int | None) -> int:
    """Check an engine backend's compiler; its mask width (default: the tokenizer's)."""
    if not isinstance(compiler, GrammarCompiler):
        raise ArgumentError(
            f"compiler must be a treegram.GrammarCompiler, got {type(compiler).__name__}"
        )
    return compiler.tokenizer_info.vocab_size if vocab_size is None else int(vocab_size)


class SGLangGrammarBackend:
    """The ``dispatch_*`` methods of an SGLang grammar backend, over a GrammarCompiler.

    Each returns an :class:`SGLangGrammar` in its initial state, or None when the grammar
    is invalid (the error is logged), as SGLang's xgrammar backend did; SGLang caches the
    result per key and calls ``copy()`` per request.

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
    """

    def __init__(
        self,
        compiler: GrammarCompiler,
        vocab_size: int | None = None,
        *,
        override_stop_tokens: int | list[int] | None = None,
        forced_drafts: int = 0,
    ) -> None:
        self.grammar_compiler = compiler
        self.vocab_size = _backend_vocab_size(compiler, vocab_size)
        self.override_stop_tokens = override_stop_tokens
        self.forced_drafts = _forced_option(forced_drafts)

    def _dispatch(self, kind: str, key_string: str) -> SGLangGrammar | None:
        try:
            ctx = _compile(self.grammar_compiler, kind, key_string)
        except (GrammarError, ArgumentError) as exc:
            logger.warning("skip invalid %s grammar %r: %s", kind, key_string[:200], exc)
            return None
        return self._grammar(ctx, key_string)

    def _grammar(self, ctx: CompiledGrammar, key_string: str) -> SGLangGrammar:
        grammar = SGLangGrammar.from_compiled(
            ctx,
            self.vocab_size,
            override_stop_tokens=self.override_stop_tokens,
            key_string=key_string,
        )
        grammar.forced_drafts = self.forced_drafts
        return grammar

    def dispatch_json(self, key_string: str) -> SGLangGrammar | None:
        """A JSON Schema; ``"$$ANY$$"`` means any JSON (the built-in JSON grammar)."""
        if key_string == "$$ANY$$":
            ctx = self.grammar_compiler.compile_builtin_json_grammar()
            return self._grammar(ctx, key_string)
        return self._dispatch("json", key_string)

    def dispatch_regex(self, key_string: str) -> SGLangGrammar | None:
        """A regular expression (whole-output match)."""
        return self._dispatch("regex", key_string)

    def dispatch_ebnf(self, key_string: str) -> SGLangGrammar | None:
        """An EBNF grammar (xgrammar's dialect, root rule ``root``)."""
        return self._dispatch("ebnf", key_string)

    def dispatch_structural_tag(self, key_string: str) -> SGLangGrammar | None:
        """A structural tag (tool calls in free text): xgrammar's ``{"type":
        "structural_tag", "format": ...}`` or SGLang's ``{"structures": [...], "triggers":
        [...]}``."""
        return self._dispatch("structural_tag", key_string)

    def reset(self) -> None:
        """Drop the compiler's cached grammars."""
        self.grammar_compiler.clear_cache()


# --------------------------------------------------------------------------------- vLLM


class VLLMGrammar:
    """A treegram matcher behind vLLM's ``StructuredOutputGrammar`` interface.

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
    Contract: :meth:`accept_tokens` returns False, with the state unchanged, when any of
    the tokens is rejected or the grammar has terminated. (vLLM's xgrammar grammar keeps
    the tokens before a rejected one; all-or-nothing is stricter and leaves nothing to
    undo.) :meth:`validate_tokens` never changes the state. One object serves one request;
    it is not safe to use from two threads at once.
    """

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
            True if every token was accepted; False (state unchanged) if one is rejected,
            is outside the tokenizer's vocabulary, or the grammar already terminated.
        """
        if self.matcher.is_terminated():
            return False
        count = 0
        for token in tokens:
            token = int(token)
            if not 0 <= token < self._tokenizer_vocab or not self.matcher.accept_token(token):
                logger.debug("request %s: grammar rejected token %d", request_id, token)
                if count:
                    self.matcher.rollback(count)
                return False
            count += 1
        self.num_processed_tokens += count
        return True

    def validate_tokens(self, tokens: Sequence[int]) -> list[int]:
        """The longest prefix of ``tokens`` the grammar accepts in a row (vLLM trims draft
        tokens with it before scoring them). The state is unchanged."""
        tokens = [int(t) for t in tokens]
        limit = 0
        while limit < len(tokens) and 0 <= tokens[limit] < self._tokenizer_vocab:
            limit += 1
        if self.matcher.is_terminated() or limit == 0:
            return []
        n = self.matcher.count_acceptable_tokens(np.asarray(tokens[:limit], dtype=np.int64))
        return tokens[:n]

    def rollback(self, num_tokens: int) -> None:
        """Undo the last ``num_tokens`` accepted tokens.

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


class VLLMBackend:
    """The factory part of vLLM's ``StructuredOutputBackend``, over a GrammarCompiler.

    Parameters
    ----------
    compiler : GrammarCompiler
        Shared by every request (thread-safe; vLLM compiles on a thread pool).
    vocab_size : int, optional
        The model's vocabulary size, the width of the bitmask (default: the tokenizer's).
    override_stop_tokens : int or list of int, optional
        Stop tokens for every matcher instead of the tokenizer's.
    forced_drafts : int, default 0
        Grammar-forced tokens :meth:`VLLMGrammar.extend_draft` appends; 0 turns them off.
    """

    def __init__(
        self,
        compiler: GrammarCompiler,
        vocab_size: int | None = None,
        *,
        override_stop_tokens: int | list[int] | None = None,
        forced_drafts: int = 0,
    ) -> None:
        self.compiler = compiler
        self.vocab_size = _backend_vocab_size(compiler, vocab_size)
        self.override_stop_tokens = override_stop_tokens
        self.forced_drafts = _forced_option(forced_drafts)

    def compile_grammar(self, request_type: Any, grammar_spec: str) -> VLLMGrammar:
        """Compile one request's grammar and return its grammar object.

        Parameters
        ----------
        request_type : StructuredOutputOptions member or str
            ``JSON`` (a JSON Schema; needs ``GrammarCompiler.compile_json_schema``),
            ``JSON_OBJECT`` (any JSON object; the schema ``{"type": "object"}`` where JSON
            Schema is supported, else the built-in JSON grammar, which also allows a
            top-level array), ``REGEX``, ``GRAMMAR`` (EBNF), ``CHOICE`` (a JSON list of
            strings), ``STRUCTURAL_TAG`` (xgrammar's structural tag JSON, or the legacy
            ``{"structures": [...], "triggers": [...]}``). Matched by member name,
            case-insensitively.
        grammar_spec : str
            The schema, pattern, grammar or choice list.

        Raises
        ------
        ArgumentError
            Unsupported request type or a malformed choice list / structural tag request.
        GrammarError
            The grammar does not compile (a ``ValueError``).
        """
        ctx = _compile(self.compiler, _request_kind(request_type), grammar_spec)
        matcher = GrammarMatcher(ctx, **_stop_kwargs(self.override_stop_tokens))
        grammar = VLLMGrammar(matcher, self.vocab_size, ctx)
        grammar.forced_drafts = self.forced_drafts
        return grammar

    def allocate_token_bitmask(self, max_num_seqs: int) -> Any:
        """A zeroed int32 bitmask ``(max_num_seqs, ceil(vocab_size / 32))`` on the CPU."""
        return allocate_token_bitmask(max_num_seqs, self.vocab_size)

    def destroy(self) -> None:
        """Drop the compiler's cached grammars."""
        self.compiler.clear_cache()
