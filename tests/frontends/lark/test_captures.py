"""Capture groups: ``[capture]`` / ``[capture="name"]`` on Lark (and EBNF) rules,
``GrammarMatcher.get_captures``, and the ``suffix`` / ``stop`` / ``stop_capture`` rules
for markers. Every table row is also checked against xgrammar 0.2.8 (the oracle).
"""

from __future__ import annotations

import numpy as np
import pytest

from treegram import (
    BatchGrammarMatcher,
    Grammar,
    GrammarCompiler,
    GrammarMatcher,
    GrammarSyntaxError,
    TokenizerInfo,
)

TEXT = "TEXT: /(\\n|.)*/"

# (lark, accepted text, captures deduplicated, raw completion events or None: not checked)
CASES = [
    ('start: "a" v "b"\nv[capture]: /[0-9]+/', "a123b", [("v", b"123")],
     [("v", b"1"), ("v", b"12"), ("v", b"123")]),
    ('start: outer\nouter[capture="o"]: "x" inner "!"\ninner[capture="i"]: /[a-z]+/', "xabc!",
     [("i", b"abc"), ("o", b"xabc!")], None),
    ('start: (item ",")* item\nitem[capture]: /[0-9]+/', "1,22,9",
     [("item", b"1"), ("item", b"22"), ("item", b"9")], None),
    # right recursion stays a call in a captured rule: every level completes
    ('start: lst\nlst[capture]: ITEM "," lst | ITEM\nITEM: /[0-9]+/', "1,2,3",
     [("lst", b"3"), ("lst", b"2,3"), ("lst", b"1,2,3")], None),
    ('start[capture="all"]: "a" /[0-9]+/ "b"', "a12b", [("all", b"a12b")], None),
    ('start: "ab"', "ab", [], None),
    ('start: "<" r ">"\nr[lazy, capture="x"]: /[a-z]+/', "<a>", [("x", b"a")], None),
    (f'start: tool* tail\ntail: TEXT\ntool_head[lazy]: TEXT "<tc>"\n'
     f'tool: tool_head arg "</tc>"\narg[capture]: /[0-9]+/\n{TEXT}',
     "a<tc>42</tc>b<tc>7</tc>c", [("arg", b"42"), ("arg", b"7")], None),
    # suffix: the marker is out of the rule's own capture only; stop: out of every one
    ('start[capture="outer"]: r "z"\nr[capture="inner", suffix="!"]: /[a-z]*/', "xy!z",
     [("inner", b"xy"), ("outer", b"xy!z")], None),
    ('start[capture="outer"]: r "z"\nr[capture="inner", stop="!"]: /[a-z]*/', "xy!z",
     [("inner", b"xy"), ("outer", b"xyz")], None),
    ('start[capture="outer"]: r "z"\nr[capture="inner", stop="💥"]: /[a-z]*/', "xy💥z",
     [("inner", b"xy"), ("outer", b"xyz")], None),
    ('start[capture="outer"]: item item "z"\nitem[stop="!"]: /[ab]*/', "a!b!z",
     [("outer", b"abz")], None),
    ('start[capture="outer"]: item item "z"\nitem[suffix="!"]: /[ab]*/', "a!b!z",
     [("outer", b"a!b!z")], None),
    # a stop marker is hidden only from the captures of the parses that used its rule
    ('start: a | c\na[capture="a"]: b "q"\nb[stop="!"]: "x"\nc[capture="c"]: "x!"', "x!",
     [("c", b"x!")], [("c", b"x!")]),
    ('start[capture="o"]: r "z"\nr[capture="i", stop="END"i, stop_capture="m"]: /[a-z]*/',
     "abEnDz", [("m", b"EnD"), ("i", b"ab"), ("o", b"abz")], None),
    ('start[capture="o"]: r "z"\nr[suffix=/X[a-z]Y/, stop_capture="m"]: /[a-z]*/', "aXbYz",
     [("m", b"XbY"), ("o", b"aXbYz")], None),
    # markers of several lengths (in bytes: '.' is 1 to 4 of them)
    ('start[capture="o"]: r "z"\nr[capture="i", stop=/!!+/, stop_capture="m"]: /[a-z]*/',
     "ab!!z", [("m", b"!!"), ("i", b"ab"), ("o", b"abz")], None),
    ('start[capture="o"]: r "Z"\nr[capture="i", suffix=/b?a/, stop_capture="m"]: "b"', "baZ",
     [("m", b"a"), ("i", b"b"), ("o", b"baZ")], None),
    ('start[capture="o"]: r "z"\nr[capture="i", stop=/X.Y/s]: /[a-z]*/', "aX\u00e9Yz",
     [("i", b"a"), ("o", b"az")], None),
    # an any-text rule ending at a string marker: text with no marker completes too
    (f'start[capture="outer"]: r\nr[capture="inner", suffix="<e>"]: TEXT\n{TEXT}', "plain",
     [("inner", b"plain"), ("outer", b"plain")], None),
    (f'start[capture="outer"]: r\nr[capture="inner", suffix="<e>"]: TEXT\n{TEXT}', "f<e>",
     [("inner", b"f"), ("outer", b"f<e>")], None),
    (f'start[capture="outer"]: r\nr[capture="inner", stop="<e>"]: TEXT\n{TEXT}', "f<e>",
     [("inner", b"f"), ("outer", b"f")], None),
    (f'start: r\nr[stop="<e>", stop_capture="m"]: TEXT\n{TEXT}', "plain", [], None),
    # dynamic dispatch: a stop trigger is hidden from the captures around it
    (f'start[capture="o"]: tool* tail\ntail: TEXT\nhead[stop="<t>", stop_capture="m"]: TEXT\n'
     f'tool: head "x"\n{TEXT}', "a<t>xb<t>xc",
     [("m", b"<t>"), ("m", b"<t>"), ("o", b"axbxc")], None),
    (f'start[capture="o"]: tool* tail\ntail: TEXT\nhead[suffix="<t>"]: TEXT\n'
     f'tool: head "x"\n{TEXT}', "a<t>xb", [("o", b"a<t>xb")], None),
]  # fmt: skip


