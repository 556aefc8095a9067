"""The token trie of a sorted vocabulary, as flat arrays in depth-first (preorder) order.

Node ``k`` stands for one distinct token prefix; its bytes are the path from the root. Nodes
are numbered in the order a depth-first walk meets them, which is the sorted order of the
tokens, so

* the tokens whose bytes are exactly node ``k``'s prefix are the sorted positions
  ``[node_tok_lo[k], node_tok_hi[k])``;
* the subtree of ``k`` is the node range ``[k, node_end[k])`` and holds the sorted
  positions ``[node_first[k], node_first[node_end[k]])`` (``node_first`` has a sentinel
  entry ``n_tokens`` at index ``n_nodes``).

A walk that rejects the byte of node ``k`` jumps to ``node_end[k]`` and so decides every
token below ``k`` in one step, however many there are.
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(nogil=True, cache=True)
def build_trie(offsets, data, lcp):
    """Build the trie of sorted tokens.

    Parameters
    ----------
    offsets : int64 [n + 1]
        Byte offsets of the sorted tokens in ``data``.
    data : uint8 [total_bytes]
        Concatenated token bytes in sorted order.
    lcp : int32 [n]
        Common prefix length of each token with its predecessor.

    Returns
    -------
    node_byte : uint8 [n_nodes]
        The last byte of each node's prefix.
    node_depth : int32 [n_nodes]
        Length of each node's prefix (1 for the children of the root).
    node_end : int32 [n_nodes]
        First node after the subtree.
    node_first : int32 [n_nodes + 1]
        First sorted position in the subtree (``n`` at index ``n_nodes``).
    node_tok_lo, node_tok_hi : int32 [n_nodes]
        Sorted positions of the tokens that end exactly at the node.
    """
    n = lcp.shape[0]
    n_nodes = 0
    for i in range(n):
        n_nodes += (offsets[i + 1] - offsets[i]) - lcp[i]
    node_byte = np.zeros(n_nodes, dtype=np.uint8)
    node_depth = np.zeros(n_nodes, dtype=np.int32)
    node_end = np.full(n_nodes, n_nodes, dtype=np.int32)
    node_first = np.zeros(n_nodes + 1, dtype=np.int32)
    node_tok_lo = np.zeros(n_nodes, dtype=np.int32)
    node_tok_hi = np.zeros(n_nodes, dtype=np.int32)
    node_first[n_nodes] = n
    max_len = 0
    for i in range(n):
        ln = offsets[i + 1] - offsets[i]
        if ln > max_len:
            max_len = ln
    path = np.zeros(max_len + 1, dtype=np.int64)  # path[d]: the open node of depth d
    open_depth = 0
    k = 0
    for i in range(n):
        lo = offsets[i]
        ln = offsets[i + 1] - lo
        keep = lcp[i]
        # nodes deeper than the shared prefix end here
        while open_depth > keep:
            node_end[path[open_depth]] = k
            open_depth -= 1
        for d in range(keep + 1, ln + 1):
            node_byte[k] = data[lo + d - 1]
            node_depth[k] = d
            node_first[k] = i
            path[d] = k
            k += 1
        open_depth = ln
        last = path[ln]
        if node_tok_hi[last] == 0 and node_tok_lo[last] == 0:
            node_tok_lo[last] = i
        node_tok_hi[last] = i + 1
    return node_byte, node_depth, node_end, node_first, node_tok_lo, node_tok_hi


@njit(nogil=True, cache=True)
def subset_tokens(offsets, data, lcp, positions):
    """The sorted tokens at ``positions`` (increasing sorted positions) as ``build_trie``
    takes them: (offsets int64 [m + 1], data uint8, lcp int32 [m]).

    Two sorted tokens share the smallest common prefix of the neighbours between them, so
    each prefix length is the minimum of ``lcp`` over the skipped positions: one pass over
    the vocabulary's ``lcp`` at most, no byte comparisons.
    """
    m = positions.shape[0]
    sub_offsets = np.zeros(m + 1, dtype=np.int64)
    for i in range(m):
        p = positions[i]
        sub_offsets[i + 1] = sub_offsets[i] + offsets[p + 1] - offsets[p]
    sub_data = np.empty(sub_offsets[m], dtype=np.uint8)
    sub_lcp = np.zeros(m, dtype=np.int32)
    for i in range(m):
        p = positions[i]
        at = sub_offsets[i]
        for j in range(offsets[p], offsets[p + 1]):
            sub_data[at] = data[j]
            at += 1
        if i > 0:
            shared = lcp[p]
            for q in range(positions[i - 1] + 1, p):
                if lcp[q] < shared:
                    shared = lcp[q]
            sub_lcp[i] = shared
    return sub_offsets, sub_data, sub_lcp
