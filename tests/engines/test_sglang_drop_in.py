"""treegram's drop-in for SGLang 0.5.23's ``spec_utils.generate_token_bitmask`` (the EAGLE
and NGRAM workers' draft-tree masks), driven through SGLang's own code on the DeepSeek-V4
vocabulary: masks and grammar states compared bit for bit with SGLang's own walk
(``traverse_tree``) over the same treegram grammars and over SGLang's xgrammar backend,
batches mixing treegram grammars, xgrammar grammars, requests without a grammar and
``ReasonerGrammarObject`` wrappers still thinking and done thinking; the fallback when the
batched call fails; ``install``/``uninstall`` through SGLang's ``build_grammar_vocab_mask``.
"""

from __future__ import annotations

import logging
import types

import numpy as np
import pytest
from engine_setup import EOS, MODEL_VOCAB, require, sglang_backends, sglang_tokenizer
from engine_setup import SGLANG_KEYS as KEYS

base = require("sglang.srt.constrained.base_grammar_backend")
xgb = require("sglang.srt.constrained.xgrammar_backend")
spec_utils = require("sglang.srt.speculative.spec_utils")
rgb = require("sglang.srt.constrained.reasoner_grammar_backend")
reasoning = require("sglang.srt.parser.reasoning_parser")
torch = require("torch")
transformers = require("transformers")

import treegram as tg  # noqa: E402
from treegram.errors import WorkerError  # noqa: E402
from treegram.serving import sglang as tg_sglang  # noqa: E402

# SGLang's own function, whatever an earlier test installed
ENGINE_GENERATE = spec_utils.generate_token_bitmask
assert ENGINE_GENERATE is not tg_sglang.generate_token_bitmask


tokenizer = pytest.fixture(scope="module", name="tokenizer")(sglang_tokenizer)
backends = pytest.fixture(scope="module", name="backends")(sglang_backends)


def allowed(row) -> np.ndarray:
    bits = np.unpackbits(np.asarray(row).view(np.uint8), bitorder="little")
    return np.flatnonzero(bits[:MODEL_VOCAB])


def walk_some(grammars, rng, steps: int) -> None:
    """Advance every grammar (all the same language) by the same allowed tokens."""
    for _ in range(steps):
        ref = grammars[-1]
        mask = ref.allocate_vocab_mask(MODEL_VOCAB, 1, "cpu")
        ref.fill_vocab_mask(mask, 0)
        choices = [c for c in allowed(mask[0].numpy()) if c != EOS]
        if ref.is_terminated() or not choices:
            return
        tok = int(rng.choice(choices))
        for g in grammars:
            g.accept_token(tok)


def random_trees(rng, grammars, n: int):
    """Per-request draft trees (SGLang's retrieve_next_token / retrieve_next_sibling
    layout): tokens mostly allowed continuations, some random, some the stop token."""
    b = len(grammars)
    nxt = np.full((b, n), -1, dtype=np.int64)
    sib = np.full((b, n), -1, dtype=np.int64)
    tokens = np.zeros((b, n), dtype=np.int64)
    for i, g in enumerate(grammars):
        parent = [-1] + [int(rng.integers(0, j)) for j in range(1, n)]
        for j in range(n - 1, 0, -1):
            sib[i, j], nxt[i, parent[j]] = nxt[i, parent[j]], j
        inner = getattr(g, "grammar", None)
        source = inner if isinstance(inner, tg_sglang.SGLangGrammar) else g
        probe = source.fork() if hasattr(source, "fork") else None
        choices = list(range(MODEL_VOCAB))
        if probe is not None and not probe.is_terminated():
            mask = probe.allocate_vocab_mask(MODEL_VOCAB, 1, "cpu")
            probe.fill_vocab_mask(mask, 0)
            choices = [int(c) for c in allowed(mask[0].numpy())]
        for j in range(1, n):
            r = rng.random()
            if r < 0.1:
                tokens[i, j] = int(rng.integers(0, MODEL_VOCAB))
            elif r < 0.2:
                tokens[i, j] = EOS
            else:
                tokens[i, j] = int(rng.choice(choices))
        # a chain of valid continuations below the root's first child, for depth
        if probe is not None and nxt[i, 0] >= 0 and not probe.is_terminated():
            node, steps = int(nxt[i, 0]), 0
            while node >= 0 and steps < 4:
                mask = probe.allocate_vocab_mask(MODEL_VOCAB, 1, "cpu")
                probe.fill_vocab_mask(mask, 0)
                ok = [int(c) for c in allowed(mask[0].numpy()) if c != EOS]
                if not ok:
                    break
                tokens[i, node] = int(rng.choice(ok))
                probe.matcher.accept_token(int(tokens[i, node]))
                node, steps = int(nxt[i, node]), steps + 1
    as_t = torch.from_numpy
    return as_t(nxt), as_t(sib), as_t(tokens)


