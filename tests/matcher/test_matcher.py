"""GrammarMatcher semantics, differentially against xgrammar on a small vocabulary.

Both engines get the identical vocabulary (printable ASCII single characters, a few
multi-character tokens, a stop token, an empty special token, a partial UTF-8 byte,
and padding ids past the real tokens) and the identical EBNF text. After every step the
results of ``accept_token``/``accept_string``, ``is_terminated``, ``is_completed`` and the
full next-token bitmask (the first ``vocab_size`` bits) must agree.

Intentional differences checked here, not compared:

* an id outside ``[0, vocab_size)`` raises in treegram (xgrammar logs and returns False);
* filling a mask after a stop token raises :class:`treegram.MatcherStateError` (a
  ``RuntimeError``, which is what xgrammar raises);
* ``find_jump_forward_string`` returns the longest complete-UTF-8 prefix where xgrammar
  raises ``UnicodeDecodeError`` on a partial character.
"""

from __future__ import annotations

import numpy as np
import pytest

import treegram as tg

xgr = pytest.importorskip("xgrammar")
torch = pytest.importorskip("torch")

# --------------------------------------------------------------------------- vocabulary
VOCAB: list[str | bytes] = [chr(c) for c in range(32, 127)] + [
    "\n",
    "ab",
    "abc",
    '",',
    "<eos>",
    "",  # special: decodes to nothing
    b"\xe4",  # first byte of "中" / "丰" (a partial UTF-8 character)
    "中",
    "ac",
]
N_PAD = 5  # padding ids past the real tokens: special too
V = len(VOCAB) + N_PAD
N_WORDS = (V + 31) // 32
EOS = VOCAB.index("<eos>")
EMPTY = VOCAB.index("")
PARTIAL = VOCAB.index(b"\xe4")
SPECIAL_IDS = [EMPTY, *range(len(VOCAB), V)]


# (grammar, differing tokens) where xgrammar's mask contradicted its own accept_token
XGRAMMAR_MASK_DEFECTS: list[tuple[str, list]] = []


def tid(text: str | bytes) -> int:
    """The id of a token of VOCAB."""
    return VOCAB.index(text)


@pytest.fixture(scope="module")
def compilers():
    ti = tg.TokenizerInfo(VOCAB, vocab_size=V, stop_token_ids=[EOS])
    xi = xgr.TokenizerInfo(VOCAB, vocab_size=V, stop_token_ids=[EOS])
    # treegram also lists the padding ids (as b""); xgrammar lists the real tokens only
    assert ti.decoded_vocab[: len(VOCAB)] == xi.decoded_vocab
    assert ti.special_token_ids == xi.special_token_ids == SPECIAL_IDS
    return tg.GrammarCompiler(ti), xgr.GrammarCompiler(xi)


def unpack(bitmask) -> np.ndarray:
    """Bool array of the first V bits of row 0 (independent of treegram's helpers)."""
    arr = bitmask.numpy() if isinstance(bitmask, torch.Tensor) else np.asarray(bitmask)
    bits = np.unpackbits(np.ascontiguousarray(arr[0]).view(np.uint8), bitorder="little")
    return bits[:V].astype(bool)


