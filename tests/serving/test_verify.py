"""Tree verification under a grammar: :func:`treegram.serving._verify.verify_tree`.

The reference (:func:`reference`) is a direct transcription of SGLang's greedy tree
verification in plain Python over numpy: mask each row with its bitmask row, take the
argmax (lowest index among ties), walk from the root through the first child (in sibling
order) whose draft token equals the parent's target token, and emit the target token of
every node on the path (the last one is the bonus token); stop after a stop token.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import treegram as tg  # noqa: E402
from treegram.errors import (  # noqa: E402
    ArgumentError,
    BitmaskError,
    DraftTreeError,
    MatcherStateError,
)
from treegram.serving._verify import verify_tree  # noqa: E402
from treegram.spec import links_from_parents  # noqa: E402

# --------------------------------------------------------------------------- vocabulary
VOCAB: list[str] = [chr(c) for c in range(32, 127)] + ["ab", "12", "<eos>"]
N_PAD = 5  # padding ids past the real tokens (never allowed)
V = len(VOCAB) + N_PAD
EOS = VOCAB.index("<eos>")

GRAMMARS = {
    "digits": 'root ::= "ab" [0-9]*',
    "expr": r"""
root ::= expr
expr ::= term (("+" | "-") term)*
term ::= [0-9]+ | "(" expr ")"
""",
    "json": None,
}


def tid(text: str) -> int:
    return VOCAB.index(text)


@pytest.fixture(scope="module")
def compiled():
    info = tg.TokenizerInfo(VOCAB, vocab_size=V, stop_token_ids=[EOS])
    compiler = tg.GrammarCompiler(info)
    return {
        name: (
            compiler.compile_builtin_json_grammar()
            if text is None
            else compiler.compile_grammar(text)
        )
        for name, text in GRAMMARS.items()
    }


@pytest.fixture(scope="module")
def batch():
    b = tg.BatchGrammarMatcher(max_threads=1)
    yield b
    b.close()


# ---------------------------------------------------------------------------- reference


def bits_of(bitmask: np.ndarray, vocab: int) -> np.ndarray:
    """bool [rows, vocab] from int32 [rows, W]."""
    words = np.asarray(bitmask).astype(np.int64) & 0xFFFFFFFF
    t = np.arange(vocab)
    return ((words[:, t // 32] >> (t % 32)) & 1).astype(bool)


def reference(logits, draft, parents, bitmask=None, stops=(), roots=None):
    """Accepted (tokens, nodes) per request, written without any treegram code."""
    x = logits.float().numpy().astype(np.float64)
    rows, vocab = x.shape
    b, n = draft.shape
    if bitmask is not None:
        allowed = np.zeros((rows, vocab), dtype=bool)
        width = min(vocab, 32 * bitmask.shape[1])
        allowed[:, :width] = bits_of(np.asarray(bitmask), width)
        x = np.where(allowed, x, -np.inf)
    out = []
    for i in range(b):
        par = parents[i] if parents.ndim == 2 else parents
        children = {j: [c for c in range(n) if par[c] == j] for j in range(n)}
        node = 0 if roots is None else int(roots[i])
        toks, nodes = [], []
        while True:
            row = x[i * n + node]
            if not np.isfinite(row.max()) and row.max() == -np.inf:
                break
            target = int(np.argmax(row))
            toks.append(target)
            nodes.append(node)
            if target in stops:
                break
            nxt = [c for c in children[node] if int(draft[i, c]) == target]
            if not nxt:
                break
            node = nxt[0]
        out.append((toks, nodes))
    return out


def random_case(seed: int, b: int, n: int, vocab: int, *, shared: bool = False):
    """Random parents, logits and draft tokens that often follow the argmax (so paths are
    long), with duplicate sibling tokens now and then."""
    rng = np.random.default_rng(seed)
    shape = (1 if shared else b, n)
    parents = np.full(shape, -1, dtype=np.int64)
    for t in range(shape[0]):
        for j in range(1, n):
            parents[t, j] = rng.integers(0, j)
    logits = torch.from_numpy(rng.normal(size=(b * n, vocab)).astype(np.float32))
    # a few exact ties, to pin the tie rule (lowest index wins)
    for r in rng.choice(b * n, size=max(1, b * n // 5), replace=False):
        top = int(logits[r].argmax())
        other = int(rng.integers(0, vocab))
        logits[r, other] = logits[r, top]
    best = logits.argmax(dim=1).numpy()
    draft = rng.integers(0, vocab, size=(b, n))
    for i in range(b):
        par = parents[0 if shared else i]
        for j in range(1, n):
            if rng.random() < 0.6:
                draft[i, j] = best[i * n + par[j]]
    return logits, torch.from_numpy(draft), (parents[0] if shared else parents)


# ------------------------------------------------------------------------- properties


@pytest.mark.parametrize("seed", range(30))
@pytest.mark.parametrize("shared", [False, True], ids=["per_request", "shared"])
def test_greedy_equals_reference_unmasked(seed, shared):
    rng = np.random.default_rng(1000 + seed)
    b, n, vocab = int(rng.integers(1, 6)), int(rng.integers(1, 12)), int(rng.integers(2, 70))
    logits, draft, parents = random_case(seed, b, n, vocab, shared=shared)
    nt, ns = links_from_parents(parents)
    result = verify_tree(logits, draft, nt, ns, None)
    expected = reference(logits, draft.numpy(), parents)
    assert result.accepted_tokens == [e[0] for e in expected]
    assert result.accepted_nodes == [e[1] for e in expected]
    assert result.accept_lengths.tolist() == [len(e[0]) for e in expected]
    for i, (_, nodes) in enumerate(expected):
        row = result.accept_index[i].tolist()
        assert row[: len(nodes)] == [i * n + j for j in nodes]
        assert all(v == -1 for v in row[len(nodes) :])


@pytest.mark.parametrize("seed", range(30))
@pytest.mark.parametrize(
    "dtype", [torch.float32, torch.float16, torch.bfloat16], ids=["fp32", "fp16", "bf16"]
)
def test_greedy_equals_reference_with_random_masks(seed, dtype):
    rng = np.random.default_rng(2000 + seed)
    b, n = int(rng.integers(1, 5)), int(rng.integers(1, 10))
    vocab = int(rng.integers(33, 100))
    logits, draft, parents = random_case(seed, b, n, vocab)
    logits = logits.to(dtype)
    width = (vocab + 31) // 32 - int(rng.integers(0, 2))  # sometimes narrower than logits
    allowed = rng.random((b * n, 32 * width)) < 0.5
    allowed[rng.random(b * n) < 0.1] = False  # some rows allow nothing
    bitmask = tg.bool_to_bitmask(allowed)
    nt, ns = links_from_parents(parents)
    stops = tuple(int(s) for s in rng.choice(vocab, size=2, replace=False))
    result = verify_tree(
        logits, draft, nt, ns, torch.from_numpy(bitmask), stop_token_ids=list(stops)
    )
    expected = reference(logits, draft.numpy(), parents, bitmask, stops)
    assert result.accepted_tokens == [e[0] for e in expected]
    assert result.accepted_nodes == [e[1] for e in expected]
    for i, (toks, _) in enumerate(expected):
        assert bool(result.terminated[i]) == bool(toks and toks[-1] in stops)


@pytest.mark.parametrize("seed", range(10))
def test_root_positions(seed):
    rng = np.random.default_rng(seed)
    b, n, vocab = 3, 8, 20
    logits, draft, _ = random_case(seed, b, n, vocab)
    # node 0 is a leftover leaf hanging off nothing; the tree hangs off node `root`
    roots = rng.integers(0, n, size=b)
    parents = np.full((b, n), -1, dtype=np.int64)
    for i in range(b):
        for j in range(n):
            if j > roots[i]:
                parents[i, j] = rng.integers(roots[i], j)
    best = logits.argmax(dim=1).numpy()
    for i in range(b):
        for j in range(n):
            if parents[i, j] >= 0 and rng.random() < 0.7:
                draft[i, j] = int(best[i * n + parents[i, j]])
    nt, ns = links_from_parents(parents)
    result = verify_tree(logits, draft, nt, ns, None, root_positions=roots)
    expected = reference(logits, draft.numpy(), parents, roots=roots)
    assert result.accepted_tokens == [e[0] for e in expected]
    assert result.accepted_nodes == [e[1] for e in expected]


# ----------------------------------------------------------------------------- grammar


def traversed(batch, matchers, draft, parents):
    n = draft.shape[1]
    nt, ns = links_from_parents(parents)
    bitmask = tg.allocate_token_bitmask(len(matchers) * n, V)
    batch.batch_traverse_draft_tree(matchers, nt, ns, draft, bitmask)
    return nt, ns, bitmask


def started(compiled, name, prefix):
    m = tg.GrammarMatcher(compiled[name])
    for tok in prefix:
        assert m.accept_token(tid(tok))
    return m


def test_masking_respected_and_matchers_advanced(compiled, batch):
    rng = np.random.default_rng(7)
    prefixes = [("digits", ["a"]), ("expr", ["("]), ("json", ["{"]), ("digits", ["ab"])]
    matchers = [started(compiled, g, p) for g, p in prefixes]
    b, n = len(matchers), 12
    parents = np.array([[-1] + [int(rng.integers(0, j)) for j in range(1, n)] for _ in range(b)])
    logits = torch.from_numpy(rng.normal(size=(b * n, V)).astype(np.float32))
    # the favourite of every row is a token no grammar here allows (a padding id), the
    # runner-up one that only the JSON grammar (inside strings) allows
    logits[:, V - 1] = 100.0
    logits[:, tid("~")] = 50.0
    # draft tokens: the best allowed token of the parent when the parent is reachable
    draft = torch.from_numpy(rng.integers(0, V - N_PAD, size=(b, n)))
    nt, ns, bitmask = traversed(batch, matchers, draft, parents)
    allowed = bits_of(bitmask, V)
    masked = np.where(allowed, logits.numpy(), -np.inf)
    for i in range(b):
        for j in range(1, n):
            row = masked[i * n + parents[i, j]]
            if np.isfinite(row.max()) and rng.random() < 0.8:
                draft[i, j] = int(np.argmax(row))
    nt, ns, bitmask = traversed(batch, matchers, draft, parents)
    allowed = bits_of(bitmask, V)
    before = [m.num_accepted_steps() for m in matchers]
    twins = [m.fork() for m in matchers]
    result = verify_tree(logits, draft, nt, ns, torch.as_tensor(bitmask), matchers)
    expected = reference(logits, draft.numpy(), parents, bitmask, (EOS,))
    assert result.accepted_tokens == [e[0] for e in expected]
    assert any(len(t) > 1 for t in result.accepted_tokens)
    for i, (toks, nodes) in enumerate(
        zip(result.accepted_tokens, result.accepted_nodes, strict=True)
    ):
        assert toks, "every root row allows something"
        assert V - 1 not in toks
        if prefixes[i][0] != "json":
            assert tid("~") not in toks
        for tok, node in zip(toks, nodes, strict=True):
            assert allowed[i * n + node, tok]
        # advanced exactly by the emitted tokens: same state as feeding them one by one
        assert matchers[i].num_accepted_steps() == before[i] + len(toks)
        for tok in toks:
            assert twins[i].accept_token(tok)
        got, want = tg.allocate_token_bitmask(1, V), tg.allocate_token_bitmask(1, V)
        matchers[i].fill_next_token_bitmask(got)
        twins[i].fill_next_token_bitmask(want)
        np.testing.assert_array_equal(got, want)


class CountingMatcher:
    """Delegates to a GrammarMatcher and records every accept_token call."""

    def __init__(self, inner):
        self.inner = inner
        self.calls: list[int] = []

    def accept_token(self, token):
        self.calls.append(token)
        return self.inner.accept_token(token)

    def rollback(self, k):
        self.inner.rollback(k)

    def is_terminated(self):
        return self.inner.is_terminated()

    @property
    def stop_token_ids(self):
        return self.inner.stop_token_ids


def chain(tokens):
    """Parents, draft tokens of a chain root -> tokens[0] -> tokens[1] ..."""
    n = len(tokens) + 1
    parents = np.arange(-1, n - 1)[None]
    return parents, torch.tensor([[0] + [tid(t) for t in tokens]])


def forcing_logits(draft, n, extra=None):
    """Logits whose argmax at node j is the draft token of node j + 1 (a chain)."""
    logits = torch.zeros(n, V)
    for j in range(n - 1):
        logits[j, int(draft[0, j + 1])] = 10.0
    if extra is not None:
        logits[n - 1, extra] = 10.0
    return logits


def test_accepts_each_token_once(compiled, batch):
    m = CountingMatcher(started(compiled, "digits", ["ab"]))
    parents, draft = chain(["1", "2", "3"])
    nt, ns, bitmask = traversed(batch, [m.inner], draft, parents)
    logits = forcing_logits(draft, 4, extra=tid("4"))
    result = verify_tree(logits, draft, nt, ns, bitmask, [m])
    assert result.accepted_tokens == [[tid("1"), tid("2"), tid("3"), tid("4")]]
    assert m.calls == result.accepted_tokens[0]
    assert m.inner.num_accepted_steps() == 1 + 4


def test_advance_false_leaves_matchers(compiled, batch):
    m = CountingMatcher(started(compiled, "digits", ["ab"]))
    parents, draft = chain(["1", "2"])
    nt, ns, bitmask = traversed(batch, [m.inner], draft, parents)
    result = verify_tree(forcing_logits(draft, 3), draft, nt, ns, bitmask, [m], advance=False)
    assert len(result.accepted_tokens[0]) == 3
    assert m.calls == []


@pytest.mark.parametrize("where", ["draft", "bonus"])
def test_stop_token_terminates(compiled, batch, where):
    m = started(compiled, "digits", ["ab"])
    if where == "draft":
        parents, draft = chain(["1", "<eos>", "2"])
        expected = [tid("1"), EOS]
    else:
        parents, draft = chain(["1", "2"])
        expected = [tid("1"), tid("2"), EOS]
    nt, ns, bitmask = traversed(batch, [m], draft, parents)
    logits = forcing_logits(draft, draft.shape[1], extra=EOS)
    # bitmask=None shows that the stop rule does not depend on the (zero) rows after EOS
    for mask in (bitmask, None):
        twin = m.fork()
        result = verify_tree(logits, draft, nt, ns, mask, [twin])
        assert result.accepted_tokens == [expected]
        assert bool(result.terminated[0])
        assert twin.is_terminated()
        assert twin.num_accepted_steps() == 1 + len(expected)


def test_terminated_matcher_emits_nothing(compiled, batch):
    m = started(compiled, "digits", ["ab", "<eos>"])
    parents, draft = chain(["1"])
    logits = forcing_logits(draft, 2, extra=tid("2"))
    result = verify_tree(logits, draft, *links_from_parents(parents), None, [m])
    assert result.accepted_tokens == [[]]
    assert bool(result.terminated[0])
    assert m.num_accepted_steps() == 2


def test_rejected_token_rolls_every_matcher_back(compiled):
    good = started(compiled, "digits", ["ab"])
    bad = started(compiled, "digits", ["ab"])
    parents = np.array([[-1, 0, 1], [-1, 0, 1]])
    draft = torch.tensor([[0, tid("1"), tid("2")], [0, tid("x"), tid("2")]])
    logits = torch.zeros(6, V)
    logits[0, tid("1")] = logits[1, tid("2")] = logits[2, tid("3")] = 10.0
    logits[3, tid("x")] = logits[4, tid("2")] = logits[5, tid("3")] = 10.0
    with pytest.raises(MatcherStateError, match="matcher 1 rejected"):
        verify_tree(logits, draft, *links_from_parents(parents), None, [good, bad])
    assert good.num_accepted_steps() == 1
    assert bad.num_accepted_steps() == 1


def test_unreached_rows_have_no_target(compiled, batch):
    m = started(compiled, "digits", ["ab"])
    parents, draft = chain(["x", "1"])  # "x" is not allowed: node 1 and 2 are not reached
    nt, ns, bitmask = traversed(batch, [m], draft, parents)
    logits = forcing_logits(draft, 3)
    logits[0, tid("7")] = 5.0
    result = verify_tree(logits, draft, nt, ns, bitmask, [m])
    assert result.target_tokens.tolist() == [tid("7"), -1, -1]
    assert result.accepted_tokens == [[tid("7")]]


# ----------------------------------------------------------------------------- sampling


@pytest.mark.parametrize("seed", range(5))
def test_sampling_is_reproducible_and_respects_masks(seed):
    rng = np.random.default_rng(seed)
    b, n, vocab = 4, 9, 40
    logits, draft, parents = random_case(seed, b, n, vocab)
    allowed = rng.random((b * n, 64)) < 0.4
    allowed[:, 0] = True
    bitmask = torch.from_numpy(tg.bool_to_bitmask(allowed))
    nt, ns = links_from_parents(parents)

    def run(s):
        g = torch.Generator().manual_seed(s)
        return verify_tree(
            logits, draft, nt, ns, bitmask, mode="sample", generator=g, temperature=0.7
        )

    first, second = run(123), run(123)
    assert first.accepted_tokens == second.accepted_tokens
    assert torch.equal(first.target_tokens, second.target_tokens)
    for i in range(b):
        for tok, node in zip(first.accepted_tokens[i], first.accepted_nodes[i], strict=True):
            assert allowed[i * n + node, tok]
    # the path is the greedy walk over the sampled targets
    target = first.target_tokens.numpy()
    for i in range(b):
        node, nodes = 0, []
        while True:
            nodes.append(node)
            kids = [
                c
                for c in range(n)
                if parents[i, c] == node and int(draft[i, c]) == target[i * n + node]
            ]
            if not kids:
                break
            node = kids[0]
        assert first.accepted_nodes[i] == nodes


def test_sampling_follows_the_masked_distribution():
    rows, vocab = 4000, 6
    base = torch.tensor([0.0, 1.0, 2.0, 3.0, 0.5, 9.0])
    logits = base.repeat(rows, 1)
    allowed = np.zeros((rows, 32), dtype=bool)
    allowed[:, :4] = True  # token 5 (the favourite) is masked out
    bitmask = torch.from_numpy(tg.bool_to_bitmask(allowed))
    draft = torch.zeros(rows, 1, dtype=torch.int64)
    g = torch.Generator().manual_seed(0)
    result = verify_tree(
        logits, draft, [-1], [-1], bitmask, mode="sample", generator=g, temperature=2.0
    )
    counts = np.bincount(result.target_tokens.numpy(), minlength=vocab) / rows
    want = torch.softmax(base[:4] / 2.0, 0).numpy()
    np.testing.assert_allclose(counts[:4], want, atol=0.03)
    assert counts[4:].sum() == 0


def test_inplace_masks_the_logits_and_picks_the_same_path():
    rng = np.random.default_rng(3)
    logits, draft, parents = random_case(3, 2, 6, 50)
    allowed = rng.random((12, 64)) < 0.5
    allowed[:, 0] = True
    bitmask = torch.from_numpy(tg.bool_to_bitmask(allowed))
    nt, ns = links_from_parents(parents)
    original = logits.clone()
    copy = verify_tree(logits, draft, nt, ns, bitmask)
    assert torch.equal(logits, original)
    inplace = verify_tree(logits, draft, nt, ns, bitmask, inplace=True)
    assert inplace.accepted_tokens == copy.accepted_tokens
    assert torch.equal(
        logits, torch.where(torch.from_numpy(allowed[:, :50]), original, torch.tensor(-np.inf))
    )


def test_per_request_temperature():
    logits = torch.tensor([[0.0, 5.0, 0.0]]).repeat(2, 1)
    draft = torch.zeros(2, 1, dtype=torch.int64)
    g = torch.Generator().manual_seed(1)
    result = verify_tree(
        logits,
        draft,
        [-1],
        [-1],
        None,
        mode="sample",
        generator=g,
        temperature=torch.tensor([1e-4, 1e-4]),
    )
    assert result.accepted_tokens == [[1], [1]]


# --------------------------------------------------------------------------- validation


def _args():
    nt, ns = links_from_parents(np.array([-1, 0, 0]))
    return dict(
        logits=torch.zeros(6, 40),
        draft_tokens=torch.zeros(2, 3, dtype=torch.int64),
        next_token=nt,
        next_sibling=ns,
        bitmask=None,
    )


@pytest.mark.parametrize(
    ("change", "error", "match"),
    [
        (dict(logits=np.zeros((6, 40), dtype=np.float32)), ArgumentError, "torch.Tensor"),
        (dict(logits=torch.zeros(6, 40, dtype=torch.float64)), ArgumentError, "float32"),
        (dict(logits=torch.zeros(5, 40)), ArgumentError, "B \\* N"),
        (dict(logits=torch.zeros(6)), ArgumentError, "shape"),
        (dict(draft_tokens=torch.zeros(2, 3)), DraftTreeError, "integer"),
        (dict(draft_tokens=torch.zeros(2, 3, 1, dtype=torch.int64)), DraftTreeError, "shape"),
        (dict(next_token=np.array([1, 2])), DraftTreeError, "next_token"),
        (dict(next_token=np.array([1, 2, 0])), DraftTreeError, "twice|tree"),
        (dict(next_sibling=np.array([[-1, 2, -1]] * 3)), DraftTreeError, "next_sibling"),
        (dict(bitmask=torch.zeros(6, 2, dtype=torch.int64)), BitmaskError, "int32"),
        (dict(bitmask=torch.zeros(5, 2, dtype=torch.int32)), BitmaskError, "rows|shape"),
        (dict(bitmask=[[0]]), BitmaskError, "torch.Tensor"),
        (dict(mode="beam"), ArgumentError, "mode"),
        (dict(mode="sample", temperature=0.0), ArgumentError, "temperature"),
        (dict(mode="sample", temperature=torch.ones(3)), ArgumentError, "temperature"),
        (dict(mode="sample", generator=1), ArgumentError, "generator"),
        (dict(matchers=[object(), object()]), ArgumentError, "accept_token"),
        (dict(matchers=[]), ArgumentError, "one matcher per request"),
        (dict(root_positions=[0, 3]), DraftTreeError, "root"),
        (dict(root_positions=[0]), DraftTreeError, "root_positions"),
        (dict(advance=1), ArgumentError, "advance"),
        (dict(inplace=None), ArgumentError, "inplace"),
        (dict(stop_token_ids=[-2]), ArgumentError, "stop_token_ids"),
    ],
)
def test_bad_input(change, error, match):
    args = _args()
    args.update(change)
    with pytest.raises(error, match=match):
        verify_tree(**args)


def test_validation_precedes_mutation(compiled):
    m = started(compiled, "digits", ["ab"])
    args = _args()
    args.update(
        logits=torch.zeros(3, V),
        draft_tokens=torch.zeros(1, 3, dtype=torch.int64),
        matchers=[m],
        bitmask=torch.zeros(2, 4, dtype=torch.int32),
    )
    args["logits"][0, tid("1")] = 1.0
    with pytest.raises(BitmaskError):
        verify_tree(**args)
    assert m.num_accepted_steps() == 1


def test_empty_batch():
    result = verify_tree(
        torch.zeros(0, 10),
        torch.zeros(0, 4, dtype=torch.int64),
        [-1, -1, -1, -1],
        [-1, -1, -1, -1],
        None,
    )
    assert result.accepted_tokens == []
    assert tuple(result.accept_index.shape) == (0, 4)
