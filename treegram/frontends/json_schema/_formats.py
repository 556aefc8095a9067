"""String ``format`` languages of the JSON Schema frontend, as decoded-character IR.

Each builder returns an expression over *decoded* characters; the caller encodes it for
JSON text with :func:`~treegram.frontends.json_schema._lex.encode_expr`. The languages
follow the RFCs the JSON Schema specification names (RFC 3339 dates and times with
per-month day limits, RFC 3986 URIs, RFC 3987 IRIs, RFC 5321 simplified mailboxes and
their RFC 6531 internationalized form, RFC 1123 host names, RFC 4291 IPv6 text forms,
RFC 4122 UUIDs).

``regex`` (the set of valid ECMA-262 patterns is not a regular language: groups nest) is
a grammar of its own (:mod:`._regex_format`); it is in :data:`REFUSED`, with the reason,
for the paths that need an automaton (beside a pattern, length bounds or ``not``).

Where exactness would cost thousands of states, a format is a documented subset (never
a string outside the format): ``hostname`` of at most 253 characters as a union of
label-count shapes, leap seconds in ``time`` only with the UTC offsets in use.

``idn-hostname`` (IDNA 2008, RFC 5890-5893) is compiled from grammar rules of its own,
built from the ``idna`` package's tables (:mod:`._idna`, the format's language); the tree
expression here (:func:`format_expr`, for the paths that need one: beside other string
keywords, and in structural tags) is a smaller subset of it: the ``hostname`` names and
short U-labels of left-to-right letters that need no contextual rule.
"""

from __future__ import annotations

from functools import cache

from treegram.frontends.json_schema._lex import EMPTY, alt, cls, int_range, lit, seq
from treegram.ir import Expr, Repeat

__all__ = ["FORMATS", "REFUSED", "format_expr"]


def _c(chars: str) -> Expr:
    return cls([(ord(ch), ord(ch)) for ch in chars])


def _r(lo: str, hi: str) -> tuple[int, int]:
    return (ord(lo), ord(hi))


DIGIT = cls([_r("0", "9")])
ALPHA = cls([_r("a", "z"), _r("A", "Z")])
HEXDIG = cls([_r("0", "9"), _r("a", "f"), _r("A", "F")])
ALNUM = cls([_r("a", "z"), _r("A", "Z"), _r("0", "9")])


def _star(e: Expr) -> Expr:
    return Repeat(e, 0, None)


def _plus(e: Expr) -> Expr:
    return Repeat(e, 1, None)


def _opt(e: Expr) -> Expr:
    return Repeat(e, 0, 1)


def _n(e: Expr, lo: int, hi: int | None = None) -> Expr:
    return Repeat(e, lo, lo if hi is None else hi)


def _two(lo: int, hi: int) -> Expr:
    """Two-digit zero-padded numbers in ``[lo, hi]``."""
    return alt(*(lit(f"{v:02d}") for v in range(lo, hi + 1)))


def _date() -> Expr:
    """RFC 3339 full-date: days per month, February 29 only in leap years (divisible by 4,
    centuries only when divisible by 400)."""
    days31 = alt(*(lit(f"{m:02d}") for m in (1, 3, 5, 7, 8, 10, 12)))
    days30 = alt(*(lit(f"{m:02d}") for m in (4, 6, 9, 11)))
    month_day = alt(
        seq(days31, lit("-"), _two(1, 31)),
        seq(days30, lit("-"), _two(1, 30)),
        seq(lit("02-"), _two(1, 28)),
    )
    fours = [f"{v:02d}" for v in range(0, 100, 4)]
    leap = alt(
        seq(DIGIT, DIGIT, alt(*(lit(f) for f in fours if f != "00"))),
        seq(alt(*(lit(f) for f in fours)), lit("00")),
    )
    return alt(seq(_n(DIGIT, 4), lit("-"), month_day), seq(leap, lit("-02-29")))


# UTC offset minutes in use (RFC 3339 allows any; time zones use these): a leap second
# is only accepted with one of them, so that the time before the offset is one of 96
# (hour, minute) pairs rather than 1,440 (see _leap_second).
_OFFSET_MINUTES = (0, 30, 45)


