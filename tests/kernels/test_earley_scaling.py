"""The Earley recognizer on hostile grammars: linear growth, and the same language.

Growth is asserted structurally (chart items, largest Earley set, states classified for a
first mask), never with timings. The language and the masks are checked against a small,
independent recognizer written here in plain Python: least fixpoints of "node derives
``s[i:j]``" and "node derives a string that starts with ``s[i:]``" over the grammar's
syntax tree, which knows nothing of automata, charts or classification.
"""

from __future__ import annotations

import numpy as np
import pytest
from matcher_rows import mask_of

import treegram as tg
from treegram.automaton._build import build_automaton
from treegram.kernels._earley import OVERFLOW, accept_bytes, new_chart, start_chart

hypothesis = pytest.importorskip("hypothesis")
st = hypothesis.strategies


# ------------------------------------------------------------------ chart growth
def chart_shape(grammar: str, data: bytes) -> tuple[int, int]:
    """(items in the whole chart, items of the largest set) after reading ``data``."""
    ab = build_automaton(tg.Grammar.from_ebnf(grammar).ir).packed
    items_s, items_o, set_starts, text = new_chart(256, len(data) + 3)
    while start_chart(ab, items_s, items_o, set_starts, text) == OVERFLOW:
        grown = 2 * items_s.size
        items_s, items_o = np.resize(items_s, grown), np.resize(items_o, grown)
    buf = np.frombuffer(bytearray(data), dtype=np.uint8)  # writable, as the matcher's
    while True:  # sets above the top are scratch, so a retry after growing starts over
        top = accept_bytes(ab, items_s, items_o, set_starts, text, 0, buf, 0, buf.size)
        if top != OVERFLOW:
            break
        grown = 2 * items_s.size
        items_s, items_o = np.resize(items_s, grown), np.resize(items_o, grown)
    assert top == len(data), "the input must be accepted"
    sizes = np.diff(set_starts[: top + 2])
    return int(set_starts[top + 1]), int(sizes.max())


def nullable_chain(n: int) -> str:
    """``root ::= r0 "x"`` over ``r_i ::= r_{i+1} | ""`` (i < n), ``r_n ::= "y"``."""
    rules = ['root ::= r0 "x"'] + [f'r{i} ::= r{i + 1} | ""' for i in range(n)]
    return "\n".join(rules + [f'r{n} ::= "y"'])


HOSTILE = {
    # name: (grammar of size n, input of size n)
    "statements": (
        lambda n: 'root ::= stmt root | stmt\nstmt ::= "stmt;\\n"',
        lambda n: b"stmt;\n" * n,
    ),
    "bytes": (lambda n: 'root ::= "a" root | "a"', lambda n: b"a" * n),
    "optional tail": (lambda n: 'root ::= ("ab" root)?', lambda n: b"ab" * n),
    "comma list": (
        lambda n: 'root ::= "[" items "]"\nitems ::= "1" ("," items)?',
        lambda n: b"[" + b",".join([b"1"] * n) + b"]",
    ),
    "three-rule cycle": (
        lambda n: 'root ::= "a" r1 | ""\nr1 ::= "b" r2\nr2 ::= "c" root',
        lambda n: b"abc" * n,
    ),
    "nullable chain": (nullable_chain, lambda n: b"x"),
}


@pytest.mark.parametrize("name", list(HOSTILE))
def test_chart_grows_linearly(name):
    grammar, data = HOSTILE[name]
    items_1k, largest_1k = chart_shape(grammar(1000), data(1000))
    items_2k, largest_2k = chart_shape(grammar(2000), data(2000))
    assert items_2k <= 2.2 * items_1k, (items_1k, items_2k)
    if name != "nullable chain":  # its set 0 predicts every rule once, by nature
        assert largest_2k == largest_1k, (largest_1k, largest_2k)


VOCAB = ["a", "b", "c", "x", "y", "ab", "ba", "aab", "bb", "<eos>"]
EOS = VOCAB.index("<eos>")


@pytest.fixture(scope="module")
def compiler():
    return tg.GrammarCompiler(tg.TokenizerInfo(VOCAB, vocab_size=len(VOCAB), stop_token_ids=[EOS]))


def test_first_mask_of_nullable_chain_classifies_a_bounded_number_of_states(compiler):
    classified = []
    for n in (1000, 2000):
        compiled = compiler.compile_grammar(nullable_chain(n))
        matcher = tg.GrammarMatcher(compiled)
        row = mask_of(matcher)
        allowed = {VOCAB[t] for t in range(len(VOCAB)) if row[t >> 5] >> (t & 31) & 1}
        assert allowed == {"x", "y"}
        classified.append(
            compiled.automaton.n_states - compiled._store.unclassified_states().shape[0]
        )
    assert classified[0] == classified[1] <= 4, classified


# ------------------------------------------------------------------ reference recognizer
# A grammar is {rule name: node}; nodes are tuples: ("lit", str), ("ref", name),
# ("seq", [nodes]), ("alt", [nodes]), ("opt", node), ("star", node), ("plus", node).
# Every rule must derive some string (the generators below guarantee it).


