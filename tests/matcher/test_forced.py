"""Grammar-forced draft nodes: forced chains and draft-tree extension.

The reference (:func:`ref_chain`, :func:`ref_extend`) uses nothing but the scalar matcher
API (``find_jump_forward_string``, ``accept_token``, ``fill_next_token_bitmask``,
``rollback``) and a plain-Python greedy longest match over the decoded vocabulary, following
the rules in ``treegram/matcher/_forced.py``: forced bytes cut greedily into tokens, then a
token that is the mask's only choice; effective leaves extended in depth-first order.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from matcher_rows import mask_of, reference_rows, snapshot

import treegram as tg
from treegram import BatchGrammarMatcher, GrammarMatcher
from treegram.errors import ArgumentError, BitmaskError, DraftTreeError, InvalidTokenIdError
from treegram.matcher import batch_forced_chains, extend_draft_trees, forced_chain
from treegram.spec import (
    links_from_parents,
    parents_from_tree_mask,
    positions_from_parents,
    tree_mask_from_parents,
)

VOCAB: list[str] = [chr(c) for c in range(32, 127)] + [
    '{"',
    '":',
    '": "',
    '",',
    "name",
    "nam",
    "true",
    "alpha",
    "al",
    "<eos>",
]
V = len(VOCAB)
W = (V + 31) // 32
EOS = VOCAB.index("<eos>")

GRAMMARS = {
    "object": r"""
root ::= "{\"name\": \"" [a-z]+ "\", \"kind\": " kind ", \"ok\": " ("true" | "false") "}"
kind ::= "\"alpha\"" | "\"beta\"" | "\"alps\""
""",
    "letters": "root ::= [a-z]*",
    "fixed": r"""root ::= "abc" "def" "ghij" """,
    "choice": r"""root ::= ("xyz" | "xyw") "!" "?" """,
}


@pytest.fixture(scope="module")
def compiled():
    info = tg.TokenizerInfo(VOCAB, vocab_size=V, stop_token_ids=[EOS])
    comp = tg.GrammarCompiler(info)
    return {name: comp.compile_grammar(text) for name, text in GRAMMARS.items()}


@pytest.fixture(scope="module")
def batcher():
    b = BatchGrammarMatcher(max_threads=2)
    yield b
    b.close()


# --------------------------------------------------------------------------- reference
BYTES = [t.encode() for t in VOCAB]


def allowed(row: np.ndarray, t: int) -> bool:
    return bool((int(row[t >> 5]) >> (t & 31)) & 1)


def longest(data: bytes) -> tuple[int, int]:
    best, best_len = -1, 0
    for t, b in enumerate(BYTES):
        if t == EOS or not b:
            continue
        if data.startswith(b) and len(b) > best_len:
            best, best_len = t, len(b)
    return best, best_len


def ref_chain(m: GrammarMatcher, budget: int) -> list[int]:
    """The forced chain from ``m``'s position by the scalar API; ``m`` is left unchanged."""
    toks: list[int] = []
    while len(toks) < budget and not m.is_terminated():
        forced = m.find_jump_forward_string().encode()
        if forced:
            p = 0
            while p < len(forced) and len(toks) < budget:
                t, n = longest(forced[p:])
                assert t >= 0
                assert m.accept_token(t)
                toks.append(t)
                p += n
            continue
        row = mask_of(m)
        choices = np.flatnonzero(tg.bitmask_to_bool(row, V))
        if len(choices) != 1:
            break
        assert m.accept_token(int(choices[0]))
        toks.append(int(choices[0]))
    if toks:
        m.rollback(len(toks))
    return toks


def ref_extend(m, parents, tokens, budget, per_leaf, root=0):
    """Expected forced tokens and their parents (appended after the input nodes)."""
    n = len(parents)
    children: list[list[int]] = [[] for _ in range(n)]
    for i, p in enumerate(parents):
        if p >= 0:
            children[int(p)].append(i)
    new_tokens: list[int] = []
    new_parents: list[int] = []
    before = snapshot(m)

    def visit(node: int) -> None:
        row = mask_of(m)
        had = False
        for c in children[node]:
            if row is None or not allowed(row, int(tokens[c])):
                continue
            assert m.accept_token(int(tokens[c]))
            had = True
            visit(c)
            m.rollback(1)
        if not had and len(new_tokens) < budget and not m.is_terminated():
            prev = node
            for t in ref_chain(m, min(per_leaf, budget - len(new_tokens))):
                new_tokens.append(t)
                new_parents.append(prev)
                prev = n + len(new_tokens) - 1

    if not m.is_terminated():
        visit(root)
    assert snapshot(m) == before
    return new_tokens, new_parents


