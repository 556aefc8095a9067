"""Lark: ``suffix`` / ``stop`` markers, dynamic tool-call dispatch, lazy heads,
``%regex`` substrings, ``%grammar_options`` and the errors around them.

Every acceptance case is also run through xgrammar 0.2.8 (the oracle), and two grammars
walk the DeepSeek-V4 vocabulary with masks compared bit for bit.
"""

from __future__ import annotations

import json

import pytest
from schema_matching import acceptance_tests, accepts, assert_lark_error
from xgrammar_diff import compare_source

from treegram import Grammar, GrammarSyntaxError

TEXT = "TEXT: /(\\n|.)*/"
LOOP = "start: tool* tail\ntail: TEXT\n"
TOOL_JSON = json.dumps(
    {
        "type": "object",
        "properties": {"x": {"type": "integer"}},
        "required": ["x"],
        "additionalProperties": False,
    }
)

# (lark, accepted, rejected)
CASES = [
    # suffix / stop: the rule ends at the first place its marker completes
    ('start: r "c"\nr[suffix="b"]: /[a-z]*/', ["aabc", "bc"], ["abbc", "aac", "abab", "aab"]),
    ('start: r "c"\nr[stop="b"]: /[a-z]*/', ["aabc", "bc"], ["abbc", "aac"]),
    ('start: "<" r ">"\nr[suffix=/!!+/]: /[a-z]{1,4}/', ["<a!!>", "<abcd!!>"],
     ["<!!>", "<a!>", "<a!!!>", "<abcde!!>"]),
    ('start: "<" r ">"\nr[stop=END]: /[a-z]+/\nEND: /!!+/ | "??"', ["<a!!>", "<word??>"],
     ["<a!>", "<a!!!>", "<word?>", "<word???>"]),
    ('start: r "z"\nr[suffix="END"i]: /[a-z]*/', ["abcENDz", "abcendz", "abcEnDz"],
     ["abcENz", "abcENDENDz"]),
    ('start: r "z"\nr[stop=/X.Y/s]: /[a-z]*/', ["abcX\nYz", "abcXaYz"], ["abcX\nZz", "abcXYz"]),
    ('start: "<" r ">"\nr[suffix="!"]: AB+\nAB: "a" | "b"', ["<a!>", "<ab!>"],
     ["<!>", "<ab!!>", "<a!b!>"]),
    # the marker rule is one lexeme: %ignore around it, never inside
    ('start: "<" r "b"\nr[stop=">"]: /[a-z]*/\n%ignore " "', ["<a>b", "< a> b"], ["<a a>b"]),
    ('start: r\nr[suffix="!", lazy]: /[a-z]{2,5}/', ["ab!", "abcde!"], ["a!", "abcdef!", "ab!!"]),
    # dynamic dispatch: free text; a complete trigger must be followed by a tool's rest
    (f"start: tool* tail\ntail: TEXT\ntool_head[lazy]: TEXT \"<tool_call>\"\n"
     f"tool: tool_head %json {TOOL_JSON} \"</tool_call>\"\n{TEXT}",
     ["", "plain text", "text <tool_cal and more", '<tool_call>{"x":1}</tool_call>',
      'a<tool_call>{"x":1}</tool_call>b<tool_call>{"x":2}</tool_call>c'],
     ["<tool_call>", '<tool_call>{"x":"bad"}</tool_call>', '<tool_call>{"x":1}',
      "before<tool_call>free text</tool_call>after"]),
    (f"start: (foo | bar)* tail\ntail: TEXT\nfoo_head[lazy]: TEXT \"<function\"\n"
     f"foo: foo_head \"=foo>\" /[a-z]+/ \"</function>\"\nbar_head[lazy]: TEXT \"<function\"\n"
     f"bar: bar_head \"=bar>\" /[A-Z]+/ \"</function>\"\n{TEXT}",
     ["free text", "a<function=foo>abc</function>b",
      "<function=bar>AB</function><function=foo>x</function>"],
     ["<function", "<function=baz>abc</function>", "<function=foo>ABC</function>"]),
    (f"{LOOP}head[suffix=\"<t>\"]: TEXT\ntool: head /[a-z]+/ \"</t>\"\n{TEXT}",
     ["free", "x<t>abc</t>y", "partial <"], ["<t>", "<t>123</t>", "<t>abc"]),
    (f"{LOOP}head[stop=\"<t>\"]: TEXT\ntool: head /[a-z]+/ \"</t>\"\n{TEXT}",
     ["free", "x<t>abc</t>y"], ["<t>", "<t>abc"]),
    (f"{LOOP}head[lazy]: /(\\n|.)*<call>/\ntool: head /[0-9]+/ \"</call>\"\n{TEXT}",
     ["", "partial <cal", "x<call>12</call>y"],
     ["<call>", "<call>x</call>", "x<call>12</call><call>"]),
    ("start: tool* tail\ntail: FREE\nhead[lazy]: FREE \"<call>\"\ntool: head /[0-9]+/ \"</call>\"\n"
     f"FREE: TEXT\n{TEXT}", ["free", "x<call>12</call>y"], ["<call>", "<call>12"]),
    # a tool that is its head alone, with and without %ignore
    (f'{LOOP}head[lazy]: TEXT "<t>"\ntool: head\n{TEXT}', ["", "a<t>b", "<t><t>", "<t"], []),
    (f'{LOOP}head[lazy]: TEXT "<t>"\ntool: head "x"\n%ignore " "\n{TEXT}',
     ["a<t>x", "<t>x "], ["<t>", "<t>y", "a<t> x"]),  # no %ignore right after a trigger
    # a lazy head on its own: text up to the first trigger, or text without it
    (f'start: head\nhead[lazy]: TEXT "<end>"\n{TEXT}', ["", "plain", "<end>", "plain<end>"],
     ["<end>x", "a<end>b"]),
    (f'start: r\nr[stop="<end>"]: TEXT\n{TEXT}', ["", "plain", "foo<end>"], ["foo<end>x"]),
    # %regex substrings: any run of consecutive chunks (characters), or nothing
    ('start: "A" SUB "B"\nSUB: %regex {"substring_chunks":["abc","de","fg"]}',
     ["AB", "AabcB", "AdeB", "AabcdefgB"], ["AabB", "AcdeB", "AabcfgB", "AdeabcB"]),
    ('start: %regex {"substring_chunks":["a","","b","a","b"]}', ["", "ab", "bab", "abab"],
     ["aa", "bb", "abba"]),
    ('start: %regex {"substring_chars":"a빠🙂b"}', ["", "빠🙂", "🙂b", "a빠🙂b"], ["a🙂", "빠b"]),
    ('start: %regex {"substring_chars":"a\\u0000b"}', ["", "\0", "a\0b"], ["ab", "a\0\0b"]),
    # %grammar_options: allow_initial_skip lets %ignore content come first
    ('%grammar_options {"allow_initial_skip": false}\n'
     '%grammar_options {"allow_initial_skip": true, "no_forcing": false}\n'
     '%import common.WS\n%ignore WS\nstart: "a" "b"',
     ["ab", " a b", "\n\ta\n b  "], ["a c", " xab"]),
    ('%grammar_options {"allow_initial_skip": true}\nstart: "a" "b"', ["ab"], [" ab"]),
    ('start: "[" %lark {\n  %grammar_options {"allow_initial_skip": true}\n  %ignore " "\n'
     '  start: "x"\n} "]"', ["[x]", "[ x ]"], [" [x]"]),
    # names may hold '-'
    ('start: foo-bar FOO-BAR\nfoo-bar: "a"\nFOO-BAR: "b"', ["ab"], ["", "a-b"]),
]  # fmt: skip


