"""``str(grammar)`` of a structural tag: xgrammar 0.2.8's normal-form EBNF text.

Three properties: the text equals xgrammar's recorded text for every format treegram
renders (tests/data/xgrammar_structural_tag_text.json) and the hand-derived texts below;
it parses back with ``Grammar.from_ebnf``; and the parsed grammar accepts exactly the
strings the compiled structural tag accepts (checked on strings built from each format's
own literals, so that both outcomes occur).
"""

from __future__ import annotations

import itertools
import json
import random
from pathlib import Path

import pytest

import treegram as tg
from treegram.testing import _get_matcher_from_grammar

DATA = Path(__file__).resolve().parents[2] / "data" / "xgrammar_structural_tag_text.json"
RECORDED = json.loads(DATA.read_text(encoding="utf-8"))


def _grammar(fmt: dict) -> tg.Grammar:
    return tg.Grammar.from_structural_tag({"type": "structural_tag", "format": fmt})


def _const(value: str) -> dict:
    return {"type": "const_string", "value": value}


def _tag(begin: str, content: dict, end: str | list[str]) -> dict:
    return {"type": "tag", "begin": begin, "content": content, "end": end}


# (format, text) derived by hand from xgrammar's rules (module docstring of
# treegram/frontends/structural_tag/_text.py), for what the recorded cases leave out
DERIVED = [
    (  # escapes: xgrammar's C-style ones; \x before a hex digit would read on, so \u00hh
        _const("a\"b'?\\\n\x1b\xe9A\xe9g\uff5c\U0001f600"),
        'const_string ::= (("a\\"b\\\'\\?\\\\\\n\\e\\u00e9A\\xe9g\\uff5c\\U0001f600"))\n'
        "root ::= ((const_string))\n",
    ),
    (  # NUL is \0 (xgrammar's printer stops the literal at a NUL: a text that reads back
        # as another grammar, so here treegram prints what it compiles instead)
        _const("a\x00b"),
        'const_string ::= (("a\\0b"))\nroot ::= ((const_string))\n',
    ),
    (  # an empty constant is the empty alternative
        _const(""),
        'const_string ::= ("")\nroot ::= ((const_string))\n',
    ),
    (  # a one-element sequence still has its rule; equal formats share one rule
        {"type": "sequence", "elements": [_const("x"), _const("x")]},
        'const_string ::= (("x"))\nsequence ::= ((const_string const_string))\n'
        "root ::= ((sequence))\n",
    ),
    (  # the same any_text under two different tags: two rules (different excludes)
        {
            "type": "sequence",
            "elements": [
                _tag("<a>", {"type": "any_text"}, "</a>"),
                _tag("<b>", {"type": "any_text"}, "</b>"),
                _tag("<a>", {"type": "any_text"}, "</a>"),
            ],
        },
        'any_text ::= TagDispatch(\n  loop_after_dispatch=false,\n  excludes=("</a>")\n)\n'
        'tag ::= (("<a>" any_text "</a>"))\n'
        'any_text_1 ::= TagDispatch(\n  loop_after_dispatch=false,\n  excludes=("</b>")\n)\n'
        'tag_1 ::= (("<b>" any_text_1 "</b>"))\n'
        "sequence ::= ((tag tag_1 tag))\n"
        "root ::= ((sequence))\n",
    ),
    (  # several ends inside triggered tags: a tag_end rule at each use
        {
            "type": "triggered_tags",
            "triggers": ["<f"],
            "tags": [_tag("<f>", _const("x"), ["</f>", "<eot>"])],
            "at_least_one": True,
        },
        'const_string ::= (("x"))\n'
        'tag_end ::= (("</f>") | ("<eot>"))\n'
        'triggered_tags_group ::= ((">" const_string tag_end))\n'
        'tag_end_1 ::= (("</f>") | ("<eot>"))\n'
        'triggered_tags_first ::= (("<f>" const_string tag_end_1))\n'
        'triggered_tags_sub ::= TagDispatch(\n  ("<f", triggered_tags_group),\n'
        "  loop_after_dispatch=true,\n  excludes=()\n)\n"
        "triggered_tags ::= ((triggered_tags_first triggered_tags_sub))\n"
        "root ::= ((triggered_tags))\n",
    ),
    (  # a dispatch inside a tag: its rules' free text excludes the end, its own does not
        _tag(
            "<t>",
            {"type": "dispatch", "rules": [["call:", {"type": "any_text"}]], "loop": False},
            "</t>",
        ),
        'any_text ::= TagDispatch(\n  loop_after_dispatch=false,\n  excludes=("</t>")\n)\n'
        'tag_dispatch ::= TagDispatch(\n  ("call:", any_text),\n'
        "  loop_after_dispatch=false,\n  excludes=()\n)\n"
        'tag ::= (("<t>" tag_dispatch "</t>"))\n'
        "root ::= ((tag))\n",
    ),
]

