"""``idn-hostname``: IDNA 2008 host names (RFC 5890-5893) as grammar rules.

The per-code-point classes (PVALID, CONTEXTJ, CONTEXTO), the scripts and the joining
types come from the ``idna`` package's tables (:mod:`idna.idnadata`); combining classes,
canonical decompositions, general categories and Bidi classes from :mod:`unicodedata`
(what ``idna`` itself reads). A code point the running Python's Unicode database does not
know is left out (its properties are unknown there).

The code points are grouped into *atoms*, the classes of code points every rule treats
alike (about 60). A U-label is a minimal automaton over atoms (:func:`u_label_dfa`),
built by walking the rules' states and minimizing; it becomes grammar rules, one per
shared automaton state and one per atom's encoded class (:func:`idn_hostname_body`), once
per process as a template that each conversion adds under its own rule names. A name is
written around them: LDH labels (``hostname``'s, any case), a U-label, full stops.

Exact rules: the code point classes; CONTEXTJ (ZERO WIDTH JOINER after a virama, ZERO
WIDTH NON-JOINER after a virama or between a left-joining and a right-joining letter,
transparent ones around it); CONTEXTO (MIDDLE DOT between two ``l``, KERAIA before a Greek
letter, GERESH and GERSHAYIM after a Hebrew letter; Arabic-Indic digits are AN and the
extended ones EN, so the Bidi rule already keeps them apart: AN makes a label
right-to-left, and rule 4 forbids AN with EN there); hyphens (not first, not last, not in
both the third and fourth position); no combining mark first; the Bidi rule of RFC 5893 on
every label of a name that has a right-to-left label (one with an R, AL or AN code
point), as RFC 5893 section 2 says (the ``idna`` package checks each such label alone);
labels separated by any of the four full stops of RFC 3490.

Conservative rules (they reject some valid names, never accept an invalid one):

- A-labels (``xn--...``) are rejected.
- NFC is checked on adjacent pairs: two non-starters (combining class > 0) never follow
  each other, a non-starter never follows a letter that decomposes to a trailing
  non-starter, and a code point that composes with its predecessor (NFC_QC=Maybe) never
  follows a letter something composes with or that decomposes. Each code point is NFC on
  its own, and with these pairs excluded no reordering or composition can reach across a
  pair, so a label is NFC exactly when its pairs are (none of them changes).
- The A-label length (at most 62 octets here): ``xn--``, the ASCII code points, ``-``
  and at most :func:`_digits_bound` punycode digits per other code point (a bound on every
  delta of a label of this alphabet and length, under any bias): U-labels of at most 9
  code points, or of at most 51 with one that is not ASCII (:func:`u_label_sizes`; in
  names without a right-to-left label only, where the automaton is half the size).
- The name length (at most 253 octets): a name with a U-label has at most
  :data:`LABELS` labels of at most :data:`LABEL_OCTETS` octets.
- KATAKANA MIDDLE DOT needs a Hiragana, Katakana or Han letter right before or after it
  (the rule asks for one anywhere in the label).
"""

from __future__ import annotations

import unicodedata
from functools import cache

from treegram.frontends.json_schema._context import ConversionContext
from treegram.frontends.json_schema._dfa_expr import _string_encoder, dfa_expr
from treegram.frontends.json_schema._lex import alt, cls, encode_expr, seq
from treegram.ir import Choice, Dfa, Expr, Repeat, RuleRef, Seq

__all__ = ["LABELS", "LABEL_OCTETS", "idn_hostname_body", "u_label_dfa", "u_label_sizes"]

_VIRAMA = 9  # canonical combining class of the viramas (CONTEXTJ)
# Names with a U-label: at most LABELS labels of at most LABEL_OCTETS octets each in
# A-label form, so at most 4 * 62 + 3 = 251 octets in all (RFC 1034's 253).
LABELS = 4
LABEL_OCTETS = 62


def _ranges(packed) -> list[tuple[int, int]]:
    """``idna``'s packed ranges (``start << 32 | end``, end exclusive), inclusive."""
    return [(r >> 32, (r & 0xFFFFFFFF) - 1) for r in packed]


def _member(ranges) -> set[int]:
    return {cp for lo, hi in ranges for cp in range(lo, hi + 1)}


