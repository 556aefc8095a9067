"""Lark grammars: ``Grammar.from_lark`` and ``GrammarCompiler.compile_lark``.

The accepted subset and its meaning follow xgrammar 0.2.8; every acceptance case and
every refused text is also checked against xgrammar (the oracle), and several grammars
walk the DeepSeek-V4 vocabulary with masks compared bit for bit. Special tokens
(``<|eot|>``, ``<[ids]>``) are token-id elements, looked up in the vocabulary when the
grammar is compiled (xgrammar needs the tokenizer already in ``from_lark``). Deliberate
difference: ``max_chars`` bounds the whole rule (see test_ebnf_macros.py).
"""

from __future__ import annotations

import json

import pytest
from schema_matching import acceptance_tests, accepts, assert_lark_error
from xgrammar_diff import compare_source

from treegram import (
    Grammar,
    GrammarCompiler,
    GrammarError,
    GrammarMatcher,
    GrammarSyntaxError,
    TokenizerInfo,
)
from treegram.errors import ArgumentTypeError
from treegram.testing import _is_grammar_accept_string

# (lark, accepted, rejected)
CASES = [
    ('start: "a" | "b"', ["a", "b"], ["", "ab", "c"]),
    ('start: a\na: "x" b?\nb: "y"', ["x", "xy"], ["y", "xyy"]),
    ("start: A\nA: \"x\"+", ["x", "xxx"], [""]),
    ('?start: x\n!x: "q" -> alias', ["q"], ["x"]),
    ('start: "ab" "cd"', ["abcd"], ["ab cd"]),
    ('start: [ "a" ] "b"', ["ab", "b"], ["a"]),
    ('start: ("a" | "b")* "c"', ["c", "abac"], ["ab"]),
    ('start: "a"~3', ["aaa"], ["aa", "aaaa"]),
    ('start: ("a" "b")~1..2 "c" ~ 0', ["ab", "abab"], ["", "ababab", "abc"]),
    ('start: "a".."c" "é".."ü"', ["bö"], ["dö", "bé!"]),
    ('start: "aB"i "c"', ["abc", "ABc", "Abc"], ["abC"]),
    ('start: "\\u00e9\\n\\"\\/" "\\ud83d\\ude00"', ['é\n"/😀'], ["é"]),
    ('start: ""\n  | "x"', ["", "x"], ["xx"]),
    ("start:\n  | \"a\" // comment\n\n  # another\n  | \"b\"", ["", "a", "b"], ["ab"]),
    # regexes: '.' excludes \n unless s; i folds ASCII letters
    ("start: /a.b/", ["axb", "a好b"], ["a\nb"]),
    ("start: /a.b/s", ["a\nb"], ["ab"]),
    ("start: /a.b/i", ["AxB"], ["A\nB"]),
    ("start: /[a-c]+\\d/iu", ["aBc1", "C9"], ["d1", "a"]),
    ("start: /a\\/b|c/", ["a/b", "c"], ["a\\/b"]),
    # %ignore: after each literal, regex, range and terminal in rules, not inside terminals
    ('start: "ab" "cd"\n%ignore " "', ["abcd", "ab cd", "ab  cd  "], [" abcd", "a b"]),
    ('start: x "b" X\nx: "a"\nX: "c" "d"\n%ignore " "', ["a b cd ", "abcd"], ["abc d", " ab"]),
    (
        'start: A B\nA: "a"\nB: /[0-9]+/\n%ignore /[ \\t]+/\n%ignore "#"',
        ["a 12", "a#\t#1 "],
        ["a1 2"],
    ),
    ('%import common.WS\nstart: "a" "b"\n%ignore WS', ["a b", "a\n\tb\r\n"], ["\na b"]),
    # _ab is a rule (its "z" takes the ignore), Abc a terminal
    ('start: Abc _ab\nAbc: "y"\n_ab: "z"\n%ignore " "', ["y z", "yz", "yz  "], [" yz"]),
    # %import common
    ("%import common.NUMBER\nstart: NUMBER", ["12", "1.5", ".5", "1e5", "1.E-3"], ["-1", "e5"]),
    ("%import common (INT, WORD)\nstart: INT WORD", ["12ab"], ["12", "ab"]),
    ("%import common.SIGNED_NUMBER -> N\nstart: N", ["-1", "+2.5e3"], ["--1"]),
    ("%import common.ESCAPED_STRING\nstart: ESCAPED_STRING", ['"a\\"b"', '""'], ['"a"b"']),
    ("%import common.C_COMMENT\nstart: C_COMMENT", ["/* x */", "/***/"], ["/* */ */"]),
    ("%import common.CNAME\nstart: CNAME", ["_a1"], ["1a"]),
    ("%import common.NEWLINE\nstart: NEWLINE", ["\n", "\r\n\n"], ["\r"]),
    # %json and named grammars
    ('start: "v=" %json {"type": "integer", "minimum": 0}', ["v=0", "v=17"], ["v=-1", "v=1.5"]),
    ('start: "a" x\nx: %json {"type": "array", "items": {"type": "boolean"}} | "c"',
     ["ac", "a[true, false]", "a[]"], ["a[1]"]),
    ('start: x\nx[capture="n"]: "a"+', ["aa"], [""]),
    ('start: x "z"\nx[lazy]: "a" | "ab"', ["az"], ["abz"]),
    ('start: x "z"\nx[lazy]: "a"+\n%ignore " "', ["az", "a z"], ["aaz"]),
    ('start: x "z"\nx[max_chars=3]: y+\ny: "a" | "bc"', ["abcz", "aaz"], ["abcaz", "z"]),
    # {n}, {n,}, {,m}, {n,m} repetitions (on literals, groups, terminals and rules)
    ('start: "a"{2}', ["aa"], ["", "a", "aaa"]),
    ('start: "a"{2,4}', ["aa", "aaa", "aaaa"], ["", "a", "aaaaa"]),
    ('start: "a"{2,}', ["aa", "aaaaaa"], ["", "a"]),
    ('start: "a"{,2}', ["", "a", "aa"], ["aaa"]),
    ('start: "a"{0} "b" { 0 , 0 }', [""], ["a", "b"]),
    ('start: ("a" | "bc"){2,3}', ["aa", "abc", "bcbcbc"], ["a", "aaaa"]),
    ('start: ITEM{2,3}\nITEM: "x" | "y"\n%ignore " "', ["xy", "x y y "], ["x", "xxxx"]),
    ('start: item{2,3}\nitem: "x" | "(" item ")"', ["xx", "x(x)", "(x)(x)(x)"], ["x", "xxxx"]),
    ('start: A\nA: "ab"{1,2}', ["ab", "abab"], ["", "ababab"]),
    # nested %lark grammars: their own namespace, start and %ignore
    ('start: item %lark {\n  start: item\n  item: "b"\n} item\nitem: "a"', ["aba"], ["aaa", "abb"]),
    ('start: %lark { start: "a" | "b" } %lark { start: "1" | "2" }', ["a1", "b2"], ["", "a", "1a"]),
    (
        'start: "[" %lark {\n %import common.WS\n %ignore WS\n'
        ' start: item ":" %json {"type":"integer"} // } in a comment\n'
        ' item: "x" | "(" item ")" | /[}]/\n} "]"',
        ["[x:1]", "[(x) : -2]", "[}:3]"],
        ["[():1]", "[x 1]"],
    ),
    # temperature does not change the language
    ('start: x "z"\nx[temperature=0.5]: "a"+\n%ignore " "', ["aaz", "aa z"], ["a az"]),
]  # fmt: skip