class Duo:
    """A treegram matcher and an xgrammar matcher driven in lockstep."""

    def __init__(self, compilers, grammar: str, **kwargs) -> None:
        tc, xc = compilers
        self.t = tg.GrammarMatcher(tc.compile_grammar(grammar), **kwargs)
        self.x = xgr.GrammarMatcher(xc.compile_grammar(grammar), **kwargs)
        self.grammar = grammar
        self.terminate_without_stop = kwargs.get("terminate_without_stop_token", False)
        self.n_fills = 0

    # ---------------------------------------------------------------- operations
    def token(self, token_id: int) -> bool:
        r_t, r_x = self.t.accept_token(token_id), self.x.accept_token(token_id)
        assert r_t == r_x, (
            self.grammar,
            token_id,
            VOCAB[token_id] if token_id < len(VOCAB) else "<pad>",
        )
        return r_t

    def string(self, text: str | bytes) -> bool:
        r_t, r_x = self.t.accept_string(text), self.x.accept_string(text)
        assert r_t == r_x, (self.grammar, text)
        return r_t

    def rollback(self, n: int) -> None:
        self.t.rollback(n)
        self.x.rollback(n)

    def reset(self) -> None:
        self.t.reset()
        self.x.reset()

    # ---------------------------------------------------------------- comparisons
    def mask(self) -> np.ndarray:
        """Fill both masks, compare them, and return treegram's as bools."""
        xb = xgr.allocate_token_bitmask(1, V)
        need_x = self.x.fill_next_token_bitmask(xb)
        # alternate numpy / torch buffers and garbage initial contents
        self.n_fills += 1
        if self.n_fills % 2:
            tb = np.full((1, N_WORDS), -1 if self.n_fills % 4 == 1 else 0x5A5A5A5A, np.int32)
        else:
            tb = torch.full((1, N_WORDS), 0 if self.n_fills % 4 == 0 else -1, dtype=torch.int32)
        need_t = self.t.fill_next_token_bitmask(tb)
        mt, mx = unpack(tb), unpack(xb)
        if not np.array_equal(mt, mx):
            self._explain_difference(mt, mx)
        else:
            assert need_t == need_x
        assert not mt[SPECIAL_IDS].any(), "a special token is allowed"
        return mt

    def _explain_difference(self, mt: np.ndarray, mx: np.ndarray) -> None:
        """Masks differ: accept only a known xgrammar defect, where xgrammar's own
        ``accept_token`` agrees with treegram's mask and its mask contradicts it."""
        differing = np.flatnonzero(mt != mx)
        names = [VOCAB[i] if i < len(VOCAB) else i for i in differing]
        for t in differing.tolist():
            by_x_accept = self.x.fork().accept_token(t)
            by_t_accept = self.t.fork().accept_token(t)
            if not (by_x_accept == by_t_accept == bool(mt[t])):
                pytest.fail(
                    f"{self.grammar!r}: masks differ on {names!r}; token {VOCAB[t]!r}: "
                    f"treegram mask {bool(mt[t])}, xgrammar mask {bool(mx[t])}, "
                    f"treegram accept {by_t_accept}, xgrammar accept {by_x_accept}"
                )
        XGRAMMAR_MASK_DEFECTS.append((self.grammar, names))

    def assert_mask_self_consistent(self, mask: np.ndarray) -> None:
        """treegram's mask bit of every token equals what accept_token does on a fork."""
        accepted = np.array([self.t.fork().accept_token(t) for t in range(V)])
        assert np.array_equal(accepted, mask), (
            self.grammar,
            [VOCAB[i] for i in np.flatnonzero(accepted != mask)],
        )

    def check(self) -> np.ndarray | None:
        """Compare the whole observable state; return treegram's mask (None if stopped)."""
        assert self.t.is_terminated() == self.x.is_terminated(), self.grammar
        assert self.t.is_completed() == self.x.is_completed(), self.grammar
        if self.t.is_terminated() and not self.terminate_without_stop:
            # both refuse to fill a mask after the stop token
            with pytest.raises(tg.MatcherStateError, match="stop token"):
                self.t.fill_next_token_bitmask(np.zeros((1, N_WORDS), np.int32))
            with pytest.raises(RuntimeError):
                self.x.fill_next_token_bitmask(xgr.allocate_token_bitmask(1, V))
            return None
        return self.mask()


def run_ops(duo: Duo, ops) -> None:
    duo.check()
    for op in ops:
        kind, _, arg = op.partition(":")
        if kind == "t":
            duo.token(tid(arg))
        elif kind == "s":
            duo.string(arg)
        elif kind == "id":
            duo.token(int(arg))
        elif kind == "stop":
            duo.token(EOS)
        elif kind == "rb":
            duo.rollback(int(arg))
        elif kind == "reset":
            duo.reset()
        else:  # pragma: no cover
            raise AssertionError(op)
        duo.check()


