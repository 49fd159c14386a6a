#!/usr/bin/env python3
# make_safetensors_ref.py - writes tests/data/safetensors/reference.safetensors with Python's
# safetensors (the reference implementation), for tests/test_safetensors.c.
#
#   python3 -m venv /tmp/venv && /tmp/venv/bin/pip install safetensors numpy
#   /tmp/venv/bin/python tools/reference/make_safetensors_ref.py tests/data/safetensors/reference.safetensors
#
# Produced with safetensors 0.8.0, numpy 2.4.6. Every dtype kda.c reads, a 0-rank scalar and a
# zero-size tensor. Values follow the formulas below; the C test recomputes them. BF16 has no
# numpy dtype, so every tensor goes through safetensors.serialize_file with TensorSpec (the
# path safetensors.numpy.save_file takes), BF16 as raw round-to-nearest-even bytes.
import sys

import numpy as np
import safetensors
from safetensors import TensorSpec, serialize_file


def f32_to_bf16_bytes(a):
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16  # round to nearest even (no NaNs here)
    return u.astype(np.uint16).tobytes()


def main(out):
    i6 = np.arange(6)
    arrays = {
        "t_bool": (i6 % 2 == 1).reshape(2, 3),
        "t_u8": (i6 * 40 + 1).astype(np.uint8).reshape(2, 3),
        "t_i8": (i6 * 20 - 60).astype(np.int8).reshape(2, 3),
        "t_i16": (i6 * 1000 - 3000).astype(np.int16).reshape(2, 3),
        "t_u16": (i6 * 10000 + 7).astype(np.uint16).reshape(2, 3),
        "t_f16": (i6 * 0.25 - 0.5).astype(np.float16).reshape(3, 2),
        "t_i32": (i6 * 100000 - 7).astype(np.int32).reshape(6),
        "t_u32": (i6 * 700000000).astype(np.uint32).reshape(1, 6),
        "t_f32": (i6 * 0.5 - 1.0).astype(np.float32).reshape(2, 3),
        "t_f64": (i6 / 3.0).astype(np.float64).reshape(2, 3),
        "t_i64": (i6 * 10**12 - 5).astype(np.int64).reshape(3, 2),
        "t_u64": (i6 * 10**15).astype(np.uint64).reshape(2, 3),
        "t_scalar": np.array(3.5, dtype=np.float32),  # 0-rank
        "t_empty": np.zeros((0, 4), dtype=np.float32),  # zero-size
    }
    keep = []  # the specs hold raw pointers: keep the buffers alive

    def spec(dtype, shape, buf):
        arr = np.frombuffer(buf, dtype=np.uint8) if len(buf) else np.zeros(1, np.uint8)
        keep.append(arr)
        return TensorSpec(dtype=dtype, shape=list(shape), data_ptr=arr.ctypes.data,
                          data_len=len(buf))

    d = {k: spec(a.dtype.name, a.shape, np.ascontiguousarray(a).tobytes())
         for k, a in arrays.items()}
    bf = (i6 * 0.3 - 0.7).astype(np.float32)  # not exactly representable: tests rounding
    d["t_bf16"] = spec("bfloat16", (2, 3), f32_to_bf16_bytes(bf))
    serialize_file(d, out, metadata={"format": "pt"})
    print(f"wrote {out} with safetensors {safetensors.__version__}")


if __name__ == "__main__":
    main(sys.argv[1])
