"""treegram's drop-in for vLLM 0.33.0's ``StructuredOutputManager.grammar_bitmask`` (and
its grammar's one-pass ``validate_tokens``), driven through vLLM's own manager on a real
``VllmConfig`` with n-gram speculative decoding (DeepSeek-V4 tokenizer, one-layer config,
no weights).

Every step compares, bit for bit: the drop-in on treegram grammars, vLLM's own loop on
the same treegram grammars, and vLLM's own loop on its xgrammar backend's grammars; the
drafts mix grammar-valid chains, rejected tokens, stop tokens, ``-1`` padding and short
lists, and every mask buffer is filled with a sentinel first, so rows vLLM leaves alone
must be left alone. Then ``validate_tokens`` and ``accept_tokens`` (the scheduler's other
grammar calls) and the grammars' states. Also: requests still reasoning (vLLM's own loop)
beside requests done reasoning (batched) in one step, the fallback when the batched call
fails, and grammar-forced drafts.
"""

from __future__ import annotations

import logging
import time

import numpy as np
import pytest
from engine_setup import EOS, MODEL_VOCAB, require, write_vllm_model_dir
from engine_setup import VLLM_SPECS as SPECS

config = require("vllm.config")
so = require("vllm.v1.structured_output")
vllm_request = require("vllm.v1.request")
sampling = require("vllm.sampling_params")

import treegram as tg  # noqa: E402
from treegram.errors import WorkerError  # noqa: E402
from treegram.serving import vllm as tg_vllm  # noqa: E402

ENGINE_BITMASK = so.StructuredOutputManager.grammar_bitmask
ENGINE_VALIDATE = so.StructuredOutputManager.validate_tokens
ENGINE_XGRAMMAR = so.XgrammarBackend
assert ENGINE_BITMASK is not tg_vllm.grammar_bitmask

THINK_END = 128822  # "</think>" in DeepSeek-V4's vocabulary
SENTINEL = 0x3C3C3C3C


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return write_vllm_model_dir(tmp_path_factory.mktemp("model"))


@pytest.fixture(scope="module", autouse=True)
def installed():
    """treegram plugged in for the whole module (as the plug-in does), undone after."""
    tg_vllm.install()
    assert so.StructuredOutputManager.grammar_bitmask is tg_vllm.grammar_bitmask
    yield
    tg_vllm.uninstall()
    assert so.StructuredOutputManager.grammar_bitmask is ENGINE_BITMASK
    assert so.StructuredOutputManager.validate_tokens is ENGINE_VALIDATE
    assert so.XgrammarBackend is ENGINE_XGRAMMAR


def manager(model_dir, k: int, **so_options):
    """vLLM's manager with n-gram speculation of ``k`` tokens."""
    spec = None
    if k:
        spec = config.SpeculativeConfig(
            method="ngram", num_speculative_tokens=k, prompt_lookup_max=3, prompt_lookup_min=1
        )
    vllm_config = config.VllmConfig(
        model_config=config.ModelConfig(model=str(model_dir), dtype="float32"),
        device_config=config.DeviceConfig(device="cpu"),
        speculative_config=spec,
        structured_outputs_config=config.StructuredOutputsConfig(backend="xgrammar", **so_options),
    )
    return so.StructuredOutputManager(vllm_config)


def request(m, rid: str, spec: dict, prompt=(0,), *, xgrammar: bool = False):
    """A request with ``spec`` on manager ``m``; the manager's first request makes its
    backend: treegram's (installed) or, with ``xgrammar``, vLLM's own."""
    key, value = next(iter(spec.items()))
    structured = sampling.StructuredOutputsParams(**{key: value})
    sp = sampling.SamplingParams(structured_outputs=structured, max_tokens=64)
    structured._backend = "xgrammar"
    req = vllm_request.Request(rid, list(prompt), sp, None)
    installed_backend = so.XgrammarBackend
    if xgrammar:
        so.XgrammarBackend = ENGINE_XGRAMMAR
    try:
        m.grammar_init(req)
    finally:
        so.XgrammarBackend = installed_backend
    deadline = time.monotonic() + 60
    while not req.structured_output_request.is_grammar_ready:
        assert time.monotonic() < deadline, "grammar did not compile"
        time.sleep(0.01)
    return req