def _compose(a: set, b: set) -> set:
    return {(i, k) for i, j in a for j2, k in b if j == j2}


def _star(rel: set, n: int) -> set:
    out = {(i, i) for i in range(n + 1)}
    while True:
        more = out | _compose(out, rel)
        if more == out:
            return out
        out = more


class Reference:
    """Plain-Python recognizer for one grammar."""

    def __init__(self, rules: dict, root: str = "root") -> None:
        self.rules, self.root = rules, root

    def _spans(self, node, s: str, rule_spans: dict) -> set:
        """{(i, j)}: ``node`` derives ``s[i:j]``, rules taken from ``rule_spans``."""
        kind, arg = node
        n = len(s)
        if kind == "lit":
            return {(i, i + len(arg)) for i in range(n + 1) if s.startswith(arg, i)}
        if kind == "ref":
            return rule_spans[arg]
        if kind == "seq":
            out = {(i, i) for i in range(n + 1)}
            for item in arg:
                out = _compose(out, self._spans(item, s, rule_spans))
            return out
        if kind == "alt":
            return set().union(*(self._spans(item, s, rule_spans) for item in arg))
        inner = self._spans(arg, s, rule_spans)
        if kind == "opt":
            return inner | {(i, i) for i in range(n + 1)}
        closure = _star(inner, n)
        return closure if kind == "star" else _compose(inner, closure)

    def _all_spans(self, s: str) -> dict:
        rule_spans = {name: set() for name in self.rules}
        while True:
            new = {name: self._spans(body, s, rule_spans) for name, body in self.rules.items()}
            if new == rule_spans:
                return rule_spans
            rule_spans = new

    def _starts(self, node, s: str, spans: dict, rule_starts: dict) -> set:
        """{i}: ``node`` derives a string that begins with ``s[i:]``."""
        kind, arg = node
        n = len(s)
        if kind == "lit":
            return {i for i in range(n + 1) if arg.startswith(s[i:])}
        if kind == "ref":
            return rule_starts[arg]
        if kind == "alt":
            return set().union(*(self._starts(item, s, spans, rule_starts) for item in arg))
        if kind == "seq":
            # the input ends inside item m; items before it derive s[i:j] exactly
            out = {n}
            before = {(i, i) for i in range(n + 1)}
            for item in arg:
                inner = self._starts(item, s, spans, rule_starts)
                out |= {i for i, j in before if j in inner}
                before = _compose(before, self._spans(item, s, spans))
            return out
        inner = self._starts(arg, s, spans, rule_starts)
        if kind == "opt":
            return inner | {n}
        closure = _star(self._spans(arg, s, spans), n)
        return {i for i, j in closure if j in inner} | ({n} if kind == "star" else set())

    def viable(self, s: str) -> bool:
        """Whether ``s`` is a prefix of some word of the language."""
        spans = self._all_spans(s)
        rule_starts = {name: set() for name in self.rules}
        while True:
            new = {
                name: self._starts(body, s, spans, rule_starts) for name, body in self.rules.items()
            }
            if new == rule_starts:
                return 0 in rule_starts[self.root]
            rule_starts = new

    def complete(self, s: str) -> bool:
        """Whether ``s`` is a word of the language."""
        return (0, len(s)) in self._all_spans(s)[self.root]

    def mask(self, prefix: str) -> set:
        """Token ids allowed after ``prefix``."""
        allowed = {t for t, text in enumerate(VOCAB) if t != EOS and self.viable(prefix + text)}
        return allowed | ({EOS} if self.complete(prefix) else set())


def render(node) -> str:
    """The node in treegram's EBNF."""
    kind, arg = node
    if kind == "lit":
        return f'"{arg}"'
    if kind == "ref":
        return arg
    if kind in ("seq", "alt"):
        if not arg:
            return '""'
        return "(" + (" " if kind == "seq" else " | ").join(render(x) for x in arg) + ")"
    return f"({render(arg)})" + {"opt": "?", "star": "*", "plus": "+"}[kind]


def ebnf(rules: dict) -> str:
    return "\n".join(f"{name} ::= {render(body)}" for name, body in rules.items()) + "\n"


def assert_matches_reference(compiler, rules: dict, text: str) -> None:
    """Masks, accept/reject and completion of treegram and the reference agree along
    ``text`` (fed one character token at a time, stopping at the first rejection)."""
    ref = Reference(rules)
    matcher = tg.GrammarMatcher(compiler.compile_grammar(ebnf(rules)))
    for k in range(len(text) + 1):
        prefix = text[:k]
        row = mask_of(matcher)
        got = {t for t in range(len(VOCAB)) if row[t >> 5] >> (t & 31) & 1}
        assert got == ref.mask(prefix), (ebnf(rules), prefix)
        assert matcher.is_completed() == ref.complete(prefix), (ebnf(rules), prefix)
        if k == len(text):
            break
        ok = matcher.accept_token(VOCAB.index(text[k]))
        assert ok == ref.viable(text[: k + 1]), (ebnf(rules), text[: k + 1])
        if not ok:
            break


