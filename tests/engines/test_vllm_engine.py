"""treegram's vLLM adapters driven through vLLM 0.33.0's own ``StructuredOutputManager``
with a real ``VllmConfig`` (a one-layer model ``config.json`` next to the DeepSeek-V4
tokenizer files, no weights), compared bit for bit with vLLM's xgrammar backend: masks
from ``grammar_bitmask``, ``validate_tokens``, ``accept_tokens`` (also after termination
and on a rejected token mid-list), rollback, per-request stop tokens and
``disable_any_whitespace``.
"""

from __future__ import annotations

import json
import time

import numpy as np
import pytest
from engine_setup import (
    EOS,
    MODEL_VOCAB,
    TOOL_BEGIN,
    TOOL_END,
    TOOL_SCHEMA,
    TOOL_SEP,
    deepseek_dir,
    plugging_in_snippet,
    require,
    triggered_tool_calls,
    write_vllm_model_dir,
)
from engine_setup import VLLM_SPECS as SPECS

config = require("vllm.config")
so = require("vllm.v1.structured_output")
backend_types = require("vllm.v1.structured_output.backend_types")
vllm_request = require("vllm.v1.request")
sampling = require("vllm.sampling_params")

from treegram.serving import vllm as tg_vllm  # noqa: E402
from treegram.serving.vllm import VLLMBackend, VLLMGrammar  # noqa: E402


@pytest.fixture(autouse=True)
def _uninstalled():
    """Every test leaves vLLM as it found it (the docs' snippet installs treegram)."""
    yield
    tg_vllm.uninstall()


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    """A model folder vLLM accepts: the tokenizer files and a one-layer config."""
    return write_vllm_model_dir(tmp_path_factory.mktemp("model"))


def manager(model_dir, monkeypatch, treegram: bool, **so_options):
    """vLLM's ``StructuredOutputManager`` on a real ``VllmConfig``; with ``treegram``
    treegram is installed by the snippet of docs/adapters.md, executed as written (read
    from the doc): its backend in place of vLLM's xgrammar one, and the mask drop-in."""
    if treegram:
        monkeypatch.setattr(so, "XgrammarBackend", so.XgrammarBackend)  # undone at teardown
        tg_vllm.uninstall()
        exec(compile(plugging_in_snippet("vLLM"), "docs/adapters.md", "exec"), {})
        assert so.XgrammarBackend == VLLMBackend.from_vllm
        assert so.StructuredOutputManager.grammar_bitmask is tg_vllm.grammar_bitmask
    else:  # vLLM's xgrammar backend (the drop-in, if installed, runs vLLM's own loop for it)
        monkeypatch.undo()
    vllm_config = config.VllmConfig(
        model_config=config.ModelConfig(model=str(model_dir), dtype="float32"),
        device_config=config.DeviceConfig(device="cpu"),
        structured_outputs_config=config.StructuredOutputsConfig(backend="xgrammar", **so_options),
    )
    return so.StructuredOutputManager(vllm_config)


def request(m, rid: str, spec: dict, **params):
    key, value = next(iter(spec.items()))
    structured = sampling.StructuredOutputsParams(**{key: value})
    sp = sampling.SamplingParams(structured_outputs=structured, max_tokens=64, **params)
    structured._backend = "xgrammar"
    req = vllm_request.Request(rid, [0], sp, None)
    m.grammar_init(req)
    deadline = time.monotonic() + 60
    while not req.structured_output_request.is_grammar_ready:
        assert time.monotonic() < deadline, "grammar did not compile"
        time.sleep(0.01)
    return req


def allowed(row: np.ndarray) -> np.ndarray:
    bits = np.unpackbits(np.ascontiguousarray(row).view(np.uint8), bitorder="little")
    return np.flatnonzero(bits[:MODEL_VOCAB])


def grammar(req):
    return req.structured_output_request.grammar


