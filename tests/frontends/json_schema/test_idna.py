"""``format: idn-hostname`` (IDNA 2008, :mod:`treegram.frontends.json_schema._idna`) against
the JSON Schema Test Suite's cases and jsonschema's format checker (which calls the ``idna``
package), over the byte-level vocabulary.

jsonschema's checker differs from the format in three documented ways, each taken out of
the comparison by :func:`_in_scope` or :func:`_oracle`: it accepts a trailing full stop and
A-labels (``xn--...``), and applies the Bidi rule to each right-to-left label alone where
RFC 5893 (and the suite) apply it to every label of such a name. The format's conservative
limits (:func:`_in_scope`) are the module docstring's.
"""

from __future__ import annotations

import functools
import json
import random
import unicodedata
from pathlib import Path

import pytest
from schema_matching import accepts, compile_schema

from treegram.frontends.json_schema import _idna
from treegram.ir import RuleRef

jsonschema = pytest.importorskip("jsonschema")
idna = pytest.importorskip("idna")

SUITE = (
    Path(__file__).resolve().parents[2]
    / "data"
    / "json_schema_test_suite"
    / "draft2020-12"
    / "optional"
    / "format"
    / "idn-hostname.json"
)
_DOTS = ".\u3002\uff0e\uff61"
_CHECKER = jsonschema.Draft202012Validator.FORMAT_CHECKER


@functools.cache
def _grammar():
    return compile_schema({"type": "string", "format": "idn-hostname"})


def _accepts(name: str) -> bool:
    return accepts(_grammar(), json.dumps(name, ensure_ascii=False))


def _labels(name: str) -> list[str]:
    out, cur = [], ""
    for ch in name:
        if ch in _DOTS:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    return [*out, cur]


def _rtl(label: str) -> bool:
    return any(unicodedata.bidirectional(ch) in ("R", "AL", "AN") for ch in label)


def _oracle(name: str) -> bool:
    """jsonschema's idn-hostname check, plus what it leaves out: no trailing full stop, and
    the Bidi rule on every label of a name with a right-to-left label (RFC 5893 section 2)."""
    assert "idn-hostname" in _CHECKER.checkers  # jsonschema checks it (idna is installed)
    if not name or name[-1] in _DOTS or not _CHECKER.conforms(name, "idn-hostname"):
        return False
    labels = _labels(name)
    if any(_rtl(label) for label in labels):
        for label in labels:
            try:
                idna.core.check_bidi(label, check_ltr=True)
            except idna.IDNAError:
                return False
    return True


# The generated names' alphabet, each code point with its class for the format's NFC
# restriction (N: a non-starter; M: composes with its predecessor, NFC_QC=Maybe; C: a
# starter something composes with or a decomposable one; T: decomposes to a trailing
# non-starter; else inert).
_ALPHABET = {
    "a": "C", "l": "C", "e": "C", "0": "", "-": "", "A": "C",
    "\u00e9": "CT",  # é: decomposes to a trailing non-starter (e + U+0301)
    "\u0301": "NM", "\u0300": "NM",  # combining acute and grave
    "\u00b7": "",  # MIDDLE DOT (CONTEXTO)
    "\u0375": "", "\u03b1": "C", "\u03b2": "",  # KERAIA, Greek letters (alpha composes)
    "\u05d0": "", "\u05f3": "",  # Hebrew ALEF, GERESH
    "\u0627": "C", "\u0628": "", "\u064a": "C",  # Arabic letters (ALEF, YEH compose)
    "\u0660": "", "\u06f0": "",  # Arabic-Indic and extended Arabic-Indic zero
    "\u30fb": "", "\u3041": "", "\u30a1": "", "\u4e08": "",  # KATAKANA MIDDLE DOT, kana, Han
    "\u0915": "", "\u0928": "C",  # DEVANAGARI KA; NA (+ NUKTA composes)
    "\u094d": "N", "\u093c": "NM",  # VIRAMA; NUKTA
    "\u200c": "", "\u200d": "",  # ZWNJ, ZWJ (CONTEXTJ)
    "\u302e": "N", "\u0640": "",  # DISALLOWED
    ".": "", "\u3002": "",
}  # fmt: skip