# ----------------------------------------------------------------- table of scenarios
SCENARIOS = {
    "star_alt_optional": (
        r'root ::= "a" ("b" | "c")* "d"?',
        [
            "stop",
            "t:b",
            "t:a",
            "t:abc",
            "t:b",
            "t:c",
            "t:ab",
            "stop",
            "t:b",
            "rb:1",
            "t:d",
            "t:b",
            "stop",
            "rb:1",
            "rb:3",
            "t:ac",
            "t:d",
            "stop",
            "reset",
            "t:abc",
            "stop",
        ],
    ),
    "quoted_string": (
        r'root ::= "[" "\"" [a-z]* "\"," ("\"" [a-z]* "\"")? "]"',
        [
            't:"',
            "t:[",
            't:"',
            "t:ab",
            "t:z",
            't:",',
            "t:]",
            't:"',
            "t:abc",
            't:",',
            "rb:1",
            't:"',
            "t:]",
            "stop",
            "rb:2",
            "t:]",
            "stop",
        ],
    ),
    "nested_recursion": (
        r"""root ::= expr
expr ::= term ("+" term)*
term ::= [0-9]+ | "(" expr ")"
""",
        [
            "t:(",
            "t:(",
            "t:1",
            "t:)",
            "stop",
            "t:+",
            "t:2",
            "t:)",
            "stop",
            "rb:2",
            "t:)",
            "t:)",
            "rb:1",
            "t:)",
            "stop",
            "rb:1",
            "t:+",
            "t:(",
            "t:3",
            "t:)",
            "stop",
        ],
    ),
    "nullable_root": (
        r'root ::= ("ab" | "c")*',
        [
            "stop",
            "rb:1",
            "t:ab",
            "t:abc",
            "t:a",
            "t:b",
            "t:c",
            "stop",
            "rb:1",
            "t:a",
            "stop",
            "t:c",
            "t:b",
            "reset",
            "stop",
        ],
    ),
    "accept_string_steps": (
        r'root ::= [a-c]{2,4} "-" [a-c]+ "."',
        [
            "s:ab",
            "s:cc",
            "s:c",
            "rb:1",
            "s:-",
            "s:abc",
            "s:ab.",
            "rb:2",
            "s:aa.",
            "stop",
            "rb:2",
            "s:a",
            "s:b",
            "s:c",
            "s:.",
            "rb:4",
            "s:cbcc",
            "s:-a.",
            "stop",
            "rb:1",
            "rb:1",
            "s:-",
            "s:",
            "t:a",
            "rb:1",
            "s:-a.x",
            "s:-a.",
            "stop",
        ],
    ),
    "rejected_strings_leave_state": (
        r'root ::= "abc" "x"? "def"',
        ["s:abd", "s:ab", "s:cxdz", "s:cdef", "rb:1", "s:cxdef", "stop", "rb:3", "s:abc", "t:abc"],
    ),
    "special_and_padding_tokens": (
        r'root ::= "a"? "b"',
        [
            f"id:{EMPTY}",
            f"id:{V - 1}",
            f"id:{len(VOCAB)}",
            "t:a",
            f"id:{EMPTY}",
            "t:b",
            f"id:{EMPTY}",
            "stop",
            f"id:{EMPTY}",
        ],
    ),
    "utf8_tokens": (
        r'root ::= ("中" | "丰")+ "!"',
        [
            f"id:{PARTIAL}",
            "t:中",
            "t:!",
            "rb:1",
            "t:中",
            f"id:{PARTIAL}",
            "t:!",
            "rb:1",
            "t:!",
            "stop",
            "rb:3",
            "s:丰!",
            "stop",
        ],
    ),
    "multichar_across_rules": (
        r"""root ::= a b
a ::= "a" | "x"
b ::= "b" "c"?
""",
        ["t:abc", "rb:1", "t:ab", "t:c", "stop", "rb:3", "t:x", "t:b", "stop"],
    ),
    "stop_only_when_complete": (
        r'root ::= "a" "b" "c"',
        ["stop", "t:a", "stop", "t:b", "stop", "t:c", "stop", "t:a", "rb:1", "stop"],
    ),
}


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_scenario_matches_xgrammar(compilers, name):
    grammar, ops = SCENARIOS[name]
    run_ops(Duo(compilers, grammar), ops)


def test_utf8_scenario_uses_bytes_strings(compilers):
    # accept_string of bytes: the second half of a character after a partial token
    duo = Duo(compilers, r'root ::= "中" "!"')
    assert duo.token(PARTIAL)
    assert duo.t.accept_string(b"\xb8\xad")
    assert duo.x.accept_string(b"\xb8\xad")
    duo.check()
    assert duo.token(tid("!"))
    assert duo.token(EOS)
    duo.check()