def grammar(req):
    return req.structured_output_request.grammar


def allowed(row: np.ndarray) -> np.ndarray:
    bits = np.unpackbits(np.ascontiguousarray(row).view(np.uint8), bitorder="little")
    return np.flatnonzero(bits[:MODEL_VOCAB])


def draft_for(xg_grammar, rng, k: int) -> list[int]:
    """A draft of at most ``k`` tokens: a grammar-valid chain (from vLLM's xgrammar
    grammar, rolled back after), then maybe corrupted: a rejected token, the stop token,
    ``-1`` padding, or cut short."""
    chain: list[int] = []
    m = xg_grammar.matcher
    if not xg_grammar.is_terminated():
        buf = tg.allocate_token_bitmask(1, MODEL_VOCAB)
        for _ in range(k):
            if m.is_terminated():
                break
            m.fill_next_token_bitmask(buf, 0)
            choices = allowed(buf.numpy()[0])
            t = int(rng.choice(choices)) if rng.random() < 0.9 or EOS not in choices else EOS
            assert m.accept_token(t)
            chain.append(t)
        if chain:
            m.rollback(len(chain))
    chain += [int(rng.integers(0, MODEL_VOCAB)) for _ in range(k - len(chain))]
    r = rng.random()
    if k and r < 0.25:
        chain[int(rng.integers(0, k))] = int(rng.integers(0, MODEL_VOCAB))  # likely rejected
    elif k and r < 0.35:
        cut = int(rng.integers(0, k))
        chain[cut:] = [-1] * (k - cut)  # vLLM's padding of invalid drafts
    elif k and r < 0.45:
        chain = chain[: int(rng.integers(0, k))]  # fewer drafts than slots
    elif k and r < 0.5:
        chain[int(rng.integers(0, k))] = EOS
    return chain


def fill_sentinel(*managers) -> None:
    """Fill each manager's bitmask with SENTINEL, allocating it first as vLLM does when
    the manager has none yet (else the first step's rows past a short draft would be the
    fresh allocation's -1 in one buffer and SENTINEL in the other)."""
    for m in managers:
        if m._grammar_bitmask is None:
            config = m.vllm_config
            m._grammar_bitmask = m.backend.allocate_token_bitmask(
                config.scheduler_config.max_num_seqs * (1 + config.num_speculative_tokens)
            )
        m._grammar_bitmask.fill_(SENTINEL)


def three_way_bitmask(ours, theirs, reqs_o, reqs_t, live, sched) -> np.ndarray:
    """The drop-in's bitmask for ``live``, asserted equal to vLLM's own loop on the same
    treegram grammars and to vLLM on xgrammar grammars (buffers refilled with SENTINEL
    before each call, so no stale row passes)."""
    fill_sentinel(ours, theirs)
    m_o = ours.grammar_bitmask(reqs_o, live, sched)
    # as vLLM's own, a view of the manager's buffer (also after the buffer is replaced)
    assert np.shares_memory(m_o, ours._grammar_bitmask.numpy())
    m_o = m_o.copy()
    fill_sentinel(ours)
    m_ref = ENGINE_BITMASK(ours, reqs_o, live, sched).copy()
    fill_sentinel(theirs)
    m_t = theirs.grammar_bitmask(reqs_t, live, sched)
    np.testing.assert_array_equal(m_o, m_ref)
    np.testing.assert_array_equal(m_o, m_t)
    return m_o


def states(reqs: dict) -> list:
    return [
        (
            grammar(r).num_processed_tokens,
            grammar(r).is_terminated(),
            r.structured_output_request.reasoning_ended,
        )
        for r in reqs.values()
    ]


