"""Draft-tree structure on the host: parents, first-child/next-sibling links, tree masks.

Conventions (SGLang / xgrammar; see "The draft-tree layout" in ``docs/engine_integration.md``):

* ``parents[i]`` is the parent of node ``i`` or -1 for a root. Nodes are numbered so that a
  parent precedes its children (``-1 <= parents[i] < i``), as in every engine's draft tree
  and as a tree attention mask implies; node 0 is therefore always a root.
* ``next_token[i]`` is the first child of ``i``, ``next_sibling[i]`` its next sibling, -1 for
  none; children are ordered by increasing index.
* ``mask[i, j]`` is true iff ``j`` is an ancestor-or-self of ``i``; the parent of ``i`` is the
  largest ``j < i`` with ``mask[i, j]`` true, exactly as the engines' GPU kernels build it.

Every function takes one tree (``[N]``, mask ``[N, N]``) or a batch (``[B, N]``, mask
``[B, N, N]``) as numpy arrays or CPU torch tensors (torch is never imported here), returns
numpy arrays with the same leading shape, and raises :class:`~treegram.errors.DraftTreeError`
(a ``ValueError``) naming the argument for malformed input. The loops run in numba kernels
(``treegram.kernels._tree``) that release the GIL.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from treegram._checks import as_index, as_int64_array, as_numpy
from treegram.errors import DraftTreeError
from treegram.kernels import tree as _tree

__all__ = [
    "links_from_parents",
    "parents_from_tree_mask",
    "links_from_tree_mask",
    "tree_mask_from_parents",
    "depths_from_parents",
    "positions_from_parents",
    "validate_tree",
]


# -- input checks ----------------------------------------------------------------------------


def _index_str(name: str, idx: tuple[int, ...], squeeze: bool) -> str:
    idx = idx[1:] if squeeze else idx
    return f"{name}[{', '.join(str(int(k)) for k in idx)}]"


def _as_index_batch(x: Any, name: str) -> tuple[np.ndarray, bool]:
    """A signed-integer ``[N]`` or ``[B, N]`` array as C-contiguous int64 ``[B, N]``, plus
    whether the input was one tree (1-D)."""
    a = as_int64_array(x, name, signed=True)
    if a.ndim not in (1, 2):
        raise DraftTreeError(
            f"{name}: expected shape [N] or [B, N], got {a.ndim} dimensions {tuple(a.shape)}"
        )
    squeeze = a.ndim == 1
    return (a[None, :] if squeeze else a), squeeze


def _check_parents(x: Any, name: str = "parents") -> tuple[np.ndarray, bool]:
    parents, squeeze = _as_index_batch(x, name)
    n = parents.shape[1]
    bad = (parents < -1) | (parents >= np.arange(n, dtype=np.int64))
    if bad.any():
        where = tuple(np.argwhere(bad)[0])
        value = int(parents[where])
        raise DraftTreeError(
            f"{_index_str(name, where, squeeze)} = {value}: a parent must be -1 (root) or a "
            f"node that precedes its child (-1 <= parent < {int(where[1])})"
        )
    return parents, squeeze


def _check_mask(x: Any, name: str = "mask") -> tuple[np.ndarray, bool]:
    a = as_numpy(x, name)
    if a.dtype.kind not in "biu":
        raise DraftTreeError(f"{name}: expected a bool or integer array, got dtype {a.dtype}")
    if a.ndim not in (2, 3) or a.shape[-1] != a.shape[-2]:
        raise DraftTreeError(f"{name}: expected shape [N, N] or [B, N, N], got {tuple(a.shape)}")
    squeeze = a.ndim == 2
    a3 = a[None] if squeeze else a
    if a3.dtype != np.bool_:
        a3 = a3 != 0
    return np.ascontiguousarray(a3), squeeze


def _out(a: np.ndarray, squeeze: bool) -> np.ndarray:
    return a[0] if squeeze else a


# -- conversions -----------------------------------------------------------------------------


def links_from_parents(parents: Any) -> tuple[np.ndarray, np.ndarray]:
    """First-child / next-sibling links of trees given by parent pointers.

    Parameters
    ----------
    parents : array_like of int, shape [N] or [B, N]
        ``parents[..., i]`` is the parent of node ``i`` or -1 for a root, with
        ``-1 <= parents[..., i] < i``. Signed integer dtype; numpy array or CPU tensor.

    Returns
    -------
    next_token : numpy.ndarray of int64, shape like ``parents``
        First (lowest-index) child of each node, -1 for a leaf.
    next_sibling : numpy.ndarray of int64, shape like ``parents``
        Next (higher-index) child of the same parent, -1 for the last child and for roots.

    Raises
    ------
    DraftTreeError
        ``parents`` has the wrong dtype or number of dimensions, or an entry out of range.
    """
    p, squeeze = _check_parents(parents)
    next_token, next_sibling = _links(p)
    return _out(next_token, squeeze), _out(next_sibling, squeeze)


def _links(parents: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Links of checked [B, N] parent arrays."""
    next_token = np.empty_like(parents)
    next_sibling = np.empty_like(parents)
    _tree.links_from_parents(parents, next_token, next_sibling)
    return next_token, next_sibling


