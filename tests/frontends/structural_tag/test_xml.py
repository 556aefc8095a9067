"""XML argument styles of ``JSONSchemaFormat`` (treegram/frontends/structural_tag/_xml.py).

Hand-written tool-call arguments are accepted or rejected as written here and as xgrammar
0.2.8 decides; masks equal xgrammar's bit for bit along random paths on a small vocabulary
of XML pieces. (tests/frontends/structural_tag/test_builtin.py checks the models' tool-call
formats on the DeepSeek-V4 vocabulary.)
"""

from __future__ import annotations

import json
import random

import pytest
from xgrammar_diff import compare_source, small_compilers, small_walk_matches

import treegram as tg
from treegram.errors import InvalidStructuralTagError, UnsupportedStructuralTagError
from treegram.testing import _is_grammar_accept_string

WEATHER = {
    "type": "object",
    "properties": {
        "city": {"type": "string"},
        "days": {"type": "integer"},
        "unit": {"enum": ["C", "F"]},
        "where": {"type": "object", "properties": {"lat": {"type": "number"}}},
    },
    "required": ["city", "days"],
}
DS = "\uff5cDSML\uff5c"


def _tag(style: str, schema, **kw) -> dict:
    fmt = {"type": "json_schema", "json_schema": schema, "style": style, **kw}
    return {"type": "structural_tag", "format": fmt}