# EBNF contents in xgrammar's normal form (each text checked against xgrammar 0.2.8); a
# character class prints its ranges sorted, where xgrammar keeps them as written
GRAMMARS = {
    'root ::= "a" ("b" | "c")* d\nd ::= [0-9]+ "x"?': (
        ["ad", "abcb0", "a9x"],
        'root_0 ::= (("a" root_1 d))\n'
        "d ::= ((d_1 d_2))\n"
        'root_1 ::= ("" | (root_1_1 root_1))\n'
        "d_1 ::= (([0-9] d_1) | ([0-9]))\n"
        'd_2 ::= ("" | ("x"))\n'
        'root_1_1 ::= (("b") | ("c"))\n',
    ),
    'root ::= "a" ("b" ("c" | "d")* | "" | "e" ("f" | "g")) "z"': (
        ["az", "abz", "abcdcz", "aegz"],
        'root_0 ::= (("a" root_3 "z"))\n'
        'root_1 ::= ("" | (root_1_1 root_1))\n'
        'root_2 ::= (("f") | ("g"))\n'
        'root_3 ::= ("" | ("b" root_1) | ("e" root_2))\n'
        'root_1_1 ::= (("c") | ("d"))\n',
    ),
    'root ::= ("a" "b")? "c"+ [x]* | ""': (
        ["", "c", "abcc", "cxx"],
        'root_0 ::= ("" | (root_1 root_2 [x]*))\n'
        'root_1 ::= ("" | ("a" "b"))\n'
        'root_2 ::= (("c" root_2) | ("c"))\n',
    ),
    'root ::= x{2,} ("b" [^a-c]){3} | [a] "\\n\\u00e9"\nx ::= "x"': (
        ["xxbdbebf", "xxxbzbzbz", "a\né"],
        'root_0 ::= ((x{2, -1} root_1{3, 3}) | ("a" "\\n\\xe9"))\n'
        'x ::= (("x"))\n'
        'root_1 ::= (("b" [^a-c]))\n',
    ),
}
for _grammar_text, (_, _rules) in GRAMMARS.items():
    DERIVED.append(
        (
            _tag("<", {"type": "grammar", "grammar": _grammar_text}, ">"),
            _rules + 'tag ::= (("<" root_0 ">"))\nroot ::= ((tag))\n',
        )
    )
# regexes (each text checked against xgrammar 0.2.8; xgrammar writes literals a character
# at a time)
REGEXES = {
    "(foo|bar)baz?": (
        ["foobaz", "barba"],
        'root_0 ::= ((root_2 "b" "a" root_1))\n'
        'root_1 ::= ("" | ("z"))\n'
        'root_2 ::= (("f" "o" "o") | ("b" "a" "r"))\n',
    ),
    "[0-9]{3}-(ab)*\\.x.y": (
        ["123-.xay", "000-abab.x\u00e9y"],
        'root_0 ::= ((root_1{3, 3} "-" root_2 "." "x" [\\0-\\U0010ffff] "y"))\n'
        "root_1 ::= (([0-9]))\n"
        'root_2 ::= ("" | ("a" "b" root_2))\n',
    ),
}
for _pattern, (_, _rules) in REGEXES.items():
    DERIVED.append((_tag("<", {"type": "regex", "pattern": _pattern}, ">"),
                    _rules + 'tag ::= (("<" root_0 ">"))\nroot ::= ((tag))\n'))  # fmt: skip
