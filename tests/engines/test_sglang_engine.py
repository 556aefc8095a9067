"""treegram's SGLang adapters driven through SGLang 0.5.23's own, unmodified code
(``SamplingBatchInfo.update_regex_vocab_mask``, ``generate_token_bitmask`` /
``traverse_tree``, ``GrammarManager``, ``ReasonerGrammarBackend``) on the DeepSeek-V4
vocabulary, and compared bit for bit with SGLang's xgrammar backend on the same calls.
"""

from __future__ import annotations

import json
import types

import numpy as np
import pytest
from engine_setup import (
    EOS,
    MODEL_VOCAB,
    TOOL_BEGIN,
    TOOL_END,
    TOOL_SCHEMA,
    TOOL_SEP,
    plugging_in_snippet,
    require,
    sglang_backends,
    sglang_tokenizer,
    triggered_tool_calls,
)
from engine_setup import SGLANG_KEYS as KEYS
from engine_setup import SGLANG_SCHEMA as SCHEMA

base = require("sglang.srt.constrained.base_grammar_backend")
xgb = require("sglang.srt.constrained.xgrammar_backend")
spec_utils = require("sglang.srt.speculative.spec_utils")
sbi = require("sglang.srt.sampling.sampling_batch_info")
gm = require("sglang.srt.constrained.grammar_manager")
rgb = require("sglang.srt.constrained.reasoner_grammar_backend")
torch = require("torch")
transformers = require("transformers")

import treegram as tg  # noqa: E402
from treegram.serving import sglang as tg_sglang  # noqa: E402
from treegram.serving.sglang import SGLangGrammar, SGLangGrammarBackend  # noqa: E402

tokenizer = pytest.fixture(scope="module", name="tokenizer")(sglang_tokenizer)
backends = pytest.fixture(scope="module", name="backends")(sglang_backends)


def allowed(row: torch.Tensor) -> np.ndarray:
    bits = np.unpackbits(row.numpy().view(np.uint8), bitorder="little")
    return np.flatnonzero(bits[:MODEL_VOCAB])


def pair(backends, key):
    ours, theirs = backends
    return ours._init_value_dispatch(key, False), theirs._init_value_dispatch(key, False)


def test_real_base_classes(backends):
    ours, _ = backends
    assert isinstance(ours, base.BaseGrammarBackend)
    g = ours._init_value_dispatch(KEYS[0], False)
    assert isinstance(g, base.BaseGrammarObject) and isinstance(g, SGLangGrammar)
    assert isinstance(g.grammar_stats, base.GrammarStats)
    assert g.grammar_stats.dispatch_type == "json" and g.grammar_stats.compilation_time > 0
    assert g.current_token is None
    bad = ours._init_value_dispatch(("ebnf", "root ::= ("), False)
    assert isinstance(bad, base.InvalidGrammarObject) and "end of grammar" in bad.error_message


def sampler_masks(grammars) -> torch.Tensor:
    """SGLang's own per-step mask fill (``update_regex_vocab_mask``) for a batch."""
    info = types.SimpleNamespace(
        grammars=grammars,
        vocab_size=MODEL_VOCAB,
        temperatures=torch.ones(len(grammars), 1),
        device="cpu",
    )
    sbi.SamplingBatchInfo.update_regex_vocab_mask(info)
    return info.grammar_mask.vocab_mask


def test_decode_steps_mixed_batch_bit_identical(backends):
    """Random walks through every grammar at once, in one batch with an unconstrained
    row; masks from SGLang's sampler and the logits it masks are identical, also after
    termination (the terminated row keeps the allocated all -1 row)."""
    rng = np.random.default_rng(0)
    ours = [pair(backends, k)[0] for k in KEYS]
    theirs = [pair(backends, k)[1] for k in KEYS]
    rows = 0
    for _step in range(40):
        m_ours = sampler_masks([*ours, None])
        m_theirs = sampler_masks([*theirs, None])
        assert torch.equal(m_ours, m_theirs)
        logits = torch.randn(len(KEYS) + 1, MODEL_VOCAB)
        a, b = logits.clone(), logits.clone()
        base.GrammarMask(ours[0], m_ours).apply(a)
        base.GrammarMask(theirs[0], m_theirs).apply(b)
        assert torch.equal(a, b)
        rows += len(KEYS)
        for i, (o, t) in enumerate(zip(ours, theirs, strict=True)):
            if t.is_terminated():
                assert o.is_terminated()
                continue
            choices = allowed(m_theirs[i])
            tok = int(rng.choice(choices))
            if EOS in choices and rng.random() < 0.15:
                tok = EOS
            o.accept_token(tok)
            t.accept_token(tok)
            assert o.current_token == t.current_token == tok
            assert o.is_terminated() == t.is_terminated()
    assert rows == 40 * len(KEYS)
    assert any(t.is_terminated() for t in theirs)