# (style, schema, [(arguments, accepted)])
CASES = [
    (
        "qwen_xml",
        WEATHER,
        [
            ("<parameter=city>Paris, France</parameter><parameter=days>3</parameter>", True),
            ("\n<parameter=city>\n  Paris </parameter>\n<parameter=days> 3\n</parameter>\n", True),
            ("<parameter=city>P</parameter><parameter=days>3</parameter>"
             "<parameter=unit>F</parameter>", True),
            ("<parameter=city>P</parameter><parameter=days>3</parameter>"
             '<parameter=where>{"lat": 1.5}</parameter>', True),
            ("<parameter=city><b>bold</b> text</parameter><parameter=days>3</parameter>", True),
            # order, required, value types, closing tags, unknown keys
            ("<parameter=days>3</parameter><parameter=city>P</parameter>", False),
            ("<parameter=city>P</parameter>", False),
            ("<parameter=city>P</parameter><parameter=days>three</parameter>", False),
            ("<parameter=city>P</parameter><parameter=days>3.0</parameter>", False),
            ("<parameter=city>P</parameter></parameter><parameter=days>3</parameter>", False),
            ("<parameter=city>P</parameter><parameter=days>3</parameter>"
             "<parameter=unit>K</parameter>", False),
            ("<parameter=city>P</parameter><parameter=days>3</parameter>"
             "<parameter=x>1</parameter>", False),
            ('<parameter=city>"P"</parameter><parameter=days>3</parameter>'
             "<parameter=where>lat=1</parameter>", False),
            ('{"city": "P", "days": 3}', False),
        ],
    ),
    (
        "qwen_xml",
        {"type": "object", "properties": {"a": {"type": "string"}}, "additionalProperties": True},
        [
            ("<parameter=a>x</parameter><parameter=extra_1>anything</parameter>", True),
            ('<parameter=b>[1, 2]</parameter><parameter=c>{"k": null}</parameter>', True),
            ("", True),
            ("<parameter=1bad>x</parameter>", False),
        ],
    ),
    (
        "minimax_xml",
        WEATHER,
        [
            ('<parameter name="city">Oslo</parameter><parameter name="days">2</parameter>', True),
            ('<parameter name="city">Oslo</parameter>\n<parameter name="days">2</parameter>', True),
            ("<parameter=city>Oslo</parameter><parameter=days>2</parameter>", False),
            ('<parameter name="city">Oslo</parameter><parameter name="days">"2"</parameter>',
             False),
        ],
    ),
    (
        "glm_xml",
        WEATHER,
        [
            ("<arg_key>city</arg_key><arg_value>Oslo</arg_value>"
             "<arg_key>days</arg_key>\n<arg_value>2</arg_value>", True),
            ("<arg_key>city</arg_key><arg_value>Oslo</arg_value>"
             "<arg_key>days</arg_key><arg_value>x</arg_value>", False),
            ("<arg_key>city</arg_key>Oslo</arg_value><arg_key>days</arg_key>"
             "<arg_value>2</arg_value>", False),
        ],
    ),
    (
        "deepseek_xml",
        {
            "type": "object",
            "properties": {
                "q": {"type": "string"},
                "n": {"type": ["integer", "null"]},
                "v": {"anyOf": [{"type": "string"}, {"type": "boolean"}]},
            },
            "required": ["q"],
        },
        [
            (f'<{DS}parameter name="q" string="true">rain?</{DS}parameter>', True),
            (f'<{DS}parameter name="q" string="true"> rain </{DS}parameter>'
             f'<{DS}parameter name="n" string="false"> 5 </{DS}parameter>', True),
            (f'<{DS}parameter name="q" string="true">a</{DS}parameter>'
             f'<{DS}parameter name="v" string="false">true</{DS}parameter>', True),
            (f'<{DS}parameter name="q" string="true">a</{DS}parameter>'
             f'<{DS}parameter name="v" string="true">true</{DS}parameter>', True),
            (f'<{DS}parameter name="q" string="false">rain?</{DS}parameter>', False),
            (f'<{DS}parameter name="q" string="true">a</{DS}parameter>'
             f'<{DS}parameter name="n" string="true">5</{DS}parameter>', False),
            (f'<{DS}parameter name="q" string="true">a</{DS}parameter>'
             f'<{DS}parameter name="v" string="false">yes</{DS}parameter>', False),
        ],
    ),
    (
        "deepseek_v4_1_xml",
        WEATHER,
        [
            (f'<{DS} parameter name="city" string="true">Oslo</{DS} parameter>'
             f'<{DS} parameter name="days" string="false">2</{DS} parameter>', True),
            (f'<{DS}parameter name="city" string="true">Oslo</{DS}parameter>'
             f'<{DS}parameter name="days" string="false">2</{DS}parameter>', False),
        ],
    ),
    (
        "kimi_k3_xml",
        WEATHER,
        [
            ('<|open|>argument key="city" type="string"<|sep|>Oslo<|close|>argument<|sep|>'
             '<|open|>argument key="days" type="number"<|sep|>2<|close|>argument<|sep|>', True),
            ('<|open|>argument key="city" type="string"<|sep|>Oslo<|close|>argument<|sep|>'
             '<|open|>argument key="days" type="integer"<|sep|>2<|close|>argument<|sep|>', False),
        ],
    ),
    (
        "qwen_xml",
        {
            "type": "object",
            "properties": {
                "when": {"type": "string", "format": "date"},
                "code": {"type": "string", "pattern": "^[A-Z]{3}$"},
                "tag": {"type": "string", "maxLength": 3},
                "ref": {"$ref": "#/$defs/Level"},
            },
            "$defs": {"Level": {"type": "integer", "minimum": 1, "maximum": 5}},
        },
        [
            ("<parameter=when>2024-02-29</parameter><parameter=code>OSL</parameter>", True),
            ("<parameter=tag>abc</parameter><parameter=ref>5</parameter>", True),
            ("<parameter=when>2024-13-01</parameter>", False),
            ("<parameter=code>osl</parameter>", False),
            ("<parameter=tag>abcd</parameter>", False),
            ("<parameter=ref>6</parameter>", False),
        ],
    ),
    (
        "deepseek_v4_1_xml",
        {
            "type": "object",
            "$defs": {
                "V": {"anyOf": [{"const": "fixed"}, {"$ref": "#/$defs/W"}]},
                "W": {"oneOf": [{"type": "integer", "minimum": 1}, {"$ref": "#/$defs/V"}]},
            },
            "properties": {"a": {"$ref": "#/$defs/V"}, "b": {"$ref": "#/$defs/W"}},
            "required": ["a"],
        },
        [
            (f'<{DS} parameter name="a" string="true">fixed</{DS} parameter>', True),
            (f'<{DS} parameter name="a" string="false"> 2 </{DS} parameter>'
             f'<{DS} parameter name="b" string="true">fixed</{DS} parameter>', True),
            (f'<{DS} parameter name="a" string="false">fixed</{DS} parameter>', False),
            (f'<{DS} parameter name="a" string="true">2</{DS} parameter>', False),
            (f'<{DS} parameter name="a" string="false">0</{DS} parameter>', False),
        ],
    ),
    (
        "kimi_k3_xml",
        {
            "type": "object",
            "properties": {"name": {"type": "string"}},
            "patternProperties": {"^x_[a-z]+$": {"type": "integer"}},
        },
        [
            ('<|open|>argument key="name" type="string"<|sep|>n<|close|>argument<|sep|>'
             '<|open|>argument key="x_ab" type="number"<|sep|>3<|close|>argument<|sep|>', True),
            ('<|open|>argument key="x_ab" type="string"<|sep|>3<|close|>argument<|sep|>', False),
            ('<|open|>argument key="y_ab" type="number"<|sep|>3<|close|>argument<|sep|>', False),
        ],
    ),
    (
        "glm_xml",
        {"type": "object", "propertyNames": {"pattern": "^[a-z_]+$"}},
        [
            ("<arg_key>x_key</arg_key><arg_value>v</arg_value>", True),
            ("<arg_key>x_key</arg_key><arg_value>[1]</arg_value>", True),
            ("<arg_key>Bad</arg_key><arg_value>v</arg_value>", False),
        ],
    ),
    (
        "qwen_xml",  # constants are written as xgrammar writes JSON numbers
        {"type": "object", "properties": {"b": {"enum": [0.1, 2.0, {"k": "\u00e9", "n": 1.0}]}}},
        [
            ("<parameter=b>0.10000000000000001</parameter>", True),
            ("<parameter=b>2</parameter>", True),
            ('<parameter=b>{"k":"\u00e9","n":1}</parameter>', True),
            ("<parameter=b>0.1</parameter>", False),
            ("<parameter=b>2.0</parameter>", False),
        ],
    ),
    (
        "cohere_xml",
        {
            "type": "object",
            "properties": {
                "q": {"type": "string"},
                "n": {"type": ["integer", "null"]},
                "opts": {"type": "object", "properties": {"a&b": {"type": "boolean"}}},
                "ids": {"type": "array", "items": {"type": "integer"}, "maxItems": 2},
                "any": {},
            },
            "required": ["q"],
            "additionalProperties": {"type": "string"},
        },
        [
            ('<cofl:value name="q" type="raw">rain?</cofl:value>', True),
            ('<cofl:value name="q" type="raw">a</cofl:value> <cofl:value name="n" type="json"> 5 '
             '</cofl:value><cofl:value name="n" type="json">null</cofl:value>', False),
            ('<cofl:value name="q" type="raw">a</cofl:value><cofl:value name="n" type="json">'
             '5</cofl:value>', True),
            ('<cofl:value name="q" type="raw">a</cofl:value><cofl:value name="opts" type="dict">'
             '<cofl:value name="a&amp;b" type="json">true</cofl:value></cofl:value>', True),
            ('<cofl:value name="q" type="raw">a</cofl:value><cofl:value name="opts" type="dict">'
             '<cofl:value name="a&b" type="json">true</cofl:value></cofl:value>', False),
            ('<cofl:value name="q" type="raw">a</cofl:value><cofl:value name="ids" type="list">'
             '<cofl:value type="json">1</cofl:value><cofl:value type="json">2</cofl:value>'
             '</cofl:value>', True),
            ('<cofl:value name="q" type="raw">a</cofl:value><cofl:value name="ids" type="list">'
             '[1, 2]</cofl:value>', False),
            ('<cofl:value name="q" type="raw">a</cofl:value><cofl:value name="any" type="list">'
             '<cofl:value type="raw">x</cofl:value></cofl:value>', True),
            ('<cofl:value name="q" type="raw">a</cofl:value>'
             '<cofl:value name="other" type="raw">x</cofl:value>', True),
            ('<cofl:value name="q" type="raw">a</cofl:value>'
             '<cofl:value name="other" type="json">1</cofl:value>', False),
            ('<cofl:value name="q" type="json">"a"</cofl:value>', False),
        ],
    ),
    (
        "minimax_m3_xml",
        {
            "type": "object",
            "properties": {
                "q": {"type": "string"},
                "n": {"type": "integer"},
                "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 2},
                "pos": {"type": "object", "properties": {"x": {"type": "number"}}},
                "mode": {"const": {"a": [1, "b"]}},
            },
            "required": ["q"],
        },
        [
            ("]<]minimax[>[<q>rain?]<]minimax[>[</q>", True),
            ("\n]<]minimax[>[<q>a]<]minimax[>[</q>\n]<]minimax[>[<n>5]<]minimax[>[</n>\n", True),
            ("]<]minimax[>[<q>a]<]minimax[>[</q>]<]minimax[>[<tags> ]<]minimax[>[<item>x"
             "]<]minimax[>[</item> ]<]minimax[>[</tags>", True),
            ("]<]minimax[>[<q>a]<]minimax[>[</q>]<]minimax[>[<tags>]<]minimax[>[</tags>", True),
            ("]<]minimax[>[<q>a]<]minimax[>[</q>]<]minimax[>[<pos>]<]minimax[>[<x>1.5"
             "]<]minimax[>[</x>]<]minimax[>[</pos>", True),
            ("]<]minimax[>[<q>a]<]minimax[>[</q>]<]minimax[>[<mode>]<]minimax[>[<a>"
             "]<]minimax[>[<item>1]<]minimax[>[</item>]<]minimax[>[<item>b]<]minimax[>[</item>"
             "]<]minimax[>[</a>]<]minimax[>[</mode>", True),
            ("]<]minimax[>[<q>a]<]minimax[>[</q>]<]minimax[>[<n>x]<]minimax[>[</n>", False),
            ("]<]minimax[>[<q> a ]<]minimax[>[<q>", False),
            ("]<]minimax[>[<n>5]<]minimax[>[</n>", False),
            ("]<]minimax[>[<q>a]<]minimax[>[</q>]<]minimax[>[<pos>{\"x\": 1}"
             "]<]minimax[>[</pos>", False),
        ],
    ),
    (
        "minimax_xml",
        {"enum": [{"s": "hi"}, {"n": 4}]},
        [
            ('<parameter name="s">hi</parameter>', True),
            ('\n<parameter name="n"> 4 </parameter>\n', True),
            ('<parameter name="s">hi</parameter><parameter name="n">4</parameter>', False),
            ('{"s": "hi"}', False),
        ],
    ),
    (
        "qwen_xml",
        {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
         "required": ["a", "b"]},
        [
            ("<parameter=b>1</parameter><parameter=a>2</parameter>", True),
            ("<parameter=a>1</parameter>", False),
        ],
    ),
]  # fmt: skip
# the last case is compiled with any_order=True