def state(g):
    """What SGLang's walk may leave changed on a grammar object."""
    inner = getattr(g, "grammar", None)
    out = [g.current_token, g.is_terminated()]
    for x in (g, inner):
        if isinstance(x, tg_sglang.SGLangGrammar):
            out += [x.current_token, list(x.accepted_tokens), x.matcher.num_accepted_steps()]
        if isinstance(x, rgb.ReasonerGrammarObject):
            out += [x.tokens_in_think, x.tokens_after_end, list(x._thinking_match_history)]
        if isinstance(x, xgb.XGrammarGrammar):
            out += [x.current_token, list(x.accepted_tokens)]
    return out


def reasoner(backend, tokenizer, grammar, *, thinking: bool):
    parser = reasoning.ReasoningParser(
        model_type="deepseek-v4", stream_reasoning=False, tokenizer=tokenizer
    )
    wrapped = rgb.ReasonerGrammarBackend(backend, parser, tokenizer)
    obj = wrapped._make_grammar_object(grammar, thinking)
    return obj


def run_both(reqs_a, reqs_b, nxt, sib, toks):
    """The drop-in on ``reqs_a``, SGLang's own function on ``reqs_b`` (twins)."""
    m_a, g_a = tg_sglang.generate_token_bitmask(reqs_a, nxt, sib, toks, MODEL_VOCAB)
    m_b, g_b = ENGINE_GENERATE(reqs_b, nxt, sib, toks, MODEL_VOCAB)
    return m_a, g_a, m_b, g_b


def as_reqs(grammars):
    return [types.SimpleNamespace(grammar=g) for g in grammars]


@pytest.mark.parametrize("seed", range(3))
def test_drop_in_equals_sglangs_walk_on_treegram_grammars(backends, tokenizer, seed):
    """Treegram grammars only: the drop-in's masks, the grammars' states afterwards
    (matcher, ``accepted_tokens``, ``current_token``) equal SGLang's own walk over twin
    treegram grammars, and SGLang's walk over its xgrammar backend's grammars."""
    ours_b, theirs_b = backends
    rng = np.random.default_rng(seed)
    n = 12
    a, b, x = [], [], []
    for key in KEYS * 2:
        ga, gb = ours_b._init_value_dispatch(key, False), ours_b._init_value_dispatch(key, False)
        gx = theirs_b._init_value_dispatch(key, False)
        walk_some([ga, gb, gx], rng, int(rng.integers(0, 6)))
        a.append(ga)
        b.append(gb)
        x.append(gx)
    # one request that has stopped (its rows stay as allocated)
    stop = ours_b._init_value_dispatch(("regex", "ok"), False)
    stop_b = ours_b._init_value_dispatch(("regex", "ok"), False)
    stop_x = theirs_b._init_value_dispatch(("regex", "ok"), False)
    for g in (stop, stop_b, stop_x):
        for t in [*tokenizer.encode("ok", add_special_tokens=False), EOS]:
            g.accept_token(t)
        assert g.is_terminated()
    a.append(stop)
    b.append(stop_b)
    x.append(stop_x)
    nxt, sib, toks = random_trees(rng, a, n)
    m_a, g_a, m_b, g_b = run_both(as_reqs(a), as_reqs(b), nxt, sib, toks)
    assert torch.equal(m_a, m_b)
    m_x, _ = ENGINE_GENERATE(as_reqs(x), nxt, sib, toks, MODEL_VOCAB)
    assert torch.equal(m_a, m_x)
    assert g_a is a[-1] and g_b is b[-1]
    assert [state(g) for g in a] == [state(g) for g in b]
    assert [g.current_token for g in a] == [g.current_token for g in x]
    assert (m_a[-n:] == -1).all()  # the stopped request: every row as allocated
    assert any(c is not None for c in (g.current_token for g in a))