def random_tree(rng, grammar, n):
    """A draft tree (SGLang's retrieve_next_token / retrieve_next_sibling) whose tokens
    are mostly grammar-valid continuations, some invalid, some stop tokens."""
    parent = [-1] + [int(rng.integers(0, i)) for i in range(1, n)]
    nxt, sib = [-1] * n, [-1] * n
    for i in range(n - 1, 0, -1):
        p = parent[i]
        sib[i], nxt[p] = nxt[p], i
    tokens = [0] * n
    fork = grammar.fork()
    mask = fork.allocate_vocab_mask(MODEL_VOCAB, 1, "cpu")

    def walk(node):
        fork.fill_vocab_mask(mask, 0)
        choices = allowed(mask[0])
        child = nxt[node]
        while child != -1:
            r = rng.random()
            if r < 0.1:
                tokens[child] = int(rng.integers(0, MODEL_VOCAB))
            elif r < 0.15:
                tokens[child] = EOS
            else:
                tokens[child] = int(rng.choice(choices))
            if fork.matcher.accept_token(tokens[child]):
                if not fork.is_terminated():
                    walk(child)
                fork.matcher.rollback(1)
            child = sib[child]

    walk(0)
    as_t = lambda a: torch.tensor(a, dtype=torch.int64)  # noqa: E731
    return as_t(nxt), as_t(sib), as_t(tokens)


def test_traverse_tree_bit_identical(backends):
    """SGLang's ``generate_token_bitmask`` (its ``traverse_tree`` DFS with accept, fill
    and rollback per node) over trees for a batch of requests: identical rows, and every
    grammar ends in the state it started in."""
    rng = np.random.default_rng(1)
    n, total = 12, 0
    for walk in range(6):
        ours = [pair(backends, k)[0] for k in KEYS]
        theirs = [pair(backends, k)[1] for k in KEYS]
        for o, t in zip(ours, theirs, strict=True):  # advance a few tokens first
            for _ in range(walk):
                m = t.allocate_vocab_mask(MODEL_VOCAB, 1, "cpu")
                t.fill_vocab_mask(m, 0)
                choices = [c for c in allowed(m[0]) if c != EOS]
                if t.is_terminated() or not choices:
                    break
                tok = int(rng.choice(choices))
                o.accept_token(tok)
                t.accept_token(tok)
        trees = [random_tree(rng, o, n) for o in ours]
        nxt = torch.stack([x[0] for x in trees])
        sib = torch.stack([x[1] for x in trees])
        toks = torch.stack([x[2] for x in trees])
        reqs_o = [types.SimpleNamespace(grammar=g) for g in ours]
        reqs_t = [types.SimpleNamespace(grammar=g) for g in theirs]
        before = [o.accepted_tokens.copy() for o in ours]
        m_o, _ = spec_utils.generate_token_bitmask(reqs_o, nxt, sib, toks, MODEL_VOCAB)
        m_t, _ = spec_utils.generate_token_bitmask(reqs_t, nxt, sib, toks, MODEL_VOCAB)
        assert torch.equal(m_o, m_t)
        total += m_o.shape[0]
        assert [o.accepted_tokens for o in ours] == before
    assert total == 6 * len(KEYS) * n


class FakeReq:
    """The fields of SGLang's ``Req`` that ``GrammarManager`` reads."""

    def __init__(self, rid, **sampling):
        fields = {"json_schema": None, "regex": None, "ebnf": None, "structural_tag": None}
        fields.update(sampling, ebnf_full_assistant=False, custom_params=None)
        self.rid = rid
        self.sampling_params = types.SimpleNamespace(**fields)
        self.origin_input_ids = [0]
        self.require_reasoning = False
        self.grammar = None
        self.grammar_key = None
        self.grammar_wait_ct = 0
        self.aborted = None

    def finished(self):
        return self.aborted is not None

    def set_finish_with_abort(self, message):
        self.aborted = message