def _parents(mask: np.ndarray) -> np.ndarray:
    """Parents of checked [B, N, N] masks."""
    parents = np.empty(mask.shape[:2], dtype=np.int64)
    _tree.parents_from_mask(mask, parents)
    return parents


def parents_from_tree_mask(mask: Any) -> np.ndarray:
    """Parent pointers from a tree attention mask.

    Parameters
    ----------
    mask : array_like of bool or int, shape [N, N] or [B, N, N]
        ``mask[..., i, j]`` nonzero iff ``j`` is an ancestor-or-self of ``i``.

    Returns
    -------
    parents : numpy.ndarray of int64, shape [N] or [B, N]
        The largest ``j < i`` with ``mask[..., i, j]`` set, -1 if there is none. Only the
        strictly lower triangle is read, as in the engines' GPU kernels; the mask is not
        otherwise checked for consistency.

    Raises
    ------
    DraftTreeError
        ``mask`` has the wrong dtype or shape.
    """
    m, squeeze = _check_mask(mask)
    return _out(_parents(m), squeeze)


def links_from_tree_mask(mask: Any) -> tuple[np.ndarray, np.ndarray]:
    """First-child / next-sibling links from a tree attention mask.

    ``links_from_parents(parents_from_tree_mask(mask))``: the same links that SGLang's GPU
    tree-building kernels produce, computed on the host so no device read-back is needed.

    Parameters
    ----------
    mask : array_like of bool or int, shape [N, N] or [B, N, N]
        ``mask[..., i, j]`` nonzero iff ``j`` is an ancestor-or-self of ``i``.

    Returns
    -------
    next_token, next_sibling : numpy.ndarray of int64, shape [N] or [B, N]

    Raises
    ------
    DraftTreeError
        ``mask`` has the wrong dtype or shape.
    """
    m, squeeze = _check_mask(mask)
    next_token, next_sibling = _links(_parents(m))
    return _out(next_token, squeeze), _out(next_sibling, squeeze)


def tree_mask_from_parents(parents: Any) -> np.ndarray:
    """The tree attention mask of trees given by parent pointers.

    Parameters
    ----------
    parents : array_like of int, shape [N] or [B, N]
        As for :func:`links_from_parents`.

    Returns
    -------
    mask : numpy.ndarray of bool, shape [N, N] or [B, N, N]
        ``mask[..., i, j]`` true iff ``j`` is an ancestor-or-self of ``i`` (lower triangular,
        diagonal set).

    Raises
    ------
    DraftTreeError
        ``parents`` is malformed.
    """
    p, squeeze = _check_parents(parents)
    mask = np.zeros((p.shape[0], p.shape[1], p.shape[1]), dtype=np.bool_)
    _tree.mask_from_parents(p, mask)
    return _out(mask, squeeze)


def depths_from_parents(parents: Any) -> np.ndarray:
    """Depth of every node: the number of its ancestors (0 for a root).

    Parameters
    ----------
    parents : array_like of int, shape [N] or [B, N]
        As for :func:`links_from_parents`.

    Returns
    -------
    depth : numpy.ndarray of int64, shape like ``parents``

    Raises
    ------
    DraftTreeError
        ``parents`` is malformed.
    """
    p, squeeze = _check_parents(parents)
    depth = np.empty_like(p)
    _tree.depths_from_parents(p, depth)
    return _out(depth, squeeze)