def _matcher(grammar: Grammar, info: TokenizerInfo | None = None) -> GrammarMatcher:
    compiler = GrammarCompiler(info or TokenizerInfo([]), cache_enabled=False)
    return GrammarMatcher(compiler.compile_grammar(grammar), terminate_without_stop_token=True)


@pytest.mark.parametrize("source, text, dedup, raw", CASES, ids=[c[0][:50] for c in CASES])
def test_captures(source: str, text: str, dedup: list, raw: list | None) -> None:
    m = _matcher(Grammar.from_lark(source))
    assert m.accept_string(text) and m.is_terminated()
    assert m.get_captures() == dedup
    if raw is not None:
        assert m.get_captures(deduplicate=False) == raw


@pytest.mark.parametrize("source, text, dedup, raw", CASES, ids=[c[0][:50] for c in CASES])
def test_captures_match_xgrammar(source: str, text: str, dedup: list, raw: list | None) -> None:
    xgr = pytest.importorskip("xgrammar")
    compiled = xgr.GrammarCompiler(xgr.TokenizerInfo([]), cache_enabled=False).compile_lark(source)
    theirs = xgr.GrammarMatcher(compiled, terminate_without_stop_token=True)
    assert theirs.accept_string(text) and theirs.is_terminated()
    assert theirs.get_captures() == dedup
    # (the raw event lists are not compared: xgrammar's follow its implementation, e.g.
    # it leaves out empty completions at the start of the text)


@pytest.mark.parametrize(
    "source, text, expected",
    [
        ('start[capture="o"]: r "z"\nr[capture="i", stop="!", stop_capture="m"]: /[a-z]*/',
         "ab!z", [("m", b"!"), ("i", b"ab"), ("o", b"abz")]),
        (f'start[capture="o"]: tool* tail\ntail: TEXT\nhead[stop="<t>", stop_capture="m"]: '
         f'TEXT\ntool: head "x"\n{TEXT}', "a<t>xb<t>xc",
         [("m", b"<t>"), ("m", b"<t>"), ("o", b"axbxc")]),
        (f'start[capture="o"]: r\nr[capture="i", suffix="<e>"]: TEXT\n{TEXT}', "f<e>",
         [("i", b"f"), ("o", b"f<e>")]),
    ],
)  # fmt: skip
def test_captures_survive_printing_serialization_and_cache(source, text, expected) -> None:
    grammar = Grammar.from_lark(source)
    printed = Grammar.from_ebnf(str(grammar))
    assert printed == grammar
    restored = Grammar.deserialize_json(grammar.serialize_json())
    cached = GrammarCompiler(TokenizerInfo([]), cache_enabled=True)
    for candidate in (grammar, printed, restored):
        for compiled in (
            GrammarCompiler(TokenizerInfo([]), cache_enabled=False).compile_grammar(candidate),
            cached.compile_grammar(candidate),
        ):
            m = GrammarMatcher(compiled, terminate_without_stop_token=True)
            assert m.accept_string(text)
            assert m.get_captures() == expected


def test_stop_in_a_named_grammar_is_hidden_from_the_outer_capture() -> None:
    dynamic = f'start: tool* tail\ntail: TEXT\nhead[stop="<t>"]: TEXT\ntool: head "x"\n{TEXT}'
    grammar = Grammar.from_lark('start[capture="o"]: @d', named_grammars={"d": dynamic})
    m = _matcher(grammar)
    assert m.accept_string("a<t>xb")
    assert m.get_captures() == [("o", b"axb")]


VOCAB = ["a", "1", "2", "b", "</s>", "12"]