EXCLUDES_SCHEMA = {
    "type": "object",
    "properties": {
        "note": {"type": "string", "maxLength": 3},  # the bound is dropped, as in xgrammar
        "mode": {"enum": ["fast", "<|x|>slow"]},
        "n": {"type": "integer"},
        "bad<|": {"type": "string"},  # a name holding an excluded string is never written
    },
    "required": ["note"],
    "additionalProperties": {"type": "boolean"},
}
EXCLUDES_CASES = [
    ('<|open|>argument key="note" type="string"<|sep|>a long note<|close|>argument<|sep|>', True),
    ('<|open|>argument key="note" type="string"<|sep|>a <|x|> b<|close|>argument<|sep|>', False),
    ('<|open|>argument key="note" type="string"<|sep|>a<|close|>argument<|sep|>'
     '<|open|>argument key="mode" type="string"<|sep|>fast<|close|>argument<|sep|>', True),
    ('<|open|>argument key="note" type="string"<|sep|>a<|close|>argument<|sep|>'
     '<|open|>argument key="mode" type="string"<|sep|><|x|>slow<|close|>argument<|sep|>', False),
    ('<|open|>argument key="note" type="string"<|sep|>a<|close|>argument<|sep|>'
     '<|open|>argument key="extra" type="boolean"<|sep|>true<|close|>argument<|sep|>', True),
]  # fmt: skip


