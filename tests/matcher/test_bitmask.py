"""Tests for treegram.matcher._bitmask: layout, allocation, validation, bool helpers."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from treegram.errors import BitmaskError, BitmaskIndexError, TreegramError
from treegram.matcher import _bitmask
from treegram.matcher._bitmask import (
    allocate_token_bitmask,
    allowed_token_ids,
    as_bitmask_array,
    bitmask_dtype,
    bitmask_to_bool,
    bool_to_bitmask,
    check_row_index,
    get_bitmask_shape,
    reset_token_bitmask,
)

torch = pytest.importorskip("torch")

VOCAB = 100  # 4 words, the last one partly used
WORDS = 4


# ---------------------------------------------------------------- reference helpers


def reference_bool(words: np.ndarray, vocab_size: int) -> np.ndarray:
    """Straightforward per-token expansion of a 2-D bitmask (test oracle)."""
    out = np.zeros((words.shape[0], vocab_size), dtype=bool)
    for r in range(words.shape[0]):
        for t in range(vocab_size):
            word = int(words[r, t // 32]) & 0xFFFFFFFF
            out[r, t] = (word >> (t % 32)) & 1 == 1
    return out


def reference_bitmask(mask: np.ndarray) -> np.ndarray:
    """Straightforward per-token packing of a 2-D bool mask (test oracle)."""
    rows, vocab_size = mask.shape
    words = np.zeros((rows, (vocab_size + 31) // 32), dtype=np.uint32)
    for r in range(rows):
        for t in range(vocab_size):
            if mask[r, t]:
                words[r, t // 32] |= np.uint32(1 << (t % 32))
    return words.view(np.int32)


# ---------------------------------------------------------------- shape / allocation


@pytest.mark.parametrize(
    ("batch_size", "vocab_size"),
    [(0, 0), (1, 1), (1, 31), (1, 32), (1, 33), (3, 100), (2, 128000), (4, 129280), (1, 151936)],
)
def test_shape_matches_xgrammar(batch_size: int, vocab_size: int) -> None:
    xgr = pytest.importorskip("xgrammar")
    assert get_bitmask_shape(batch_size, vocab_size) == tuple(
        xgr.get_bitmask_shape(batch_size, vocab_size)
    )


@pytest.mark.parametrize(
    ("batch_size", "vocab_size"), [(-1, 10), (1, -1), (1.0, 10), (1, "10"), (True, 10)]
)
def test_shape_rejects_bad_sizes(batch_size: object, vocab_size: object) -> None:
    with pytest.raises(BitmaskError, match="must be a non-negative integer"):
        get_bitmask_shape(batch_size, vocab_size)  # type: ignore[arg-type]


@pytest.mark.parametrize(("batch_size", "vocab_size"), [(1, 1), (3, 100), (2, 129280)])
def test_allocate_matches_xgrammar(batch_size: int, vocab_size: int) -> None:
    xgr = pytest.importorskip("xgrammar")
    ours = allocate_token_bitmask(batch_size, vocab_size)
    theirs = xgr.allocate_token_bitmask(batch_size, vocab_size)
    assert isinstance(ours, torch.Tensor)
    assert ours.dtype == theirs.dtype == xgr.bitmask_dtype
    assert ours.shape == theirs.shape
    assert ours.device == theirs.device
    assert torch.equal(ours, theirs)
    assert ours.is_contiguous()


def test_allocate_backends() -> None:
    array = allocate_token_bitmask(2, VOCAB, backend="numpy")
    assert isinstance(array, np.ndarray)
    assert array.dtype == bitmask_dtype == np.int32
    assert array.shape == (2, WORDS)
    assert array.flags.c_contiguous
    assert (array == -1).all()
    tensor = allocate_token_bitmask(2, VOCAB, backend="torch")
    assert isinstance(tensor, torch.Tensor)
    assert tensor.dtype == torch.int32
    assert bool((tensor == -1).all())
    with pytest.raises(BitmaskError, match="backend must be one of"):
        allocate_token_bitmask(2, VOCAB, backend="cupy")


def test_allocate_without_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_bitmask, "_torch_module", lambda: None)
    array = allocate_token_bitmask(2, VOCAB)
    assert isinstance(array, np.ndarray)
    assert array.shape == (2, WORDS)
    assert (array == -1).all()
    with pytest.raises(ImportError, match="needs torch"):
        allocate_token_bitmask(2, VOCAB, backend="torch")


def test_import_treegram_does_not_import_torch() -> None:
    code = "import sys, treegram; treegram.get_bitmask_shape(1, 5); print('torch' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True
    ).stdout
    assert out.strip() == "False"


def test_reset_numpy_and_torch() -> None:
    array = np.zeros((2, WORDS), dtype=np.int32)
    reset_token_bitmask(array)
    assert (array == -1).all()
    tensor = torch.zeros((2, WORDS), dtype=torch.int32)
    view = tensor[1:]
    reset_token_bitmask(view)
    assert tensor[0].tolist() == [0] * WORDS
    assert tensor[1].tolist() == [-1] * WORDS


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (np.zeros((2, WORDS), dtype=np.int64), "dtype int32, got int64"),
        (torch.zeros((2, WORDS), dtype=torch.int64), "dtype torch.int32, got torch.int64"),
        (np.broadcast_to(np.zeros(WORDS, dtype=np.int32), (2, WORDS)), "read-only"),
        ([[0] * WORDS], "numpy.ndarray or torch.Tensor, got list"),
    ],
)
def test_reset_rejects(value: object, message: str) -> None:
    with pytest.raises(BitmaskError, match=message):
        reset_token_bitmask(value)


# ---------------------------------------------------------------- as_bitmask_array: valid


def _numpy_base(shape: tuple[int, ...]) -> np.ndarray:
    return np.full(shape, 7, dtype=np.int32)


def _torch_base(shape: tuple[int, ...]) -> torch.Tensor:
    return torch.full(shape, 7, dtype=torch.int32)


# (id, base shape, view of the base, expected shape of the result)
VALID_VIEWS = [
    ("exact", (3, WORDS), lambda b: b, (3, WORDS)),
    ("one-d", (WORDS,), lambda b: b, (1, WORDS)),
    ("row-of-2d", (3, WORDS), lambda b: b[1], (1, WORDS)),
    ("offset-rows", (5, WORDS), lambda b: b[2:], (3, WORDS)),
    ("every-other-row", (6, WORDS), lambda b: b[::2], (3, WORDS)),
    ("offset-strided-rows", (7, WORDS), lambda b: b[1::3], (2, WORDS)),
    ("column-slice", (3, 9), lambda b: b[:, :WORDS], (3, WORDS)),
    ("column-slice-offset", (4, 9), lambda b: b[1:3, 2 : 2 + WORDS], (2, WORDS)),
    ("zero-rows", (0, WORDS), lambda b: b, (0, WORDS)),
    ("single-row-col-offset", (1, 9), lambda b: b[:, 5:9], (1, WORDS)),
]


@pytest.mark.parametrize("backend", ["numpy", "torch"])
@pytest.mark.parametrize(
    ("base_shape", "view", "expected_shape"),
    [case[1:] for case in VALID_VIEWS],
    ids=[case[0] for case in VALID_VIEWS],
)
def test_valid_views_write_through(backend, base_shape, view, expected_shape) -> None:
    base = _torch_base(base_shape) if backend == "torch" else _numpy_base(base_shape)
    given_view = view(base)
    result = as_bitmask_array(given_view, vocab_size=VOCAB)
    assert isinstance(result, np.ndarray)
    assert result.dtype == np.int32
    assert result.ndim == 2
    assert result.shape == expected_shape
    assert result.flags.writeable
    result[...] = np.arange(result.size, dtype=np.int32).reshape(result.shape) + 100
    # The same writes applied to a plain numpy copy of the base, via the same view.
    reference = _numpy_base(base_shape)
    view(reference)[...] = (
        np.arange(result.size, dtype=np.int32).reshape(view(reference).shape) + 100
    )
    actual = base.numpy() if backend == "torch" else base
    np.testing.assert_array_equal(actual, reference)


def test_numpy_negative_row_stride_is_honoured() -> None:
    base = _numpy_base((3, WORDS))
    result = as_bitmask_array(base[::-1], vocab_size=VOCAB)
    result[0] = 1
    assert (base[2] == 1).all()
    assert (base[:2] == 7).all()


def test_result_shares_memory() -> None:
    base = _numpy_base((4, 6))
    assert np.shares_memory(as_bitmask_array(base[1:, 1:5], vocab_size=VOCAB), base)
    tensor = _torch_base((4, WORDS))
    result = as_bitmask_array(tensor[1:], vocab_size=VOCAB)
    assert result.__array_interface__["data"][0] == tensor[1:].data_ptr()


def test_allow_padding_slices_and_leaves_padding() -> None:
    tensor = _torch_base((2, WORDS + 3))
    with pytest.raises(BitmaskError, match=f"must have {WORDS} int32 words"):
        as_bitmask_array(tensor, vocab_size=VOCAB)
    result = as_bitmask_array(tensor, vocab_size=VOCAB, allow_padding=True)
    assert result.shape == (2, WORDS)
    result[...] = 0
    assert tensor[:, :WORDS].eq(0).all()
    assert tensor[:, WORDS:].eq(7).all()
    with pytest.raises(BitmaskError, match=f"must have >= {WORDS} int32 words"):
        as_bitmask_array(tensor[:, : WORDS - 1], vocab_size=VOCAB, allow_padding=True)


def test_read_only_accepted_when_not_writable() -> None:
    base = np.broadcast_to(np.zeros(WORDS, dtype=np.int32), (1, WORDS))
    result = as_bitmask_array(base, vocab_size=VOCAB, writable=False)
    assert result.shape == (1, WORDS)


class _DLPackWrapper:
    """A foreign array type that offers only the DLPack protocol."""

    def __init__(self, array: np.ndarray, device: tuple[int, int] = (1, 0)) -> None:
        self._array = array
        self._device = device

    def __dlpack__(self, **kwargs: object) -> object:
        return self._array.__dlpack__(**kwargs)

    def __dlpack_device__(self) -> tuple[int, int]:
        return self._device


def test_dlpack_object() -> None:
    base = _numpy_base((3, WORDS))
    result = as_bitmask_array(_DLPackWrapper(base[1:]), vocab_size=VOCAB)
    result[...] = 0
    assert (base[0] == 7).all()
    assert (base[1:] == 0).all()
    with pytest.raises(BitmaskError, match=r"on the CPU, got a DLPack device \(type 2, id 0\)"):
        as_bitmask_array(_DLPackWrapper(base, device=(2, 0)), vocab_size=VOCAB)


# ---------------------------------------------------------------- as_bitmask_array: invalid


def _unaligned() -> np.ndarray:
    raw = bytearray(4 * 2 * WORDS + 1)
    return np.frombuffer(raw, dtype=np.int32, offset=1).reshape(2, WORDS)


INVALID = [
    ("int64", lambda: np.zeros((2, WORDS), dtype=np.int64), ["dtype int32", "int64"]),
    ("uint32", lambda: np.zeros((2, WORDS), dtype=np.uint32), ["dtype int32", "uint32"]),
    ("float32", lambda: np.zeros((2, WORDS), dtype=np.float32), ["dtype int32", "float32"]),
    (
        "torch-int64",
        lambda: torch.zeros((2, WORDS), dtype=torch.int64),
        ["torch.int32", "torch.int64"],
    ),
    ("three-d", lambda: np.zeros((1, 2, WORDS), dtype=np.int32), ["1-D or 2-D", "3-D"]),
    ("zero-d", lambda: np.zeros((), dtype=np.int32), ["1-D or 2-D", "0-D"]),
    ("narrow", lambda: np.zeros((2, WORDS - 1), dtype=np.int32), [f"{WORDS} int32", "(2, 3)"]),
    ("wide", lambda: np.zeros((2, WORDS + 1), dtype=np.int32), [f"{WORDS} int32", "(2, 5)"]),
    ("one-d-wide", lambda: np.zeros(WORDS + 1, dtype=np.int32), [f"{WORDS} int32", "(5,)"]),
    (
        "read-only",
        lambda: np.broadcast_to(np.zeros(WORDS, dtype=np.int32), (2, WORDS)),
        ["writable", "read-only"],
    ),
    (
        "transposed",
        lambda: np.zeros((WORDS, 3), dtype=np.int32).T,
        ["contiguous along its last dimension", "strides (4, 12)"],
    ),
    (
        "column-step",
        lambda: np.zeros((2, 2 * WORDS), dtype=np.int32)[:, ::2],
        ["contiguous along its last dimension", "(32, 8)"],
    ),
    (
        "torch-transposed",
        lambda: torch.zeros((WORDS, 3), dtype=torch.int32).T,
        ["contiguous along its last dimension"],
    ),
    (
        "torch-expanded",
        lambda: torch.zeros((1, WORDS), dtype=torch.int32).expand(3, WORDS),
        ["overlapping rows", "row stride 0"],
    ),
    (
        "torch-meta",
        lambda: torch.empty((2, WORDS), dtype=torch.int32, device="meta"),
        ["on the CPU", "meta"],
    ),
    ("unaligned", _unaligned, ["4-byte aligned"]),
    ("list", lambda: [[0] * WORDS], ["numpy.ndarray", "got list"]),
    ("none", lambda: None, ["numpy.ndarray", "got NoneType"]),
]


@pytest.mark.parametrize(
    ("factory", "fragments"), [case[1:] for case in INVALID], ids=[case[0] for case in INVALID]
)
def test_invalid_inputs(factory, fragments) -> None:
    with pytest.raises(BitmaskError) as info:
        as_bitmask_array(factory(), vocab_size=VOCAB, name="token_bitmask")
    message = str(info.value)
    assert message.startswith("token_bitmask ")
    for fragment in fragments:
        assert fragment in message, (fragment, message)
    assert isinstance(info.value, ValueError)
    assert isinstance(info.value, TreegramError)


@pytest.mark.parametrize("vocab_size", [-1, 2.5, None])
def test_invalid_vocab_size(vocab_size: object) -> None:
    with pytest.raises(BitmaskError, match="vocab_size must be a non-negative integer"):
        as_bitmask_array(np.zeros((1, WORDS), dtype=np.int32), vocab_size=vocab_size)


@pytest.mark.gpu
def test_cuda_tensor_rejected() -> None:
    tensor = torch.zeros((2, WORDS), dtype=torch.int32, device="cuda")
    with pytest.raises(BitmaskError, match="must be on the CPU, got a tensor on cuda"):
        as_bitmask_array(tensor, vocab_size=VOCAB)


# ---------------------------------------------------------------- check_row_index


@pytest.mark.parametrize(("index", "rows"), [(0, 1), (2, 3), (np.int64(1), 2), (np.int32(0), 5)])
def test_row_index_valid(index: object, rows: int) -> None:
    result = check_row_index(index, rows)
    assert result == int(index)  # type: ignore[call-overload]
    assert type(result) is int


@pytest.mark.parametrize(
    ("index", "rows", "fragment"),
    [
        (-1, 3, "in [0, 3)"),
        (3, 3, "in [0, 3)"),
        (0, 0, "in [0, 0)"),
        (1.0, 3, "integer row index"),
        ("0", 3, "integer row index"),
        (True, 3, "integer row index"),
        (None, 3, "integer row index"),
    ],
)
def test_row_index_invalid(index: object, rows: int, fragment: str) -> None:
    with pytest.raises(BitmaskIndexError) as info:
        check_row_index(index, rows, name="row")
    assert str(info.value).startswith("row must ")
    assert fragment in str(info.value)
    assert isinstance(info.value, IndexError)
    assert isinstance(info.value, BitmaskError)


# ---------------------------------------------------------------- bool <-> bitmask


@st.composite
def bool_masks(draw: st.DrawFn) -> np.ndarray:
    rows = draw(st.integers(0, 4))
    vocab_size = draw(st.integers(0, 200))
    flat = draw(st.lists(st.booleans(), min_size=rows * vocab_size, max_size=rows * vocab_size))
    return np.array(flat, dtype=bool).reshape(rows, vocab_size)


@settings(max_examples=200, deadline=None)
@given(bool_masks())
def test_bool_bitmask_round_trip(mask: np.ndarray) -> None:
    vocab_size = mask.shape[1]
    words = bool_to_bitmask(mask)
    assert words.dtype == np.int32
    assert words.flags.c_contiguous
    np.testing.assert_array_equal(words, reference_bitmask(mask))
    np.testing.assert_array_equal(bitmask_to_bool(words, vocab_size), mask)


@settings(max_examples=200, deadline=None)
@given(
    st.integers(0, 100).flatmap(
        lambda vocab_size: st.tuples(
            st.just(vocab_size),
            st.lists(
                st.integers(-(2**31), 2**31 - 1),
                min_size=(vocab_size + 31) // 32,
                max_size=(vocab_size + 31) // 32,
            ),
        )
    )
)
def test_bitmask_to_bool_matches_reference(case: tuple[int, list[int]]) -> None:
    vocab_size, words = case
    row = np.array(words, dtype=np.int32)
    expected = reference_bool(row.reshape(1, -1), vocab_size)[0]
    np.testing.assert_array_equal(bitmask_to_bool(row, vocab_size), expected)
    np.testing.assert_array_equal(allowed_token_ids(row, vocab_size), np.flatnonzero(expected))


@settings(max_examples=50, deadline=None)
@given(bool_masks())
def test_helpers_match_xgrammar(mask: np.ndarray) -> None:
    testing = pytest.importorskip("xgrammar.testing")
    vocab_size = mask.shape[1]
    if mask.shape[0] == 0 or vocab_size == 0:
        return
    theirs = testing.bool_mask_to_bitmask(torch.from_numpy(mask))
    # xgrammar sets the bits past vocab_size to 1, treegram to 0: compare the used bits only.
    used = reference_bitmask(np.ones((1, vocab_size), dtype=bool))
    np.testing.assert_array_equal(bool_to_bitmask(mask), theirs.numpy() & used)
    back = testing.bitmask_to_bool_mask(theirs, vocab_size)
    np.testing.assert_array_equal(bitmask_to_bool(theirs, vocab_size), back.numpy())
    rejected = testing._get_masked_tokens_from_bitmask(theirs, vocab_size, 0)
    allowed = allowed_token_ids(theirs[0], vocab_size)
    assert sorted(set(range(vocab_size)) - set(allowed.tolist())) == sorted(rejected)


def test_bitmask_to_bool_shapes_and_padding() -> None:
    words = np.full((2, WORDS + 2), -1, dtype=np.int32)
    expanded = bitmask_to_bool(words, VOCAB)  # padding words are ignored
    assert expanded.shape == (2, VOCAB)
    assert expanded.all()
    assert bitmask_to_bool(words[0], VOCAB).shape == (VOCAB,)
    tensor = torch.zeros((3, WORDS), dtype=torch.int32)
    tensor[1, 3] = 1 << 3  # token 99
    assert allowed_token_ids(tensor[1], VOCAB).tolist() == [99]
    assert allowed_token_ids(tensor[1], VOCAB).dtype == np.int64
    with pytest.raises(BitmaskError, match="bitmask_row must be 1-D"):
        allowed_token_ids(tensor, VOCAB)


def test_bool_to_bitmask_edges() -> None:
    mask = np.ones(33, dtype=bool)
    words = bool_to_bitmask(mask)
    assert words.shape == (2,)
    assert words.tolist() == [-1, 1]  # bits past vocab_size stay 0
    assert bool_to_bitmask(np.zeros((2, 0), dtype=bool)).shape == (2, 0)
    with pytest.raises(BitmaskError, match="dtype bool, got int64"):
        bool_to_bitmask(np.array([0, 1, 2], dtype=np.int64))
    with pytest.raises(BitmaskError, match="1-D or 2-D, got 3-D"):
        bool_to_bitmask(np.zeros((1, 1, 1), dtype=bool))