def _joining_types(table) -> dict[int, str]:
    """Code point -> joining type letter, from either form ``idna`` has shipped: type ->
    packed ranges (3.8 on), or code point -> the type's character code."""
    out: dict[int, str] = {}
    for key, value in table.items():
        if isinstance(value, tuple):
            kind = chr(key) if isinstance(key, int) else key
            out.update((cp, kind) for cp in _member(_ranges(value)))
        else:
            out[key] = chr(value)
    return out


def _punycode_digits(q: int, bias: int) -> int:
    """Digits of the variable-length integer ``q`` under ``bias`` (RFC 3492 6.3)."""
    n, k = 0, 36
    while True:
        t = 1 if k <= bias else 26 if k >= bias + 26 else k - bias
        if q < t:
            return n + 1
        q, n, k = (q - t) // (36 - t), n + 1, k + 36


def _digits_bound(top: int, most: int) -> int:
    """Punycode digits of any delta of a label of at most ``most`` code points at most
    ``top``: a delta is below ``(top + 1) * (most + 1)``, and the digit count grows with
    the value; biases past 36 * 80 give the same digits as 36 * 80."""
    q = (top + 1) * (most + 1)
    return max(_punycode_digits(q, b) for b in range(0, 36 * 80))


def _composites() -> tuple[set[int], set[int]]:
    """(first, second) code points of the primary composites: canonical decompositions
    of two code points that NFC recomposes."""
    first, second = set(), set()
    for cp in range(0x30000):  # every canonical decomposition is in planes 0 to 2
        dec = unicodedata.decomposition(chr(cp))
        if not dec or dec[0] == "<":
            continue
        parts = [int(p, 16) for p in dec.split()]
        if len(parts) == 2 and unicodedata.normalize("NFC", chr(parts[0]) + chr(parts[1])) == chr(
            cp
        ):
            first.add(parts[0])
            second.add(parts[1])
    return first, second


class _Tables:
    """Each code point of the alphabet mapped to its atom (the tuple of the properties the
    rules read), and the atoms' code point ranges."""

    def __init__(self) -> None:
        import idna.idnadata as data

        classes = data.codepoint_classes
        pvalid = _ranges(classes["PVALID"])
        contextj = _ranges(classes["CONTEXTJ"])
        contexto = _ranges(classes["CONTEXTO"])
        scripts = {name: _member(_ranges(r)) for name, r in data.scripts.items()}
        joining = _joining_types(data.joining_types)
        first, second = _composites()
        hkh = scripts["Hiragana"] | scripts["Katakana"] | scripts["Han"]
        atoms: dict[tuple, list[int]] = {}
        for lo, hi in sorted(pvalid + contextj + contexto):
            for cp in range(lo, hi + 1):
                ch = chr(cp)
                if unicodedata.category(ch) == "Cn" or unicodedata.normalize("NFC", ch) != ch:
                    continue  # unknown to this Python, or never in NFC text
                ccc = unicodedata.combining(ch)
                nfd = unicodedata.normalize("NFD", ch)
                if ccc:
                    nfc = "NS"  # a non-starter
                elif unicodedata.combining(nfd[-1]):
                    nfc = "T"  # decomposes to a trailing non-starter
                elif cp in first or nfd != ch:
                    nfc = "K"  # composes with a following code point
                else:
                    nfc = "I"  # inert: nothing composes with it or reorders against it
                jt = joining.get(cp, "U")
                atom = (
                    cp < 0x80,
                    nfc,
                    cp in second,  # NFC_QC=Maybe: composes with its predecessor
                    ccc == _VIRAMA,
                    jt in ("L", "D"),  # joins to the right (before a ZWNJ)
                    jt in ("R", "D"),  # joins to the left (after a ZWNJ)
                    jt == "T",
                    unicodedata.category(ch)[0] == "M",
                    unicodedata.bidirectional(ch),
                    cp in scripts["Greek"],
                    cp in scripts["Hebrew"],
                    cp in hkh and cp != 0x30FB,
                    cp
                    if cp in (0x6C, 0x2D, 0xB7, 0x375, 0x5F3, 0x5F4, 0x30FB, 0x200C, 0x200D)
                    else None,
                )
                atoms.setdefault(atom, []).append(cp)
        self.atoms = list(atoms)
        self.ranges = [_runs(cps) for cps in atoms.values()]
        self.top = max(max(cps) for cps in atoms.values())


def _runs(cps: list[int]) -> list[tuple[int, int]]:
    out: list[list[int]] = []
    for cp in sorted(cps):
        if out and out[-1][1] == cp - 1:
            out[-1][1] = cp
        else:
            out.append([cp, cp])
    return [(a, b) for a, b in out]


