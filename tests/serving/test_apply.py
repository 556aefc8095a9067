"""apply_token_bitmask_inplace and the torch bitmask <-> bool helpers.

Every backend (torch on CPU, Triton's interpreter on CPU, and torch/Triton on CUDA where a
GPU exists) runs the same random cases against a loop-free numpy reference; the CPU path is
also checked against xgrammar 0.2.8's own apply on the same inputs.
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from treegram import bitmask_to_bool, bool_to_bitmask  # noqa: E402
from treegram.errors import (  # noqa: E402
    ArgumentError,
    BitmaskError,
    BitmaskIndexError,
    TreegramError,
)
from treegram.serving import (  # noqa: E402
    apply_token_bitmask_inplace,
    apply_token_bitmask_inplace_cpu,
    bitmask_to_bool_tensor,
    bool_tensor_to_bitmask,
)

TRITON_MODULE = "treegram.serving._apply_triton"
DTYPES = (torch.float32, torch.float16, torch.bfloat16)
NEG_INF = float("-inf")


# ---------------------------------------------------------------------------- reference


def reference(logits, bitmask, vocab_size=None, indices=None):
    """Loop-free numpy reference: the expected logits after applying ``bitmask``."""
    rows2d = logits if logits.dim() == 2 else logits[None]
    words = np.asarray(bitmask.cpu()).reshape(-1, bitmask.shape[-1]).astype(np.int64)
    width = rows2d.shape[1]
    if vocab_size is None:
        vocab_size = min(width, 32 * words.shape[1])
    bits = ((words[:, :, None] >> np.arange(32)) & 1).reshape(words.shape[0], -1)
    selected = (
        np.arange(rows2d.shape[0])
        if indices is None
        else np.unique(np.asarray(indices, dtype=np.int64))
    )
    masked = np.zeros(tuple(rows2d.shape), dtype=bool)
    masked[selected, :vocab_size] = bits[selected, :vocab_size] == 0
    masked_t = torch.from_numpy(masked).to(rows2d.device)
    expected = torch.where(
        masked_t, torch.tensor(NEG_INF, dtype=rows2d.dtype, device=rows2d.device), rows2d
    )
    return expected if logits.dim() == 2 else expected[0]


def random_bitmask(rng, rows, words):
    return torch.from_numpy(
        rng.integers(-(2**31), 2**31, size=(rows, words), dtype=np.int64).astype(np.int32)
    )


def random_case(seed, dtype, device, *, max_vocab=300):
    """One random call: (logits, bitmask, kwargs) covering every shape rule."""
    rng = np.random.default_rng(seed)
    vocab = int(rng.integers(1, max_vocab))
    if rng.random() < 0.7 and vocab % 32 == 0:
        vocab += int(rng.integers(1, 31))
    n_words = -(-vocab // 32)
    kind = rng.choice(["exact", "wide", "narrow", "explicit"])
    kwargs = {}
    if kind == "wide":
        words = n_words + int(rng.integers(1, 4))
    elif kind == "narrow" and n_words > 1:
        words = int(rng.integers(1, n_words))
    else:
        words = n_words
    if kind == "explicit":
        kwargs["vocab_size"] = int(rng.integers(0, vocab + 1))
    batch = int(rng.integers(1, 7))
    bitmask_rows = batch
    if rng.random() < 0.5:
        count = int(rng.integers(0, batch + 2))
        kwargs["indices"] = [int(i) for i in rng.integers(0, batch, size=count)]
        bitmask_rows = batch + int(rng.integers(0, 3))
        if rng.random() < 0.5:
            kwargs["indices"] = torch.tensor(kwargs["indices"], dtype=torch.int64)
    logits = torch.from_numpy(rng.standard_normal((batch, vocab)).astype(np.float32) * 4)
    logits = logits.to(dtype=dtype, device=device)
    bitmask = random_bitmask(rng, bitmask_rows, words).to(device)
    if batch == 1 and bitmask_rows == 1 and rng.random() < 0.5:
        logits = logits[0]
        if rng.random() < 0.5:
            bitmask = bitmask[0]
    return logits, bitmask, kwargs


def narrow(logits, bitmask, kwargs):
    """True when the call is expected to warn (bitmask narrower than logits, no vocab_size)."""
    return "vocab_size" not in kwargs and 32 * bitmask.shape[-1] < logits.shape[-1]


def call(logits, bitmask, backend, **kwargs):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        apply_token_bitmask_inplace(logits, bitmask, backend=backend, **kwargs)
    return [w for w in caught if issubclass(w.category, UserWarning)]


# ---------------------------------------------------------------------------- backends


@pytest.fixture
def interpreted_triton():
    """Load the Triton kernel module under TRITON_INTERPRET=1 for one test, then restore."""
    pytest.importorskip("triton")
    saved_env = os.environ.get("TRITON_INTERPRET")
    saved_module = sys.modules.pop(TRITON_MODULE, None)
    os.environ["TRITON_INTERPRET"] = "1"
    try:
        module = importlib.import_module(TRITON_MODULE)
    except Exception as exc:  # pragma: no cover - depends on the installed triton
        pytest.skip(f"Triton's interpreter cannot load the kernel here: {exc!r}")
    finally:
        if saved_env is None:
            os.environ.pop("TRITON_INTERPRET", None)
        else:
            os.environ["TRITON_INTERPRET"] = saved_env
    if not module.INTERPRETED:  # pragma: no cover - triton ignoring the variable
        pytest.skip("this triton version does not honour TRITON_INTERPRET=1 at import")
    yield module
    sys.modules.pop(TRITON_MODULE, None)
    if saved_module is not None:
        sys.modules[TRITON_MODULE] = saved_module


BACKENDS = [
    pytest.param(("torch", "cpu"), id="torch-cpu"),
    pytest.param(("triton", "cpu"), id="triton-interpreter"),
    pytest.param(("torch", "cuda"), id="torch-cuda", marks=pytest.mark.gpu),
    pytest.param(("triton", "cuda"), id="triton-cuda", marks=pytest.mark.gpu),
]


@pytest.fixture(params=BACKENDS)
def backend(request):
    name, device = request.param
    if name == "triton":
        pytest.importorskip("triton")
        if device == "cpu":
            request.getfixturevalue("interpreted_triton")
    return name, device


# ---------------------------------------------------------------------------- properties


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).removeprefix("torch."))
@pytest.mark.parametrize("seed", range(25))
def test_random_cases_equal_reference(backend, dtype, seed):
    name, device = backend
    logits, bitmask, kwargs = random_case(seed, dtype, device)
    expected = reference(logits, bitmask, **kwargs)
    caught = call(logits, bitmask, name, **kwargs)
    assert torch.equal(logits, expected)
    assert len(caught) == int(narrow(logits, bitmask, kwargs))


@pytest.mark.parametrize("batch", [1, 3])
def test_deepseek_sized_vocab(backend, batch):
    name, device = backend
    rng = np.random.default_rng(batch)
    vocab = 129_280
    logits = torch.randn(batch, vocab, generator=torch.Generator().manual_seed(batch))
    logits = logits.to(device)
    bitmask = random_bitmask(rng, batch, -(-vocab // 32)).to(device)
    expected = reference(logits, bitmask)
    assert call(logits, bitmask, name) == []
    assert torch.equal(logits, expected)


def test_strided_inputs(backend):
    name, device = backend
    rng = np.random.default_rng(7)
    big = torch.randn(6, 260, device=device)
    logits = big[1::2, 3:203]  # row stride 520, a column offset
    bitmask_big = random_bitmask(rng, 5, 12).to(device)
    bitmask = bitmask_big[1:4, 2:9]  # 7 words of a wider buffer
    before = big.clone()
    expected = reference(logits.clone(), bitmask)
    call(logits, bitmask, name)
    assert torch.equal(logits, expected)
    untouched = torch.ones_like(big, dtype=torch.bool)
    untouched[1::2, 3:203] = False
    assert torch.equal(big[untouched], before[untouched])

    transposed = torch.randn(200, 4, device=device).t()  # column stride 4
    bitmask = random_bitmask(rng, 4, 7).to(device)
    expected = reference(transposed.clone(), bitmask)
    call(transposed, bitmask, name)
    assert torch.equal(transposed, expected)


def test_indices_forms_are_equivalent(backend):
    name, device = backend
    rng = np.random.default_rng(3)
    base = torch.randn(5, 100, device=device)
    bitmask = random_bitmask(rng, 6, 4).to(device)
    expected = reference(base, bitmask, indices=[4, 0, 4])
    for form in (
        [4, 0, 4],
        (4, 0, 4),
        np.array([4, 0, 4]),
        torch.tensor([4, 0, 4]),
        torch.tensor([4, 0, 4], dtype=torch.int32, device=device),
        range(4, -1, -4),
    ):
        logits = base.clone()
        call(logits, bitmask, name, indices=form)
        assert torch.equal(logits, expected), form


def test_empty_inputs_are_no_ops(backend):
    name, device = backend
    logits = torch.randn(3, 64, device=device)
    before = logits.clone()
    zeros = torch.zeros(3, 2, dtype=torch.int32, device=device)
    call(logits, zeros, name, indices=[])
    call(logits, zeros, name, vocab_size=0)
    assert torch.equal(logits, before)
    empty = torch.empty(0, 64, device=device)
    call(empty, torch.zeros(0, 2, dtype=torch.int32, device=device), name)


# ---------------------------------------------------------------------------- semantics


def test_narrow_bitmask_warns_and_leaves_the_tail():
    logits = torch.zeros(2, 100)
    with pytest.warns(UserWarning, match=r"covers only 64 tokens .* logits have 100"):
        apply_token_bitmask_inplace(logits, torch.zeros(2, 2, dtype=torch.int32))
    assert torch.isneginf(logits[:, :64]).all()
    assert (logits[:, 64:] == 0).all()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        apply_token_bitmask_inplace(logits, torch.zeros(2, 2, dtype=torch.int32), vocab_size=64)
        apply_token_bitmask_inplace(logits, torch.zeros(2, 5, dtype=torch.int32))  # wider


def test_indices_select_the_same_row_of_both():
    logits = torch.zeros(3, 32)
    bitmask = torch.tensor([[-1], [0], [-1], [0]], dtype=torch.int32)  # only row 1, 3 mask
    apply_token_bitmask_inplace(logits, bitmask, indices=[1, 2])
    assert torch.isneginf(logits[1]).all()
    assert (logits[[0, 2]] == 0).all()


def test_bit_order():
    logits = torch.zeros(40)
    word0 = np.array([(1 << 0) | (1 << 31)], dtype=np.uint32).view(np.int32)[0]
    apply_token_bitmask_inplace(logits, torch.tensor([int(word0), 1 << 3], dtype=torch.int32))
    allowed = torch.nonzero(logits == 0).flatten().tolist()
    assert allowed == [0, 31, 35]


def test_numpy_bitmask_is_accepted():
    rng = np.random.default_rng(11)
    logits = torch.randn(2, 70)
    bitmask = random_bitmask(rng, 2, 3).numpy()
    expected = reference(logits, torch.from_numpy(bitmask))
    bitmask.flags.writeable = False
    apply_token_bitmask_inplace(logits, bitmask)
    assert torch.equal(logits, expected)


def test_cpu_entry_point_matches_xgrammar_kernel():
    # xgrammar.kernels.apply_token_bitmask_inplace_cpu's signature: vocab_size, indices
    rng = np.random.default_rng(5)
    logits = torch.randn(3, 70)
    bitmask = random_bitmask(rng, 3, 3)
    expected = reference(logits, bitmask)
    got = logits.clone()
    apply_token_bitmask_inplace_cpu(got, bitmask)
    assert torch.equal(got, expected)
    part = logits.clone()
    apply_token_bitmask_inplace_cpu(part, bitmask, 40, [2])  # positional, as xgrammar's
    assert torch.equal(part[:2], logits[:2]) and torch.equal(part[2, 40:], logits[2, 40:])
    assert torch.equal(part[2, :40], expected[2, :40])
    xgr = pytest.importorskip("xgrammar.kernels.apply_token_bitmask_inplace_cpu")
    theirs = logits.clone()
    xgr.apply_token_bitmask_inplace_cpu(theirs, bitmask, 40, [2])
    assert torch.equal(part, theirs)


def test_cpu_entry_point_refuses_other_devices():
    # the "meta" device stands for any non-CPU one (no data, no accelerator needed)
    with pytest.raises(ArgumentError, match="logits must be a CPU tensor, got one on meta"):
        apply_token_bitmask_inplace_cpu(
            torch.zeros(1, 8, device="meta"), torch.zeros(1, 1, dtype=torch.int32)
        )


def test_auto_uses_torch_on_cpu(monkeypatch):
    monkeypatch.delitem(sys.modules, TRITON_MODULE, raising=False)
    apply_token_bitmask_inplace(torch.zeros(1, 8), torch.zeros(1, 1, dtype=torch.int32))
    assert TRITON_MODULE not in sys.modules


# ---------------------------------------------------------------------------- oracle


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).removeprefix("torch."))
@pytest.mark.parametrize("seed", range(40))
def test_equals_xgrammar(dtype, seed):
    xgr = pytest.importorskip("xgrammar")
    logits, bitmask, kwargs = random_case(1000 + seed, dtype, "cpu", max_vocab=2000)
    theirs = logits.clone()
    xg_kwargs = dict(kwargs)
    if isinstance(xg_kwargs.get("indices"), torch.Tensor):
        xg_kwargs["indices"] = xg_kwargs["indices"].tolist()
    with warnings.catch_warnings(record=True) as xg_caught:
        warnings.simplefilter("always")
        xgr.apply_token_bitmask_inplace(theirs, bitmask, **xg_kwargs)
    ours_caught = call(logits, bitmask, "torch", **kwargs)
    assert torch.equal(logits, theirs)
    assert len(ours_caught) == len([w for w in xg_caught if w.category is UserWarning])


# ---------------------------------------------------------------------------- errors


def _i32(*shape):
    return torch.zeros(*shape, dtype=torch.int32)


ERRORS = [  # (id, logits, bitmask, kwargs, exception, message regex)
    (
        "logits-not-tensor",
        np.zeros((1, 32), np.float32),
        _i32(1, 1),
        {},
        ArgumentError,
        "logits must be a torch.Tensor",
    ),
    (
        "logits-float64",
        torch.zeros(1, 32, dtype=torch.float64),
        _i32(1, 1),
        {},
        ArgumentError,
        "torch.float64",
    ),
    ("logits-int", torch.zeros(1, 32, dtype=torch.int32), _i32(1, 1), {}, ArgumentError, "dtype"),
    ("logits-3d", torch.zeros(1, 1, 32), _i32(1, 1), {}, ArgumentError, "3-D"),
    ("logits-0d", torch.tensor(1.0), _i32(1, 1), {}, ArgumentError, "0-D"),
    (
        "logits-expanded",
        torch.zeros(1, 32).expand(3, 32),
        _i32(3, 1),
        {},
        ArgumentError,
        "sharing memory",
    ),
    (
        "bitmask-int64",
        torch.zeros(1, 32),
        torch.zeros(1, 1, dtype=torch.int64),
        {},
        BitmaskError,
        "torch.int32",
    ),
    (
        "bitmask-uint32-numpy",
        torch.zeros(1, 32),
        np.zeros((1, 1), np.uint32),
        {},
        BitmaskError,
        "int32",
    ),
    ("bitmask-list", torch.zeros(1, 32), [[0]], {}, BitmaskError, "torch.Tensor"),
    ("bitmask-3d", torch.zeros(1, 32), _i32(1, 1, 1), {}, BitmaskError, "3-D"),
    ("rows-differ", torch.zeros(3, 32), _i32(2, 1), {}, BitmaskError, "same number of rows"),
    (
        "rows-differ-1d-bitmask",
        torch.zeros(2, 32),
        _i32(1),
        {},
        BitmaskError,
        "same number of rows",
    ),
    (
        "vocab-negative",
        torch.zeros(1, 32),
        _i32(1, 1),
        {"vocab_size": -1},
        ArgumentError,
        "non-negative",
    ),
    ("vocab-float", torch.zeros(1, 32), _i32(1, 1), {"vocab_size": 3.0}, ArgumentError, "integer"),
    ("vocab-bool", torch.zeros(1, 32), _i32(1, 1), {"vocab_size": True}, ArgumentError, "integer"),
    (
        "vocab-past-logits",
        torch.zeros(1, 32),
        _i32(1, 2),
        {"vocab_size": 33},
        ArgumentError,
        "logits' last dimension 32",
    ),
    (
        "vocab-past-bitmask",
        torch.zeros(1, 64),
        _i32(1, 1),
        {"vocab_size": 33},
        BitmaskError,
        "bitmask has 1",
    ),
    (
        "index-too-big",
        torch.zeros(4, 32),
        _i32(2, 1),
        {"indices": [0, 2]},
        BitmaskIndexError,
        r"indices\[1\] = 2",
    ),
    (
        "index-past-logits",
        torch.zeros(1, 32),
        _i32(4, 1),
        {"indices": [3]},
        BitmaskIndexError,
        r"\[0, 1\)",
    ),
    ("index-negative", torch.zeros(4, 32), _i32(4, 1), {"indices": [-1]}, BitmaskIndexError, "-1"),
    (
        "index-float",
        torch.zeros(4, 32),
        _i32(4, 1),
        {"indices": [0.0]},
        BitmaskIndexError,
        "integers",
    ),
    (
        "index-bool",
        torch.zeros(4, 32),
        _i32(4, 1),
        {"indices": [True]},
        BitmaskIndexError,
        "integers",
    ),
    (
        "index-float-tensor",
        torch.zeros(4, 32),
        _i32(4, 1),
        {"indices": torch.tensor([0.0])},
        BitmaskIndexError,
        "integers",
    ),
    ("index-2d", torch.zeros(4, 32), _i32(4, 1), {"indices": [[0]]}, BitmaskIndexError, "1-D"),
    (
        "index-not-sequence",
        torch.zeros(4, 32),
        _i32(4, 1),
        {"indices": 1},
        BitmaskIndexError,
        "1-D",
    ),
    (
        "backend-unknown",
        torch.zeros(1, 32),
        _i32(1, 1),
        {"backend": "cuda"},
        ArgumentError,
        "backend must be one of",
    ),
]


@pytest.mark.parametrize(
    ("logits", "bitmask", "kwargs", "exc", "match"), [pytest.param(*e[1:], id=e[0]) for e in ERRORS]
)
def test_validation_errors(logits, bitmask, kwargs, exc, match):
    before = logits.clone() if isinstance(logits, torch.Tensor) else None
    with pytest.raises(exc, match=match) as info:
        apply_token_bitmask_inplace(logits, bitmask, **kwargs)
    assert isinstance(info.value, (TreegramError, ValueError))
    if before is not None:
        assert torch.equal(logits, before)


def test_index_errors_are_index_errors():
    with pytest.raises(IndexError):
        apply_token_bitmask_inplace(torch.zeros(2, 32), _i32(2, 1), indices=[2])


def test_triton_on_cpu_without_interpreter_is_an_error(monkeypatch):
    pytest.importorskip("triton")
    if TRITON_MODULE in sys.modules and sys.modules[TRITON_MODULE].INTERPRETED:
        pytest.skip("the kernel module was loaded in interpreter mode by the environment")
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    with pytest.raises(ArgumentError, match="needs CUDA tensors"):
        apply_token_bitmask_inplace(torch.zeros(1, 32), _i32(1, 1), backend="triton")


@pytest.mark.gpu
def test_device_mismatch():
    with pytest.raises(BitmaskError, match="logits' device"):
        apply_token_bitmask_inplace(torch.zeros(1, 32, device="cuda"), _i32(1, 1))


@pytest.mark.gpu
def test_auto_uses_triton_on_cuda():
    pytest.importorskip("triton")
    logits = torch.zeros(2, 100, device="cuda")
    apply_token_bitmask_inplace(logits, _i32(2, 4).cuda())
    assert TRITON_MODULE in sys.modules
    assert torch.isneginf(logits).all()


# ---------------------------------------------------------------------------- helpers


@pytest.mark.parametrize("vocab", [1, 31, 32, 33, 100, 129_280])
def test_bool_helpers_match_numpy_helpers(vocab):
    rng = np.random.default_rng(vocab)
    mask = rng.random((3, vocab)) < 0.5
    packed = bool_tensor_to_bitmask(torch.from_numpy(mask))
    assert packed.dtype == torch.int32 and packed.is_contiguous()
    np.testing.assert_array_equal(packed.numpy(), bool_to_bitmask(mask))
    np.testing.assert_array_equal(
        bool_tensor_to_bitmask(torch.from_numpy(mask[1])).numpy(), bool_to_bitmask(mask[1])
    )
    unpacked = bitmask_to_bool_tensor(packed, vocab)
    assert unpacked.dtype == torch.bool
    np.testing.assert_array_equal(unpacked.numpy(), mask)
    words = random_bitmask(rng, 2, -(-vocab // 32) + 2)  # padding words are ignored
    np.testing.assert_array_equal(
        bitmask_to_bool_tensor(words, vocab).numpy(), bitmask_to_bool(words, vocab)
    )
    np.testing.assert_array_equal(
        bitmask_to_bool_tensor(words[0], vocab).numpy(), bitmask_to_bool(words[0], vocab)
    )


def test_bool_helper_errors():
    with pytest.raises(BitmaskError, match="torch.bool"):
        bool_tensor_to_bitmask(torch.zeros(3, dtype=torch.int32))
    with pytest.raises(BitmaskError, match="3-D"):
        bool_tensor_to_bitmask(torch.zeros(1, 1, 3, dtype=torch.bool))
    with pytest.raises(BitmaskError, match="torch.Tensor"):
        bool_tensor_to_bitmask(np.zeros(3, dtype=bool))
    with pytest.raises(BitmaskError, match=">= 2"):
        bitmask_to_bool_tensor(_i32(1, 1), 33)
    with pytest.raises(BitmaskError, match="vocab_size"):
        bitmask_to_bool_tensor(_i32(1, 1), -1)
    with pytest.raises(BitmaskError, match="torch.int32"):
        bitmask_to_bool_tensor(torch.zeros(1, 1, dtype=torch.int64), 32)


@pytest.mark.gpu
def test_bool_helpers_on_cuda():
    mask = torch.rand(2, 1000, device="cuda") < 0.5
    packed = bool_tensor_to_bitmask(mask)
    assert packed.device.type == "cuda"
    assert torch.equal(bitmask_to_bool_tensor(packed, 1000), mask)


def test_import_does_not_import_torch():
    code = (
        "import sys, treegram.serving; "
        "assert 'torch' not in sys.modules and 'triton' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