JSON_SAMPLES = {
    "number": ["0", "-1.5e3", "12", "3.25E-2"],
    "integer": ["0", "-7", "42"],
    "string": ['"a"', '"\\n\\u00e9"', '""'],
    "boolean": ["true", "false"],
    "null": ["null"],
}

# formats without a recorded or derived text that the round trip also covers
EXTRA = [
    {
        "type": "star",
        "content": {
            "type": "or",
            "elements": [_tag("<a>", {"type": "any_text", "excludes": ["!"]}, ["</a>", "."])],
        },
    },
    {
        "type": "tags_with_separator",
        "separator": ",",
        "tags": [_tag("[", {"type": "plus", "content": _const("1")}, "]")],
        "at_least_one": True,
    },
    {
        "type": "repeat",
        "min": 1,
        "max": 2,
        "content": {"type": "optional", "content": _const("ab")},
    },
    {
        "type": "or",
        "elements": [
            _tag("<j>", {"type": "json_schema", "json_schema": {"type": t}}, "</j>")
            for t in ("integer", "string", "boolean", "null")
        ],
    },
    {
        "type": "triggered_tags",
        "triggers": ["<a", "<b"],
        "tags": [_tag("<a>", _const("x"), "</a>"), _tag("<b>", {"type": "any_text"}, "</b>")],
        "excludes": ["<c"],
        "stop_after_first": True,
    },
]

RECORDED_EBNF = 'root ::= "Hello!" number\n            number ::= [0-9] | [0-9] number'
ALL_FORMATS = [c["format"] for c in RECORDED] + [f for f, _ in DERIVED] + EXTRA


@pytest.mark.parametrize("case", RECORDED, ids=[c["text"].split(" ::=")[0] for c in RECORDED])
def test_recorded_texts(case: dict) -> None:
    assert str(_grammar(case["format"])) == case["text"]


def test_recorded_texts_cover_every_rendered_format() -> None:
    kinds = set()
    for case in RECORDED:
        stack = [case["format"]]
        while stack:
            f = stack.pop()
            if isinstance(f, dict):
                kinds.add(f.get("type", "tag"))
                stack.extend(f.values())
            elif isinstance(f, list):
                stack.extend(f)
    assert {"const_string", "any_text", "sequence", "or", "tag", "triggered_tags"} <= kinds
    assert {"tags_with_separator", "optional", "plus", "star", "repeat", "dispatch"} <= kinds


@pytest.mark.parametrize("fmt, text", DERIVED, ids=[str(i) for i in range(len(DERIVED))])
def test_derived_texts(fmt: dict, text: str) -> None:
    assert str(_grammar(fmt)) == text


def test_other_contents_print_as_treegram_ebnf() -> None:
    # EBNF with macros, lookaheads or names that are not identifiers, JSON Schemas other
    # than the scalar types and the XML styles are not rendered: it prints as before
    for content in (
        {"type": "json_schema", "json_schema": {"type": "object"}},
        {"type": "json_schema", "json_schema": {"type": "integer"}, "max_whitespace_cnt": 2},
        {"type": "json_schema", "json_schema": {"type": "object"}, "style": "qwen_xml"},
        {"type": "grammar", "grammar": 'root ::= "x" Regex("[0-9]")'},
        {"type": "grammar", "grammar": 'root ::= "x" (= "<")'},
        {"type": "grammar", "grammar": 'root ::= a-b\na-b ::= "x"'},
    ):
        g = _grammar(_tag("<a>", content, "</a>"))
        assert str(g) == g.to_ebnf()
    g = tg.Grammar.from_ebnf('root ::= "a"{2, -1}')
    assert str(g) == g.to_ebnf() == 'root ::= "a"{2,}\n'