def _leap_second(frac: Expr) -> Expr:
    """``hh:mm:60`` with the offsets that make it 23:59:60 in UTC: local time minus the
    offset is 23:59. Only offsets whose minutes are in :data:`_OFFSET_MINUTES` (every
    time zone's; a documented restriction: others would need a state per local minute)."""
    branches = []
    for hh in range(24):
        for mm in range(60):
            utc_plus_one = hh * 60 + mm + 1  # the offset that makes it 23:59, mod 1440
            offsets = []
            for sign, minutes in (("+", utc_plus_one % 1440), ("-", (1440 - utc_plus_one) % 1440)):
                oh, om = divmod(minutes, 60)
                if om in _OFFSET_MINUTES:
                    offsets.append(lit(f"{sign}{oh:02d}:{om:02d}"))
            if utc_plus_one == 1440:
                offsets.append(_c("Zz"))
            if offsets:
                branches.append(seq(lit(f"{hh:02d}:{mm:02d}:60"), frac, alt(*offsets)))
    return alt(*branches)


def _time() -> Expr:
    """RFC 3339 full-time: seconds 00-59, or a leap second where it is 23:59:60 in UTC."""
    frac = _opt(seq(lit("."), _plus(DIGIT)))
    offset = alt(_c("Zz"), seq(_c("+-"), _two(0, 23), lit(":"), _two(0, 59)))
    plain = seq(_two(0, 23), lit(":"), _two(0, 59), lit(":"), _two(0, 59), frac, offset)
    return alt(plain, _leap_second(frac))


def _duration() -> Expr:
    num = _plus(DIGIT)
    second = seq(num, lit("S"))
    minute = seq(num, lit("M"), _opt(second))
    hour = seq(num, lit("H"), _opt(minute))
    dur_time = seq(lit("T"), alt(hour, minute, second))
    day = seq(num, lit("D"))
    month = seq(num, lit("M"), _opt(day))
    year = seq(num, lit("Y"), _opt(month))
    dur_date = seq(alt(day, month, year), _opt(dur_time))
    week = seq(num, lit("W"))
    return seq(lit("P"), alt(dur_date, dur_time, week))


def _label(extra=()) -> Expr:
    """A host name label of 1 to 63 characters; ``extra`` ranges count as letters."""
    edge = cls([_r("a", "z"), _r("A", "Z"), _r("0", "9"), *extra])
    inner = cls([_r("a", "z"), _r("A", "Z"), _r("0", "9"), _r("-", "-"), *extra])
    return seq(edge, _opt(seq(_n(inner, 0, 61), edge)))


def _hostname(extra=()) -> Expr:
    label = _label(extra)
    return seq(label, _star(seq(lit("."), label)))


def _ldh_label(most: int, head: Expr | None = None) -> Expr:
    """An LDH label of 1 to ``most`` characters that is not reserved: no hyphen first or
    last, and not one in both the third and fourth position (RFC 5891's R-LDH labels,
    A-labels ``xn--...`` among them); its first character in ``head`` when given (a
    subset of the letters and digits)."""
    edge = cls([_r("a", "z"), _r("A", "Z"), _r("0", "9")])
    inner = cls([_r("a", "z"), _r("A", "Z"), _r("0", "9"), _r("-", "-")])
    first = edge if head is None else head
    short = [first, seq(first, edge), seq(first, inner, edge)][: min(most, 3)]
    if most < 4:
        return alt(*short)
    # four or more: the third character a letter or digit, or a hyphen before one
    rest = alt(
        seq(edge, _n(inner, 0, most - 4), edge),
        seq(lit("-"), edge, _opt(seq(_n(inner, 0, most - 5), edge)) if most >= 5 else EMPTY),
    )
    return alt(*short, seq(first, inner, rest))


# (labels at most, characters per label at most): names within each fit 253 characters
_HOSTNAME_SHAPES = ((3, 63), (4, 62), (8, 30), (16, 14))


