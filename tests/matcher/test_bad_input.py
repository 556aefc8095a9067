"""Bad input to the matcher, the compiler and the tokenizer: each gets a specific exception
whose message names the argument and the offending value, and a failed call leaves the
matcher exactly as it was."""

from __future__ import annotations

import re

import numpy as np
import pytest

import treegram as tg

VOCAB = [chr(c) for c in range(32, 127)] + ["ab", "abc", "<eos>", ""]
V = len(VOCAB)
N_WORDS = (V + 31) // 32
EOS = VOCAB.index("<eos>")
GRAMMAR = r'root ::= "a" ("b" | "c")* "d"'


@pytest.fixture(scope="module")
def info():
    return tg.TokenizerInfo(VOCAB, stop_token_ids=[EOS])


@pytest.fixture(scope="module")
def compiler(info):
    return tg.GrammarCompiler(info)


@pytest.fixture
def matcher(compiler):
    m = tg.GrammarMatcher(compiler.compile_grammar(GRAMMAR))
    assert m.accept_token(VOCAB.index("a"))
    assert m.accept_string("b")
    return m


def snapshot(m: tg.GrammarMatcher):
    row = np.zeros((1, N_WORDS), np.int32)
    m.fill_next_token_bitmask(row)
    return (
        row.tobytes(),
        m.num_accepted_steps(),
        m.is_completed(),
        m.is_terminated(),
        m.find_jump_forward_string(),
    )


# --------------------------------------------------------------------------- bitmasks
def _bad_numpy_masks():
    read_only = np.zeros((1, N_WORDS), np.int32)
    read_only.setflags(write=False)
    wide = np.zeros((1, 2 * N_WORDS), np.int32)
    return {
        "int64": (np.zeros((1, N_WORDS), np.int64), r"dtype int32.*int64"),
        "float32": (np.zeros((1, N_WORDS), np.float32), r"dtype int32.*float32"),
        "uint32": (np.zeros((1, N_WORDS), np.uint32), r"dtype int32.*uint32"),
        "3-D": (np.zeros((1, 1, N_WORDS), np.int32), r"3-D shape \(1, 1, 4\)"),
        "narrow": (np.zeros((1, N_WORDS - 1), np.int32), rf"{N_WORDS} int32 words.*\(1, 3\)"),
        "wide": (np.zeros((1, N_WORDS + 1), np.int32), rf"{N_WORDS} int32 words.*\(1, 5\)"),
        "read-only": (read_only, "writable"),
        "non-contiguous words": (wide[:, ::2], r"contiguous along its last dimension.*\(32, 8\)"),
        "list": ([[0] * N_WORDS], "got list"),
        "scalar": (np.int32(0), "got int32"),
    }


@pytest.mark.parametrize("case", list(_bad_numpy_masks()))
def test_bad_numpy_bitmask(matcher, case):
    bitmask, pattern = _bad_numpy_masks()[case]
    before = snapshot(matcher)
    with pytest.raises(tg.BitmaskError, match=pattern) as info:
        matcher.fill_next_token_bitmask(bitmask)
    assert isinstance(info.value, ValueError)
    assert "bitmask" in str(info.value)
    assert snapshot(matcher) == before


def _bad_torch_masks():
    torch = pytest.importorskip("torch")
    return {
        "int64": (torch.zeros((1, N_WORDS), dtype=torch.int64), r"torch\.int32.*torch\.int64"),
        "float32": (torch.zeros((1, N_WORDS)), r"torch\.int32.*torch\.float32"),
        "bool": (torch.zeros((1, N_WORDS), dtype=torch.bool), r"torch\.int32.*torch\.bool"),
        "3-D": (torch.zeros((2, 1, N_WORDS), dtype=torch.int32), r"3-D shape \(2, 1, 4\)"),
        "narrow": (torch.zeros((1, N_WORDS - 1), dtype=torch.int32), r"\(1, 3\)"),
        "wide": (torch.zeros((2, N_WORDS + 2), dtype=torch.int32), r"\(2, 6\)"),
        "non-contiguous words": (
            torch.zeros((1, 2 * N_WORDS), dtype=torch.int32)[:, ::2],
            "contiguous",
        ),
        "expanded rows": (
            torch.zeros((1, N_WORDS), dtype=torch.int32).expand(3, N_WORDS),
            "overlapping rows",
        ),
    }


@pytest.mark.parametrize(
    "case",
    ["int64", "float32", "bool", "3-D", "narrow", "wide", "non-contiguous words", "expanded rows"],
)
def test_bad_torch_bitmask(matcher, case):
    bitmask, pattern = _bad_torch_masks()[case]
    before = snapshot(matcher)
    with pytest.raises(tg.BitmaskError, match=pattern) as info:
        matcher.fill_next_token_bitmask(bitmask)
    assert "bitmask" in str(info.value)
    assert snapshot(matcher) == before