def test_batch_walk_bit_identical(model_dir, monkeypatch):
    """Random walks of a mixed batch (JSON, regex, EBNF, choice, JSON object) through
    ``grammar_bitmask``: identical rows every step; ``accept_tokens`` continues past the
    stop token (``ignore_eos``) with True on both; ``validate_tokens`` of random drafts
    and one-token rollbacks agree."""
    rng = np.random.default_rng(0)
    ours = manager(model_dir, monkeypatch, True)
    reqs_o = {f"r{i}": request(ours, f"r{i}", s) for i, s in enumerate(SPECS)}
    assert isinstance(ours.backend, VLLMBackend)
    assert isinstance(ours.backend, backend_types.StructuredOutputBackend)
    assert all(
        isinstance(grammar(r), backend_types.StructuredOutputGrammar) for r in reqs_o.values()
    )
    assert all(isinstance(grammar(r), VLLMGrammar) for r in reqs_o.values())
    theirs = manager(model_dir, monkeypatch, False)
    reqs_t = {f"r{i}": request(theirs, f"r{i}", s) for i, s in enumerate(SPECS)}
    ids = list(reqs_o)
    rows = validated = 0
    for _step in range(30):
        live = [r for r in ids if not grammar(reqs_t[r]).is_terminated()]
        if not live:
            break
        m_o = ours.grammar_bitmask(reqs_o, live, {})
        m_t = theirs.grammar_bitmask(reqs_t, live, {})
        np.testing.assert_array_equal(m_o, m_t)
        rows += len(live)
        for i, rid in enumerate(live):
            go, gt = grammar(reqs_o[rid]), grammar(reqs_t[rid])
            choices = allowed(m_t[i])
            draft = [int(rng.choice(choices))] + [int(t) for t in rng.integers(0, MODEL_VOCAB, 2)]
            assert go.validate_tokens(draft) == gt.validate_tokens(draft)
            validated += 1
            tok = EOS if EOS in choices and rng.random() < 0.3 else int(rng.choice(choices))
            # After a stop token, a further token (ignore_eos) is ignored with True.
            toks = [tok, int(rng.choice(choices))] if tok == EOS else [tok]
            assert go.accept_tokens(rid, toks) is gt.accept_tokens(rid, toks) is True
            assert go.num_processed_tokens == gt.num_processed_tokens
            assert go.is_terminated() == gt.is_terminated()
            if rng.random() < 0.2 and go.num_processed_tokens:
                go.rollback(1)
                gt.rollback(1)
                assert go.is_terminated() == gt.is_terminated()
    assert rows > 30 and validated == rows
    assert any(grammar(r).is_terminated() for r in reqs_t.values())
    assert all(
        grammar(r).accept_tokens(rid, [5, 6])
        for rid, r in reqs_o.items()
        if grammar(r).is_terminated()
    )


def test_rejected_token_keeps_prefix_and_stop_tokens(model_dir, monkeypatch, tokenizer_ids):
    """A rejected token mid-list keeps the accepted prefix on both; a request's own
    ``stop_token_ids`` end the grammar on both."""
    ours = manager(model_dir, monkeypatch, True)
    ro = request(ours, "a", SPECS[1])
    theirs = manager(model_dir, monkeypatch, False)
    rt = request(theirs, "a", SPECS[1])
    yes, space, bad = tokenizer_ids("yes"), tokenizer_ids(" "), tokenizer_ids("maybe")
    toks = [*yes, *bad, *space]
    assert grammar(ro).accept_tokens("a", toks) == grammar(rt).accept_tokens("a", toks) is False
    assert grammar(ro).num_processed_tokens == grammar(rt).num_processed_tokens == len(yes)
    np.testing.assert_array_equal(
        ours.grammar_bitmask({"a": ro}, ["a"], {}), theirs.grammar_bitmask({"a": rt}, ["a"], {})
    )
    stop = tokenizer_ids("!")[0]
    ours2 = manager(model_dir, monkeypatch, True)
    ro = request(ours2, "b", SPECS[1], stop_token_ids=[stop])
    theirs2 = manager(model_dir, monkeypatch, False)
    rt = request(theirs2, "b", SPECS[1], stop_token_ids=[stop])
    walk = [*tokenizer_ids("no"), *tokenizer_ids(" 7")]
    for g in (grammar(ro), grammar(rt)):
        assert g.accept_tokens("b", walk)
    np.testing.assert_array_equal(
        ours2.grammar_bitmask({"b": ro}, ["b"], {}), theirs2.grammar_bitmask({"b": rt}, ["b"], {})
    )
    for g in (grammar(ro), grammar(rt)):
        assert g.validate_tokens([stop, 5]) == [stop]
        assert g.accept_tokens("b", [stop]) and g.is_terminated()


@pytest.fixture(scope="module")
def tokenizer_ids():
    transformers = require("transformers")
    tok = transformers.PreTrainedTokenizerFast(
        tokenizer_file=str(deepseek_dir() / "tokenizer.json")
    )
    return lambda text: tok.encode(text, add_special_tokens=False)


def test_vocabularies_as_vllm_filters_them(model_dir, monkeypatch):
    """``from_vllm``'s two vocabularies are vLLM's: JSON/regex/EBNF/choice without the
    1,230 special added tokens (``TokenizerInfo.from_huggingface(...,
    exclude_special_tokens=True)`` against vLLM's ``_filter_special_tokens``), structural
    tags and Lark with all of them; same decoded tokens, stop and special ids."""
    ours = manager(model_dir, monkeypatch, True)
    request(ours, "v", SPECS[1])
    theirs = manager(model_dir, monkeypatch, False)
    request(theirs, "v", SPECS[1])
    pairs = [
        (ours.backend.compiler, theirs.backend.compiler),
        (ours.backend.full_vocab_compiler, theirs.backend.full_vocab_compiler),
    ]
    for o, t in pairs:
        # the vocabulary each compiler compiles against (xgrammar's compilers keep theirs
        # in what they compile)
        oi, ti = o.tokenizer_info, t.compile_regex("a").tokenizer_info
        assert oi.decoded_vocab == ti.decoded_vocab
        assert oi.stop_token_ids == ti.stop_token_ids == [EOS]
        assert oi.special_token_ids == ti.special_token_ids
    assert len(pairs[0][0].tokenizer_info.special_token_ids) == 1229  # 1,230 less the EOS
    assert not pairs[1][0].tokenizer_info.special_token_ids


