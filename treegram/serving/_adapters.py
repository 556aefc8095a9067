"""What the engine adapters (:mod:`treegram.serving.sglang`, :mod:`treegram.serving.vllm`)
share: the rejected-token error, mask rows of terminated grammars, request compilation,
and the engine base classes the adapter classes join when the engine is imported.

Neither engine is a dependency and nothing here imports one (an engine import costs
seconds): :func:`_engine_class` looks the engine's module up in ``sys.modules``.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
from typing import Any

import numpy as np

from treegram.compiler import CompiledGrammar, GrammarCompiler
from treegram.errors import ArgumentError, GrammarError, TreegramError
from treegram.frontends import downgraded_keywords
from treegram.matcher import GrammarMatcher, as_bitmask_array, check_row_index

__all__ = ["TokenRejectedError"]

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


_logged: set[str] = set()
_logged_lock = threading.Lock()


def _log_once(key: str, message: str, *args: Any) -> None:
    """Log a warning the first time ``key`` is seen in the process (a drop-in that falls
    back to the engine's own walk says so once, not every step)."""
    with _logged_lock:
        if key in _logged:
            return
        _logged.add(key)
    logger.warning(message, *args)


_ON = ("1", "true", "yes", "on")


def _switched_on(variable: str) -> bool:
    """Whether the environment variable ``variable`` turns a plug-in on (1, true, yes, on:
    any case)."""
    return os.environ.get(variable, "").strip().lower() in _ON
