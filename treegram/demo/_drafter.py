"""Drafters: n-gram (prompt-lookup) trees and self-speculative (early-exit) trees.

A drafter proposes, for every active request of a step, a draft tree rooted at the request's
last verified token, as ``draft [B, N]`` tokens and ``parents [B, N]`` (every parent
precedes its children; padding nodes are isolated roots with parent -1).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["DraftContext", "NGramDrafter", "SelfDrafter"]


@dataclass
class DraftContext:
    """What a model-based drafter may read during a step.

    Attributes
    ----------
    model : TinyCausalLM or LlamaModel
    cache : KVCache
        The verified prefix of every request (the root token is not in it yet).
    rows : list of int
        The cache rows of the step's requests, in order.
    """

    model: Any
    cache: Any
    rows: list[int]


def _pack(
    trees: Sequence[tuple[list[int], list[int]]], width: int
) -> tuple[np.ndarray, np.ndarray]:
    draft = np.zeros((len(trees), width), dtype=np.int64)
    parents = np.full((len(trees), width), -1, dtype=np.int64)
    for i, (toks, pars) in enumerate(trees):
        draft[i, : len(toks)] = toks
        parents[i, : len(pars)] = pars
    return draft, parents


class NGramDrafter:
    """Propose a draft tree from the earlier continuations of the current suffix.

    For ``n = max_ngram, ..., 1`` the last ``n`` tokens of the history (prompt + generated
    tokens) are looked up in the history; the tokens that followed each earlier occurrence
    (most recent first, longer matches first) are merged into a trie rooted at the last
    token. Different continuations share their common prefix and branch where they differ,
    so the tree is branchy wherever the history is ambiguous. If no n-gram matches, a chain
    following the most frequent successor of each token (a bigram table of the history)
    is proposed instead; if room is left after the n-gram continuations, the bigram chain
    is merged in as one more candidate.

    Parameters
    ----------
    max_nodes : int, default 16
        Most nodes of a tree, the root included.
    max_ngram : int, default 3
        Longest suffix looked up.
    max_depth : int, default 8
        Longest continuation (tree depth below the root).
    max_candidates : int, default 8
        Most distinct continuations merged into one tree.
    """

    def __init__(
        self, max_nodes: int = 16, max_ngram: int = 3, max_depth: int = 8, max_candidates: int = 8
    ) -> None:
        if max_nodes < 1 or max_ngram < 1 or max_depth < 1 or max_candidates < 1:
            raise ValueError("max_nodes, max_ngram, max_depth and max_candidates must be >= 1")
        self.max_nodes = max_nodes
        self.max_ngram = max_ngram
        self.max_depth = max_depth
        self.max_candidates = max_candidates

    def _ngram_candidates(self, h: np.ndarray) -> list[tuple[int, ...]]:
        found: list[tuple[int, ...]] = []
        seen: set[tuple[int, ...]] = set()
        for n in range(min(self.max_ngram, len(h) - 1), 0, -1):
            windows = np.lib.stride_tricks.sliding_window_view(h[:-1], n)
            hits = np.flatnonzero((windows == h[-n:]).all(axis=1))
            for start in hits[::-1]:  # most recent occurrence first
                cont = tuple(int(t) for t in h[start + n : start + n + self.max_depth])
                if cont and cont not in seen:
                    seen.add(cont)
                    found.append(cont)
                    if len(found) >= self.max_candidates:
                        return found
        return found

    def _bigram_chain(self, h: np.ndarray) -> tuple[int, ...]:
        successors: dict[int, dict[int, int]] = {}
        for a, b in zip(h[:-1].tolist(), h[1:].tolist(), strict=True):
            counts = successors.setdefault(a, {})
            counts[b] = counts.get(b, 0) + 1
        chain, tok = [], int(h[-1])
        while len(chain) < self.max_depth and tok in successors:
            counts = successors[tok]
            tok = max(counts, key=counts.__getitem__)  # ties: first seen
            chain.append(tok)
        return tuple(chain)

    def propose(self, history: Sequence[int]) -> tuple[list[int], list[int]]:
        """A draft tree whose root is the last token of ``history``.

        Parameters
        ----------
        history : sequence of int
            Prompt and generated tokens; the last one is the root (last verified token).

        Returns
        -------
        tokens : list of int
            Token of each node; node 0 is the root.
        parents : list of int
            Parent of each node (-1 for the root); every parent precedes its children.
        """
        h = np.asarray(history, dtype=np.int64)
        if h.ndim != 1 or len(h) == 0:
            raise ValueError("history must be a non-empty 1-D sequence of token ids")
        candidates = self._ngram_candidates(h)
        chain = self._bigram_chain(h)
        if chain and chain not in candidates:
            candidates.append(chain)
        tokens, parents = [int(h[-1])], [-1]
        children: dict[tuple[int, int], int] = {}
        for cont in candidates:
            node = 0
            for tok in cont:
                nxt = children.get((node, tok))
                if nxt is None:
                    if len(tokens) >= self.max_nodes:
                        break
                    nxt = len(tokens)
                    children[(node, tok)] = nxt
                    tokens.append(tok)
                    parents.append(node)
                node = nxt
            if len(tokens) >= self.max_nodes:
                break
        return tokens, parents

    def draft_trees(
        self, histories: Sequence[Sequence[int]], context: DraftContext | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`propose` for every history: ``draft``, ``parents`` int64 ``[B, max_nodes]``
        (padding nodes are isolated roots). ``context`` is not used."""
        return _pack([self.propose(h) for h in histories], self.max_nodes)


