"""Engine adapters driven through the call sequences SGLang and vLLM make in a step.

Every sequence runs a twin :class:`treegram.GrammarMatcher` fed the same tokens directly
and compares masks and states after each call: the adapters must add nothing but the
engines' method names, argument conventions and bookkeeping.
"""

from __future__ import annotations

import enum
import json
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import treegram as tg  # noqa: E402
from treegram.errors import ArgumentError, GrammarError, MatcherStateError  # noqa: E402
from treegram.serving.sglang import (  # noqa: E402
    SGLangGrammar,
    SGLangGrammarBackend,
    SGLangInvalidGrammar,
    TokenRejectedError,
)
from treegram.serving.vllm import VLLMBackend, VLLMGrammar  # noqa: E402

VOCAB: list[str] = [chr(c) for c in range(32, 127)] + [
    "ab",
    "12",
    '{"',
    '":',
    "true",
    "<eos>",
]
N_PAD = 4
V = len(VOCAB) + N_PAD
EOS = VOCAB.index("<eos>")
DIGITS = 'root ::= "ab" [0-9]* "!"?'
OBJECT = r"""
root ::= "{" pair ("," pair)* "}"
pair ::= "\"" [a-z]+ "\":" ("true" | [0-9]+)
"""


def tid(text: str) -> int:
    return VOCAB.index(text)


def ids(*texts: str) -> list[int]:
    return [tid(t) for t in texts]


@pytest.fixture(scope="module")
def compiler():
    info = tg.TokenizerInfo(VOCAB, vocab_size=V, stop_token_ids=[EOS])
    return tg.GrammarCompiler(info)


def mask_of(matcher: tg.GrammarMatcher) -> np.ndarray:
    out = tg.allocate_token_bitmask(1, V)
    matcher.fill_next_token_bitmask(out)
    return np.asarray(out)[0].copy()