test_acceptance, test_acceptance_matches_xgrammar = acceptance_tests(CASES, "lark", id_length=60)


def test_helper_rules_do_not_clash_with_user_names(compiler) -> None:
    # helper rules hold a '.', which Lark names cannot; user rules named like them stay
    source = (
        'start: substring0 end %regex {"substring_chunks": ["x", "y"]}\n'
        'substring0: "s"\nend: head\nhead[lazy]: TEXT "!"\n' + TEXT
    )
    compiled = compiler.compile_lark(source)
    assert accepts(compiled, "sab!xy")
    assert accepts(compiled, "sab")
    assert not accepts(compiled, "sa!b")


def test_dispatch_and_marker_grammars_print_and_parse_back() -> None:
    from treegram.testing import _is_grammar_accept_string

    source = f'start: tool* tail\ntail: TEXT\nhead[stop="<t>"]: TEXT\ntool: head "x"\n{TEXT}'
    for text in (source, 'start: r "c"\nr[suffix=/b+/]: /[a-z]*/'):
        g = Grammar.from_lark(text)
        back = Grammar.from_ebnf(g.to_ebnf())
        for s in ("a<t>xb", "abc", "<t>", "a<t>y", "aabc"):
            assert _is_grammar_accept_string(back, s) == _is_grammar_accept_string(g, s), s