@pytest.mark.parametrize(
    ("k", "path"), [(0, "batched"), (3, "batched"), (3, "scalar"), (1, "scalar"), (1, "batched")]
)
def test_bitmask_validate_accept_bit_identical(model_dir, monkeypatch, k, path):
    """``path``: every chain through the batched traversal, or (small batches) one by
    one with the matcher's scalar calls."""
    monkeypatch.setattr(tg_vllm, "_SCALAR_MAX", 0 if path == "batched" else 10**6)
    rng = np.random.default_rng(10 + k)
    ours = manager(model_dir, k)
    reqs_o = {f"r{i}": request(ours, f"r{i}", s) for i, s in enumerate(SPECS * 2)}
    assert all(isinstance(grammar(r), tg_vllm.VLLMGrammar) for r in reqs_o.values())
    theirs = manager(model_dir, k)
    reqs_t = {f"r{i}": request(theirs, f"r{i}", s, xgrammar=True) for i, s in enumerate(SPECS * 2)}
    assert not isinstance(grammar(reqs_t["r0"]), tg_vllm.VLLMGrammar)
    rows = failures = 0
    for step in range(25):
        live = [r for r in reqs_t if not grammar(reqs_t[r]).is_terminated()]
        if not live:
            break
        if step == 3:  # a new buffer, as a manager reallocating it would hold
            ours._grammar_bitmask = ours.backend.allocate_token_bitmask(
                ours._grammar_bitmask.shape[0]
            )
        sched = {r: draft_for(grammar(reqs_t[r]), rng, k) for r in live if k}
        # the three ways: drop-in / vLLM's loop on treegram grammars / vLLM's on xgrammar
        m_o = three_way_bitmask(ours, theirs, reqs_o, reqs_t, live, sched)
        rows += m_o.shape[0]
        failures += sum(
            (m_o[i * (k + 1) + 1 : i * (k + 1) + len(d) + 1] == m_o[i * (k + 1)]).all()
            for i, d in enumerate(sched.get(r, []) for r in live)
            if d
        )
        assert states(reqs_o) == states(reqs_t)
        for i, rid in enumerate(live):
            draft = sched.get(rid, [])
            vo = ours.validate_tokens(reqs_o[rid], list(draft))
            vt = theirs.validate_tokens(reqs_t[rid], list(draft))
            assert vo == vt
            new = list(vo)
            row = m_o[i * (k + 1) + len(new)]
            if not (new and new[-1] == EOS):
                choices = allowed(row)
                bonus = EOS if EOS in choices and rng.random() < 0.2 else int(rng.choice(choices))
                new.append(bonus)
            assert ours.accept_tokens(reqs_o[rid], new) == theirs.accept_tokens(reqs_t[rid], new)
        assert states(reqs_o) == states(reqs_t)
    assert rows > 30
    assert any(grammar(r).is_terminated() for r in reqs_t.values())
    if k:
        assert failures > 0  # rows after a rejected draft copied the last valid one