def test_good_strided_torch_bitmask_rows_are_honoured(matcher):
    torch = pytest.importorskip("torch")
    big = torch.zeros((6, N_WORDS), dtype=torch.int32)
    view = big[1::2]  # rows 1, 3, 5: a row stride of two rows
    matcher.fill_next_token_bitmask(view, 1)
    expected = np.frombuffer(snapshot(matcher)[0], np.int32)
    assert np.array_equal(big[3].numpy(), expected)
    assert not big[[0, 1, 2, 4, 5]].any()


@pytest.mark.parametrize(
    ("index", "pattern"),
    [
        (1, r"\[0, 1\).*got 1"),
        (-1, r"\[0, 1\).*got -1"),
        (10**9, "got 1000000000"),
        (1.5, "got float 1.5"),
        ("0", "got str '0'"),
        (None, "got NoneType None"),
        (True, "got True"),
    ],
)
def test_bad_row_index(matcher, index, pattern):
    before = snapshot(matcher)
    with pytest.raises(tg.BitmaskError, match=pattern) as info:
        matcher.fill_next_token_bitmask(np.zeros((1, N_WORDS), np.int32), index)
    assert isinstance(info.value, tg.BitmaskIndexError)
    assert isinstance(info.value, IndexError)
    assert "index" in str(info.value)
    assert snapshot(matcher) == before


def test_row_index_of_a_multi_row_mask(matcher):
    rows = np.full((3, N_WORDS), 7, np.int32)
    matcher.fill_next_token_bitmask(rows, np.int64(2))
    assert (rows[:2] == 7).all()
    with pytest.raises(tg.BitmaskIndexError, match=r"\[0, 3\).*got 3"):
        matcher.fill_next_token_bitmask(rows, 3)


# -------------------------------------------------------------------------- token ids
@pytest.mark.parametrize(
    "token_id", [-1, V, 10**9, -(10**12), 1.5, "a", None, b"a", np.float64(3.0)]
)
def test_accept_token_invalid_id(matcher, token_id):
    before = snapshot(matcher)
    with pytest.raises(tg.InvalidTokenIdError) as info:
        matcher.accept_token(token_id)
    assert isinstance(info.value, ValueError)
    message = str(info.value)
    assert "token_id" in message
    assert repr(token_id) in message
    assert f"[0, {V})" in message
    assert snapshot(matcher) == before


def test_accept_token_numpy_int_is_valid(matcher):
    assert matcher.accept_token(np.int64(VOCAB.index("c")))
    assert matcher.accept_token(np.int32(VOCAB.index("d")))
    assert matcher.is_completed()


@pytest.mark.parametrize("value", [1, None, ["a"], 1.5])
def test_accept_string_wrong_type(matcher, value):
    before = snapshot(matcher)
    with pytest.raises(TypeError, match=f"input_str.*{type(value).__name__}"):
        matcher.accept_string(value)
    assert snapshot(matcher) == before


@pytest.mark.parametrize("num", [-1, 1.5, "1", None, True])
def test_rollback_bad_count(matcher, num):
    # A malformed count is a bad argument (ValueError), not a state problem.
    before = snapshot(matcher)
    with pytest.raises(tg.ArgumentError, match=re.escape(repr(num))) as info:
        matcher.rollback(num)
    assert isinstance(info.value, ValueError)
    assert snapshot(matcher) == before


def test_rollback_past_history(matcher):
    # Rolling back more steps than were accepted is a state problem (RuntimeError).
    before = snapshot(matcher)
    with pytest.raises(tg.MatcherStateError, match="3") as info:
        matcher.rollback(3)
    assert isinstance(info.value, RuntimeError)
    assert snapshot(matcher) == before


# ------------------------------------------------------------- override_stop_tokens
@pytest.mark.parametrize("override", [-1, V, 10**9, [0, V], [EOS, -5], "a", [None], [1.5], ["x"]])
def test_invalid_override_stop_tokens(compiler, override):
    compiled = compiler.compile_grammar(GRAMMAR)
    with pytest.raises(tg.InvalidTokenIdError, match="override_stop_tokens") as info:
        tg.GrammarMatcher(compiled, override_stop_tokens=override)
    assert f"[0, {V})" in str(info.value)


def test_override_stop_tokens_float_scalar(compiler):
    with pytest.raises(tg.InvalidTokenIdError, match="override_stop_tokens"):
        tg.GrammarMatcher(compiler.compile_grammar(GRAMMAR), override_stop_tokens=1.5)