test_acceptance, test_acceptance_matches_xgrammar = acceptance_tests(CASES, "lark")


# (lark, message fragment, line, column); xgrammar refuses each of them too.
ERRORS = [
    ('root: "q"', "no start rule found", 1, 1),
    ('start: "a"\nstart: "b"', "duplicate rule or terminal 'start'", 2, 1),
    ('%import common.INT\nINT: "x"\nstart: INT', "duplicate rule or terminal 'INT'", 2, 1),
    ("start: undefined", "unknown name 'undefined'", 1, 8),
    ('start: A\nA: b\nb: "x"', "terminal 'A' cannot reference rule 'b'", 2, 1),
    ('start: A\nA: B "a"\nB: A | "b"', "circular reference in terminal", 2, 1),
    ('start: "a"\n%ignore x\nx: "b"', "terminal cannot reference rule 'x'", 2, 9),
    ('start.2: "q"', "priorities are not supported", 1, 6),
    ('start: X\nX.2: "q"', "priorities are not supported", 2, 2),
    ("start: x\nx{a}: a", "templates are not supported", 2, 2),
    ('start: "a"\n%declare X', "directive %declare is not supported", 2, 1),
    ('start: "a"\n%override start: "b"', "directive %override is not supported", 2, 1),
    ("%import foo.BAR\nstart: BAR", "unknown common import 'foo.BAR'", 1, 1),
    ("%import common.FOO\nstart: FOO", "unknown common import 'common.FOO'", 1, 1),
    ("start: 'a'", "unexpected character", 1, 8),
    ('start: "\\x41"', "invalid string literal", 1, 8),
    ('start: "a\tb"', "invalid string literal", 1, 8),
    ('start: "\\ud83d"', "invalid string literal", 1, 8),
    ('start: "ab', "unterminated string literal", 1, 8),
    ('start: "é"i', "ASCII characters only", 1, 8),
    ('start: "a"*~3', "expected grammar expression", 1, 12),
    ('start: "a"**', "expected grammar expression", 1, 12),
    ('start: "a"~3..2', "repetition end must be greater than or equal", 1, 8),
    ('start: "a"~99999999999', "invalid repetition count", 1, 12),
    ('start: "a"{3,2}', "repetition end must be greater than or equal", 1, 8),
    ('start: "a"{-1,}', "invalid repetition count", 1, 12),
    ('start: "a"{999999999999999999999}', "invalid repetition count", 1, 12),
    ('start: "a"{2', "expected '}' to close the repetition", 1, 13),
    ('start: "a"{}', "expected a repetition count", 1, 8),
    ('start: "a"{2}*', "expected grammar expression", 1, 14),
    ('start: %lark { item: "a" }', "failed to compile nested Lark grammar", 1, 8),
    ('start: TOKEN\nTOKEN: %lark { start: "a" }', "%lark cannot be used in terminals", 2, 8),
    ('start: %lark { start: "a" ', "unterminated %lark block", 1, 8),
    ('start: foo{x}\nfoo: "a"', "templates are not supported", 1, 8),
    ('start: x\nx[temperature=-1]: "a"', "temperature must be a finite non-negative", 2, 15),
    ('start: x\nx[temperature=q]: "a"', "expected a number after temperature=", 2, 15),
    ('start: x\nx[temperature=0.5]: "a" y\ny: "b"', "temperature applies to rules made", 2, 25),
    ('start: "ab".."c"', "endpoints must be one character", 1, 8),
    ('start: "c".."a"', "start must not exceed end", 1, 8),
    ('start: "A"i.."C"', "flags are not allowed on character ranges", 1, 8),
    ("start: /a/x", "regular-expression flag 'x' is not supported", 1, 8),
    ("start: /(?i)ab/", "failed to compile regular expression", 1, 8),
    ("start: /(?=a)a/", "lookahead assertion", 1, 8),
    ('start: ("a"\n "b")', "expected ')' after group", 1, 12),
    ('start: ["a"\n "b"]', "expected ']' after optional group", 1, 12),
    ('start: "a"\n   "b"', "expected rule or terminal name", 2, 4),
    ('start: "a" "b" -> foo "c"', "expected end of grammar item", 1, 23),
    ('start: x\nx[foo]: "a"', "rule attribute 'foo' is not supported", 2, 3),
    ('start: X\nX[capture]: "a"', "attributes are only supported on rules", 2, 2),
    ('start: x\nx[max_chars=q]: "a"', "expected an integer after max_chars=", 2, 13),
    ('start: x\nx[lazy]: "a" x | "b"', "terminal cannot reference rule 'x'", 2, 14),
    ('start: x\nx[lazy]: "a" y\ny: "b"', "terminal cannot reference rule 'y'", 2, 14),
    ("start: %json {bad", "failed to parse JSON value after %json", 1, 8),
    ('start: X\nX: %json {"type": "integer"}', "%json cannot be used in terminals", 2, 4),
    ("start: @sub", "unknown named grammar '@sub'", 1, 8),
]