def test_excludes_keep_marker_strings_out_of_values_and_names():
    tag = _tag("kimi_k3_xml", EXCLUDES_SCHEMA, excludes=["<|x|>", "<|"])
    _accepts_as_xgrammar_does(tag, EXCLUDES_CASES)


def _k3(key: str, kind: str, value: str) -> str:
    return f'<|open|>argument key="{key}" type="{kind}"<|sep|>{value}<|close|>argument<|sep|>'


def _one(value_schema, required: bool = True) -> dict:
    return {
        "type": "object",
        "properties": {"v": value_schema},
        "required": ["v"] if required else [],
        "additionalProperties": False,
    }


_NODE = {
    "$defs": {
        "node": {
            "type": "object",
            "properties": {"next": {"$ref": "#/$defs/node"}},
            "additionalProperties": True,
        }
    }
}
_QW = "<parameter=v>{}</parameter>"
_DS41 = f'<{DS} parameter name="v" string="{{}}">{{}}</{DS} parameter>'

# JSON Schema excludes inside the JSON values of XML arguments:
# (style, schema, excludes, [(arguments, accepted)]), as written here and as xgrammar decides.
JSON_EXCLUDES_CASES = [
    # strings and keys of a JSON value, matched as written (an escape is not the text)
    ("kimi_k3_xml", _one({"type": "object"}), ["BAD"], [
        (_k3("v", "object", '{"a": "x"}'), True),
        (_k3("v", "object", '{"a": "xBADy"}'), False),
        (_k3("v", "object", '{"BAD": 1}'), False),
        (_k3("v", "object", '{"a": "\\u0042AD"}'), True),
        (_k3("v", "object", '{"a": ["ok", {"b": "BAD"}]}'), False),
    ]),
    # recursive references, the control tokens of Kimi-K3
    ("kimi_k3_xml", {**_one({"type": "array", "items": {"$ref": "#/$defs/node"}}), **_NODE},
     ["<|open|>", "<|close|>", "<|sep|>"], [
        (_k3("v", "array", '[{"next": {"text": "你好", "n": 42}}]'), True),
        (_k3("v", "array", '[{"next": {"text": "a<|open|>b"}}]'), False),
        (_k3("v", "array", '[{"next": {"a<|close|>b": "t"}}]'), False),
    ]),
    # an unconstrained value: raw text or any JSON value, filtered both ways
    ("kimi_k3_xml", _one({}), ["BAD"], [
        (_k3("v", "string", "xBADy"), False),
        (_k3("v", "string", "ok"), True),
        (_k3("v", "array", '["BAD"]'), False),
        (_k3("v", "array", '["ok", 1]'), True),
        (_k3("v", "number", "1"), True),
    ]),
    ("deepseek_v4_1_xml", _one({}), ["BAD"], [
        (_DS41.format("false", '["BAD"]'), False),
        (_DS41.format("false", '{"k": "ok"}'), True),
        (_DS41.format("true", "BAD"), False),
    ]),
    ("qwen_xml", _one({"type": "array", "items": {"type": "string"}}), ["</parameter>"], [
        (_QW.format('["ok"]'), True),
        (_QW.format('["</parameter>"]'), False),
        (_QW.format('["<\\/parameter>"]'), True),
    ]),
    # object and array constants: dropped when one of their strings, as JSON writes it,
    # holds an excluded text (a text never spans two strings)
    ("qwen_xml", _one({"enum": [{"a": "b"}, ["x", {"k": "BAD"}], 7]}), ["BAD", ":"], [
        (_QW.format('{"a":"b"}'), True),
        (_QW.format('["x",{"k":"BAD"}]'), False),
        (_QW.format("7"), True),
    ]),
    ("qwen_xml", _one({"enum": [{"a": 'x"y'}, 7]}), ["\\"], [
        (_QW.format('{"a":"x\\"y"}'), False),
        (_QW.format("7"), True),
    ]),
    ("qwen_xml", _one({"enum": [{"a": 'x"y'}, 7]}), ['x"y'], [
        (_QW.format('{"a":"x\\"y"}'), True),
    ]),
    # no constant left: the value admits nothing; an optional parameter can be left out
    ("qwen_xml", _one({"const": {"a": "BAD"}}), ["BAD"], [
        (_QW.format('{"a":"BAD"}'), False),
        ("", False),
    ]),
    ("qwen_xml", _one({"const": {"a": "BAD"}}, required=False), ["BAD"], [
        (_QW.format('{"a":"BAD"}'), False),
        ("", True),
    ]),
    ("kimi_k3_xml", _one({"anyOf": [{"const": "BAD"}, {"const": "safe"}]}), ["BAD"], [
        (_k3("v", "string", "safe"), True),
        (_k3("v", "string", "BAD"), False),
    ]),
    # a required name holding an excluded string: no argument object
    ("deepseek_v4_1_xml", {"type": "object", "properties": {"xBADy": {"type": "integer"}},
                           "required": ["xBADy"], "additionalProperties": False}, ["BAD"], [
        ("", False),
        (f'<{DS} parameter name="xBADy" string="false">1</{DS} parameter>', False),
    ]),
    # further parameter names are identifiers without an excluded string; names under a
    # pattern are the schema's own contract and kept as they are
    ("qwen_xml", {"type": "object", "properties": {"a": {"type": "integer"}},
                  "additionalProperties": {"type": "integer"}}, ["b_d", "-"], [
        ("<parameter=a>1</parameter><parameter=xa>1</parameter>", True),
        ("<parameter=a>1</parameter><parameter=xb_dy>1</parameter>", False),
        ("<parameter=a>1</parameter><parameter=b_>1</parameter>", True),
    ]),
    ("kimi_k3_xml", {"type": "object", "additionalProperties": True}, ["bad"], [
        (_k3("good", "number", "1"), True),
        (_k3("xbady", "number", "1"), False),
    ]),
    ("qwen_xml", {"type": "object", "properties": {"a": {"type": "integer"}},
                  "patternProperties": {"^x[a-z]*$": {"type": "integer"}},
                  "additionalProperties": False}, ["bad"], [
        ("<parameter=a>1</parameter><parameter=xa>1</parameter>", True),
        ("<parameter=a>1</parameter><parameter=xbad>1</parameter>", True),
    ]),
    ("qwen_xml", {"type": "object", "propertyNames": {"pattern": "^x[a-z]*$"},
                  "additionalProperties": {"type": "integer"}}, ["bad"], [
        ("<parameter=xbad>1</parameter>", True),
        ("<parameter=ybad>1</parameter>", False),
    ]),
]  # fmt: skip


