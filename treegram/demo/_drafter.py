"""An n-gram (prompt-lookup) drafter that proposes branchy draft trees."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["NGramDrafter"]


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
