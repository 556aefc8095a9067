"""String formats of the JSON Schema frontend: RFC 3987 IRIs and RFC 6531 mailboxes.

The installed ``jsonschema`` has no checker for ``iri`` / ``iri-reference`` (it needs the
``rfc3987`` package) and only checks for an ``@`` in ``idn-email``, so the instances
below are checked by hand against the RFCs' ABNF; the comment on each says which rule
decides it. Each instance is tried raw (UTF-8) and with ``\\uXXXX`` escapes.
"""

from __future__ import annotations

import functools
import json
import warnings

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from schema_matching import accepts, byte_compiler, compile_schema

from treegram import Grammar, GrammarError
from treegram.frontends.json_schema._convert import UnsupportedSchemaError, json_schema_to_ir


def compiled(schema):
    return compile_schema(schema)


IRI_VALID = [
    "http://例え.テスト/パス?クエリ=値#断片",  # ucschar in ireg-name, isegment, iquery
    "urn:isbn:0451450523",  # no authority, rootless path
    "file:/etc/hosts",  # absolute path
    "http://[2001:db8::1]:8080/",  # IPv6 literal and port
    "HTTP://[V7.a:b]/",  # IPvFuture, "v" is case-insensitive in ABNF
    "http://x/?\ue000",  # iprivate is allowed in iquery
    "http://x/\U00010348",  # a supplementary-plane ucschar in the path
    "mailto:ü@example.org",
]
IRI_INVALID = [
    "/relative",  # no scheme
    "ü:x",  # a scheme is ASCII letters
    "http://x/#\ue000",  # iprivate is not allowed in ifragment
    "http://x/\ue000",  # ... nor in a path
    "http://x/\ufffe",  # not a ucschar (FDF0-FFEF, then planes 1-14)
    "http://[ü]/",  # IP literals stay ASCII
    "http://x/a b",  # space
    "http://x/%g0",  # bad percent-encoding
]
IRI_REF_VALID = ["//例え/a", "../ü", "#ü", "", "?q=\ue000", "ü/a:b"]
IRI_REF_INVALID = ["#\ue000", "a\\b", "ü:x", "#a#b"]
IDN_EMAIL_VALID = [
    "δοκιμή@παράδειγμα.δοκιμή",  # UTF8-non-ascii in atext and in labels
    "用户@例子.广告",
    '"ü x"@example.com',  # ... and in qtextSMTP
    "a.b@[127.0.0.1]",
    "joe@[IPv6:::1]",
]
IDN_EMAIL_INVALID = ["ü@", "@例子.广告", "a@-ü.com", "a..ü@x.com", "a@ü_x.com", "a＠b.com", "ü"]


def _spellings(text: str) -> list[str]:
    return [json.dumps(text), json.dumps(text, ensure_ascii=False)]


@pytest.mark.parametrize(
    "fmt, valid, invalid",
    [
        ("iri", IRI_VALID, IRI_INVALID),
        ("iri-reference", IRI_VALID + IRI_REF_VALID, IRI_REF_INVALID),
        ("idn-email", IDN_EMAIL_VALID, IDN_EMAIL_INVALID),
    ],
)
def test_international_formats(fmt, valid, invalid):
    cg = compiled({"type": "string", "format": fmt})
    for inst in valid:
        for text in _spellings(inst):
            assert accepts(cg, text), (fmt, text)
    for inst in invalid:
        for text in _spellings(inst):
            assert not accepts(cg, text), (fmt, text)


def test_ascii_formats_stay_ascii():
    assert not accepts(compiled({"type": "string", "format": "uri"}), '"http://x/ü"')
    assert not accepts(compiled({"type": "string", "format": "email"}), '"ü@x.org"')
    assert accepts(compiled({"type": "string", "format": "uri"}), '"http://[V1.f]/"')