@pytest.mark.parametrize("i", range(len(JSON_EXCLUDES_CASES)))
def test_json_value_excludes_as_written_and_as_xgrammar_does(i):
    style, schema, excludes, inputs = JSON_EXCLUDES_CASES[i]
    _accepts_as_xgrammar_does(_tag(style, schema, excludes=excludes), inputs)


def test_json_value_excludes_keep_length_bounds_exact():
    # xgrammar drops minLength/maxLength of a filtered JSON string (with a warning);
    # treegram keeps them: the string's spellings minus the excluded texts.
    items = {"type": "string", "minLength": 2, "maxLength": 3}
    schema = _one({"type": "array", "items": items})
    grammar = tg.Grammar.from_structural_tag(_tag("qwen_xml", schema, excludes=["BAD"]))
    for value, accepted in [("a", False), ("ab", True), ("abc", True), ("abcd", False),
                            ("BAD", False), ("aBA", True), ("你好", True)]:  # fmt: skip
        text = _QW.format(json.dumps([value], ensure_ascii=False))
        assert _is_grammar_accept_string(grammar, text) == accepted, value


@pytest.mark.parametrize(
    "style,excludes",
    [("kimi_k3_xml", ["<|open|>", "<|close|>", "<|sep|>"]), ("deepseek_v4_1_xml", ["BAD", "</"])],
)
def test_json_value_excludes_masks_match_xgrammar_on_deepseek_v4(infos, style, excludes):
    # kimi_k3's default exclude_special_tokens=True puts its control tokens on every
    # argument, JSON values included; masks equal xgrammar's along random walks
    xgr = pytest.importorskip("xgrammar")
    schema = {
        "type": "object",
        "properties": {
            "q": {"type": "object", "properties": {"t": {"type": "string"}}, "required": ["t"]},
            "tags": {"type": "array", "items": {"type": "string"}},
            "note": {"type": "string"},
        },
        "required": ["q"],
    }
    source = json.dumps(_tag(style, schema, excludes=excludes))
    compare_source(infos, xgr, "compile_structural_tag", source, style, steps=150, utf8_only=True)