def stops_only_row() -> np.ndarray:
    allowed = np.zeros(32 * ((V + 31) // 32), dtype=bool)
    allowed[EOS] = True
    return tg.bool_to_bitmask(allowed[None])[0]


def tokenize(text: str) -> list[int]:
    """Greedy longest-match tokenization over VOCAB (a stand-in for the engine's)."""
    out, i = [], 0
    while i < len(text):
        best = max((t for t in VOCAB[:EOS] if text.startswith(t, i)), key=len)
        out.append(tid(best))
        i += len(best)
    return out


# ------------------------------------------------------------------------------- SGLang


def test_sglang_decode_steps(compiler):
    """Cache + copy, then per step: allocate, fill, move, apply, sample, accept."""
    backend = SGLangGrammarBackend(compiler)
    cached = backend.dispatch_ebnf(OBJECT)
    assert isinstance(cached, SGLangGrammar) and cached.key_string == OBJECT
    grammars = [cached.copy(), cached.copy()]
    twins = [tg.GrammarMatcher(compiler.compile_grammar(OBJECT)) for _ in grammars]
    rng = np.random.default_rng(0)
    for _step in range(12):
        live = [i for i, g in enumerate(grammars) if not g.finished]
        if not live:
            break
        mask = grammars[live[0]].allocate_vocab_mask(V, len(live), "cpu")
        for row, i in enumerate(live):
            grammars[i].fill_vocab_mask(mask, row)
            np.testing.assert_array_equal(np.asarray(mask)[row], mask_of(twins[i]))
        mask = SGLangGrammar.move_vocab_mask(mask, torch.device("cpu"))
        logits = torch.from_numpy(rng.normal(size=(len(live), V)).astype(np.float32))
        grammars[live[0]].apply_vocab_mask(logits=logits, vocab_mask=mask)
        sampled = logits.argmax(dim=1).tolist()
        for row, i in enumerate(live):
            grammars[i].accept_token(sampled[row])
            assert twins[i].accept_token(sampled[row])
            grammars[i].finished = grammars[i].is_terminated()
            assert grammars[i].is_terminated() == twins[i].is_terminated()
    for g, twin in zip(grammars, twins, strict=True):
        assert len(g.accepted_tokens) == twin.num_accepted_steps()
    # copy() starts over; the cached object itself was never advanced
    assert cached.copy().matcher.num_accepted_steps() == 0
    assert cached.matcher.num_accepted_steps() == 0


def test_sglang_speculative_rollback(compiler):
    """EAGLE verify accepts the verified tokens; engines that pre-accept drafts roll back."""
    g = SGLangGrammarBackend(compiler).dispatch_ebnf(DIGITS).copy()
    twin = tg.GrammarMatcher(compiler.compile_grammar(DIGITS))
    for t in ids("ab", "1", "2", "3"):
        g.accept_token(t)
    g.rollback(2)
    g.rollback(0)
    for t in ids("ab", "1"):
        twin.accept_token(t)
    assert g.accepted_tokens == ids("ab", "1")
    np.testing.assert_array_equal(mask_of(g.matcher), mask_of(twin))
    with pytest.raises(MatcherStateError):
        g.rollback(3)
    assert g.accepted_tokens == ids("ab", "1")


def test_sglang_rejected_token_raises_value_error(compiler):
    g = SGLangGrammar.from_compiled(compiler.compile_grammar(DIGITS))
    g.accept_token(tid("ab"))
    with pytest.raises(ValueError, match="not accepted"):
        g.accept_token(tid("x"))
    assert isinstance(TokenRejectedError("x"), ValueError)
    assert g.accepted_tokens == ids("ab")
    assert g.matcher.num_accepted_steps() == 1


def test_sglang_termination(compiler):
    g = SGLangGrammar.from_compiled(compiler.compile_grammar(DIGITS))
    for t in ids("ab", "1", "<eos>"):
        g.accept_token(t)
    assert g.is_terminated()
    g.accept_token(tid("2"))  # ignored after termination, as SGLang's xgrammar object does
    assert g.accepted_tokens == ids("ab", "1", "<eos>")
    mask = g.allocate_vocab_mask(V, 2, "cpu")
    g.fill_vocab_mask(mask, 1)
    np.testing.assert_array_equal(np.asarray(mask)[1], stops_only_row())
    assert not g.finished
    g.finished = True
    assert g.finished
    g.rollback(1)
    assert not g.is_terminated()


@pytest.mark.parametrize(
    ("grammar", "prefix", "jump", "new"),
    [
        # the jump string starts a fresh token: "x" + "ab" -> "x", "ab"
        ('root ::= "x" "ab" [0-9]*', ["x"], "ab", ["x", "ab"]),
        # re-tokenization merges the last old token with the jump string: "{" + '"' -> '{"'
        (OBJECT, ["{"], '"', ['{"']),
        # nothing accepted yet
        (DIGITS, [], "ab", ["ab"]),
    ],
)
def test_sglang_jump_forward(compiler, grammar, prefix, jump, new):
    g = SGLangGrammar.from_compiled(compiler.compile_grammar(grammar))
    twin = tg.GrammarMatcher(compiler.compile_grammar(grammar))
    for t in prefix:
        g.accept_token(tid(t))
    helper = g.try_jump_forward(tokenizer=None)
    assert helper is not None
    s, state = g.jump_forward_str_state(helper)
    assert helper[0] == [] and s == jump and state == -1
    old = list(g.accepted_tokens)
    new_ids = tokenize("".join(VOCAB[t] for t in old) + s)
    assert new_ids == ids(*new)
    g.jump_and_retokenize(old, new_ids, state)
    for t in new_ids:
        assert twin.accept_token(t)
    assert g.accepted_tokens == new_ids
    assert g.matcher.num_accepted_steps() == len(new_ids)
    np.testing.assert_array_equal(mask_of(g.matcher), mask_of(twin))


def test_sglang_jump_and_retokenize_rolls_back_old_tail(compiler):
    g = SGLangGrammar.from_compiled(compiler.compile_grammar(OBJECT))
    for t in ids("{", '"', "a", "b"):
        g.accept_token(t)
    old = list(g.accepted_tokens)
    new = ids("{", '"', "ab", '":')  # re-tokenized "...ab" + jump string '":'
    g.jump_and_retokenize(old, new, -1)
    assert g.accepted_tokens == new
    assert g.matcher.num_accepted_steps() == 4
    # a rejected re-tokenization restores the state before the call
    with pytest.raises(TokenRejectedError):
        g.jump_and_retokenize(new, ids("{", '"', "ab", "}"), -1)
    assert g.accepted_tokens == new
    twin = tg.GrammarMatcher(compiler.compile_grammar(OBJECT))
    for t in new:
        twin.accept_token(t)
    np.testing.assert_array_equal(mask_of(g.matcher), mask_of(twin))


def test_sglang_no_jump_forward_when_branching(compiler):
    g = SGLangGrammar.from_compiled(compiler.compile_grammar(DIGITS))
    g.accept_token(tid("ab"))
    assert g.try_jump_forward(None) is None


def invalid_grammar_type() -> type:
    """What an invalid grammar gives: SGLang's ``InvalidGrammarObject`` once SGLang is
    imported in this process (the engine tests import it), else treegram's stand-in."""
    sglang = sys.modules.get("sglang.srt.constrained.base_grammar_backend")
    return SGLangInvalidGrammar if sglang is None else sglang.InvalidGrammarObject


def test_sglang_backend_dispatch(compiler, caplog):
    backend = SGLangGrammarBackend(compiler, override_stop_tokens=[tid("!")])
    assert isinstance(backend.dispatch_regex("[0-9]+"), SGLangGrammar)
    anyjson = backend.dispatch_json("$$ANY$$")
    assert anyjson.matcher.accept_string('{"a": 1}')
    # An invalid grammar gives an object carrying the error (SGLang aborts the request).
    bad = backend.dispatch_ebnf("root ::= (")
    assert type(bad) is invalid_grammar_type()
    assert "end of grammar" in bad.error_message
    assert bad.copy() is bad
    assert type(backend.dispatch_regex("(")) is invalid_grammar_type()
    assert type(backend.dispatch_structural_tag("{}")) is invalid_grammar_type()
    g = backend.dispatch_ebnf(DIGITS)
    assert g.matcher.stop_token_ids == [tid("!")]
    assert g.copy().matcher.stop_token_ids == [tid("!")]
    if not hasattr(compiler, "compile_json_schema"):
        assert type(backend.dispatch_json('{"type": "object"}')) is invalid_grammar_type()
    backend.reset()


STRUCTURAL_TAG = {
    "type": "structural_tag",
    "format": {
        "type": "triggered_tags",
        "triggers": ["<f"],
        "tags": [
            {"begin": "<f>", "content": {"type": "regex", "pattern": "[0-9]+"}, "end": "</f>"}
        ],
    },
}
LEGACY_TAG = {
    "structures": [{"begin": "<f>", "schema": {"type": "boolean"}, "end": "</f>"}],
    "triggers": ["<f"],
}


def test_structural_tag_requests(compiler):
    sglang = SGLangGrammarBackend(compiler)
    vllm = VLLMBackend(compiler)
    for spec, good, bad in [
        (STRUCTURAL_TAG, "ok <f>12</f> then", "<f>x</f>"),
        (LEGACY_TAG, "ok <f>true</f>", "<f>12</f>"),
    ]:
        for m in (
            sglang.dispatch_structural_tag(json.dumps(spec)).matcher,
            vllm.compile_grammar(StructuredOutputOptions.STRUCTURAL_TAG, json.dumps(spec)).matcher,
        ):
            assert m.accept_string(good) and m.is_completed()
            assert not tg.GrammarMatcher(m.compiled_grammar).accept_string(bad)
    bad = sglang.dispatch_structural_tag("{not json")
    assert type(bad) is invalid_grammar_type() and "must be JSON" in bad.error_message
    bad = sglang.dispatch_structural_tag('{"structures": 3, "triggers": []}')
    assert type(bad) is invalid_grammar_type()
    with pytest.raises(ArgumentError, match="structures"):
        vllm.compile_grammar("structural_tag", '{"structures": [1], "triggers": ["<"]}')


def test_sglang_structural_tag_reading(compiler):
    """SGLang's reading of a structural tag: a null or missing schema is ``{}`` (any JSON),
    the legacy form's ``at_least_one`` is kept; malformed requests give the invalid-grammar
    object naming what is wrong."""
    sglang = SGLangGrammarBackend(compiler)
    legacy = {
        "structures": [
            {"begin": "<f>", "schema": None, "end": "</f>"},
            {"begin": "<g>", "end": "</g>"},
        ],
        "triggers": ["<"],
    }
    m = sglang.dispatch_structural_tag(json.dumps(legacy)).matcher
    assert m.accept_string('ok <f>{"a": [1]}</f><g>true</g>') and m.is_completed()
    assert tg.GrammarMatcher(m.compiled_grammar).accept_string("ok")
    first = sglang.dispatch_structural_tag(json.dumps({**legacy, "at_least_one": True})).matcher
    assert not tg.GrammarMatcher(first.compiled_grammar).accept_string("ok")
    assert first.accept_string("<g>12</g>") and first.is_completed()
    fmt = json.loads(json.dumps(STRUCTURAL_TAG))
    fmt["format"]["tags"][0].update(  # SGLang fills in schemas below tags typed "tag"
        type="tag", content={"type": "json_schema", "json_schema": None}
    )
    m = sglang.dispatch_structural_tag(json.dumps(fmt)).matcher
    assert m.accept_string('<f>"x"</f>') and m.is_completed()
    for spec, message in [
        ('{"structures": []}', "needs 'triggers'"),
        ('{"structures": [{"begin": "<f>"}], "triggers": ["<"]}', "without 'end'"),
        ("[1]", "must be a JSON object"),
        ("{}", "needs 'format' or 'structures'"),
    ]:
        bad = sglang.dispatch_structural_tag(spec)
        assert type(bad) is invalid_grammar_type() and message in bad.error_message, spec


def test_sglang_fork_copies_state(compiler):
    g = SGLangGrammar.from_compiled(compiler.compile_grammar(DIGITS))
    g.accept_token(tid("ab"))
    twin = g.fork()
    twin.accept_token(tid("1"))
    assert g.accepted_tokens == ids("ab") and twin.accepted_tokens == ids("ab", "1")
    assert g.matcher.num_accepted_steps() == 1


def test_sglang_bad_construction(compiler):
    with pytest.raises(ArgumentError):
        SGLangGrammar(object(), V)
    with pytest.raises(ArgumentError):
        SGLangGrammar(tg.GrammarMatcher(compiler.compile_grammar(DIGITS)), 0)
    with pytest.raises(ArgumentError):
        SGLangGrammarBackend(object())


# --------------------------------------------------------------------------------- vLLM


class StructuredOutputOptions(enum.Enum):
    """Stand-in for vLLM's enum of request types (the adapter reads member names)."""

    JSON = enum.auto()
    JSON_OBJECT = enum.auto()
    REGEX = enum.auto()
    GRAMMAR = enum.auto()
    CHOICE = enum.auto()
    STRUCTURAL_TAG = enum.auto()


def grammar_bitmask(grammar: VLLMGrammar, spec_tokens: list[int], bitmask, start: int) -> int:
    """vLLM's per-request mask filling with speculative tokens: a row for every position,
    advancing through the draft and rolling back at the end."""
    advanced = 0
    row = start
    for token in [*spec_tokens, None]:
        if not grammar.is_terminated():
            grammar.fill_bitmask(bitmask, row)
            if token is not None:
                assert grammar.accept_tokens("req", [token])
                advanced += 1
        row += 1
    if advanced:
        grammar.rollback(advanced)
    return row


def test_vllm_speculative_step(compiler):
    backend = VLLMBackend(compiler)
    g = backend.compile_grammar(StructuredOutputOptions.GRAMMAR, DIGITS)
    twin = tg.GrammarMatcher(compiler.compile_grammar(DIGITS))
    assert g.accept_tokens("req", ids("ab"))
    twin.accept_token(tid("ab"))
    # scheduler: cut the draft to its grammar-valid prefix (no state change)
    draft = ids("1", "2", "x", "3")
    spec = g.validate_tokens(draft)
    assert spec == ids("1", "2")
    assert g.num_processed_tokens == 1 and g.matcher.num_accepted_steps() == 1
    # masks for every position, as vLLM fills them, equal fill_chain_bitmask directly
    bitmask = backend.allocate_token_bitmask(8)
    end = grammar_bitmask(g, spec, bitmask, start=2)
    assert end == 2 + len(spec) + 1
    want = tg.allocate_token_bitmask(len(spec) + 1, V)
    assert twin.fill_chain_bitmask(spec, want) == len(spec)
    np.testing.assert_array_equal(np.asarray(bitmask)[2:end], np.asarray(want))
    assert g.num_processed_tokens == 1
    # the verifier accepted the first draft token plus a bonus token
    assert g.accept_tokens("req", ids("1", "7"))
    for t in ids("1", "7"):
        twin.accept_token(t)
    assert g.num_processed_tokens == 3
    np.testing.assert_array_equal(mask_of(g.matcher), mask_of(twin))


def test_vllm_accept_tokens_keeps_accepted_prefix(compiler):
    """A rejected token mid-list: the tokens before it stay accepted (vLLM's xgrammar
    grammar does the same; the scheduler then fails the request)."""
    g = VLLMBackend(compiler).compile_grammar("grammar", DIGITS)
    assert g.accept_tokens("r", ids("ab", "1"))
    assert not g.accept_tokens("r", ids("2", "x", "3"))
    assert g.num_processed_tokens == 3 and g.matcher.num_accepted_steps() == 3
    assert not g.accept_tokens("r", [V - 1])  # padding id: rejected, not an exception
    assert not g.accept_tokens("r", [V + 10])
    assert g.validate_tokens([tid("3"), V + 10, tid("4")]) == ids("3")
    assert g.validate_tokens([]) == []


def test_vllm_termination_and_reset(compiler):
    """Tokens after termination (in the same call or later; ``ignore_eos``) are ignored
    and the call succeeds, as vLLM's contract says."""
    g = VLLMBackend(compiler).compile_grammar(StructuredOutputOptions.REGEX, "[0-9]+")
    assert g.validate_tokens(ids("12", "<eos>", "3")) == ids("12", "<eos>")
    assert g.accept_tokens("r", ids("12", "<eos>", "3"))
    assert g.is_terminated() and g.num_processed_tokens == 2
    assert g.accept_tokens("r", ids("3", "x"))
    assert g.num_processed_tokens == 2
    assert g.validate_tokens(ids("3")) == []
    bitmask = tg.allocate_token_bitmask(2, V)
    g.fill_bitmask(bitmask, 1)
    np.testing.assert_array_equal(np.asarray(bitmask)[1], stops_only_row())
    g.rollback(1)
    assert not g.is_terminated() and g.num_processed_tokens == 1
    g.reset()
    assert g.num_processed_tokens == 0 and g.matcher.num_accepted_steps() == 0
    assert not g.validate_tokens(ids("<eos>"))


def test_vllm_request_stop_tokens(compiler):
    """``compile_grammar(..., stop_token_ids=...)``: the request's stop tokens (vLLM's
    ``SamplingParams.all_stop_token_ids``) end the grammar instead of the tokenizer's."""
    backend = VLLMBackend(compiler)
    g = backend.compile_grammar("regex", "[0-9]+", stop_token_ids={tid("!")})
    assert g.matcher.stop_token_ids == [tid("!")]
    assert g.validate_tokens(ids("1", "<eos>")) == ids("1")
    assert g.accept_tokens("r", ids("1", "!")) and g.is_terminated()
    assert backend.compile_grammar(
        "regex", "[0-9]+", stop_token_ids=set()
    ).matcher.stop_token_ids == [EOS]


def test_vllm_disable_any_whitespace(compiler):
    if not hasattr(compiler, "compile_json_schema"):
        pytest.skip("no JSON Schema support")
    schema = '{"type": "object", "properties": {"a": {"type": "integer"}}}'
    loose = VLLMBackend(compiler).compile_grammar("json", schema)
    tight = VLLMBackend(compiler, disable_any_whitespace=True).compile_grammar("json", schema)
    assert loose.matcher.accept_string('{ "a" : 1 }')
    assert not tight.matcher.accept_string('{ "a"')
    assert tight.matcher.accept_string('{"a":1}')
    with pytest.raises(ArgumentError, match="disable_any_whitespace"):
        VLLMBackend(compiler, disable_any_whitespace=1)


UNIQUE = {"type": "array", "items": {"type": "integer"}, "uniqueItems": True}
UNIQUE_INSTANCES = ([1, 2], [], [3], [1, 1], ["a"], [1.5], {"a": 1})


def widened_accepts(matcher: tg.GrammarMatcher, text: str) -> bool:
    matcher.reset()
    return matcher.accept_string(text) and matcher.is_completed()


def check_widened_unique(matcher: tg.GrammarMatcher, tight: bool = False) -> None:
    """The widened grammar is the schema without ``uniqueItems``: every instance is
    accepted exactly when ``jsonschema`` finds it valid against that schema."""
    jsonschema = pytest.importorskip("jsonschema")
    without = {k: v for k, v in UNIQUE.items() if k != "uniqueItems"}
    for value in UNIQUE_INSTANCES:
        text = json.dumps(value, separators=(",", ":") if tight else None)
        valid = jsonschema.Draft202012Validator(without).is_valid(value)
        assert widened_accepts(matcher, text) == valid, text


@pytest.mark.parametrize("unsupported", ["warn", ("uniqueItems",)])
def test_backends_unsupported_option(compiler, unsupported):
    """``unsupported=`` is ``compile_json_schema``'s widening option, per backend: off, a
    schema treegram cannot compile exactly is refused (SGLang gets an invalid grammar whose
    message names the option, vLLM the error); on, it is served widened with a warning
    naming the keyword and pointer."""
    if not hasattr(compiler, "compile_json_schema"):
        pytest.skip("no JSON Schema support")
    text = json.dumps(UNIQUE)
    bad = SGLangGrammarBackend(compiler).dispatch_json(text)
    assert type(bad) is invalid_grammar_type()
    assert "uniqueItems" in bad.error_message and "unsupported='warn'" in bad.error_message
    with pytest.raises(GrammarError, match="uniqueItems"):
        VLLMBackend(compiler).compile_grammar("json", text)
    # naming another keyword does not widen this one
    with pytest.raises(GrammarError, match="uniqueItems"):
        VLLMBackend(compiler, unsupported=["format"]).compile_grammar("json", text)

    # the compiler caches a widened grammar (it warns once, at its compile)
    compiler.clear_cache()
    with pytest.warns(UserWarning, match="'uniqueItems' at /uniqueItems widened"):
        sglang = SGLangGrammarBackend(compiler, unsupported=unsupported).dispatch_json(text)
    assert isinstance(sglang, SGLangGrammar)
    check_widened_unique(sglang.matcher)
    for tight in (False, True):
        backend = VLLMBackend(compiler, unsupported=unsupported, disable_any_whitespace=tight)
        compiler.clear_cache()
        with pytest.warns(UserWarning, match="'uniqueItems' at /uniqueItems widened"):
            grammar = backend.compile_grammar("json", text)
        check_widened_unique(grammar.matcher, tight)
        assert widened_accepts(grammar.matcher, "[ 1 ]") is not tight


def test_backends_unsupported_option_checked(compiler):
    for bad in ("ignore", 1, ["uniqueItems", ""]):
        with pytest.raises(ArgumentError, match="unsupported"):
            SGLangGrammarBackend(compiler, unsupported=bad)
        with pytest.raises(ArgumentError, match="unsupported"):
            VLLMBackend(compiler, unsupported=bad)


def test_vllm_request_types(compiler):
    backend = VLLMBackend(compiler)
    obj = backend.compile_grammar(StructuredOutputOptions.JSON_OBJECT, "")
    assert obj.matcher.accept_string('{"a": [1, true]}')
    choice = backend.compile_grammar(
        StructuredOutputOptions.CHOICE, json.dumps(["yes", 'no "way"', "a\\b"])
    )
    for text in ("yes", 'no "way"', "a\\b"):
        m = tg.GrammarMatcher(choice.ctx)
        assert m.accept_string(text) and m.is_completed()
    assert not tg.GrammarMatcher(choice.ctx).accept_string("maybe")
    regex = backend.compile_grammar("REGEX", "a[0-9]")
    assert regex.validate_tokens(ids("a", "1", "2")) == ids("a", "1")
    with pytest.raises(ArgumentError, match="not supported"):
        backend.compile_grammar("yaml", "a: b")
    with pytest.raises(GrammarError, match=r"structural_tag\.format is required"):
        backend.compile_grammar(StructuredOutputOptions.STRUCTURAL_TAG, "{}")
    with pytest.raises(ArgumentError):
        backend.compile_grammar(3, "x")
    with pytest.raises(ArgumentError, match="choice"):
        backend.compile_grammar("choice", "[]")
    with pytest.raises(GrammarError):
        backend.compile_grammar("grammar", "root ::= (")
    if hasattr(compiler, "compile_json_schema"):
        schema = backend.compile_grammar(
            StructuredOutputOptions.JSON,
            '{"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}',
        )
        m = tg.GrammarMatcher(schema.ctx)
        assert m.accept_string('{"a": 1}') and m.is_completed()
    else:
        with pytest.raises(ArgumentError, match="compile_json_schema"):
            backend.compile_grammar(StructuredOutputOptions.JSON, '{"type": "object"}')


def test_vllm_lark_and_full_vocab_compiler(compiler):
    """Lark ``GRAMMAR`` requests (vLLM's rule: no ``::=`` outside comments) and structural
    tags compile with ``full_vocab_compiler``, the other requests with ``compiler``."""
    full = tg.GrammarCompiler(tg.TokenizerInfo(VOCAB, vocab_size=V, stop_token_ids=[EOS]))
    backend = VLLMBackend(compiler, full_vocab_compiler=full)
    lark = '// root ::= "no"\nstart: "ab" DIGIT+\nDIGIT: /[0-9]/\n'
    g = backend.compile_grammar(StructuredOutputOptions.GRAMMAR, lark)
    assert g.ctx.tokenizer_info is full.tokenizer_info
    assert g.matcher.accept_string("ab12") and g.matcher.is_completed()
    ebnf = backend.compile_grammar(StructuredOutputOptions.GRAMMAR, DIGITS)
    assert ebnf.ctx.tokenizer_info is compiler.tokenizer_info
    tag = backend.compile_grammar(StructuredOutputOptions.STRUCTURAL_TAG, json.dumps(LEGACY_TAG))
    assert tag.ctx.tokenizer_info is full.tokenizer_info
    assert VLLMBackend(compiler).full_vocab_compiler is compiler
    with pytest.raises(GrammarError):
        backend.compile_grammar(StructuredOutputOptions.GRAMMAR, 'start: "a" (')
    with pytest.raises(ArgumentError, match="full_vocab_compiler"):
        VLLMBackend(compiler, full_vocab_compiler="x")


class RecordingCompiler(tg.GrammarCompiler):
    """A compiler that has compile_json_schema and records what it was asked."""

    calls: list

    def compile_json_schema(self, schema):
        self.calls.append(schema)
        return self.compile_builtin_json_grammar()


def test_vllm_json_dispatch_uses_compile_json_schema(compiler):
    rec = RecordingCompiler(compiler.tokenizer_info)
    rec.calls = []
    backend = VLLMBackend(rec)
    backend.compile_grammar(StructuredOutputOptions.JSON, '{"type": "integer"}')
    backend.compile_grammar(StructuredOutputOptions.JSON_OBJECT, "")
    assert rec.calls == ['{"type": "integer"}', '{"type": "object"}']
    sg = SGLangGrammarBackend(rec)
    assert sg.dispatch_json('{"type": "string"}') is not None
    assert rec.calls[-1] == '{"type": "string"}'


def test_vllm_override_stop_tokens_and_vocab(compiler):
    backend = VLLMBackend(compiler, override_stop_tokens=tid("!"))
    g = backend.compile_grammar("regex", "[0-9]+")
    assert g.matcher.stop_token_ids == [tid("!")]
    assert g.vocab_size == V
    assert tuple(backend.allocate_token_bitmask(3).shape) == (3, (V + 31) // 32)
    backend.destroy()
    with pytest.raises(ArgumentError):
        VLLMGrammar(tg.GrammarMatcher(compiler.compile_regex("a")), -1)
    with pytest.raises(ArgumentError):
        VLLMBackend("not a compiler")