def _bounded_hostname() -> Expr:
    """RFC 1123 host names of at most 253 characters, labels of at most 63, without
    R-LDH labels. Exactly "at most 253 characters" needs a state per (label position,
    length so far), about 24,000; this is the union of the names of at most 3 labels of
    at most 63 characters, 4 of 62, 8 of 30 and 16 of 14 (each of which fits; about 1,400
    states): a documented subset, never a longer name."""
    shapes = []
    for count, most in _HOSTNAME_SHAPES:
        label = _ldh_label(most)
        shapes.append(seq(label, _n(seq(lit("."), label), 0, count - 1)))
    return alt(*shapes)


# Letters of the U-labels in the idn-hostname subset: lowercase Latin-1, Greek with
# tonos, the Tibetan mark tsheg and the ideographic zero (PVALID exceptions), Hiragana,
# Katakana with the prolonged sound mark, the CJK Unified Ideographs of Unicode 1.1 and
# the Hangul syllables. Each is PVALID in IDNA 2008 with no contextual rule,
# left-to-right (no Bidi rule applies), a starter that composes with nothing (a string of
# them is NFC).
_U_LETTERS = (
    (0xDF, 0xF6),
    (0xF8, 0xFF),
    (0x3AC, 0x3CE),
    (0xF0B, 0xF0B),
    (0x3007, 0x3007),
    (0x3041, 0x3096),
    (0x30A1, 0x30FA),
    (0x30FC, 0x30FC),
    (0x4E00, 0x9FA5),
    (0xAC00, 0xD7A3),
)
# Code points of a U-label: its A-label ("xn--", the ASCII letters, "-", one punycode
# delta per other code point) then has at most 5 + 8 * 7 = 61 octets, as a delta below
# (0xD7A3 + 1) * 64 takes at most 8 base-36 digits (each digit but the last divides
# what is left by at least 36 - 26 = 10).
_U_LABEL_MOST = 7
# The separators IDNA 2008 reads as full stops (RFC 3490 section 3.1).
_DOTS = ((0x2E, 0x2E), (0x3002, 0x3002), (0xFF0E, 0xFF0E), (0xFF61, 0xFF61))


def _u_label() -> Expr:
    """A U-label of 1 to 7 code points, lowercase ASCII letters and digits and
    :data:`_U_LETTERS`, at least one of the latter."""
    ascii_ = cls([_r("a", "z"), _r("0", "9")])
    other = cls(list(_U_LETTERS))
    either = cls([_r("a", "z"), _r("0", "9"), *_U_LETTERS])
    return alt(
        *(
            seq(_n(ascii_, i, i), other, _n(either, 0, _U_LABEL_MOST - 1 - i))
            for i in range(_U_LABEL_MOST)
        )
    )


def _idn_hostname(u_labels: bool = True) -> Expr:
    """A documented subset of IDNA 2008 host names (RFC 5890): the ``hostname`` subset's
    LDH labels (no R-LDH labels, so no A-labels), and U-labels of :func:`_u_label` in the
    names of at most 4 labels (an A-label of at most 61 octets fits their 62), separated
    by any of the four full stops. Exact validity needs Unicode property tables, the
    contextual rules, the Bidi rule and each label's punycode length."""
    shapes = []
    for count, most in _HOSTNAME_SHAPES:
        label = _ldh_label(most)
        if most >= 61 and u_labels:
            label = alt(label, _u_label())
        shapes.append(seq(label, _n(seq(cls(list(_DOTS)), label), 0, count - 1)))
    return alt(*shapes)


def _ipv4() -> Expr:
    octet = int_range(0, 255)
    return seq(octet, lit("."), octet, lit("."), octet, lit("."), octet)


def _ipv6() -> Expr:
    h16 = _n(HEXDIG, 1, 4)
    h16c = seq(h16, lit(":"))
    ls32 = alt(seq(h16, lit(":"), h16), _ipv4())

    def upto(n: int) -> Expr:
        # [ *n( h16 ":" ) h16 ]
        return _opt(seq(_n(h16c, 0, n), h16))

    return alt(
        seq(_n(h16c, 6), ls32),
        seq(lit("::"), _n(h16c, 5), ls32),
        seq(_opt(h16), lit("::"), _n(h16c, 4), ls32),
        seq(upto(1), lit("::"), _n(h16c, 3), ls32),
        seq(upto(2), lit("::"), _n(h16c, 2), ls32),
        seq(upto(3), lit("::"), h16c, ls32),
        seq(upto(4), lit("::"), ls32),
        seq(upto(5), lit("::"), h16),
        seq(upto(6), lit("::")),
    )