def walk(m: GrammarMatcher, text: str) -> GrammarMatcher:
    for ch in text:
        assert m.accept_token(VOCAB.index(ch)), ch
    return m


def random_tree(rng, m: GrammarMatcher, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Parents (``parents[i] < i``) and tokens: mostly grammar-valid drafts, some random."""
    parents = np.full(n, -1, dtype=np.int64)
    tokens = np.zeros(n, dtype=np.int64)
    for i in range(1, n):
        parents[i] = i - 1 if rng.random() < 0.5 else rng.integers(0, i)
        path = []
        node = int(parents[i])
        while node > 0:
            path.append(node)
            node = int(parents[node])
        done = 0
        for node in reversed(path):
            if not m.accept_token(int(tokens[node])):
                break
            done += 1
        row = mask_of(m) if done == len(path) else None
        if row is not None and rng.random() < 0.8:
            choices = np.flatnonzero(tg.bitmask_to_bool(row, V))
            tokens[i] = int(rng.choice(choices)) if len(choices) else int(rng.integers(V))
        else:
            tokens[i] = int(rng.integers(V))
        if done:
            m.rollback(done)
    return parents, tokens


# --------------------------------------------------------------------------- chains
def test_chain_on_fixed_text(compiled):
    m = GrammarMatcher(compiled["fixed"])
    chain = forced_chain(m, 20)
    # greedy longest match of "abcdefghij", then the stop token (the only choice at the end)
    assert chain == [VOCAB.index(c) for c in "abcdefghij"] + [EOS]
    assert m.num_accepted_steps() == 0
    assert forced_chain(m, 3) == [VOCAB.index(c) for c in "abc"]
    assert forced_chain(m, 0) == []


def test_chain_uses_longest_tokens_and_stops_at_a_choice(compiled):
    m = GrammarMatcher(compiled["object"])
    chain = forced_chain(m, 50)
    assert [VOCAB[t] for t in chain] == ['{"', "name", '": "']
    for t in chain:
        assert m.accept_token(t)
    walk(m, "ab")
    assert forced_chain(m, 50) == []  # a letter or the closing quote: a choice
    walk(m, '"')
    chain = forced_chain(m, 50)
    assert "".join(VOCAB[t] for t in chain) == ', "kind": "'
    assert chain[0] == VOCAB.index(",")  # '",' is not a prefix of ', "kind": "'
    for t in chain:
        assert m.accept_token(t)
    walk(m, "a")
    assert [VOCAB[t] for t in forced_chain(m, 50)] == ["l", "p"]  # then "alpha" or "alps"


def test_chain_is_accepted_and_decodes_to_the_jump_forward_prefix(compiled):
    for name, prefix in (("object", ""), ("object", '{"name": "x", "kind": "b'), ("fixed", "ab")):
        m = walk(GrammarMatcher(compiled[name]), prefix)
        jump = m.find_jump_forward_string()
        chain = forced_chain(m, 4)
        text = "".join(VOCAB[t] for t in chain if t != EOS)
        assert jump.startswith(text) and text
        steps = m.num_accepted_steps()
        for t in chain:
            assert m.accept_token(t)
        assert m.num_accepted_steps() == steps + len(chain)


@pytest.mark.parametrize("seed", range(6))
def test_chain_matches_reference_from_random_positions(compiled, seed):
    rng = np.random.default_rng(seed)
    for name in GRAMMARS:
        m = GrammarMatcher(compiled[name])
        for _ in range(int(rng.integers(0, 12))):
            row = mask_of(m)
            if row is None:
                break
            choices = [t for t in np.flatnonzero(tg.bitmask_to_bool(row, V)) if t != EOS]
            if not choices:
                break
            assert m.accept_token(int(rng.choice(choices)))
        before = snapshot(m)
        budget = int(rng.integers(0, 12))
        assert forced_chain(m, budget) == ref_chain(m, budget)
        assert snapshot(m) == before


def test_batch_chains_and_budgets(compiled, batcher):
    ms = [
        GrammarMatcher(compiled["fixed"]),
        walk(GrammarMatcher(compiled["fixed"]), "abcdefghij"),
        GrammarMatcher(compiled["letters"]),
        GrammarMatcher(compiled["object"]),
    ]
    tokens, counts = batch_forced_chains(ms, [2, 5, 5, 1], batch=batcher)
    assert counts.tolist() == [2, 1, 0, 1]
    assert tokens.shape == (4, 5)
    assert tokens[0].tolist() == [VOCAB.index("a"), VOCAB.index("b"), -1, -1, -1]
    assert tokens[1, 0] == EOS and tokens[3, 0] == VOCAB.index('{"')
    assert (tokens[2] == -1).all()
    stopped = walk(GrammarMatcher(compiled["fixed"]), "abcdefghij")
    assert stopped.accept_token(EOS)
    assert forced_chain(stopped, 5) == []


def test_large_budgets_allocate_for_what_they_use(compiled):
    # forced_chain works in chunks: any max_tokens returns the chain there is, and chunks
    # join where they were cut (the fixed text is longer than one chunk's budget here)
    m = GrammarMatcher(compiled["fixed"])
    whole = forced_chain(m, 20)
    for max_tokens in (10**8, 10**12):
        assert forced_chain(m, max_tokens) == whole
    long_text = tg.GrammarCompiler(m.compiled_grammar.tokenizer_info).compile_grammar(
        'root ::= "' + "abcdefghij" * 60 + '" [a-z]'
    )
    chained = GrammarMatcher(long_text)
    assert forced_chain(chained, 10**9) == ref_chain(chained, 1000)
    # the draft-tree calls size their outputs by the budget: checked before allocating
    from treegram.matcher import MAX_FORCED_NODES

    one = (np.full(1, -1), np.full(1, -1), np.zeros((1, 1), dtype=np.int64))
    for bad in (MAX_FORCED_NODES + 1, 10**10, [10**10]):
        with pytest.raises(ArgumentError, match="MAX_FORCED_NODES"):
            extend_draft_trees([m], *one, budget=bad)
    with pytest.raises(ArgumentError, match="max_tokens.*MAX_FORCED_NODES"):
        batch_forced_chains([m], 10**12)


def test_chain_bad_input(compiled):
    m = GrammarMatcher(compiled["fixed"])
    with pytest.raises(ArgumentError, match="max_tokens"):
        forced_chain(m, -1)
    with pytest.raises(ArgumentError, match="max_tokens"):
        forced_chain(m, 2.5)
    with pytest.raises(ArgumentError, match="matcher"):
        forced_chain("m", 2)
    with pytest.raises(ArgumentError, match="budget"):
        batch_forced_chains([m], [1, 2])
    with pytest.raises(ArgumentError, match="same GrammarMatcher"):
        batch_forced_chains([m, m], 2)


# --------------------------------------------------------------------------- trees
def check_extension(ms, parents, tokens, budgets, per_leaf, ext, rows=None):
    """Compare an extension with the reference and with the spec functions."""
    b, n = tokens.shape
    m_nodes = ext.num_nodes
    assert m_nodes == n + int(np.max(budgets))
    for i, m in enumerate(ms):
        exp_tok, exp_par = ref_extend(m, parents[i], tokens[i], int(budgets[i]), per_leaf)
        k = int(ext.num_forced[i])
        assert k == len(exp_tok) <= budgets[i]
        assert ext.draft_tokens[i, n : n + k].tolist() == exp_tok
        assert ext.parents[i, n : n + k].tolist() == exp_par
        assert (ext.parents[i, n + k :] == -1).all()
        assert (ext.draft_tokens[i, :n] == tokens[i]).all()
        # input nodes keep their parents (all nodes hang below root 0 here)
        assert (ext.parents[i, :n] == parents[i]).all()
        if rows is not None:
            expected = reference_rows(m, ext.parents[i], ext.draft_tokens[i])
            assert np.array_equal(rows[i * m_nodes : (i + 1) * m_nodes], expected)
    # links are those of the parents; masks and positions follow from either
    nt, ns = links_from_parents(ext.parents)
    assert np.array_equal(nt, ext.next_token) and np.array_equal(ns, ext.next_sibling)
    mask = tree_mask_from_parents(ext.parents)
    assert np.array_equal(parents_from_tree_mask(mask), ext.parents)
    pos = positions_from_parents(ext.parents, 7)
    for i in range(b):
        link_parent = {}  # parents by the links, independently of ext.parents
        for p in range(m_nodes):
            for c in _children(ext.next_token[i], ext.next_sibling[i], p):
                assert c not in link_parent
                link_parent[c] = p
        for j in range(m_nodes):
            chain, node = [], j
            while node >= 0:
                chain.append(node)
                node = link_parent.get(node, -1)
            assert sorted(np.flatnonzero(mask[i, j]).tolist()) == sorted(chain)
            assert pos[i, j] == 7 + len(chain) - 1


def _children(nt, ns, p):
    out, c = [], int(nt[p])
    while c >= 0:
        out.append(c)
        c = int(ns[c])
    return out


def test_extension_of_a_root_only_tree(compiled):
    m = GrammarMatcher(compiled["object"])
    ext = extend_draft_trees([m], [-1], [-1], [[0]], budget=5)
    assert ext.num_forced.tolist() == [3]
    assert ext.draft_tokens[0, 1:4].tolist() == [VOCAB.index(t) for t in ('{"', "name", '": "')]
    assert ext.parents[0].tolist() == [-1, 0, 1, 2, -1, -1]
    assert ext.next_token[0].tolist() == [1, 2, 3, -1, -1, -1]
    assert m.num_accepted_steps() == 0


def test_only_effective_leaves_are_extended(compiled):
    m = walk(GrammarMatcher(compiled["object"]), '{"name": "ab"')
    # root -> "," (valid) -> " " (valid, leaf);  root -> "x" (invalid)
    parents = np.array([-1, 0, 1, 0], dtype=np.int64)
    tokens = np.array([0, VOCAB.index(","), VOCAB.index(" "), VOCAB.index("x")])
    ext = extend_draft_trees([m], *links_from_parents(parents), tokens[None], budget=10)
    k = int(ext.num_forced[0])
    assert "".join(VOCAB[t] for t in ext.draft_tokens[0, 4 : 4 + k]) == '"kind": "'
    assert ext.parents[0, 4] == 2  # below the valid leaf; the root and "x" get nothing
    # a leaf whose only drafted child is invalid is extended (as the last child)
    parents = np.array([-1, 0, 1], dtype=np.int64)
    tokens = np.array([0, VOCAB.index(","), VOCAB.index("z")])
    ext = extend_draft_trees([m], *links_from_parents(parents), tokens[None], budget=2)
    assert ext.parents[0].tolist() == [-1, 0, 1, 1, 3]
    assert ext.next_sibling[0, 2] == 3
    assert [VOCAB[t] for t in ext.draft_tokens[0, 3:5]] == [" ", '"']


@pytest.mark.parametrize("seed", range(10))
def test_extension_matches_reference_with_masks(compiled, batcher, seed):
    rng = np.random.default_rng(100 + seed)
    names = list(GRAMMARS)
    b, n = 4, int(rng.integers(1, 9))
    ms = []
    for _ in range(b):
        m = GrammarMatcher(compiled[names[int(rng.integers(len(names)))]])
        for _ in range(int(rng.integers(0, 10))):
            row = mask_of(m)
            choices = [t for t in np.flatnonzero(tg.bitmask_to_bool(row, V)) if t != EOS]
            if not choices:
                break
            assert m.accept_token(int(rng.choice(choices)))
        ms.append(m)
    parents = np.zeros((b, n), dtype=np.int64)
    tokens = np.zeros((b, n), dtype=np.int64)
    for i, m in enumerate(ms):
        parents[i], tokens[i] = random_tree(rng, m, n)
    budgets = rng.integers(0, 9, size=b)
    per_leaf = int(rng.integers(1, 6))
    nt, ns = links_from_parents(parents)
    m_nodes = n + int(budgets.max())
    rows = np.full((b * m_nodes + 2, W), 0x5A5A5A5A, dtype=np.int32)
    before = [snapshot(m) for m in ms]
    ext = extend_draft_trees(
        ms,
        nt,
        ns,
        tokens,
        budget=budgets,
        token_bitmask=rows,
        max_per_leaf=per_leaf,
        batch=batcher,
    )
    assert [snapshot(m) for m in ms] == before
    assert (rows[b * m_nodes :] == 0x5A5A5A5A).all()  # rows past B * M untouched
    check_extension(ms, parents, tokens, budgets, per_leaf, ext, rows)
    # without masks: the same trees; a traversal of them gives the same rows
    ext2 = extend_draft_trees(ms, nt, ns, tokens, budget=budgets, max_per_leaf=per_leaf)
    for name in ("draft_tokens", "next_token", "next_sibling", "parents", "num_forced"):
        assert np.array_equal(getattr(ext, name), getattr(ext2, name)), name
    rows2 = np.zeros((b * m_nodes, W), dtype=np.int32)
    batcher.batch_traverse_draft_tree(
        ms, ext2.next_token, ext2.next_sibling, ext2.draft_tokens, rows2
    )
    assert np.array_equal(rows2, rows[: b * m_nodes])
    assert [snapshot(m) for m in ms] == before


def test_shared_tree_nonzero_root_and_stopped_matcher(compiled):
    stopped = walk(GrammarMatcher(compiled["fixed"]), "abcdefghij")
    assert stopped.accept_token(EOS)
    ms = [GrammarMatcher(compiled["fixed"]), stopped, walk(GrammarMatcher(compiled["fixed"]), "a")]
    # shared tree: node 1 is the root, node 0 its child
    nt = np.array([-1, 0], dtype=np.int64)
    ns = np.array([-1, -1], dtype=np.int64)
    tokens = np.array([[VOCAB.index("a"), 0], [0, 0], [VOCAB.index("b"), 0]], dtype=np.int64)
    rows = np.full((3 * 5, W), 7, dtype=np.int32)
    ext = extend_draft_trees(
        ms, nt, ns, tokens, budget=3, root_positions=[1, 1, 1], token_bitmask=rows
    )
    assert ext.num_forced.tolist() == [3, 0, 3]
    assert ext.draft_tokens[0, 2:].tolist() == [VOCAB.index(c) for c in "bcd"]
    assert ext.draft_tokens[2, 2:].tolist() == [VOCAB.index(c) for c in "cde"]
    assert ext.parents[0].tolist() == [1, -1, 0, 2, 3]
    assert (rows[5:10] == 0).all()  # the stopped matcher reaches nothing
    expected = reference_rows(ms[0], ext.parents[0], ext.draft_tokens[0], root=1)
    assert np.array_equal(rows[0:5], expected)


def test_nodes_outside_the_root_tree_become_isolated(compiled):
    m = GrammarMatcher(compiled["fixed"])
    # node 2 (and its child 3) hang below no path from root 0
    nt = np.array([1, -1, 3, -1], dtype=np.int64)
    ns = np.full(4, -1, dtype=np.int64)
    tokens = np.array([[0, VOCAB.index("a"), VOCAB.index("b"), VOCAB.index("c")]])
    ext = extend_draft_trees([m], nt, ns, tokens, budget=1)
    assert ext.parents[0].tolist() == [-1, 0, -1, -1, 1]
    assert ext.next_token[0].tolist() == [1, 4, -1, -1, -1]
    assert ext.draft_tokens[0, :4].tolist() == tokens[0].tolist()


def test_bad_input_changes_nothing(compiled):
    ms = [GrammarMatcher(compiled["fixed"]), GrammarMatcher(compiled["object"])]
    nt, ns = links_from_parents(np.array([-1, 0], dtype=np.int64))
    tokens = np.array([[0, VOCAB.index("a")], [0, VOCAB.index("{")]], dtype=np.int64)
    rows = np.full((2 * 4, W), 3, dtype=np.int32)
    before = [snapshot(m) for m in ms]
    cases = [
        (ArgumentError, "budget", dict(budget=-1)),
        (ArgumentError, "budget", dict(budget=[1, 2, 3])),
        (ArgumentError, "max_per_leaf", dict(max_per_leaf=0)),
        (ArgumentError, "batch", dict(batch=object())),
        (ArgumentError, "root_positions", dict(root_positions=[0])),
        (DraftTreeError, "root position", dict(root_positions=[0, 5])),
        (BitmaskError, "B \\* M", dict(budget=2, token_bitmask=rows[:7])),
        (BitmaskError, "token_bitmask", dict(token_bitmask=rows.astype(np.int64))),
    ]
    for err, match, kwargs in cases:
        with pytest.raises(err, match=match):
            extend_draft_trees(ms, nt, ns, tokens, **kwargs)
    with pytest.raises(InvalidTokenIdError, match=r"draft_tokens\[1, 1\]"):
        extend_draft_trees(ms, nt, ns, np.array([[0, 1], [0, V]]), token_bitmask=rows)
    with pytest.raises(DraftTreeError, match="draft_tokens"):
        extend_draft_trees(ms, nt, ns, tokens[0])
    with pytest.raises(DraftTreeError, match="retrieve_next_sibling"):
        extend_draft_trees(ms, nt, ns[:1], tokens)
    with pytest.raises(DraftTreeError, match="reached twice"):
        extend_draft_trees(ms, [1, 0], [-1, -1], tokens)
    with pytest.raises(ArgumentError, match="same GrammarMatcher"):
        extend_draft_trees([ms[0], ms[0]], nt, ns, tokens)
    with pytest.raises(ArgumentError, match=r"matchers\[1\]"):
        extend_draft_trees([ms[0], "x"], nt, ns, tokens)
    other = tg.TokenizerInfo(VOCAB[:-1] + ["<end>"], vocab_size=V, stop_token_ids=[EOS])
    stranger = GrammarMatcher(tg.GrammarCompiler(other).compile_grammar(GRAMMARS["fixed"]))
    with pytest.raises(ArgumentError, match="another tokenizer"):
        extend_draft_trees([ms[0], stranger], nt, ns, tokens, token_bitmask=rows)
    assert (rows == 3).all()
    assert [snapshot(m) for m in ms] == before


# --------------------------------------------------------------- identical decoding output
def _scores(prefix: tuple[int, ...], seed: int) -> np.ndarray:
    """A deterministic stand-in for a model: one score per token from the prefix."""
    rng = np.random.default_rng([seed, *prefix[-3:], len(prefix)])
    return rng.random(V)


def _pick(row: np.ndarray, prefix: tuple[int, ...], seed: int) -> int:
    s = np.where(tg.bitmask_to_bool(row, V), _scores(prefix, seed), -1.0)
    return int(np.argmax(s))


def _greedy(compiled_grammar, seed: int, limit: int) -> list[int]:
    m = GrammarMatcher(compiled_grammar)
    out: list[int] = []
    while len(out) < limit and not m.is_terminated():
        tok = _pick(mask_of(m), tuple(out), seed)
        assert m.accept_token(tok)
        out.append(tok)
    return out


def _speculative(compiled_grammar, seed, limit, budget, draft_len, rng) -> tuple[list[int], int]:
    """Speculative decoding with a random chain drafter, extended with forced nodes."""
    m = GrammarMatcher(compiled_grammar)
    out: list[int] = []
    steps = 0
    while len(out) < limit and not m.is_terminated():
        steps += 1
        n = 1 + draft_len
        tokens = np.zeros((1, n), dtype=np.int64)
        tokens[0, 1:] = rng.integers(0, V, size=draft_len)
        parents = np.arange(-1, n - 1, dtype=np.int64)[None]
        nt, ns = links_from_parents(parents)
        m_nodes = n + budget
        rows = np.zeros((m_nodes, W), dtype=np.int32)
        ext = extend_draft_trees([m], nt, ns, tokens, budget=budget, token_bitmask=rows)
        node = 0
        while len(out) < limit:
            tok = _pick(rows[node], tuple(out), seed)
            out.append(tok)
            assert m.accept_token(tok)
            if m.is_terminated():
                break
            child = int(ext.next_token[0, node])
            while child >= 0 and ext.draft_tokens[0, child] != tok:
                child = int(ext.next_sibling[0, child])
            if child < 0:
                break  # tok is the bonus token
            node = child
    return out, steps


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    name=st.sampled_from(sorted(GRAMMARS)),
    seed=st.integers(0, 10_000),
    budget=st.integers(0, 6),
    draft_len=st.integers(0, 3),
)
def test_speculative_with_forced_nodes_equals_greedy(compiled, name, seed, budget, draft_len):
    ref = _greedy(compiled[name], seed, 40)
    got, steps = _speculative(
        compiled[name], seed, 40, budget, draft_len, np.random.default_rng(seed)
    )
    assert got == ref
    if name == "fixed" and budget >= 4:
        assert steps < len(ref)  # forced nodes are accepted: fewer steps than tokens


# --------------------------------------------------------------------- a real vocabulary
def test_deepseek_chains_follow_the_jump_forward_string():
    info = tg.TokenizerInfo.deepseek_v4()
    schema = {
        "type": "object",
        "properties": {
            "name": {"type": "string"},
            "kind": {"enum": ["alpha", "beta"]},
            "count": {"type": "integer"},
        },
        "required": ["name", "kind", "count"],
        "additionalProperties": False,
    }
    compiled = tg.GrammarCompiler(info).compile_grammar(
        tg.Grammar.from_json_schema(schema, any_whitespace=False)
    )
    vocab = info.decoded_vocab
    m = GrammarMatcher(compiled)
    text = b""
    for piece in ('Ada"', "b", "12}"):
        jump = m.find_jump_forward_string().encode()
        chain = forced_chain(m, 64)
        forced = b"".join(vocab[t] for t in chain)
        assert forced == jump  # the whole forced string, in tokens the grammar accepts
        assert all(len(vocab[t]) > 0 for t in chain)
        for t in chain:
            assert m.accept_token(t)
        text += forced
        assert m.accept_string(piece)
        text += piece.encode()
    assert text == b'{"name": "Ada", "kind": "beta", "count": 12}'
    assert forced_chain(m, 4) == info.stop_token_ids[:1]


def test_forced_string_longer_than_a_round():
    """A 714-byte constant with a budget that reaches past one round of forced bytes (512):
    the rounds join without cutting a token short."""
    text = "".join(("name", "al", "x", '": "', "alpha", "q")[i % 6] for i in range(252))
    info = tg.TokenizerInfo(VOCAB, vocab_size=V, stop_token_ids=[EOS])
    compiled = tg.GrammarCompiler(info).compile_grammar(
        'root ::= "' + text.replace("\\", "\\\\").replace('"', '\\"') + '" [a-z]'
    )
    m = GrammarMatcher(compiled)
    assert len(text.encode()) > 600
    for budget in (7, 150, 400):
        chain = forced_chain(m, budget)
        assert chain == ref_chain(m, budget)
        assert len(chain) == min(budget, len(ref_chain(m, 1000)))
    full = forced_chain(m, 1000)
    assert "".join(VOCAB[t] for t in full) == text
    rows = np.zeros((1 + 400, W), dtype=np.int32)
    ext = extend_draft_trees([m], [-1], [-1], [[0]], budget=400, token_bitmask=rows)
    assert ext.draft_tokens[0, 1 : 1 + int(ext.num_forced[0])].tolist() == full
    assert np.array_equal(rows, reference_rows(m, ext.parents[0], ext.draft_tokens[0]))


def test_jump_forward_string_longer_than_the_chart_terminates():
    """Regression: a forced string longer than a fresh matcher's set capacity made
    ``find_jump_forward_string`` grow the items forever (out of memory); run in a subprocess
    with a memory cap and a timeout so a regression fails instead of killing pytest."""
    code = textwrap.dedent(
        """
        import resource
        resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))
        import treegram as tg
        vocab = [chr(c) for c in range(32, 127)] + ["<eos>"]
        info = tg.TokenizerInfo(vocab, stop_token_ids=[len(vocab) - 1])
        text = "abcdefghij" * 70
        m = tg.GrammarMatcher(tg.GrammarCompiler(info).compile_grammar(
            'root ::= "' + text + '" [0-9]'))
        assert m.find_jump_forward_string() == text
        print("ok")
        """
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    res = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=240, env=env
    )
    assert res.returncode == 0 and res.stdout.strip() == "ok", res.stderr[-2000:]