# (lark, message fragment, line, column); xgrammar refuses each at the same place.
ERRORS = [
    ('start: head\nhead[suffix=""]: TEXT\n' + TEXT, "suffix must not be empty", 2, 13),
    ('start: head\nhead[stop=""]: TEXT\n' + TEXT, "stop must not be empty", 2, 11),
    ("start: head\nhead[suffix=end]: TEXT\n" + TEXT,
     "suffix terminal name must be uppercase", 2, 13),
    ("start: head\nhead[suffix=MISSING]: TEXT\n" + TEXT, "unknown name 'MISSING'", 2, 13),
    ('start: head\nhead[suffix="x",suffix="y"]: TEXT\n' + TEXT,
     "suffix attribute is specified more than once", 2, 17),
    ('start: head\nhead[stop="x", suffix="y"]: TEXT\n' + TEXT,
     "suffix cannot be combined with stop", 2, 16),
    ('start: head\nhead[suffix="y", stop="x"]: TEXT\n' + TEXT,
     "stop cannot be combined with suffix", 2, 18),
    ('start: head\nhead[stop_capture="m"]: TEXT\n' + TEXT,
     "stop_capture requires stop or suffix", 2, 6),
    ('start: r\nr[stop="x", stop_capture=MARKER]: "a"',
     "expected string literal after stop_capture=", 2, 26),
    ('start: r\nr[stop="x", stop_capture="a b"]: "a"', "capture name must only contain", 2, 26),
    ("start: item\nitem[suffix=/end/i]: /[a-z]*/",
     "regular-expression flag 'i' is not supported with suffix or stop attributes", 2, 13),
    ('STOP[stop="x"]: /a/\nstart: STOP', "attributes are only supported on rules", 1, 2),
    ('start: r\nr[suffix="!"]: sub\nsub: /[a-z]*/', "terminal cannot reference rule 'sub'", 2, 16),
    ("start: head\nhead[lazy]: /(\\n|.)*END/",
     "lazy regex suffix is only supported on a head used by dynamic dispatch", 2, 1),
    ('start[capture=""]: "a"', "capture name must not be empty", 1, 15),
    ('start[capture="a b"]: "a"', "capture name must only contain letters, digits", 1, 15),
    ('start[capture, capture]: "a"', "capture attribute is specified more than once", 1, 16),
    ('start: x\nx[max_tokens=0]: "a"', "max_tokens must be positive", 2, 14),
    ('start[max_tokens=3, max_tokens=4]: "a"',
     "max_tokens attribute is specified more than once", 1, 21),
    ("start: tool* tail\ntail: TEXT\nh[lazy]: TEXT \"<t>\"\ntool[max_tokens=3]: h \"x\"\n" + TEXT,
     "max_tokens is not supported on rules consumed by dynamic dispatch", 4, 6),
    ("start: tool* tail\ntail: TEXT\nh[lazy]: TEXT \"<t>\"\ntool[capture]: h \"x\"\n" + TEXT,
     "capture is not supported on rules consumed by dynamic dispatch", 4, 6),
    ("start: %regex []", "%regex value must be an object", 1, 8),
    ('start: %regex {"unknown":"abc"}', "unknown field 'unknown' in %regex", 1, 8),
    ("start: %regex {}", "no fields set on %regex", 1, 8),
    ('start: %regex {"substring_chars":"a","substring_chunks":["a"]}', "only one field", 1, 8),
    ('start: %regex {"substring_chars":["a"]}', "substring_chars must be a string", 1, 8),
    ('start: %regex {"substring_chunks":["a",1]}',
     "substring_chunks must be an array of strings", 1, 8),
    ('start: %regex {"substring_words":"a b"}', "substring_words is not supported yet", 1, 8),
    ('%grammar_options {"allow_initial_skip": 1}\nstart: "a"',
     "allow_initial_skip must be a boolean", 1, 1),
    ('%grammar_options {"no_forcing": true}\nstart: "a"',
     "option 'no_forcing' is not supported", 1, 1),
    ('%grammar_options {"unknown": false}\nstart: "a"',
     "unknown %grammar_options option 'unknown'", 1, 1),
    ('%grammar_options []\nstart: "a"', "%grammar_options value must be an object", 1, 1),
    ('start::0: "a"', "parametric grammar is not supported", 1, 6),
    ("start: foo::0", "parametric grammar is not supported", 1, 11),
    ('start: "a" %if enabled', "parametric %if conditions are not supported", 1, 12),
    ('start: A & B\nA: "a"\nB: "b"', "intersection '&' is not supported", 1, 10),
    ("start: ~/[a]/", "complement '~' is not supported", 1, 8),
    ("start: -", "unexpected '-' character", 1, 8),
    ("start: !", "unexpected '!' character", 1, 8),
    ('start "a"', "expected ':' after rule name 'start'", 1, 7),
    ('start: "a" ->', "expected alias name after '->'", 1, 14),
    ("start: @", "empty grammar reference", 1, 8),
    ('start: x->y\nx-: "q"', "unexpected character '>'", 1, 10),
    ("start: %json []", "failed to compile inline JSON schema", 1, 8),
    # special tokens: malformed ones are named precisely
    ("start: <unterminated", "unterminated special token", 1, 8),
    ("start: <bad token>", "invalid special token", 1, 8),
    ("start: <[1-2-3]>", "invalid numeric special-token range", 1, 8),
    ("start: <[3-1]>", "invalid numeric special-token range", 1, 8),
    ("start: <[,]>", "empty numeric special-token range", 1, 8),
    ("start: <[^*]>", "negated wildcard special token is not supported", 1, 8),
    ("start: <[*,1]>", "wildcard cannot be mixed", 1, 8),
    ("start: <[0-1000001]>", "special-token range is too large", 1, 8),
    ("start: TOKEN\nTOKEN: <[1]>", "special tokens cannot be used in terminals", 2, 8),
    ("start: head\nhead[lazy]: TEXT <[^1]>\nTEXT: /(\\n|.)*/",
     "lazy special-token trigger cannot be negated", 2, 18),
    ("start: head\nhead[lazy]: TEXT <|t|>\nTEXT: /(\\n|.)*/",
     "lazy special-token triggers) are not supported", 2, 18),
    ('start: tool* tail\ntail: TEXT\ntool: TEXT <[^1]> "x"\nTEXT: /(\\n|.)*/',
     "dynamic special-token trigger cannot be negated", 1, 1),
    ("start: " + "(" * 2000 + '"a"' + ")" * 2000, "nested deeper than", 1, 136),
]  # fmt: skip