def test_text_is_not_part_of_equality() -> None:
    fmt = {"type": "optional", "content": _const("x")}
    g = _grammar(fmt)
    same = tg.Grammar.from_ir(g.ir)
    assert g == same and hash(g) == hash(same)
    assert str(same) == g.to_ebnf() != str(g)


def _pieces(fmt: object) -> list[str]:
    """The literal strings of a format (values, begins, ends, triggers, excludes...)."""
    out: list[str] = []
    stack = [fmt]
    while stack:
        f = stack.pop()
        if isinstance(f, dict):
            for key, value in f.items():
                if key in ("value", "begin", "end", "separator") and isinstance(value, str):
                    out.append(value)
                elif key in ("end", "triggers", "excludes") and isinstance(value, list):
                    out.extend(v for v in value if isinstance(v, str))
                else:
                    stack.append(value)
        elif isinstance(f, list):
            if len(f) == 2 and isinstance(f[0], str):  # a dispatch rule
                out.append(f[0])
            stack.extend(f)
    return sorted({p for p in out if p})


def _sample(fmt: dict, rng: random.Random) -> str:
    """A string that ``fmt`` accepts, as a rule (free text is "x" or "é", which no case's
    literals contain)."""
    kind = fmt.get("type", "tag")
    if kind == "const_string":
        return fmt["value"]
    if kind == "any_text":
        return rng.choice(["", "x", "éx"])
    if kind == "sequence":
        return "".join(_sample(e, rng) for e in fmt["elements"])
    if kind == "or":
        return _sample(rng.choice(fmt["elements"]), rng)
    if kind == "tag":
        end = fmt["end"] if isinstance(fmt["end"], str) else rng.choice(fmt["end"])
        return fmt["begin"] + _sample(fmt["content"], rng) + end
    if kind in ("optional", "plus", "star", "repeat"):
        lo, hi = {"optional": (0, 1), "plus": (1, 2), "star": (0, 2)}.get(kind, (0, 0))
        if kind == "repeat":
            lo = fmt["min"]
            hi = lo + 1 if fmt["max"] == -1 else min(fmt["max"], lo + 1)
        return "".join(_sample(fmt["content"], rng) for _ in range(rng.randint(lo, hi)))
    if kind == "tags_with_separator":
        n = 1 if fmt.get("at_least_one") or fmt.get("stop_after_first") else rng.randint(0, 2)
        if not fmt.get("stop_after_first"):
            n = rng.randint(n, 2)
        return fmt["separator"].join(_sample(rng.choice(fmt["tags"]), rng) for _ in range(n))
    if kind == "triggered_tags":
        first = _sample(rng.choice(fmt["tags"]), rng) if fmt.get("at_least_one") else ""
        if fmt.get("at_least_one") and fmt.get("stop_after_first"):
            return first
        return first + "x" + _sample(rng.choice(fmt["tags"]), rng)
    if kind == "json_schema":
        return rng.choice(JSON_SAMPLES[fmt["json_schema"]["type"]])
    if kind == "grammar":
        samples = {"root ::= [+\\-]?[1-9][0-9]*": ["7", "+10", "-99"]}
        samples[RECORDED_EBNF] = ["Hello!0", "Hello!123"]
        samples.update({g: v[0] for g, v in GRAMMARS.items()})
        return rng.choice(samples[fmt["grammar"]])
    if kind == "regex":
        samples = {"Hello![0-9]+": ["Hello!0", "Hello!42"], "[simple]?": ["", "m"]}
        samples.update({p: v[0] for p, v in REGEXES.items()})
        return rng.choice(samples[fmt["pattern"]])
    if kind == "dispatch":
        pattern, content = rng.choice(fmt["rules"])
        return "x" + pattern + _sample(content, rng)
    raise AssertionError(kind)


