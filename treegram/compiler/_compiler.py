"""GrammarCompiler: grammar text to CompiledGrammar, with a memory cache, an optional shared
cache store (a directory or Redis) and one bounded worker pool for eager classification."""

from __future__ import annotations

import json
import logging
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Collection, Mapping
from typing import Any

from .._checks import is_int
from ..automaton import build_automaton
from ..errors import (
    ArgumentError,
    DeserializeFormatError,
    DeserializeVersionError,
    GrammarError,
    TokenizerError,
    TokenizerMismatchError,
)
from ..frontends import (
    checked_options,
    structural_tag_from_args,
    structural_tag_key,
)
from ..grammar import Grammar, check_named_grammars
from ..pool import MAX_THREADS_LIMIT, WorkerPool
from ..tokenizer import TokenizerInfo
from ._compiled import CompiledGrammar, deserialize_compiled, serialize_compiled
from ._mask_store import prepare_vocabulary
from ._serialize import FORMAT_VERSION
from ._store import CACHE_DIR_ENV, DirectoryStore, store_key

__all__ = ["GrammarCompiler", "register_warm_up"]

# The kernel warm-up (treegram.warm_up, defined above this layer: it runs matchers), which
# the package registers on import so that GrammarCompiler(warm_up=...) can start it.
_warm_up_hook: Callable[..., Any] | None = None


def register_warm_up(hook: Callable[..., Any]) -> None:
    """Set what ``GrammarCompiler(warm_up=...)`` calls: ``hook(background=bool)``."""
    global _warm_up_hook
    _warm_up_hook = hook


logger = logging.getLogger(__name__)

_CLASSIFY_MODES = ("lazy", "eager")
_BAD_ENTRY = (DeserializeFormatError, DeserializeVersionError, TokenizerMismatchError)
# Blocks of states handed to the pool: about this many sorted-vocabulary tokens walked per
# block at least (a block must outweigh a thread hand-off), and up to this many blocks per
# worker (uneven states balance across workers).
_MIN_BLOCK_TOKENS = 1 << 15
_BLOCKS_PER_WORKER = 4