class SelfDrafter:
    """Self-speculative draft trees: the model's first ``layers`` blocks, its final norm and
    its head propose a top-k tree (EAGLE-shaped), which the full model then verifies.

    Level by level, the nodes added at the previous level (the root first) run through the
    first ``layers`` blocks in one batched call, with tree attention over the verified prefix
    (its keys and values for those blocks are the full model's, read from the cache) and
    over their draft ancestors; each gets its ``top_k`` most likely next tokens, and of all
    these candidates the ``width`` with the highest cumulative log-probability become the
    next level, until ``depth`` levels or ``max_nodes`` nodes.

    Parameters
    ----------
    layers : int
        Blocks of the early-exit draft (``1 <= layers <= n_layers``).
    max_nodes : int, default 16
        Most nodes of a tree, the root included.
    depth : int, default 4
    top_k : int, default 4
    width : int, default 4
        Nodes kept per level (over all branches).
    """

    def __init__(
        self, layers: int, max_nodes: int = 16, depth: int = 4, top_k: int = 4, width: int = 4
    ) -> None:
        if min(layers, max_nodes, depth, top_k, width) < 1:
            raise ValueError("layers, max_nodes, depth, top_k and width must be >= 1")
        self.layers = layers
        self.max_nodes = max_nodes
        self.depth = depth
        self.top_k = top_k
        self.width = width

    def draft_trees(
        self, histories: Sequence[Sequence[int]], context: DraftContext | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Trees for every history (``draft``, ``parents`` int64 ``[B, max_nodes]``).

        Raises
        ------
        ValueError
            Without a ``context``.
        """
        import torch

        if context is None:
            raise ValueError("SelfDrafter needs a DraftContext (model, cache, rows)")
        b, n_max = len(histories), self.max_nodes
        draft = np.zeros((b, n_max), dtype=np.int64)
        parents = np.full((b, n_max), -1, dtype=np.int64)
        draft[:, 0] = [h[-1] for h in histories]
        if n_max == 1:
            return draft, parents
        depth = np.zeros((b, n_max), dtype=np.int64)
        score = np.zeros((b, n_max))
        anc = np.zeros((b, n_max, n_max), dtype=bool)  # anc[r, i, j]: j is an ancestor of i
        count = np.ones(b, dtype=np.int64)
        frontier = [[0] for _ in range(b)]
        past_k, past_v, valid = context.cache.past(context.rows)
        past_k, past_v = past_k[: self.layers], past_v[: self.layers]
        base = context.cache.lengths[np.asarray(context.rows)]
        done_nodes: list[list[int]] = [[] for _ in range(b)]  # nodes whose K/V are in dk/dv
        dk = dv = None
        for _level in range(self.depth):
            f = max(len(fr) for fr in frontier)
            if f == 0:
                break
            toks = np.zeros((b, f), dtype=np.int64)
            pos = np.zeros((b, f), dtype=np.int64)
            n_prev = len(done_nodes[0])
            prev_mask = np.zeros((b, f, n_prev), dtype=bool)
            for r in range(b):
                done = np.asarray(done_nodes[r], dtype=np.int64)
                real = done >= 0  # -1: a padding entry of a shorter frontier
                for j, node in enumerate(frontier[r]):
                    toks[r, j] = draft[r, node]
                    pos[r, j] = base[r] + depth[r, node]
                    prev_mask[r, j, real] = anc[r, node, done[real]]
            mask_past = torch.cat(
                [valid[:, None, :].expand(b, f, -1), torch.from_numpy(prev_mask)], dim=2
            )
            if dk is None:
                pk, pv = past_k, past_v
            else:
                pk, pv = torch.cat([past_k, dk], dim=3), torch.cat([past_v, dv], dim=3)
            eye = torch.eye(f, dtype=torch.bool)[None].expand(b, f, f)
            with torch.inference_mode():
                logits, k, v = context.model.forward(
                    torch.from_numpy(toks),
                    torch.from_numpy(pos),
                    eye,
                    past=(pk, pv, mask_past),
                    layers=self.layers,
                )
                logp = torch.log_softmax(logits.float(), dim=-1)
                top = torch.topk(logp, self.top_k, dim=-1)
            k, v = k.to(past_k.dtype), v.to(past_v.dtype)
            dk = k if dk is None else torch.cat([dk, k], dim=3)
            dv = v if dv is None else torch.cat([dv, v], dim=3)
            top_lp, top_tok = top.values.numpy(), top.indices.numpy()
            new_frontier: list[list[int]] = []
            for r in range(b):
                n_front = len(frontier[r])
                done_nodes[r].extend(frontier[r] + [-1] * (f - n_front))
                cands = [
                    (score[r, node] + float(top_lp[r, j, c]), node, int(top_tok[r, j, c]))
                    for j, node in enumerate(frontier[r])
                    for c in range(self.top_k)
                ]
                cands.sort(key=lambda x: -x[0])
                room = min(self.width, n_max - int(count[r]))
                added = []
                for sc, par, tok in cands[: max(room, 0)]:
                    node = int(count[r])
                    draft[r, node], parents[r, node] = tok, par
                    depth[r, node] = depth[r, par] + 1
                    score[r, node] = sc
                    anc[r, node] = anc[r, par]
                    anc[r, node, par] = True
                    count[r] += 1
                    added.append(node)
                new_frontier.append(added)
            frontier = new_frontier
        # children must follow their siblings' order of insertion: parents precede children
        return draft, parents