class _Atom:
    """The properties of one atom, by name (see :class:`_Tables`)."""

    __slots__ = (
        "ascii", "nfc", "maybe", "virama", "join_l", "join_r", "join_t", "mark", "bidi",
        "greek", "hebrew", "hkh", "special",
    )  # fmt: skip

    def __init__(self, key: tuple) -> None:
        (self.ascii, self.nfc, self.maybe, self.virama, self.join_l, self.join_r, self.join_t,
         self.mark, self.bidi, self.greek, self.hebrew, self.hkh, self.special) = key  # fmt: skip


_RTL = ("R", "AL")
_BIDI_RTL_OK = ("R", "AL", "AN", "EN", "ES", "CS", "ET", "ON", "BN", "NSM")
_BIDI_LTR_OK = ("L", "EN", "ES", "CS", "ET", "ON", "BN", "NSM")


def _bidi_step(state, bidi: str):
    """The Bidi rule (RFC 5893) over one more code point: ``(direction, ending ok,
    number type)`` to the next, or ``None`` when the rule fails."""
    direction, ending, number = state
    if direction is None:  # rule 1: the first code point
        if bidi in _RTL:
            direction = "R"
        elif bidi == "L":
            direction = "L"
        else:
            return None
    if direction == "R":
        if bidi not in _BIDI_RTL_OK:  # rule 2
            return None
        if bidi in ("AN", "EN"):  # rule 4
            if number not in (None, bidi):
                return None
            number = bidi
        ending = bidi in ("R", "AL", "EN", "AN") or (bidi == "NSM" and ending)  # rule 3
    else:
        if bidi not in _BIDI_LTR_OK:  # rule 5
            return None
        ending = bidi in ("L", "EN") or (bidi == "NSM" and ending)  # rule 6
    return (direction, ending, number)


# A label state: (code points, third is "-", non-ASCII seen, the previous code point's
# (NFC class, virama, "l" or "-", Hebrew, Han/Hiragana/Katakana), last non-transparent
# code point joins right, pending requirement on the next code point, Bidi state).
_START = (0, 0, False, False, None, False, None, (None, False, None))


def _step(st, a: _Atom, size: tuple[int, int], bidi_rule: bool):  # noqa: C901
    """The label state after the code point of atom ``a``, or ``None`` (see the module
    docstring for the rules): ``size`` is (code points at most, non-ASCII ones at most)."""
    n, other_count, third_dash, other, prev, join_l, pending, bidi = st
    other_count += not a.ascii
    if n == size[0] or other_count > size[1]:
        return None
    if pending == "l" and a.special != 0x6C:
        return None
    if pending == "greek" and not a.greek:
        return None
    if pending == "hkh" and not a.hkh:
        return None
    if pending == "rd":  # after a ZERO WIDTH NON-JOINER: T* then R or D
        if a.join_r:
            pending = None
        elif not a.join_t:
            return None
    elif pending is not None:
        pending = None
    if a.special == 0x2D:  # hyphens: not first, not third and fourth
        if n == 0 or (n == 3 and third_dash):
            return None
        third_dash = n == 2
    if n == 0 and (a.mark or a.nfc == "NS"):  # no combining mark first
        return None
    if prev is not None:  # NFC, pairwise
        if a.nfc == "NS" and prev[0] in ("NS", "T"):
            return None
        if a.maybe and prev[0] in ("K", "T"):
            return None
    after_virama = prev is not None and prev[1]
    if a.special == 0x200D and not after_virama:  # CONTEXTJ
        return None
    if a.special == 0x200C and not after_virama:
        if not join_l:
            return None
        pending = "rd"
    if a.special == 0xB7:  # CONTEXTO
        if prev is None or prev[2] != 0x6C:
            return None
        pending = "l"
    if a.special == 0x375:
        pending = "greek"
    if a.special in (0x5F3, 0x5F4) and not (prev is not None and prev[3]):
        return None
    if a.special == 0x30FB and not (prev is not None and prev[4]):
        pending = "hkh"  # conservative: a Han, Hiragana or Katakana letter right after
    if not a.join_t:
        join_l = a.join_l
    if bidi_rule:
        bidi = _bidi_step(bidi, a.bidi)
        if bidi is None:
            return None
    elif a.bidi in ("R", "AL", "AN"):  # a right-to-left label: only under the Bidi rule
        return None
    last = (a.nfc, a.virama, a.special if a.special in (0x6C, 0x2D) else None, a.hebrew, a.hkh)
    return (n + 1, other_count, third_dash, other or not a.ascii, last, join_l, pending, bidi)


