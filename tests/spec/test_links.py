"""Draft-tree links, masks, depths and validation against straightforward references."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from treegram.errors import DraftTreeError, TreegramError
from treegram.kernels import _tree
from treegram.spec import (
    depths_from_parents,
    links_from_parents,
    links_from_tree_mask,
    parents_from_tree_mask,
    positions_from_parents,
    tree_mask_from_parents,
    validate_tree,
)

# ---------------------------------------------------------------- references


def ref_links(parents):
    n = len(parents)
    children = [[] for _ in range(n)]
    for i, p in enumerate(parents):
        if p >= 0:
            children[p].append(i)
    nt, ns = [-1] * n, [-1] * n
    for p, ch in enumerate(children):
        if ch:
            nt[p] = ch[0]
            for a, b in zip(ch, ch[1:], strict=False):
                ns[a] = b
    return nt, ns


def ref_mask(parents):
    n = len(parents)
    m = np.zeros((n, n), dtype=bool)
    for i in range(n):
        j = i
        while j >= 0:
            m[i, j] = True
            j = parents[j]
    return m


def ref_depths(parents):
    out = []
    for i in range(len(parents)):
        d, j = 0, parents[i]
        while j >= 0:
            d, j = d + 1, parents[j]
        out.append(d)
    return out


def ref_sglang_links(mask):
    """The GPU kernels' construction: parent = largest j < i with mask set; nodes pushed
    onto their parent's child list from the last one down."""
    n = mask.shape[0]
    nt, ns = [-1] * n, [-1] * n
    for i in range(n - 1, 0, -1):
        parent = next((j for j in range(i - 1, -1, -1) if mask[i, j]), -1)
        if parent < 0:
            continue
        if nt[parent] != -1:
            ns[i] = nt[parent]
        nt[parent] = i
    return nt, ns


@st.composite
def parent_batches(draw, max_b=8, max_n=64, multi_root=True):
    b = draw(st.integers(1, max_b))
    n = draw(st.integers(1, max_n))
    rows = []
    for _ in range(b):
        row = [-1]
        for i in range(1, n):
            lo = -1 if multi_root else 0
            row.append(draw(st.integers(lo, i - 1)))
        rows.append(row)
    return np.array(rows, dtype=draw(st.sampled_from([np.int32, np.int64])))


# ---------------------------------------------------------------- properties


@settings(max_examples=150, deadline=None)
@given(parent_batches())
def test_links_match_reference(parents):
    nt, ns = links_from_parents(parents)
    assert nt.dtype == ns.dtype == np.int64
    assert nt.shape == ns.shape == parents.shape
    for b in range(parents.shape[0]):
        rnt, rns = ref_links(parents[b].tolist())
        assert nt[b].tolist() == rnt
        assert ns[b].tolist() == rns
        # one tree at a time gives the same answer with 1-D outputs
        nt1, ns1 = links_from_parents(parents[b])
        assert nt1.ndim == 1
        np.testing.assert_array_equal(nt1, nt[b])
        np.testing.assert_array_equal(ns1, ns[b])


@settings(max_examples=150, deadline=None)
@given(parent_batches())
def test_mask_round_trip(parents):
    mask = tree_mask_from_parents(parents)
    assert mask.dtype == np.bool_ and mask.shape == parents.shape + parents.shape[-1:]
    for b in range(parents.shape[0]):
        np.testing.assert_array_equal(mask[b], ref_mask(parents[b].tolist()))
    back = parents_from_tree_mask(mask)
    assert back.dtype == np.int64
    np.testing.assert_array_equal(back, parents)
    # integer masks read the same as bool masks
    np.testing.assert_array_equal(parents_from_tree_mask(mask.astype(np.int32)), parents)
    np.testing.assert_array_equal(parents_from_tree_mask(mask.astype(np.uint8)), parents)


@settings(max_examples=150, deadline=None)
@given(parent_batches())
def test_links_from_mask_equal_gpu_kernel_construction(parents):
    mask = tree_mask_from_parents(parents)
    nt, ns = links_from_tree_mask(mask)
    for b in range(parents.shape[0]):
        rnt, rns = ref_sglang_links(mask[b])
        assert nt[b].tolist() == rnt
        assert ns[b].tolist() == rns
    pnt, pns = links_from_parents(parents)
    np.testing.assert_array_equal(nt, pnt)
    np.testing.assert_array_equal(ns, pns)