# ------------------------------------------------------------------------- rollback
def test_rollback_counts_strings_as_one_step(compilers):
    duo = Duo(compilers, r"root ::= [a-c]*")
    assert duo.string("abcabc")
    assert duo.token(tid("ab"))
    assert duo.string("c")
    assert duo.t.num_accepted_steps() == 3
    before = duo.check()
    assert duo.string("abc")
    duo.rollback(1)
    assert np.array_equal(duo.check(), before)
    duo.rollback(3)
    duo.check()
    assert duo.t.num_accepted_steps() == 0


def test_rollback_past_history_raises_and_keeps_state(compilers):
    duo = Duo(compilers, r'root ::= "a" "b" "c" "d"')
    duo.token(tid("a"))
    duo.string("b")
    before = duo.check()
    with pytest.raises(tg.MatcherStateError, match="3") as info:
        duo.t.rollback(3)
    assert isinstance(info.value, RuntimeError)
    with pytest.raises(RuntimeError):
        duo.x.rollback(3)
    assert np.array_equal(duo.check(), before)
    duo.rollback(0)
    assert np.array_equal(duo.check(), before)
    duo.rollback(2)
    duo.check()
    with pytest.raises(tg.MatcherStateError):
        duo.t.rollback(1)
    with pytest.raises(RuntimeError):
        duo.x.rollback(1)


def test_rollback_of_stop_token(compilers):
    duo = Duo(compilers, r'root ::= "a"+')
    duo.token(tid("a"))
    before = duo.check()
    assert duo.token(EOS)
    assert duo.t.is_terminated() and duo.t.is_completed()
    duo.check()
    assert not duo.token(tid("a"))  # nothing after termination
    assert not duo.string("a")
    assert not duo.token(EOS)
    duo.rollback(1)
    assert not duo.t.is_terminated()
    assert np.array_equal(duo.check(), before)
    assert duo.token(tid("a"))
    assert duo.token(EOS)
    duo.rollback(2)
    assert np.array_equal(duo.check(), before)


def test_reset_returns_to_initial_state(compilers):
    duo = Duo(compilers, r'root ::= ("a" | "b")+ "c"')
    initial = duo.check()
    run_ops(duo, ["t:a", "t:b", "t:c", "stop"])
    duo.reset()
    assert np.array_equal(duo.check(), initial)
    assert duo.t.num_accepted_steps() == 0
    with pytest.raises(tg.MatcherStateError):
        duo.t.rollback(1)


# ----------------------------------------------------------------------------- fork
def test_fork_is_independent(compilers):
    grammar = r'root ::= "x" ("ab" | "ac")* "."'
    duo = Duo(compilers, grammar)
    duo.token(tid("x"))
    duo.token(tid("ab"))
    at_fork = duo.check()

    twin = duo.t.fork()
    twin_x = duo.x.fork()
    assert twin.num_accepted_steps() == 2
    # advance the original: the twin keeps the state at the fork
    assert duo.token(tid("ac"))
    assert duo.token(tid("."))
    duo.check()
    twin_duo = object.__new__(Duo)
    twin_duo.t, twin_duo.x, twin_duo.grammar, twin_duo.n_fills = twin, twin_x, grammar, 0
    twin_duo.terminate_without_stop = False
    assert np.array_equal(twin_duo.check(), at_fork)
    # advance the twin differently, roll it back past the fork point
    run_ops(twin_duo, ["t:ab", "t:ab", "rb:3", "t:ac", "t:.", "stop"])
    # the original is untouched by the twin's operations
    assert duo.t.num_accepted_steps() == 4
    assert duo.token(EOS)
    duo.check()
    duo.rollback(3)
    duo.check()
    assert twin.is_terminated()


def test_fork_of_terminated_matcher(compilers):
    duo = Duo(compilers, r'root ::= "a"')
    duo.token(tid("a"))
    duo.token(EOS)
    twin = duo.t.fork()
    assert twin.is_terminated()
    twin.rollback(1)
    assert not twin.is_terminated()
    assert duo.t.is_terminated()