def manager(backend):
    """A ``GrammarManager`` (SGLang's class and methods) holding ``backend``, on one rank."""
    m = gm.GrammarManager.__new__(gm.GrammarManager)
    m.scheduler = types.SimpleNamespace(model_config=types.SimpleNamespace())
    m.grammar_backend = backend
    m.grammar_queue = []
    m._enable_strict_thinking = backend.enable_strict_thinking
    m.grammar_sync_size, m.pp_rank, m.pp_size, m.pp_group = 1, 0, 1, None
    m.grammar_pp_sync_work_list = []
    m.SGLANG_GRAMMAR_POLL_INTERVAL = 0.05
    m.SGLANG_GRAMMAR_MAX_POLL_ITERATIONS = 200
    return m


def drain(m):
    ready = []
    for _ in range(200):
        ready += m.get_ready_grammar_requests()
        if not m.grammar_queue:
            return ready
    raise AssertionError("grammars did not compile")


def test_grammar_manager_compiles_caches_and_aborts(backends):
    """SGLang's ``GrammarManager``: compile on the backend's executor, cache, serve a
    cache hit with ``copy().maybe_init_reasoning``, and abort (not crash on) an invalid
    grammar, from the compile and from the cache."""
    ours, _ = backends
    ours.reset()
    m = manager(ours)
    good, bad = FakeReq("a", json_schema=SCHEMA), FakeReq("b", ebnf="root ::= (")
    assert m.process_req_with_grammar(good) and m.process_req_with_grammar(bad)
    assert len(drain(m)) == 2
    assert isinstance(good.grammar, SGLangGrammar) and good.aborted is None
    assert bad.aborted and "end of grammar" in bad.aborted
    hit, bad2 = FakeReq("c", json_schema=SCHEMA), FakeReq("d", ebnf="root ::= (")
    assert not m.process_req_with_grammar(hit) and not m.process_req_with_grammar(bad2)
    assert hit.grammar is not good.grammar and hit.grammar.grammar_stats.is_cache_hit
    assert hit.grammar.matcher.accept_string('{"name": "x", "n": true}')
    assert bad2.aborted and "end of grammar" in bad2.aborted
    m.clear()
    assert not ours.cache


# Whole documents for each whitespace option (valid under it), walked to the stop token.
WHITESPACE_DOCS = {
    "any_whitespace=False": (
        {"any_whitespace": False},
        ['{"name": "x y", "n": true, "tags": ["a", "b"]}', '{"name": "", "n": false}'],
    ),
    "max_whitespace_cnt=2": (
        {"max_whitespace_cnt": 2},
        [
            '{  "name" :  "a  b",\n "n":false , "tags" : [ "b" ] }',
            '{"name": "q", "n": true,\t"tags": [\n\n"a",  "a"]\n}',
        ],
    ),
    "default": ({}, ['{\n    "name": "z",\n    "n": true\n}']),
}


def walk_documents(ours, theirs, tokenizer, documents) -> int:
    """Each JSON ``document`` tokenized and walked to the stop token on both backends'
    grammars: SGLang's sampler masks compared before every token (every row, the one
    after the stop token included). Returns the number of rows compared."""
    rows = 0
    for doc in documents:
        o, t = ours.dispatch_json(SCHEMA), theirs.dispatch_json(SCHEMA)
        walk = [*tokenizer.encode(doc, add_special_tokens=False), EOS]
        assert len(walk) > 8
        for tok in walk:
            mo, mt = sampler_masks([o]), sampler_masks([t])
            assert torch.equal(mo, mt), (doc, rows)
            rows += 1
            assert tok in allowed(mt[0]), (doc, tokenizer.decode([tok]))
            o.accept_token(tok)
            t.accept_token(tok)
        assert o.is_terminated() and t.is_terminated()
        assert torch.equal(sampler_masks([o]), sampler_masks([t]))
        rows += 1
    return rows


def rows_of(tokenizer, documents) -> int:
    """Rows :func:`walk_documents` compares: one per token, the stop token's and the
    terminated one."""
    return sum(len(tokenizer.encode(d, add_special_tokens=False)) + 2 for d in documents)


@pytest.mark.parametrize("name", list(WHITESPACE_DOCS))
def test_whitespace_options_match_xgrammar(tokenizer, name):
    """``--constrained-json-disable-any-whitespace`` / ``--constrained-json-max-whitespace-cnt``
    reach the compiler: along whole documents every mask row is xgrammar's backend's with
    the same options."""
    opts, documents = WHITESPACE_DOCS[name]
    info = tg.TokenizerInfo.from_huggingface(
        tokenizer, vocab_size=MODEL_VOCAB, stop_token_ids=[EOS]
    )
    ours = SGLangGrammarBackend(tg.GrammarCompiler(info), MODEL_VOCAB, **opts)
    theirs = xgb.XGrammarGrammarBackend(
        tokenizer, vocab_size=MODEL_VOCAB, model_eos_token_ids=[EOS], **opts
    )
    assert walk_documents(ours, theirs, tokenizer, documents) == rows_of(tokenizer, documents)