class GrammarCompiler:
    """Compiles grammars against one tokenizer vocabulary and caches the results.

    Compilation builds the automaton; token classification happens lazily inside the
    :class:`CompiledGrammar` as matchers reach states, so compiling is cheap and the
    vocabulary is walked only for states that requests actually visit. Pass
    ``classify="eager"`` (or call :meth:`precompile`) to classify every state up front,
    in parallel on the compiler's worker pool.

    Parameters
    ----------
    tokenizer_info : TokenizerInfo
        The vocabulary to compile for.
    max_threads : int, default 8
        Size of the compiler's one worker pool, shared by every concurrent caller: eager
        classification runs at most this many blocks at once (the calling thread included),
        so the compiler never owns more than ``max_threads - 1`` threads.
    cache_enabled : bool, default True
        Whether compiled grammars are kept in memory by source text and options.
    cache_limit_bytes : int, default -1
        Evict least-recently-used memory entries beyond this many bytes; -1 is unbounded.
    cache_store : CacheStore or None
        A store shared with other processes (:class:`DirectoryStore`, :class:`RedisStore`
        or anything with ``get``/``put``/``delete``), consulted after the memory cache and
        written through after each compile.
    cache_dir : str or os.PathLike or None
        Shorthand for ``cache_store=DirectoryStore(cache_dir)``. When neither is given, the
        environment variable ``TREEGRAM_CACHE_DIR`` (if set and not empty) is used. A path
        that cannot be used as a directory (a regular file, a dangling symbolic link) is
        logged and the compiler runs without a store.
    warm_up : bool or "background", default False
        Compile or load every numba kernel now (:func:`treegram.warm_up`, once per process
        whatever the number of compilers), then build the vocabulary's tables that the
        first masks of a process would otherwise build (the sorted vocabulary, the token
        table, the JSON string slices: about 20 ms on a 128k vocabulary, once per
        vocabulary), so that no request waits on either; ``"background"`` does it on a
        daemon thread (a failure there is logged, and the work is left to first use).

    Notes
    -----
    Thread-safe: any number of threads may compile through one compiler; concurrent
    requests for the same key compile once (the others wait and share the result).
    A store entry is validated like any serialized grammar and must carry the key it is
    read under (the compiler writes it into every entry); a bad one (corrupt, stored under
    another grammar's key, another format version or tokenizer) is logged, deleted and
    rebuilt, and a failing store (I/O or connection error, an unusable entry, a cache
    directory that cannot be opened) is logged and bypassed: the store never makes a
    compile fail. ``cache_enabled=False`` turns off the memory cache only.
    """

    def __init__(
        self,
        tokenizer_info,
        *,
        max_threads: int = 8,
        cache_enabled: bool = True,
        cache_limit_bytes: int = -1,
        cache_store=None,
        cache_dir=None,
        warm_up: bool | str = False,
    ) -> None:
        if warm_up not in (False, True, "background"):
            raise ArgumentError(f"warm_up must be False, True or 'background', got {warm_up!r}")
        if not isinstance(tokenizer_info, TokenizerInfo):
            raise TokenizerError(
                "tokenizer_info must be a treegram.TokenizerInfo, got "
                f"{type(tokenizer_info).__name__}"
            )
        if not is_int(max_threads, numpy=False) or not 1 <= max_threads <= MAX_THREADS_LIMIT:
            raise GrammarError(
                f"max_threads must be an int in [1, {MAX_THREADS_LIMIT}], got {max_threads!r}"
            )
        if not isinstance(cache_limit_bytes, int) or (
            cache_limit_bytes < 0 and cache_limit_bytes != -1
        ):
            raise GrammarError(
                f"cache_limit_bytes must be -1 or a non-negative int, got {cache_limit_bytes!r}"
            )
        if cache_store is not None and cache_dir is not None:
            raise ArgumentError("give cache_store or cache_dir, not both")
        if cache_store is not None and not all(
            callable(getattr(cache_store, m, None)) for m in ("get", "put", "delete")
        ):
            raise ArgumentError(
                "cache_store must have get(key), put(key, blob) and delete(key), "
                f"got {type(cache_store).__name__}"
            )
        if cache_dir is not None and not isinstance(cache_dir, (str, os.PathLike)):
            raise ArgumentError(
                f"cache_dir must be a str or os.PathLike, got {type(cache_dir).__name__}"
            )
        store_errors = 0
        if cache_store is None:
            if cache_dir is None:
                cache_dir = os.environ.get(CACHE_DIR_ENV) or None
            if cache_dir is not None:
                try:
                    cache_store = DirectoryStore(cache_dir)
                except OSError as exc:  # a store never makes a compile fail
                    store_errors = 1
                    logger.warning(
                        "treegram cache directory %r cannot be used (%s: %s); "
                        "compiling without a cache store",
                        cache_dir,
                        type(exc).__name__,
                        exc,
                    )
        self.tokenizer_info = tokenizer_info
        self.max_threads = max_threads
        self.cache_enabled = cache_enabled
        self.cache_limit_bytes = cache_limit_bytes
        self.cache_store = cache_store
        self._pool = WorkerPool(max_threads)
        self._cache: OrderedDict[tuple, CompiledGrammar] = OrderedDict()
        self._pending: dict[tuple, threading.Event] = {}
        self._lock = threading.Lock()
        self._stats = dict.fromkeys(
            ("memory_hits", "store_hits", "compiles", "store_rejects", "store_errors"), 0
        )
        self._stats["store_errors"] = store_errors
        if warm_up == "background":
            name = "treegram-compiler-warm-up"
            threading.Thread(target=self._warm_up_logged, name=name, daemon=True).start()
        elif warm_up:
            self._warm_up()

    def _warm_up(self) -> None:
        """The kernel warm-up, then the vocabulary's tables (see ``warm_up`` above)."""
        if _warm_up_hook is not None:
            _warm_up_hook(background=False)
        prepare_vocabulary(self.tokenizer_info)

    def _warm_up_logged(self) -> None:
        try:
            self._warm_up()
        except Exception:  # a background warm-up leaves the work to first use
            logger.exception("treegram: the compiler's background warm-up failed")

    # ----------------------------------------------------------------- compiling
    def compile_grammar(
        self, grammar: str | Grammar, *, root_rule_name: str = "root", classify: str = "lazy"
    ) -> CompiledGrammar:
        """Compile an EBNF string or a :class:`Grammar`.

        Parameters
        ----------
        grammar : str or Grammar
            EBNF text, or an already parsed grammar.
        root_rule_name : str, default "root"
            Root rule when ``grammar`` is EBNF text.
        classify : {"lazy", "eager"}, default "lazy"
            ``"eager"`` classifies every automaton state before returning (see
            :meth:`precompile`); ``"lazy"`` leaves it to the first matcher that gets there.

        Returns
        -------
        CompiledGrammar
        """
        if isinstance(grammar, Grammar):
            # printed only when a cache needs the key: printing is a tenth of a compile
            parts = lambda: (str(grammar), grammar.root_rule_name)  # noqa: E731
            return self._cached("grammar", parts, lambda: grammar, classify)
        if not isinstance(grammar, str):
            raise GrammarError(
                f"grammar must be an EBNF str or a Grammar, got {type(grammar).__name__}"
            )
        return self._cached(
            "ebnf",
            (grammar, root_rule_name),
            lambda: Grammar.from_ebnf(grammar, root_rule_name=root_rule_name),
            classify,
        )

    def compile_json_schema(
        self,
        schema,
        *,
        any_whitespace: bool = True,
        indent: int | None = None,
        separators: tuple[str, str] | None = None,
        strict_mode: bool = True,
        max_whitespace_cnt: int | None = None,
        unsupported: str | Collection[str] = "error",
        unknown_format: str = "warn",
        format_assertion: bool = True,
        canonical_integers: bool = True,
        classify: str = "lazy",
        remote_schemas: Mapping[str, dict | bool] | None = None,
        any_order: bool = False,
    ) -> CompiledGrammar:
        """Compile a JSON Schema (str, dict or pydantic model class) with xgrammar's options,
        see ``Grammar.from_json_schema``; ``classify`` is as for :meth:`compile_grammar`.
        ``remote_schemas`` (documents ``$ref`` may name outside the schema, keyed by
        retrieval URI) is part of the cache key.

        Returns
        -------
        CompiledGrammar

        Raises
        ------
        UnsupportedSchemaError
            A keyword cannot be compiled exactly (named, with its JSON pointer).
        """
        if isinstance(schema, str):
            text = schema
        elif isinstance(schema, dict):
            text = json.dumps(schema)
        elif hasattr(schema, "model_json_schema"):
            text = json.dumps(schema.model_json_schema())
        else:
            raise GrammarError(
                "schema must be a JSON str, a dict or a pydantic model class, got "
                f"{type(schema).__name__}"
            )
        options = checked_options(  # a clear error before it becomes a cache key
            any_whitespace=any_whitespace,
            indent=indent,
            separators=separators,
            strict_mode=strict_mode,
            max_whitespace_cnt=max_whitespace_cnt,
            unsupported=unsupported,
            unknown_format=unknown_format,
            format_assertion=format_assertion,
            canonical_integers=canonical_integers,
            remote_schemas=remote_schemas,
            any_order=any_order,
        )
        return self._cached(
            "json_schema",
            (text, *options.cache_key()),
            lambda: Grammar.from_json_schema(text, **options.as_kwargs()),
            classify,
        )

    def compile_regex(self, pattern: str, *, classify: str = "lazy") -> CompiledGrammar:
        """Compile a regular expression (whole-string match), see ``Grammar.from_regex``.

        ``classify`` is as for :meth:`compile_grammar`.

        Returns
        -------
        CompiledGrammar
        """
        if not isinstance(pattern, str):
            raise GrammarError(f"pattern must be a str, got {type(pattern).__name__}")
        return self._cached("regex", (pattern,), lambda: Grammar.from_regex(pattern), classify)

    def compile_lark(
        self,
        text: str,
        *,
        named_grammars: Mapping[str, Grammar | str] | None = None,
        classify: str = "lazy",
    ) -> CompiledGrammar:
        """Compile a Lark grammar (it starts at ``start``), see ``Grammar.from_lark``.

        ``named_grammars`` (the grammars ``@name`` refers to) is part of the cache key;
        ``classify`` is as for :meth:`compile_grammar`.

        Returns
        -------
        CompiledGrammar
        """
        if not isinstance(text, str):
            raise GrammarError(f"lark text must be a str, got {type(text).__name__}")
        named = check_named_grammars(named_grammars)
        key = tuple(
            (k, v.root_rule_name, str(v)) if isinstance(v, Grammar) else (k, None, v)
            for k, v in sorted(named.items(), key=lambda kv: str(kv[0]))
        )
        return self._cached(
            "lark", (text, key), lambda: Grammar.from_lark(text, named_grammars=named), classify
        )

    def compile_structural_tag(self, *args, classify: str = "lazy", **kwargs) -> CompiledGrammar:
        """Compile a structural tag, see ``Grammar.from_structural_tag`` (both forms:
        ``(structural_tag)`` and the legacy ``(tags, triggers)``).

        ``classify`` is as for :meth:`compile_grammar`. The cache key is the structural
        tag's JSON form, so equal tags given as objects, dicts or JSON text share one entry.

        Returns
        -------
        CompiledGrammar

        Raises
        ------
        InvalidStructuralTagError
            A malformed structural tag (the message names the field).
        UnsupportedStructuralTagError
            A format or option treegram does not compile.
        """
        tag = structural_tag_from_args(args, kwargs)
        text = structural_tag_key(tag)
        return self._cached(
            "structural_tag", (text,), lambda: Grammar.from_structural_tag(tag), classify
        )

    def compile_builtin_json_grammar(self, *, classify: str = "lazy") -> CompiledGrammar:
        """Compile the built-in JSON grammar (any JSON object or array).

        ``classify`` is as for :meth:`compile_grammar`.
        """
        return self._cached("builtin_json", (), Grammar.builtin_json_grammar, classify)

    def precompile(self, compiled: CompiledGrammar) -> CompiledGrammar:
        """Classify every state of ``compiled`` that has no class yet, in parallel.

        The states are cut into contiguous blocks that the compiler's worker pool classifies
        concurrently (the vocabulary walk releases the GIL); the results are then stored in
        state order under the grammar's lock, so the classification, and the serialized
        bytes, are identical whatever ``max_threads`` is. Matchers may use ``compiled``
        meanwhile. If a block fails, every other block finishes first, nothing is stored,
        and the error is raised (:class:`~treegram.errors.WorkerError`, the original as
        ``__cause__``); the pool stays usable.

        Returns
        -------
        CompiledGrammar
            ``compiled`` itself.
        """
        if not isinstance(compiled, CompiledGrammar):
            raise ArgumentError(
                f"compiled must be a CompiledGrammar, got {type(compiled).__name__}"
            )
        store = compiled._store
        states = store.unclassified_states()
        n = int(states.shape[0])
        if n == 0:
            return compiled
        n_tok = max(1, len(compiled.tokenizer_info.sorted_vocab))
        min_block = max(1, -(-_MIN_BLOCK_TOKENS // n_tok))
        n_blocks = max(1, min(n // min_block, _BLOCKS_PER_WORKER * self.max_threads))
        edges = [n * b // n_blocks for b in range(n_blocks + 1)]
        blocks = [states[edges[b] : edges[b + 1]] for b in range(n_blocks)]
        results = self._pool.map(store.compute_classes, blocks)  # inline when one block
        keys: list[bytes] = []
        encoded: dict[bytes, tuple] = {}
        for block_keys, block_encoded in results:
            keys.extend(block_keys)
            for key, value in block_encoded.items():
                encoded.setdefault(key, value)
        store.insert_classes(states, keys, encoded)
        return compiled

    # ----------------------------------------------------------------- cache
    def clear_cache(self) -> None:
        """Drop every grammar cached in memory (the cache store is left as it is)."""
        with self._lock:
            self._cache.clear()

    def get_cache_size_bytes(self) -> int:
        """Approximate bytes held by the grammars cached in memory (lazily classified
        grammars grow as matchers reach new states)."""
        with self._lock:
            return sum(c.memory_size_bytes for c in self._cache.values())

    @property
    def cache_stats(self) -> dict[str, int]:
        """Counters since construction: ``memory_hits``, ``store_hits`` (loaded from the
        store), ``compiles``, ``store_rejects`` (bad entries discarded), ``store_errors``
        (store calls that raised)."""
        with self._lock:
            return dict(self._stats)

    # ----------------------------------------------------------------- internals
    def _count(self, name: str) -> None:
        with self._lock:
            self._stats[name] += 1

    def _compile(self, make_grammar) -> CompiledGrammar:
        grammar = make_grammar()
        compiled = CompiledGrammar(grammar, self.tokenizer_info, build_automaton(grammar.ir))
        self._count("compiles")
        return compiled

    def _store_load(self, skey: str) -> CompiledGrammar | None:
        store = self.cache_store
        try:
            blob = store.get(skey)
        except Exception as exc:  # noqa: BLE001 - a store never makes a compile fail
            self._count("store_errors")
            logger.warning(
                "treegram cache store %r: get(%s) failed (%s: %s); compiling",
                store,
                skey,
                type(exc).__name__,
                exc,
            )
            return None
        if blob is None:
            return None
        try:
            # bound to its key: an intact entry of another grammar is rejected like a corrupt one
            compiled = deserialize_compiled(blob, self.tokenizer_info, cache_key=skey)
        except (*_BAD_ENTRY, ArgumentError) as exc:  # ArgumentError: a store returned no bytes
            self._count("store_rejects")
            logger.warning(
                "treegram cache store %r: discarding bad entry %s (%s: %s); rebuilding it",
                store,
                skey,
                type(exc).__name__,
                exc,
            )
            self._store_call("delete", skey)
            return None
        self._count("store_hits")
        return compiled

    def _store_call(self, method: str, *args) -> None:
        try:
            getattr(self.cache_store, method)(*args)
        except Exception as exc:  # noqa: BLE001 - a store never makes a compile fail
            self._count("store_errors")
            logger.warning(
                "treegram cache store %r: %s(%s) failed (%s: %s)",
                self.cache_store,
                method,
                args[0],
                type(exc).__name__,
                exc,
            )

    def _build(self, kind: str, parts, make_grammar, eager: bool) -> CompiledGrammar:
        skey = None
        if self.cache_store is not None:
            parts = parts() if callable(parts) else parts
            skey = store_key(kind, parts, self.tokenizer_info.fingerprint, FORMAT_VERSION)
            compiled = self._store_load(skey)
            if compiled is not None:
                if eager and compiled._store.unclassified_states().shape[0]:
                    self.precompile(compiled)
                    self._store_call("put", skey, serialize_compiled(compiled, cache_key=skey))
                return compiled
        compiled = self._compile(make_grammar)
        if eager:
            self.precompile(compiled)
        if skey is not None:
            self._store_call("put", skey, serialize_compiled(compiled, cache_key=skey))
        return compiled

    def _cached(self, kind: str, parts, make_grammar, classify: str) -> CompiledGrammar:
        """Compile through the memory cache and the cache store. ``parts`` (the key's
        parts after ``kind``) may be a function that computes them, called only when a
        cache needs the key."""
        if classify not in _CLASSIFY_MODES:
            raise ArgumentError(f"classify must be 'lazy' or 'eager', got {classify!r}")
        eager = classify == "eager"
        if not self.cache_enabled:
            return self._build(kind, parts, make_grammar, eager)
        parts = parts() if callable(parts) else parts
        key = (kind, *parts)
        while True:
            with self._lock:
                hit = self._cache.get(key)
                if hit is not None:
                    self._cache.move_to_end(key)
                    self._stats["memory_hits"] += 1
                    break
                waiting = self._pending.get(key)
                if waiting is None:
                    done = self._pending[key] = threading.Event()
                    break
            waiting.wait()  # another thread compiles this key; then look again
        if hit is not None:
            return self.precompile(hit) if eager else hit
        try:
            compiled = self._build(kind, parts, make_grammar, eager)
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

    def __repr__(self) -> str:
        return (
            f"GrammarCompiler(vocab_size={self.tokenizer_info.vocab_size}, "
            f"max_threads={self.max_threads}, cache_store={self.cache_store!r})"
        )
