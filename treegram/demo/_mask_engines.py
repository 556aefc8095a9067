"""The grammar side of the decoding loop, three ways: treegram, xgrammar and llguidance.

Each mask engine compiles a request's grammar, makes a matcher per request, fills the mask
of every node of every draft tree of a step, extends trees with grammar-forced nodes, and
advances the matchers by the verified tokens, each through its own API:

* **treegram**: one :meth:`treegram.BatchGrammarMatcher.batch_traverse_draft_tree` call
  for the whole batch, or one :func:`treegram.matcher.extend_draft_trees` call that adds
  the forced nodes and fills every mask;
* **xgrammar** 0.2.8: ``GrammarMatcher.traverse_draft_tree`` per request (the draft-tree
  path SGLang uses), ``find_jump_forward_string`` for forced bytes;
* **llguidance** 1.9: ``LLMatcher`` per request, walked depth-first over the tree
  (``consume_token`` / mask into the node's row / ``rollback``, SGLang's generic tree
  walk), ``compute_ff_bytes`` for forced bytes.

Forced nodes mean the same for all three (see :mod:`treegram.matcher`'s ``_forced``
notes): at every effective leaf of a tree (depth-first, children in sibling order), the
forced bytes of the position cut into tokens by greedy longest match over the vocabulary's
non-special tokens, else the single allowed token; for the peers this walk runs in Python
over their matchers (:func:`extend_with_forced`), each forced node's mask filled on the way.

The vocabulary is the same for all three: treegram's :class:`~treegram.TokenizerInfo`
(control tokens kept out of grammar text), given to xgrammar as decoded bytes
(``VocabType.RAW``, control tokens empty, hence special) and to llguidance as the
tokenizer's JSON (its special tokens are never text). JSON Schema layout is the same:
no free whitespace, ``", "`` and ``": "`` separators, no properties beyond the schema's
(xgrammar's and treegram's ``strict_mode``; llguidance allows extra properties unless the
schema says ``additionalProperties: false``, which the demo's requests do not rely on).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import numpy as np

from treegram.errors import ArgumentError, GrammarError, MatcherStateError, MissingDependencyError

__all__ = ["ENGINES", "MaskEngine", "extend_with_forced", "greedy_tokens", "make_mask_engine"]

#: The mask engines :func:`make_mask_engine` builds.
ENGINES = ("treegram", "xgrammar", "llguidance")

_SEPARATORS = (", ", ": ")


def _bit(row: np.ndarray, token: int) -> bool:
    return bool((int(row[token >> 5]) >> (token & 31)) & 1)


class MaskEngine:
    """What the loop needs from a grammar engine (see the module notes).

    Subclasses implement :meth:`compile`, :meth:`matcher`, :meth:`fill`, :meth:`accept`,
    :meth:`is_terminated` and, for grammar-forced nodes, :meth:`extend`.

    Attributes
    ----------
    name : str
    info : treegram.TokenizerInfo
        The vocabulary every engine sees.
    """

    name = ""

    def __init__(self, info) -> None:
        self.info = info
        self.vocab_size = info.vocab_size
        self.words = (info.vocab_size + 31) // 32
        self.stop_ids = frozenset(info.stop_token_ids)

    def compile(self, request) -> Any:  # pragma: no cover - interface
        raise NotImplementedError

    def matcher(self, compiled) -> Any:  # pragma: no cover - interface
        raise NotImplementedError

    def fill(self, matchers, next_token, next_sibling, draft, rows, stride: int) -> None:
        """Fill the mask of node ``j`` of request ``i`` into ``rows[i * stride + j]``
        (zeros for nodes the grammar does not reach).

        Parameters
        ----------
        matchers : list, length B
        next_token, next_sibling, draft : int64 ndarray [B, N]
        rows : torch.Tensor int32 [>= B * stride, words]
        stride : int
            Rows per request (``>= N``).
        """
        raise NotImplementedError  # pragma: no cover - interface

    def extend(self, matchers, parents, next_token, next_sibling, draft, budget: int, rows):
        """Trees extended with forced nodes and every node's mask (stride ``N + budget``).

        Returns
        -------
        draft, parents, next_token, next_sibling : int64 ndarray [B, N + budget]
        """
        raise NotImplementedError  # pragma: no cover - interface

    def accept(self, matcher, tokens: Sequence[int]) -> None:  # pragma: no cover - interface
        raise NotImplementedError

    def is_terminated(self, matcher) -> bool:  # pragma: no cover - interface
        raise NotImplementedError

    # ---- helpers the peers share

    def _compile_error(self, request, exc: Exception) -> GrammarError:
        return GrammarError(f"cannot compile the grammar: {str(exc).strip()}")


# ------------------------------------------------------------------------------ treegram


class TreegramEngine(MaskEngine):
    """treegram: one batched call per step (see the module notes)."""

    name = "treegram"

    def __init__(self, info, *, max_threads: int | str = 1, cache: bool = True) -> None:
        from treegram import BatchGrammarMatcher, GrammarCompiler

        super().__init__(info)
        # kernels compiled or loaded now, before the first request is timed
        self.compiler = GrammarCompiler(info, cache_enabled=cache, warm_up=True)
        self.batch = BatchGrammarMatcher(max_threads=max_threads)

    def close(self) -> None:
        self.batch.close()

    def compile(self, request) -> Any:
        from treegram import Grammar

        if request.structural_tag is not None:
            return self.compiler.compile_structural_tag(request.structural_tag)
        if request.schema is None:
            return self.compiler.compile_builtin_json_grammar()
        return self.compiler.compile_grammar(
            Grammar.from_json_schema(request.schema, any_whitespace=False, separators=_SEPARATORS)
        )

    def matcher(self, compiled) -> Any:
        from treegram import GrammarMatcher

        return GrammarMatcher(compiled)

    def fill(self, matchers, next_token, next_sibling, draft, rows, stride: int) -> None:
        b, n = draft.shape
        if stride == n and b == 1:
            # one request: its matcher's own call (the batch call's set-up costs ~0.1 ms a
            # step on one 1-node tree, twice the fill itself; measured on SmolLM2's vocabulary)
            matchers[0].traverse_draft_tree(next_token[0], next_sibling[0], draft[0], rows[:n])
            return
        if stride == n:
            self.batch.batch_traverse_draft_tree(matchers, next_token, next_sibling, draft, rows)
            return
        view = rows[: b * stride].view(b, stride, -1)
        view[:, n:] = 0
        for i in range(b):  # not used by the loop (it extends in one call instead)
            matchers[i].traverse_draft_tree(next_token[i], next_sibling[i], draft[i], view[i, :n])

    def extend(self, matchers, parents, next_token, next_sibling, draft, budget: int, rows):
        from treegram.matcher import extend_draft_trees

        ext = extend_draft_trees(
            matchers,
            next_token,
            next_sibling,
            draft,
            budget=budget,
            token_bitmask=rows,
            batch=self.batch,
        )
        return ext.draft_tokens, ext.parents, ext.next_token, ext.next_sibling

    def accept(self, matcher, tokens: Sequence[int]) -> None:
        for tok in tokens:
            if not matcher.accept_token(tok):
                raise MatcherStateError(f"treegram rejected verified token {tok}")

    def is_terminated(self, matcher) -> bool:
        return matcher.is_terminated()


# ------------------------------------------------------------------------------ peers


class _PeerEngine(MaskEngine):
    """Shared by xgrammar and llguidance: per-request tree fills, forced nodes in Python."""

    def __init__(self, info) -> None:
        super().__init__(info)
        self._by_bytes: dict[bytes, int] | None = None
        self._max_len = 0

    def close(self) -> None:
        pass

    def token_table(self) -> tuple[dict[bytes, int], int]:
        """Non-special token bytes to (lowest) id, and the longest token's length."""
        if self._by_bytes is None:
            table: dict[bytes, int] = {}
            for tid, tok in enumerate(self.info.decoded_vocab):
                if tok and tid not in self.stop_ids:
                    table.setdefault(tok, tid)
            self._by_bytes = table
            self._max_len = max(map(len, table))
        return self._by_bytes, self._max_len

    def forced_bytes(self, matcher) -> bytes:  # pragma: no cover - interface
        raise NotImplementedError

    def fill_row(self, matcher, rows_np: np.ndarray, row: int) -> None:  # pragma: no cover
        raise NotImplementedError

    def rollback(self, matcher, n: int) -> None:  # pragma: no cover - interface
        raise NotImplementedError

    def extend(self, matchers, parents, next_token, next_sibling, draft, budget: int, rows):
        return extend_with_forced(
            self, matchers, parents, next_token, next_sibling, draft, budget, rows
        )