# ----------------------------------------------------------------------- stop tokens
@pytest.mark.parametrize(
    ("grammar", "prefix"),
    [
        (r'root ::= "a"*', ""),
        (r'root ::= "a"*', "aaa"),
        (r'root ::= "a"+ "b"?', ""),
        (r'root ::= "a"+ "b"?', "a"),
        (r'root ::= "a"+ "b"?', "ab"),
        (r'root ::= x "!"' "\n" r'x ::= "" | "q" x', "qq"),
        (r'root ::= x "!"' "\n" r'x ::= "" | "q" x', "qq!"),
    ],
)
def test_stop_token_allowed_exactly_when_grammar_can_end(compilers, grammar, prefix):
    duo = Duo(compilers, grammar)
    assert duo.string(prefix)
    mask = duo.check()
    assert mask[EOS] == duo.t.is_completed()
    assert duo.token(EOS) == duo.t.is_completed()
    assert duo.t.is_terminated() == bool(mask[EOS])
    duo.check()


def test_fill_after_termination_raises(compilers):
    duo = Duo(compilers, r'root ::= "a"')
    duo.token(tid("a"))
    duo.token(EOS)
    with pytest.raises(tg.MatcherStateError) as info:
        duo.t.fill_next_token_bitmask(np.zeros((1, N_WORDS), np.int32))
    assert isinstance(info.value, RuntimeError)
    with pytest.raises(RuntimeError):
        duo.x.fill_next_token_bitmask(xgr.allocate_token_bitmask(1, V))
    # divergence: xgrammar raises here, treegram answers ""
    assert duo.t.find_jump_forward_string() == ""
    with pytest.raises(RuntimeError, match="stop token"):
        duo.x.find_jump_forward_string()


@pytest.mark.parametrize(
    ("grammar", "ops"),
    [
        (
            r'root ::= "a" ("b" | "c")* "d"?',
            ["stop", "t:a", "stop", "t:b", "t:d", "stop", "t:b", "rb:2", "t:c"],
        ),
        (r'root ::= "a"*', ["stop", "t:a", "stop", "s:aa", "rb:2"]),
        (r'root ::= "x" "y"', ["t:x", "t:y", "stop", "t:y", "rb:1", "stop", "reset"]),
    ],
)
def test_terminate_without_stop_token(compilers, grammar, ops):
    duo = Duo(compilers, grammar, terminate_without_stop_token=True)
    run_ops(duo, ops)
    assert duo.t.stop_token_ids == list(duo.x.stop_token_ids)


@pytest.mark.parametrize("override", [tid("z"), [tid("z")], [tid("z"), tid("\n")]])
def test_override_stop_tokens(compilers, override):
    grammar = r'root ::= "a" ("b" | "c")* "d"?'
    duo = Duo(compilers, grammar, override_stop_tokens=override)
    assert duo.t.stop_token_ids == sorted(duo.x.stop_token_ids)
    # "stop" (the tokenizer's <eos>) is now an ordinary token that the grammar cannot spell
    run_ops(duo, ["stop", "t:z", "t:a", "stop", "t:z", "rb:1", "t:b", "t:d", "t:b", "t:z"])
    assert duo.t.is_terminated()
    run_ops(duo, ["rb:1", "t:\n"])
    assert duo.t.is_terminated() == (tid("\n") in duo.t.stop_token_ids)


def test_override_stop_tokens_empty_list(compilers):
    # divergence: xgrammar refuses an empty override list; treegram means "no stop tokens"
    tc, xc = compilers
    with pytest.raises(RuntimeError, match="empty"):
        xgr.GrammarMatcher(xc.compile_grammar(r'root ::= "a"'), override_stop_tokens=[])
    m = tg.GrammarMatcher(tc.compile_grammar(r'root ::= "a"'), override_stop_tokens=[])
    assert m.stop_token_ids == []
    assert m.accept_token(tid("a"))
    assert m.is_completed() and not m.is_terminated()
    assert not m.accept_token(EOS)
    row = np.zeros((1, N_WORDS), np.int32)
    m.fill_next_token_bitmask(row)
    assert not unpack(row).any()


def test_override_stop_token_spelled_by_grammar(compilers):
    duo = Duo(compilers, r'root ::= "a" ("b" | "z")* "c"', override_stop_tokens=[tid("z")])
    assert duo.token(tid("a"))
    duo.assert_mask_self_consistent(duo.check())