def _uuid() -> Expr:
    return seq(
        _n(HEXDIG, 8),
        lit("-"),
        _n(HEXDIG, 4),
        lit("-"),
        _n(HEXDIG, 4),
        lit("-"),
        _n(HEXDIG, 4),
        lit("-"),
        _n(HEXDIG, 12),
    )


# RFC 6531 UTF8-non-ascii: any Unicode scalar value above ASCII (surrogates excluded).
_NON_ASCII = [(0x80, 0xD7FF), (0xE000, 0x10FFFF)]


def _email(intl: bool = False) -> Expr:
    """RFC 5321 mailbox; with ``intl`` the RFC 6531 one (non-ASCII in atext, qtext and
    domain labels)."""
    extra = _NON_ASCII if intl else []
    specials = "!#$%&'*+-/=?^_`{|}~"
    atext = cls([_r("a", "z"), _r("A", "Z"), _r("0", "9")] + [_r(c, c) for c in specials] + extra)
    dot_atom = seq(_plus(atext), _star(seq(lit("."), _plus(atext))))
    qtext = cls([(0x20, 0x21), (0x23, 0x5B), (0x5D, 0x7E)] + extra)
    quoted = seq(lit('"'), _star(alt(qtext, seq(lit("\\"), cls([(0x20, 0x7E)])))), lit('"'))
    host = _hostname(extra) if intl else _hostname()
    domain = alt(host, seq(lit("["), _ipv4(), lit("]")), seq(lit("[IPv6:"), _ipv6(), lit("]")))
    return seq(alt(dot_atom, quoted), lit("@"), domain)


# RFC 3987 ucschar and iprivate.
_UCSCHAR = (
    [(0xA0, 0xD7FF), (0xF900, 0xFDCF), (0xFDF0, 0xFFEF)]
    + [(p << 16, (p << 16) + 0xFFFD) for p in range(1, 14)]
    + [(0xE1000, 0xEFFFD)]
)
_IPRIVATE = [(0xE000, 0xF8FF), (0xF0000, 0xFFFFD), (0x100000, 0x10FFFD)]


class _Uri:
    """RFC 3986 productions; with ``iri`` the RFC 3987 ones (``ucschar`` in unreserved,
    ``iprivate`` in the query but not the fragment)."""

    def __init__(self, iri: bool = False) -> None:
        ascii_unreserved = [_r("a", "z"), _r("A", "Z"), _r("0", "9")] + [_r(c, c) for c in "-._~"]
        self.ascii_unreserved = cls(ascii_unreserved)  # IP literals stay ASCII in IRIs
        self.unreserved = cls(ascii_unreserved + (_UCSCHAR if iri else []))
        self.sub_delims = _c("!$&'()*+,;=")
        self.pct = seq(lit("%"), HEXDIG, HEXDIG)
        self.pchar = alt(self.unreserved, self.pct, self.sub_delims, _c(":@"))
        self.segment = _star(self.pchar)
        self.segment_nz = _plus(self.pchar)
        self.fragment = _star(alt(self.pchar, _c("/?")))
        self.query = _star(alt(self.pchar, _c("/?"), cls(_IPRIVATE))) if iri else self.fragment

    def authority(self) -> Expr:
        userinfo = _star(alt(self.unreserved, self.pct, self.sub_delims, lit(":")))
        ipvfuture = seq(
            _c("vV"),
            _plus(HEXDIG),
            lit("."),
            _plus(alt(self.ascii_unreserved, self.sub_delims, lit(":"))),
        )
        ip_literal = seq(lit("["), alt(_ipv6(), ipvfuture), lit("]"))
        reg_name = _star(alt(self.unreserved, self.pct, self.sub_delims))
        host = alt(ip_literal, reg_name)
        return seq(_opt(seq(userinfo, lit("@"))), host, _opt(seq(lit(":"), _star(DIGIT))))

    def tail(self) -> Expr:
        return seq(_opt(seq(lit("?"), self.query)), _opt(seq(lit("#"), self.fragment)))

    def hier(self, first_segment: Expr) -> Expr:
        abempty = _star(seq(lit("/"), self.segment))
        absolute = seq(lit("/"), _opt(seq(self.segment_nz, abempty)))
        rootless = seq(first_segment, abempty)
        return alt(seq(lit("//"), self.authority(), abempty), absolute, rootless, seq())

    def uri(self) -> Expr:
        scheme = seq(ALPHA, _star(alt(ALNUM, _c("+-."))))
        return seq(scheme, lit(":"), self.hier(self.segment_nz), self.tail())

    def relative_ref(self) -> Expr:
        nz_nc = _plus(alt(self.unreserved, self.pct, self.sub_delims, lit("@")))
        return seq(self.hier(nz_nc), self.tail())