class XGrammarEngine(_PeerEngine):
    """xgrammar 0.2.8 with treegram's decoded vocabulary (see the module notes)."""

    name = "xgrammar"

    def __init__(self, info, *, cache: bool = True) -> None:
        try:
            import xgrammar
        except ImportError:
            raise MissingDependencyError(
                "the xgrammar mask engine needs xgrammar: pip install xgrammar==0.2.8"
            ) from None
        super().__init__(info)
        self.xgr = xgrammar
        xinfo = xgrammar.TokenizerInfo(
            list(info.decoded_vocab),
            xgrammar.VocabType.RAW,
            vocab_size=info.vocab_size,
            stop_token_ids=list(info.stop_token_ids),
        )
        self.compiler = xgrammar.GrammarCompiler(xinfo, cache_enabled=cache)

    def compile(self, request) -> Any:
        try:
            if request.structural_tag is not None:
                return self.compiler.compile_structural_tag(json.dumps(request.structural_tag))
            if request.schema is None:
                return self.compiler.compile_builtin_json_grammar()
            return self.compiler.compile_json_schema(
                json.dumps(request.schema), any_whitespace=False, separators=_SEPARATORS
            )
        except (RuntimeError, ValueError, TypeError) as exc:
            raise self._compile_error(request, exc) from None

    def matcher(self, compiled) -> Any:
        return self.xgr.GrammarMatcher(compiled)

    def fill(self, matchers, next_token, next_sibling, draft, rows, stride: int) -> None:
        import torch

        b, n = draft.shape
        rows[: b * stride] = 0
        nt, ns, dt = (
            torch.from_numpy(np.ascontiguousarray(a)) for a in (next_token, next_sibling, draft)
        )
        for i, m in enumerate(matchers):
            if m.is_terminated():
                continue
            m.traverse_draft_tree(nt[i], ns[i], dt[i], rows[i * stride : i * stride + n])

    def fill_row(self, matcher, rows_np: np.ndarray, row: int) -> None:
        import torch

        matcher.fill_next_token_bitmask(torch.from_numpy(rows_np), row)

    def forced_bytes(self, matcher) -> bytes:
        return matcher.find_jump_forward_string().encode("utf-8")

    def rollback(self, matcher, n: int) -> None:
        if n:
            matcher.rollback(n)

    def accept(self, matcher, tokens: Sequence[int]) -> None:
        for tok in tokens:
            if not matcher.accept_token(tok):
                raise MatcherStateError(f"xgrammar rejected verified token {tok}")

    def accept_one(self, matcher, tok: int) -> bool:
        return bool(matcher.accept_token(tok))

    def is_terminated(self, matcher) -> bool:
        return bool(matcher.is_terminated())


