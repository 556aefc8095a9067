"""Structural tags: the format family, both call forms, errors, and xgrammar 0.2.8 parity.

Masks are compared with xgrammar's bit for bit on the DeepSeek-V4 vocabulary at every step
of each accepted document (and the stop token after it); rejected documents must be
rejected by both. Free text (triggered tags, ``any_text`` inside a tag, ``dispatch``) reads
any bytes in xgrammar, so the first masks already cover the 375 DeepSeek-V4 tokens that
are not whole UTF-8 characters.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from xgrammar_diff import deepseek_env, small_compilers, small_walk_matches, text_masks_match

import treegram as tg
from treegram.errors import (
    GrammarError,
    InvalidStructuralTagError,
    RegexSyntaxError,
    UnsupportedStructuralTagError,
)
from treegram.spec import links_from_parents
from treegram.structural_tag import (
    AnyTextFormat,
    ConstStringFormat,
    JSONSchemaFormat,
    OrFormat,
    RegexFormat,
    SequenceFormat,
    StructuralTag,
    StructuralTagItem,
    TagFormat,
    TagsWithSeparatorFormat,
    TriggeredTagsFormat,
)


def _st(fmt: dict) -> dict:
    return {"type": "structural_tag", "format": fmt}


WEATHER = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "unit": {"enum": ["c", "f"]}},
    "required": ["city"],
}
THINK = {"type": "tag", "begin": "<think>", "content": {"type": "any_text"}, "end": "</think>"}
DS_CALL = "<｜tool▁call▁begin｜>"  # a non-ASCII trigger, as DeepSeek's templates use

# (name, structural tag, accepted documents, rejected documents)
CASES = [
    (
        "triggered_tags",
        _st(
            {
                "type": "triggered_tags",
                "triggers": ["<function="],
                "tags": [
                    {
                        "begin": "<function=get_weather>",
                        "content": {"type": "json_schema", "json_schema": WEATHER},
                        "end": "</function>",
                    },
                    {
                        "begin": "<function=noop>",
                        "content": {"type": "json_schema", "json_schema": {"type": "object"}},
                        "end": "</function>",
                    },
                ],
            }
        ),
        [
            'Let me check <function=get_weather>{"city": "Paris"}</function> then '
            "<<func <function=noop>{}</function>",
            "plain text only",
            "",
            '<function=get_weather>{"city": "Ro", "unit": "c"}</function>',
        ],
        ["<function=bad>{}</function>", "<function=get_weather>{}</function>"],
    ),
    (
        "think_any_text",
        _st(THINK),
        ["<think>hmm </thin <think> ok</think>", "<think></think>"],
        ["<think>a</think>b", "<think>", "think"],
    ),
    (
        "think_then_one_call",
        _st(
            {
                "type": "sequence",
                "elements": [
                    THINK,
                    {
                        "type": "triggered_tags",
                        "triggers": ["<tool>"],
                        "tags": [
                            {
                                "begin": "<tool>",
                                "content": {"type": "json_schema", "json_schema": WEATHER},
                                "end": "</tool>",
                            }
                        ],
                        "at_least_one": True,
                        "stop_after_first": True,
                    },
                ],
            }
        ),
        ['<think>x</think><tool>{"city":"a"}</tool>'],
        ['<think>x</think>text<tool>{"city":"a"}</tool>', "<think>x</think>"],
    ),
    (
        "tags_with_separator",
        _st(
            {
                "type": "tags_with_separator",
                "separator": "\n",
                "tags": [
                    {
                        "begin": "<a>",
                        "content": {"type": "regex", "pattern": "[0-9]{1,3}"},
                        "end": "</a>",
                    },
                    {
                        "begin": "<b>",
                        "content": {"type": "grammar", "grammar": 'root ::= "x" | "yy"'},
                        "end": "</b>",
                    },
                ],
            }
        ),
        ["<a>12</a>\n<b>yy</b>\n<a>1</a>", ""],
        ["<a>1234</a>", "<a>1</a><b>x</b>", "<a>1</a>\n"],
    ),
    (
        "any_text_excludes",
        _st({"type": "any_text", "excludes": ["bad", "<|end|>"]}),
        ["this is fine, ba ba", "b"],
        ["a bad word", "x<|end|>"],
    ),
    (
        "triggers_ends_excludes",
        _st(
            {
                "type": "triggered_tags",
                "triggers": ["<f", "<g"],
                "tags": [
                    {
                        "begin": "<f=a>",
                        "content": {"type": "const_string", "value": "A"},
                        "end": "</f>",
                    },
                    {"begin": "<g>", "content": {"type": "any_text"}, "end": ["</g>", "</x>"]},
                ],
                "excludes": ["STOP"],
                "at_least_one": True,
            }
        ),
        ["<g>xy<f</x>zz<<f=a>A</f>", "<f=a>A</f>"],
        ["text<f=a>A</f>", "<f=a>A</f>STOP", "<f=b>A</f>"],
    ),
    (
        "stop_after_first",
        _st(
            {
                "type": "triggered_tags",
                "triggers": ["<f"],
                "tags": [
                    {
                        "begin": "<f=a>",
                        "content": {"type": "const_string", "value": "A"},
                        "end": "</f>",
                    }
                ],
                "stop_after_first": True,
            }
        ),
        ["hi <f=a>A</f>", "nothing"],
        ["hi <f=a>A</f> more"],
    ),
    (
        "dispatch",
        _st(
            {
                "type": "dispatch",
                "rules": [
                    ["<<", {"type": "const_string", "value": "X>>"}],
                    ["ab", {"type": "regex", "pattern": "c+"}],
                ],
                "loop": True,
                "excludes": ["zz"],
            }
        ),
        ["a<<X>>aabcc", "aaa"],
        ["zz", "<<Y"],
    ),
    (
        "deepseek_style",
        _st(
            {
                "type": "triggered_tags",
                "triggers": [DS_CALL],
                "tags": [
                    {
                        "begin": DS_CALL + "get_weather<｜tool▁sep｜>",
                        "content": {"type": "json_schema", "json_schema": WEATHER},
                        "end": "<｜tool▁call▁end｜>",
                    }
                ],
            }
        ),
        [f'Sure. {DS_CALL}get_weather<｜tool▁sep｜>{{"city": "Oslo"}}<｜tool▁call▁end｜>'],
        [f"{DS_CALL}other<｜tool▁sep｜>{{}}<｜tool▁call▁end｜>"],
    ),
    (
        "any_text_then_end",
        _st(
            {
                "type": "sequence",
                "elements": [{"type": "any_text"}, {"type": "const_string", "value": "END"}],
            }
        ),
        ["abcEND", "ENDEND", "café END"],
        ["abc", ""],
    ),
    (
        "or_repeat_optional",
        _st(
            {
                "type": "sequence",
                "elements": [
                    {
                        "type": "repeat",
                        "min": 1,
                        "max": 2,
                        "content": {
                            "type": "or",
                            "elements": [
                                {"type": "const_string", "value": "a"},
                                {"type": "regex", "pattern": "[xy]z"},
                            ],
                        },
                    },
                    {"type": "optional", "content": {"type": "const_string", "value": "!"}},
                    {"type": "star", "content": {"type": "const_string", "value": "-"}},
                    {"type": "plus", "content": {"type": "const_string", "value": "."}},
                ],
            }
        ),
        ["axz!--..", "a."],
        ["aaa.", "", "a!", "yz"],
    ),
]


@pytest.fixture(scope="module")
def env():
    pytest.importorskip("tokenizers")
    return deepseek_env(pytest.importorskip("xgrammar"))


def _ids(env, text: str) -> list[int]:
    return env["tok"].encode(text, add_special_tokens=False).ids


@pytest.mark.parametrize("name,tag,good,bad", CASES, ids=[c[0] for c in CASES])
def test_masks_match_xgrammar(env, name, tag, good, bad):
    xgr = env["xgr"]
    ours = env["tc"].compile_structural_tag(tag)
    theirs = env["xc"].compile_structural_tag(json.dumps(tag))
    for doc in good:
        text_masks_match(env, ours, theirs, doc, repr(doc))
    for doc in bad:
        m, xm = tg.GrammarMatcher(ours), xgr.GrammarMatcher(theirs)
        ours_ok = m.accept_string(doc) and m.accept_token(env["stop"])
        theirs_ok = xm.accept_string(doc) and xm.accept_token(env["stop"])
        assert not ours_ok and not theirs_ok, doc


def _trie(seqs):
    parents, tokens, index = [-1], [0], {}
    for seq in seqs:
        node = 0
        for t in seq:
            if (node, t) not in index:
                index[(node, t)] = len(parents)
                parents.append(node)
                tokens.append(t)
            node = index[(node, t)]
    return np.array(parents, dtype=np.int64), np.array(tokens, dtype=np.int64)


def test_draft_tree_and_batch_match_xgrammar(env):
    torch = pytest.importorskip("torch")
    xgr = env["xgr"]
    name, tag, good, _ = CASES[0]
    ours = env["tc"].compile_structural_tag(tag)
    theirs = env["xc"].compile_structural_tag(json.dumps(tag))
    parents, draft = _trie([[*_ids(env, d), env["stop"]] for d in good])
    nt, ns = links_from_parents(parents)
    n, w = len(draft), env["words"]
    m, xm = tg.GrammarMatcher(ours), xgr.GrammarMatcher(theirs)
    rows = np.full((n, w), 7, dtype=np.int32)
    assert m.traverse_draft_tree(nt, ns, draft, rows)
    expected = torch.zeros((n, w), dtype=torch.int32)  # xgrammar leaves unreached rows as is
    assert xm.traverse_draft_tree(
        torch.from_numpy(nt), torch.from_numpy(ns), torch.from_numpy(draft), expected
    )
    np.testing.assert_array_equal(rows, expected.numpy())
    # every node of an accepted document is reached (a stop token's row stays empty)
    reached = (rows != 0).any(axis=1)
    assert reached[draft != env["stop"]].all() and not reached[draft == env["stop"]].any()
    # the batch call over a mix of grammars: the same rows as the scalar walks
    batch = tg.BatchGrammarMatcher(max_threads=2)
    try:
        json_m = tg.GrammarMatcher(env["tc"].compile_builtin_json_grammar())
        ms = [m, json_m, tg.GrammarMatcher(ours)]
        out = np.zeros((3 * n, w), dtype=np.int32)
        assert (
            batch.batch_traverse_draft_tree(ms, nt, ns, np.tile(draft, (3, 1)), out) == [True] * 3
        )
        np.testing.assert_array_equal(out[:n], rows)
        np.testing.assert_array_equal(out[2 * n :], rows)
        json_rows = np.zeros((n, w), dtype=np.int32)
        json_m.traverse_draft_tree(nt, ns, draft, json_rows)
        np.testing.assert_array_equal(out[n : 2 * n], json_rows)
        masks = np.zeros((3, w), dtype=np.int32)
        batch.batch_fill_next_token_bitmask(ms, masks)
        np.testing.assert_array_equal(masks[0], rows[0])
    finally:
        batch.close()


# ---------------------------------------------------------------- forms and data model
WEATHER_TAG = TagFormat(
    begin="<function=get_weather>",
    content=JSONSchemaFormat(json_schema=WEATHER),
    end="</function>",
)


def test_every_input_form_gives_one_grammar():
    pydantic = pytest.importorskip("pydantic")
    xst = pytest.importorskip("xgrammar.structural_tag")
    tag = StructuralTag(format=TriggeredTagsFormat(triggers=["<function="], tags=[WEATHER_TAG]))
    expected = tg.Grammar.from_structural_tag(tag)
    as_dict = tag.to_dict()
    assert as_dict["format"]["tags"][0]["content"]["json_schema"] == WEATHER
    xgr_model = xst.StructuralTag.from_json(tag.to_json())  # xgrammar's pydantic model

    class Weather(pydantic.BaseModel):
        city: str

    forms = [
        (tag,),
        (as_dict,),
        (tag.to_json(),),
        (xgr_model,),
        (StructuralTag.from_json(tag.to_json()),),
        (
            [StructuralTagItem(begin="<function=get_weather>", schema=WEATHER, end="</function>")],
            ["<function="],
        ),
        (
            [
                {
                    "begin": "<function=get_weather>",
                    "schema": json.dumps(WEATHER),
                    "end": "</function>",
                }
            ],
            ["<function="],
        ),
    ]
    for args in forms:
        assert tg.Grammar.from_structural_tag(*args) == expected, args
    assert tg.Grammar.from_structural_tag(structural_tag=as_dict) == expected
    assert (
        tg.Grammar.from_structural_tag(
            tags=[
                StructuralTagItem(begin="<function=get_weather>", schema=WEATHER, end="</function>")
            ],
            triggers=["<function="],
        )
        == expected
    )
    # xgrammar's own legacy items
    xitem = xst.StructuralTagItem(begin="<function=get_weather>", schema=WEATHER, end="</function>")
    assert tg.Grammar.from_structural_tag([xitem], ["<function="]) == expected
    # a pydantic model class as a legacy schema
    legacy = StructuralTagItem(begin="<function=get_weather>", schema=Weather, end="</function>")
    g = tg.Grammar.from_structural_tag([legacy], ["<function="])
    m = tg.GrammarMatcher(tg.GrammarCompiler(_tiny_info()).compile_grammar(g))
    assert m.accept_string('x<function=get_weather>{"city": "a"}</function>')
    # xgrammar's own format objects are accepted as formats too
    fmt = xst.TagFormat(begin="<a>", content=xst.ConstStringFormat(value="b"), end="</a>")
    assert tg.Grammar.from_structural_tag(xst.StructuralTag(format=fmt)) == (
        tg.Grammar.from_structural_tag(
            StructuralTag(format=TagFormat(begin="<a>", content=ConstStringFormat("b"), end="</a>"))
        )
    )


def _tiny_info():
    return tg.TokenizerInfo([chr(c) for c in range(32, 127)] + ["</s>"], stop_token_ids=[95])


def test_free_text_prints_parses_back_and_serializes():
    # free text reads raw bytes; treegram's EBNF writes those as \x{HH} and reads them back
    # (str() prints xgrammar's form instead: tests/frontends/structural_tag/test_text.py)
    g = tg.Grammar.from_structural_tag(_st(CASES[5][1]["format"]))
    text = g.to_ebnf()
    assert '"\\x{80}"' in text and '"\\x{FF}"' in text
    assert tg.Grammar.from_ebnf(text) == g
    assert tg.Grammar.from_ebnf('root ::= "a\\x{C3}\\x{a9}"') == tg.Grammar.from_ebnf(
        'root ::= "a\u00e9"'
    )
    with pytest.raises(tg.GrammarSyntaxError, match=r"expected \\x\{HH\}"):
        tg.Grammar.from_ebnf('root ::= "\\x{8}"')
    compiler = tg.GrammarCompiler(_tiny_info(), max_threads=1)
    compiled = compiler.compile_structural_tag(_st(CASES[5][1]["format"]))
    again = tg.CompiledGrammar.deserialize(compiled.serialize(), compiler.tokenizer_info)
    for c in (compiled, again, compiler.compile_grammar(g)):
        m = tg.GrammarMatcher(c)
        assert m.accept_string(b"<g>\xff\xfe</x><f=a>A</f>") and m.is_completed()


def test_compiler_caches_equal_tags_once():
    compiler = tg.GrammarCompiler(_tiny_info(), max_threads=1)
    tag = StructuralTag(format=OrFormat([ConstStringFormat("yes"), RegexFormat("n+o")]))
    a = compiler.compile_structural_tag(tag)
    b = compiler.compile_structural_tag(tag.to_json())
    c = compiler.compile_structural_tag(structural_tag=tag.to_dict())
    assert a is b is c
    m = tg.GrammarMatcher(a)
    assert m.accept_string("nnno") and m.is_completed()
    assert not tg.GrammarMatcher(a).accept_string("nope")


@pytest.mark.parametrize(
    "fmt,good,bad",
    [
        (
            SequenceFormat([AnyTextFormat(excludes=["q"]), ConstStringFormat("E")]),
            ["abE", "E", "EEE"],
            ["qE", "ab"],
        ),
        (
            TagsWithSeparatorFormat(tags=[WEATHER_TAG], separator=",", at_least_one=True),
            ['<function=get_weather>{"city":"a"}</function>'],
            ["", '<function=get_weather>{"city":"a"}</function>,'],
        ),
        (
            TagsWithSeparatorFormat(tags=[WEATHER_TAG], separator=",", stop_after_first=True),
            ["", '<function=get_weather>{"city":"a"}</function>'],
            ['<function=get_weather>{"city":"a"}</function>,<function=get_weather>'],
        ),
        (
            TagFormat(
                begin="[",
                content=SequenceFormat([AnyTextFormat(), ConstStringFormat(";")]),
                end="]",
            ),
            ["[a;]", "[;]", "[a;b;]"],
            ["[a]", "[a];]"],
        ),
    ],
)
def test_accepts_and_rejects(fmt, good, bad):
    compiled = tg.GrammarCompiler(_tiny_info(), max_threads=1).compile_structural_tag(
        StructuralTag(format=fmt)
    )
    for doc in good:
        m = tg.GrammarMatcher(compiled)
        assert m.accept_string(doc) and m.is_completed(), doc
    for doc in bad:
        m = tg.GrammarMatcher(compiled)
        assert not (m.accept_string(doc) and m.is_completed()), doc


# ---------------------------------------------------------------- errors
def _tag(**kw):
    base = {"begin": "<f=a>", "content": {"type": "const_string", "value": "x"}, "end": "</f>"}
    return {**base, **kw}


@pytest.mark.parametrize(
    "value,match",
    [
        (
            {"type": "triggered_tags", "triggers": ["<g"], "tags": [_tag()]},
            r"format\.tags\[0\]\.begin '<f=a>' does not start with any trigger",
        ),
        (
            {"type": "triggered_tags", "triggers": ["<f", "<f="], "tags": [_tag()]},
            r"matches triggers \['<f', '<f='\]",
        ),
        (
            {"type": "triggered_tags", "triggers": ["<f", "<g"], "tags": [_tag()]},
            r"format\.triggers: \['<g'\] start\(s\) no tag",
        ),
        (
            {"type": "triggered_tags", "triggers": [], "tags": [_tag()]},
            r"format\.triggers must be non-empty",
        ),
        ({"type": "sequence", "elements": []}, r"format\.elements: a Sequence format needs"),
        ({"type": "or", "elements": []}, r"format\.elements: a Or format needs"),
        (
            {"type": "tag", "begin": "<a>", "content": {"type": "any_text"}, "end": ""},
            r"format\.end: the content is unlimited free text",
        ),
        (
            {
                "type": "tag",
                "begin": "<a>",
                "content": {"type": "const_string", "value": 3},
                "end": "</a>",
            },
            r"format\.content\.value must be a string, got int",
        ),
        ({"type": "const_string"}, r"format\.value is required"),
        (
            {"type": "const_string", "value": "a", "vale": 1},
            r"format has unknown field\(s\): \['vale'\]",
        ),
        ({"type": "nope"}, r"format\.type must be one of"),
        (
            {
                "type": "repeat",
                "min": 3,
                "max": 1,
                "content": {"type": "const_string", "value": "a"},
            },
            r"format: repeat needs 0 <= min <= max",
        ),
        (
            {"type": "tags_with_separator", "tags": [], "separator": ","},
            r"format\.tags must be non-empty",
        ),
        (
            {"type": "dispatch", "rules": [["", {"type": "const_string", "value": "a"}]]},
            r"format: a trigger must not be empty",
        ),
    ],
)
def test_invalid_structural_tags(value, match):
    with pytest.raises(InvalidStructuralTagError, match=match) as info:
        tg.Grammar.from_structural_tag(_st(value))
    assert isinstance(info.value, ValueError) and isinstance(info.value, RuntimeError)


@pytest.mark.parametrize(
    "value,match",
    [
        (
            {"type": "any_text", "max_chars": 10**6, "excludes": ["x"]},
            r"format\.max_chars: a budget of 1000000 characters beside the excluded strings",
        ),
    ],
)
def test_unsupported_structural_tags(value, match):
    with pytest.raises(UnsupportedStructuralTagError, match=match):
        tg.Grammar.from_structural_tag(_st(value))


def test_character_budgets_share_one_state_budget_per_structural_tag():
    # one budget beside its end string builds about five states per character: 1,200 fit,
    # eight tags of 1,000 do not (they compiled for a minute; now refused within a second)
    from treegram.frontends import MAX_BOUNDED_TEXT_STATES

    def tags(n, chars):
        return {
            "type": "triggered_tags",
            "triggers": [f"<t{i}>" for i in range(n)],
            "tags": [
                {"begin": f"<t{i}>", "content": {"type": "any_text", "max_chars": chars},
                 "end": f"</t{i}>"}
                for i in range(n)
            ],
        }  # fmt: skip

    tg.Grammar.from_structural_tag(_st(tags(1, 1200)))
    with pytest.raises(UnsupportedStructuralTagError, match=str(MAX_BOUNDED_TEXT_STATES)):
        tg.Grammar.from_structural_tag(_st(tags(8, 1000)))


def test_deprecated_qwen_xml_parameter_format_compiles_as_qwen_xml():
    from treegram.structural_tag import QwenXMLParameterFormat

    schema = {"type": "object", "properties": {"a": {"type": "string"}}}
    fmt = QwenXMLParameterFormat(json_schema=schema)
    assert fmt.to_dict() == {"json_schema": schema, "type": "qwen_xml_parameter"}
    xst = pytest.importorskip("xgrammar.structural_tag")
    theirs = xst.QwenXMLParameterFormat(json_schema=schema).model_dump(mode="json")
    assert fmt.to_dict() == theirs
    from treegram.testing import _is_grammar_accept_string as accepts

    for tag in (tg.StructuralTag(format=fmt), _st(fmt.to_dict())):
        grammar = tg.Grammar.from_structural_tag(tag)
        assert accepts(grammar, "<parameter=a>x y</parameter>")
        assert not accepts(grammar, '{"a": "x y"}')
    with pytest.raises(InvalidStructuralTagError, match="type must be 'qwen_xml_parameter'"):
        QwenXMLParameterFormat(json_schema=schema, type="json_schema")


def test_deeply_nested_formats():
    def nested(depth):
        fmt = {"type": "const_string", "value": "x"}
        for _ in range(depth):
            fmt = {"type": "sequence", "elements": [fmt, {"type": "const_string", "value": "y"}]}
        return _st(fmt)

    compiler = tg.GrammarCompiler(tg.TokenizerInfo(["x", "y", "</s>"], stop_token_ids=[2]))
    m = tg.GrammarMatcher(compiler.compile_structural_tag(nested(900)))  # past Python's stack
    assert m.accept_string("x" + "y" * 900) and m.is_completed()
    with pytest.raises(InvalidStructuralTagError, match="nest deeper than MAX_NESTING_DEPTH"):
        tg.Grammar.from_structural_tag(nested(1200))


def test_nesting_limit_on_json_text_is_a_clear_error():
    """xgrammar's test_deeply_nested_formats_rejected builds the nesting as JSON text (so
    no Python-side recursion limit is hit first). treegram's limit is MAX_NESTING_DEPTH
    (1000, xgrammar's is 100): 300 levels compile to the exact language; 10,000 levels
    raise InvalidStructuralTagError, not RecursionError."""
    from treegram.testing import _is_grammar_accept_string as accepts

    def nested(depth: int) -> str:
        fmt = '{"type": "sequence", "elements": [' * depth
        fmt += '{"type": "const_string", "value": "a"}' + "]}" * depth
        return '{"type": "structural_tag", "format": ' + fmt + "}"

    grammar = tg.Grammar.from_structural_tag(nested(300))
    assert accepts(grammar, "a") and not accepts(grammar, "aa")
    for depth in (1001, 10_000):
        with pytest.raises(InvalidStructuralTagError, match="nest deeper than MAX_NESTING_DEPTH"):
            tg.Grammar.from_structural_tag(nested(depth))


def test_tags_with_separator_in_tag_with_empty_end_is_exact():
    """xgrammar refuses tags_with_separator inside a tag whose end is "" (it needs an end
    string to stop the repetition; structural_tag_error stag_format3) but accepts the same
    content at the top level. The language is well defined (after a tag, "<sep>" goes on,
    anything else ends it): treegram compiles it, accepting what xgrammar's top-level
    ``"<start>" tags_with_separator`` accepts."""
    xgr = pytest.importorskip("xgrammar")
    from treegram.testing import _is_grammar_accept_string as accepts

    tws = {
        "type": "tags_with_separator",
        "tags": [
            {"begin": "<t>", "content": {"type": "const_string", "value": "X"}, "end": "</t>"}
        ],
        "separator": "<sep>",
    }
    ours = tg.Grammar.from_structural_tag(
        _st({"type": "tag", "begin": "<start>", "content": tws, "end": ""})
    )
    seq = _st({"type": "sequence", "elements": [{"type": "const_string", "value": "<start>"}, tws]})
    theirs = xgr.Grammar.from_structural_tag(seq)
    texts = [
        "<start>",
        "<start><t>X</t>",
        "<start><t>X</t><sep><t>X</t>",
        "<start><t>X</t><sep>",
        "<start><t>X</t><t>X</t>",
        "<start><t>Y</t>",
        "<t>X</t>",
    ]
    for text in texts:
        assert accepts(ours, text) == xgr.testing._is_grammar_accept_string(theirs, text), text
    assert accepts(ours, "<start><t>X</t><sep><t>X</t>")
    assert not accepts(ours, "<start><t>X</t><sep>")


def test_bad_arguments_and_json():
    with pytest.raises(InvalidStructuralTagError, match="not valid JSON"):
        tg.Grammar.from_structural_tag("{nope")
    with pytest.raises(InvalidStructuralTagError, match="got int"):
        tg.Grammar.from_structural_tag(5)
    with pytest.raises(InvalidStructuralTagError, match="structural_tag.type must be"):
        tg.Grammar.from_structural_tag({"type": "json_schema", "format": {}})
    with pytest.raises(InvalidStructuralTagError, match="expected one structural_tag argument"):
        tg.Grammar.from_structural_tag()
    with pytest.raises(InvalidStructuralTagError, match=r"tags\[0\] must have string begin"):
        tg.Grammar.from_structural_tag([{"begin": 1, "schema": {}, "end": "x"}], ["<"])
    with pytest.raises(InvalidStructuralTagError, match="triggers must be a list of strings"):
        tg.Grammar.from_structural_tag([], "<f")
    with pytest.raises(InvalidStructuralTagError, match="ConstStringFormat.type must be"):
        ConstStringFormat("a", type="regex")
    # a content's own frontend error comes through unchanged
    with pytest.raises(RegexSyntaxError):
        tg.Grammar.from_structural_tag(_st({"type": "regex", "pattern": "(a"}))
    with pytest.raises(GrammarError):
        tg.Grammar.from_structural_tag(_st({"type": "grammar", "grammar": "root ::= x"}))


# ---------------------------------------------------------------- random structural tags
# Random structural tags over a small alphabet whose patterns overlap (triggers inside
# excluded strings, triggers that are prefixes of longer patterns, tag ends inside free
# text, nested dispatch, a two-byte character), walked token by token along random allowed
# paths on a small vocabulary with multi-byte and cut-character tokens; every mask must
# equal xgrammar's (1,200 such tags were checked when this was written; 90 run here).
SMALL_VOCAB = [c.encode() for c in "ab<>/x="] + [
    b"<a", b"a>", b"</", b"ab", b"b<", b"<f", b"=a>", b"\xc3", b"\xa9", "é".encode(),
    b"</a>", b"</s>",
]  # fmt: skip


def _random_format(r, depth=0):
    def text(lo=1, hi=3):
        return "".join(r.choice("ab<>/=é") for _ in range(r.randint(lo, hi)))

    def tag(prefix=""):
        end = text() if r.random() < 0.5 else [text(), text()]
        return {"begin": prefix + text(0, 2), "content": _random_format(r, depth + 1), "end": end}

    kinds = ["const", "any", "regex"]
    if depth < 2:
        kinds += ["tag", "triggered", "sequence", "or", "optional", "star", "dispatch", "sep"]
    kind = r.choice(kinds)
    if kind == "const":
        return {"type": "const_string", "value": text()}
    if kind == "regex":
        return {"type": "regex", "pattern": r.choice(["[ab]+", "a|b<", "(ab)*x"])}
    if kind == "any":
        return {"type": "any_text", "excludes": [text() for _ in range(r.randint(0, 2))]}
    if kind == "tag":
        return {"type": "tag", **tag()}
    if kind == "triggered":
        triggers = [text(1, 2)]
        second = text(1, 2)
        if r.random() < 0.4 and not (
            second.startswith(triggers[0]) or triggers[0].startswith(second)
        ):
            triggers.append(second)
        return {
            "type": "triggered_tags",
            "triggers": triggers,
            "tags": [tag(t) for t in triggers for _ in range(r.randint(1, 2))],
            "at_least_one": r.random() < 0.3,
            "stop_after_first": r.random() < 0.3,
            "excludes": [text() for _ in range(r.randint(0, 1))],
        }
    if kind in ("sequence", "or"):
        items = [_random_format(r, depth + 1) for _ in range(r.randint(1, 3))]
        return {"type": kind, "elements": items}
    if kind == "optional":
        return {"type": "optional", "content": _random_format(r, depth + 1)}
    if kind == "star":
        return {"type": "star", "content": {"type": "const_string", "value": text()}}
    if kind == "dispatch":
        return {
            "type": "dispatch",
            "rules": [[text(1, 2), _random_format(r, depth + 1)]],
            "loop": r.random() < 0.5,
            "excludes": [text() for _ in range(r.randint(0, 1))],
        }
    return {
        "type": "tags_with_separator",
        "separator": r.choice(["", ",", "<"]),
        "tags": [tag() for _ in range(r.randint(1, 2))],
        "at_least_one": r.random() < 0.5,
        "stop_after_first": r.random() < 0.3,
    }


@pytest.fixture(scope="module")
def small():
    return small_compilers(pytest.importorskip("xgrammar"), SMALL_VOCAB)


@pytest.mark.parametrize("chunk", range(6))
def test_random_structural_tags_match_xgrammar(small, chunk):
    import random

    xgr, tc, xc, stop = small
    for seed in range(chunk * 15, chunk * 15 + 15):
        r = random.Random(seed)
        tag = _st(_random_format(r))
        ours = tc.compile_structural_tag(tag)
        theirs = xc.compile_structural_tag(json.dumps(tag))
        for _ in range(4):
            small_walk_matches(xgr, ours, theirs, SMALL_VOCAB, stop, r, 25, (seed, tag))


def _tt(trigger, begin, content, end, excludes):
    tag = {"begin": begin, "content": {"type": "const_string", "value": content}, "end": end}
    return {"type": "triggered_tags", "triggers": [trigger], "tags": [tag], "excludes": excludes}


# xgrammar's free-text rules, found by probing it (documented in _free_text): (format,
# text, accepted as a complete output)
FREE_TEXT_RULES = [
    # a trigger that starts a longer pattern waits: a continuing byte continues it ...
    (_tt(">", ">", "X", "E", [">bb"]), ">b", True),
    (_tt(">", ">", "X", "E", [">bb"]), ">bb", False),
    # ... any other byte starts the tag, and the text cannot end on the trigger
    (_tt(">", ">", "X", "E", [">bb"]), ">XE", True),
    (_tt(">", ">", "X", "E", [">bb"]), ">", False),
    # a trigger at the end of a longer partial match does not fire
    (_tt(">", ">", "X", "E", ["a>b"]), "a>X", True),
    (_tt(">", ">", "X", "E", ["a>b"]), "a>b", False),
    # an excluded suffix wins over a trigger ending at the same byte
    (
        {
            "type": "dispatch",
            "rules": [["<=", {"type": "const_string", "value": "Q"}]],
            "excludes": ["="],
        },
        "<=Q",
        False,
    ),  # fmt: skip
    # a dispatch's free text may contain its enclosing tag's end string
    (
        {
            "type": "tag",
            "begin": "=",
            "end": "<",
            "content": {
                "type": "dispatch",
                "rules": [["q", {"type": "const_string", "value": "x"}]],
                "loop": False,
            },
        },
        "=<a<",
        True,
    ),  # fmt: skip
]


@pytest.mark.parametrize("fmt,text,accepted", FREE_TEXT_RULES)
def test_free_text_rules(fmt, text, accepted):
    info = tg.TokenizerInfo(["a", "</s>"], stop_token_ids=[1])
    m = tg.GrammarMatcher(tg.GrammarCompiler(info).compile_structural_tag(_st(fmt)))
    assert (m.accept_string(text) and m.accept_token(1)) is accepted
    xgr = pytest.importorskip("xgrammar")
    xinfo = xgr.TokenizerInfo(["a", "</s>"], stop_token_ids=[1])
    xm = xgr.GrammarMatcher(xgr.GrammarCompiler(xinfo).compile_structural_tag(json.dumps(_st(fmt))))
    assert (xm.accept_string(text) and xm.accept_token(1)) is accepted


# ---------------------------------------------------------------- any_text max_chars
_BUDGET_BYTES = [b"<think>", b"a", b"ab", b"\xe4", b"\xb8", b"\xad", "中".encode(), b"\xff",
                 b"</", b"think>", b"</think>", b"a</think>", b"<eos>"]  # fmt: skip


def _think(content: dict) -> dict:
    return _st({"type": "tag", "begin": "<think>", "content": content, "end": "</think>"})


@pytest.mark.parametrize(
    "content,texts",
    [
        # code points, whatever their UTF-8 length
        ({"type": "any_text", "max_chars": 3}, [
            ("<think>中中中</think>", True), ("<think>中🦋a</think>", True),
            ("<think>abcd</think>", False), ("<think></think>", True),
        ]),
        ({"type": "any_text", "max_chars": 2, "excludes": ["xy"]}, [
            ("<think>yx</think>", True), ("<think>xy</think>", False),
            ("<think>x</</think>", False), ("<think><</think>", True),
        ]),
        ({"type": "any_text", "max_chars": 0}, [
            ("<think></think>", True), ("<think>a</think>", False),
        ]),
        ({"type": "any_text", "max_chars": 4, "max_tokens": 2}, [
            ("<think>abcd</think>", True), ("<think>abcde</think>", False),
        ]),
    ],
)  # fmt: skip
def test_any_text_max_chars_as_written_and_as_xgrammar_does(content, texts):
    from treegram.testing import _is_grammar_accept_string as accepts

    ours = tg.Grammar.from_structural_tag(_think(content))
    xgr = pytest.importorskip("xgrammar")
    from xgrammar.testing import _is_grammar_accept_string as xgr_accepts

    theirs = xgr.Grammar.from_structural_tag(json.dumps(_think(content)))
    for text, accepted in texts:
        assert accepts(ours, text) == accepted, text
        assert xgr_accepts(theirs, text) == accepted, text
    root = tg.Grammar.from_structural_tag(_st({"type": "any_text", "max_chars": 2}))
    assert accepts(root, "中a") and not accepts(root, "abc")


@pytest.mark.parametrize("excludes", [["xy"], ["</think>"]])
def test_any_text_max_chars_masks_match_xgrammar_on_bytes(excludes):
    # With excludes the free text is bytes: every byte but a UTF-8 continuation byte counts
    # one character, a stray continuation byte is free while the budget lasts, and once it
    # is spent only the end may follow. (One case is left out: a token that ends inside a
    # character exactly at the budget; xgrammar checks the budget per token and refuses the
    # rest of that character, treegram lets it complete.)
    xgr = pytest.importorskip("xgrammar")
    import random

    n = len(_BUDGET_BYTES)
    info = tg.TokenizerInfo(_BUDGET_BYTES, stop_token_ids=[n - 1])
    xinfo = xgr.TokenizerInfo(
        _BUDGET_BYTES, xgr.VocabType.RAW, vocab_size=n, stop_token_ids=[n - 1]
    )
    tag = _think({"type": "any_text", "max_chars": 3, "excludes": excludes})
    ours = tg.GrammarCompiler(info, max_threads=1).compile_structural_tag(tag)
    theirs = xgr.GrammarCompiler(xinfo).compile_structural_tag(json.dumps(tag))
    r = random.Random(str(excludes))
    lead_only = {i for i, t in enumerate(_BUDGET_BYTES) if t in (b"\xe4",)}
    for _ in range(40):
        m, xm = tg.GrammarMatcher(ours), xgr.GrammarMatcher(theirs)
        used, path = 0, []
        for _ in range(10):
            a = np.zeros((1, 1), dtype=np.int32)
            b = xgr.allocate_token_bitmask(1, n)
            m.fill_next_token_bitmask(a)
            xm.fill_next_token_bitmask(b)
            ours_ids = [t for t in range(n) if a[0, 0] >> t & 1]
            assert ours_ids == [t for t in range(n) if int(b[0, 0]) >> t & 1], path
            # keep out of the one case above: a lone lead byte that spends the budget
            choices = [t for t in ours_ids if not (t in lead_only and used == 2)]
            if not choices:
                break
            t = r.choice(choices)
            path.append(_BUDGET_BYTES[t])
            assert m.accept_token(t) and xm.accept_token(t)
            if t:  # characters of the text (not of the begin string)
                used += sum(1 for byte in _BUDGET_BYTES[t] if not 0x80 <= byte <= 0xBF)
            if t == n - 1:
                break


def test_any_text_max_chars_masks_match_xgrammar_on_deepseek_v4(infos):
    xgr = pytest.importorskip("xgrammar")
    from xgrammar_diff import compare_source

    content = {"type": "any_text", "max_chars": 12, "excludes": ["</think>"]}
    source = json.dumps(_think(content))
    compare_source(infos, xgr, "compile_structural_tag", source, "chars", steps=150, utf8_only=True)


@pytest.mark.parametrize("bad", [-1, 1.5, "3", True, 2**31])
@pytest.mark.parametrize("key", ["max_chars", "max_tokens"])
def test_any_text_budgets_must_be_32_bit_counts(key, bad):
    for tag in (
        _st({"type": "any_text", key: bad}),
        StructuralTag(format=AnyTextFormat(**{key: bad})),
    ):
        with pytest.raises(
            InvalidStructuralTagError, match=f"format.{key} must be a non-negative 32-bit integer"
        ):
            tg.Grammar.from_structural_tag(tag)


_C = {"type": "const_string", "value": "x"}
_TAG = {"type": "tag", "begin": "<a>", "content": _C, "end": "</a>"}
# one JSON form of every format type
_EVERY_FORMAT = [
    _C,
    {"type": "json_schema", "json_schema": {"type": "integer"}, "max_whitespace_cnt": 2},
    {"type": "qwen_xml_parameter", "json_schema": {"type": "object"}},
    {"type": "any_text", "excludes": ["END"], "max_tokens": 3, "max_chars": 7},
    {"type": "grammar", "grammar": 'root ::= "a"'},
    {"type": "regex", "pattern": "[a-z]+"},
    {"type": "sequence", "elements": [_C, _C]},
    {"type": "or", "elements": [_C, {"type": "regex", "pattern": "b"}]},
    {"type": "token", "token": 5},
    {"type": "exclude_token", "exclude_tokens": [5, "END"]},
    {"type": "any_tokens", "exclude_tokens": [5, "END"], "max_tokens": 3},
    _TAG,
    {"type": "token_triggered_tags", "trigger_tokens": [7], "tags": [_TAG]},
    {"type": "token_dispatch", "rules": [[7, _C]], "exclude_tokens": [8]},
    {"type": "triggered_tags", "triggers": ["<a"], "tags": [_TAG], "at_least_one": True},
    {"type": "tags_with_separator", "tags": [_TAG], "separator": ","},
    {"type": "optional", "content": _C},
    {"type": "plus", "content": _C},
    {"type": "star", "content": _C},
    {"type": "repeat", "min": 1, "max": 3, "content": _C},
    {"type": "dispatch", "rules": [["<a", _C]], "excludes": ["!"]},
]


@pytest.mark.parametrize("data", _EVERY_FORMAT, ids=lambda d: d["type"])
def test_every_format_round_trips_through_pydantic_names(data):
    """model_validate_json / model_dump_json (xgrammar's formats are pydantic models,
    test_length_budget_pydantic_roundtrip) on every format class, and JSON that
    xgrammar's model of the same name reads back to an equal format."""
    from treegram.frontends.structural_tag._formats import _FORMAT_CLASSES, parse_format

    cls = _FORMAT_CLASSES[data["type"]]
    fmt = parse_format(data)
    assert type(fmt) is cls
    text = fmt.model_dump_json()
    assert cls.model_validate_json(text) == fmt
    assert cls.model_validate_json(text.encode()) == fmt
    assert cls.model_validate(fmt.model_dump()) == fmt
    assert cls.model_validate({k: v for k, v in data.items() if k != "type"}) == fmt
    tag = tg.StructuralTag(format=fmt)
    assert tg.StructuralTag.model_validate_json(tag.model_dump_json()) == tag
    xsx = pytest.importorskip("xgrammar.structural_tag")
    theirs = getattr(xsx, cls.__name__).model_validate_json(text)
    assert cls.model_validate_json(theirs.model_dump_json()) == fmt


def test_every_format_type_has_a_round_trip_case():
    from treegram.frontends.structural_tag._formats import _FORMAT_CLASSES

    assert {d["type"] for d in _EVERY_FORMAT} == set(_FORMAT_CLASSES)


def test_model_validate_refusals():
    with pytest.raises(InvalidStructuralTagError, match="AnyTextFormat.type must be 'any_text'"):
        AnyTextFormat.model_validate_json('{"type": "const_string", "value": "a"}')
    with pytest.raises(InvalidStructuralTagError, match="AnyTextFormat JSON is not valid JSON"):
        AnyTextFormat.model_validate_json("{nope")
    with pytest.raises(InvalidStructuralTagError, match="must be str or bytes, got dict"):
        AnyTextFormat.model_validate_json({"type": "any_text"})
    with pytest.raises(InvalidStructuralTagError, match="max_tokens"):
        AnyTextFormat.model_validate_json('{"max_tokens": -1}')
    with pytest.raises(InvalidStructuralTagError, match="model_validate_json for text"):
        tg.StructuralTag.model_validate('{"type": "structural_tag"}')
    with pytest.raises(InvalidStructuralTagError, match="StructuralTag JSON is not valid JSON"):
        tg.StructuralTag.model_validate_json("[")


@pytest.mark.parametrize("model", tg.structural_tag.builtin_structural_tag_models())
def test_recorded_ir_facts_are_what_a_walk_finds(model):
    # the frontend records depth, referenced rules and longest repetition from the embedded
    # grammars' facts and a walk of its own rules; a walk over the whole IR finds the same
    from treegram.frontends import structural_tag_to_ir
    from treegram.ir import ir_facts

    schema = {
        "type": "object",
        "properties": {
            # minimax_m3's XML arguments take no string formats
            "when": {
                "type": "string",
                **({} if model == "minimax_m3" else {"format": "date-time"}),
            },
            "n": {"type": "array", "items": {"type": "integer"}, "maxItems": 70},
            "tree": {"$ref": "#"},
        },
        "required": ["when"],
    }
    tools = [
        {"type": "function", "function": {"name": f"f{i}", "parameters": schema}} for i in range(2)
    ]
    from treegram.frontends.structural_tag import _convert

    # a free text's facts are walked once per shape, then taken from the process's table:
    # the first build finds its shapes' facts, the second reuses them
    _convert._FREE_TEXT_SHAPES.clear()
    for _ in range(2):
        ir = structural_tag_to_ir(tg.get_model_structural_tag(model, tools=tools))
        recorded = ir.__dict__.pop("_facts")
        assert recorded == ir_facts(ir)
        assert recorded.longest_repeat > 60  # the maxItems bound, from the embedded grammar
    assert _convert._FREE_TEXT_SHAPES or model == "harmony"


def test_free_text_facts_taken_from_the_shape_table_are_what_a_walk_finds():
    # a tag whose deepest rules and longest repetition are its free text's: the facts
    # recorded for a free text (walked the first time, from the table the second) decide
    from treegram.frontends import structural_tag_to_ir
    from treegram.frontends.structural_tag import _convert
    from treegram.ir import GrammarIR, ir_facts

    tags = [
        {"begin": "<a>", "content": {"type": "const_string", "value": "x"}, "end": "</a>"},
        {"begin": "<b>", "content": {"type": "regex", "pattern": "[0-9]+"}, "end": "</b>"},
    ]
    fmt = {"type": "triggered_tags", "triggers": ["<a", "<b"], "tags": tags}
    _convert._FREE_TEXT_SHAPES.clear()
    for _ in range(2):
        ir = structural_tag_to_ir({"type": "structural_tag", "format": fmt})
        recorded = ir.__dict__.pop("_facts")
        assert recorded == ir_facts(ir)
        assert recorded.depth == max(
            ir_facts(GrammarIR((r,), r.name)).depth for r in ir.rules if "_text" in r.name
        )
    assert len(_convert._FREE_TEXT_SHAPES) == 1


# ------------------------------------------------- free text: inner states inlined
def _text_rules(tag) -> int:
    from treegram.frontends import structural_tag_to_ir

    return sum("_text" in r.name for r in structural_tag_to_ir(tag).rules)


def _strings_of(value) -> list[str]:
    """Every string inside a structural tag's JSON form (begins, ends, triggers, excludes)."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings_of(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings_of(v)]
    return []


@pytest.mark.parametrize("model", ["minimax_m3", "cohere", "deepseek_v3_2", "kimi_k3"])
def test_free_text_with_inlined_states_matches_xgrammar_and_one_rule_per_state(model, monkeypatch):
    # A free text writes the states that only one edge leads to (the inner bytes of long
    # excluded strings) inside the body of the state before them. Walked on a vocabulary
    # of the tag's strings cut into pieces (so walks run deep into the excluded strings),
    # its masks equal xgrammar's and those of the plain build, one rule per automaton state.
    import random

    from treegram.frontends.structural_tag import _convert

    xgr = pytest.importorskip("xgrammar")
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": WEATHER}}]
    tag = tg.get_model_structural_tag(model, tools=tools)
    words = {" ", "\n", "a", "Oslo", '"', "{", "}", ":", ",", "get_weather", "city"}
    for text in _strings_of(tag.model_dump()):
        for size in (1, 2, 3):
            words.update(text[i : i + size] for i in range(len(text)))
        words.add(text)
    vocab = sorted(words) + ["</s>"]
    _, tc, xc, stop = small_compilers(xgr, vocab)
    theirs = xc.compile_structural_tag(json.dumps(tag.model_dump()))
    inlined, n_inlined = tc.compile_structural_tag(tag), _text_rules(tag)
    monkeypatch.setattr(_convert, "_MAX_INLINED_TEXT_STATES", 0)
    monkeypatch.setattr(_convert, "_FREE_TEXT_SHAPES", {})  # facts of the plain rules
    fresh = tg.GrammarCompiler(tc.tokenizer_info, max_threads=1, cache_enabled=False)
    plain, n_plain = fresh.compile_structural_tag(tag), _text_rules(tag)
    assert 2 * n_inlined < n_plain  # the shortcut is taken
    encoded = [w.encode() for w in vocab]
    for seed in range(6):
        for ours in (inlined, plain):
            small_walk_matches(
                xgr, ours, theirs, encoded, stop, random.Random(seed), 300, (model, seed)
            )
