"""Validation and conversion of draft-tree inputs (numpy or CPU torch) for traversals."""

from __future__ import annotations

import math
import time

import numpy as np

from .._checks import as_int64_array
from ..errors import ArgumentError, DraftTreeError, InvalidTokenIdError
from ..kernels import tree as _tree

__all__ = [
    "IndexViewCache",
    "as_index_array",
    "check_draft_input",
    "check_draft_tokens",
    "check_draft_trees",
    "deadline_ns",
    "link_arrays",
    "raise_tree_input",
]


def as_index_array(values, name: str) -> np.ndarray:
    """``values`` as a C-contiguous int64 numpy array (no copy when it already is one):
    :func:`treegram._checks.as_int64_array`, signed and unsigned integer dtypes.

    Raises
    ------
    DraftTreeError
        Not an integer array (Python ints beyond int64 make an object array), a tensor
        that is not on the CPU, or unsigned values that do not fit in int64.
    """
    return as_int64_array(values, name)


class IndexViewCache:
    """:func:`as_index_array` of the tensor last passed at each argument position of a
    call, reused while the same object keeps its memory, shape and strides (an engine may
    pass the same buffers every step; converting a torch tensor costs about a microsecond).
    Only views that share the tensor's memory are kept, so in-place writes show through.
    One entry per position, replaced whole: safe to share between threads.
    """

    __slots__ = ("_entries", "links", "_tree")

    def __init__(self, positions: int) -> None:
        self._entries: list[tuple | None] = [None] * positions
        # link_arrays' result for the views of the tensors last seen at positions 0 and 1
        self.links: tuple | None = None
        # a batch traversal's three tree tensors and what was made of them (see tree)
        self._tree: tuple | None = None

    def tree(self, draft_tokens, next_token, next_sibling, b: int) -> tuple | None:
        """What :meth:`keep_tree` kept for the same three torch tensors with unchanged
        memory, shapes and strides and the same batch size (one check instead of one
        :meth:`view` each and :func:`link_arrays`' own), else None."""
        e = self._tree
        if (
            e is not None
            and e[0] is draft_tokens
            and e[1] is next_token
            and e[2] is next_sibling
            and e[3] == b
            and draft_tokens.data_ptr() == e[4]
            and next_token.data_ptr() == e[5]
            and next_sibling.data_ptr() == e[6]
            and draft_tokens.shape == e[7]
            and next_token.shape == e[8]
            and next_sibling.shape == e[9]
            and draft_tokens.stride() == e[10]
            and next_token.stride() == e[11]
            and next_sibling.stride() == e[12]
        ):
            return e[13]
        return None

    def keep_tree(self, draft_tokens, next_token, next_sibling, b: int, made: tuple) -> None:
        """Keep ``made`` (the views of the three tensors, checked for batch size ``b``) for
        :meth:`tree`, when all three are tensors whose views share their memory (the views
        at positions 2, 0 and 1 are kept)."""
        entries = self._entries
        for k, t in ((2, draft_tokens), (0, next_token), (1, next_sibling)):
            e = entries[k]
            if e is None or e[0] is not t:  # a numpy array, or a view that copied
                return
        tensors = (draft_tokens, next_token, next_sibling)
        self._tree = (
            *tensors,
            b,
            *(t.data_ptr() for t in tensors),
            *(t.shape for t in tensors),
            *(t.stride() for t in tensors),
            made,
        )

    def view(self, k: int, values, name: str) -> np.ndarray:
        """``as_index_array(values, name)``, from the cache when possible.

        Raises
        ------
        DraftTreeError
            As :func:`as_index_array`.
        """
        if type(values) is np.ndarray:
            return as_index_array(values, name)  # no conversion to save
        e = self._entries[k]
        if (
            e is not None
            and e[0] is values
            and values.data_ptr() == e[2]
            and values.shape == e[3]
            and values.stride() == e[4]
        ):
            return e[1]
        arr = as_index_array(values, name)
        if hasattr(values, "data_ptr") and arr.size and arr.ctypes.data == values.data_ptr():
            self._entries[k] = (values, arr, values.data_ptr(), values.shape, values.stride())
        return arr