@pytest.mark.parametrize("source, fragment, line, column", ERRORS, ids=[e[0] for e in ERRORS])
def test_errors(source: str, fragment: str, line: int, column: int) -> None:
    assert_lark_error(source, fragment, line, column)


def test_tokenizer_info_is_accepted_and_checked() -> None:
    from treegram import TokenizerInfo
    from treegram.testing import _is_grammar_accept_string

    info = TokenizerInfo(["a", "b"])
    grammar = Grammar.from_lark('start: "a"+', tokenizer_info=info)
    assert _is_grammar_accept_string(grammar, "aa")
    assert not _is_grammar_accept_string(grammar, "b")
    with pytest.raises(TypeError, match="tokenizer_info must be a TokenizerInfo or None"):
        Grammar.from_lark('start: "a"', tokenizer_info="vocab")  # type: ignore[arg-type]
    # a named special token must be a token of the vocabulary given (located error) ...
    with pytest.raises(GrammarSyntaxError, match=r"column 8: unknown special token <\|eot\|>"):
        Grammar.from_lark("start: <|eot|>", tokenizer_info=info)
    # ... and of the vocabulary it is compiled for (without a tokenizer_info, only then)
    eot = Grammar.from_lark("start: <|eot|>")
    with pytest.raises(GrammarError, match=r"unknown special token <\|eot\|>: no token"):
        GrammarCompiler(info).compile_grammar(eot)