@settings(max_examples=100, deadline=None)
@given(parent_batches(), st.data())
def test_depths_and_positions(parents, data):
    depth = depths_from_parents(parents)
    assert depth.dtype == np.int64
    for b in range(parents.shape[0]):
        assert depth[b].tolist() == ref_depths(parents[b].tolist())
    offsets = np.array(
        data.draw(st.lists(st.integers(0, 10**6), min_size=len(parents), max_size=len(parents)))
    )
    pos = positions_from_parents(parents, offsets)
    np.testing.assert_array_equal(pos, depth + offsets[:, None])
    np.testing.assert_array_equal(positions_from_parents(parents, 7), depth + 7)
    np.testing.assert_array_equal(positions_from_parents(parents[0], 3), depth[0] + 3)


@settings(max_examples=100, deadline=None)
@given(parent_batches())
def test_links_of_any_parents_validate(parents):
    # Extra roots (-1 beyond node 0) make nodes unreachable from root 0, which is allowed.
    nt, ns = links_from_parents(parents)
    validate_tree(nt, ns)
    validate_tree(nt.astype(np.int32), ns.astype(np.int32), root=0)
    for b in range(parents.shape[0]):
        validate_tree(nt[b], ns[b])


# ---------------------------------------------------------------- fixed shapes


def test_single_node():
    nt, ns = links_from_parents(np.array([-1]))
    assert nt.tolist() == [-1] and ns.tolist() == [-1]
    assert tree_mask_from_parents([-1]).tolist() == [[True]]
    assert parents_from_tree_mask(np.ones((1, 1), dtype=bool)).tolist() == [-1]
    assert depths_from_parents([-1]).tolist() == [0]
    validate_tree(nt, ns)


def test_empty_inputs():
    nt, ns = links_from_parents(np.zeros((3, 0), dtype=np.int64))
    assert nt.shape == ns.shape == (3, 0)
    assert parents_from_tree_mask(np.zeros((0, 0), dtype=bool)).shape == (0,)


def test_chain_of_10000_nodes():
    n = 10_000
    parents = np.arange(-1, n - 1, dtype=np.int64)
    nt, ns = links_from_parents(parents)
    assert nt.tolist() == list(range(1, n)) + [-1]
    assert (ns == -1).all()
    validate_tree(nt, ns)
    np.testing.assert_array_equal(depths_from_parents(parents), np.arange(n))
    mask = tree_mask_from_parents(parents)
    np.testing.assert_array_equal(mask, np.tri(n, dtype=bool))
    np.testing.assert_array_equal(parents_from_tree_mask(mask), parents)
    del mask
    cnt, cns = links_from_tree_mask(np.tri(n, dtype=np.uint8))
    np.testing.assert_array_equal(cnt, nt)
    np.testing.assert_array_equal(cns, ns)


def test_star_and_forest():
    # root with 5 children, then a second root whose subtree is unreachable from node 0
    parents = np.array([-1, 0, 0, 0, 0, 0, -1, 6, 6])
    nt, ns = links_from_parents(parents)
    assert nt.tolist() == [1, -1, -1, -1, -1, -1, 7, -1, -1]
    assert ns.tolist() == [-1, 2, 3, 4, 5, -1, -1, 8, -1]
    validate_tree(nt, ns)
    validate_tree(nt, ns, root=6)


def test_batched_shared_and_torch_inputs():
    torch = pytest.importorskip("torch")
    parents = torch.tensor([[-1, 0, 0, 1], [-1, 0, 1, 2]])
    nt, ns = links_from_parents(parents)
    assert isinstance(nt, np.ndarray)
    assert nt.tolist() == [[1, 3, -1, -1], [1, 2, 3, -1]]
    assert ns.tolist() == [[-1, 2, -1, -1], [-1, -1, -1, -1]]
    mask = torch.from_numpy(tree_mask_from_parents(parents.numpy()))
    np.testing.assert_array_equal(parents_from_tree_mask(mask), parents.numpy())
    lnt, lns = links_from_tree_mask(mask.to(torch.int32))
    np.testing.assert_array_equal(lnt, nt)
    validate_tree(torch.from_numpy(nt), torch.from_numpy(ns))
    # a strided (non-contiguous) view works too
    view = parents.t()[:3].t()  # shape [2, 3], strides (1, 2)
    assert not view.is_contiguous()
    expected = links_from_parents(np.ascontiguousarray(parents.numpy()[:, :3]))
    np.testing.assert_array_equal(links_from_parents(view)[0], expected[0])
    np.testing.assert_array_equal(links_from_parents(view)[1], expected[1])