def test_registration_snippet_from_docs(tokenizer):
    """The "Plugging in" snippet of docs/adapters.md (``install()``), executed as written
    (read from the doc): SGLang's own ``create_grammar_backend`` then returns treegram's
    backend, with the server's whitespace options, and its masks along whole documents are
    those of the xgrammar backend SGLang builds for the same server arguments;
    ``uninstall()`` gives SGLang its registry back."""
    rc = require("sglang.srt.runtime_context")
    saved = dict(base.GRAMMAR_BACKEND_REGISTRY)
    options = {
        "grammar_backend": "xgrammar",
        "constrained_json_disable_any_whitespace": False,
        "constrained_json_max_whitespace_cnt": 2,
    }
    try:
        with rc.get_context().override_server_args(**options) as server_args:
            exec(compile(plugging_in_snippet("SGLang"), "docs/adapters.md", "exec"), {})
            assert spec_utils.generate_token_bitmask is tg_sglang.generate_token_bitmask
            ours = base.create_grammar_backend(server_args, tokenizer, MODEL_VOCAB, {EOS})
            tg_sglang.uninstall()
            assert saved == base.GRAMMAR_BACKEND_REGISTRY
            theirs = base.create_grammar_backend(server_args, tokenizer, MODEL_VOCAB, {EOS})
    finally:
        tg_sglang.uninstall()
        base.GRAMMAR_BACKEND_REGISTRY.clear()
        base.GRAMMAR_BACKEND_REGISTRY.update(saved)
    assert isinstance(ours, SGLangGrammarBackend) and isinstance(ours, base.BaseGrammarBackend)
    assert isinstance(theirs, xgb.XGrammarGrammarBackend)
    assert ours.any_whitespace is True and ours.max_whitespace_cnt == 2
    assert ours.grammar_compiler.tokenizer_info.stop_token_ids == [EOS]
    _, documents = WHITESPACE_DOCS["max_whitespace_cnt=2"]
    assert walk_documents(ours, theirs, tokenizer, documents) == rows_of(tokenizer, documents)


# (structural tag as SGLang receives it, a document it allows)
STRUCTURAL_TAGS = [
    (  # legacy form with SGLang's at_least_one, and a structure without a schema
        {
            "structures": [
                {
                    "begin": f"{TOOL_BEGIN}get_weather{TOOL_SEP}",
                    "schema": TOOL_SCHEMA,
                    "end": TOOL_END,
                },
                {"begin": f"{TOOL_BEGIN}ping{TOOL_SEP}", "schema": None, "end": TOOL_END},
            ],
            "triggers": [TOOL_BEGIN],
            "at_least_one": True,
        },
        # the begin-of-sentence text inside the JSON string is that (special) token:
        # SGLang's vocabulary keeps special tokens as text; at_least_one: a call first
        f'{TOOL_BEGIN}get_weather{TOOL_SEP}{{"city": "Paris<｜begin▁of▁sentence｜>"}}'
        f"{TOOL_END} then {TOOL_BEGIN}ping{TOOL_SEP}[1, {{}}]{TOOL_END}",
    ),
    (  # xgrammar's format form, a json_schema left null (SGLang fills in {})
        triggered_tool_calls({"get_time": TOOL_SCHEMA, "noop": None}),
        f'ok {TOOL_BEGIN}get_time{TOOL_SEP}{{"city":"Oslo"}}{TOOL_END}'
        f'{TOOL_BEGIN}noop{TOOL_SEP}{{"k": "x"}}{TOOL_END}.',
    ),
]


@pytest.mark.parametrize("case", range(len(STRUCTURAL_TAGS)))
def test_structural_tags_bit_identical(backends, tokenizer, case):
    """SGLang's ``structural_tag`` response format (as ``GrammarManager`` dispatches it):
    every sampler mask row along a document with free text, two tool calls and the stop
    token equals SGLang's xgrammar backend's."""
    tag, text = STRUCTURAL_TAGS[case]
    o, t = pair(backends, ("structural_tag", json.dumps(tag)))
    assert isinstance(o, SGLangGrammar) and o.grammar_stats.dispatch_type == "structural_tag"
    walk = [*tokenizer.encode(text, add_special_tokens=False), EOS]
    assert case != 0 or 0 in walk
    for step, tok in enumerate(walk):
        mo, mt = sampler_masks([o]), sampler_masks([t])
        assert torch.equal(mo, mt), step
        assert tok in allowed(mt[0]), (step, tokenizer.decode([tok]))
        o.accept_token(tok)
        t.accept_token(tok)
    assert o.is_terminated() and t.is_terminated()


