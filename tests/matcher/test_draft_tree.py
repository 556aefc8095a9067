"""Draft-tree traversal: scalar vs batch vs an independent reference, and vs xgrammar.

The reference (:func:`reference_rows`) follows DESIGN.md "Draft-tree conventions" with
nothing but ``accept_token`` / ``fill_next_token_bitmask`` / ``rollback``: node ``root``
holds the last verified token (its row is the current mask); a child is visited only if
its parent's row allows its token; it is accepted, its row filled unless the matcher
stopped, its children visited, and it is rolled back. Rows of nodes never reached are
zero; the matcher ends where it started.

xgrammar 0.2.8 is the oracle for the same semantics (root is always node 0 there). It
leaves the rows of unreached nodes untouched, so its buffer is zeroed before each call.
"""

from __future__ import annotations

import time

import numpy as np
import pytest
from matcher_rows import (
    EXPR_GRAMMAR,
    SENTINEL,
    SMALL_VOCAB,
    compile_each,
    compile_small,
    mask_of,
    reference_rows,
    snapshot,
    tid,
)

import treegram as tg
import treegram.kernels._batch as kernels_batch
import treegram.matcher._batch as matcher_batch
from treegram import BatchGrammarMatcher, GrammarMatcher
from treegram.errors import (
    ArgumentError,
    BitmaskError,
    DraftTreeError,
    InvalidTokenIdError,
    WorkerError,
)
from treegram.spec import links_from_parents

# --------------------------------------------------------------------------- vocabulary
VOCAB = SMALL_VOCAB
N_PAD = 3  # padding ids past the real tokens (special: never allowed)
V = len(VOCAB) + N_PAD
W = (V + 31) // 32
EOS = VOCAB.index("<eos>")

GRAMMARS: dict[str, str | None] = {
    "letters": "root ::= [a-z]*",
    "builtin_json": None,
    "object": r"""
root ::= "{" ws pair (ws "," ws pair)* ws "}"
pair ::= key ws ":" ws val
key ::= "\"" [a-z_]+ "\""
val ::= num | key | "[" ws (num (ws "," ws num)*)? ws "]" | "true" | "null"
num ::= "-"? [0-9]+ ("." [0-9]+)?
ws ::= [ \n]*
""",
    "expr": EXPR_GRAMMAR,
    "left_recursion": r"""
root ::= list
list ::= list "," item | item
item ::= [a-c]+ | "<" list ">"
""",
    "words": r"""
root ::= greeting (" " name)* "!"?
greeting ::= "ab" | "abc" | "hi"
name ::= [A-Z] [a-z]{0,3}
""",
}


@pytest.fixture(scope="module")
def compiled():
    return compile_small(GRAMMARS, V)


@pytest.fixture(scope="module")
def batcher():
    b = BatchGrammarMatcher(max_threads=2)
    yield b
    b.close()


# --------------------------------------------------------------------------- helpers
def allowed(row: np.ndarray, t: int) -> bool:
    return 0 <= t < V and bool((int(row[t >> 5]) >> (t & 31)) & 1)


def random_walk(m: GrammarMatcher, rng: np.random.Generator, k: int) -> None:
    """Accept up to ``k`` random allowed tokens (never the stop token)."""
    for _ in range(k):
        row = mask_of(m)
        choices = [t for t in np.flatnonzero(tg.bitmask_to_bool(row, V)) if t != EOS]
        if not choices:
            return
        assert m.accept_token(int(rng.choice(choices)))


def random_parents(rng: np.random.Generator, n: int, forest: float = 0.0) -> np.ndarray:
    """Parent pointers with ``parent[i] < i``; node 0 is a root, and with probability
    ``forest`` a later node is another root. Deep and bushy shapes are mixed."""
    parents = np.full(n, -1, dtype=np.int64)
    for i in range(1, n):
        if rng.random() < forest:
            continue
        parents[i] = i - 1 if rng.random() < 0.4 else rng.integers(0, i)
    return parents


def path_to(parents: np.ndarray, node: int, root: int) -> list[int] | None:
    """Nodes from just below ``root`` down to ``node``; None if ``node`` is not under it."""
    path = []
    while node != root:
        if node < 0:
            return None
        path.append(node)
        node = int(parents[node])
    return path[::-1]


def random_tokens(
    m: GrammarMatcher,
    rng: np.random.Generator,
    parents: np.ndarray,
    root: int,
    p_valid: float = 0.8,
) -> np.ndarray:
    """Draft tokens: mostly an allowed continuation of the parent's state, otherwise a random
    id of the vocabulary (ids outside it are rejected before traversal: see
    tests/adversarial/test_batch_inputs.py). Leaves ``m`` unchanged."""
    n = len(parents)
    tokens = rng.integers(0, V, size=n).astype(np.int64)
    tokens[root] = 0
    for i in range(n):
        if i == root or rng.random() >= p_valid:
            continue
        path = path_to(parents, int(parents[i]), root) if parents[i] >= 0 else None
        if path is None:
            continue
        done = 0
        ok = True
        for node in path:
            row = mask_of(m)
            if row is None or not allowed(row, int(tokens[node])):
                ok = False
                break
            assert m.accept_token(int(tokens[node]))
            done += 1
        row = mask_of(m) if ok else None
        if row is not None:
            choices = np.flatnonzero(tg.bitmask_to_bool(row, V))
            if len(choices):
                tokens[i] = int(rng.choice(choices))
        if done:
            m.rollback(done)
    return tokens


