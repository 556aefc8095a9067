"""String formats of the JSON Schema frontend: RFC 3987 IRIs and RFC 6531 mailboxes.

The installed ``jsonschema`` has no checker for ``iri`` / ``iri-reference`` (it needs the
``rfc3987`` package) and only checks for an ``@`` in ``idn-email``, so the instances
below are checked by hand against the RFCs' ABNF; the comment on each says which rule
decides it. Each instance is tried raw (UTF-8) and with ``\\uXXXX`` escapes.
"""

from __future__ import annotations

import json

import pytest
from schema_matching import accepts, compile_schema

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
        ("regex", "not a regular language"),
        ("idn-hostname", "IDNA 2008"),
        ("no-such-format", "unknown format"),
    ],
)
def test_refused_formats_say_why(fmt, why):
    with pytest.raises(UnsupportedSchemaError, match=why):
        json_schema_to_ir({"type": "string", "format": fmt})
