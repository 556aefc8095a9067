"""The demo's GGUF header reader (treegram.demo.read_gguf) against the gguf package's own
reader, on small files written with ``gguf.GGUFWriter``: metadata of every value type,
tensors of every type the SmolLM2 file uses (float32, float16, Q8_0, Q4_1), alignment."""

from __future__ import annotations

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")

from treegram.demo import read_gguf  # noqa: E402
from treegram.errors import ArgumentError  # noqa: E402

Q = gguf.GGMLQuantizationType


def _write(path, *, alignment: int | None = None):
    rng = np.random.default_rng(0)
    w = gguf.GGUFWriter(str(path), "llama")
    if alignment is not None:
        w.add_custom_alignment(alignment)
    w.add_block_count(2)
    w.add_uint8("t.u8", 7)
    w.add_int16("t.i16", -300)
    w.add_uint32("t.u32", 4_000_000_000)
    w.add_int64("t.i64", -(2**40))
    w.add_float32("t.f32", 0.25)
    w.add_float64("t.f64", -1e-300)
    w.add_bool("t.bool", True)
    w.add_string("t.str", "héllo <|im_end|>")
    w.add_array("t.strs", ["Ġa", "b c", "", "漢字"])
    w.add_array("t.ints", [1, -2, 3])
    w.add_array("t.floats", [0.5, 1.5])
    w.add_array("t.nested", [[1, 2], [3]])
    tensors = {
        "a.f32": rng.standard_normal((3, 5)).astype(np.float32),
        "b.f16": rng.standard_normal((2, 64)).astype(np.float16),
        "c.q8": rng.standard_normal((4, 64)).astype(np.float32),
        "d.q41": rng.standard_normal((3, 96)).astype(np.float32),
    }
    w.add_tensor("a.f32", tensors["a.f32"])
    w.add_tensor("b.f16", tensors["b.f16"])
    q8 = gguf.quants.quantize(tensors["c.q8"], Q.Q8_0)
    w.add_tensor("c.q8", q8, raw_shape=q8.shape, raw_dtype=Q.Q8_0)
    q41 = gguf.quants.quantize(tensors["d.q41"], Q.Q4_1)
    w.add_tensor("d.q41", q41, raw_shape=q41.shape, raw_dtype=Q.Q4_1)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return tensors


@pytest.mark.parametrize("alignment", [None, 64])
def test_reader_equals_gguf_reader(tmp_path, alignment):
    path = tmp_path / "m.gguf"
    original = _write(path, alignment=alignment)
    ours = read_gguf(path)
    ref = gguf.GGUFReader(str(path))
    expected_meta = {k: f.contents() for k, f in ref.fields.items() if not k.startswith("GGUF.")}
    nested = ours.metadata.pop("t.nested")
    assert nested == [[1, 2], [3]]  # the gguf reader flattens nested arrays: [1, 2, 3]
    assert expected_meta.pop("t.nested") == [x for part in nested for x in part]
    assert ours.metadata == expected_meta
    assert ours.metadata["t.strs"] == ["Ġa", "b c", "", "漢字"]
    assert list(ours.tensors) == [t.name for t in ref.tensors]
    for t in ref.tensors:
        mine = ours.tensors[t.name]
        assert mine.ggml_type == int(t.tensor_type) and mine.offset == t.data_offset
        assert mine.nbytes == t.n_bytes
        expected = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32)
        got = ours.tensor(t.name)
        assert got.shape == original[t.name].shape
        np.testing.assert_array_equal(got, expected.reshape(got.shape))
    # quantization error of the blocks, not of the reading
    np.testing.assert_allclose(ours.tensor("c.q8"), original["c.q8"], atol=0.05)
    del got
    ours.close()


def test_bad_files_are_refused(tmp_path):
    path = tmp_path / "m.gguf"
    _write(path)
    data = path.read_bytes()
    for name, content in {
        "magic": b"GGUX" + data[4:],
        "version": data[:4] + (9).to_bytes(4, "little") + data[8:],
        "truncated": data[: len(data) // 2],
        "header only": data[:40],
    }.items():
        bad = tmp_path / f"{name}.gguf"
        bad.write_bytes(content)
        with pytest.raises(ArgumentError, match="not a readable GGUF file"):
            read_gguf(bad)