def test_mask_upper_triangle_is_ignored():
    mask = np.ones((4, 4), dtype=bool)  # every node "sees" every other: a chain by the rule
    assert parents_from_tree_mask(mask).tolist() == [-1, 0, 1, 2]


@pytest.mark.parametrize(
    "kernel_args",
    [
        lambda p: ("links_from_parents", (p, np.empty_like(p), np.empty_like(p))),
        lambda p: ("depths_from_parents", (p, np.empty_like(p))),
        lambda p: (
            "mask_from_parents",
            (p, np.zeros((p.shape[0], p.shape[1], p.shape[1]), dtype=bool)),
        ),
    ],
)
def test_pure_python_kernels_agree(kernel_args):
    """The kernels' Python bodies (what NUMBA_DISABLE_JIT=1 runs) give the same results."""
    parents = np.array([[-1, 0, 0, 1, 1, 2, -1, 6], [-1, 0, 1, 2, 3, 4, 5, 6]], dtype=np.int64)
    name, args = kernel_args(parents)
    _, args2 = kernel_args(parents)
    kernel = getattr(_tree, name)
    kernel(*args)
    kernel.py_func(*args2)
    for a, b in zip(args, args2, strict=True):
        np.testing.assert_array_equal(a, b)


def test_pure_python_check_links_agrees():
    nt = np.array([[1, 3, -1, -1], [1, 0, -1, -1]], dtype=np.int64)
    ns = np.array([[-1, 2, -1, -1], [-1, -1, -1, -1]], dtype=np.int64)
    results = []
    roots = np.zeros(2, dtype=np.int64)
    for fn in (_tree.check_trees, _tree.check_trees.py_func):
        report = np.zeros(3, dtype=np.int64)
        code = fn(nt, ns, roots, np.empty(4, bool), np.empty(5, np.int64), report)
        results.append((code, report.tolist()))
    assert results[0] == results[1] == (_tree.LINKS_REVISIT_CHILD, [1, 0, 1])


def test_import_does_not_need_torch():
    code = "import sys, treegram.spec; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


# ---------------------------------------------------------------- invalid input

PARENTS_FAILING = [
    # (value, message fragment)
    (np.array([-1.0, 0.0]), "parents must be a signed integer array"),
    (np.array([True, False]), "parents must be a signed integer array"),
    (np.array([0, 0], dtype=np.uint8), "parents must be a signed integer array"),
    (np.zeros((2, 2, 2), dtype=np.int64), r"parents: expected shape \[N\] or \[B, N\]"),
    (np.int64(3), r"parents: expected shape \[N\] or \[B, N\]"),
    (np.array([-1, 1]), r"parents\[1\] = 1: a parent must"),
    (np.array([-1, 0, 5]), r"parents\[2\] = 5"),
    (np.array([-1, -2]), r"parents\[1\] = -2"),
    (np.array([[-1, 0], [0, 0]]), r"parents\[1, 0\] = 0"),
    ("abc", "parents must be a signed integer array"),
]


@pytest.mark.parametrize(("value", "match"), PARENTS_FAILING)
@pytest.mark.parametrize(
    "fn",
    [links_from_parents, tree_mask_from_parents, depths_from_parents, positions_from_parents],
)
def test_bad_parents_raise(fn, value, match):
    with pytest.raises(DraftTreeError, match=match) as info:
        fn(value)
    assert isinstance(info.value, ValueError) and isinstance(info.value, TreegramError)
    assert isinstance(info.value, RuntimeError)  # xgrammar raises RuntimeError for these


MASK_FAILING = [
    (np.zeros((3, 3), dtype=np.float32), "mask: expected a bool or integer array"),
    (np.zeros((3, 4), dtype=bool), r"mask: expected shape \[N, N\] or \[B, N, N\]"),
    (np.zeros(3, dtype=bool), r"mask: expected shape"),
    (np.zeros((1, 2, 3, 3), dtype=bool), r"mask: expected shape"),
]