@pytest.mark.parametrize("source, fragment, line, column", ERRORS, ids=[e[0][:60] for e in ERRORS])
def test_errors(source: str, fragment: str, line: int, column: int) -> None:
    assert_lark_error(source, fragment, line, column)


@pytest.mark.parametrize("source", [e[0] for e in ERRORS])
def test_errors_match_xgrammar(source: str) -> None:
    xgr = pytest.importorskip("xgrammar")
    with pytest.raises(RuntimeError, match="Lark error"):
        xgr.Grammar.from_lark(source)


def test_error_shows_the_source_line_and_a_caret() -> None:
    with pytest.raises(GrammarSyntaxError) as info:
        Grammar.from_lark('# comment\r\nstart: "a"\r\nitem missing')
    lines = str(info.value).split("\n")
    assert lines[0] == "Lark error at line 3, column 6: expected ':' after rule name 'item'"
    assert lines[1:] == ["item missing", "     ^"]


def test_groups_nested_within_the_limit_parse() -> None:
    from treegram.testing import _is_grammar_accept_string

    g = Grammar.from_lark("start: " + "(" * 100 + '"a"' + ")" * 100)
    assert _is_grammar_accept_string(g, "a")


DIFFERENTIAL = {
    "dispatch": f'start: tool* tail\ntail: TEXT\ntool_head[lazy]: TEXT "<tool_call>"\n'
    f'tool: tool_head %json {TOOL_JSON} "</tool_call>"\n{TEXT}',
    "suffix": 'start: "<" r ">" r\nr[suffix=/!!+/]: /[a-z]{1,6}/',
    "lazy_head": f'start: head "1"\nhead[lazy]: TEXT "</t>"\n{TEXT}',
    "shared_trigger": f'start: (foo | bar)* tail\ntail: TEXT\nfoo_head[lazy]: TEXT "<f"\n'
    f'foo: foo_head "=a>" /[a-z]+/ "</f>"\nbar_head[stop="<f"]: TEXT\n'
    f'bar: bar_head "=b>" /[0-9]+/ "</f>"\n{TEXT}',
}