def _json_pointer() -> Expr:
    char = alt(cls([(0, 0x2E), (0x30, 0x7D), (0x7F, 0x10FFFF)]), lit("~0"), lit("~1"))
    return _star(seq(lit("/"), _star(char)))


def _relative_json_pointer() -> Expr:
    return seq(int_range(0, None), alt(lit("#"), _json_pointer()))


def _uri_template() -> Expr:
    """RFC 6570 URI templates, with the verified erratum 6937: the apostrophe is a literal
    (``%x26-3B`` for the published ``%x26 / %x28-3B``)."""
    literal = alt(
        cls(
            [
                (0x21, 0x21),
                (0x23, 0x24),
                (0x26, 0x3B),
                (0x3D, 0x3D),
                (0x3F, 0x5B),
                (0x5D, 0x5D),
                (0x5F, 0x5F),
                (0x61, 0x7A),
                (0x7E, 0x7E),
                (0xA0, 0x10FFFF),
            ]
        ),
        seq(lit("%"), HEXDIG, HEXDIG),
    )
    varchar = alt(ALNUM, lit("_"), seq(lit("%"), HEXDIG, HEXDIG))
    varname = seq(varchar, _star(seq(_opt(lit(".")), varchar)))
    modifier = alt(seq(lit(":"), cls([_r("1", "9")]), _n(DIGIT, 0, 3)), lit("*"))
    varspec = seq(varname, _opt(modifier))
    expression = seq(
        lit("{"), _opt(_c("+#./;?&=,!@|")), varspec, _star(seq(lit(","), varspec)), lit("}")
    )
    return _star(alt(literal, expression))


FORMATS = {
    "json-pointer": _json_pointer,
    "relative-json-pointer": _relative_json_pointer,
    "uri-template": _uri_template,
    "date": _date,
    "time": _time,
    "date-time": lambda: seq(_date(), _c("Tt"), _time()),
    "duration": _duration,
    "email": _email,
    "hostname": _bounded_hostname,
    "idn-hostname": _idn_hostname,
    "ipv4": _ipv4,
    "ipv6": _ipv6,
    "uuid": _uuid,
    "uri": lambda: _Uri().uri(),
    "uri-reference": lambda: alt(_Uri().uri(), _Uri().relative_ref()),
    "iri": lambda: _Uri(iri=True).uri(),
    "iri-reference": lambda: alt(_Uri(iri=True).uri(), _Uri(iri=True).relative_ref()),
    "idn-email": lambda: _email(intl=True),
}

# Formats that are known but not compiled, with the reason.
REFUSED = {
    "regex": "the ECMA-262 patterns are a context-free language (groups nest), compiled as "
    "a grammar of its own but not intersected with other string keywords (pattern, "
    "lengths, not) or excluded texts",
}


@cache
def format_expr(name: str) -> Expr | None:
    """The decoded-character language of the string format ``name`` (``None`` if unknown)."""
    builder = FORMATS.get(name)
    return None if builder is None else builder()