def _in_scope(name: str) -> bool:
    """Whether the format's conservative limits let ``name`` through: no A-label, at most 4
    labels when one is not ASCII, U-labels of at most 9 code points or (in a name without a
    right-to-left label) of at most 51 with one non-ASCII, no two non-starters in a row or
    after a letter that decomposes to one, no NFC_QC=Maybe code point after one that
    composes, KATAKANA MIDDLE DOT beside a Han, Hiragana or Katakana letter."""
    labels = _labels(name)
    if any(label[:4].lower() == "xn--" for label in labels):
        return False
    u_labels = [label for label in labels if not label.isascii()]
    if u_labels and len(labels) > _idna.LABELS:
        return False
    # a name with a right-to-left label has short U-labels only
    sizes = _idna.u_label_sizes()[: 1 if any(map(_rtl, labels)) else None]
    for label in u_labels:
        others = sum(not ch.isascii() for ch in label)
        if not any(len(label) <= n and others <= k for n, k in sizes):
            return False
    for label in labels:
        for i, ch in enumerate(label):
            prev = label[i - 1] if i else ""
            if "N" in _ALPHABET.get(ch, "") and {"N", "T"} & set(_ALPHABET.get(prev, "")):
                return False
            if "M" in _ALPHABET.get(ch, "") and "C" in _ALPHABET.get(prev, ""):
                return False
            if ch == "\u30fb":
                near = label[i - 1 : i] + label[i + 1 : i + 2]
                if not any(c in "\u3041\u30a1\u4e08" for c in near):
                    return False
    return True


def test_suite_cases():
    groups = json.loads(SUITE.read_text())
    cases = [(t["data"], t["valid"]) for g in groups for t in g["tests"]]
    cases = [(d, v) for d, v in cases if isinstance(d, str)]
    assert len(cases) == 84
    wrong = []
    for data, valid in cases:
        for text in (json.dumps(data), json.dumps(data, ensure_ascii=False)):
            if accepts(_grammar(), text) != valid:
                wrong.append((valid, data))
    # every invalid name rejected; the valid ones rejected are an A-label (not decoded) and
    # a U-label of 52 code points (its punycode length is not bounded by the format)
    assert not [d for v, d in wrong if not v]
    assert sorted({d for _, d in wrong}) == sorted(
        {d for d, v in cases if v and (d.startswith("xn--") or len(_labels(d)[0]) == 52)}
    )
    assert len({d for _, d in wrong}) == 5


# (valid name, accepted): the rejected ones are past a documented limit
VALID = [
    ("m\u00fcnchen.de", True),
    ("\u4f8b\u3048.\u30c6\u30b9\u30c8", True),
    ("\u0645\u062b\u0627\u0644.\u0625\u062e\u062a\u0628\u0627\u0631", True),  # Bidi
    ("\u0928\u094d\u0915", True),  # a virama after a letter that composes with NUKTA
    ("\u091c\u093c", True),  # NUKTA after a letter it does not compose with (U+095B excluded)
    ("b\u00fccher-online", True),  # 13 code points, one of them not ASCII
    ("b\u00fcch\u00e9r-online", False),  # 13 code points, two not ASCII: past the limits
    ("a.b.c.d.\u00fc", False),  # five labels: past the names of four with a U-label
    ("b\u00fccher-online.\u05d0", False),  # a long U-label in a right-to-left name
    ("\u00e0\u0316", False),  # NFC, but a mark after a letter that decomposes
]


@pytest.mark.parametrize("name, accepted", VALID)
def test_valid_names(name, accepted):
    assert _oracle(name), ascii(name)
    assert _accepts(name) == accepted, ascii(name)


def test_generated_names_match_jsonschema():
    # both ways: accepted => valid (always); valid and within the limits => accepted
    rng = random.Random(27)
    letters = list(_ALPHABET)
    seen = {True: 0, False: 0}
    for _ in range(3000):
        name = "".join(rng.choice(letters) for _ in range(rng.randint(1, 7)))
        got = _accepts(name)
        valid = _oracle(name)
        assert not got or valid, ("invalid accepted", ascii(name))
        if valid and _in_scope(name):
            assert got, ("valid rejected", ascii(name))
        seen[got] += 1
    assert seen[True] > 150 and seen[False] > 150  # both sides are exercised


def test_generated_names_of_valid_labels():
    # names built from labels that jsonschema accepts alone, so most of them are valid
    rng = random.Random(5)
    pool = [
        "xn--mnchen-3ya", "m\u00fcnchen", "ab", "0a", "a-b", "\u05d0\u05d1", "\u05d00",
        "\u0628\u0660\u0628", "\u06f00", "l\u00b7l", "\u03b1\u0375\u03b2", "\u05d0\u05f3\u05d1",
        "\u30fb\u3041", "\u3041\u30fb", "\u30fb\u4e08\u30fb", "\u0915\u094d\u200d\u0937",
        "\u0628\u064a\u200c\u0628\u064a", "\u00df\u03c2\u0f0b\u3007", "\u06fd\u06fe",
        "a" * 62, "a" * 63, "\u00fc" * 9, "\u00fc" * 10,
        "\u0627\u0644\u0639\u0631\u0628\u064a\u0629",
    ]  # fmt: skip
    for label in pool:
        assert _CHECKER.conforms(label, "idn-hostname"), ascii(label)
    accepted = 0
    for _ in range(400):
        labels = [rng.choice(pool) for _ in range(rng.randint(1, 5))]
        name = "".join(rng.choice(_DOTS) + label for label in labels)[1:]
        got = _accepts(name)
        assert not got or _oracle(name), ascii(name)
        accepted += got
    assert accepted > 40