@pytest.mark.parametrize("name", list(DIFFERENTIAL))
def test_masks_match_xgrammar(infos, name: str) -> None:
    xgr = pytest.importorskip("xgrammar")
    # bit for bit, also on tokens that cut a character: free text reads bytes in both
    compare_source(infos, xgr, "compile_lark", DIFFERENTIAL[name], name, steps=120)


def test_lazy_is_kept_on_the_rule_and_printed_back() -> None:
    from treegram import GrammarCompiler, GrammarMatcher, TokenizerInfo

    grammar = Grammar.from_lark('start: "<" r ">"\nr[lazy, capture="x", max_tokens=3]: /[a-z]+/')
    printed = str(grammar)
    assert 'r[max_tokens=3, capture="x", lazy] ::= [a-z]+' in printed
    reordered = Grammar.from_ebnf(
        'root ::= "<" r ">"\nr[lazy, capture="x", max_tokens=3] ::= [a-z]+'
    )
    assert str(reordered) == printed
    for candidate in (
        Grammar.from_ebnf(printed),
        Grammar.deserialize_json(grammar.serialize_json()),
    ):
        assert candidate == grammar
        for cache in (False, True):
            compiled = GrammarCompiler(TokenizerInfo([]), cache_enabled=cache).compile_grammar(
                candidate
            )
            m = GrammarMatcher(compiled, terminate_without_stop_token=True)
            assert not m.accept_string("<ab>")
            assert m.accept_string("<a>") and m.get_captures() == [("x", b"a")]


# xgrammar accepts these; treegram refuses them, with the rule named (docs/xgrammar_compat.md,
# "max_chars"): xgrammar ignores max_chars on the rules of a dynamic dispatch (with a
# warning), and counts a token-id element's decoded text while matching, which treegram's
# max_chars (a bound on the rule's language, applied before a vocabulary is known) cannot.
REFUSED_HERE = [
    (
        'start: tool* tail\ntail: TEXT\nh[lazy]: TEXT "<t>"\ntool[max_chars=3]: h "x"\n' + TEXT,
        "max_chars is not supported on rules consumed by dynamic dispatch (rule 'tool')",
        4,
        6,
    ),
    (
        'start: tool* tail\ntail[max_chars=3]: TEXT\nh[lazy]: TEXT "<t>"\ntool: h "x"\n' + TEXT,
        "max_chars is not supported on rules consumed by dynamic dispatch (rule 'tail')",
        2,
        6,
    ),
    (
        'start[max_chars=5]: tool* tail\ntail: TEXT\nh[lazy]: TEXT "<t>"\ntool: h "x"\n' + TEXT,
        "max_chars is not supported on rules consumed by dynamic dispatch (rule 'start')",
        1,
        7,
    ),
    (
        'start: v "!"\nv[max_chars=1]: <[5]>',
        "rule 'v': lazy and max_chars need a rule that reads text, not the token-id "
        "element Token(5)",
        2,
        1,
    ),
]


@pytest.mark.parametrize(("source", "fragment", "line", "column"), REFUSED_HERE)
def test_refusals_where_xgrammar_ignores_or_overshoots(source, fragment, line, column) -> None:
    test_errors(source, fragment, line, column)
    xgr = pytest.importorskip("xgrammar")
    xgr.Grammar.from_lark(source)  # accepted there


def test_max_chars_on_a_marker_rule_bounds_the_text_and_keeps_the_marker() -> None:
    """A deliberate difference (test_max_chars.py's suffix and stop_capture tests):
    max_chars bounds the rule's whole text, its suffix or stop marker included, and the
    rule always ends with its marker. xgrammar ends a rule whose budget ran out where it
    stands, without the marker: it accepts "aa!" below and refuses "aa>!" (a marker after
    a spent budget)."""
    from treegram.testing import _is_grammar_accept_string as accepts

    for kind in ("suffix", "stop"):
        g = Grammar.from_lark(f'start: r "!"\nr[max_chars=2, {kind}=">"]: {TEXT[6:]}')
        assert accepts(g, "a>!") and accepts(g, ">!")
        assert not accepts(g, "aa!")  # no marker: xgrammar's forced close
        assert not accepts(g, "aa>!")  # three characters with the marker
