"""Simple numpy encoders for the k-quant block formats Q4_K, Q5_K and Q6_K.

gguf-py can decode these formats but has no encoder for them. The golden GGUF files only need
*valid* encodings (the references are computed from whatever the blocks decode to), so these are
plain round-to-nearest encoders without llama.cpp's error-minimising search. The byte layouts
are those gguf-py's dequantizers read (gguf/quants.py):

  Q4_K, 144 bytes per 256 values: f16 d, f16 dmin, 12 bytes of packed 6-bit (scale, min) pairs
       for 8 sub-blocks of 32, 128 bytes of nibbles. value = d*sc[j]*q - dmin*m[j], q in 0..15.
  Q5_K, 176 bytes: as Q4_K, plus 32 bytes holding the fifth bit of every value (bit j of byte l
       belongs to value l of sub-block j) between the scales and the nibbles; q in 0..31.
  Q6_K, 210 bytes: 128 bytes of low nibbles, 64 bytes of high 2-bit pairs, 16 int8 scales (one
       per 16 values), f16 d. value = d*scale[e/16]*(q - 32), q in 0..63.

encode(rows, name) takes a float32 [rows, cols] matrix (cols a multiple of 256) and returns the
uint8 [rows, cols/256*block_bytes] array GGUFWriter.add_tensor expects with raw_dtype.
"""

from __future__ import annotations

import numpy as np

QK_K = 256


def _f16(x: np.ndarray) -> np.ndarray:
    return x.astype(np.float16)


def _safe_div(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(den > 0, num / np.where(den > 0, den, 1), 0.0)


def _scale_min_blocks(x: np.ndarray, levels: int):
    """Per-superblock f16 d/dmin, 6-bit sc/m per sub-block of 32, and the quantized values.

    x: [n_blocks, 8, 32] float32. Returns d, dmin (f16 [n]), sc, m (uint8 [n, 8]) and
    q (uint8 [n, 8, 32]).
    """
    lo = np.minimum(x.min(-1), 0.0)  # [n, 8], <= 0
    hi = x.max(-1)
    scale = (hi - lo) / levels
    offset = -lo
    d = _f16(scale.max(-1) / 63)
    dmin = _f16(offset.max(-1) / 63)
    d32 = d.astype(np.float32)[:, None]
    dmin32 = dmin.astype(np.float32)[:, None]
    sc = np.clip(np.rint(_safe_div(scale, d32)), 0, 63).astype(np.uint8)
    m = np.clip(np.rint(_safe_div(offset, dmin32)), 0, 63).astype(np.uint8)
    step = (d32 * sc.astype(np.float32))[..., None]
    shift = (dmin32 * m.astype(np.float32))[..., None]
    q = np.clip(np.rint(_safe_div(x + shift, step)), 0, levels).astype(np.uint8)
    return d, dmin, sc, m, q


def _pack_scale_min(sc: np.ndarray, m: np.ndarray) -> np.ndarray:
    """The 12-byte packing of eight 6-bit scales and mins (Q4_K.get_scale_min in reverse)."""
    out = np.zeros((sc.shape[0], 12), dtype=np.uint8)
    for i in range(4):
        out[:, i] = sc[:, i] | ((sc[:, 4 + i] >> 4) << 6)
        out[:, 4 + i] = m[:, i] | ((m[:, 4 + i] >> 4) << 6)
        out[:, 8 + i] = (sc[:, 4 + i] & 0x0F) | ((m[:, 4 + i] & 0x0F) << 4)
    return out


def _pack_nibbles(q: np.ndarray) -> np.ndarray:
    """[n, 8, 32] values 0..15 -> [n, 128]: byte g*32+l holds sub-block 2g (low), 2g+1 (high)."""
    q = q.reshape(q.shape[0], 4, 2, 32)
    return (q[:, :, 0, :] | (q[:, :, 1, :] << 4)).reshape(q.shape[0], 128)


def _blocks(rows: np.ndarray) -> np.ndarray:
    rows = np.ascontiguousarray(rows, dtype=np.float32)
    assert rows.ndim == 2 and rows.shape[1] % QK_K == 0, rows.shape
    return rows.reshape(-1, QK_K)


def encode_q4_k(rows: np.ndarray) -> np.ndarray:
    x = _blocks(rows).reshape(-1, 8, 32)
    d, dmin, sc, m, q = _scale_min_blocks(x, 15)
    out = np.concatenate([d.view(np.uint8).reshape(-1, 2), dmin.view(np.uint8).reshape(-1, 2),
                          _pack_scale_min(sc, m), _pack_nibbles(q)], axis=1)
    return out.reshape(rows.shape[0], -1)


def encode_q5_k(rows: np.ndarray) -> np.ndarray:
    x = _blocks(rows).reshape(-1, 8, 32)
    d, dmin, sc, m, q = _scale_min_blocks(x, 31)
    qh = np.zeros((x.shape[0], 32), dtype=np.uint8)
    for j in range(8):
        qh |= ((q[:, j, :] >> 4) & 1) << j
    out = np.concatenate([d.view(np.uint8).reshape(-1, 2), dmin.view(np.uint8).reshape(-1, 2),
                          _pack_scale_min(sc, m), qh, _pack_nibbles(q & 0x0F)], axis=1)
    return out.reshape(rows.shape[0], -1)


def encode_q6_k(rows: np.ndarray) -> np.ndarray:
    x = _blocks(rows).reshape(-1, 16, 16)
    n = x.shape[0]
    scale = np.abs(x).max(-1) / 31  # [n, 16]
    d = _f16(scale.max(-1) / 127)
    d32 = d.astype(np.float32)[:, None]
    sc = np.clip(np.rint(_safe_div(scale, d32)), -128, 127).astype(np.int8)
    step = (d32 * sc.astype(np.float32))[..., None]
    q = np.clip(np.rint(_safe_div(x, step)), -32, 31).astype(np.int16) + 32
    u = q.astype(np.uint8).reshape(n, 2, 128)  # two halves of 128 values
    # ql: byte h*64+b holds value h*128+b (low nibble) and h*128+64+b (high nibble).
    ql = (u[:, :, :64] & 0x0F) | ((u[:, :, 64:] & 0x0F) << 4)
    # qh: byte h*32+b holds bits 4..5 of values h*128 + s*32 + b at bit 2s, s = 0..3.
    hi = (u >> 4).reshape(n, 2, 4, 32)
    qh = hi[:, :, 0] | (hi[:, :, 1] << 2) | (hi[:, :, 2] << 4) | (hi[:, :, 3] << 6)
    out = np.concatenate([ql.reshape(n, 128), qh.reshape(n, 64), sc.view(np.uint8),
                          d.view(np.uint8).reshape(-1, 2)], axis=1)
    return out.reshape(rows.shape[0], -1)


ENCODERS = {"Q4_K": encode_q4_k, "Q5_K": encode_q5_k, "Q6_K": encode_q6_k}