def link_arrays(
    next_token,
    next_sibling,
    b: int,
    n: int,
    names: tuple[str, str] = ("retrieve_next_token", "retrieve_next_sibling"),
    views: IndexViewCache | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """A batch call's first-child / next-sibling links as int64 [1, N] (one tree shared by
    every request) or [B, N], both the same shape (no copy when they already are int64).
    ``views``: a cache whose positions 0 and 1 keep the views of the two tensors (an
    engine passes the same buffers every step).

    Raises
    ------
    DraftTreeError
        Not integer arrays, or shapes other than ``(N,)`` / ``(B, N)``, or differing.
    """
    if views is not None and type(next_token) is not np.ndarray:
        # tensors whose views the cache checked (same memory, shape and strides): the
        # same views as last time give the same links (a numpy array may be reshaped in
        # place, so those are checked every time)
        v0 = views.view(0, next_token, names[0])
        v1 = views.view(1, next_sibling, names[1])
        last = views.links
        if last is not None and last[0] is v0 and last[1] is v1 and last[2] == (b, n, names):
            return last[3], last[4]
        nt, ns = _link_shapes((v0, v1), b, n, names)
        if type(next_sibling) is not np.ndarray:
            views.links = (v0, v1, (b, n, names), nt, ns)
        return nt, ns
    arrays = [
        as_int64_array(values, name) if views is None else views.view(k, values, name)
        for k, (name, values) in enumerate(zip(names, (next_token, next_sibling), strict=True))
    ]
    return _link_shapes(arrays, b, n, names)


def _link_shapes(arrays, b: int, n: int, names: tuple[str, str]) -> tuple[np.ndarray, np.ndarray]:
    """:func:`link_arrays` of the two arrays once converted: 1-D made [1, N], shapes checked."""
    links = []
    for name, arr in zip(names, arrays, strict=True):
        shape = arr.shape
        if arr.ndim == 1:
            arr = arr[None]
        if arr.ndim != 2 or arr.shape[1] != n or arr.shape[0] not in (1, b):
            raise DraftTreeError(f"{name} must have shape ({n},) or ({b}, {n}), got {shape}")
        links.append(arr)
    if links[0].shape != links[1].shape:
        raise DraftTreeError(
            f"{names[0]} and {names[1]} differ in shape: {links[0].shape} vs {links[1].shape}"
        )
    return links[0], links[1]


def check_draft_trees(
    next_token: np.ndarray,
    next_sibling: np.ndarray,
    roots: np.ndarray,
    names: tuple[str, str] = ("retrieve_next_token", "retrieve_next_sibling"),
) -> None:
    """Raise DraftTreeError unless the [T, N] link arrays form valid trees from ``roots``.

    ``roots[k]`` is the root of tree ``k`` (tree 0 for every k when T == 1).
    """
    n = next_token.shape[1]
    seen = np.empty(n, dtype=np.bool_)
    stack = np.empty(n + 1, dtype=np.int64)
    report = np.zeros(3, dtype=np.int64)
    code = _tree.check_trees(next_token, next_sibling, roots, seen, stack, report)
    if code != _tree.LINKS_OK:
        _raise_links(code, report, n, names)


def check_scratch(n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Scratch of the tree checks for trees of up to ``n`` nodes: seen flags, a stack and
    a report."""
    return np.empty(n, dtype=np.bool_), np.empty(n + 1, dtype=np.int64), np.zeros(3, np.int64)


def check_draft_input(
    next_token: np.ndarray,
    next_sibling: np.ndarray,
    roots: np.ndarray,
    draft: np.ndarray,
    vocab_size: int,
    *,
    one_d: bool = False,
    scratch: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
) -> None:
    """:func:`check_draft_trees` and then :func:`check_draft_tokens` (``draft`` [T, N], row
    ``k`` for request ``k``) in one kernel call; the same errors. ``one_d``: the arrays
    are one tree's, int64 [N] (a scalar traversal's arguments; the token error names
    ``draft_tokens[j]``). ``scratch`` is :func:`check_scratch` of at least N nodes
    (default: allocated here)."""
    n = next_token.shape[-1]
    seen, stack, report = check_scratch(n) if scratch is None else scratch
    check = _tree.check_tree_input_1d if one_d else _tree.check_tree_input
    code = check(next_token, next_sibling, roots, draft, vocab_size, seen, stack, report)
    if code != _tree.LINKS_OK:
        raise_tree_input(code, report, draft, vocab_size, one_d=one_d)


def raise_tree_input(
    code: int, report: np.ndarray, draft: np.ndarray, vocab_size: int, *, one_d: bool = False
) -> None:
    """Raise the error of a ``LINKS_*`` code other than ``LINKS_OK`` that
    ``kernels.tree.check_tree_input`` (or a kernel that runs it first) returned, as
    :func:`check_draft_input` does."""
    if code == _tree.LINKS_TOKEN:
        k, j = int(report[0]), int(report[1])
        where = f"draft_tokens[{j}]" if one_d else f"draft_tokens[{k}, {j}]"
        bad = int(draft[j]) if one_d else int(draft[k, j])
        raise InvalidTokenIdError(f"{where} = {bad} is not a token id in [0, {vocab_size})")
    names = ("retrieve_next_token", "retrieve_next_sibling")
    _raise_links(code, report, draft.shape[-1], names)


def _raise_links(code: int, report: np.ndarray, n: int, names: tuple[str, str]) -> None:
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


def check_draft_tokens(
    draft: np.ndarray,
    roots: np.ndarray,
    vocab_size: int,
    name: str = "draft_tokens",
    *,
    one_d: bool = False,
) -> None:
    """Raise InvalidTokenIdError unless every token of ``draft`` [K, N] is in
    ``[0, vocab_size)``, the root node ``roots[k]`` of row ``k`` excepted (it holds the last
    verified token, which the matcher already accepted and the traversal never reads)."""
    report = np.empty(2, dtype=np.int64)
    if _tree.check_tokens(draft, roots, vocab_size, report):
        k, j = int(report[0]), int(report[1])
        where = f"{name}[{j}]" if one_d else f"{name}[{k}, {j}]"
        raise InvalidTokenIdError(
            f"{where} = {int(draft[k, j])} is not a token id in [0, {vocab_size})"
        )


def past_deadline(deadline: int) -> bool:
    """Whether the monotonic clock (the kernels' ``CLOCK_MONOTONIC``) is past ``deadline``
    (nanoseconds; 0 means no deadline)."""
    return deadline > 0 and time.monotonic_ns() > deadline


def deadline_ns(time_threshold, name: str = "time_threshold") -> int:
    """The monotonic-clock deadline of a traversal, 0 for none (``time_threshold <= 0`` or
    infinite).

    Raises
    ------
    ArgumentError
        ``time_threshold`` is not a real number, or is NaN.
    """
    if isinstance(time_threshold, (bool, np.bool_)) or not isinstance(
        time_threshold, (int, float, np.integer, np.floating)
    ):
        raise ArgumentError(f"{name} must be a number of seconds, got {time_threshold!r}")
    try:
        seconds = float(time_threshold)
    except OverflowError:  # an int beyond float range
        seconds = math.inf if time_threshold > 0 else -math.inf
    if math.isnan(seconds):
        raise ArgumentError(f"{name} must be a number of seconds, got NaN")
    if seconds <= 0 or seconds > 1e9:  # beyond ~30 years: no limit (and no int64 overflow)
        return 0
    return time.monotonic_ns() + int(seconds * 1e9)
