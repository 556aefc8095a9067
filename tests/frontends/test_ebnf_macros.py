"""xgrammar's EBNF macros ``Regex(...)``, ``Substring(...)`` and ``TagDispatch(...)``, and
its rule attributes ``[lazy]`` and ``[max_chars=N]``.

Every acceptance case is also checked against xgrammar 0.2.8 (the oracle), and a few
grammars walk the DeepSeek-V4 vocabulary with masks compared bit for bit. Deliberate
differences: xgrammar drops lookahead assertions inside ``Regex`` (``Regex("a(?=b)c")``
accepts ``"ac"``); treegram refuses them, as ``Grammar.from_regex`` does. xgrammar's
``TagDispatch`` free text (and a lazy rule's text) is any byte sequence, so it allows
tokens that are not UTF-8 text (a lone continuation byte); treegram's grammars are over
text and do not, so those masks are compared bit for bit on the tokens that are UTF-8
text.
"""

from __future__ import annotations

import pytest
from schema_matching import acceptance_tests, accepts
from xgrammar_diff import compare_source

from treegram import Grammar, GrammarSyntaxError, UndefinedRuleError
from treegram.grammar import Bytes, Choice, RuleRef, parse_ebnf

# (grammar, accepted, rejected)
CASES = [
    # Regex: the pattern in full, inside any EBNF context
    ('root ::= "<" Regex("[0-9]{2,3}") ">"', ["<12>", "<123>"], ["<1>", "<1234>", "12"]),
    ('root ::= Regex("a|bc") | "z"', ["a", "bc", "z"], ["", "b", "az"]),
    ('root ::= r "z"\nr ::= Regex("(ab){0,3}")', ["z", "abz", "abababz"], ["ababababz", "az"]),
    # without flags '.' is any code point; with flags it excludes '\n' unless 's'
    ('root ::= Regex("a.b")', ["a\nb", "a.b", "a好b"], ["ab"]),
    ('root ::= Regex("a.b", flags="")', ["a.b", "a好b"], ["a\nb"]),
    ('root ::= Regex("a.b", flags="u")', ["a😀b"], ["a\nb"]),
    ('root ::= Regex("a.b", flags="s")', ["a\nb"], ["ab"]),
    # i folds ASCII letters only, in literals, ranges, escapes and negated classes
    ('root ::= Regex("ab[c-e]", flags="i")', ["AbD", "abc", "ABE"], ["abf", "ABF"]),
    ('root ::= Regex("(?i)[^k]x")', ["ax", "AX"], ["kx", "Kx"]),
    ('root ::= Regex("(?i)é[k-m]")', ["éK", "él"], ["ÉK"]),
    ('root ::= Regex("Σ", flags="i")', ["Σ"], ["σ"]),
    ('root ::= Regex("(?i)a.b")', ["A\nB"], ["ab"]),
    # json_string: only what a JSON string holds without escapes
    ('root ::= Regex("[^x]+", json_string=true)', ["ab", "é\x7f"], ['a"', "a\\", "a\tb", "x"]),
    ('root ::= Regex("a\\"b|c", json_string=true)', ["c"], ['a"b']),
    ('root ::= "(" Regex("\\"", json_string=true)? ")"', ["()"], ['(")']),
    ('root ::= Regex("a.b", flags="is", json_string=true)', ["A.B"], ["a\nb", 'a"b']),
    # Substring: a run of consecutive chunks, or nothing
    ('root ::= Substring("abc", "de", "fg")', ["", "abc", "de", "abcde", "defg", "abcdefg"],
     ["ab", "cde", "abcfg", "deabc"]),
    ('root ::= "x" Substring("ab", "cd") "y"', ["xy", "xaby", "xabcdy"], ["xbcy", "xcdaby"]),
    ('root ::= Substring("a", "", "b")', ["", "a", "b", "ab"], ["ba", "aa"]),
    ('root ::= Substring("你好", "世界")', ["你好世界", "世界"], ["你", "世界你好"]),
    ("root ::= Substring()", [""], ["a"]),
    ('root ::= Substring(\n  "ab", # comment\n  "c"\n)', ["abc", "c"], ["bc"]),
    # TagDispatch: free text; a tag calls its rule, then free text again (or the end)
    ('root ::= TagDispatch(("<a>", ra), ("<b>", rb))\nra ::= "1" "</a>"\nrb ::= [0-9]+ "."',
     ["", "hi", "x<a>1</a>y<b>22.", "<", "<a", "好<b>3.<b>4."], ["<a>", "<a>2</a>", "<b>."]),
    ('root ::= TagDispatch(("t", r), loop_after_dispatch=false) "!"\nr ::= "1"*',
     ["!", "xt11!", "t!"], ["xt1x!", "xt1t!"]),
    ('root ::= TagDispatch(("go", r), excludes=("end", "</"))\nr ::= "1"',
     ["go1", "xgo1en", "e n d"], ["end", "a</", "goend", "xen</"]),
    ('root ::= body "</think>"\nbody ::= TagDispatch(excludes=("</think>"))',
     ["</think>", "a</thin</think>"], ["a</think>b</think>"]),
    # a tag that ends inside a longer tag's prefix is free text (xgrammar's semantics)
    ('root ::= TagDispatch(("abc", r1), ("b", r2))\nr1 ::= "1"\nr2 ::= "2"',
     ["abc1", "ab2", "abx", "abb2", "xb2"], ["abbx", "xbx", "abc"]),
    ('root ::= TagDispatch(("a", r1), ("a", r2))\nr1 ::= "1"\nr2 ::= "2"', ["a1", "a2"], ["a3"]),
    ('root ::= TagDispatch(("ab", r1), excludes=("b"))\nr1 ::= "1"', ["a", "c"], ["ab1", "b"]),
    # a tag that longer tags extend: its rule follows, or a longer tag goes on
    ('root ::= TagDispatch(("ab", r1), ("abc", r2))\nr1 ::= "1"\nr2 ::= "2"',
     ["ab1", "abc2", "xab1"], ["ab", "abc", "abc1", "ab2", "abx"]),
    ('root ::= TagDispatch(("a", r1), excludes=("x",))\nr1 ::= "1"', ["a1"], ["x"]),
    ("root ::= TagDispatch()", ["", "any text\n"], []),
    # rule attributes: lazy keeps the shortest matches, max_chars bounds the length
    ('root ::= r "z"\nr[lazy] ::= Substring("ab")', ["z"], ["abz"]),
    ('root ::= r "b" | r "c"\nr[lazy] ::= "a" | "ab"', ["ab", "ac"], ["abc", "abb"]),
    ('root ::= r "xy"\nr[lazy] ::= [a-z]+', ["axy"], ["abxy", "axxy"]),
    ('root ::= s\ns[max_chars=2] ::= Substring("a", "b", "c")', ["", "ab", "bc"], ["abc"]),
    ('root ::= s s\ns[max_chars=1] ::= [a-z]*', ["", "ab"], ["abc"]),
    ('root ::= "<" TagDispatch(("[", root)) ">"*', ["<a[<b>c>", "<>"], ["<a[b>"]),
]  # fmt: skip