def test_u_label_sizes_fit_the_octets():
    # xn--, the ASCII code points, "-" and the digits bound per other code point fit 62
    top = _idna._tables().top
    (short, _), (long, one) = _idna.u_label_sizes()
    assert one == 1
    assert 5 + short * _idna._digits_bound(top, short) <= _idna.LABEL_OCTETS
    assert 5 + (long - 1) + _idna._digits_bound(top, long) <= _idna.LABEL_OCTETS
    # the longest A-labels of those sizes that this alphabet makes fit too
    for text in (
        "\U0003134a" * short,
        "\u00fc\U0003134a" * (short // 2),
        "a" * (long - 1) + "\U0003134a",
        "\U0003134a" + "a" * (long - 1),
    ):
        assert len(idna.encode(text)) <= _idna.LABEL_OCTETS, ascii(text)
    assert _accepts("a" * (long - 1) + "\u00fc")
    assert not _accepts("a" * long + "\u00fc")


def test_punycode_digits_follow_rfc_3492():
    # a label of one non-ASCII code point c is punycode's first delta, c - 128, under the
    # initial bias 72: its digits are the whole encoding (the stdlib codec's)
    for cp in (0x80, 0xFC, 0x3B1, 0x4E08, 0xAC00, 0x20000, 0x3134A):
        assert _idna._punycode_digits(cp - 128, 72) == len(chr(cp).encode("punycode")), hex(cp)


def test_nfc_pairs_the_rules_allow_are_nfc():
    # the pairwise NFC rule against unicodedata.normalize, on pairs of alphabet code points
    # ending in a non-starter or a code point that composes with its predecessor
    tables = _idna._tables()
    atoms = [_idna._Atom(key) for key in tables.atoms]
    points = [(cp, atoms[k]) for k, rs in enumerate(tables.ranges) for lo, hi in rs
              for cp in range(lo, hi + 1)]  # fmt: skip
    seconds = [(cp, a) for cp, a in points if a.nfc == "NS" or a.maybe]
    rng = random.Random(3)
    allowed = 0
    for _ in range(40000):
        (p, pa), (c, ca) = rng.choice(points), rng.choice(seconds)
        if (ca.nfc == "NS" and pa.nfc in ("NS", "T")) or (ca.maybe and pa.nfc in ("K", "T")):
            continue
        allowed += 1
        assert unicodedata.normalize("NFC", chr(p) + chr(c)) == chr(p) + chr(c), (hex(p), hex(c))
    assert allowed > 10000
    # Hangul jamo (algorithmic compositions, not in the decomposition table) are DISALLOWED
    assert not any(0x1100 <= cp <= 0x11FF for cp, _ in points)


@pytest.mark.parametrize("prefix", ['"', '"m\u00fc', '"\u0628', '"l\u00b7', '"\u0915\u094d'])
def test_masks_are_the_tokens_accepted(prefix):
    # each prefix's bitmask (byte vocabulary) against accepting every token and rolling back
    import treegram
    from treegram.testing import bitmask_to_bool_mask

    cg = _grammar()
    vocab = 257
    m = treegram.GrammarMatcher(cg)
    assert m.accept_string(prefix)
    bitmask = treegram.allocate_token_bitmask(1, vocab)
    m.fill_next_token_bitmask(bitmask, 0)
    mask = [bool(b) for b in bitmask_to_bool_mask(bitmask, vocab).reshape(-1)[:vocab]]
    accepted = []
    for t in range(vocab):
        ok = m.accept_token(t)
        accepted.append(ok)
        if ok:
            m.rollback(1)
    assert mask == accepted
    assert any(accepted)


def test_template_is_renamed_where_its_names_are_taken():
    # a conversion that already holds the template's rule names gets fresh ones
    conv = _idna._Rules()
    _idna.idn_hostname_body(conv)
    first = set(conv.rules)
    body = _idna.idn_hostname_body(conv)
    second = set(conv.rules) - first
    assert len(second) == len(first)
    refs: set[str] = set()

    def walk(e):
        if isinstance(e, RuleRef):
            refs.add(e.name)
        for child in getattr(e, "items", ()) or ((e.item,) if hasattr(e, "item") else ()):
            walk(child)

    walk(body)
    for name in second:
        walk(conv.rules[name])
    assert refs and refs <= second