@pytest.mark.parametrize(("value", "match"), MASK_FAILING)
@pytest.mark.parametrize("fn", [parents_from_tree_mask, links_from_tree_mask])
def test_bad_mask_raises(fn, value, match):
    with pytest.raises(DraftTreeError, match=match):
        fn(value)


@pytest.mark.parametrize(
    ("offset", "parents", "match"),
    [
        (1.5, [-1, 0], "offset: expected integers"),
        ([1, 2], [-1, 0], "offset: expected a scalar"),
        ([1, 2, 3], [[-1, 0], [-1, 0]], r"offset: expected a scalar or shape \[2\]"),
    ],
)
def test_bad_offset_raises(offset, parents, match):
    with pytest.raises(DraftTreeError, match=match):
        positions_from_parents(np.array(parents), offset)


def _tree_links():
    return np.array([1, 3, -1, -1]), np.array([-1, 2, -1, -1])


VALIDATE_FAILING = [
    # (next_token, next_sibling, kwargs, message fragment)
    ([1.0, -1.0], [-1, -1], {}, "next_token must be a signed integer array"),
    ([1, -1], [-1.0, -1.0], {}, "next_sibling must be a signed integer array"),
    (np.zeros((1, 1, 2), np.int64), np.zeros((1, 1, 2), np.int64), {}, "next_token: expected"),
    ([1, -1], [-1, -1, -1], {}, r"next_sibling: shape \(3,\) does not match"),
    ([[1, -1]], [1, -1], {}, r"next_sibling: shape \(2,\) does not match.*\(1, 2\)"),
    (np.zeros(0, np.int64), np.zeros(0, np.int64), {}, "empty"),
    ([1, -1], [-1, -1], {"root": 2}, r"root: 2 is out of range \[0, 2\)"),
    ([1, -1], [-1, -1], {"root": -1}, "root: -1 is out of range"),
    ([1, -1], [-1, -1], {"root": 0.0}, "root must be an int"),
    ([1, -1], [-1, -1], {"root": True}, "root must be an int"),
    ([2, -1], [-1, -1], {}, r"next_token\[0\] = 2 is out of range \[-1, 2\)"),
    ([1, -1], [-1, -5], {}, r"next_sibling\[1\] = -5 is out of range"),
    ([[1, -1], [1, 7]], [[-1, -1], [-1, -1]], {}, r"next_token\[1, 1\] = 7"),
    ([1, 0], [-1, -1], {}, r"next_token\[1\] = 0 leads back to the root"),
    ([1, 1], [-1, -1], {}, r"next_token\[1\] = 1 reaches a node a second time"),
    ([1, -1, -1], [-1, 1, -1], {}, r"next_sibling\[1\] = 1 reaches a node a second time"),
    ([1, 2, -1], [-1, 2, -1], {}, r"next_sibling\[1\] = 2 reaches a node a second time"),
    ([1, -1, -1], [2, -1, -1], {}, r"next_sibling\[0\] = 2: the root node 0 must not"),
    (
        [[1, 3, -1, -1], [1, -1, -1, 1]],
        [[-1, 2, -1, -1], [-1, 2, 3, -1]],
        {},
        r"next_token\[1, 3\] = 1 reaches a node a second time in tree 1",
    ),
]


@pytest.mark.parametrize(("nt", "ns", "kwargs", "match"), VALIDATE_FAILING)
def test_validate_tree_rejects(nt, ns, kwargs, match):
    with pytest.raises(DraftTreeError, match=match) as info:
        validate_tree(np.asarray(nt), np.asarray(ns), **kwargs)
    assert isinstance(info.value, ValueError)


VALIDATE_PASSING = [
    ([-1], [-1], {}),
    ([1, 3, -1, -1], [-1, 2, -1, -1], {}),
    ([1, -1, -1, -1], [-1, -1, -1, 2], {}),  # node 3 -> 2 is unreachable: allowed
    ([-1, 2, -1], [-1, -1, -1], {"root": 1}),  # node 0 unreachable from root 1
]


@pytest.mark.parametrize(("nt", "ns", "kwargs"), VALIDATE_PASSING)
def test_validate_tree_accepts(nt, ns, kwargs):
    validate_tree(np.asarray(nt), np.asarray(ns), **kwargs)