@pytest.mark.parametrize("source", [e[0] for e in ERRORS])
def test_errors_match_xgrammar(source: str) -> None:
    xgr = pytest.importorskip("xgrammar")
    with pytest.raises(RuntimeError, match="Lark error"):
        xgr.Grammar.from_lark(source)


SPECIAL_TOKEN_CASES = [
    # (grammar, vocabulary, stop ids, accepted token sequences, rejected ones): xgrammar's
    ("start: <[0,2]> | <|tool|>", ["a", "<|tool|>", "b", "</s>"], [3], [[0], [1], [2]],
     [[3], [0, 1], []]),
    ("start: <[0-2,1-3,3]>", list("abcde"), None, [[0], [1], [2], [3]], [[4]]),
    ("start: <[^1,3]>", list("abcde"), None, [[0], [2], [4]], [[1], [3]]),
    ("start: <[*]>", list("abcde"), None, [[0], [1], [2], [3], [4]], []),
    ("start: <[0]> <[2-3]>", list("abcde"), None, [[0, 2], [0, 3]], [[0], [2, 0]]),
    ("start: <dup>", ["<dup>", "x", "<dup>", "dup", "<other>"], None, [[0], [2]],
     [[1], [3], [4]]),
    ('start: <|tool|> "x"', ["<|tool|>", "x", "y"], None, [[0, 1]], [[0], [0, 2], [1]]),
]  # fmt: skip


TOKEN_DISPATCH = r"""
start: call* tail
tail: TEXT
call: TEXT <|call|> "x" "</call>"
TEXT: /(\n|.)*/
"""
SPECIAL_TOKEN_CASES.append(
    # dynamic dispatch on a special token reads whole tokens: any token but the trigger,
    # or the trigger and its tool (so the trigger never stands alone)
    (TOKEN_DISPATCH, ["plain", "<|call|>", "x", "</call>"], None,
     [[0], [1, 2, 3], [0, 1, 2, 3, 0, 0]], [[1], [1, 3], [1, 2]])
)  # fmt: skip


def test_dynamic_dispatch_cannot_mix_string_and_token_triggers() -> None:
    source = (
        'start: (foo | bar)* tail\ntail: TEXT\nfoo_head[lazy]: TEXT "<foo>"\nfoo: foo_head "x"\n'
        'bar: TEXT <|bar|> "x"\nTEXT: /(\\n|.)*/'
    )
    with pytest.raises(GrammarSyntaxError, match="cannot mix string and token triggers"):
        Grammar.from_lark(source)