def test_overridden_tokenizer_stop_token_is_ordinary_text(compilers):
    duo = Duo(compilers, r'root ::= "a" "<eos>"', override_stop_tokens=[tid("z")])
    assert duo.token(tid("a"))
    duo.check()
    assert duo.token(EOS)  # xgrammar: True (text "<eos>"); treegram: False
    duo.check()


# ------------------------------------------------------------------- jump forward
JUMP_CASES = [
    (r'root ::= "hello" " world"', ""),
    (r'root ::= "abc" ("d" | "e")', "a"),
    (r'root ::= "{" "\"key\"" ":" [0-9]+ "}"', "{"),
    ('root ::= "x" rest\nrest ::= "yz" | "yw"', ""),
    (r'root ::= "ab"* "cd"', ""),
    (r'root ::= "中文" "abc"', ""),
    (r'root ::= [a-z] "fixed" [0-9]', "q"),
    (r'root ::= "a" "b"? "c"', ""),
    (r'root ::= "a" "b"? "c"', "ab"),
    (r'root ::= "pre" ("" | "x")', ""),
    (r'root ::= "pre" ("" | "x")', "pre"),
    ('root ::= item "," item\nitem ::= "<" [0-9] ">"', "<1"),
    (r'root ::= [0-9]+ "." [0-9]', "12."),
]


@pytest.mark.parametrize(("grammar", "prefix"), JUMP_CASES)
def test_find_jump_forward_string(compilers, grammar, prefix):
    duo = Duo(compilers, grammar)
    assert duo.string(prefix)
    before = duo.check()
    jf_t = duo.t.find_jump_forward_string()
    assert jf_t == duo.x.find_jump_forward_string()
    # does not change the state
    assert np.array_equal(duo.check(), before)
    assert duo.t.num_accepted_steps() == 1  # accept_string("") is a step in both engines
    # the jump-forward string is always acceptable
    if jf_t:
        assert duo.string(jf_t)
        duo.check()


@pytest.mark.parametrize(
    ("grammar", "expected"),
    [
        # both alternatives share the bytes e4 b8: xgrammar decodes them and raises
        (r'root ::= "中" | "丰"', ""),
        (r'root ::= "x" ("中" | "丰")', "x"),
        (r'root ::= "ok中" | "ok丰"', "ok"),
    ],
)
def test_jump_forward_stops_before_partial_utf8(compilers, grammar, expected):
    duo = Duo(compilers, grammar)
    with pytest.raises(UnicodeDecodeError):
        duo.x.find_jump_forward_string()
    assert duo.t.find_jump_forward_string() == expected


def test_jump_forward_mid_character_is_a_prefix_of_the_continuation(compilers):
    tc, _ = compilers
    m = tg.GrammarMatcher(tc.compile_grammar(r'root ::= "中文abc"'))
    assert m.accept_token(PARTIAL)  # b"\xe4": the rest starts with b"\xb8\xad"
    remaining = "中文abc".encode()[1:]
    jf = m.find_jump_forward_string()
    assert remaining.startswith(jf.encode())


def test_xgrammar_mask_defect_is_tolerated_only_when_its_accept_token_agrees(compilers):
    # xgrammar 0.2.8 leaves "ab" out of this mask although its accept_token accepts it
    # ("b" "a" "b" is a sentence); treegram's mask has it. Duo.mask tolerates exactly this.
    grammar = 'root ::= "a" | r1\nr1 ::= "b" root "b" | "aa"\n'
    duo = Duo(compilers, grammar)
    assert duo.string("b")
    xb = xgr.allocate_token_bitmask(1, V)
    duo.x.fill_next_token_bitmask(xb)
    assert not unpack(xb)[tid("ab")]
    assert duo.x.fork().accept_token(tid("ab"))
    mask = duo.check()
    assert mask[tid("ab")]
    duo.assert_mask_self_consistent(mask)
    assert duo.token(tid("ab"))
    assert duo.token(EOS)