# ---------------------------------------------------------------- GrammarMatcher arg
def test_matcher_needs_a_compiled_grammar(compiler):
    for bad in [GRAMMAR, None, compiler, tg.Grammar.from_ebnf(GRAMMAR)]:
        with pytest.raises(TypeError, match=f"CompiledGrammar.*{type(bad).__name__}"):
            tg.GrammarMatcher(bad)


def test_matcher_rejects_an_xgrammar_compiled_grammar():
    xgr = pytest.importorskip("xgrammar")
    compiled = xgr.GrammarCompiler(xgr.TokenizerInfo(VOCAB)).compile_grammar(GRAMMAR)
    with pytest.raises(TypeError, match="CompiledGrammar"):
        tg.GrammarMatcher(compiled)


# ------------------------------------------------------------------------ EBNF errors
def _xgrammar_position(grammar: str) -> tuple[int, int] | None:
    try:
        import xgrammar as xgr
    except ImportError:
        return None
    with pytest.raises(RuntimeError) as info:
        xgr.Grammar.from_ebnf(grammar)
    found = re.search(r"line (\d+), column (\d+)", str(info.value))
    assert found, str(info.value)
    return int(found[1]), int(found[2])


SYNTAX_ERRORS = {
    "missing ::=": ('root "a"', r"::=", (1, 1)),
    "broken ::= on line 3": ('root ::= "a" r\nr ::= "b"\ns := "c"', r"':'", (3, 3)),
    "unterminated string": ('root ::= "abc', r"unterminated string", (1, 14)),
    "unterminated string line 2": ('root ::= a\na ::= "x" "ab\n', r"unterminated string", (2, 14)),
    "bad class range": ("root ::= [z-a]", r"range", (1, 11)),
    "unterminated class": ("root ::= [abc", r"character class", (1, 14)),
    "unbalanced open paren": ('root ::= ("a" "b"', r"\)", (1, 18)),
    "unbalanced close paren": ('root ::= "a")', r"\)", (1, 13)),
    "bad repetition range": ('root ::= "a"{2,1}', r"repetition", (1, 16)),
    "bad escape": (r'root ::= "\q"', r"escape", (1, 11)),
    "empty rule body": ('root ::= "a"\n  b ::= ', r"element", (2, 9)),
    "duplicate rule": ('root ::= "a"\nroot ::= "b"', r"root.*more than once", (2, 1)),
}


@pytest.mark.parametrize("case", list(SYNTAX_ERRORS))
def test_malformed_ebnf(compiler, case):
    grammar, pattern, (line, column) = SYNTAX_ERRORS[case]
    with pytest.raises(tg.GrammarSyntaxError, match=pattern) as info:
        compiler.compile_grammar(grammar)
    err = info.value
    assert isinstance(err, tg.GrammarError) and isinstance(err, ValueError)
    assert (err.line, err.column) == (line, column)
    assert f"line {line}, column {column}" in str(err)
    # the same through Grammar.from_ebnf, and at the position xgrammar reports
    with pytest.raises(tg.GrammarSyntaxError):
        tg.Grammar.from_ebnf(grammar)
    xgr_pos = _xgrammar_position(grammar)
    if xgr_pos is not None and case != "bad repetition range":
        assert xgr_pos == (line, column)


def test_bad_repetition_range_position_differs_from_xgrammar():
    # xgrammar reports the ',' / closing brace (column 17); treegram the first number
    grammar = 'root ::= "a"{2,1}'
    with pytest.raises(tg.GrammarSyntaxError) as info:
        tg.Grammar.from_ebnf(grammar)
    assert info.value.line == 1
    assert 13 <= info.value.column <= 17


def test_undefined_rule(compiler):
    with pytest.raises(tg.UndefinedRuleError, match="'missing_rule'") as info:
        compiler.compile_grammar('root ::= "a" missing_rule\n')
    assert isinstance(info.value, tg.GrammarError)
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize(
    ("grammar", "kwargs", "pattern"),
    [
        ('x ::= "a"', {}, r"root rule 'root'.*x"),
        ('root ::= "a"', {"root_rule_name": "main"}, r"'main'"),
        ("", {}, "empty"),
        ("   \n  \n", {}, "empty"),
    ],
)
def test_missing_root_rule(compiler, grammar, kwargs, pattern):
    with pytest.raises(tg.GrammarError, match=pattern):
        compiler.compile_grammar(grammar, **kwargs)


@pytest.mark.parametrize("grammar", [123, None, b'root ::= "a"', ['root ::= "a"']])
def test_compile_grammar_wrong_type(compiler, grammar):
    with pytest.raises(tg.GrammarError, match=f"grammar.*{type(grammar).__name__}"):
        compiler.compile_grammar(grammar)