def _candidates(fmt: dict, rng: random.Random) -> list[str]:
    """Strings the format accepts, their one-character edits, and strings made of its
    literals."""
    texts = {_sample(fmt, rng) for _ in range(40)}
    for t in list(texts):
        texts.update({t[:-1], t[1:], t + "x", t + t})
    pieces = _pieces(fmt) + ["x", "é"]
    for _ in range(80):
        texts.add("".join(rng.choice(pieces) for _ in range(rng.randint(1, 6))))
    return sorted(texts)


def _accepts(matcher, text: str) -> bool:
    matcher.reset()
    return matcher.accept_string(text) and matcher.is_terminated()


@pytest.mark.parametrize("fmt", ALL_FORMATS, ids=[str(i) for i in range(len(ALL_FORMATS))])
def test_text_parses_to_the_same_language(fmt: dict) -> None:
    direct = _grammar(fmt)
    text = str(direct)
    assert text != direct.to_ebnf()  # rendered in xgrammar's form
    parsed = tg.Grammar.from_ebnf(text)
    m_direct = _get_matcher_from_grammar(direct)
    m_parsed = _get_matcher_from_grammar(parsed)
    outcomes = set()
    for s in _candidates(fmt, random.Random(len(text))):
        accepted = _accepts(m_direct, s)
        assert _accepts(m_parsed, s) == accepted, (s, text)
        outcomes.add(accepted)
    # the candidates must include accepted and rejected strings (any text rejects none)
    assert outcomes == ({True} if fmt == {"type": "any_text"} else {True, False})


def test_deep_formats_print_in_linear_time() -> None:
    fmt = _const("x")
    for _ in range(900):  # past Python's default stack
        fmt = {"type": "sequence", "elements": [fmt, _const("y")]}
    text = str(_grammar(fmt))
    assert text.startswith('const_string ::= (("x"))\nconst_string_1 ::= (("y"))\n')
    assert "sequence_1 ::= ((sequence const_string_1))\n" in text  # "y" has one rule
    assert text.endswith(
        "sequence_899 ::= ((sequence_898 const_string_1))\nroot ::= ((sequence_899))\n"
    )


JSON_EDGES = {
    "number": ["0", "-0", "01", "1.", "1.5", "1e5", "1E+5", "1e-05", "-", "+1", ".5", "1.2.3"],
    "integer": ["0", "-0", "00", "12", "-12", "1.0", "1e2", "-", "+3"],
    "string": ['"a"', '"\\u00e9"', '"\\uZZZZ"', '"\\x"', '"\t"', '"\\""', '"', '"a\\"', '"é"'],
    "boolean": ["true", "false", "True", "tru"],
    "null": ["null", "nul", "None"],
}


@pytest.mark.parametrize("kind", sorted(JSON_EDGES))
def test_json_scalar_text_has_the_schema_language(kind: str) -> None:
    # the text of a JSON scalar is xgrammar's basic rules, not treegram's own grammar of
    # the schema: both must accept the same documents, edge cases included
    direct = _grammar({"type": "json_schema", "json_schema": {"type": kind}})
    parsed = tg.Grammar.from_ebnf(str(direct))
    m_direct = _get_matcher_from_grammar(direct)
    m_parsed = _get_matcher_from_grammar(parsed)
    for s in JSON_EDGES[kind]:
        assert _accepts(m_parsed, s) == _accepts(m_direct, s), s