def _accepts(st, bidi_rule: bool) -> bool:
    """Whether a label may end in state ``st`` (a U-label: a non-ASCII code point)."""
    n, _count, _third, other, prev, _join, pending, bidi = st
    if n == 0 or not other or pending is not None or prev[2] == 0x2D:
        return False
    return not bidi_rule or bidi[1]


@cache
def _tables() -> _Tables:
    return _Tables()


def u_label_sizes() -> tuple[tuple[int, int], ...]:
    """The U-labels accepted, as (code points at most, non-ASCII ones at most): ``xn--``,
    the ASCII code points, ``-`` and :func:`_digits_bound` digits per other code point
    fit :data:`LABEL_OCTETS`. Short labels of any code points, and long ones of ASCII
    code points with one other."""
    top = _tables().top
    short = 1
    while 5 + (short + 1) * _digits_bound(top, short + 1) <= LABEL_OCTETS:
        short += 1
    one_other = LABEL_OCTETS - 5 - _digits_bound(top, LABEL_OCTETS) + 1
    return ((short, short), (one_other, 1))


def _u_label_size_dfa(atoms: list[_Atom], size: tuple[int, int], bidi_rule: bool) -> Dfa:
    start = _START if bidi_rule else (*_START[:7], None)
    ids = {start: 0}
    order = [start]
    trans: list[tuple[tuple[int, int, int], ...]] = []
    i = 0
    while i < len(order):
        st = order[i]
        i += 1
        row = []
        for k, a in enumerate(atoms):
            nxt = _step(st, a, size, bidi_rule)
            if nxt is not None:
                if nxt not in ids:
                    ids[nxt] = len(order)
                    order.append(nxt)
                row.append((k, k, ids[nxt]))
        trans.append(tuple(row))
    return Dfa(trans, [_accepts(st, bidi_rule) for st in order])


@cache
def u_label_dfa(bidi_rule: bool) -> tuple[Dfa, tuple[tuple[tuple[int, int], ...], ...]]:
    """The minimal automaton of the U-labels (``bidi_rule``: those that also satisfy the
    Bidi rule; otherwise those without a right-to-left code point), over atom numbers
    (character ``i`` is atom ``i``), and each atom's code point ranges. Built once per
    process (a fraction of a second)."""
    tables = _tables()
    atoms = [_Atom(k) for k in tables.atoms]
    dfa = Dfa.nothing()
    # the long U-labels (Latin names with one accented letter, mostly) outside names under
    # the Bidi rule, whose automaton would double
    for size in u_label_sizes()[:1] if bidi_rule else u_label_sizes():
        dfa = dfa.union(_u_label_size_dfa(atoms, size, bidi_rule).minimize())
    ranges = tuple(tuple(r) for r in tables.ranges)
    return dfa.minimize(), ranges


def idn_hostname_body(conv: ConversionContext) -> Expr | None:
    """The encoded string content (no quotes) of ``idn-hostname``: the names of LDH
    labels of the ``hostname`` shapes (any of the four full stops between them), and the
    names of at most :data:`LABELS` labels with a U-label, all of them without a
    right-to-left code point or all of them under the Bidi rule. The rules it needs (each
    U-label automaton state that is shared, each atom's class) are added to ``conv``,
    from one template built per process (renamed where a name is taken)."""
    body, rules, with_refs = _template()
    if not any(name in conv.rules for name in rules):  # the template's names are free
        conv.rules.update(rules)
        return body
    names = {name: conv.new_rule(name.rsplit("_", 1)[0]) for name in rules}
    memo: dict[int, Expr] = {}
    for name, rule in rules.items():
        conv.rules[names[name]] = _renamed(rule, names, with_refs, memo)
    return _renamed(body, names, with_refs, memo)