def test_requests_still_reasoning_take_vllms_loop(model_dir):
    """With a reasoning parser: requests done reasoning (``</think>`` in the prompt, or
    accepted during the walk) are batched; requests still reasoning go through vLLM's own
    loop (rows unconstrained); in one step, bit-identical to vLLM's loop and xgrammar."""
    rng = np.random.default_rng(21)
    k = 3
    opts = {"reasoning_parser": "deepseek_r1"}
    ours = manager(model_dir, k, **opts)
    theirs = manager(model_dir, k, **opts)
    prompts = [(0, 5, THINK_END), (0, 5)] * 3
    reqs_o = {
        f"r{i}": request(ours, f"r{i}", SPECS[i % 3], prompt=p) for i, p in enumerate(prompts)
    }
    reqs_t = {
        f"r{i}": request(theirs, f"r{i}", SPECS[i % 3], prompt=p, xgrammar=True)
        for i, p in enumerate(prompts)
    }
    seen_mixed = False
    for _step in range(12):
        live = [r for r in reqs_t if not grammar(reqs_t[r]).is_terminated()]
        sched = {}
        for r in live:
            d = draft_for(grammar(reqs_t[r]), rng, k)
            if (
                reqs_t[r].structured_output_request.reasoning_ended is not True
                and rng.random() < 0.4
            ):
                d[int(rng.integers(0, k))] = THINK_END  # reasoning ends inside the draft
            sched[r] = d
        batched = [r for r in live if tg_vllm._chain_grammar(ours, reqs_o[r], sched[r]) is not None]
        seen_mixed |= 0 < len(batched) < len(live)
        three_way_bitmask(ours, theirs, reqs_o, reqs_t, live, sched)
        for rid in live:
            vo = ours.validate_tokens(reqs_o[rid], list(sched[rid]))
            assert vo == theirs.validate_tokens(reqs_t[rid], list(sched[rid]))
            new = vo[:2] or [int(rng.integers(0, 1000))]
            assert ours.accept_tokens(reqs_o[rid], new) == theirs.accept_tokens(reqs_t[rid], new)
        assert states(reqs_o) == states(reqs_t)
    assert seen_mixed


def test_failed_batched_call_uses_vllms_loop_and_logs_once(model_dir, monkeypatch, caplog):
    monkeypatch.setattr(tg_vllm, "_SCALAR_MAX", 0)
    rng = np.random.default_rng(31)
    k = 3
    ours = manager(model_dir, k)
    reqs = {f"r{i}": request(ours, f"r{i}", s) for i, s in enumerate(SPECS)}
    theirs = manager(model_dir, k)
    reqs_t = {f"r{i}": request(theirs, f"r{i}", s, xgrammar=True) for i, s in enumerate(SPECS)}

    class Failing:
        def batch_traverse_draft_tree(self, *args, **kwargs):
            raise WorkerError("a worker died")

    monkeypatch.setattr(tg_vllm, "_batch_matcher", lambda: Failing())
    monkeypatch.setattr(tg.serving._adapters, "_logged", set())
    with caplog.at_level(logging.WARNING, logger="treegram.serving._adapters"):
        for _ in range(2):
            sched = {r: draft_for(grammar(reqs_t[r]), rng, k) for r in reqs}
            fill_sentinel(ours, theirs)
            np.testing.assert_array_equal(
                ours.grammar_bitmask(reqs, list(reqs), sched),
                theirs.grammar_bitmask(reqs_t, list(reqs), sched),
            )
            assert states(reqs) == states(reqs_t)
    assert (
        sum("batched structured-output masks failed" in r.getMessage() for r in caplog.records) == 1
    )


def test_forced_drafts_replace_rejected_drafts(model_dir):
    """``VLLMBackend(forced_drafts=K)``: the grammar's ``validate_tokens`` (which vLLM's
    manager calls) replaces drafts the grammar rejects with grammar-forced tokens, never
    more than it was given; the result goes through the same ``grammar_bitmask`` (rows
    equal vLLM's loop)."""
    k = 3
    ours = manager(model_dir, k)
    req = request(ours, "f", SPECS[2])  # root ::= "call(" [a-z]+ ...: "call(" is forced
    g = grammar(req)
    g.forced_drafts = 8
    forced = g.extend_draft([])
    assert forced and b"".join(tg.TokenizerInfo.deepseek_v4().decoded_vocab[t] for t in forced)
    got = ours.validate_tokens(req, [MODEL_VOCAB - 1] * k)
    assert got == forced[:k] and len(got) <= k
    g.forced_drafts = 0
    assert ours.validate_tokens(req, [MODEL_VOCAB - 1] * k) == []  # without: nothing
    g.forced_drafts = 8
    assert ours.validate_tokens(req, []) == []  # nothing given: nothing added
    sched = {"f": got}
    m_o = ours.grammar_bitmask({"f": req}, ["f"], sched).copy()
    np.testing.assert_array_equal(m_o, ENGINE_BITMASK(ours, {"f": req}, ["f"], sched))