class LLGuidanceEngine(_PeerEngine):
    """llguidance 1.9 over the rebuilt tokenizer's JSON (see the module notes)."""

    name = "llguidance"

    def __init__(self, info, tokenizer: Any) -> None:
        try:
            import llguidance
        except ImportError:
            raise MissingDependencyError(
                "the llguidance mask engine needs llguidance: pip install llguidance"
            ) from None
        super().__init__(info)
        self.llg = llguidance
        self.tokenizer = llguidance.LLTokenizer(
            tokenizer, n_vocab=info.vocab_size, eos_token=list(info.stop_token_ids)
        )

    def compile(self, request) -> Any:
        llg = self.llg
        if request.structural_tag is not None:
            grammar = llg.LLMatcher.grammar_from_lark(_structural_tag_lark(request.structural_tag))
        elif request.schema is None:
            grammar = llg.LLMatcher.grammar_from_lark("start: %json {}")
        else:
            grammar = llg.LLMatcher.grammar_from_json_schema(
                request.schema,
                defaults={
                    "whitespace_flexible": False,
                    "item_separator": _SEPARATORS[0],
                    "key_separator": _SEPARATORS[1],
                },
            )
        error = llg.LLMatcher.validate_grammar(grammar, self.tokenizer)
        if error and not error.startswith("WARNING"):
            raise self._compile_error(request, error)
        return grammar

    def matcher(self, compiled) -> Any:
        m = self.llg.LLMatcher(self.tokenizer, compiled, log_level=0)
        if m.is_error():
            raise GrammarError(f"llguidance: {m.get_error()}")
        return _LLState(m)

    def fill(self, matchers, next_token, next_sibling, draft, rows, stride: int) -> None:
        b, n = draft.shape
        rows[: b * stride] = 0
        rows_np = rows.numpy()
        for i, st in enumerate(matchers):
            if not st.ended:
                self._walk(st.m, next_token[i], next_sibling[i], draft[i], rows_np, i * stride)

    def _walk(self, m, nt, ns, draft, rows_np: np.ndarray, base: int, node: int = 0) -> None:
        """Depth-first: fill the node's row, then visit each allowed child between
        ``consume_token`` and ``rollback`` (a stop token's node keeps a zero row)."""
        self.fill_row(m, rows_np, base + node)
        row = rows_np[base + node]
        child = int(nt[node])
        while child != -1:
            tok = int(draft[child])
            if _bit(row, tok) and tok not in self.stop_ids:
                if not m.consume_token(tok):  # pragma: no cover - masks and matcher disagree
                    raise MatcherStateError(f"llguidance rejected allowed token {tok}")
                self._walk(m, nt, ns, draft, rows_np, base, child)
                m.rollback(1)
            child = int(ns[child])

    def fill_row(self, matcher, rows_np: np.ndarray, row: int) -> None:
        m = matcher.m if isinstance(matcher, _LLState) else matcher
        ptr = rows_np.ctypes.data + row * rows_np.strides[0]
        m.unsafe_compute_mask_ptr(ptr, rows_np.shape[1] * 4)

    def forced_bytes(self, matcher) -> bytes:
        return bytes(matcher.m.compute_ff_bytes())

    def rollback(self, matcher, n: int) -> None:
        if matcher.ended and matcher.free_stop:
            n -= 1  # the stop token is not in llguidance's history
        if n:
            matcher.m.rollback(n)
        matcher.ended = False  # a stop token is always the last one

    def accept(self, matcher, tokens: Sequence[int]) -> None:
        for tok in tokens:
            if not self.accept_one(matcher, tok):
                raise MatcherStateError(
                    f"llguidance rejected verified token {tok}: {matcher.m.get_error()}"
                )

    def accept_one(self, matcher, tok: int) -> bool:
        stop = tok in self.stop_ids
        # a stop token consumed where the grammar had already stopped (nothing but the stop
        # token could follow) is not recorded: rollback(1) would undo the token before it
        matcher.free_stop = stop and matcher.m.is_stopped()
        ok = bool(matcher.m.consume_token(tok))
        matcher.ended = ok and stop
        return ok

    def is_terminated(self, matcher) -> bool:
        return matcher.ended