def test_reference_recognizer_on_known_cases():
    # right recursion, a nullable chain and left recursion, decided by hand
    rr = Reference({"root": ("alt", [("seq", [("lit", "a"), ("ref", "root")]), ("lit", "b")])})
    assert rr.complete("aab") and not rr.complete("aa") and rr.viable("aa")
    assert not rr.viable("ba") and rr.mask("a") == {VOCAB.index(t) for t in ("a", "b", "ab", "aab")}
    chain = {
        "root": ("seq", [("ref", "r0"), ("lit", "x")]),
        "r0": ("alt", [("ref", "r1"), ("lit", "")]),
        "r1": ("lit", "y"),
    }
    assert Reference(chain).complete("x") and Reference(chain).complete("yx")
    assert not Reference(chain).viable("xy")
    left = {"root": ("alt", [("seq", [("ref", "root"), ("lit", "a")]), ("lit", "")])}
    assert Reference(left).complete("aaa") and not Reference(left).viable("b")


FAMILIES = {
    "statements": {
        "root": ("alt", [("seq", [("ref", "stmt"), ("ref", "root")]), ("ref", "stmt")]),
        "stmt": ("lit", "ab"),
    },
    "mutual right recursion": {
        "root": ("alt", [("seq", [("lit", "a"), ("ref", "r1")]), ("lit", "")]),
        "r1": ("seq", [("lit", "b"), ("ref", "root")]),
    },
    "three-rule cycle": {
        "root": ("alt", [("seq", [("lit", "a"), ("ref", "r1")]), ("ref", "r2"), ("lit", "x")]),
        "r1": ("alt", [("seq", [("lit", "b"), ("ref", "r2")]), ("lit", "y")]),
        "r2": ("seq", [("lit", "c"), ("opt", ("ref", "root"))]),
    },
    "cycle member also called mid-rule": {
        "root": (
            "alt",
            [("seq", [("ref", "r1"), ("lit", "c")]), ("seq", [("lit", "a"), ("ref", "r1")])],
        ),
        "r1": ("alt", [("seq", [("lit", "b"), ("ref", "root")]), ("lit", "")]),
    },
    "nullable chain": {
        "root": ("seq", [("ref", "r0"), ("lit", "x")]),
        **{f"r{i}": ("alt", [("ref", f"r{i + 1}"), ("lit", "")]) for i in range(6)},
        "r6": ("alt", [("lit", "y"), ("seq", [("lit", "a"), ("ref", "r3")])]),
    },
    "tail call under star": {
        "root": ("seq", [("star", ("lit", "a")), ("opt", ("seq", [("lit", "b"), ("ref", "root")]))])
    },
    "tail call and left recursion": {
        "root": (
            "alt",
            [
                ("seq", [("ref", "root"), ("lit", "a")]),
                ("seq", [("lit", "b"), ("ref", "root")]),
                ("lit", "c"),
            ],
        )
    },
}


@pytest.mark.parametrize("name", list(FAMILIES))
@pytest.mark.parametrize("text", ["abababa", "aaayaxx", "bbbcaab", "ababx", "abcabcx", "cabcay"])
def test_hostile_families_match_reference(compiler, name, text):
    assert_matches_reference(compiler, FAMILIES[name], text)


# ------------------------------------------------------------------ random grammars
NAMES = ["root", "r1", "r2", "r3"]


@st.composite
def hostile_grammars(draw):
    """Random grammars rich in right recursion (calls in tail position, also under ``?``
    and ``*``), nullable rules and chains of nullable calls."""
    n_rules = draw(st.integers(1, 4))
    names = NAMES[:n_rules]
    lit = st.sampled_from(["", "", "a", "b", "c", "ab", "ba"]).map(lambda s: ("lit", s))
    ref = st.sampled_from(names).map(lambda s: ("ref", s))
    leaf = st.one_of(lit, lit, ref)
    small = st.one_of(leaf, leaf, st.tuples(st.sampled_from(["opt", "star", "plus"]), leaf))
    tail = st.one_of(
        ref,
        st.tuples(st.just("opt"), st.tuples(st.just("seq"), st.tuples(small, ref).map(list))),
        st.tuples(st.just("star"), st.tuples(st.just("seq"), st.tuples(small, ref).map(list))),
    )
    rules = {}
    for name in names:
        alts = []
        for _ in range(draw(st.integers(1, 3))):
            items = draw(st.lists(small, max_size=2))
            if draw(st.integers(0, 3)):  # mostly: tail calls make right recursion and cycles
                items.append(draw(tail))
            alts.append(("seq", items))
        # a reference-free alternative keeps every rule productive
        alts.append(draw(lit))
        rules[name] = ("alt", alts)
    return rules


@hypothesis.settings(
    derandomize=True,
    deadline=None,
    max_examples=150,
    suppress_health_check=[
        hypothesis.HealthCheck.function_scoped_fixture,
        hypothesis.HealthCheck.too_slow,
    ],
)
@hypothesis.given(rules=hostile_grammars(), text=st.text(alphabet="abc", max_size=6))
def test_random_hostile_grammars_match_reference(compiler, rules, text):
    assert_matches_reference(compiler, rules, text)