@pytest.mark.parametrize("case", SPECIAL_TOKEN_CASES, ids=[c[0][:40] for c in SPECIAL_TOKEN_CASES])
def test_special_tokens_read_whole_tokens(case) -> None:
    source, vocab, stops, accepted, rejected = case
    info = TokenizerInfo(vocab, stop_token_ids=stops)
    compiled = GrammarCompiler(info).compile_lark(source)
    for tokens, want in [*((t, True) for t in accepted), *((t, False) for t in rejected)]:
        m = GrammarMatcher(compiled, terminate_without_stop_token=True)
        got = all(m.accept_token(t) for t in tokens) and m.is_completed()
        assert got == want, (source, tokens)


def test_named_grammar_inside_nested_lark() -> None:
    from treegram.testing import _is_grammar_accept_string

    value = Grammar.from_regex("[0-9]+")
    grammar = Grammar.from_lark(
        'start: "outer:" %lark { start: "inner:" @value }', named_grammars={"value": value}
    )
    for text, accepted in (("outer:inner:12", True), ("inner:1", False), ("outer:1", False)):
        assert _is_grammar_accept_string(grammar, text) == accepted


def test_named_grammars(compiler) -> None:
    named = {"num": Grammar.from_ebnf("root ::= [0-9]+"), "b": 'start: B+\nB: "b"\n%ignore " "'}
    compiled = compiler.compile_lark('start: "a" @num "," @b\n%ignore " "', named_grammars=named)
    assert accepts(compiled, "a 12 , b b")
    assert not accepts(compiled, "a 1 2,b")
    with pytest.raises(
        GrammarSyntaxError, match="circular named grammar reference: @s -> @t -> @s"
    ):
        Grammar.from_lark("start: @s", named_grammars={"s": "start: @t", "t": "start: @s"})
    with pytest.raises(GrammarSyntaxError, match="named grammars cannot be used in terminals"):
        Grammar.from_lark("start: X\nX: @s", named_grammars={"s": 'start: "a"'})
    for call in (compiler.compile_lark, Grammar.from_lark):
        with pytest.raises(ArgumentTypeError, match="values must be Grammar instances or Lark"):
            call("start: @s", named_grammars={"s": 3})
        with pytest.raises(ArgumentTypeError, match="named_grammars must be a dictionary"):
            call("start: @s", named_grammars=[("s", 'start: "a"')])
        with pytest.raises(ArgumentTypeError, match="named_grammars names must be strings"):
            call("start: @s", named_grammars={1: 'start: "a"'})
        with pytest.raises(GrammarError, match="Invalid named grammar name 'a b'"):
            call("start: @s", named_grammars={"a b": 'start: "a"'})
    # names may hold '-', as @name references do
    dashed = Grammar.from_lark("start: @my-item", named_grammars={"my-item": 'start: "q"'})
    assert _is_grammar_accept_string(dashed, "q")


def test_helper_names_do_not_clash(compiler) -> None:
    # user rules named like the helpers the translation adds
    source = (
        'start: lark_ignore json_root "x" %json {"type": "integer"}\n'
        'lark_ignore: "i"\njson_root: "j"\n%ignore " "'
    )
    compiled = compiler.compile_lark(source)
    assert accepts(compiled, "ij x 12 ")
    assert accepts(compiled, "ijx1")
    assert not accepts(compiled, "ijx")
    assert not accepts(compiled, " ijx1")


def test_compile_lark_is_cached_and_checks_types(compiler) -> None:
    a = compiler.compile_lark('start: "a"+')
    assert compiler.compile_lark('start: "a"+') is a
    assert compiler.compile_lark('start: "a"+', named_grammars={"x": 'start: "b"'}) is not a
    with pytest.raises(GrammarError, match="lark text must be a str"):
        compiler.compile_lark(b'start: "a"')  # type: ignore[arg-type]
    with pytest.raises(GrammarError, match="lark text must be a str"):
        Grammar.from_lark(None)  # type: ignore[arg-type]


