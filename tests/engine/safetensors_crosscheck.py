#!/usr/bin/env python3
"""Cross-checks loom's safetensors reader and writer against the official `safetensors` library.

Both directions, byte for byte:
  1. the library writes a file with every dtype loom reads, odd shapes, unusual names and
     metadata; loom reads it (`tool dump`) and must report the same names, dtypes, shapes,
     bytes and metadata;
  2. loom writes that content back (`tool copy`, `tool reshard`); the library reads loom's files
     and must find the same content;
  3. a file with a dtype loom does not support (F8_E4M3) must be refused with a message naming
     the file and the tensor.

Usage: safetensors_crosscheck.py --tool PATH_TO_safetensors_crosscheck_tool
Needs numpy and safetensors (deploy/install-deps.sh installs both). Exits non-zero on mismatch.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import safetensors
from safetensors import deserialize, safe_open, serialize_file

# Header dtype -> (dtype name the library takes, numpy dtype holding the same bytes).
DTYPES = {
    "F64": ("float64", np.float64),
    "F32": ("float32", np.float32),
    "F16": ("float16", np.float16),
    "BF16": ("bfloat16", np.uint16),  # numpy has no bfloat16: random bit patterns instead
    "I64": ("int64", np.int64),
    "I32": ("int32", np.int32),
    "I16": ("int16", np.int16),
    "I8": ("int8", np.int8),
    "U8": ("uint8", np.uint8),
    "BOOL": ("bool", np.bool_),
}

METADATA = {
    "format": "pt",
    'quote"and\\backslash': "line\nbreak, tab\t, caf\u00e9, \U0001f600",
    "empty": "",
}


def make_array(rng, dtype, shape):
    numpy_dtype = DTYPES[dtype][1]
    if dtype == "BOOL":
        return rng.integers(0, 2, size=shape).astype(np.bool_)
    if dtype in ("F64", "F32", "F16"):
        return rng.standard_normal(size=shape).astype(numpy_dtype)
    info = np.iinfo(numpy_dtype)
    return rng.integers(info.min, info.max, size=shape, dtype=numpy_dtype, endpoint=True)


def make_tensors():
    """name -> (header dtype, shape, little-endian numpy array)."""
    rng = np.random.default_rng(20240601)
    shapes = [(3, 5), (7,), (2, 3, 4)]
    tensors = {}
    for i, dtype in enumerate(DTYPES):
        shape = shapes[i % len(shapes)]
        tensors[f"model.layers.{i}.{dtype.lower()}"] = (dtype, shape, make_array(rng, dtype, shape))
    tensors["scalar"] = ("F32", (), make_array(rng, "F32", ()))
    tensors["empty"] = ("BF16", (0, 4), make_array(rng, "BF16", (0, 4)))
    tensors["big.weight"] = ("BF16", (256, 1024), make_array(rng, "BF16", (256, 1024)))
    tensors['na\u00efve "quoted" \\ name'] = ("I16", (2, 2), make_array(rng, "I16", (2, 2)))
    return tensors


def library_write(path, tensors, metadata):
    """Writes with the official library: TensorSpec where available, else the older dict form."""
    arrays = [np.ascontiguousarray(array) for _, _, array in tensors.values()]
    specs = {}
    for (name, (dtype, shape, _)), array in zip(tensors.items(), arrays):
        if hasattr(safetensors, "TensorSpec"):
            specs[name] = safetensors.TensorSpec(
                dtype=DTYPES.get(dtype, (dtype,))[0], shape=list(shape),
                data_ptr=array.ctypes.data, data_len=array.nbytes)
        else:
            specs[name] = {"dtype": DTYPES.get(dtype, (dtype,))[0], "shape": list(shape),
                           "data": array.tobytes()}
    serialize_file(specs, path, metadata=metadata)


def library_read(path):
    """(name -> (header dtype, shape, bytes), metadata) as the official library reads `path`."""
    with open(path, "rb") as f:
        content = f.read()
    tensors = {name: (info["dtype"], tuple(info["shape"]), bytes(info["data"]))
               for name, info in deserialize(content)}
    with safe_open(path, framework="numpy") as f:
        metadata = f.metadata() or {}
    return tensors, metadata


def loom_dump(tool, path):
    """(name -> (header dtype, shape, bytes), metadata) as loom reads `path`."""
    result = subprocess.run([tool, "dump", path], capture_output=True, check=False)
    if result.returncode != 0:
        fail(f"loom refused {path}: {result.stderr.decode(errors='replace')}")
    tensors, metadata = {}, {}
    for line in result.stdout.decode().splitlines():
        fields = line.split(" ")
        if fields[0] == "meta":
            metadata[bytes.fromhex(fields[1]).decode()] = bytes.fromhex(fields[2]).decode()
        else:
            shape = () if fields[3] == "-" else tuple(int(d) for d in fields[3].split(","))
            data = b"" if fields[4] == "-" else bytes.fromhex(fields[4])
            tensors[bytes.fromhex(fields[1]).decode()] = (fields[2], shape, data)
    return tensors, metadata


def expected_content(tensors):
    """name -> (header dtype, shape, little-endian bytes)."""
    return {name: (dtype, tuple(shape), array.astype(array.dtype.newbyteorder("<")).tobytes())
            for name, (dtype, shape, array) in tensors.items()}


def fail(message):
    print(f"FAIL: {message}", file=sys.stderr)
    sys.exit(1)


def compare(what, got, want):
    got_tensors, got_metadata = got
    want_tensors, want_metadata = want
    if set(got_tensors) != set(want_tensors):
        fail(f"{what}: tensor names differ: {sorted(set(got_tensors) ^ set(want_tensors))}")
    for name, want_tensor in want_tensors.items():
        got_tensor = got_tensors[name]
        if got_tensor[:2] != want_tensor[:2]:
            fail(f"{what}: {name!r}: dtype/shape {got_tensor[:2]} != {want_tensor[:2]}")
        if got_tensor[2] != want_tensor[2]:
            fail(f"{what}: {name!r}: bytes differ")
    if got_metadata != want_metadata:
        fail(f"{what}: metadata {got_metadata!r} != {want_metadata!r}")
    print(f"ok: {what}: {len(want_tensors)} tensors, {len(want_metadata)} metadata entries")


def check_header_padding(path):
    with open(path, "rb") as f:
        header_length = int.from_bytes(f.read(8), "little")
    if header_length % 8 != 0:
        fail(f"{path}: header length {header_length} is not a multiple of 8")


def read_sharded(folder):
    with open(os.path.join(folder, "model.safetensors.index.json")) as f:
        weight_map = json.load(f)["weight_map"]
    tensors, metadata = {}, None
    for shard in sorted(set(weight_map.values())):
        shard_tensors, metadata = library_read(os.path.join(folder, shard))
        for name, tensor in shard_tensors.items():
            if weight_map.get(name) != shard:
                fail(f"{folder}: {name!r} is in {shard} but the index says {weight_map.get(name)}")
            tensors[name] = tensor
    if len(set(weight_map.values())) < 2:
        fail(f"{folder}: expected several shards")
    return tensors, metadata


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tool", required=True, help="path of safetensors_crosscheck_tool")
    args = parser.parse_args()
    tensors = make_tensors()
    want = (expected_content(tensors), METADATA)
    with tempfile.TemporaryDirectory(prefix="loom_safetensors_crosscheck_") as work:
        reference = os.path.join(work, "reference.safetensors")
        library_write(reference, tensors, METADATA)
        compare("library wrote, loom read", loom_dump(args.tool, reference), want)

        copied = os.path.join(work, "loom.safetensors")
        subprocess.run([args.tool, "copy", reference, copied], check=True)
        check_header_padding(copied)
        compare("loom wrote, library read", library_read(copied), want)

        sharded = os.path.join(work, "sharded")
        subprocess.run([args.tool, "reshard", reference, sharded, "65536"], check=True)
        compare("loom wrote shards, library read", read_sharded(sharded), want)
        compare("loom wrote shards, loom read", loom_dump(args.tool, sharded), want)

        fp8 = os.path.join(work, "fp8.safetensors")
        fp8_tensor = ("float8_e4m3fn", (4,), np.arange(4, dtype=np.uint8))
        library_write(fp8, {"fp8.weight": fp8_tensor}, None)
        result = subprocess.run([args.tool, "dump", fp8], capture_output=True, check=False)
        stderr = result.stderr.decode(errors="replace")
        if result.returncode != 1 or "unsupported dtype F8_E4M3" not in stderr or \
                "'fp8.weight'" not in stderr or fp8 not in stderr:
            fail(f"F8_E4M3 file: expected a refusal naming file and tensor, got "
                 f"rc={result.returncode} {stderr!r}")
        print("ok: F8_E4M3 refused:", stderr.strip())
    print(f"all cross-checks passed (safetensors {safetensors.__version__}, numpy {np.__version__})")


if __name__ == "__main__":
    main()