test_acceptance, test_acceptance_matches_xgrammar = acceptance_tests(CASES, "ebnf")


def test_substring_helper_rules_avoid_user_names() -> None:
    ir = parse_ebnf('root ::= Substring("a", "b") root_substring0_x\nroot_substring0_x ::= "z"')
    names = [r.name for r in ir.rules]
    assert names == ["root", "root_substring0_x", "root_substring1_0", "root_substring1_1"]
    assert ir.rule("root_substring1_0").body.items[0] == Bytes(b"a")
    assert ir.rule("root").body.items[0] == Choice(
        (Bytes(b""), RuleRef("root_substring1_0"), RuleRef("root_substring1_1"))
    )


def test_max_chars_bounds_the_whole_rule(compiler) -> None:
    # Deliberate difference: xgrammar 0.2.8 does not count a literal alternative or the
    # text of referenced rules against max_chars (it accepts both texts below).
    compiled = compiler.compile_grammar(
        'root ::= s "z" | u\ns[max_chars=2] ::= [a-z]* | "好好好"\n'
        'u[max_chars=3] ::= t t\nt ::= "ab" | "c"'
    )
    assert not accepts(compiled, "好好好z") and not accepts(compiled, "abab")
    assert accepts(compiled, "abz") and accepts(compiled, "abc")


def test_tag_dispatch_undefined_rule_is_located() -> None:
    with pytest.raises(UndefinedRuleError, match="rule 'nope' is not defined") as info:
        parse_ebnf('root ::= "x"\n  TagDispatch(("a", nope))')
    assert (info.value.line, info.value.column) == (2, 21)


def test_macro_grammar_prints_and_parses_back() -> None:
    g = Grammar.from_ebnf(
        'root ::= Regex("[a-c]+", flags="i") Substring("x", "y") TagDispatch(("<", r))\nr ::= "1>"'
    )
    assert Grammar.from_ebnf(g.to_ebnf()) == g