# ------------------------------------------------------------------ GrammarCompiler
@pytest.mark.parametrize(
    ("kwargs", "pattern"),
    [
        ({"max_threads": 0}, "max_threads.*0"),
        ({"max_threads": -3}, "max_threads.*-3"),
        ({"max_threads": "4"}, "max_threads.*'4'"),
        ({"max_threads": 2.0}, r"max_threads.*2\.0"),
        ({"cache_limit_bytes": -2}, "cache_limit_bytes.*-2"),
        ({"cache_limit_bytes": 1.5}, r"cache_limit_bytes.*1\.5"),
        ({"cache_limit_bytes": "big"}, "cache_limit_bytes.*'big'"),
    ],
)
def test_bad_compiler_args(info, kwargs, pattern):
    with pytest.raises(tg.GrammarError, match=pattern) as err:
        tg.GrammarCompiler(info, **kwargs)
    assert isinstance(err.value, ValueError)


@pytest.mark.parametrize("bad", ["not a tokenizer", None, VOCAB])
def test_compiler_rejects_non_tokenizer_info(bad):
    with pytest.raises((TypeError, ValueError), match="tokenizer_info"):
        tg.GrammarCompiler(bad)


# ------------------------------------------------------------------------- tokenizer
@pytest.mark.parametrize("empty", [[], ()])
def test_empty_vocabulary_matches_strings(empty):
    # xgrammar's size-0 vocabulary: grammars still match strings; masks have no columns
    info = tg.TokenizerInfo(empty)
    assert info.vocab_size == 0
    compiled = tg.GrammarCompiler(info).compile_grammar('root ::= "a" | "bc"')
    bitmask = tg.allocate_token_bitmask(2, info.vocab_size, backend="numpy")
    assert bitmask.shape == (2, 0)
    m = tg.GrammarMatcher(compiled)
    m.fill_next_token_bitmask(bitmask, 1)
    assert not m.accept_string("x") and m.accept_string("b")
    assert not m.is_completed() and m.accept_string("c") and m.is_completed()
    with pytest.raises(tg.InvalidTokenIdError, match="token_id"):
        m.accept_token(0)
    pair = [tg.GrammarMatcher(compiled), tg.GrammarMatcher(compiled)]
    tg.BatchGrammarMatcher().batch_fill_next_token_bitmask(pair, bitmask)
    data = compiled.serialize()
    again = tg.CompiledGrammar.deserialize(data, info)
    assert tg.GrammarMatcher(again).accept_string("a")


@pytest.mark.parametrize("stops", [[-1], [V], V + 3, [0, 10**9]])
def test_tokenizer_stop_token_out_of_range(stops):
    with pytest.raises(tg.InvalidTokenIdError, match="stop_token_ids"):
        tg.TokenizerInfo(VOCAB, stop_token_ids=stops)


# -------------------------------------------------- state is unchanged after failures
def test_state_unchanged_after_every_failed_call(matcher):
    torch = pytest.importorskip("torch")
    before = snapshot(matcher)
    good = np.zeros((1, N_WORDS), np.int32)
    failing_calls = [
        (
            lambda: matcher.fill_next_token_bitmask(np.zeros((1, N_WORDS), np.int64)),
            tg.BitmaskError,
        ),
        (lambda: matcher.fill_next_token_bitmask(good, 5), tg.BitmaskError),
        (lambda: matcher.fill_next_token_bitmask(torch.zeros(1, N_WORDS)), tg.BitmaskError),
        (lambda: matcher.accept_token(-1), tg.InvalidTokenIdError),
        (lambda: matcher.accept_token(V), tg.InvalidTokenIdError),
        (lambda: matcher.accept_token("b"), tg.InvalidTokenIdError),
        (lambda: matcher.accept_string(7), TypeError),
        (lambda: matcher.rollback(99), tg.MatcherStateError),
        (lambda: matcher.rollback(-1), tg.ArgumentError),
    ]
    for call, error in failing_calls:
        with pytest.raises(error):
            call()
        assert snapshot(matcher) == before
    # rejections by the grammar: False, and nothing changes either
    for rejected in [
        lambda: matcher.accept_token(VOCAB.index("a")),
        lambda: matcher.accept_token(VOCAB.index("abc")),
        lambda: matcher.accept_token(VOCAB.index("")),
        lambda: matcher.accept_token(EOS),  # cannot end yet
        lambda: matcher.accept_string("bcbx"),
        lambda: matcher.accept_string("cd!"),
        lambda: matcher.accept_string(b"\xff"),
    ]:
        assert rejected() is False
        assert snapshot(matcher) == before
    # and the matcher still works
    assert matcher.accept_string("cd")
    assert matcher.accept_token(EOS)
    assert matcher.is_terminated()