def test_tokens_rollback_reset_fork_and_masks() -> None:
    info = TokenizerInfo(VOCAB, stop_token_ids=[4])
    compiled = GrammarCompiler(info).compile_lark('start: "a" v "b"\nv[capture]: /[0-9]+/')
    m = GrammarMatcher(compiled)
    bitmask = np.zeros((1, 1), dtype=np.int32)
    assert m.accept_token(0)
    m.fill_next_token_bitmask(bitmask)  # computing masks records nothing
    assert m.get_captures(deduplicate=False) == []
    for t in (1, 3):
        assert m.accept_token(t)
    assert m.get_captures() == [("v", b"1")]
    m.rollback(2)
    assert m.get_captures() == []
    for t in (5, 3, 4):  # "12", "b", then the stop token (no bytes)
        assert m.accept_token(t)
    assert m.get_captures() == [("v", b"12")]
    twin = m.fork()
    m.reset()
    assert m.get_captures() == []
    assert twin.get_captures() == [("v", b"12")]
    # draft-tree traversal leaves the matcher (and its captures) as it was
    m.accept_token(0)
    out = np.zeros((2, 1), dtype=np.int32)
    m.traverse_draft_tree(
        np.array([1, -1]), np.array([-1, -1]), np.array([0, 2], dtype=np.int64), out
    )
    assert m.accept_token(2) and m.accept_token(3)
    assert m.get_captures() == [("v", b"2")]


def test_batch_accept_records_captures() -> None:
    info = TokenizerInfo(VOCAB, stop_token_ids=[4])
    compiled = GrammarCompiler(info).compile_lark('start: "a" v "b"\nv[capture]: /[0-9]+/')
    plain = GrammarCompiler(info).compile_lark('start: "a" "1" "b"')
    ms = [GrammarMatcher(compiled), GrammarMatcher(plain), GrammarMatcher(compiled)]
    for tokens in ([0, 0, 0], [5, 1, 2], [3, 3, 1]):
        BatchGrammarMatcher.batch_accept_token(ms, tokens)
    assert ms[0].get_captures() == [("v", b"12")]
    assert ms[1].get_captures() == []
    assert ms[2].get_captures() == [("v", b"21")]
    BatchGrammarMatcher.batch_accept_string([ms[2]], ["b"])
    assert ms[2].get_captures() == [("v", b"21")] and ms[2].is_completed()


def test_ebnf_capture_attributes() -> None:
    grammar = Grammar.from_ebnf('root ::= "a" v "b"\nv[capture="num"] ::= [0-9]+')
    assert 'v[capture="num"] ::=' in str(grammar)
    m = _matcher(grammar)
    assert m.accept_string("a7b") and m.get_captures() == [("num", b"7")]
    bare = Grammar.from_ebnf('root ::= v\nv[capture] ::= "q"')
    m = _matcher(bare)
    assert m.accept_string("q") and m.get_captures() == [("v", b"q")]
    with pytest.raises(TypeError, match="deduplicate must be a bool"):
        m.get_captures(deduplicate="yes")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "source, fragment",
    [
        ('root ::= v\nv[capture=""] ::= "q"', "capture name must not be empty"),
        ('root ::= v\nv[capture="a b"] ::= "q"', "capture name must only contain"),
        ("root ::= v\nv[capture=x] ::= \"q\"", "expected string literal after capture="),
        ('root ::= v\nv[stop_capture="m"] ::= "q"', "stop_capture requires a capture_hidden"),
        ('root ::= v\nv[capture_hidden_stop_bytes=x] ::= "q"', "needs a non-negative integer"),
        ('root ::= v\nv[capture_hidden_stop_text=3] ::= "q"', "needs a non-empty JSON string"),
        ('root ::= v\nv[capture_hidden_stop_bytes=1, capture_hidden_suffix_bytes=1] ::= "q"',
         "at most one capture_hidden"),
    ],
)  # fmt: skip
def test_ebnf_capture_attribute_errors(source: str, fragment: str) -> None:
    with pytest.raises(GrammarSyntaxError, match=fragment):
        Grammar.from_ebnf(source)


@pytest.mark.parametrize("attribute", ["suffix", "stop"])
@pytest.mark.parametrize(
    "marker, body, extra, text, inner, mark",
    [
        ("/!!+/", "/[a-z]*/", "", "ab!!", b"ab", b"!!"),
        ("/b?a/", '"b"', "", "ba", b"b", b"a"),  # "ba" as the marker would leave no body
        ("/x?/", '"a"', "", "a", b"a", b""),
        ("END", "/[a-z]+/", '\nEND: /!!+/ | "??"', "ab??", b"ab", b"??"),
    ],
)
def test_markers_of_several_lengths_split_each_completion(
    attribute: str, marker: str, body: str, extra: str, text: str, inner: bytes, mark: bytes
) -> None:
    # the marker is the shortest end of the completion it matches while the body matches
    # the rest; this survives printing (the two automata are rules of the grammar)
    source = (
        f'start[capture="o"]: r "z"\n'
        f'r[capture="i", {attribute}={marker}, stop_capture="m"]: {body}{extra}'
    )
    grammar = Grammar.from_lark(source)
    outer = (inner if attribute == "stop" else text.encode()) + b"z"
    for candidate in (grammar, Grammar.from_ebnf(str(grammar))):
        m = _matcher(candidate)
        assert m.accept_string(text + "z")
        assert m.get_captures() == [("m", mark), ("i", inner), ("o", outer)]