def positions_from_parents(parents: Any, offset: Any = 0) -> np.ndarray:
    """Sequence positions of draft-tree nodes: ``depth + offset``.

    Parameters
    ----------
    parents : array_like of int, shape [N] or [B, N]
        As for :func:`links_from_parents`.
    offset : int or array_like of int, shape [] or [B]
        Position of each tree's root (e.g. the verified sequence length); one per tree
        for a batch, a scalar for one tree or for all trees.

    Returns
    -------
    positions : numpy.ndarray of int64, shape like ``parents``

    Raises
    ------
    DraftTreeError
        ``parents`` is malformed, or ``offset`` is not an integer scalar or a ``[B]`` array.
    """
    p, squeeze = _check_parents(parents)
    off = as_numpy(offset, "offset")
    if off.dtype.kind not in "iu":
        raise DraftTreeError(f"offset: expected integers, got dtype {off.dtype}")
    if off.ndim == 0:
        off = np.full(p.shape[0], int(off), dtype=np.int64)
    elif squeeze or off.shape != (p.shape[0],):
        want = "a scalar" if squeeze else f"a scalar or shape [{p.shape[0]}]"
        raise DraftTreeError(f"offset: expected {want}, got shape {tuple(off.shape)}")
    depth = np.empty_like(p)
    _tree.depths_from_parents(p, depth)
    depth += off.astype(np.int64)[:, None]
    return _out(depth, squeeze)


# -- validation ------------------------------------------------------------------------------

_LINK_PROBLEMS = {
    _tree.LINKS_REVISIT_CHILD: "next_token",
    _tree.LINKS_REVISIT_SIBLING: "next_sibling",
}


def validate_tree(next_token: Any, next_sibling: Any, *, root: int = 0) -> None:
    """Check first-child / next-sibling links before a traversal uses them.

    Parameters
    ----------
    next_token, next_sibling : array_like of int, shape [N] or [B, N]
        Links as produced by :func:`links_from_parents`; same shape, signed integer dtype,
        entries in ``[-1, N)``.
    root : int, optional
        The node holding the last verified token, ``0 <= root < N``; the same for every tree.

    Raises
    ------
    DraftTreeError
        With a message naming the argument for: a non-integer dtype, a wrong number of
        dimensions, shapes that differ, an empty tree, ``root`` out of range, a link out of
        range, the root having a next sibling (it would never be visited), or a node reached
        twice from the root (two parents, or a cycle).

    Notes
    -----
    Nodes unreachable from the root are allowed: a traversal never visits them and their mask
    rows stay zero. Range checks are vectorised; the reachability walk is O(N) per tree.
    """
    nt, squeeze = _as_index_batch(next_token, "next_token")
    ns, squeeze_ns = _as_index_batch(next_sibling, "next_sibling")
    shape_nt = nt.shape[1:] if squeeze else nt.shape
    shape_ns = ns.shape[1:] if squeeze_ns else ns.shape
    if shape_nt != shape_ns:
        raise DraftTreeError(
            f"next_sibling: shape {shape_ns} does not match next_token's shape {shape_nt}"
        )
    n = nt.shape[1]
    root = as_index(root, "root", DraftTreeError, "an int")
    if n == 0:
        raise DraftTreeError("next_token: the tree is empty (N = 0); it needs a root node")
    if not 0 <= root < n:
        raise DraftTreeError(f"root: {root} is out of range [0, {n})")
    for name, a in (("next_token", nt), ("next_sibling", ns)):
        bad = (a < -1) | (a >= n)
        if bad.any():
            where = tuple(np.argwhere(bad)[0])
            raise DraftTreeError(
                f"{_index_str(name, where, squeeze)} = {int(a[where])} is out of range [-1, {n})"
            )
    seen = np.empty(n, dtype=np.bool_)
    stack = np.empty(n + 1, dtype=np.int64)
    report = np.zeros(3, dtype=np.int64)
    roots = np.full(nt.shape[0], root, dtype=np.int64)
    code = _tree.check_trees(nt, ns, roots, seen, stack, report)
    if code == _tree.LINKS_OK:
        return
    b, node, src = (int(v) for v in report)
    tree = "" if squeeze else f" in tree {b}"
    if code == _tree.LINKS_ROOT_SIBLING:
        raise DraftTreeError(
            f"{_index_str('next_sibling', (b, src), squeeze)} = {node}: the root node {root} "
            f"must not have a sibling{tree}"
        )
    link = _LINK_PROBLEMS[code]
    what = "leads back to the root" if node == root else "reaches a node a second time"
    raise DraftTreeError(
        f"{_index_str(link, (b, src), squeeze)} = {node} {what}{tree}: the links contain a "
        f"cycle or a node with two parents"
    )