def test_lark_grammar_prints_and_parses_back() -> None:
    g = Grammar.from_lark('start: x+ /[0-9]{2}/i\nx: "a"i | %json {"type": "boolean"}\n%ignore " "')
    # Lark's start is the root rule 'root', as in xgrammar, so the printed text parses back
    # with from_ebnf's default root name; a user rule named 'root' moves aside
    assert Grammar.from_ebnf(g.to_ebnf()) == g
    clash = Grammar.from_lark('start: root "b"\nroot: "a"')
    assert clash.root_rule_name == "root"
    assert _is_grammar_accept_string(Grammar.from_ebnf(clash.to_ebnf()), "ab")


DIFFERENTIAL = {
    "calculator": r"""
?start: sum
?sum: product | sum "+" product -> add | sum "-" product -> sub
?product: atom | product "*" atom | product "/" atom
?atom: NUMBER -> number | "-" atom | NAME | "(" sum ")"
NAME: /[a-z_][a-z0-9_]*/
%import common.NUMBER
%import common.WS_INLINE
%ignore WS_INLINE
""",
    "json_like": r"""
start: value
?value: object | array | ESCAPED_STRING | SIGNED_NUMBER | "true" | "false" | "null"
array: "[" [value ("," value)*] "]"
object: "{" [pair ("," pair)*] "}"
pair: ESCAPED_STRING ":" value
%import common.ESCAPED_STRING
%import common.SIGNED_NUMBER
%import common.WS
%ignore WS
""",
    "tool_call": 'start: "<tool>" NAME "</tool>" args\nargs: %json '
    + json.dumps(
        {
            "type": "object",
            "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
            "required": ["city"],
        }
    )
    + "\nNAME: /[A-Za-z_]\\w{0,15}/\n",
    "regex_flags_and_ranges": r"""
start: header ("\n" line)~1..3
header: "ID:"i /[a-f0-9]{4,6}/i
line: "a".."f" ~ 2 /.{1,5}/ | /x.y/s
""",
}


@pytest.mark.parametrize("name", list(DIFFERENTIAL))
def test_masks_match_xgrammar(infos, name: str) -> None:
    xgr = pytest.importorskip("xgrammar")
    compare_source(infos, xgr, "compile_lark", DIFFERENTIAL[name], name, steps=200)


def test_batch_and_draft_tree_apis(compiler) -> None:
    # A Lark grammar and a TagDispatch grammar run through the batch and draft-tree APIs
    # like any other: rows equal the single-matcher masks step by step.
    import numpy as np

    from treegram import BatchGrammarMatcher, GrammarMatcher

    lark = compiler.compile_lark('start: "a" "b"+\n%ignore " "')
    tags = compiler.compile_grammar('root ::= TagDispatch(("<t>", r))\nr ::= "1" | "22"')
    words = (b"a b", b"x<t>2")
    width = (compiler.tokenizer_info.vocab_size + 31) // 32

    def single_masks(compiled, text: bytes) -> np.ndarray:
        m = GrammarMatcher(compiled)
        rows = np.zeros((len(text) + 1, width), dtype=np.int32)
        m.fill_next_token_bitmask(rows, 0)
        for i, byte in enumerate(text):
            assert m.accept_token(byte)
            m.fill_next_token_bitmask(rows, i + 1)
        return rows

    expected = [single_masks(c, w) for c, w in zip((lark, tags), words, strict=True)]
    assert all(row.any() for rows in expected for row in rows)

    matchers = [GrammarMatcher(lark), GrammarMatcher(tags)]
    batch = np.zeros((2, width), dtype=np.int32)
    BatchGrammarMatcher().batch_fill_next_token_bitmask(matchers, batch)
    assert np.array_equal(batch, np.stack([expected[0][0], expected[1][0]]))

    for compiled, text, rows in zip((lark, tags), words, expected, strict=True):
        m = GrammarMatcher(compiled)
        # a chain whose root node is the first token, already accepted (the convention)
        assert m.accept_token(text[0])
        n = len(text)
        draft = np.array(list(text), dtype=np.int64)
        next_token = np.array([*range(1, n), -1], dtype=np.int64)
        next_sibling = np.full(n, -1, dtype=np.int64)
        out = np.zeros((n, width), dtype=np.int32)
        assert m.traverse_draft_tree(next_token, next_sibling, draft, out)
        assert np.array_equal(out, rows[1:])