def links(parents: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return links_from_parents(parents)


def pick_root(rng: np.random.Generator, next_sibling: np.ndarray) -> int:
    """A node that can serve as the root: one without a next sibling."""
    return int(rng.choice(np.flatnonzero(next_sibling == -1)))


def make_requests(compiled, rng, b: int, names=None) -> list[GrammarMatcher]:
    names = names or list(GRAMMARS)
    ms = []
    for _ in range(b):
        m = GrammarMatcher(compiled[names[int(rng.integers(len(names)))]])
        random_walk(m, rng, int(rng.integers(0, 5)))
        ms.append(m)
    return ms


# ----------------------------------------------------------------- 1. random parity
@pytest.mark.parametrize("seed", range(12))
def test_scalar_batch_reference_parity_per_request_trees(compiled, batcher, seed):
    rng = np.random.default_rng(seed)
    b, n = 5, int(rng.integers(2, 40))
    ms = make_requests(compiled, rng, b)
    parents = np.stack([random_parents(rng, n, forest=0.1 * (seed % 2)) for _ in range(b)])
    nt, ns = links(parents)
    roots = np.array([pick_root(rng, ns[i]) if seed % 3 == 0 else 0 for i in range(b)])
    draft = np.stack([random_tokens(ms[i], rng, parents[i], int(roots[i])) for i in range(b)])
    before = [snapshot(m) for m in ms]

    expected = [reference_rows(ms[i], parents[i], draft[i], int(roots[i])) for i in range(b)]
    for i, m in enumerate(ms):
        rows = np.full((n, W), SENTINEL, dtype=np.int32)
        assert (
            m.traverse_draft_tree(nt[i], ns[i], draft[i], rows, root_position=int(roots[i])) is True
        )
        np.testing.assert_array_equal(rows, expected[i], err_msg=f"scalar request {i}")
        assert snapshot(m) == before[i]

    out = np.full((b * n, W), SENTINEL, dtype=np.int32)
    done = batcher.batch_traverse_draft_tree(ms, nt, ns, draft, out, root_positions=roots)
    assert done == [True] * b
    for i in range(b):
        np.testing.assert_array_equal(
            out[i * n : (i + 1) * n], expected[i], err_msg=f"batch request {i}"
        )
    assert [snapshot(m) for m in ms] == before
    # something was actually traversed beyond the roots in most seeds
    assert sum(int((e != 0).any(axis=1).sum()) for e in expected) >= b


@pytest.mark.parametrize("seed", range(6))
def test_shared_tree_matches_per_request_copies(compiled, batcher, seed):
    rng = np.random.default_rng(100 + seed)
    b, n = 4, int(rng.integers(3, 30))
    ms = make_requests(compiled, rng, b)
    parents = random_parents(rng, n)
    nt, ns = links(parents)
    draft = np.stack([random_tokens(m, rng, parents, 0) for m in ms])
    shared = np.full((b * n, W), SENTINEL, dtype=np.int32)
    per = np.full((b * n, W), SENTINEL, dtype=np.int32)
    assert batcher.batch_traverse_draft_tree(ms, nt, ns, draft, shared) == [True] * b
    assert (
        batcher.batch_traverse_draft_tree(ms, np.tile(nt, (b, 1)), np.tile(ns, (b, 1)), draft, per)
        == [True] * b
    )
    np.testing.assert_array_equal(shared, per)
    for i, m in enumerate(ms):
        np.testing.assert_array_equal(
            shared[i * n : (i + 1) * n], reference_rows(m, parents, draft[i])
        )


def test_int32_links_and_torch_inputs(compiled, batcher):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(7)
    ms = make_requests(compiled, rng, 3, ["object", "builtin_json"])
    n = 12
    parents = random_parents(rng, n)
    nt, ns = links(parents)
    draft = np.stack([random_tokens(m, rng, parents, 0, p_valid=1.0) for m in ms])
    expected = np.concatenate([reference_rows(m, parents, draft[i]) for i, m in enumerate(ms)])
    out = torch.zeros((3 * n, W), dtype=torch.int32)
    batcher.batch_traverse_draft_tree(
        ms, torch.from_numpy(nt), torch.from_numpy(ns), torch.from_numpy(draft), out
    )
    np.testing.assert_array_equal(out.numpy(), expected)
    out32 = np.zeros((3 * n, W), dtype=np.int32)
    batcher.batch_traverse_draft_tree(
        ms,
        nt.astype(np.int32),
        ns.astype(np.int32),
        draft.astype(np.int32),
        out32,
        indices=[0, 1, 2],
        root_positions=[0, 0, 0],
    )
    np.testing.assert_array_equal(out32, expected)


def test_scalar_traversal_with_the_same_four_buffers_follows_in_place_changes(compiled):
    """The scalar traversal reuses the checked views of the last call's four buffers (the
    engines pass the same ones every step): new contents must show through, and a buffer
    given new storage, shape or strides in place (``set_``, ``as_strided_``; numpy's
    ``shape``) must be checked afresh, never served from a stale view. A buffer that had to
    be converted (int32 links) is converted again every call."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(5)
    m = make_requests(compiled, rng, 1, ["object", "builtin_json"])[0]
    n = 8
    steps = []
    for _ in range(4):
        parents = random_parents(rng, n)
        nt, ns = links(parents)
        draft = random_tokens(m, rng, parents, 0)
        steps.append((nt, ns, draft, reference_rows(m, parents, draft)))
    # torch: the same four tensor objects every step
    bufs = [torch.from_numpy(a.copy()) for a in steps[0][:3]]
    rows = torch.full((n + 2, W), SENTINEL, dtype=torch.int32)
    for k, (nt, ns, draft, expected) in enumerate(steps):
        for buf, new in zip(bufs, (nt, ns, draft), strict=True):
            if k == 2:  # new storage of the same shape
                buf.set_(torch.from_numpy(new.copy()))
            else:
                buf.copy_(torch.from_numpy(new))
        if k == 3:  # the same storage, other strides: only the first n rows are rows
            rows.set_(torch.full((2 * (n + 2), W), SENTINEL, dtype=torch.int32))
            rows.as_strided_((n, W), (2 * W, 1))
        else:
            rows.fill_(SENTINEL)
        assert m.traverse_draft_tree(*bufs, rows) is True
        np.testing.assert_array_equal(rows[:n].numpy(), expected, err_msg=f"step {k}")
    # a stale view would keep the old shape: 4 nodes now, same tensor objects
    small = torch.tensor([1, 2, 3, -1]), torch.tensor([-1, -1, -1, -1])
    for buf, new in zip(bufs[:2], small, strict=True):
        buf.set_(new)
    with pytest.raises(DraftTreeError):
        m.traverse_draft_tree(*bufs, rows)  # draft_tokens still has 8 entries
    # numpy: the same arrays, one reshaped in place; int32 links converted each call
    nt, ns, draft, expected = steps[0]
    arrs = [nt.astype(np.int32), ns.astype(np.int32), draft.copy()]
    out = np.full((n, W), SENTINEL, dtype=np.int32)
    assert m.traverse_draft_tree(*arrs, out) is True
    np.testing.assert_array_equal(out, expected)
    nt, ns, draft, expected = steps[1]
    arrs[0][:] = nt
    arrs[1][:] = ns
    arrs[2][:] = draft
    assert m.traverse_draft_tree(*arrs, out) is True
    np.testing.assert_array_equal(out, expected)
    arrs[2].shape = (2, n // 2)
    with pytest.raises(DraftTreeError):
        m.traverse_draft_tree(*arrs, out)


def test_reused_torch_buffers_follow_in_place_changes(compiled):
    """Engines pass the same tensors every step: the views kept between calls (scalar and
    batch) must follow new contents (``copy_``) and new storage, shape or strides
    (``set_``), never serve a stale view."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(11)
    b = 3
    batcher = BatchGrammarMatcher(max_threads=1)  # its own view cache, fresh
    ms = make_requests(compiled, rng, b, ["object", "builtin_json"])
    steps = []
    for n in (9, 9, 9, 14, 6):  # new contents, then new storage of one shape, new shapes
        parents = np.stack([random_parents(rng, n) for _ in range(b)])
        nt, ns = links(parents)
        draft = np.stack([random_tokens(ms[i], rng, parents[i], 0) for i in range(b)])
        expected = [reference_rows(ms[i], parents[i], draft[i]) for i in range(b)]
        steps.append((nt, ns, draft, expected))
    bufs = [torch.from_numpy(a.copy()) for a in steps[0][:3]]
    scalar = [[torch.tensor(a[i]) for a in steps[0][:3]] for i in range(b)]
    for k, (nt, ns, draft, expected) in enumerate(steps):
        if k:  # the same tensor objects, changed in place
            for buf, new in zip(bufs, (nt, ns, draft), strict=True):
                if buf.shape == new.shape and k % 2:
                    buf.copy_(torch.from_numpy(new))
                else:
                    buf.set_(torch.from_numpy(new.copy()))
            for i in range(b):
                for buf, new in zip(scalar[i], (nt[i], ns[i], draft[i]), strict=True):
                    if buf.shape == new.shape:
                        buf.copy_(torch.from_numpy(new))
                    else:  # (a storage viewed by numpy is not resizable: set_ it)
                        buf.set_(torch.tensor(new))
        n = draft.shape[1]
        out = torch.full((b * n, W), SENTINEL, dtype=torch.int32)
        assert batcher.batch_traverse_draft_tree(ms, *bufs, out) == [True] * b
        for i in range(b):
            np.testing.assert_array_equal(out[i * n : (i + 1) * n].numpy(), expected[i])
            rows = torch.full((n, W), SENTINEL, dtype=torch.int32)
            assert ms[i].traverse_draft_tree(*scalar[i], rows) is True
            np.testing.assert_array_equal(rows.numpy(), expected[i], err_msg=f"step {k}")
    batcher.close()


def test_batch_reuses_its_checked_tree_only_for_the_same_tensors_and_batch(compiled):
    """A batch traversal keeps what it made of its three tree tensors (one check of their
    memory, shapes and strides per call, ``IndexViewCache.tree``): a call with fewer
    matchers, or link tensors given other shapes and strides over the same memory
    (``as_strided_``), is checked afresh."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(23)
    b, n = 3, 7
    ms = make_requests(compiled, rng, b, ["object", "builtin_json"])
    parents = np.stack([random_parents(rng, n) for _ in range(b)])
    nt, ns = links(parents)
    draft = np.stack([random_tokens(ms[i], rng, parents[i], 0) for i in range(b)])
    bufs = [torch.from_numpy(a.copy()) for a in (nt, ns, draft)]
    batcher = BatchGrammarMatcher(max_threads=1)
    out = torch.full((b * n, W), SENTINEL, dtype=torch.int32)
    for _ in range(2):  # the second call takes the kept views
        assert batcher.batch_traverse_draft_tree(ms, *bufs, out) == [True] * b
        for i in range(b):
            expected = reference_rows(ms[i], parents[i], draft[i])
            np.testing.assert_array_equal(out[i * n : (i + 1) * n].numpy(), expected)
    with pytest.raises(DraftTreeError, match="draft_tokens"):
        batcher.batch_traverse_draft_tree(ms[:2], *bufs, out)  # 3 trees for 2 matchers
    for buf in bufs[:2]:  # the same memory: request 0's links, one tree for all
        buf.as_strided_((n,), (1,))
    out.fill_(SENTINEL)
    assert batcher.batch_traverse_draft_tree(ms, *bufs, out) == [True] * b
    for i in range(b):
        expected = reference_rows(ms[i], parents[0], draft[i])
        np.testing.assert_array_equal(out[i * n : (i + 1) * n].numpy(), expected)
    batcher.close()


def test_scalar_shape_errors_as_xgrammar_and_int32_links_accepted(compiled):
    """xgrammar's shape assertions (test_traverse_draft_tree_shape_assertion): each is
    refused here too, as a RuntimeError naming the argument, nothing written. Links of
    another integer dtype are the one deliberate difference: xgrammar refuses int32
    links, treegram converts them exactly and fills the rows int64 links give."""
    m = GrammarMatcher(compiled["letters"])
    nt = np.array([1, 2, -1], dtype=np.int64)
    ns = np.full(3, -1, dtype=np.int64)
    draft = np.array([tid("a"), tid("b"), tid("c")], dtype=np.int64)
    before = snapshot(m)
    cases = [
        (nt, ns[:2], draft, np.zeros((3, W), np.int32), "retrieve_next_sibling"),
        (nt, ns, draft, np.full((W,), SENTINEL, np.int32), "token_bitmask"),
        (nt, ns, draft, np.full((2, W), SENTINEL, np.int32), "token_bitmask"),
        (nt, np.array([1, -1, -1]), draft, np.full((3, W), SENTINEL, np.int32), "sibling"),
    ]
    for a, b, c, out, name in cases:
        kept = out.copy()
        with pytest.raises(RuntimeError, match=name) as info:
            m.traverse_draft_tree(a, b, c, out)
        assert isinstance(info.value, tg.errors.TreegramError)
        np.testing.assert_array_equal(out, kept)
        assert snapshot(m) == before
    out64 = np.zeros((3, W), np.int32)
    out32 = np.zeros((3, W), np.int32)
    assert m.traverse_draft_tree(nt, ns, draft, out64)
    assert m.traverse_draft_tree(nt, ns.astype(np.int32), draft.astype(np.int32), out32)
    np.testing.assert_array_equal(out32, out64)
    assert all(allowed(out64[i], int(draft[i + 1])) for i in range(2))


# ------------------------------------------------- 2. indices, roots, grammars, state
def test_sparse_indices_leave_other_rows_untouched(compiled, batcher):
    rng = np.random.default_rng(11)
    b, n = 6, 9
    ms = make_requests(compiled, rng, b)
    parents = np.stack([random_parents(rng, n, forest=0.2) for _ in range(b)])
    nt, ns = links(parents)
    draft = np.stack([random_tokens(ms[i], rng, parents[i], 0) for i in range(b)])
    sel = np.array([4, 1, 5])
    roots = np.array([pick_root(rng, ns[i]) for i in sel])
    out = np.full((b * n + 2, W), SENTINEL, dtype=np.int32)
    done = batcher.batch_traverse_draft_tree(
        ms, nt, ns, draft, out, indices=sel, root_positions=roots
    )
    assert done == [True] * 3
    for i in range(b):
        rows = out[i * n : (i + 1) * n]
        if i in sel:
            r = int(roots[list(sel).index(i)])
            np.testing.assert_array_equal(rows, reference_rows(ms[i], parents[i], draft[i], r))
        else:
            assert (rows == SENTINEL).all(), f"unselected request {i} was written"
    assert (out[b * n :] == SENTINEL).all()
    empty = np.zeros(0, dtype=np.int64)
    assert batcher.batch_traverse_draft_tree(ms, nt, ns, draft, out, indices=empty) == []
    assert (out[: b * n][[i * n for i in range(b) if i not in sel]] == SENTINEL).all()


def test_empty_python_list_of_indices(compiled, batcher):
    m = GrammarMatcher(compiled["letters"])
    nt, ns = links(np.array([-1, 0]))
    out = np.full((2, W), SENTINEL, dtype=np.int32)
    assert (
        batcher.batch_traverse_draft_tree(
            [m], nt, ns, np.array([[0, tid("a")]]), out, indices=[], root_positions=[]
        )
        == []
    )
    assert (out == SENTINEL).all()


def test_nonzero_root_scalar_and_batch(compiled, batcher):
    # two trees in one forest: nodes 0..3 and 4..8; root 4 must ignore nodes 0..3
    parents = np.array([-1, 0, 1, 0, -1, 4, 5, 5, 4])
    nt, ns = links(parents)
    letters = [tid(c) for c in "xabcdabcd"]
    draft = np.array([letters, letters])
    ms = [GrammarMatcher(compiled["letters"]), GrammarMatcher(compiled["words"])]
    ms[1].accept_token(tid("ab"))
    for m, d in zip(ms, draft, strict=True):
        rows = np.full((9, W), SENTINEL, dtype=np.int32)
        assert m.traverse_draft_tree(nt, ns, d, rows, root_position=4)
        expected = reference_rows(m, parents, d, 4)
        np.testing.assert_array_equal(rows, expected)
        assert not rows[:4].any() and rows[4].any()
    out = np.full((18, W), SENTINEL, dtype=np.int32)
    batcher.batch_traverse_draft_tree(ms, nt, ns, draft, out, root_positions=[4, 0])
    np.testing.assert_array_equal(out[:9], reference_rows(ms[0], parents, draft[0], 4))
    np.testing.assert_array_equal(out[9:], reference_rows(ms[1], parents, draft[1], 0))
    # the "letters" matcher accepts every letter of the chain below root 4
    assert (out[5:9] != 0).any(axis=1).all()


def test_stopped_and_advanced_matchers_in_one_batch(compiled, batcher):
    stopped = GrammarMatcher(compiled["letters"])
    assert stopped.accept_token(tid("a")) and stopped.accept_token(EOS)
    advanced = GrammarMatcher(compiled["object"])
    for t in ["{", '"', "k", '":']:
        assert advanced.accept_token(tid(t))
    fresh = GrammarMatcher(compiled["expr"])
    ms = [stopped, advanced, fresh]
    parents = np.array([-1, 0, 0, 1, 2, 3])
    nt, ns = links(parents)
    draft = np.array(
        [
            [0, tid("a"), tid("b"), tid("c"), tid("d"), tid("e")],
            [0, tid(" "), tid("12"), tid("true"), tid("}"), tid(",")],
            [0, tid("("), tid("1"), tid("2"), tid("+"), tid(")")],
        ]
    )
    before = [snapshot(m) for m in ms]
    out = np.full((18, W), SENTINEL, dtype=np.int32)
    assert batcher.batch_traverse_draft_tree(ms, nt, ns, draft, out) == [True] * 3
    assert not out[:6].any(), "a stopped matcher allows nothing: all its rows are zero"
    for i in (1, 2):
        np.testing.assert_array_equal(
            out[i * 6 : (i + 1) * 6], reference_rows(ms[i], parents, draft[i])
        )
    # '{"k":' then ' ' / '12', ' true' / '12}', ' true,': every node is reached
    assert (out[6:12] != 0).any(axis=1).all()
    assert (out[12:18] != 0).any(axis=1).tolist() == [True, True, True, True, True, True]
    rows = np.full((6, W), SENTINEL, dtype=np.int32)
    assert stopped.traverse_draft_tree(nt, ns, draft[0], rows) is True
    assert not rows.any()
    assert [snapshot(m) for m in ms] == before


@pytest.mark.parametrize("use_batch", [False, True])
def test_masks_after_a_traversal_match_a_matcher_that_never_traversed(compiled, batcher, use_batch):
    """A traversal keeps its mask memo's row in its output rows and copies it into the
    matcher's memo when it ends: every mask filled afterwards (memo hits included, as in
    a run of letters, where each set repeats the last one's items) is the mask of a twin
    that accepted the same tokens and never traversed."""
    rng = np.random.default_rng(2026)
    for name, cg in compiled.items():
        for trial in range(8):
            m, twin = GrammarMatcher(cg), GrammarMatcher(cg)
            for _ in range(int(rng.integers(0, 4))):
                row = mask_of(m)
                choices = [t for t in np.flatnonzero(tg.bitmask_to_bool(row, V)) if t != EOS]
                if not choices:
                    break
                t = int(rng.choice(choices))
                assert m.accept_token(t) and twin.accept_token(t)
            n = int(rng.integers(2, 9))
            parents = np.arange(-1, n - 1) if trial % 2 else random_parents(rng, n)
            nt, ns = links(parents)
            draft = random_tokens(m, rng, parents, 0, p_valid=0.95)
            out = np.full((n, W), SENTINEL, dtype=np.int32)
            if use_batch:
                assert batcher.batch_traverse_draft_tree([m], nt, ns, draft[None], out) == [True]
            else:
                assert m.traverse_draft_tree(nt, ns, draft, out)
            np.testing.assert_array_equal(out, reference_rows(twin, parents, draft, 0))
            for _ in range(4):  # walk on: each mask against the twin's
                row = mask_of(m)
                np.testing.assert_array_equal(row, mask_of(twin), err_msg=name)
                choices = [t for t in np.flatnonzero(tg.bitmask_to_bool(row, V)) if t != EOS]
                if not choices:
                    break
                t = int(rng.choice(choices))
                assert m.accept_token(t) and twin.accept_token(t)


def test_stop_token_node_has_zero_row_and_no_children(compiled):
    m = GrammarMatcher(compiled["letters"])
    parents = np.array([-1, 0, 1, 0])
    nt, ns = links(parents)
    draft = np.array([0, EOS, tid("a"), tid("b")])
    rows = np.full((4, W), SENTINEL, dtype=np.int32)
    assert m.traverse_draft_tree(nt, ns, draft, rows)
    assert rows[0].any() and not rows[1].any() and not rows[2].any() and rows[3].any()
    assert m.num_accepted_steps() == 0 and not m.is_terminated()


# ------------------------------------------------------------- 3. buffers and views
def _small_case(compiled, rng, b=3, n=7):
    ms = make_requests(compiled, rng, b, ["object", "letters", "expr"])
    parents = np.stack([random_parents(rng, n) for _ in range(b)])
    nt, ns = links(parents)
    draft = np.stack([random_tokens(ms[i], rng, parents[i], 0, p_valid=1.0) for i in range(b)])
    expected = np.concatenate([reference_rows(ms[i], parents[i], draft[i]) for i in range(b)])
    return ms, nt, ns, draft, expected


def test_torch_view_with_storage_offset(compiled, batcher):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(21)
    ms, nt, ns, draft, expected = _small_case(compiled, rng)
    rows = expected.shape[0]
    big = torch.full((rows + 5, W), SENTINEL, dtype=torch.int32)
    view = big[3 : 3 + rows]
    assert view.storage_offset() == 3 * W
    batcher.batch_traverse_draft_tree(ms, nt, ns, draft, view)
    np.testing.assert_array_equal(view.numpy(), expected)
    assert (big[:3] == SENTINEL).all() and (big[3 + rows :] == SENTINEL).all()
    # the scalar path with a view of the same buffer
    big.fill_(SENTINEL)
    n = nt.shape[1]
    assert ms[1].traverse_draft_tree(
        torch.from_numpy(nt[1]), torch.from_numpy(ns[1]), torch.from_numpy(draft[1]), big[3:]
    )
    np.testing.assert_array_equal(big[3 : 3 + n].numpy(), expected[n : 2 * n])
    assert (big[:3] == SENTINEL).all() and (big[3 + n :] == SENTINEL).all()


def test_row_strided_numpy_views(compiled, batcher):
    rng = np.random.default_rng(22)
    ms, nt, ns, draft, expected = _small_case(compiled, rng)
    rows = expected.shape[0]
    big = np.full((2 * rows, W), SENTINEL, dtype=np.int32)
    batcher.batch_traverse_draft_tree(ms, nt, ns, draft, big[::2])
    np.testing.assert_array_equal(big[::2], expected)
    assert (big[1::2] == SENTINEL).all()
    wide = np.full((rows, W + 3), SENTINEL, dtype=np.int32)
    batcher.batch_traverse_draft_tree(ms, nt, ns, draft, wide[:, :W])
    np.testing.assert_array_equal(wide[:, :W], expected)
    assert (wide[:, W:] == SENTINEL).all()
    n = nt.shape[1]
    wide.fill(SENTINEL)
    assert ms[0].traverse_draft_tree(nt[0], ns[0], draft[0], wide[:, :W])
    np.testing.assert_array_equal(wide[:n, :W], expected[:n])
    assert (wide[:, W:] == SENTINEL).all() and (wide[n:] == SENTINEL).all()


def test_strided_rows_and_read_only_links_add_no_kernel_specialization(compiled, batcher):
    # The kernels are compiled for C-contiguous, writable arrays (what warm_up compiles): a
    # strided bitmask is written through a contiguous copy and read-only links are copied,
    # instead of numba compiling each kernel again (tens of seconds at the first call).
    from treegram.kernels import _forced, _rows, _tree
    from treegram.matcher import extend_draft_trees

    rng = np.random.default_rng(24)
    ms, nt, ns, draft, expected = _small_case(compiled, rng)
    b, n = len(ms), nt.shape[1]
    m = b * (n + 2)  # the forced extensions' rows: N + budget per request
    read_only = [a.copy() for a in (nt, ns, draft)]
    for a in read_only:
        a.flags.writeable = False

    def calls(links, rows):
        """Every bitmask-writing call, into ``rows(k)``: a bitmask view of k rows."""
        out = {}
        last = np.empty(b, dtype=np.int64)  # runs the unfilled-rows kernel too
        batcher.batch_traverse_draft_tree(ms, *links, rows(b * n), last_nodes=last)
        out["batch traverse"] = rows(b * n).copy()
        assert ms[0].traverse_draft_tree(links[0][0], links[1][0], links[2][0], rows(n))
        out["traverse"] = rows(n).copy()
        batcher.batch_fill_next_token_bitmask(ms, rows(b))
        out["batch fill"] = rows(b).copy()
        for i, matcher in enumerate(ms):
            matcher.fill_next_token_bitmask(rows(b), i)
        out["fill"] = rows(b).copy()
        ext = extend_draft_trees(ms, *links, budget=2, token_bitmask=rows(m), batch=batcher)
        out["extend"] = (rows(m).copy(), ext.draft_tokens)
        return out

    plain = np.full((m, W), SENTINEL, dtype=np.int32)
    want = calls((nt, ns, draft), lambda k: plain[:k])
    np.testing.assert_array_equal(want["batch traverse"], expected)
    kernels = [
        kernels_batch.fill_slot,
        kernels_batch.traverse_slot,
        kernels_batch.batch_fill,
        kernels_batch.batch_traverse,
        _rows.batch_unfilled_rows,
        _forced.batch_extend,
        _tree.check_tree_input,
        _tree.check_trees,
    ]
    compiled_for = {k: set(k.signatures) for k in kernels}
    big = np.full((2 * m, W), SENTINEL, dtype=np.int32)  # every other row: a strided view
    got = calls(read_only, lambda k: big[: 2 * k : 2])
    assert (big[1::2] == SENTINEL).all()
    for name, rows in want.items():
        if name == "extend":
            np.testing.assert_array_equal(got[name][0], rows[0])
            np.testing.assert_array_equal(got[name][1], rows[1])
        else:
            np.testing.assert_array_equal(got[name], rows, err_msg=name)
    for k in kernels:
        assert set(k.signatures) == compiled_for[k], k.py_func.__name__


def _bad_buffers(rows):
    wide = np.full((rows, 2 * W), SENTINEL, dtype=np.int32)
    ro = np.full((rows, W), SENTINEL, dtype=np.int32)
    ro.flags.writeable = False
    return {
        "int64": np.full((rows, W), SENTINEL, dtype=np.int64),
        "uint32": np.full((rows, W), SENTINEL, dtype=np.uint32),
        "non_contiguous_words": wide[:, ::2],
        "too_few_rows": np.full((rows - 1, W), SENTINEL, dtype=np.int32),
        "wrong_width": np.full((rows, W + 1), SENTINEL, dtype=np.int32),
        "three_d": np.full((rows, 1, W), SENTINEL, dtype=np.int32),
        "read_only": ro,
        "list": [[0] * W] * rows,
    }


@pytest.mark.parametrize("kind", list(_bad_buffers(4)))
def test_invalid_buffers_rejected_without_changes(compiled, batcher, kind):
    rng = np.random.default_rng(23)
    ms, nt, ns, draft, _ = _small_case(compiled, rng)
    rows = nt.shape[1] * len(ms)
    bad = _bad_buffers(rows)[kind]
    keep = np.array(bad, copy=True)
    before = [snapshot(m) for m in ms]
    with pytest.raises(BitmaskError):
        batcher.batch_traverse_draft_tree(ms, nt, ns, draft, bad)
    n = nt.shape[1]
    scalar_bad = _bad_buffers(n)[kind]
    with pytest.raises(BitmaskError):
        ms[0].traverse_draft_tree(nt[0], ns[0], draft[0], scalar_bad)
    np.testing.assert_array_equal(np.asarray(bad), keep)
    assert [snapshot(m) for m in ms] == before


def test_torch_buffer_wrong_dtype_and_non_contiguous_words(compiled, batcher):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(24)
    ms, nt, ns, draft, _ = _small_case(compiled, rng)
    rows = nt.shape[1] * len(ms)
    for bad in (
        torch.zeros((rows, W), dtype=torch.int64),
        torch.zeros((rows, 2 * W), dtype=torch.int32)[:, ::2],
        torch.zeros((W, rows), dtype=torch.int32).t(),
        torch.zeros((1, W), dtype=torch.int32).expand(rows, W),
    ):
        with pytest.raises(BitmaskError):
            batcher.batch_traverse_draft_tree(ms, nt, ns, draft, bad)


# ------------------------------------------------------------- 3b. invalid inputs
B_BAD, N_BAD = 4, 6


@pytest.fixture
def bad_input_case(compiled):
    """A valid batch call whose inputs each test breaks in one way (in the LAST request
    where that makes sense, so earlier requests would have run if validation were late)."""
    rng = np.random.default_rng(31)
    ms = make_requests(compiled, rng, B_BAD, ["object", "letters", "expr", "words"])
    parents = np.stack([np.array([-1, 0, 0, 1, 1, 2])] * B_BAD)
    nt, ns = links(parents)
    draft = np.stack([random_tokens(ms[i], rng, parents[i], 0, p_valid=1.0) for i in range(B_BAD)])
    return dict(
        matchers=ms,
        retrieve_next_token=nt.copy(),
        retrieve_next_sibling=ns.copy(),
        draft_tokens=draft,
        token_bitmask=np.full((B_BAD * N_BAD, W), SENTINEL, dtype=np.int32),
    )


def _set(key, value):
    def edit(c):
        c[key] = value(c) if callable(value) else value

    return edit


def _poke(key, idx, value):
    def edit(c):
        arr = c[key].copy()
        arr[idx] = value
        c[key] = arr

    return edit


def _other_vocab_matcher():
    info = tg.TokenizerInfo(VOCAB, vocab_size=V + 40, stop_token_ids=[EOS])
    return GrammarMatcher(tg.GrammarCompiler(info).compile_grammar("root ::= [a-z]*"))


BAD_INPUTS = {
    # dtype / shape
    "float_next_token": (
        _set("retrieve_next_token", lambda c: c["retrieve_next_token"].astype(np.float64)),
        DraftTreeError,
    ),
    "float_next_sibling": (
        _set("retrieve_next_sibling", lambda c: c["retrieve_next_sibling"].astype(np.float32)),
        DraftTreeError,
    ),
    "float_draft": (
        _set("draft_tokens", lambda c: c["draft_tokens"].astype(np.float64)),
        DraftTreeError,
    ),
    "draft_1d": (_set("draft_tokens", lambda c: c["draft_tokens"][0]), DraftTreeError),
    "draft_too_few_requests": (
        _set("draft_tokens", lambda c: c["draft_tokens"][:-1]),
        DraftTreeError,
    ),
    "links_wrong_n": (
        _set(
            "retrieve_next_token",
            lambda c: np.pad(c["retrieve_next_token"], ((0, 0), (0, 1)), constant_values=-1),
        ),
        DraftTreeError,
    ),
    "links_wrong_batch": (
        _set("retrieve_next_token", lambda c: np.concatenate([c["retrieve_next_token"]] * 2)),
        DraftTreeError,
    ),
    "links_3d": (
        _set("retrieve_next_sibling", lambda c: c["retrieve_next_sibling"][None]),
        DraftTreeError,
    ),
    "links_shapes_differ": (
        _set("retrieve_next_token", lambda c: c["retrieve_next_token"][0]),
        DraftTreeError,
    ),
    # malformed trees (last request only)
    "link_out_of_range": (_poke("retrieve_next_token", (B_BAD - 1, 3), N_BAD), DraftTreeError),
    "link_below_minus_one": (_poke("retrieve_next_sibling", (B_BAD - 1, 3), -2), DraftTreeError),
    "cycle_to_root": (_poke("retrieve_next_token", (B_BAD - 1, 5), 0), DraftTreeError),
    "self_loop": (_poke("retrieve_next_token", (B_BAD - 1, 4), 4), DraftTreeError),
    "two_parents": (_poke("retrieve_next_token", (B_BAD - 1, 5), 3), DraftTreeError),
    "sibling_cycle": (_poke("retrieve_next_sibling", (B_BAD - 1, 4), 3), DraftTreeError),
    "root_with_sibling": (_poke("retrieve_next_sibling", (B_BAD - 1, 0), 5), DraftTreeError),
    "root_out_of_range": (_set("root_positions", [0, 0, 0, N_BAD]), DraftTreeError),
    "root_negative": (_set("root_positions", [0, 0, 0, -1]), DraftTreeError),
    "root_float": (_set("root_positions", [0.0, 0.0, 0.0, 0.0]), DraftTreeError),
    "root_is_a_sibling": (_set("root_positions", [0, 0, 0, 1]), DraftTreeError),
    # indices and roots
    "duplicate_indices": (_set("indices", [2, 0, 2]), ArgumentError),
    "indices_out_of_range": (_set("indices", [0, B_BAD]), ArgumentError),
    "indices_negative": (_set("indices", [0, -1]), ArgumentError),
    "indices_2d": (_set("indices", [[0, 1]]), ArgumentError),
    "too_many_root_positions": (_set("root_positions", [0] * (B_BAD + 1)), ArgumentError),
    "too_few_root_positions_for_indices": (
        lambda c: c.update(indices=[0, 2, 3], root_positions=[0, 0]),
        ArgumentError,
    ),
    # matchers and buffer
    "not_a_matcher": (_set("matchers", lambda c: [*c["matchers"][:-1], object()]), ArgumentError),
    "matchers_not_a_list": (_set("matchers", lambda c: iter(c["matchers"])), ArgumentError),
    "mixed_vocab_sizes": (
        _set("matchers", lambda c: [*c["matchers"][:-1], _other_vocab_matcher()]),
        ArgumentError,
    ),
    "too_few_rows": (_set("token_bitmask", lambda c: c["token_bitmask"][:-1]), BitmaskError),
}


@pytest.mark.parametrize("case", list(BAD_INPUTS))
def test_invalid_batch_inputs_change_nothing(bad_input_case, batcher, case):
    edit, error = BAD_INPUTS[case]
    call = dict(bad_input_case)
    ms = list(call["matchers"])
    edit(call)
    before = [snapshot(m) for m in ms]
    out = bad_input_case["token_bitmask"]
    with pytest.raises(error) as info:
        batcher.batch_traverse_draft_tree(**call)
    assert str(info.value)
    assert (out == SENTINEL).all(), "an invalid call wrote output rows"
    assert [snapshot(m) for m in ms] == before, "an invalid call changed a matcher"
    # and the unbroken call still works afterwards
    assert batcher.batch_traverse_draft_tree(**bad_input_case) == [True] * B_BAD


SCALAR_BAD = {
    "float_links": (lambda nt, ns, d, r: (nt.astype(float), ns, d, r), DraftTreeError),
    "lengths_differ": (lambda nt, ns, d, r: (nt, ns[:-1], d, r), DraftTreeError),
    "draft_2d": (lambda nt, ns, d, r: (nt, ns, d[None], r), DraftTreeError),
    "links_2d": (lambda nt, ns, d, r: (nt[None], ns[None], d, r), DraftTreeError),
    "out_of_range": (lambda nt, ns, d, r: (np.where(nt == 3, 9, nt), ns, d, r), DraftTreeError),
    "cycle": (lambda nt, ns, d, r: (np.where(np.arange(6) == 5, 0, nt), ns, d, r), DraftTreeError),
    "two_parents": (
        lambda nt, ns, d, r: (np.where(np.arange(6) == 5, 3, nt), ns, d, r),
        DraftTreeError,
    ),
    "root_sibling": (
        lambda nt, ns, d, r: (nt, np.where(np.arange(6) == 0, 4, ns), d, r),
        DraftTreeError,
    ),
    "root_out_of_range": (lambda nt, ns, d, r: (nt, ns, d, 6), DraftTreeError),
    "root_negative": (lambda nt, ns, d, r: (nt, ns, d, -1), DraftTreeError),
    "root_bool": (lambda nt, ns, d, r: (nt, ns, d, True), DraftTreeError),
    "too_few_rows": (lambda nt, ns, d, r: (nt, ns, d, r, 5), BitmaskError),
}


@pytest.mark.parametrize("case", list(SCALAR_BAD))
def test_invalid_scalar_inputs_change_nothing(compiled, case):
    edit, error = SCALAR_BAD[case]
    m = GrammarMatcher(compiled["object"])
    m.accept_token(tid("{"))
    nt, ns = links(np.array([-1, 0, 0, 1, 1, 2]))
    d = np.array([0, tid('"'), tid(" "), tid("a"), tid("b"), tid("}")])
    args = edit(nt, ns, d, 0)
    rows = args[4] if len(args) == 5 else 6
    out = np.full((rows, W), SENTINEL, dtype=np.int32)
    before = snapshot(m)
    with pytest.raises(error):
        m.traverse_draft_tree(args[0], args[1], args[2], out, root_position=args[3])
    assert (out == SENTINEL).all()
    assert snapshot(m) == before


# ---------------------------------------------------------- 4. worker failure, pool reuse
def test_worker_failure_propagates_and_pool_is_reused(compiled, monkeypatch):
    rng = np.random.default_rng(41)
    b, n = 8, 10
    ms = make_requests(compiled, rng, b)
    parents = random_parents(rng, n)
    nt, ns = links(parents)
    draft = np.stack([random_tokens(m, rng, parents, 0) for m in ms])
    expected = np.concatenate([reference_rows(m, parents, draft[i]) for i, m in enumerate(ms)])
    before = [snapshot(m) for m in ms]
    assert matcher_batch._batch is kernels_batch
    original = kernels_batch.batch_traverse
    calls = []

    def failing(*args):
        start, stop = args[-2], args[-1]
        calls.append((start, stop))
        if start > 0:
            raise RuntimeError(f"boom in chunk {start}:{stop}")
        return original(*args)

    monkeypatch.setattr(matcher_batch, "_INLINE_WORDS", 0)
    monkeypatch.setattr(kernels_batch, "batch_traverse", failing)
    with BatchGrammarMatcher(max_threads=2) as bm:
        out = np.full((b * n, W), SENTINEL, dtype=np.int32)
        with pytest.raises(WorkerError) as info:
            bm.batch_traverse_draft_tree(ms, nt, ns, draft, out)
        assert isinstance(info.value.__cause__, RuntimeError)
        assert "boom in chunk" in str(info.value.__cause__)
        assert len(calls) == 2, "the batch was not split into two chunks"
        assert [snapshot(m) for m in ms] == before

        monkeypatch.setattr(kernels_batch, "batch_traverse", original)
        out[:] = SENTINEL
        assert bm.batch_traverse_draft_tree(ms, nt, ns, draft, out) == [True] * b
        np.testing.assert_array_equal(out, expected)
        assert [snapshot(m) for m in ms] == before
        # the pool also runs the other batch kernels after the failure
        rows = np.zeros((b, W), dtype=np.int32)
        bm.batch_fill_next_token_bitmask(ms, rows)
        for i in range(b):
            np.testing.assert_array_equal(rows[i], expected[i * n])


def test_threaded_batch_matches_inline(compiled, monkeypatch):
    rng = np.random.default_rng(42)
    b, n = 9, 15
    ms = make_requests(compiled, rng, b)
    parents = np.stack([random_parents(rng, n) for _ in range(b)])
    nt, ns = links(parents)
    draft = np.stack([random_tokens(ms[i], rng, parents[i], 0) for i in range(b)])
    inline = np.full((b * n, W), SENTINEL, dtype=np.int32)
    with BatchGrammarMatcher(max_threads=1) as one:
        one.batch_traverse_draft_tree(ms, nt, ns, draft, inline)
    monkeypatch.setattr(matcher_batch, "_INLINE_WORDS", 0)
    threaded = np.full((b * n, W), SENTINEL, dtype=np.int32)
    with BatchGrammarMatcher(max_threads=3) as three:
        assert (
            three.batch_traverse_draft_tree(ms, nt, ns, draft, threaded, indices=np.arange(b)[::-1])
            == [True] * b
        )
    np.testing.assert_array_equal(inline, threaded)


# ------------------------------------------------------------- 5. xgrammar, DeepSeek-V4
XGR_EBNF = r"""
root ::= "{" ws pair (ws "," ws pair)* ws "}"
pair ::= key ws ":" ws val
key ::= "\"" [a-z_]+ "\""
val ::= num | key | "[" ws (num (ws "," ws num)*)? ws "]"
num ::= "-"? [0-9]+ ("." [0-9]+)?
ws ::= [ \n]*
"""

DOCS = {
    "json": [
        '{"name": "Alice", "age": 30, "tags": ["x", "y"]}',
        '{"name": "Alice", "age": 31.5}',
        '{"name": "Alicia", "nested": {"ok": true, "v": null}}',
        '{"name": "Al", "list": [1, 2, 3]}',
        '[{"name": "Alice"}, 1, "two"]',
    ],
    "ebnf": [
        '{"alpha": 12, "beta": [1, 2, 3]}',
        '{"alpha": 12, "gamma": "delta"}',
        '{"alpha": 7}',
        '{"alpha": -1.25, "beta": []}',
    ],
}


def _trie(seqs: list[list[int]], rng, extra: int, vocab: int) -> tuple[np.ndarray, np.ndarray]:
    """Parents and tokens of the token trie of ``seqs`` (node 0: the root), plus ``extra``
    random leaves hung below random nodes."""
    parents, tokens, index = [-1], [0], {}
    for seq in seqs:
        node = 0
        for t in seq:
            key = (node, t)
            if key not in index:
                index[key] = len(parents)
                parents.append(node)
                tokens.append(t)
            node = index[key]
    for _ in range(extra):
        parents.append(int(rng.integers(0, len(parents))))
        tokens.append(int(rng.integers(0, vocab)))
    return np.array(parents, dtype=np.int64), np.array(tokens, dtype=np.int64)


@pytest.fixture(scope="module")
def deepseek():
    xgr = pytest.importorskip("xgrammar")
    torch = pytest.importorskip("torch")
    tokenizers = pytest.importorskip("tokenizers")
    from treegram.tokenizer import deepseek_v4_tokenizer_json

    info = tg.TokenizerInfo.deepseek_v4()
    xinfo = xgr.TokenizerInfo(
        info.decoded_vocab,
        xgr.VocabType.RAW,
        vocab_size=info.vocab_size,
        stop_token_ids=info.stop_token_ids,
    )
    tok = tokenizers.Tokenizer.from_file(str(deepseek_v4_tokenizer_json()))
    tc, xc = tg.GrammarCompiler(info), xgr.GrammarCompiler(xinfo)
    grammars = {
        "json": (tc.compile_builtin_json_grammar(), xc.compile_builtin_json_grammar()),
        "ebnf": (tc.compile_grammar(XGR_EBNF), xc.compile_grammar(XGR_EBNF)),
    }
    seqs = {
        k: [tok.encode(d, add_special_tokens=False).ids for d in docs] for k, docs in DOCS.items()
    }
    return dict(
        xgr=xgr,
        torch=torch,
        info=info,
        grammars=grammars,
        seqs=seqs,
        words=(info.vocab_size + 31) // 32,
        stop=info.stop_token_ids[0],
    )


def _xgr_rows(ds, xm, nt, ns, draft):
    torch = ds["torch"]
    buf = torch.full((len(draft), ds["words"]), SENTINEL, dtype=torch.int32)
    buf.zero_()  # xgrammar leaves unreached rows untouched
    assert xm.traverse_draft_tree(
        torch.from_numpy(nt), torch.from_numpy(ns), torch.from_numpy(draft), buf
    )
    return buf.numpy()


@pytest.mark.parametrize("kind", ["json", "ebnf"])
def test_xgrammar_parity_deepseek(deepseek, kind):
    ds = deepseek
    xgr = ds["xgr"]
    tcg, xcg = ds["grammars"][kind]
    rng = np.random.default_rng(51)
    vocab = ds["info"].vocab_size
    seqs = ds["seqs"][kind]
    # with the stop token after each complete document, and branches from shared prefixes
    trees = [
        _trie(seqs, rng, 0, vocab),
        _trie([s + [ds["stop"]] for s in seqs], rng, 6, vocab),
        _trie([s[: len(s) // 2] for s in seqs] + seqs[:2], rng, 3, vocab),
    ]
    m = GrammarMatcher(tcg)
    xm = xgr.GrammarMatcher(xcg)
    for parents, draft in trees:
        nt, ns = links(parents)
        assert (ns[1:] >= 0).any(), "the tree should branch"
        ours = np.full((len(draft), ds["words"]), SENTINEL, dtype=np.int32)
        assert m.traverse_draft_tree(nt, ns, draft, ours)
        theirs = _xgr_rows(ds, xm, nt, ns, draft)
        reached = (ours != 0).any(axis=1)
        assert reached.sum() >= len(draft) - 10
        np.testing.assert_array_equal(ours, theirs)
        assert m.num_accepted_steps() == 0


def test_xgrammar_batch_parity_deepseek(deepseek, batcher):
    ds = deepseek
    xgr = ds["xgr"]
    rng = np.random.default_rng(52)
    vocab = ds["info"].vocab_size
    ours_m, xgr_m, trees = [], [], []
    for i in range(8):
        kind = "json" if i % 2 == 0 else "ebnf"
        tcg, xcg = ds["grammars"][kind]
        k = i // 2  # tokens accepted before the tree (the root is the last of them)
        seqs = [s for s in ds["seqs"][kind] if s[:k] == ds["seqs"][kind][0][:k]]
        assert len(seqs) >= 2
        m, xm = GrammarMatcher(tcg), xgr.GrammarMatcher(xcg)
        for t in seqs[0][:k]:
            assert m.accept_token(t) and xm.accept_token(t)
        parents, draft = _trie([s[k:] + [ds["stop"]] for s in seqs], rng, 2, vocab)
        ours_m.append(m)
        xgr_m.append(xm)
        trees.append((parents, draft))
    n = max(len(p) for p, _ in trees)
    parents = np.full((8, n), -1, dtype=np.int64)  # padding: extra roots, never reached
    draft = np.zeros((8, n), dtype=np.int64)
    for i, (p, d) in enumerate(trees):
        parents[i, : len(p)] = p
        draft[i, : len(d)] = d
    nt, ns = links(parents)
    out = np.full((8 * n, ds["words"]), SENTINEL, dtype=np.int32)
    steps = [m.num_accepted_steps() for m in ours_m]
    assert steps == [i // 2 for i in range(8)]
    assert batcher.batch_traverse_draft_tree(ours_m, nt, ns, draft, out) == [True] * 8
    for i, xm in enumerate(xgr_m):
        np.testing.assert_array_equal(
            out[i * n : (i + 1) * n],
            _xgr_rows(ds, xm, nt[i], ns[i], draft[i]),
            err_msg=f"request {i}",
        )
    assert [m.num_accepted_steps() for m in ours_m] == steps


def test_xgrammar_parity_small_vocab_random_trees(compiled):
    """Random trees on the small vocabulary, compared with xgrammar on the same text."""
    xgr = pytest.importorskip("xgrammar")
    torch = pytest.importorskip("torch")
    xinfo = xgr.TokenizerInfo(VOCAB, vocab_size=V, stop_token_ids=[EOS])
    xcompiled = compile_each(xgr.GrammarCompiler(xinfo), GRAMMARS)
    rng = np.random.default_rng(61)
    for name, xcg in xcompiled.items():
        for _ in range(3):
            m, xm = GrammarMatcher(compiled[name]), xgr.GrammarMatcher(xcg)
            for _ in range(int(rng.integers(0, 4))):
                row = mask_of(m)
                choices = [t for t in np.flatnonzero(tg.bitmask_to_bool(row, V)) if t != EOS]
                if not choices:
                    break
                t = int(rng.choice(choices))
                assert m.accept_token(t) and xm.accept_token(t)
            n = int(rng.integers(2, 30))
            parents = random_parents(rng, n)
            nt, ns = links(parents)
            draft = random_tokens(m, rng, parents, 0)
            draft = np.where((draft < 0) | (draft >= len(VOCAB)), tid("a"), draft)
            ours = np.full((n, W), SENTINEL, dtype=np.int32)
            assert m.traverse_draft_tree(nt, ns, draft, ours)
            theirs = torch.zeros((n, W), dtype=torch.int32)
            assert xm.traverse_draft_tree(
                torch.from_numpy(nt), torch.from_numpy(ns), torch.from_numpy(draft), theirs
            )
            # xgrammar sets the bits past vocab_size in the last word: compare V bits
            np.testing.assert_array_equal(
                tg.bitmask_to_bool(ours, V), tg.bitmask_to_bool(theirs.numpy(), V), err_msg=name
            )


# ------------------------------------------------------------ 6. long chains, timeouts
_ITEMS_CAP = 1 << 22


@pytest.fixture(autouse=True)
def _cap_item_growth(monkeypatch):
    """Turn runaway chart growth (the deep-tree bug) into a clean failure, not an OOM kill."""
    original = getattr(GrammarMatcher, "_grow_items", None)
    if original is None:  # pragma: no cover - the library changed its internals
        return

    def capped(self):
        if self._items_s.shape[0] >= _ITEMS_CAP:
            raise AssertionError(f"runaway chart growth: {self._items_s.shape[0]} items")
        return original(self)

    monkeypatch.setattr(GrammarMatcher, "_grow_items", capped)


def _chain(n: int, token: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    nt = np.arange(1, n + 1, dtype=np.int64)
    nt[-1] = -1
    ns = np.full(n, -1, dtype=np.int64)
    draft = np.full(n, token, dtype=np.int64)
    draft[0] = 0
    return nt, ns, draft


@pytest.mark.parametrize("n", [64, 70])
def test_chain_deeper_than_initial_chart_capacity(compiled, batcher, n):
    """Minimal reproduction: a fresh matcher and a chain of n 'a' tokens (depth n - 1)."""
    nt, ns, draft = _chain(n, tid("a"))
    m = GrammarMatcher(compiled["letters"])
    rows = np.zeros((n, W), dtype=np.int32)
    assert m.traverse_draft_tree(nt, ns, draft, rows)
    assert rows.any(axis=1).all() and m.num_accepted_steps() == 0
    out = np.zeros((n, W), dtype=np.int32)
    assert batcher.batch_traverse_draft_tree(
        [GrammarMatcher(compiled["letters"])], nt, ns, draft[None], out
    ) == [True]
    np.testing.assert_array_equal(out, rows)


def test_chain_as_deep_as_sets_accepted_one_by_one(compiled):
    """The same depth accepted token by token works (the growth logic itself is fine)."""
    m = GrammarMatcher(compiled["letters"])
    for _ in range(200):
        assert m.accept_token(tid("a"))
    row = mask_of(m)
    assert allowed(row, tid("z")) and allowed(row, EOS)
    m.rollback(200)
    assert m.num_accepted_steps() == 0


def _letters_after(compiled: dict, text: str) -> tuple[GrammarMatcher, tuple]:
    """A matcher of the letters grammar that has accepted the token ``text``, and its
    snapshot."""
    m = GrammarMatcher(compiled["letters"])
    m.accept_token(tid(text))
    return m, snapshot(m)


def test_ten_thousand_node_chain(compiled, batcher):
    n = 10_000
    nt, ns, draft = _chain(n, tid("a"))
    m, before = _letters_after(compiled, "b")
    expected_row = np.frombuffer(before[3], dtype=np.int32)
    allowed_ids = np.flatnonzero(tg.bitmask_to_bool(expected_row, V)).tolist()
    assert allowed_ids == sorted(
        [i for i, t in enumerate(VOCAB) if t.isascii() and t.isalpha() and t.islower()] + [EOS]
    )
    rows = np.full((n, W), SENTINEL, dtype=np.int32)
    assert m.traverse_draft_tree(nt, ns, draft, rows) is True
    assert (rows == expected_row).all()
    assert snapshot(m) == before
    other = GrammarMatcher(compiled["letters"])
    out = np.full((2 * n, W), SENTINEL, dtype=np.int32)
    assert batcher.batch_traverse_draft_tree([m, other], nt, ns, np.stack([draft, draft]), out) == [
        True,
        True,
    ]
    assert (out == expected_row).all()
    assert snapshot(m) == before and other.num_accepted_steps() == 0
    # a chain that breaks half way: the rest is never reached
    draft2 = draft.copy()
    draft2[n // 2] = tid("A")
    rows[:] = SENTINEL
    assert m.traverse_draft_tree(nt, ns, draft2, rows)
    assert (rows[: n // 2] == expected_row).all() and not rows[n // 2 :].any()


def test_tiny_time_threshold_returns_false_and_restores(compiled, batcher):
    n = 10_000
    nt, ns, draft = _chain(n, tid("a"))
    m, before = _letters_after(compiled, "q")
    rows = np.zeros((n, W), dtype=np.int32)
    assert m.traverse_draft_tree(nt, ns, draft, rows, time_threshold=1e-9) is False
    assert snapshot(m) == before
    other = GrammarMatcher(compiled["object"])
    out = np.zeros((2 * n, W), dtype=np.int32)
    done = batcher.batch_traverse_draft_tree(
        [m, other], nt, ns, np.stack([draft, draft]), out, time_threshold=1e-9
    )
    assert done[0] is False
    assert snapshot(m) == before and other.num_accepted_steps() == 0
    # a wide, shallow tree: 10,000 children of the root (depth 1)
    star_nt = np.full(n, -1, dtype=np.int64)
    star_nt[0] = 1
    star_ns = np.arange(1, n + 1, dtype=np.int64)
    star_ns[0] = -1
    star_ns[-1] = -1
    star_draft = (np.arange(n) % len(VOCAB)).astype(np.int64)
    assert m.traverse_draft_tree(star_nt, star_ns, star_draft, rows, time_threshold=1e-9) is False
    assert snapshot(m) == before
    done = batcher.batch_traverse_draft_tree(
        [m, other], star_nt, star_ns, np.stack([star_draft, star_draft]), out, time_threshold=1e-9
    )
    assert done[0] is False
    assert snapshot(m) == before and other.num_accepted_steps() == 0
    # a generous budget completes, and the rows are the reference's
    start = time.monotonic()
    assert m.traverse_draft_tree(star_nt, star_ns, star_draft, rows, time_threshold=600.0)
    assert time.monotonic() - start < 600
    star_parents = np.zeros(n, dtype=np.int64)
    star_parents[0] = -1
    np.testing.assert_array_equal(rows, reference_rows(m, star_parents, star_draft))
    assert snapshot(m) == before


def test_timed_out_traversal_fills_the_root_row_when_it_is_known(batcher):
    """xgrammar's test_traverse_draft_tree_timeout_triggers: a traversal that times out
    still fills the root's row (the current mask), as xgrammar's does, once the root's
    classes are known (on a fresh grammar the budget wins: tests/matcher/test_deadlines.py).
    Rows below are those of reached nodes or zero; the matcher is unchanged. Scalar, batch,
    and a budgeted grammar (walked node by node)."""
    xgr = pytest.importorskip("xgrammar")
    n = 10_000
    nt = np.arange(1, n + 1, dtype=np.int64)
    nt[-1] = -1
    ns = np.full(n, -1, dtype=np.int64)
    draft = np.zeros(n, dtype=np.int64)
    theirs_m = xgr.GrammarMatcher(
        xgr.GrammarCompiler(
            xgr.TokenizerInfo(["a"], vocab_size=1, stop_token_ids=[])
        ).compile_grammar('root ::= "a" root | "a"')
    )
    theirs = np.zeros((n, 1), dtype=np.int32)
    assert theirs_m.traverse_draft_tree(nt, ns, draft, theirs, time_threshold=1e-7) is False
    for grammar in ('root ::= "a" root | "a"', 'root ::= r\nr[max_tokens=3] ::= "a"+'):
        info = tg.TokenizerInfo(["a"], vocab_size=1, stop_token_ids=[])
        compiler = tg.GrammarCompiler(info, cache_enabled=False)
        m = GrammarMatcher(compiler.compile_grammar(grammar))
        before = snapshot(m)
        rows = np.full((n, 1), SENTINEL, dtype=np.int32)
        current = np.zeros((1, 1), dtype=np.int32)
        m.fill_next_token_bitmask(current)  # the root's classes are known from here on
        rows[:] = SENTINEL
        assert m.traverse_draft_tree(nt, ns, draft, rows, time_threshold=1e-9) is False
        assert snapshot(m) == before
        # bit 0 is the one token (the bits past vocab_size are padding)
        assert rows[0, 0] & 1 == current[0, 0] & 1 == theirs[0, 0] & 1 == 1, grammar
        assert not (rows[1:] == SENTINEL).any()  # reached rows are masks, the rest zero
        ms = [m, GrammarMatcher(compiler.compile_grammar(grammar))]
        out = np.full((2 * n, 1), SENTINEL, dtype=np.int32)
        done = batcher.batch_traverse_draft_tree(
            ms, nt, ns, np.stack([draft, draft]), out, time_threshold=1e-9
        )
        assert done == [False, False]
        assert out[0, 0] & 1 == 1 and not (out == SENTINEL).any()
        assert snapshot(m) == before and ms[1].num_accepted_steps() == 0


# ----------------------------------------------------- chains: fill_chain / count_acceptable
def _manual_chain(m: GrammarMatcher, tokens: list[int]) -> tuple[np.ndarray, int, int]:
    """Rows and accepted count of a chain walk, plus count_acceptable_tokens' answer."""
    rows = np.zeros((len(tokens) + 1, W), dtype=np.int32)
    accepted = 0
    if not m.is_terminated():
        m.fill_next_token_bitmask(rows, 0)
        for j, t in enumerate(tokens):
            if m.is_terminated() or not allowed(rows[j], t):
                break
            assert m.accept_token(t)
            accepted += 1
            if not m.is_terminated():
                m.fill_next_token_bitmask(rows, j + 1)
        if accepted:
            m.rollback(accepted)
    count = 0
    for t in tokens:
        if not m.accept_token(t):
            break
        count += 1
    if count:
        m.rollback(count)
    return rows, accepted, count


@pytest.mark.parametrize("seed", range(8))
def test_fill_chain_bitmask_and_count_acceptable_tokens(compiled, seed):
    rng = np.random.default_rng(70 + seed)
    name = list(GRAMMARS)[seed % len(GRAMMARS)]
    m = GrammarMatcher(compiled[name])
    random_walk(m, rng, int(rng.integers(0, 3)))
    k = int(rng.integers(1, 12))
    parents = np.arange(-1, k, dtype=np.int64)  # a chain: node i's parent is i - 1
    draft = random_tokens(m, rng, parents, 0, p_valid=0.9)
    tokens = [int(t) if 0 <= t < V else tid("a") for t in draft[1:]]
    if seed % 4 == 0:
        tokens = tokens[: k // 2] + [EOS] + tokens[k // 2 :]
    before = snapshot(m)
    rows_ref, accepted_ref, count_ref = _manual_chain(m, tokens)
    rows = np.full((len(tokens) + 3, W), SENTINEL, dtype=np.int32)
    got = m.fill_chain_bitmask(np.array(tokens), rows)
    np.testing.assert_array_equal(rows[: len(tokens) + 1], rows_ref)
    assert (rows[len(tokens) + 1 :] == SENTINEL).all()
    assert got == count_ref
    assert accepted_ref <= count_ref
    assert m.count_acceptable_tokens(tokens) == count_ref
    assert snapshot(m) == before


def test_chain_helpers_reject_bad_input(compiled):
    m = GrammarMatcher(compiled["letters"])
    with pytest.raises(InvalidTokenIdError):
        m.count_acceptable_tokens([tid("a"), V])
    with pytest.raises(InvalidTokenIdError):
        m.fill_chain_bitmask([tid("a"), -1], np.zeros((3, W), dtype=np.int32))
    with pytest.raises(BitmaskError):
        m.fill_chain_bitmask([tid("a"), tid("b")], np.zeros((2, W), dtype=np.int32))
    with pytest.raises(ArgumentError):
        m.count_acceptable_tokens([[tid("a")]])
    assert m.count_acceptable_tokens([]) == 0
    assert m.num_accepted_steps() == 0


# ------------------------------------------- 7. engine row conventions (unfilled rows)
def _engine_walk(xm, nt, ns, draft, rows: np.ndarray) -> int:
    """An engine's own depth-first walk (SGLang's ``traverse_tree``) with xgrammar's
    scalar matcher, on ``rows`` allocated all -1: a node's row is filled only when the
    matcher has not terminated there, a child is accepted when its parent's row allows
    its token, and rows the walk does not fill keep the allocation. Returns the node it
    accepted last (-1: none)."""
    xgr = pytest.importorskip("xgrammar")
    torch = pytest.importorskip("torch")
    last = -1
    buf = torch.from_numpy(rows)

    def visit(node: int) -> None:
        nonlocal last
        if xm.is_terminated():
            return
        xm.fill_next_token_bitmask(buf, node)
        c = int(nt[node])
        while c >= 0:
            if allowed(rows[node], int(draft[c])):
                assert xm.accept_token(int(draft[c]))
                last = c
                visit(c)
                xm.rollback(1)
            c = int(ns[c])

    assert xgr is not None
    visit(0)
    return last


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("whole", [False, True])
def test_unfilled_rows_and_last_nodes_match_xgrammar_on_allocated_rows(
    compiled, batcher, seed, whole
):
    """``unfilled_rows=-1``: every row the traversal gives no mask (unreached and rejected
    nodes, stop-token nodes, a stopped matcher's whole tree) keeps the all -1 of an
    engine's allocation, and ``last_nodes`` is the node the engine's walk accepts last:
    both as an engine's own walk (SGLang's ``traverse_tree``) with xgrammar's matcher
    gives them. (xgrammar's own ``traverse_draft_tree`` zeroes rejected and stop-token
    rows instead, so it is not the oracle here.) Per-request trees, stop tokens inside
    them, stopped matchers, sparse indices; or the whole batch in one fused call, where
    half the requests' grammars are fresh (their states classified during the call, so the
    kernel leaves them unfinished and the others done)."""
    xgr = pytest.importorskip("xgrammar")
    xinfo = xgr.TokenizerInfo(VOCAB, vocab_size=V, stop_token_ids=[EOS])
    xcompiled = compile_each(xgr.GrammarCompiler(xinfo), GRAMMARS)
    rng = np.random.default_rng(700 + seed)
    b, n = 10, 14
    ours, theirs = [], []
    fresh = compile_small(GRAMMARS, V) if whole else compiled
    for i in range(b):
        name = list(GRAMMARS)[i % len(GRAMMARS)]
        grammar = fresh[name] if i % 2 else compiled[name]
        m, xm = GrammarMatcher(grammar), xgr.GrammarMatcher(xcompiled[name])
        for _ in range(int(rng.integers(0, 4))):
            choices = [t for t in np.flatnonzero(tg.bitmask_to_bool(mask_of(m), V))]
            if not choices:
                break
            t = int(rng.choice(choices))
            assert m.accept_token(t) and xm.accept_token(t)
            if t == EOS:
                break  # a stopped matcher: its whole tree stays as allocated
        ours.append(m)
        theirs.append(xm)
    parents = np.stack([random_parents(rng, n) for _ in range(b)])
    draft = np.zeros((b, n), dtype=np.int64)
    for i in range(b):
        if ours[i].is_terminated():
            draft[i] = rng.integers(0, len(VOCAB), n)
            continue
        draft[i] = random_tokens(ours[i], rng, parents[i], 0)
        draft[i] = np.where((draft[i] < 0) | (draft[i] >= len(VOCAB)), tid("a"), draft[i])
        draft[i, rng.random(n) < 0.15] = EOS  # stop tokens inside the trees
    assert any(m.is_terminated() for m in ours) or seed % 2
    nt, ns = links(parents)
    selected = np.array(sorted(rng.choice(b, size=b - 2, replace=False)), dtype=np.int64)
    if whole:
        selected = np.arange(b)
        warm = np.full((b * n, W), SENTINEL, dtype=np.int32)  # the old grammars' states
        batcher.batch_traverse_draft_tree(ours, nt, ns, draft, warm, indices=selected[::2])
    out = np.full((b * n, W), SENTINEL, dtype=np.int32)
    last = np.full(len(selected), -7, dtype=np.int64)
    before = [snapshot(m) for m in ours]
    done = batcher.batch_traverse_draft_tree(
        ours,
        nt,
        ns,
        draft,
        out,
        indices=None if whole else selected,
        unfilled_rows=-1,
        last_nodes=last,
    )
    assert done == [True] * len(selected)
    assert [snapshot(m) for m in ours] == before
    stopped_rows = 0
    for k, i in enumerate(selected.tolist()):
        rows = np.full((n, W), -1, dtype=np.int32)  # as an engine allocates them
        walked_last = _engine_walk(theirs[i], nt[i], ns[i], draft[i], rows)
        np.testing.assert_array_equal(
            tg.bitmask_to_bool(out[i * n : (i + 1) * n], V),
            tg.bitmask_to_bool(rows, V),
            err_msg=f"request {i}",
        )
        unfilled = (rows == -1).all(axis=1)
        assert (out[i * n : (i + 1) * n][unfilled] == -1).all()  # every word, padding too
        stopped_rows += int(unfilled.sum())
        assert last[k] == walked_last, f"request {i}"
    assert stopped_rows > 0
    for i in set(range(b)) - set(selected.tolist()):
        assert (out[i * n : (i + 1) * n] == SENTINEL).all()  # not selected: untouched


def test_unfilled_rows_zero_is_the_default_and_bad_options_change_nothing(compiled, batcher):
    rng = np.random.default_rng(77)
    ms = make_requests(compiled, rng, 3)
    parents = np.stack([random_parents(rng, 6) for _ in range(3)])
    nt, ns = links(parents)
    draft = np.stack([random_tokens(m, rng, p, 0) for m, p in zip(ms, parents, strict=True)])
    draft = np.where((draft < 0) | (draft >= len(VOCAB)), tid("a"), draft)
    plain = np.full((18, W), SENTINEL, dtype=np.int32)
    batcher.batch_traverse_draft_tree(ms, nt, ns, draft, plain)
    zero = np.full((18, W), SENTINEL, dtype=np.int32)
    last = np.zeros(3, dtype=np.int64)
    batcher.batch_traverse_draft_tree(ms, nt, ns, draft, zero, unfilled_rows=0, last_nodes=last)
    np.testing.assert_array_equal(plain, zero)
    for bad in (
        {"unfilled_rows": 1},
        {"unfilled_rows": True},
        {"last_nodes": np.zeros(2, dtype=np.int64)},
        {"last_nodes": np.zeros(3, dtype=np.int32)},
        {"last_nodes": np.zeros(6, dtype=np.int64)[::2]},
    ):
        out = np.full((18, W), SENTINEL, dtype=np.int32)
        with pytest.raises(ArgumentError):
            batcher.batch_traverse_draft_tree(ms, nt, ns, draft, out, **bad)
        assert (out == SENTINEL).all()