# ------------------------------------------------------------------ special tokens
def test_special_tokens_rejected_and_never_in_masks(compilers):
    for grammar in [r'root ::= [^"]*', r"root ::= [\x00-\U0010FFFF]*", r'root ::= ""']:
        duo = Duo(compilers, grammar)
        mask = duo.check()
        assert not mask[SPECIAL_IDS].any()
        for sid in SPECIAL_IDS:
            assert duo.token(sid) is False
        assert duo.t.num_accepted_steps() == 0
        assert np.array_equal(duo.check(), mask)
    # an unconstrained grammar: every real non-special token but nothing else
    duo = Duo(compilers, r"root ::= [\x00-\U0010FFFF]*")
    mask = duo.check()
    expected = np.ones(V, dtype=bool)
    expected[SPECIAL_IDS] = False
    assert np.array_equal(mask, expected)


# ------------------------------------------------------------------ property test
hypothesis = pytest.importorskip("hypothesis")
st = hypothesis.strategies
given, settings, HealthCheck = hypothesis.given, hypothesis.settings, hypothesis.HealthCheck

RULES = ["root", "r1", "r2", "r3"]


def _expr(n_rules: int):
    literal = st.text(alphabet="abc", min_size=1, max_size=3).map(lambda s: f'"{s}"')
    char_class = st.sampled_from(["[ab]", "[a-c]", "[^a]", "[c]", "[^bc]"])
    ref = st.sampled_from(RULES[:n_rules])
    leaves = (
        st.one_of(literal, literal, char_class, ref)
        if n_rules > 1
        else st.one_of(literal, char_class)
    )

    def extend(inner):
        seq = st.lists(inner, min_size=2, max_size=3).map(" ".join)
        alt = st.lists(inner, min_size=2, max_size=3).map(lambda xs: "(" + " | ".join(xs) + ")")
        quant = st.tuples(
            inner, st.sampled_from(["*", "+", "?", "{2}", "{1,2}", "{0,3}", "{2,}"])
        ).map(lambda p: f"({p[0]}){p[1]}")
        return st.one_of(seq, alt, quant)

    return st.recursive(leaves, extend, max_leaves=6)


@st.composite
def grammars(draw):
    n_rules = draw(st.integers(1, 4))
    lines = []
    for i, name in enumerate(RULES[:n_rules]):
        body = draw(_expr(n_rules))
        if n_rules > 1:
            # a reference-free alternative keeps every rule productive
            base = draw(st.text(alphabet="abc", min_size=1, max_size=2))
            body = f'{body} | "{base}"' if i % 2 else f'"{base}" | {body}'
        lines.append(f"{name} ::= {body}")
    return "\n".join(lines) + "\n"


@settings(
    derandomize=True,
    deadline=None,
    max_examples=100,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(grammar=grammars(), text=st.text(alphabet="abc", max_size=6))
def test_random_grammars_match_xgrammar(compilers, grammar, text):
    duo = Duo(compilers, grammar)
    whole_t = duo.t.accept_string(text)
    whole_x = duo.x.accept_string(text)
    assert whole_t == whole_x, (grammar, text)
    assert duo.t.is_completed() == duo.x.is_completed(), (grammar, text)
    duo.reset()
    duo.assert_mask_self_consistent(duo.check())
    for ch in text:
        if not duo.string(ch):
            break
        duo.assert_mask_self_consistent(duo.check())


@pytest.mark.parametrize(
    ("n_letters", "grammar", "need_apply"),
    [
        (40, "root ::= [\\x00-\\xff]*", False),  # every token and the stop token
        (40, "root ::= [A-Z]*", True),  # left out in the first 32-token word
        (40, "root ::= [A-`]*", True),  # the first word whole, 'a'..'h' left out
        (7, "root ::= [\\x00-\\xff]*", False),  # a vocabulary within one word
        (7, "root ::= [A-F]", True),  # 'G' and the stop token left out
    ],
)
def test_fill_returns_whether_the_mask_must_be_applied(n_letters, grammar, need_apply):
    vocab = [bytes([0x41 + i]) for i in range(n_letters)] + [b"<eos>"]
    info = tg.TokenizerInfo(vocab, stop_token_ids=[n_letters])
    matcher = tg.GrammarMatcher(tg.GrammarCompiler(info).compile_grammar(grammar))
    rows = tg.allocate_token_bitmask(1, info.vocab_size, backend="numpy")
    got = matcher.fill_next_token_bitmask(rows, 0)
    assert type(got) is bool and got == need_apply
    allowed = np.unpackbits(rows[0].view(np.uint8), bitorder="little")[: info.vocab_size]
    assert got == (not allowed.all())