def _renamed(expr: Expr, names: dict[str, str], with_refs: set[int], memo: dict) -> Expr:
    """``expr`` with its rule references renamed; a node without one (``with_refs``: the
    ids of those with one) is kept as it is, so the encoded classes stay shared."""
    if id(expr) not in with_refs:
        return expr
    got = memo.get(id(expr))
    if got is not None:
        return got
    out: Expr
    if isinstance(expr, RuleRef):
        out = RuleRef(names[expr.name])
    elif isinstance(expr, Repeat):
        out = Repeat(_renamed(expr.item, names, with_refs, memo), expr.min, expr.max)
    else:  # a sequence or a choice
        out = type(expr)(tuple(_renamed(x, names, with_refs, memo) for x in expr.items))  # type: ignore[union-attr, call-arg]
    memo[id(expr)] = out
    return out


def _nodes_with_refs(expr: Expr, out: set[int], seen: set[int]) -> bool:
    """Add to ``out`` the ids of the nodes of ``expr`` that hold a rule reference."""
    if id(expr) in seen:
        return id(expr) in out
    seen.add(id(expr))
    if isinstance(expr, RuleRef):
        found = True
    elif isinstance(expr, Repeat):
        found = _nodes_with_refs(expr.item, out, seen)
    elif isinstance(expr, (Seq, Choice)):
        found = False
        for item in expr.items:
            found = _nodes_with_refs(item, out, seen) or found
    else:
        found = False
    if found:
        out.add(id(expr))
    return found


class _Rules:
    """The part of a conversion context the template is built in: rules named
    ``base_n``."""

    def __init__(self) -> None:
        self.rules: dict[str, Expr | None] = {}
        self.string_classes: dict[tuple, Expr | None] = {}
        self.made = 0

    def new_rule(self, base: str) -> str:
        self.made += 1
        while f"{base}_{self.made}" in self.rules:
            self.made += 1
        self.rules[f"{base}_{self.made}"] = None
        return f"{base}_{self.made}"


@cache
def _template() -> tuple[Expr, dict[str, Expr], set[int]]:
    from treegram.frontends.json_schema._formats import _DOTS, _idn_hostname, _ldh_label

    conv = _Rules()
    encode = _string_encoder(conv)  # type: ignore[arg-type]
    dot = encode_expr(cls(list(_DOTS)))
    letter = cls([(ord("a"), ord("z")), (ord("A"), ord("Z"))])
    names = [encode_expr(_idn_hostname(u_labels=False))]
    atom_rules: dict[int, Expr | None] = {}

    def atom_rule(k: int, ranges) -> Expr | None:
        got = atom_rules.get(k, _MISSING)
        if got is _MISSING:
            body = encode(tuple(ranges))
            if body is not None:
                name = conv.new_rule("idn_atom")
                conv.rules[name] = body
                body = RuleRef(name)
            got = atom_rules[k] = body
        return got  # type: ignore[return-value]

    def rule(base: str, body: Expr | None) -> RuleRef:
        # a rule read from several places of the names, instead of a copy in each
        name = conv.new_rule(base)
        conv.rules[name] = body
        return RuleRef(name)

    for bidi_rule in (False, True):
        dfa, atom_ranges = u_label_dfa(bidi_rule)

        def atoms_to_class(ranges: tuple, atom_ranges=atom_ranges) -> Expr | None:
            # each atom's encoded class is a rule, read by every transition over it
            return alt(
                *(atom_rule(k, atom_ranges[k]) for lo, hi in ranges for k in range(lo, hi + 1))
            )

        name = conv.new_rule("idn_u_label")
        conv.rules[name] = dfa_expr(conv, dfa, "idn_u_label", atoms_to_class)  # type: ignore[arg-type]
        u_label = RuleRef(name)
        # an ASCII label in a name under the Bidi rule starts with a letter (rule 1)
        ldh = rule(
            "idn_ldh_label", encode_expr(_ldh_label(LABEL_OCTETS, letter if bidi_rule else None))
        )
        label = rule("idn_label", alt(ldh, u_label))
        for before in range(LABELS):  # LDH labels before the first U-label
            names.append(
                seq(
                    Repeat(seq(ldh, dot), before, before),
                    u_label,
                    Repeat(seq(dot, label), 0, LABELS - 1 - before),
                )
            )
    body = alt(*names)
    if body is None or any(rule is None for rule in conv.rules.values()):
        raise AssertionError("the idn-hostname template has an empty part")  # never: tested
    with_refs: set[int] = set()
    seen: set[int] = set()
    for node in (body, *conv.rules.values()):
        _nodes_with_refs(node, with_refs, seen)  # type: ignore[arg-type]
    return body, conv.rules, with_refs  # type: ignore[return-value]


_MISSING = object()
