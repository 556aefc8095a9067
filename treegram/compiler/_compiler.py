"""GrammarCompiler: grammar text to CompiledGrammar, with an in-memory cache."""

from __future__ import annotations

import threading
from collections import OrderedDict

from ..automaton._build import build_automaton
from ..errors import GrammarError, TokenizerError
from ..grammar import Grammar
from ..tokenizer import TokenizerInfo
from ._compiled import CompiledGrammar

__all__ = ["GrammarCompiler"]


class GrammarCompiler:
    """Compiles grammars against one tokenizer vocabulary and caches the results.

    Compilation builds the automaton only; token classification happens lazily inside
    the :class:`CompiledGrammar` as matchers reach states, so compiling is cheap and the
    vocabulary is walked only for states that requests actually visit.

    Parameters
    ----------
    tokenizer_info : TokenizerInfo
        The vocabulary to compile for.
    max_threads : int, default 8
        Upper bound on worker threads used by compilation.
    cache_enabled : bool, default True
        Whether compiled grammars are cached by source text and options.
    cache_limit_bytes : int, default -1
        Evict least-recently-used entries beyond this many bytes; -1 means unbounded.

    Notes
    -----
    Safe to share across threads: concurrent callers of the same key compile once.
    """

    def __init__(
        self,
        tokenizer_info,
        *,
        max_threads: int = 8,
        cache_enabled: bool = True,
        cache_limit_bytes: int = -1,
    ) -> None:
        if not isinstance(tokenizer_info, TokenizerInfo):
            raise TokenizerError(
                "tokenizer_info must be a treegram.TokenizerInfo, got "
                f"{type(tokenizer_info).__name__}"
            )
        if not isinstance(max_threads, int) or isinstance(max_threads, bool) or max_threads < 1:
            raise GrammarError(f"max_threads must be a positive int, got {max_threads!r}")
        if not isinstance(cache_limit_bytes, int) or (
            cache_limit_bytes < 0 and cache_limit_bytes != -1
        ):
            raise GrammarError(
                f"cache_limit_bytes must be -1 or a non-negative int, got {cache_limit_bytes!r}"
            )
        self.tokenizer_info = tokenizer_info
        self.max_threads = max_threads
        self.cache_enabled = cache_enabled
        self.cache_limit_bytes = cache_limit_bytes
        self._cache: OrderedDict[tuple, CompiledGrammar] = OrderedDict()
        self._pending: dict[tuple, threading.Event] = {}
        self._lock = threading.Lock()

    def compile_grammar(self, grammar: str | Grammar, *, root_rule_name: str = "root"
                        ) -> CompiledGrammar:
        """Compile an EBNF string or a :class:`Grammar`.

        Parameters
        ----------
        grammar : str or Grammar
            EBNF text, or an already parsed grammar.
        root_rule_name : str, default "root"
            Root rule when ``grammar`` is EBNF text.

        Returns
        -------
        CompiledGrammar
        """
        if isinstance(grammar, Grammar):
            key = ("grammar", str(grammar))
            return self._cached(key, lambda: grammar)
        if not isinstance(grammar, str):
            raise GrammarError(
                f"grammar must be an EBNF str or a Grammar, got {type(grammar).__name__}"
            )
        key = ("ebnf", grammar, root_rule_name)
        return self._cached(key, lambda: Grammar.from_ebnf(grammar, root_rule_name=root_rule_name))

    def compile_regex(self, pattern: str) -> CompiledGrammar:
        """Compile a regular expression (whole-string match), see ``Grammar.from_regex``.

        Returns
        -------
        CompiledGrammar
        """
        if not isinstance(pattern, str):
            raise GrammarError(f"pattern must be a str, got {type(pattern).__name__}")
        return self._cached(("regex", pattern), lambda: Grammar.from_regex(pattern))

    def compile_builtin_json_grammar(self) -> CompiledGrammar:
        """Compile the built-in JSON grammar (any JSON object or array)."""
        return self._cached(("builtin_json",), Grammar.builtin_json_grammar)

    def clear_cache(self) -> None:
        """Drop every cached compiled grammar."""
        with self._lock:
            self._cache.clear()

    def get_cache_size_bytes(self) -> int:
        """Approximate bytes held by cached compiled grammars."""
        with self._lock:
            return sum(c.memory_size_bytes for c in self._cache.values())

    def _compile(self, make_grammar) -> CompiledGrammar:
        grammar = make_grammar()
        return CompiledGrammar(grammar, self.tokenizer_info, build_automaton(grammar.ir))

    def _cached(self, key: tuple, make_grammar) -> CompiledGrammar:
        if not self.cache_enabled:
            return self._compile(make_grammar)
        while True:
            with self._lock:
                hit = self._cache.get(key)
                if hit is not None:
                    self._cache.move_to_end(key)
                    return hit
                waiting = self._pending.get(key)
                if waiting is None:
                    done = self._pending[key] = threading.Event()
                    break
            waiting.wait()  # another thread compiles this key; then look again
        try:
            compiled = self._compile(make_grammar)
            with self._lock:
                self._cache[key] = compiled
                self._evict()
            return compiled
        finally:
            with self._lock:
                del self._pending[key]
            done.set()

    def _evict(self) -> None:
        if self.cache_limit_bytes < 0:
            return
        total = sum(c.memory_size_bytes for c in self._cache.values())
        while total > self.cache_limit_bytes and self._cache:
            _, old = self._cache.popitem(last=False)
            total -= old.memory_size_bytes