@pytest.mark.parametrize(
    "fmt, why",
    [
        ("regex", "context-free language"),
    ],
)
def test_refused_formats_say_why(fmt, why):
    # known formats that cannot be compiled exactly stay refused, whatever unknown_format
    # says (regex alone is a grammar of its own: refused beside other string keywords)
    for policy in ("warn", "ignore", "error"):
        for schema in (
            {"type": "string", "format": fmt, "maxLength": 5},
            {"type": "string", "format": fmt, "pattern": "^a"},
        ):
            with pytest.raises(UnsupportedSchemaError, match=why):
                json_schema_to_ir(schema, unknown_format=policy)


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "string", "format": "path"},
        {"type": "string", "format": "byte", "maxLength": 3},  # through the string automaton
        {"type": "string", "format": "url", "pattern": "^a"},
        {"properties": {"p": {"type": "string", "format": "expose"}}, "required": ["p"]},
    ],
)
def test_unknown_format_is_an_annotation_with_a_warning(schema):
    with pytest.warns(UserWarning, match=r"unknown JSON Schema format .* is an annotation"):
        cg = compile_schema(schema)
    inner = schema if "properties" not in schema else schema["properties"]["p"]
    wrap = (lambda t: t) if "properties" not in schema else (lambda t: '{"p": ' + t + "}")
    assert accepts(cg, wrap('"a/b"'))  # any string: the format asserts nothing
    assert not accepts(cg, wrap("1"))  # the rest of the schema still holds
    if "maxLength" in inner:
        assert not accepts(cg, wrap('"abcd"'))
    if "pattern" in inner:
        assert not accepts(cg, wrap('"ba"'))


def test_unknown_format_policies():
    schema = {"type": "string", "format": "no-such-format"}
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # "ignore" warns about nothing
        grammar = Grammar.from_json_schema(schema, unknown_format="ignore")
    assert grammar.to_ebnf() == Grammar.from_json_schema({"type": "string"}).to_ebnf()
    with pytest.raises(UnsupportedSchemaError, match="'format' at /format: unknown format"):
        json_schema_to_ir(schema, unknown_format="error")
    with pytest.raises(UnsupportedSchemaError, match="unknown format"):  # via the automaton
        json_schema_to_ir({**schema, "minLength": 2}, unknown_format="error")
    with pytest.warns(UserWarning, match="constraint dropped"):  # refusal downgraded
        json_schema_to_ir(schema, unknown_format="error", unsupported={"format"})
    for bad in ("refuse", None, True):
        with pytest.raises(GrammarError, match="unknown_format must be"):
            Grammar.from_json_schema(schema, unknown_format=bad)
        with pytest.raises(GrammarError, match="unknown_format must be"):
            byte_compiler().compile_json_schema(schema, unknown_format=bad)


FORMAT_ANNOTATION_CASES = [
    ({"type": "string", "format": "email"}, ["a@b.c", "no at sign", 5]),
    ({"type": "string", "format": "regex"}, ["^(a", "a+"]),  # refused when asserted
    ({"type": "string", "format": "idn-hostname", "maxLength": 3}, ["〮", "abcd", "ab"]),
    ({"not": {"type": "string", "format": "date"}}, ["2024-02-30", "2024-02-29", 1, None]),
    ({"oneOf": [{"format": "ipv4"}, {"type": "string", "maxLength": 4}]}, ["1.2.3.4", "abc", 7]),
    (
        {"properties": {"format": {"const": "uri"}}, "required": ["format"]},
        [{"format": "uri"}, {"format": "url"}, {}],  # a property named format still counts
    ),
    (
        {"$defs": {"d": {"format": "uuid", "minLength": 2}}, "items": {"$ref": "#/$defs/d"}},
        [["x"], ["xy"], ["123e4567-e89b-12d3-a456-426614174000"]],
    ),
]


@pytest.mark.parametrize("schema, instances", FORMAT_ANNOTATION_CASES)
def test_format_assertion_false_makes_every_format_an_annotation(schema, instances):
    # the oracle: jsonschema without a format checker (2020-12's default vocabulary)
    validator = jsonschema.Draft202012Validator(schema)
    cg = compile_schema(schema, format_assertion=False, strict_mode=False)
    for inst in instances:
        assert accepts(cg, json.dumps(inst)) == validator.is_valid(inst), (schema, inst)


def test_format_assertion_is_a_checked_option_and_part_of_the_cache_key():
    schema = {"type": "string", "format": "date"}
    compiler = byte_compiler()
    asserted = compiler.compile_json_schema(schema)
    annotated = compiler.compile_json_schema(schema, format_assertion=False)
    assert not accepts(asserted, '"tuesday"')
    assert accepts(annotated, '"tuesday"')
    for bad in (None, 1, "no"):
        with pytest.raises(GrammarError, match="format_assertion must be a bool"):
            Grammar.from_json_schema(schema, format_assertion=bad)
        with pytest.raises(GrammarError, match="format_assertion must be a bool"):
            compiler.compile_json_schema(schema, format_assertion=bad)