@pytest.mark.parametrize(
    "fmt",
    [
        {"type": "dispatch", "rules": [["tag1", _const("x")]], "excludes": ["ta"]},
        {"type": "any_text", "excludes": [""]},
        {"type": "dispatch", "rules": [["<", _const("ab")], ["<", _const("b<a")]]},
        {
            "type": "triggered_tags",
            "triggers": ["<f"],
            "tags": [_tag("<f>", _const("x"), "!")],
            "excludes": ["<"],
        },
    ],  # fmt: skip
)
def test_free_text_the_macro_refuses_prints_as_treegram_ebnf(fmt: dict) -> None:
    # TagDispatch refuses an empty exclude and one a trigger starts with (as xgrammar's
    # does), and reads a repeated trigger otherwise than the compiled free text, so this
    # free text is printed in treegram's own form, which parses back
    g = _grammar(fmt)
    assert str(g) == g.to_ebnf()
    assert tg.Grammar.from_ebnf(str(g)) == g


def _random_format(rng: random.Random, depth: int = 0) -> dict:
    """A random format tree over the alphabet "ab<" (so literals, triggers, ends and
    excludes overlap often)."""

    def word(lo: int = 1, hi: int = 3) -> str:
        return "".join(rng.choice("ab<") for _ in range(rng.randint(lo, hi)))

    def tag(begin: str = "") -> dict:
        end = word() if rng.random() < 0.7 else [word(), rng.choice(["", word()])]
        return _tag(begin or word(0, 2), _random_format(rng, depth + 1), end)

    kinds = ["const", "any"] + (
        ["seq", "or", "tag", "opt", "rep", "tws", "tt", "disp"] * (depth < 3)
    )
    kind = rng.choice(kinds)
    if kind == "const":
        return _const(word(0, 2))
    if kind == "any":
        return {"type": "any_text", "excludes": [word() for _ in range(rng.randint(0, 1))]}
    if kind in ("seq", "or"):
        elements = [_random_format(rng, depth + 1) for _ in range(rng.randint(1, 3))]
        return {"type": "sequence" if kind == "seq" else "or", "elements": elements}
    if kind == "tag":
        return tag()
    if kind == "opt":
        return {
            "type": rng.choice(["optional", "star", "plus"]),
            "content": _random_format(rng, depth + 1),
        }
    if kind == "rep":
        lo = rng.randint(0, 2)
        return {
            "type": "repeat",
            "min": lo,
            "max": rng.choice([-1, lo, lo + 1]),
            "content": _random_format(rng, depth + 1),
        }
    flags = {"at_least_one": rng.random() < 0.4, "stop_after_first": rng.random() < 0.3}
    if kind == "tws":
        tags = [tag() for _ in range(rng.randint(1, 2))]
        return {"type": "tags_with_separator", "separator": word(0, 1), "tags": tags, **flags}
    excludes = [word() for _ in range(rng.randint(0, 1))]
    if kind == "tt":
        trigger = word(1, 2)
        tags = [tag(trigger + word(0, 1)) for _ in range(rng.randint(1, 2))]
        return {
            "type": "triggered_tags",
            "triggers": [trigger],
            "tags": tags,
            "excludes": excludes,
            **flags,
        }
    rules = [[word(1, 2), _random_format(rng, depth + 1)] for _ in range(rng.randint(1, 2))]
    return {"type": "dispatch", "rules": rules, "loop": rng.random() < 0.5, "excludes": excludes}


@pytest.mark.parametrize("seed", range(4))
def test_random_formats_print_their_language(seed: int) -> None:
    rng = random.Random(seed)
    strings = ["".join(p) for n in range(6) for p in itertools.product("ab<", repeat=n)]
    rendered = 0
    while rendered < 15:
        try:
            direct = _grammar(_random_format(rng))
        except tg.GrammarError:  # an invalid random tree (a trigger without tags...)
            continue
        text = str(direct)
        if text == direct.to_ebnf():  # free text the macro refuses
            continue
        rendered += 1
        m_direct = _get_matcher_from_grammar(direct)
        m_parsed = _get_matcher_from_grammar(tg.Grammar.from_ebnf(text))
        for s in strings:
            assert _accepts(m_parsed, s) == _accepts(m_direct, s), (s, text)
