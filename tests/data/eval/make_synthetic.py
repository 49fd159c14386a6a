# Synthetic Arrow fixtures for tests/test_arrow.c (pyarrow): every supported type, nulls,
# two record batches; written as IPC stream and IPC file. Expected rows as JSON lines.
import json, sys, pyarrow as pa
out = sys.argv[1]
schema = pa.schema([
    ("s", pa.string()), ("ls", pa.large_string()), ("b", pa.binary()), ("i8", pa.int8()),
    ("u16", pa.uint16()), ("i64", pa.int64()), ("u64", pa.uint64()), ("f32", pa.float32()),
    ("f64", pa.float64()), ("h", pa.float16()), ("ok", pa.bool_()), ("n", pa.null()),
    ("l", pa.list_(pa.string())), ("ll", pa.large_list(pa.int32())),
    ("fl", pa.list_(pa.int16(), 2)),
    ("st", pa.struct([("text", pa.list_(pa.string())), ("label", pa.list_(pa.string()))])),
])
rows1 = [
    dict(s="héllo \"q\"\n\t\u2028", ls="x", b=b"ab", i8=-128, u16=65535, i64=-(2**63), u64=2**64-1,
         f32=1.5, f64=0.1, h=0.5, ok=True, n=None, l=["a", None, ""], ll=[1, -2], fl=[3, 4],
         st=dict(text=["t1", "t2"], label=["A", "B"])),
    dict(s=None, ls=None, b=None, i8=None, u16=None, i64=None, u64=None, f32=None, f64=None,
         h=None, ok=None, n=None, l=None, ll=None, fl=None, st=None),
]
rows2 = [
    dict(s="", ls="日本", b=b"", i8=7, u16=0, i64=42, u64=0, f32=-2.25, f64=1e300, h=-2.0,
         ok=False, n=None, l=[], ll=[], fl=[0, -1], st=dict(text=[], label=None)),
]
b1 = pa.RecordBatch.from_pylist(rows1, schema=schema)
b2 = pa.RecordBatch.from_pylist(rows2, schema=schema)
with pa.OSFile(out + "/synthetic.stream.arrow", "wb") as f:
    with pa.ipc.new_stream(f, schema) as w:
        w.write_batch(b1); w.write_batch(b2)
with pa.OSFile(out + "/synthetic.file.arrow", "wb") as f:
    with pa.ipc.new_file(f, schema) as w:
        w.write_batch(b1); w.write_batch(b2)
def enc(v):
    if isinstance(v, bytes): return v.decode()
    if isinstance(v, dict): return {k: enc(x) for k, x in v.items()}
    if isinstance(v, list): return [enc(x) for x in v]
    return v
with open(out + "/synthetic.expected.jsonl", "w") as f:
    for r in rows1 + rows2:
        f.write(json.dumps(enc(r), ensure_ascii=False) + "\n")