class _LLState:
    """An ``LLMatcher``, whether it consumed a stop token (llguidance reports the same
    ``is_stopped()`` before and after the end-of-sequence token), and whether that token
    is missing from its rollback history (consumed in an already stopped state)."""

    __slots__ = ("m", "ended", "free_stop")

    def __init__(self, m) -> None:
        self.m = m
        self.ended = False
        self.free_stop = False


def _structural_tag_lark(tag: dict) -> str:
    """A Lark grammar for the demo's tool-call tags: ``{"type": "structural_tag", "format":
    {"type": "tag", "begin": ..., "content": {"type": "json_schema", "json_schema": ...},
    "end": ...}}`` (the one shape the demo's requests use)."""
    fmt = tag.get("format", {})
    content = fmt.get("content", {})
    if fmt.get("type") != "tag" or content.get("type") != "json_schema":
        raise ArgumentError(
            "llguidance: only tag(begin, json_schema, end) structural tags are mapped"
        )
    schema = dict(content["json_schema"])
    schema["x-guidance"] = {
        "whitespace_flexible": False,
        "item_separator": _SEPARATORS[0],
        "key_separator": _SEPARATORS[1],
    }
    return (
        f"start: {json.dumps(fmt['begin'])} body {json.dumps(fmt['end'])}\n"
        f"body: %json {json.dumps(schema)}\n"
    )


# ------------------------------------------------------------------------------ forced


def greedy_tokens(forced: bytes, table: dict[bytes, int], max_len: int) -> list[int]:
    """``forced`` cut by greedy longest match into token ids (every byte of a byte-level
    vocabulary is a token; a byte without one ends the cut)."""
    out, pos = [], 0
    while pos < len(forced):
        for n in range(min(max_len, len(forced) - pos), 0, -1):
            tid = table.get(forced[pos : pos + n])
            if tid is not None:
                out.append(tid)
                pos += n
                break
        else:
            break
    return out