def test_lark_detection_is_vllms():
    from treegram.serving.vllm import _grammar_is_lark

    utils = require("vllm.v1.structured_output.utils")
    for text in [
        'start: "a"',
        'root ::= "a"',
        '# root ::= "a"\nstart: "a"',
        'start: "a" // x ::= y',
        'start: "::="',
        "",
        "\n\n",
        'start: a\n a ::= "b"',
    ]:
        assert _grammar_is_lark(text) is utils.grammar_is_likely_lark(text), text


LARK = 'start: "call(" NAME ("," NUMBER)* ")"\nNAME: /[a-z]+/\nNUMBER: /[0-9]+/\n'
TAG_SPECS = {
    "lark": ({"grammar": LARK}, "call(abc,12,7)"),
    "legacy": (
        {
            "structural_tag": json.dumps(
                {
                    "structures": [
                        {
                            "begin": f"{TOOL_BEGIN}get_weather{TOOL_SEP}",
                            "schema": TOOL_SCHEMA,
                            "end": TOOL_END,
                        }
                    ],
                    "triggers": [TOOL_BEGIN],
                }
            )
        },
        # the begin-of-sentence text inside the JSON string is the special token: allowed
        # there because structural tags compile against the whole vocabulary
        f'Sure. {TOOL_BEGIN}get_weather{TOOL_SEP}{{"city": "Paris<｜begin▁of▁sentence｜>"}}'
        f"{TOOL_END} done",
    ),
    "format": (
        {"structural_tag": json.dumps(triggered_tool_calls({"get_time": TOOL_SCHEMA}))},
        f'ok {TOOL_BEGIN}get_time{TOOL_SEP}{{"city":"Oslo"}}{TOOL_END}',
    ),
}


def test_lark_and_structural_tags_bit_identical(model_dir, monkeypatch, tokenizer_ids):
    """Lark ``GRAMMAR`` and ``STRUCTURAL_TAG`` requests (legacy and format forms) through
    ``StructuredOutputManager``: every ``grammar_bitmask`` row along a document (free
    text, the tool-call tokens, the JSON arguments, free text, the stop token) and every
    ``validate_tokens`` / ``accept_tokens`` answer equal vLLM's xgrammar backend's."""
    ours = manager(model_dir, monkeypatch, True)
    reqs_o = {k: request(ours, k, spec) for k, (spec, _) in TAG_SPECS.items()}
    theirs = manager(model_dir, monkeypatch, False)
    reqs_t = {k: request(theirs, k, spec) for k, (spec, _) in TAG_SPECS.items()}
    walks = {k: [*tokenizer_ids(text), EOS] for k, (_, text) in TAG_SPECS.items()}
    assert 0 in walks["legacy"]  # the begin-of-sentence token, inside the JSON string
    rows = 0
    for step in range(max(map(len, walks.values()))):
        live = [k for k in walks if step < len(walks[k])]
        m_o = ours.grammar_bitmask(reqs_o, live, {})
        m_t = theirs.grammar_bitmask(reqs_t, live, {})
        np.testing.assert_array_equal(m_o, m_t, err_msg=f"step {step}")
        rows += len(live)
        for i, k in enumerate(live):
            tok = walks[k][step]
            assert tok in allowed(m_t[i]), (k, step)
            go, gt = grammar(reqs_o[k]), grammar(reqs_t[k])
            rest = walks[k][step : step + 3]
            assert go.validate_tokens(rest) == gt.validate_tokens(rest) == rest
            assert go.accept_tokens(k, [tok]) is gt.accept_tokens(k, [tok]) is True
    assert all(grammar(r).is_terminated() for r in [*reqs_o.values(), *reqs_t.values()])
    assert rows == sum(map(len, walks.values()))


@pytest.mark.parametrize("disable", [False, True])
def test_disable_any_whitespace(model_dir, monkeypatch, tokenizer_ids, disable):
    """``structured_outputs_config.disable_any_whitespace`` reaches treegram's backend:
    the same masks as vLLM's xgrammar backend along a JSON document."""
    ours = manager(model_dir, monkeypatch, True, disable_any_whitespace=disable)
    ro = request(ours, "w", SPECS[0])
    assert ours.backend.disable_any_whitespace is disable
    theirs = manager(model_dir, monkeypatch, False, disable_any_whitespace=disable)
    rt = request(theirs, "w", SPECS[0])
    text = '{"name":"x","n":true}' if disable else '{ "name": "x", "n": true }'
    for step, tok in enumerate(tokenizer_ids(text)):
        m_o = ours.grammar_bitmask({"w": ro}, ["w"], {})
        m_t = theirs.grammar_bitmask({"w": rt}, ["w"], {})
        np.testing.assert_array_equal(m_o, m_t, err_msg=f"step {step}")
        assert grammar(ro).accept_tokens("w", [tok]) and grammar(rt).accept_tokens("w", [tok])