@pytest.mark.parametrize(
    "source, fragment, column",
    [
        ('root ::= Regex("a(?=b)c")', "lookahead assertion", 10),
        ('root ::= Regex("(a)\\\\1")', "backreference", 10),
        ('root ::= Regex("a(?i)b")', "inline flags", 10),
        ('root ::= Regex("[")', "unclosed character class", 10),
        ('root ::= Regex("a", json_string=1)', "json_string must be true or false", 10),
        ('root ::= Regex("a", flags=true)', "flags must be a string", 10),
        ('root ::= Regex("a", flags="i", flags="s")', "'flags' is given twice", 32),
        ('root ::= Regex(flags="i", "a")', "positional argument after a named argument", 27),
        ('root ::= Regex("a" "b")', "expected ',' or ')'", 20),
        ('root ::= Substring("a"', "unclosed argument list", 19),
        ('root ::= Substring("a",)', "expected an argument after ','", 24),
        ("root ::= Substring(x)", "string arguments or key=value pairs", 20),
        ('root ::= Regex("a", json_string=yes)', "expected a string, a tuple, true, false", 33),
        ('root ::= Substring(("a"))', "only string arguments", 10),
        ('root ::= TagDispatch(("a", r, r))\nr ::= "1"', "must be a pair (tag, rule)", 10),
        ('root ::= TagDispatch(("a", "r"))', "must be a pair (tag, rule)", 10),
        ('root ::= TagDispatch(("", r))\nr ::= "1"', "Tag must be a non-empty string", 10),
        ('root ::= TagDispatch(excludes="x")', "excludes must be a tuple", 10),
        ('root ::= TagDispatch(excludes=(""))', "Exclude must be a non-empty string", 10),
        ('root ::= TagDispatch(("ab", r), excludes=("a"))\nr ::= "1"', "must not be a prefix", 10),
        ("root ::= TagDispatch(loop_after_dispatch=1)", "must be a boolean literal", 10),
        ("root ::= TagDispatch(stop=true)", "Unknown named argument for TagDispatch: stop", 10),
        ('root ::= TagDispatch(("a", r) "b")', "expected ',' or ')'", 31),
        ('root ::= "x" (= TagDispatch(("a", root)))', "not allowed in a lookahead", 17),
        ('root ::= "x" (= Regex("a"))', "not allowed in a lookahead", 17),
    ],
)
def test_errors(source: str, fragment: str, column: int) -> None:
    with pytest.raises(GrammarSyntaxError) as info:
        parse_ebnf(source)
    assert fragment in str(info.value)
    assert isinstance(info.value, ValueError)
    assert (info.value.line, info.value.column) == (1, column)


DIFFERENTIAL = {
    "regex_flags": r"""
root ::= "id=" Regex("[a-f0-9]{4,8}", flags="i") ("; " item)*
item ::= Regex("[a-z]+=\\d{1,3}") | Regex("note:.*?!", flags="s")
""",
    "json_string_regex": r"""
root ::= "{\"k\": \"" Regex("(?i)[a-z .,\"]+", json_string=true) "\"}"
""",
    "substring": r"""
root ::= "<" Substring("The quick ", "brown fox ", "jumps over ", "the lazy dog.") ">" tail
tail ::= "" | "\n" Substring("你好", "世界", "!")
""",
    "rule_attributes": r"""
root ::= "<" name ">" body "</" name ">"
name[max_chars=6] ::= [a-z]+ ("-" [a-z0-9]+)?
body[lazy] ::= [^<]* "<" [a-z]* ";"
""",
    "tag_dispatch": r"""
root ::= TagDispatch(("<tool_call>", call), ("<think>", think), excludes=("</answer>",)) "</answer>"
call ::= "{\"name\": \"" [a-z_]+ "\"}</tool_call>"
think ::= TagDispatch(excludes=("</think>", "<tool_call>"), loop_after_dispatch=false) "</think>"
""",
    "tag_dispatch_no_loop": r"""
root ::= TagDispatch(("ab", r1), ("b", r2), ("abc", r1), loop_after_dispatch=false) "."
r1 ::= [0-9]{1,3}
r2 ::= "x" | "yz"
""",
}


@pytest.mark.parametrize("name", list(DIFFERENTIAL))
def test_masks_match_xgrammar(infos, name: str) -> None:
    xgr = pytest.importorskip("xgrammar")
    # TagDispatch's free text and a lazy rule's automaton read any byte in xgrammar and
    # UTF-8 text in treegram: compare on the tokens that are UTF-8 text (on the others
    # treegram allows a subset).
    utf8_only = name.startswith("tag_dispatch") or name == "rule_attributes"
    compare_source(
        infos, xgr, "compile_grammar", DIFFERENTIAL[name], name, steps=200, utf8_only=utf8_only
    )