def test_mixed_batch_falls_back_per_request(backends, tokenizer):
    """One batch: treegram grammars, xgrammar grammars, requests without a grammar,
    reasoning wrappers around treegram grammars (thinking: SGLang walks them; done
    thinking: batched) and around an xgrammar grammar. Masks and every state equal SGLang's
    own function on twins of the same batch."""
    ours_b, theirs_b = backends
    rng = np.random.default_rng(5)
    think_end = list(
        reasoning.ReasoningParser(
            model_type="deepseek-v4", stream_reasoning=False, tokenizer=tokenizer
        ).detector.get_think_end_token_ids(tokenizer)
    )

    def make():
        gs = [
            ours_b._init_value_dispatch(KEYS[0], False),
            theirs_b._init_value_dispatch(KEYS[1], False),
            None,
            reasoner(ours_b, tokenizer, ours_b._init_value_dispatch(KEYS[2], False), thinking=True),
            reasoner(ours_b, tokenizer, ours_b._init_value_dispatch(KEYS[3], False), thinking=True),
            reasoner(
                theirs_b, tokenizer, theirs_b._init_value_dispatch(KEYS[2], False), thinking=False
            ),
            ours_b._init_value_dispatch(KEYS[2], False),
        ]
        for t in tokenizer.encode("Hmm.", add_special_tokens=False) + think_end:
            gs[4].accept_token(t)  # done thinking: its grammar now constrains
        return gs

    a, b = make(), make()
    assert a[4]._is_generation() and a[3]._is_thinking()
    assert tg_sglang._tree_grammar(a[4]) is a[4].grammar
    assert tg_sglang._tree_grammar(a[3]) is None and tg_sglang._tree_grammar(a[1]) is None
    nxt, sib, toks = random_trees(rng, [g if g is not None else a[0] for g in a], 10)
    m_a, g_a, m_b, g_b = run_both(as_reqs(a), as_reqs(b), nxt, sib, toks)
    assert torch.equal(m_a, m_b)
    assert (m_a[20:30] == -1).all()  # the request without a grammar
    assert [state(g) for g in a if g is not None] == [state(g) for g in b if g is not None]
    assert type(g_a) is type(g_b)


def test_failed_batched_call_falls_back_and_logs_once(backends, monkeypatch, caplog):
    """A failure inside the batched call (a worker error) leaves every matcher as it was;
    SGLang's own walk fills the step's rows; the failure is logged once."""
    ours_b, _ = backends
    rng = np.random.default_rng(9)

    class Failing:
        def batch_traverse_draft_tree(self, *args, **kwargs):
            raise WorkerError("a worker died")

    monkeypatch.setattr(tg_sglang, "_batch_matcher", lambda: Failing())
    monkeypatch.setattr(tg.serving._adapters, "_logged", set())
    a = [ours_b._init_value_dispatch(k, False) for k in KEYS]
    b = [ours_b._init_value_dispatch(k, False) for k in KEYS]
    nxt, sib, toks = random_trees(rng, a, 8)
    with caplog.at_level(logging.WARNING, logger="treegram.serving._adapters"):
        for _ in range(2):
            m_a, _, m_b, _ = run_both(as_reqs(a), as_reqs(b), nxt, sib, toks)
            assert torch.equal(m_a, m_b)
    assert [state(g) for g in a] == [state(g) for g in b]
    assert sum("batched draft-tree masks failed" in r.getMessage() for r in caplog.records) == 1


def test_install_routes_sglangs_mask_builder_and_uninstall_restores(backends):
    """``install()``: SGLang's ``build_grammar_vocab_mask`` (what the EAGLE and NGRAM
    workers call) reaches the drop-in and the registry names treegram's factory;
    ``uninstall()`` puts both back."""
    ours_b, _ = backends
    before = dict(base.GRAMMAR_BACKEND_REGISTRY)
    rng = np.random.default_rng(3)
    tg_sglang.install()
    try:
        assert spec_utils.generate_token_bitmask is tg_sglang.generate_token_bitmask
        assert base.GRAMMAR_BACKEND_REGISTRY["xgrammar"] is tg_sglang.backend_factory
        tg_sglang.install()  # idempotent
        a = [ours_b._init_value_dispatch(k, False) for k in KEYS]
        b = [ours_b._init_value_dispatch(k, False) for k in KEYS]
        nxt, sib, toks = random_trees(rng, a, 8)
        info = types.SimpleNamespace(vocab_size=MODEL_VOCAB, grammar_mask="stale")
        got = spec_utils.build_grammar_vocab_mask(
            reqs=as_reqs(a),
            tree=spec_utils.GrammarTree.from_host(nxt, sib, toks),
            sampling_info=info,
            device="cpu",
            barrier=None,
        )
        want, _ = ENGINE_GENERATE(as_reqs(b), nxt, sib, toks, MODEL_VOCAB)
        assert isinstance(got, base.GrammarMask) and info.grammar_mask is None
        assert torch.equal(got.vocab_mask, want)
    finally:
        tg_sglang.uninstall()
    assert spec_utils.generate_token_bitmask is ENGINE_GENERATE
    assert before == base.GRAMMAR_BACKEND_REGISTRY
    assert not tg_sglang.installed()