IDN_HOSTNAME_VALID = [
    "실례.테스트",  # Hangul syllables
    "παράδειγμα",  # Greek with tonos, 10 code points: outside the subset (below)
    "ßς་〇",  # exceptions that are PVALID
    "ひらがな。カタカナ",  # an ideographic full stop between labels
    "漢字．example｡com",  # fullwidth and halfwidth full stops
    "host-name.Example.COM",  # LDH labels as in hostname
    "a" * 63,
]
IDN_HOSTNAME_INVALID = [
    "",
    ".",
    "。",
    "example.",
    "a..b",
    "-hello",
    "hello-",
    "ab--cd",  # hyphens in the third and fourth position
    "xn--X",
    "A\u00df",  # an uppercase letter in a U-label is DISALLOWED
    "\u302e\uc2e4",  # a Hangul tone mark first
    "a\u00b7l",  # MIDDLE DOT without its context
    "\u0300hello",  # a combining mark first
    "a" * 64,
    "\u00fc" * 60,  # an A-label longer than 63 octets
]


def _idna_valid(name: str) -> bool:
    """The oracle: jsonschema's idn-hostname check (``idna.encode``), without the trailing
    full stop it tolerates and the suite does not."""
    import idna

    if not name or name[-1] in ".\u3002\uff0e\uff61":
        return False
    try:
        idna.encode(name)
    except (idna.IDNAError, UnicodeError):
        return False
    return True


def test_idn_hostname_is_a_subset_of_idna_2008():
    cg = compiled({"type": "string", "format": "idn-hostname"})
    for name in IDN_HOSTNAME_VALID:
        assert _idna_valid(name), name
        inside = name != "παράδειγμα"  # more than 7 code points in a U-label
        for text in _spellings(name):
            assert accepts(cg, text) == inside, text
    for name in IDN_HOSTNAME_INVALID:
        assert not _idna_valid(name), name
        for text in _spellings(name):
            assert not accepts(cg, text), text


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.text(
            alphabet=st.sampled_from(
                "aZ09-\u00df\u00f6\u00f7\u00f8\u00ff\u0100\u03ab\u03ac\u03ce\u03cf"
                "\u3040\u3041\u3096\u3099\u30a0\u30a1\u30fa\u30fb\u30fc\u4e00\u9fa5"
                "\u0f0a\u0f0b\u0f0c\u3006\u3007\u3008"
                "\uabff\uac00\ud7a3\u00b7\u0300"
            ),
            min_size=0,
            max_size=9,
        ),
        min_size=1,
        max_size=5,
    ),
    st.lists(st.sampled_from(".\u3002\uff0e\uff61"), min_size=4, max_size=4),
)
def test_idn_hostname_accepts_only_valid_names(labels, dots):
    # every name the grammar accepts is a valid IDNA 2008 host name (never a false
    # positive); the alphabet straddles each letter range of the subset
    name = labels[0] + "".join(d + label for d, label in zip(dots, labels[1:], strict=False))
    cg = _IDN_HOSTNAME()
    if accepts(cg, json.dumps(name)):
        assert _idna_valid(name), name


@functools.cache
def _IDN_HOSTNAME():  # noqa: N802 - a compiled constant
    return compiled({"type": "string", "format": "idn-hostname"})


def test_idn_hostname_letters_are_each_valid():
    from treegram.frontends.json_schema._formats import _U_LETTERS

    for lo, hi in _U_LETTERS:
        for cp in {lo, hi, (lo + hi) // 2}:
            assert _idna_valid("a" + chr(cp)), hex(cp)


def test_uri_template_literals_follow_erratum_6937():
    # RFC 6570's literals with the verified erratum 6937 (%x26-3B: the apostrophe is one);
    # the instances are the JSON Schema Test Suite's optional uri-template cases
    cg = compiled({"type": "string", "format": "uri-template"})
    for text in ("a'b", "{+baseurl}/reports(period='{period}')", "http://x/{var}"):
        assert accepts(cg, json.dumps(text)), text
    for text in ("a b", 'a"b', "a<b", "a\x7fb", "{var", "a%g0"):
        assert not accepts(cg, json.dumps(text)), text
