"""Graph helpers shared by the grammar layers."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numba import njit

__all__ = ["cycles_of_two_or_more", "grouped_by_key"]


@njit(nogil=True, cache=True)
def grouped_by_key(key, n):
    """Offsets ``[n + 1]`` (int64) of the values ``0..n-1`` of ``key`` and the indices of
    ``key`` grouped by value, each group in index order (a counting sort: the CSR layout of
    edges keyed by their source)."""
    m = key.shape[0]
    ptr = np.zeros(n + 1, dtype=np.int64)
    for e in range(m):
        ptr[key[e] + 1] += 1
    for s in range(n):
        ptr[s + 1] += ptr[s]
    fill = ptr[:-1].copy()
    order = np.empty(m, dtype=np.int64)
    for e in range(m):
        order[fill[key[e]]] = e
        fill[key[e]] += 1
    return ptr, order


def cycles_of_two_or_more(successors: Sequence[Sequence[int]]) -> list[list[int]]:
    """The strongly connected components with at least two nodes (self loops alone do not
    count), found by an iterative Tarjan walk (no recursion, whatever the graph's depth).

    Parameters
    ----------
    successors : sequence of sequences of int
        ``successors[v]``: the nodes with an edge from ``v`` (nodes are ``0..n-1``).

    Returns
    -------
    list of list of int
        One list of nodes per component, in the order Tarjan's walk closes them.
    """
    n = len(successors)
    index = [-1] * n
    low = [0] * n
    on_stack = [False] * n
    stack: list[int] = []
    out: list[list[int]] = []
    counter = 0
    for root in range(n):
        if index[root] >= 0:
            continue
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack[root] = True
        work = [(root, iter(successors[root]))]
        while work:
            v, edges = work[-1]
            descended = False
            for w in edges:
                if index[w] < 0:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack[w] = True
                    work.append((w, iter(successors[w])))
                    descended = True
                    break
                if on_stack[w]:
                    low[v] = min(low[v], index[w])
            if descended:
                continue
            work.pop()
            if work:  # v is done: pass its low link to the caller
                u = work[-1][0]
                low[u] = min(low[u], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack[w] = False
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(comp)
    return out