IDS = [f"{c[0]}-{i}" for i, c in enumerate(CASES)]


def _options(i: int) -> dict:
    return {"any_order": True} if i == len(CASES) - 1 else {}


@pytest.mark.parametrize("i", range(len(CASES)), ids=IDS)
def test_arguments_accepted_as_written_and_as_xgrammar_does(i):
    style, schema, inputs = CASES[i]
    _accepts_as_xgrammar_does(_tag(style, schema, **_options(i)), inputs)


def _accepts_as_xgrammar_does(tag: dict, inputs: list) -> None:
    """Each ``(text, accepted)`` of ``inputs``: treegram and xgrammar both agree with it."""
    ours = tg.Grammar.from_structural_tag(tag)
    xgr = pytest.importorskip("xgrammar")
    theirs = xgr.Grammar.from_structural_tag(json.dumps(tag))
    from xgrammar.testing import _is_grammar_accept_string as xgr_accepts

    for text, accepted in inputs:
        assert _is_grammar_accept_string(ours, text) == accepted, text
        assert xgr_accepts(theirs, text) == accepted, text


def test_unconstrained_arguments_are_any_parameter_list():
    for schema in ({}, True, {"type": "object"}, {"$defs": {"A": {}}, "$ref": "#/$defs/A"}):
        grammar = tg.Grammar.from_structural_tag(_tag("qwen_xml", schema))
        for text in ("", "<parameter=t>raw</parameter> <parameter=d>[1, null]</parameter>"):
            assert _is_grammar_accept_string(grammar, text), (schema, text)
        for text in ("raw", '{"t": "raw"}', "<parameter=t>unclosed"):
            assert not _is_grammar_accept_string(grammar, text), (schema, text)