def extend_with_forced(
    engine: _PeerEngine, matchers, parents, next_token, next_sibling, draft, budget: int, rows
):
    """Grammar-forced nodes through a peer engine's own matcher calls (see the module notes).

    Fills the drafted nodes' rows with :meth:`MaskEngine.fill` (stride ``M = N + budget``),
    then at every effective leaf in depth-first order walks the forced continuation: forced
    bytes cut by greedy longest match, else a single allowed token, each new node's mask
    filled at its position; every matcher is rolled back to where it started.

    Returns
    -------
    draft, parents, next_token, next_sibling : int64 ndarray [B, M]
    """
    from treegram.spec import links_from_parents

    b, n = draft.shape
    m_nodes = n + budget
    engine.fill(matchers, next_token, next_sibling, draft, rows, m_nodes)
    rows_np = rows.numpy()
    table, max_len = engine.token_table()
    stops = engine.stop_ids
    out_draft = np.zeros((b, m_nodes), dtype=np.int64)
    out_draft[:, :n] = draft
    out_parents = np.full((b, m_nodes), -1, dtype=np.int64)
    out_parents[:, :n] = parents
    for i, matcher in enumerate(matchers):
        if engine.is_terminated(matcher) or budget == 0:
            continue
        base = i * m_nodes
        count = n
        # depth-first over reachable nodes: (node, tokens from the root to it)
        stack: list[tuple[int, list[int]]] = [(0, [])]
        while stack and count < m_nodes:
            node, path = stack.pop()
            if path and path[-1] in stops:  # the matcher stops here: nothing below
                continue
            row = rows_np[base + node]
            kids = []
            child = int(next_token[i, node])
            while child != -1:
                if _bit(row, int(draft[i, child])):
                    kids.append(child)
                child = int(next_sibling[i, child])
            if kids:
                for child in reversed(kids):
                    stack.append((child, [*path, int(draft[i, child])]))
                continue
            # an effective leaf: walk to it, append its forced chain, walk back
            for tok in path:
                engine.accept_one(matcher, tok)
            taken = 0
            parent, cur_row = node, base + node
            while count < m_nodes:
                toks = greedy_tokens(engine.forced_bytes(matcher), table, max_len)
                if not toks:
                    allowed = np.flatnonzero(
                        np.unpackbits(rows_np[cur_row].view(np.uint8), bitorder="little")
                    )
                    if len(allowed) != 1 or allowed[0] >= engine.vocab_size:
                        break
                    toks = [int(allowed[0])]
                ended = False
                for tok in toks:
                    if count >= m_nodes:
                        break
                    if not engine.accept_one(matcher, tok):  # pragma: no cover - engine bug
                        raise MatcherStateError(f"{engine.name} rejected forced token {tok}")
                    taken += 1
                    out_draft[i, count] = tok
                    out_parents[i, count] = parent
                    parent, cur_row = count, base + count
                    count += 1
                    if engine.is_terminated(matcher):
                        ended = True
                        break
                    engine.fill_row(matcher, rows_np, cur_row)
                if ended:
                    break
            engine.rollback(matcher, taken + len(path))
    nt, ns = links_from_parents(out_parents)
    return out_draft, out_parents, nt, ns


def make_mask_engine(
    name: str, info, *, llguidance_tokenizer: Any = None, max_threads=1, cache: bool = True
):
    """The mask engine ``name`` (one of :data:`ENGINES`) over vocabulary ``info``.

    Parameters
    ----------
    name : str
    info : treegram.TokenizerInfo
    llguidance_tokenizer : str or llguidance.TokenizerWrapper, optional
        What ``llguidance.LLTokenizer`` builds its vocabulary from (a tokenizer's JSON).
    max_threads : int or "auto"
        treegram's batch worker threads.
    cache : bool, default True
        Keep compiled grammars (treegram's and xgrammar's compiler caches; llguidance has
        none: its matcher builds its parser).

    Raises
    ------
    ArgumentError
        Unknown name, or llguidance without ``llguidance_tokenizer``.
    MissingDependencyError
        The peer package is not installed.
    """
    if name == "treegram":
        return TreegramEngine(info, max_threads=max_threads, cache=cache)
    if name == "xgrammar":
        return XGrammarEngine(info, cache=cache)
    if name == "llguidance":
        if llguidance_tokenizer is None:
            raise ArgumentError("the llguidance mask engine needs the tokenizer (its JSON)")
        return LLGuidanceEngine(info, llguidance_tokenizer)
    raise ArgumentError(f"mask engine must be one of {ENGINES}, got {name!r}")
