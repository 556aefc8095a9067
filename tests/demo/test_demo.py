"""The end-to-end constrained speculative decoding demo (treegram.demo, ``treegram demo``).

The central property: for several schemas, prompts, model seeds and tree sizes, the
speculative loop (n-gram draft trees, masks from one batched tree traversal, tree attention
with a KV cache, masked greedy verification) produces exactly the tokens of plain
constrained greedy decoding (one token per step, full causal pass, the matcher's own mask),
and every output is complete, parses as JSON and validates against its schema.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from model_setup import prefill, root_path, tree_logits

torch = pytest.importorskip("torch")
jsonschema = pytest.importorskip("jsonschema")

from treegram import GrammarMatcher  # noqa: E402
from treegram.cli import build_parser, main  # noqa: E402
from treegram.demo import (  # noqa: E402
    EXAMPLES,
    MERGED_TOKENS,
    ByteTokenizer,
    DemoEngine,
    DemoRequest,
    NGramDrafter,
    TinyCausalLM,
    TinyLMConfig,
)

EXTRA = (
    DemoRequest(
        "Values: [3, 14, 159]. More: ",
        {
            "type": "array",
            "items": {"type": "integer", "minimum": -5, "maximum": 500},
            "minItems": 2,
            "maxItems": 5,
        },
        "ints",
    ),
    DemoRequest(
        '{"id": "ab-123", "ok": true} then ',
        {
            "type": "object",
            "properties": {
                "id": {"type": "string", "pattern": "^[a-z]{2,4}-[0-9]{3}$"},
                "ok": {"type": "boolean"},
            },
            "required": ["id", "ok"],
            "additionalProperties": False,
        },
        "pattern",
    ),
    DemoRequest(
        "shape ",
        {
            "type": "object",
            "properties": {
                "shape": {
                    "anyOf": [
                        {
                            "type": "object",
                            "properties": {"r": {"type": "integer", "minimum": 0, "maximum": 9}},
                            "required": ["r"],
                            "additionalProperties": False,
                        },
                        {"type": "array", "items": {"enum": ["x", "y"]}, "maxItems": 3},
                    ]
                },
                "n": {"type": "null"},
            },
            "required": ["shape", "n"],
            "additionalProperties": False,
        },
        "anyof",
    ),
    DemoRequest('JSON please: {"a": [1, 2, {"b": null}], "c": true} and ', None, "json-1"),
    DemoRequest("[[1, 2], [3]] ", None, "json-2"),
)


@pytest.fixture(scope="module", params=[0, 1, 2], ids=lambda s: f"seed{s}")
def engine(request):
    with DemoEngine(seed=request.param) as eng:
        yield eng


@pytest.fixture(scope="module")
def engine0():
    with DemoEngine(seed=0) as eng:
        yield eng


def _check_valid(result) -> None:
    assert result.terminated, f"{result.request.name} did not finish: {result.text!r}"
    doc = json.loads(result.text)
    if result.request.schema is not None:
        jsonschema.validate(doc, result.request.schema)


# ---------------------------------------------------------------------------- end to end


@pytest.mark.parametrize("tree_nodes", [1, 6, 16])
def test_speculative_equals_plain_greedy(engine, tree_nodes):
    requests = list(EXAMPLES) + list(EXTRA)
    report = engine.speculative(requests, max_tokens=300, tree_nodes=tree_nodes)
    reference = engine.greedy(requests, max_tokens=300)
    for spec, ref in zip(report.results, reference, strict=True):
        assert spec.token_ids == ref.token_ids, spec.request.name
        assert spec.text == ref.text
        assert sum(spec.step_lengths) == len(spec.token_ids)
        _check_valid(spec)
        _check_valid(ref)
        assert spec.token_ids[-1] == engine.tokenizer.eos_id
    if tree_nodes == 1:  # no drafts: one token per step
        assert report.mean_step_length == 1.0
    else:  # the drafter's trees are accepted beyond the bonus token sometimes
        assert report.mean_step_length > 1.2
        assert report.steps < max(len(r.token_ids) for r in report.results)


def test_custom_prompts_and_requests_finishing_at_different_steps(engine0):
    schema = EXAMPLES[0].schema
    requests = [
        DemoRequest(p, schema)
        for p in (
            "",
            "x",
            '{"name": "Bo", "age": 7, "is_student": true} {"name": "Al", ',
            "Lorem ipsum dolor sit amet " * 8,
        )
    ]
    requests.append(DemoRequest("tiny", {"enum": ["yes", "no"]}))
    report = engine0.speculative(requests, max_tokens=200, tree_nodes=10)
    reference = engine0.greedy(requests, max_tokens=200)
    assert len({len(r.step_lengths) for r in report.results}) > 1  # the batch shrank
    for spec, ref in zip(report.results, reference, strict=True):
        assert spec.token_ids == ref.token_ids
        _check_valid(spec)


def test_max_tokens_cap_matches_greedy(engine0):
    requests = list(EXAMPLES)
    report = engine0.speculative(requests, max_tokens=9, tree_nodes=16)
    reference = engine0.greedy(requests, max_tokens=9)
    for spec, ref in zip(report.results, reference, strict=True):
        assert spec.token_ids == ref.token_ids
        assert len(spec.token_ids) == 9 and not spec.terminated


def test_timings_are_recorded(engine0):
    report = engine0.speculative(EXAMPLES[:1], max_tokens=100)
    t = report.timings
    assert t.traverse > 0 and t.model > 0 and t.advance > 0 and t.apply > 0
    assert t.grammar == pytest.approx(t.traverse + t.apply + t.advance)


def test_bad_arguments(engine0):
    with pytest.raises(ValueError, match="max_tokens"):
        engine0.speculative(EXAMPLES, max_tokens=0)
    with pytest.raises(ValueError, match="tree_nodes"):
        engine0.speculative(EXAMPLES, tree_nodes=4, drafter=NGramDrafter(max_nodes=8))


# ---------------------------------------------------------------------------- components


def test_tokenizer():
    tok = ByteTokenizer()
    assert tok.vocab_size == 256 + len(MERGED_TOKENS) + 1
    assert tok.tokens[tok.eos_id] == b"<eos>"
    text = '{"name": "héllo", "ok": true, "x": null}<eos>'
    ids = tok.encode(text)
    assert tok.decode(ids) == text
    assert tok.eos_id not in ids
    assert ids[0] == tok.tokens.index(b'{"')  # longest match
    assert tok.tokens.index(b'": "') in ids
    info = tok.tokenizer_info()
    assert info.vocab_size == tok.vocab_size
    assert info.stop_token_ids == [tok.eos_id]
    assert tok.decode([tok.eos_id]) == ""
    with pytest.raises(ValueError):
        ByteTokenizer(merges=[b"a"])


def test_drafter_branches_and_respects_limits():
    drafter = NGramDrafter(max_nodes=16, max_ngram=3, max_depth=4)
    history = [5, 6, 9, 9, 5, 7, 8, 5]  # 5 was followed by 6 and by 7
    tokens, parents = drafter.propose(history)
    assert tokens[0] == 5 and parents[0] == -1
    assert all(-1 < p < i for i, p in enumerate(parents) if i)
    root_children = [tokens[i] for i, p in enumerate(parents) if p == 0]
    assert set(root_children) >= {6, 7}  # a branch at the root
    # the most recent continuation comes first
    assert root_children[0] == 7
    small = NGramDrafter(max_nodes=3)
    tokens, parents = small.propose(history)
    assert len(tokens) == len(parents) == 3
    # nothing seen before: the root alone
    assert NGramDrafter().propose([1, 2, 3]) == ([3], [-1])
    # the bigram table still proposes a chain when longer n-grams do not match
    tokens, parents = NGramDrafter(max_depth=3).propose([4, 1, 2, 4])
    assert tokens[:4] == [4, 1, 2, 4] and parents[:4] == [-1, 0, 1, 2]
    with pytest.raises(ValueError):
        NGramDrafter(max_nodes=0)
    with pytest.raises(ValueError):
        NGramDrafter().propose([])


def test_tree_attention_equals_causal_pass():
    tok = ByteTokenizer()
    model = TinyCausalLM(TinyLMConfig.for_tokenizer(tok, seed=3))
    rng = np.random.default_rng(0)
    prefixes = [rng.integers(0, tok.vocab_size, size=n).tolist() for n in (5, 11)]
    parents = np.array([[-1, 0, 0, 1, 1, 2, 5, -1], [-1, 0, 1, 2, 0, 4, 4, 6]])
    draft = rng.integers(0, tok.vocab_size, size=parents.shape)
    with torch.inference_mode():
        logits = tree_logits(model, prefill(model, prefixes, 32), draft, parents)
        for row, prefix in enumerate(prefixes):
            for node in range(parents.shape[1]):
                if node == 7 and row == 0:
                    continue  # a padding root: attends to the prefix, not a real node
                path = root_path(draft, parents, row, node)
                expected = model.causal_logits(prefix + path)[-1]
                torch.testing.assert_close(logits[row, node], expected, rtol=0, atol=1e-10)


def test_model_is_deterministic():
    tok = ByteTokenizer()
    a = TinyCausalLM(TinyLMConfig.for_tokenizer(tok, seed=7)).causal_logits([1, 2, 3])
    b = TinyCausalLM(TinyLMConfig.for_tokenizer(tok, seed=7)).causal_logits([1, 2, 3])
    c = TinyCausalLM(TinyLMConfig.for_tokenizer(tok, seed=8)).causal_logits([1, 2, 3])
    assert torch.equal(a, b) and not torch.equal(a, c)


def test_matchers_end_where_verification_left_them(engine0):
    """After a run, replaying the output through a fresh matcher terminates it too."""
    report = engine0.speculative(EXAMPLES, max_tokens=300)
    for res in report.results:
        m = GrammarMatcher(engine0.compile(res.request))
        assert all(m.accept_token(t) for t in res.token_ids)
        assert m.is_terminated()


# ---------------------------------------------------------------------------- CLI


def test_cli_demo_default(capsys):
    assert main(["demo", "--max-tokens", "300", "--check"]) == 0
    out = capsys.readouterr().out
    for req in EXAMPLES:
        assert f"[{req.name}]" in out
    assert out.count(", valid\n") == len(EXAMPLES)
    assert "identical to plain constrained greedy decoding: yes" in out
    assert "mean accepted length" in out and "grammar" in out and "model" in out


def test_cli_demo_options(tmp_path, capsys):
    schema = {"type": "object", "properties": {"k": {"enum": ["a", "b"]}}, "required": ["k"]}
    path = tmp_path / "s.json"
    path.write_text(json.dumps(schema))
    assert (
        main(
            [
                "demo",
                "--schema",
                str(path),
                "--batch",
                "2",
                "--tree-nodes",
                "4",
                "--seed",
                "1",
                "--prompt",
                '{"k": "a"} ',
                "--check",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert out.count(", valid\n") == 2 and ": yes" in out
    assert main(["demo", "--builtin-json", "--max-tokens", "200"]) == 0
    assert "valid JSON" in capsys.readouterr().out
    assert main(["demo", "--max-tokens", "0"]) == 2


def test_cli_default_run_unchanged():
    args = build_parser().parse_args([])
    assert args.command is None and args.grammar is None and args.text is None
    assert build_parser().parse_args(["--text", "[1]"]).command is None