# ---------------------------------------------------------------- masks, small vocabulary
SMALL_VOCAB = [
    s.encode()
    for s in [
        "<parameter=", "<parameter name=\"", "\">", "</parameter>", "</", "param", "eter>",
        "city", "days", "unit", "where", ">", "<", "O", "slo", " ", "\n", "1", "2", ".", "5",
        "C", "F", '{"', 'lat"', ":", "}", "null", "<arg_key>", "</arg_key>", "<arg_value>",
        "</arg_value>", f'<{DS}parameter name="', f"</{DS}parameter>", '" string="',
        "true", "false", '">', "a", "é", "<cofl:value", ' name="', ' type="', "raw", "json",
        "dict", "</cofl:value>", "</s>",
    ]
]  # fmt: skip


@pytest.fixture(scope="module")
def small():
    return small_compilers(pytest.importorskip("xgrammar"), SMALL_VOCAB)


@pytest.mark.parametrize(
    "style",
    ["qwen_xml", "minimax_xml", "glm_xml", "deepseek_xml", "deepseek_v4_1_xml", "cohere_xml"],
)
def test_masks_match_xgrammar_on_random_paths(small, style):
    xgr, tc, xc, stop = small
    for schema in (WEATHER, {"type": "object", "additionalProperties": {"type": "integer"}}):
        tag = _tag(style, schema)
        ours = tc.compile_structural_tag(tag)
        theirs = xc.compile_structural_tag(json.dumps(tag))
        r = random.Random(style)
        for _ in range(6):
            small_walk_matches(xgr, ours, theirs, SMALL_VOCAB, stop, r, 30, (style, schema))


# ---------------------------------------------------------------- errors
@pytest.mark.parametrize(
    "fmt,error,match",
    [
        (
            {"style": "cohere_xml", "excludes": ["x"]},
            InvalidStructuralTagError,
            r"format\.excludes is not supported for cohere_xml",
        ),
        (
            {"style": "minimax_m3_xml", "json_schema": {}},
            InvalidStructuralTagError,
            r"minimax_m3_xml does not support unconstrained schemas",
        ),
        (
            {
                "style": "minimax_m3_xml",
                "json_schema": {
                    "type": "object",
                    "properties": {"s": {"type": "string", "minLength": 1}},
                },
            },
            InvalidStructuralTagError,
            r"String pattern, recognized format, and length constraints are not supported",
        ),
        (
            {
                "style": "minimax_m3_xml",
                "json_schema": {
                    "type": "object",
                    "properties": {
                        "a": {"type": "array", "items": {"type": "integer"}, "minItems": 2**31}
                    },
                },
            },
            InvalidStructuralTagError,
            r"minItems must not exceed 2\*\*31 - 1",
        ),
        (
            {
                "style": "minimax_m3_xml",
                "json_schema": {"type": "object", "additionalProperties": True},
            },
            InvalidStructuralTagError,
            r"requires fixed object property names",
        ),
        ({"style": "yaml"}, InvalidStructuralTagError, r"format\.style must be one of"),
        (
            {"style": "qwen_xml", "excludes": ["x "]},
            InvalidStructuralTagError,
            r"format\.excludes: XML styles need non-empty strings that must not start or end",
        ),
        (
            {
                "style": "qwen_xml",
                "json_schema": {
                    "type": "object",
                    "properties": {"a": {"$ref": "#/$defs/A"}},
                    "$defs": {"A": {"$ref": "#/$defs/A"}},
                },
            },
            UnsupportedStructuralTagError,
            r"a \$ref cycle through '#/\$defs/A' with no value",
        ),
        (
            {"style": "qwen_xml", "json_schema": {"type": "object", "dependentRequired": {}}},
            UnsupportedStructuralTagError,
            r"keyword\(s\) \['dependentRequired'\] on the argument object",
        ),
    ],
)
def test_refused_styles_and_schemas(fmt, error, match):
    value = {"type": "json_schema", "json_schema": WEATHER, **fmt}
    with pytest.raises(error, match=match):
        tg.Grammar.from_structural_tag({"type": "structural_tag", "format": value})