def test_lark_is_not_sglangs_ebnf(backends):
    """SGLang 0.5.23 has no Lark request: ``ebnf`` goes to xgrammar's EBNF compiler, which
    refuses Lark text; treegram's backend refuses it too (the request is aborted)."""
    lark = 'start: "call(" NAME ")"\nNAME: /[a-z]+/\n'
    for g in pair(backends, ("ebnf", lark)):
        assert isinstance(g, base.InvalidGrammarObject) and g.error_message


def test_structural_tag_top_level_string_difference(backends, tokenizer):
    """A difference listed in docs/adapters.md: xgrammar 0.2.8's JSON string
    rule asserts that ``[ \\n\\r\\t]* [,}\\]:]`` follows a string, so where a tag's
    content is a top-level string it rejects a token that closes the string and starts the
    end tag (``' "<'``); treegram allows it (the text is valid). Every other bit agrees."""
    tag = {
        "type": "structural_tag",
        "format": {
            "type": "tag",
            "begin": TOOL_BEGIN,
            "content": {"type": "json_schema", "json_schema": {"type": "string"}},
            "end": TOOL_END,
        },
    }
    o, t = pair(backends, ("structural_tag", json.dumps(tag)))
    for tok in tokenizer.encode(f'{TOOL_BEGIN}"', add_special_tokens=False):
        o.accept_token(tok)
        t.accept_token(tok)
    crossing = tokenizer.convert_tokens_to_ids('Ġ"<')
    a, b = set(allowed(sampler_masks([o])[0])), set(allowed(sampler_masks([t])[0]))
    assert crossing in a - b
    assert all(tokenizer.decode([x]).rstrip("<").endswith('"') for x in a - b)
    assert not b - a


def test_reasoner_backend_deepseek_v4(backends, tokenizer):
    """``--reasoning-parser deepseek-v4``: SGLang's ``ReasonerGrammarBackend`` wraps the
    treegram backend (it reads its mask helpers); no constraint while thinking, the
    grammar after ``</think>``, identical to the wrapped xgrammar backend."""
    reasoning = require("sglang.srt.parser.reasoning_parser")
    wrapped = []
    for b in backends:
        parser = reasoning.ReasoningParser(
            model_type="deepseek-v4", stream_reasoning=False, tokenizer=tokenizer
        )
        wrapped.append(rgb.ReasonerGrammarBackend(b, parser, tokenizer))
    objs = [w._init_value_dispatch(("regex", r"(yes|no) [0-9]{1,3}"), True) for w in wrapped]
    assert all(isinstance(o, rgb.ReasonerGrammarObject) for o in objs)
    think = tokenizer.encode("Let me think.", add_special_tokens=False)
    end = list(wrapped[0].think_end_ids)
    answer = tokenizer.encode("yes 12", add_special_tokens=False)
    for tok in [*think, *end, *answer]:
        masks = [sampler_masks([o]) for o in objs]
        assert torch.equal(masks[0], masks[1])
        for o in objs:
            o.accept_token(tok)
    assert objs[0].is_terminated() == objs[1].is_terminated()
    # A cache hit copies the wrapper and re-initialises its reasoning state.
    copy = objs[0].copy()
    copy.maybe_init_reasoning(True)
    assert isinstance(copy.grammar, SGLangGrammar) and not copy.grammar.accepted_tokens


def test_token_filter_matches_sglang_torch_op(backends):
    """Strict thinking's token filter (``set_token_filter``) against SGLang's own torch
    implementation, on all four modes, duplicates and word boundaries included."""
    ops = require("sglang.srt.constrained.torch_ops.token_filter_torch_ops")
    ours, _ = backends
    assert ours.is_support_token_filter
    rng = np.random.default_rng(2)
    for allow in (True, False):
        for reset in (True, False):
            start = torch.from_numpy(
                rng.integers(-(2**31), 2**31, (3, 8), dtype=np.int64).astype(np.int32)
            )
            ids = [0, 31, 32, 255, 31, int(rng.integers(0, 256))]
            a, b = start.clone(), start.clone()
            ours.set_token_filter(a, ids, 1, is_allowed=allow, reset_vocab_mask=reset)
            ops.set_token_filter_torch(b, ids, 1, is_allowed=allow, reset_vocab_mask=reset)
            assert torch.equal(a, b), (allow, reset)
            assert torch.equal(a[[0, 2]], start[[0, 2]])
