"""Validation and conversion of draft-tree inputs (numpy or CPU torch) for traversals."""

from __future__ import annotations

import sys

import numpy as np

from ..errors import DraftTreeError
from ..kernels import _tree

__all__ = ["as_index_array", "check_draft_trees"]


def as_index_array(values, name: str) -> np.ndarray:
    """``values`` as a C-contiguous int64 numpy array (no copy when it already is one).

    Raises
    ------
    DraftTreeError
        Not an integer array, or a tensor that is not on the CPU.
    """
    if not isinstance(values, np.ndarray):
        torch = sys.modules.get("torch")
        if torch is not None and isinstance(values, torch.Tensor):
            if values.device.type != "cpu":
                raise DraftTreeError(f"{name} must be on the CPU, got a tensor on {values.device}")
            values = values.detach().numpy()
        else:
            values = np.asarray(values)
            if values.size == 0 and values.dtype.kind == "f":
                values = values.astype(np.int64)  # np.asarray([]) is float64
    if values.dtype.kind not in "iu":
        raise DraftTreeError(f"{name} must be an integer array, got dtype {values.dtype}")
    if values.dtype != np.int64 or not values.flags.c_contiguous:
        values = np.ascontiguousarray(values, dtype=np.int64)
    return values


def check_draft_trees(next_token: np.ndarray, next_sibling: np.ndarray, roots: np.ndarray,
                      names: tuple[str, str] = ("retrieve_next_token",
                                                "retrieve_next_sibling")) -> None:
    """Raise DraftTreeError unless the [T, N] link arrays form valid trees from ``roots``.

    ``roots[k]`` is the root of tree ``k`` (tree 0 for every k when T == 1).
    """
    n = next_token.shape[1]
    seen = np.empty(n, dtype=np.bool_)
    stack = np.empty(n + 1, dtype=np.int64)
    report = np.zeros(3, dtype=np.int64)
    code = _tree.check_trees(next_token, next_sibling, roots, seen, stack, report)
    if code == _tree.LINKS_OK:
        return
    k, node, src = (int(v) for v in report)
    nt_name, ns_name = names
    if code == _tree.LINKS_RANGE:
        raise DraftTreeError(
            f"{nt_name}/{ns_name} of node {src} (tree {k}) is {node}, outside [-1, {n})"
        )
    if code == _tree.LINKS_ROOT_RANGE:
        raise DraftTreeError(f"root position {node} of request {k} is outside [0, {n})")
    if code == _tree.LINKS_ROOT_SIBLING:
        raise DraftTreeError(
            f"{ns_name}[{src}] = {node} (request {k}): the root must have no sibling"
        )
    via = nt_name if code == _tree.LINKS_REVISIT_CHILD else ns_name
    raise DraftTreeError(
        f"node {node} of request {k} is reached twice (again via {via}[{src}]): "
        "the links do not form a tree"
    )