# ---------------------------------------------------------------- property counts
def _p(key: str, value: int) -> str:
    return f"<parameter={key}>{value}</parameter>"


@pytest.mark.parametrize(
    "counts",
    [
        {"minProperties": 2},
        {"maxProperties": 1},
        {"minProperties": 1, "maxProperties": 2, "additionalProperties": True},
        {"minProperties": 1, "maxProperties": 1},
        {"maxProperties": 2, "required": ["b"], "any_order": True},
    ],
)
def test_property_counts_as_xgrammar(counts):
    counts = dict(counts)
    any_order = counts.pop("any_order", False)
    props = {k: {"type": "integer"} for k in "abc"}
    schema = {"type": "object", "properties": props, "additionalProperties": False, **counts}
    tag = _tag("qwen_xml", schema, any_order=any_order)
    ours = tg.Grammar.from_structural_tag(tag)
    xgr = pytest.importorskip("xgrammar")
    from xgrammar.testing import _is_grammar_accept_string as xgr_accepts

    theirs = xgr.Grammar.from_structural_tag(json.dumps(tag))
    texts = [
        "",
        _p("a", 1),
        _p("b", 1),
        _p("a", 1) + _p("b", 2),
        _p("b", 1) + _p("a", 2),
        _p("a", 1) + _p("b", 2) + _p("c", 3),
        _p("a", 1) + _p("z", 2),
        _p("b", 1) + _p("z", 1) + _p("y", 2),
    ]
    for text in texts:
        assert _is_grammar_accept_string(ours, text) == xgr_accepts(theirs, text), text


# Keys that are no JSON Schema keyword (Snowplow's "self", vendor extensions) constrain
# nothing, on the argument object and below it; xgrammar ignores them.
SELF_DESCRIBING = {
    "type": "object",
    "self": {"vendor": "com.example", "name": "weather", "format": "jsonschema"},
    "x-origin": "tool registry",
    "properties": {
        "city": {"type": "string", "x-ui": "text"},
        "days": {"type": "integer", "self": {"name": "days"}},
        "where": {"type": "object", "properties": {"lat": {"type": "number"}}, "x-map": True},
    },
    "required": ["city"],
    "additionalProperties": False,
}


@pytest.mark.parametrize("style", ["qwen_xml", "deepseek_v4_1_xml", "kimi_k3_xml", "glm_xml"])
def test_unknown_keywords_are_ignored_as_xgrammar_does(style):
    fmt = {
        "qwen_xml": ("<parameter={}>", "</parameter>"),
        "deepseek_v4_1_xml": (f'<{DS} parameter name="{{}}" string="{{}}">', f"</{DS} parameter>"),
        "kimi_k3_xml": ('<|open|>argument key="{}" type="{}"<|sep|>', "<|close|>argument<|sep|>"),
        "glm_xml": ("<arg_key>{}</arg_key><arg_value>", "</arg_value>"),
    }[style]

    def arg(name: str, value: str, kind: str = "string") -> str:
        if style == "deepseek_v4_1_xml":
            kind = "true" if kind == "string" else "false"
        elif kind == "integer":  # Kimi-K3 writes an integer's type as number
            kind = "number"
        return fmt[0].format(name, kind) + value + fmt[1]

    inputs = [
        (arg("city", "Oslo"), True),
        (arg("city", "Oslo") + arg("days", "3", "integer"), True),
        (arg("city", "Oslo") + arg("where", '{"lat": 1.5}', "object"), True),
        (arg("city", "Oslo") + arg("days", "x", "integer"), False),
        (arg("city", "Oslo") + arg("self", "x"), False),
        (arg("days", "3", "integer"), False),
    ]
    _accepts_as_xgrammar_does(_tag(style, SELF_DESCRIBING), inputs)
