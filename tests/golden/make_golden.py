#!/usr/bin/env python3
"""Builds tiny random-weight Hugging Face checkpoints and records reference outputs.

For every variant in VARIANTS this writes tests/golden/models/<name>/ containing
  - the checkpoint exactly as `save_pretrained` writes it (config.json,
    generation_config.json, model.safetensors or shards + index), except that
    variants marked config_style="legacy" get their config.json rewritten into the
    older on-disk layout still found on most published checkpoints (README.md);
  - reference.safetensors: float32 logits for every prompt position and for every
    greedy step;
  - reference.json: prompts, greedy tokens, greedy margins, tolerances and the
    model facts an engine needs to match.

References are computed by reloading the saved folder in float32 (so the stored
bf16/fp16 values are upcast exactly) with eager attention. Each variant is also
cross-checked against sdpa attention and against an independent float64
implementation in this file (`Float64Reference`) that follows the semantics
written down in README.md; the observed differences are recorded.

GGUF_VARIANTS are written as GGUF files (model.gguf, llama.cpp's layout, float and block-quantized
formats) and read back by transformers (`gguf_file=`), which dequantizes them.

Usage: make_golden.py [--out DIR] [--only NAME|GROUP[,...]] [--threads N]
  GROUP: safetensors (the Hugging Face folders) or gguf (the GGUF files).
Requires torch, transformers (5.x), safetensors, gguf and accelerate:
deploy/install-deps.sh --golden.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import math
import os
import shutil
import sys
from pathlib import Path

os.environ.setdefault("TQDM_DISABLE", "1")  # transformers' GGUF loader reports progress

import gguf
import numpy as np
import torch
import transformers
from safetensors.torch import load_file, save_file
import kquants
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    LlamaConfig,
    MistralConfig,
    MixtralConfig,
    Qwen2Config,
    Qwen2MoeConfig,
    Qwen3Config,
    Qwen3MoeConfig,
)

HERE = Path(__file__).resolve().parent
GREEDY_STEPS = 32
# A prompt is redrawn (next seed) while any greedy step has a top-1/top-2 logit gap
# below this, so that an engine within tolerance reproduces the greedy tokens.
MIN_GREEDY_MARGIN = 0.02
# ... and while the greedy continuation is degenerate (fewer distinct tokens than this).
MIN_DISTINCT_GREEDY = 4
# Mixture-of-experts variants: a prompt is also redrawn while some token's router logits have a
# gap below this between the last chosen and the first unchosen expert, so that the experts
# chosen do not hinge on rounding: float32 reduction order moves router logits by ~1e-6, an f16
# KV cache by up to ~5e-3 (measured on these variants).
MIN_ROUTER_GAP = 0.01
STORAGE_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}

# ----------------------------------------------------------------------------------------
# Variants
# ----------------------------------------------------------------------------------------
# init: std of the token embedding matrix ("embed_std") and a gain applied to the
# lm_head matrix ("lm_head_gain", untied models only) and to o_proj/down_proj
# ("out_gain": layer outputs that outweigh the embedding in the residual stream keep
# tied models from predicting their own input token). Every other matrix is
# N(0, 1/fan_in); RMSNorm weights are 1 + 0.2 N(0,1); biases are 0.1 N(0,1).
# q_proj/k_proj get gain QK_GAIN (and Qwen3 q_norm/k_norm weights are scaled by
# QK_NORM_MEAN) so that attention is fairly peaked and position bugs show.
QK_GAIN = 1.6
QK_NORM_MEAN = 2.0
VARIANTS = [
    dict(
        name="llama2_mha",
        architecture="LlamaForCausalLM",
        config_cls=LlamaConfig,
        config=dict(
            vocab_size=512, hidden_size=64, intermediate_size=160, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=4, rms_norm_eps=1e-6, rope_theta=10000.0,
            max_position_embeddings=128, tie_word_embeddings=False,
            bos_token_id=1, eos_token_id=2,
        ),
        storage_dtype="bfloat16",
        init=dict(embed_std=1.0, lm_head_gain=2.0),
        prompt_lens=[1, 5, 17, 40],
        seed=1001,
        exercises="Llama-2 shape: multi-head attention (KV heads == heads), default RoPE, "
        "untied lm_head, bf16 storage.",
    ),
    dict(
        name="llama3_gqa",
        architecture="LlamaForCausalLM",
        config_cls=LlamaConfig,
        config=dict(
            vocab_size=512, hidden_size=128, intermediate_size=256, num_hidden_layers=3,
            num_attention_heads=8, num_key_value_heads=2, head_dim=16, rms_norm_eps=1e-5,
            rope_theta=500000.0,
            rope_scaling=dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0,
                              high_freq_factor=4.0, original_max_position_embeddings=64),
            max_position_embeddings=256, tie_word_embeddings=True,
            bos_token_id=1, eos_token_id=[2, 3],
        ),
        storage_dtype="bfloat16",
        config_style="legacy",
        init=dict(embed_std=0.2, out_gain=4.0),
        prompt_lens=[1, 5, 17, 40, 90],
        seed=1002,
        exercises="Llama-3 shape: grouped-query attention (8 heads share 2 KV heads), llama3 "
        "RoPE scaling with all three frequency bands in use (original_max_position_embeddings=64, "
        "prompts reach position 121), tied embeddings (no lm_head.weight in the file), "
        "eos_token_id as a list, legacy config layout (top-level rope_theta + rope_scaling).",
    ),
    dict(
        name="llama_linear_fp16",
        architecture="LlamaForCausalLM",
        config_cls=LlamaConfig,
        config=dict(
            vocab_size=512, hidden_size=96, intermediate_size=256, num_hidden_layers=2,
            num_attention_heads=3, num_key_value_heads=1, head_dim=32, rms_norm_eps=1e-6,
            rope_theta=10000.0, rope_scaling=dict(rope_type="linear", factor=2.0),
            attention_bias=True, mlp_bias=True,
            max_position_embeddings=128, tie_word_embeddings=False,
            bos_token_id=1, eos_token_id=2,
        ),
        storage_dtype="float16",
        config_style="legacy",
        # Older checkpoints spell the scaling kind "type".
        legacy_overrides=dict(rope_scaling=dict(type="linear", factor=2.0)),
        init=dict(embed_std=1.0, lm_head_gain=2.0),
        prompt_lens=[1, 5, 17, 40],
        seed=1003,
        exercises="Odd head count (3) with multi-query attention (1 KV head), explicit head_dim, "
        "linear RoPE scaling (legacy spelling \"type\": \"linear\"), biases on q/k/v/o and on "
        "gate/up/down, fp16 storage.",
    ),
    dict(
        name="mistral_window",
        architecture="MistralForCausalLM",
        config_cls=MistralConfig,
        config=dict(
            vocab_size=512, hidden_size=64, intermediate_size=192, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, head_dim=16, rms_norm_eps=1e-5,
            rope_theta=10000.0, sliding_window=16,
            max_position_embeddings=128, tie_word_embeddings=False,
            bos_token_id=1, eos_token_id=2,
        ),
        storage_dtype="float32",
        max_shard_size="300KB",
        # Embeddings as small as in trained models (std 0.02), so that the first RMSNorm's
        # eps (1e-5) visibly matters.
        init=dict(embed_std=0.02, lm_head_gain=2.0),
        prompt_lens=[1, 9, 16, 17, 60],
        seed=1004,
        exercises="Sliding-window attention (window 16: prompts of 16 and 17 tokens sit on the "
        "boundary, a 60-token prompt and all generations run past it), GQA 4/2, fp32 storage, "
        "checkpoint sharded into several safetensors files with an index, embeddings small "
        "enough (std 0.02) that rms_norm_eps matters.",
    ),
    dict(
        name="qwen2_bias",
        architecture="Qwen2ForCausalLM",
        config_cls=Qwen2Config,
        config=dict(
            vocab_size=512, hidden_size=96, intermediate_size=224, num_hidden_layers=2,
            num_attention_heads=6, num_key_value_heads=2, rms_norm_eps=1e-6, rope_theta=1000000.0,
            max_position_embeddings=128, tie_word_embeddings=True,
            use_sliding_window=False, sliding_window=None,
            bos_token_id=1, eos_token_id=2,
        ),
        storage_dtype="bfloat16",
        config_style="legacy",
        # Published Qwen2 configs carry a sliding_window value with use_sliding_window
        # false, and transformers then ignores the window. A small value makes an engine
        # that applies it anyway fail.
        legacy_overrides=dict(sliding_window=8, use_sliding_window=False),
        init=dict(embed_std=0.25, out_gain=4.0),
        prompt_lens=[1, 5, 17, 40],
        seed=1005,
        exercises="Qwen2: biases on q/k/v but not on o_proj, GQA 6/2 (3 query heads per KV "
        "head), head_dim implied by hidden/heads (no head_dim in config), tied embeddings, "
        "legacy config layout, and sliding_window 8 present but disabled by "
        "use_sliding_window false (must be ignored).",
    ),
    dict(
        name="qwen3_qknorm",
        architecture="Qwen3ForCausalLM",
        config_cls=Qwen3Config,
        config=dict(
            vocab_size=512, hidden_size=64, intermediate_size=192, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, head_dim=32, rms_norm_eps=1e-6,
            rope_theta=1000000.0, max_position_embeddings=128, tie_word_embeddings=False,
            use_sliding_window=False, attention_bias=False,
            bos_token_id=1, eos_token_id=2,
        ),
        storage_dtype="bfloat16",
        init=dict(embed_std=1.0, lm_head_gain=2.0),
        prompt_lens=[1, 5, 17, 40],
        seed=1006,
        exercises="Qwen3: per-head RMSNorm on q and k (weights of size head_dim) before RoPE, "
        "explicit head_dim 32 != hidden/heads (q_proj is 64 -> 128, o_proj 128 -> 64), untied.",
    ),
    dict(
        name="mixtral",
        architecture="MixtralForCausalLM",
        config_cls=MixtralConfig,
        config=dict(
            vocab_size=512, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, rms_norm_eps=1e-5,
            rope_theta=1000000.0, sliding_window=None, num_local_experts=8,
            num_experts_per_tok=2, router_jitter_noise=0.1,
            max_position_embeddings=128, tie_word_embeddings=False,
            bos_token_id=1, eos_token_id=2,
        ),
        storage_dtype="bfloat16",
        init=dict(embed_std=1.0, lm_head_gain=2.0),
        prompt_lens=[1, 5, 17, 40],
        seed=1007,
        exercises="Mixtral: every layer a sparse block of 8 experts, top-2 always renormalized; "
        "the hub layout (block_sparse_moe.gate, block_sparse_moe.experts.{e}.w1/w3/w2 = "
        "gate/up/down); GQA 4/2; router_jitter_noise set (training only, must not matter).",
    ),
    dict(
        name="qwen2_moe",
        architecture="Qwen2MoeForCausalLM",
        config_cls=Qwen2MoeConfig,
        config=dict(
            vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=3,
            num_attention_heads=4, num_key_value_heads=2, rms_norm_eps=1e-6,
            rope_theta=1000000.0, num_experts=6, num_experts_per_tok=2,
            moe_intermediate_size=64, shared_expert_intermediate_size=96,
            norm_topk_prob=False, decoder_sparse_step=1, mlp_only_layers=[1],
            use_sliding_window=False, max_position_embeddings=128, tie_word_embeddings=False,
            bos_token_id=1, eos_token_id=2,
        ),
        storage_dtype="bfloat16",
        init=dict(embed_std=1.0, lm_head_gain=2.0),
        prompt_lens=[1, 5, 17, 40],
        seed=1008,
        exercises="Qwen2-MoE: 6 experts, top-2 without renormalization (norm_topk_prob false), "
        "a shared expert (intermediate 96) scaled by sigmoid(shared_expert_gate), layer 1 a dense "
        "MLP of intermediate_size 128 (mlp_only_layers [1]) between two sparse layers; q/k/v "
        "biases; per-expert hub layout (mlp.experts.{e}.{gate,up,down}_proj).",
    ),
    dict(
        name="qwen3_moe",
        architecture="Qwen3MoeForCausalLM",
        config_cls=Qwen3MoeConfig,
        config=dict(
            vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, rms_norm_eps=1e-6,
            rope_theta=1000000.0, num_experts=8, num_experts_per_tok=2,
            moe_intermediate_size=64, norm_topk_prob=True, decoder_sparse_step=1,
            use_sliding_window=False, attention_bias=False,
            max_position_embeddings=128, tie_word_embeddings=False,
            bos_token_id=1, eos_token_id=2,
        ),
        storage_dtype="bfloat16",
        # transformers 5's own layout: 3-D mlp.experts.gate_up_proj / down_proj tensors.
        save_kwargs=dict(save_original_format=False),
        init=dict(embed_std=1.0, lm_head_gain=2.0),
        prompt_lens=[1, 5, 17, 40],
        seed=1009,
        exercises="Qwen3-MoE: q/k RMSNorm, head_dim absent from config.json (hidden/heads = 16, "
        "not Qwen3's 128), 8 experts top-2 renormalized (norm_topk_prob true), no shared "
        "expert; saved in the fused layout (mlp.experts.gate_up_proj [8, 128, 64], "
        "mlp.experts.down_proj [8, 64, 64]).",
    ),
]
# Router weights get this gain (logits of std about 3: routing neither uniform nor one-hot).
ROUTER_GAIN = 3.0


# ----------------------------------------------------------------------------------------
# Weights
# ----------------------------------------------------------------------------------------
def randomize(model: torch.nn.Module, seed: int, init: dict) -> None:
    """Overwrites every parameter with seeded random values (HF init hides norm/bias bugs)."""
    gen = torch.Generator().manual_seed(seed)
    tied = model.config.tie_word_embeddings
    with torch.no_grad():
        # named_parameters() lists a tied lm_head/embedding pair once.
        for name, p in sorted(model.named_parameters(), key=lambda kv: kv[0]):
            noise = torch.randn(p.shape, generator=gen, dtype=torch.float32)
            if name.endswith("embed_tokens.weight"):
                value = noise * init["embed_std"]
            elif name.endswith(("q_norm.weight", "k_norm.weight")):
                value = QK_NORM_MEAN * (1.0 + 0.2 * noise)
            elif name.endswith("norm.weight"):
                value = 1.0 + 0.2 * noise
            elif name.endswith(".bias"):
                value = 0.1 * noise
            elif name.endswith(("mlp.experts.gate_up_proj", "mlp.experts.down_proj")):
                # Fused experts [E, out, in].
                gain = init.get("out_gain", 1.0) if name.endswith("down_proj") else 1.0
                value = noise * (gain / math.sqrt(p.shape[2]))
            elif p.dim() == 2:
                gain = 1.0
                if name == "lm_head.weight":
                    gain = init.get("lm_head_gain", 1.0)
                elif name.endswith(("o_proj.weight", "down_proj.weight")):
                    gain = init.get("out_gain", 1.0)
                elif name.endswith(("q_proj.weight", "k_proj.weight")):
                    gain = QK_GAIN
                elif name.endswith("mlp.gate.weight"):
                    gain = ROUTER_GAIN
                value = noise * (gain / math.sqrt(p.shape[1]))
            else:
                raise RuntimeError(f"no init rule for parameter {name} {tuple(p.shape)}")
            p.copy_(value)
    if tied:
        assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()


# ----------------------------------------------------------------------------------------
# Independent float64 implementation (written from the rules in README.md)
# ----------------------------------------------------------------------------------------
class Float64Reference:
    """Decoder-only forward in float64 from the raw safetensors + config.json.

    Which projections carry biases and whether q/k norms exist is read from the tensor
    names, so it does not share any code with transformers.
    """

    @classmethod
    def from_folder(cls, folder: Path) -> "Float64Reference":
        cfg = json.loads((folder / "config.json").read_text())
        w = {}
        for f in sorted(folder.glob("model*.safetensors")):
            w.update(load_file(str(f)))
        return cls(cfg, w)

    def __init__(self, cfg: dict, weights: dict):
        """cfg: config.json as a dict; weights: Hugging Face names -> tensors (any float dtype)."""
        self.cfg = cfg
        w = {k: v.to(torch.float64) for k, v in weights.items()}
        self.w = w
        self.hidden = cfg["hidden_size"]
        self.n_heads = cfg["num_attention_heads"]
        self.n_kv = cfg.get("num_key_value_heads") or self.n_heads
        default_head_dim = 128 if cfg["model_type"] == "qwen3" else self.hidden // self.n_heads
        self.head_dim = cfg.get("head_dim") or default_head_dim
        self.eps = cfg["rms_norm_eps"]
        self.n_layers = cfg["num_hidden_layers"]
        # Window applies only when the model actually uses it (Qwen2/3 gate it).
        window = cfg.get("sliding_window")
        if (cfg["model_type"] in ("qwen2", "qwen3", "qwen2_moe", "qwen3_moe")
                and not cfg.get("use_sliding_window", False)):
            window = None
        self.window = window
        self.inv_freq = rope_inv_freq(cfg, self.head_dim)
        if "lm_head.weight" in w:
            self.lm_head = w["lm_head.weight"]
        else:
            assert cfg.get("tie_word_embeddings", True)
            self.lm_head = w["model.embed_tokens.weight"]

    def _lin(self, x, prefix):
        y = x @ self.w[prefix + ".weight"].T
        b = self.w.get(prefix + ".bias")
        return y if b is None else y + b

    def _rms(self, x, weight):
        return x / torch.sqrt((x * x).mean(-1, keepdim=True) + self.eps) * weight

    def _rope(self, x, pos):
        # x: [heads, T, D]; HF layout: rotate pairs (i, i + D/2), "rotate_half".
        ang = pos[:, None].to(torch.float64) * self.inv_freq[None, :]
        cos = torch.cat([ang.cos(), ang.cos()], -1)
        sin = torch.cat([ang.sin(), ang.sin()], -1)
        half = x.shape[-1] // 2
        rot = torch.cat([-x[..., half:], x[..., :half]], -1)
        return x * cos + rot * sin

    def _is_sparse(self, p: str) -> bool:
        return (p + "mlp.gate.weight") in self.w or (p + "block_sparse_moe.gate.weight") in self.w

    def _expert(self, p: str, e: int, x):
        """Expert e of layer prefix p on rows x, from whichever layout the files have."""
        w = self.w
        if p + "mlp.experts.gate_up_proj" in w:
            gate_up = w[p + "mlp.experts.gate_up_proj"][e]
            inter = gate_up.shape[0] // 2
            gate, up, down = gate_up[:inter], gate_up[inter:], w[p + "mlp.experts.down_proj"][e]
        elif p + "block_sparse_moe.gate.weight" in w:
            q = f"{p}block_sparse_moe.experts.{e}."
            gate, up, down = w[q + "w1.weight"], w[q + "w3.weight"], w[q + "w2.weight"]
        else:
            q = f"{p}mlp.experts.{e}."
            gate, up = w[q + "gate_proj.weight"], w[q + "up_proj.weight"]
            down = w[q + "down_proj.weight"]
        return (torch.nn.functional.silu(x @ gate.T) * (x @ up.T)) @ down.T

    def _moe(self, h, p: str):
        """Sparse block: softmax over the router logits, top-k (renormalized for Mixtral and
        when norm_topk_prob), weighted sum of the chosen experts, plus the sigmoid-gated shared
        expert when the files have one."""
        cfg, w = self.cfg, self.w
        router = w.get(p + "mlp.gate.weight", w.get(p + "block_sparse_moe.gate.weight"))
        probs = torch.softmax(h @ router.T, -1)
        top_p, top_e = probs.topk(cfg["num_experts_per_tok"], dim=-1)
        if cfg["model_type"] == "mixtral" or cfg.get("norm_topk_prob", False):
            top_p = top_p / top_p.sum(-1, keepdim=True)
        out = torch.zeros_like(h)
        for t in range(h.shape[0]):
            for k in range(top_e.shape[1]):
                out[t] += top_p[t, k] * self._expert(p, int(top_e[t, k]), h[t:t + 1])[0]
        if p + "mlp.shared_expert_gate.weight" in w:
            q = p + "mlp.shared_expert."
            shared = (torch.nn.functional.silu(h @ w[q + "gate_proj.weight"].T)
                      * (h @ w[q + "up_proj.weight"].T)) @ w[q + "down_proj.weight"].T
            out = out + torch.sigmoid(h @ w[p + "mlp.shared_expert_gate.weight"].T) * shared
        return out

    @torch.no_grad()
    def logits(self, ids: list[int]) -> torch.Tensor:
        T, D, H, KV = len(ids), self.head_dim, self.n_heads, self.n_kv
        pos = torch.arange(T)
        x = self.w["model.embed_tokens.weight"][torch.tensor(ids)]
        q_idx, k_idx = pos[:, None], pos[None, :]
        allowed = k_idx <= q_idx
        if self.window is not None:
            allowed &= k_idx > q_idx - self.window
        for l in range(self.n_layers):
            p = f"model.layers.{l}."
            h = self._rms(x, self.w[p + "input_layernorm.weight"])
            q = self._lin(h, p + "self_attn.q_proj").view(T, H, D).transpose(0, 1)
            k = self._lin(h, p + "self_attn.k_proj").view(T, KV, D).transpose(0, 1)
            v = self._lin(h, p + "self_attn.v_proj").view(T, KV, D).transpose(0, 1)
            if p + "self_attn.q_norm.weight" in self.w:
                q = self._rms(q, self.w[p + "self_attn.q_norm.weight"])
                k = self._rms(k, self.w[p + "self_attn.k_norm.weight"])
            q, k = self._rope(q, pos), self._rope(k, pos)
            group = H // KV  # query head i uses KV head i // group
            k = k.repeat_interleave(group, 0)
            v = v.repeat_interleave(group, 0)
            s = (q @ k.transpose(1, 2)) * (D ** -0.5)
            s = s.masked_fill(~allowed, float("-inf"))
            a = torch.softmax(s, -1) @ v
            x = x + self._lin(a.transpose(0, 1).reshape(T, H * D), p + "self_attn.o_proj")
            h = self._rms(x, self.w[p + "post_attention_layernorm.weight"])
            if self._is_sparse(p):
                x = x + self._moe(h, p)
                continue
            g = self._lin(h, p + "mlp.gate_proj")
            u = self._lin(h, p + "mlp.up_proj")
            x = x + self._lin(torch.nn.functional.silu(g) * u, p + "mlp.down_proj")
        x = self._rms(x, self.w["model.norm.weight"])
        return x @ self.lm_head.T


def rope_params(cfg: dict) -> dict:
    """RoPE parameters from either config layout (transformers 5 or legacy)."""
    rp = dict(cfg.get("rope_parameters") or cfg.get("rope_scaling") or {})
    rp.setdefault("rope_theta", cfg.get("rope_theta", 10000.0))
    rp["rope_type"] = rp.get("rope_type", rp.get("type", "default"))
    rp.pop("type", None)
    return rp


def rope_inv_freq(cfg: dict, head_dim: int) -> torch.Tensor:
    rp = rope_params(cfg)
    base = float(rp["rope_theta"])
    i = torch.arange(0, head_dim, 2, dtype=torch.float64)
    inv = 1.0 / base ** (i / head_dim)
    kind = rp["rope_type"]
    if kind == "default":
        return inv
    if kind == "linear":
        return inv / rp["factor"]
    if kind == "llama3":
        factor, lo, hi = rp["factor"], rp["low_freq_factor"], rp["high_freq_factor"]
        old = rp["original_max_position_embeddings"]
        wavelen = 2 * math.pi / inv
        smooth = (old / wavelen - lo) / (hi - lo)
        mid = (1 - smooth) * inv / factor + smooth * inv
        out = torch.where(wavelen > old / lo, inv / factor, mid)
        return torch.where(wavelen < old / hi, inv, out)
    raise ValueError(f"rope_type {kind} not implemented here")


# ----------------------------------------------------------------------------------------
# Reference generation
# ----------------------------------------------------------------------------------------
@torch.no_grad()
def forward_logits(model, ids: list[int]) -> torch.Tensor:
    out = model(input_ids=torch.tensor([ids]), use_cache=False)
    return out.logits[0].float()


@torch.no_grad()
def greedy(model, ids: list[int]):
    """Explicit greedy loop: full forward each step, no cache, no EOS stop."""
    seq = list(ids)
    tokens, step_logits, margins = [], [], []
    for _ in range(GREEDY_STEPS):
        last = forward_logits(model, seq)[-1]
        top2 = torch.topk(last, 2)
        tok = int(torch.argmax(last))
        assert tok == int(top2.indices[0])
        tokens.append(tok)
        margins.append(float(top2.values[0] - top2.values[1]))
        step_logits.append(last)
        seq.append(tok)
    return tokens, torch.stack(step_logits), margins


class RouterProbe:
    """Watches the router of every sparse layer of a transformers MoE model (forward hooks on
    its *TopKRouter modules, which return the router logits first)."""

    def __init__(self, model, top_k: int):
        self.top_k = top_k
        self.logits = {}
        for name, module in model.named_modules():
            if type(module).__name__.endswith("TopKRouter"):
                layer = int(name.split(".")[2])  # model.layers.{i}.mlp.gate
                module.register_forward_hook(self._hook(layer))

    def _hook(self, layer):
        def hook(module, inputs, output):
            self.logits[layer] = output[0].detach().float()
        return hook

    def min_gap(self) -> float:
        """Smallest gap between the last chosen and the first unchosen router logit."""
        gap = math.inf
        for logits in self.logits.values():
            top = logits.topk(self.top_k + 1, dim=-1).values
            gap = min(gap, float((top[:, self.top_k - 1] - top[:, self.top_k]).min()))
        return gap

    def counts(self) -> dict:
        """{layer: selections per expert} of the last forward."""
        out = {}
        for layer, logits in self.logits.items():
            chosen = logits.topk(self.top_k, dim=-1).indices.flatten()
            out[layer] = torch.bincount(chosen, minlength=logits.shape[1])
        return out


def record_prompts(v: dict, model, model_sdpa, ref64: "Float64Reference"):
    """Draws the prompts of variant `v` and records transformers' logits and greedy tokens.

    Returns (tensors for reference.safetensors, prompt entries for reference.json, max |sdpa -
    eager|, max |float64 - eager|, flattened logits of every recorded row, routing statistics of
    a mixture-of-experts model or None)."""
    name = v["name"]
    vocab = model.config.vocab_size
    tensors = {}
    prompts = []
    max_sdpa = max_f64 = 0.0
    all_logits = []
    top_k = getattr(model.config, "num_experts_per_tok", 0)
    probe = RouterProbe(model, top_k) if top_k else None
    routing = dict(min_router_gap=math.inf, expert_use={}) if probe else None
    for i, plen in enumerate(v["prompt_lens"]):
        assert plen + GREEDY_STEPS <= model.config.max_position_embeddings
        attempt = 0
        while True:
            gen = torch.Generator().manual_seed(v["seed"] * 1000 + i * 37 + attempt)
            # Avoid the special ids 0..3 in prompts; any id is legal for the model.
            ids = torch.randint(4, vocab, (plen,), generator=gen).tolist()
            tokens, step_logits, margins = greedy(model, ids)
            ok = min(margins) >= MIN_GREEDY_MARGIN and len(set(tokens)) >= MIN_DISTINCT_GREEDY
            if ok and probe:
                forward_logits(model, ids + tokens)
                ok = probe.min_gap() >= MIN_ROUTER_GAP
            if ok:
                break
            attempt += 1
            assert attempt < 50, f"{name}: no usable prompt of length {plen}"
        prompt_logits = forward_logits(model, ids)
        prompt_counts = probe.counts() if probe else None
        full = ids + tokens
        # Logits at all positions of prompt + generated tokens: the greedy steps are rows
        # plen-1 .. plen+30 of this one forward (causal), so check consistency too.
        full_eager = forward_logits(model, full)
        if probe:
            routing["min_router_gap"] = min(routing["min_router_gap"], probe.min_gap())
            for layer, counts in probe.counts().items():
                use = routing["expert_use"].setdefault(layer, torch.zeros_like(counts))
                use += counts
        assert torch.allclose(full_eager[plen - 1:plen - 1 + GREEDY_STEPS], step_logits, atol=1e-4)
        assert torch.allclose(full_eager[:plen], prompt_logits, atol=1e-4)
        full_sdpa = forward_logits(model_sdpa, full)
        full_64 = ref64.logits(full)
        max_sdpa = max(max_sdpa, float((full_sdpa - full_eager).abs().max()))
        max_f64 = max(max_f64, float((full_64 - full_eager.double()).abs().max()))

        tensors[f"prompt{i}.logits"] = prompt_logits.contiguous()
        tensors[f"prompt{i}.greedy_logits"] = step_logits.contiguous()
        all_logits.append(prompt_logits.flatten())
        all_logits.append(step_logits.flatten())
        prompts.append(dict(
            token_ids=ids,
            greedy=tokens,
            greedy_margins=[round(m, 6) for m in margins],
            min_greedy_margin=round(min(margins), 6),
            logits_tensor=f"prompt{i}.logits",
            greedy_logits_tensor=f"prompt{i}.greedy_logits",
        ))
        if probe:
            # How often each layer routed the prompt's tokens to each expert (dense layers: 0).
            num_experts = next(iter(prompt_counts.values())).numel()
            prompts[-1]["expert_counts"] = [
                prompt_counts[l].tolist() if l in prompt_counts else [0] * num_experts
                for l in range(model.config.num_hidden_layers)]
    if routing:
        routing["expert_use"] = {str(k): v.tolist()
                                 for k, v in sorted(routing["expert_use"].items())}
    return tensors, prompts, max_sdpa, max_f64, all_logits, routing


def fused_expert_state(stored: dict) -> dict:
    """The checkpoint's tensors under transformers' in-memory names: per-expert tensors (hub
    layout) stacked into the fused [E, 2I, H] gate_up_proj and [E, H, I] down_proj."""
    out = dict(stored)
    layers = sorted({int(k.split(".")[2]) for k in stored if ".experts.0." in k})
    for layer in layers:
        p = f"model.layers.{layer}."
        if p + "block_sparse_moe.gate.weight" in stored:
            block, names = "block_sparse_moe", ("w1", "w3", "w2")
        else:
            block, names = "mlp", ("gate_proj", "up_proj", "down_proj")
        num = 1 + max(int(k.split(".")[5]) for k in stored if k.startswith(f"{p}{block}.experts."))
        part = [[out.pop(f"{p}{block}.experts.{e}.{n}.weight") for e in range(num)] for n in names]
        out[p + "mlp.experts.gate_up_proj"] = torch.cat([torch.stack(part[0]),
                                                         torch.stack(part[1])], dim=1)
        out[p + "mlp.experts.down_proj"] = torch.stack(part[2])
        out[p + "mlp.gate.weight"] = out.pop(f"{p}{block}.gate.weight")
    return out


def rewrite_legacy_config(folder: Path, overrides: dict) -> None:
    """Rewrites config.json into the layout of published pre-transformers-5 checkpoints:
    top-level rope_theta, rope_scaling (null when there is no scaling), torch_dtype
    instead of dtype, no layer_types; then applies `overrides`."""
    path = folder / "config.json"
    cfg = json.loads(path.read_text())
    rp = dict(cfg.pop("rope_parameters"))
    cfg["rope_theta"] = rp.pop("rope_theta")
    kind = rp.get("rope_type", "default")
    cfg["rope_scaling"] = None if kind == "default" else rp
    cfg["torch_dtype"] = cfg.pop("dtype")
    cfg.pop("layer_types", None)
    cfg.update(overrides)
    path.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")


def moe_facts(mc, stored: dict, routing: dict) -> dict:
    """reference.json's model.moe: what the sparse blocks are and how the prompts used them."""
    num_experts = getattr(mc, "num_local_experts", None) or mc.num_experts
    sparse = sorted(int(k) for k in routing["expert_use"])
    for layer, use in routing["expert_use"].items():
        # Routing must not be degenerate: most experts used, none taking most of the traffic.
        assert sum(1 for n in use if n > 0) >= num_experts - 1, (layer, use)
        assert max(use) <= 0.5 * sum(use), (layer, use)
    return dict(
        num_experts=num_experts,
        num_experts_per_tok=mc.num_experts_per_tok,
        expert_intermediate_size=getattr(mc, "moe_intermediate_size", None) or mc.intermediate_size,
        norm_topk_prob=bool(getattr(mc, "norm_topk_prob", True)),
        shared_expert_intermediate_size=(getattr(mc, "shared_expert_intermediate_size", 0)
                                         if any("shared_expert" in k for k in stored) else 0),
        sparse_layers=sparse,
        expert_layout="fused" if any(k.endswith("gate_up_proj") for k in stored) else "per_expert",
        min_router_gap=routing["min_router_gap"],
        router_gap_rule=(f"prompts redrawn until every token's router logits separate the last "
                         f"chosen expert from the next by >= {MIN_ROUTER_GAP}"),
        expert_use=routing["expert_use"],
    )


def build_variant(v: dict, out_root: Path) -> dict:
    name = v["name"]
    folder = out_root / name
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    storage = STORAGE_DTYPES[v["storage_dtype"]]

    config = v["config_cls"](**v["config"])
    config.architectures = [v["architecture"]]

    torch.manual_seed(v["seed"])
    model = getattr(transformers, v["architecture"])(config).to(torch.float32).eval()
    randomize(model, v["seed"], v["init"])
    # Round to the storage dtype before anything is computed; save exactly that.
    model = model.to(storage)
    save_kwargs = dict(v.get("save_kwargs", {}))
    if v.get("max_shard_size"):
        save_kwargs["max_shard_size"] = v["max_shard_size"]
    model.save_pretrained(folder, **save_kwargs)
    del model
    if v.get("config_style") == "legacy":
        rewrite_legacy_config(folder, v.get("legacy_overrides", {}))

    # The config on disk must mean the same thing to transformers as the one we built.
    reloaded_cfg = AutoConfig.from_pretrained(folder)
    assert rope_params(reloaded_cfg.to_dict()) == rope_params(config.to_dict()), (
        rope_params(reloaded_cfg.to_dict()), rope_params(config.to_dict()))

    def load(attn: str, dtype=torch.float32):
        m = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype, attn_implementation=attn)
        return m.eval()

    model = load("eager")
    assert type(model).__name__ == v["architecture"]
    for p in model.parameters():
        assert p.dtype == torch.float32
    # Stored values upcast exactly.
    stored = {}
    for f in sorted(folder.glob("model*.safetensors")):
        stored.update(load_file(str(f)))
    for k, t in stored.items():
        assert t.dtype == storage, (k, t.dtype)
    sd = model.state_dict()
    for k, t in fused_expert_state(stored).items():
        assert torch.equal(sd[k], t.to(torch.float32)), k
    tied = bool(model.config.tie_word_embeddings)
    assert ("lm_head.weight" in stored) == (not tied)
    if tied:
        assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()

    model_sdpa = load("sdpa")
    ref64 = Float64Reference.from_folder(folder)
    # Qwen2-MoE's config class turns a disabled window into 0.
    assert (getattr(model.config, "sliding_window", None) or None) == ref64.window
    if rope_params(model.config.to_dict())["rope_type"] == "llama3":
        # Make sure all three llama3 bands (kept, interpolated, divided) occur.
        ratio = ref64.inv_freq / rope_inv_freq({"rope_theta": model.config.rope_parameters["rope_theta"]},
                                               ref64.head_dim)
        factor = model.config.rope_parameters["factor"]
        assert (ratio == 1).any() and (ratio == 1 / factor).any()
        assert ((ratio < 1) & (ratio > 1 / factor)).any()
    hf_inv_freq = model.model.rotary_emb.inv_freq.double()
    inv_freq_diff = float((hf_inv_freq - ref64.inv_freq).abs().max() / ref64.inv_freq.abs().max())

    tensors, prompts, max_sdpa, max_f64, all_logits, routing = record_prompts(
        v, model, model_sdpa, ref64)
    save_file(tensors, str(folder / "reference.safetensors"), metadata={"format": "pt"})

    logits_std = float(torch.cat(all_logits).std())
    max_logit = float(torch.cat(all_logits).abs().max())
    # Tolerance: the independent float64 forward differs from the HF float32 one only by
    # float32 rounding and reduction order. An f32 engine with f32 accumulation sits at the
    # same scale; allow 20x the worst difference seen, and never less than 1e-3.
    worst = max(max_f64, max_sdpa)
    tol = max(1e-3, float(f"{20 * worst:.1g}"))
    mc = model.config
    rp = rope_params(json.loads((folder / "config.json").read_text()))
    head_dim = getattr(mc, "head_dim", None) or mc.hidden_size // mc.num_attention_heads
    window = ref64.window
    ref = dict(
        name=name,
        architecture=v["architecture"],
        storage_dtype=v["storage_dtype"],
        reference_dtype="float32",
        attn_implementation="eager",
        transformers_version=transformers.__version__,
        torch_version=torch.__version__.split("+")[0],
        exercises=v["exercises"],
        config_style=v.get("config_style", "transformers5"),
        checkpoint_files=sorted(p.name for p in folder.iterdir()
                                if p.name.startswith("model") or p.name.endswith("config.json")),
        model=dict(
            vocab_size=mc.vocab_size,
            hidden_size=mc.hidden_size,
            num_hidden_layers=mc.num_hidden_layers,
            num_attention_heads=mc.num_attention_heads,
            num_key_value_heads=mc.num_key_value_heads,
            head_dim=head_dim,
            attention_scale=head_dim ** -0.5,
            rms_norm_eps=mc.rms_norm_eps,
            tie_word_embeddings=tied,
            sliding_window=window,
            sliding_window_rule=(None if window is None else
                                 f"query at position p attends to keys k with p - {window} < k <= p "
                                 f"(at most {window} keys, itself included)"),
            qk_norm=any(k.endswith("q_norm.weight") for k in stored),
            biases=sorted({k.split(".")[-2] for k in stored if k.endswith(".bias")}),
            rope=dict(rp, layout="rotate_half (pairs i and i + head_dim/2)"),
            rope_inv_freq=[float(x) for x in hf_inv_freq],
        ),
        prompts=prompts,
        greedy_steps=GREEDY_STEPS,
        tolerance=dict(
            logits_abs=tol,
            note=(
                f"Absolute, on float32 logits (std {logits_std:.2f}). Observed over all prompt and "
                f"greedy positions: independent float64 forward vs HF float32 eager max |diff| "
                f"{max_f64:.2e}; HF sdpa vs eager {max_sdpa:.2e}. These are float32 "
                f"rounding / reduction-order effects, so an f32 engine with f32 accumulation "
                f"should land at the same scale; the bound is 20x the larger, at least 1e-3. "
                f"Greedy tokens should match exactly: every greedy step has a top-1/top-2 gap "
                f">= {MIN_GREEDY_MARGIN} (see greedy_margins), far above the tolerance."
            ),
        ),
        checks=dict(
            fp64_vs_fp32_max_abs=max_f64,
            sdpa_vs_eager_max_abs=max_sdpa,
            rope_inv_freq_hf_vs_fp64_max_rel=inv_freq_diff,
        ),
        logits_std=logits_std,
    )
    ref["logits_max_abs"] = max_logit
    if routing:
        ref["model"]["moe"] = moe_facts(mc, stored, routing)
    (folder / "reference.json").write_text(json.dumps(ref, indent=2) + "\n")
    if max_sdpa > 1e-5 * max(1.0, max_logit):
        print(f"WARNING {name}: sdpa vs eager differ by {max_sdpa:.2e}", file=sys.stderr)
    if max_f64 > tol / 5:
        print(f"WARNING {name}: float64 vs float32 differ by {max_f64:.2e}", file=sys.stderr)
    return ref


# ----------------------------------------------------------------------------------------
# GGUF variants
# ----------------------------------------------------------------------------------------
# Tiny random-weight models written as GGUF files the way llama.cpp's converter and quantizer
# lay them out: llama.cpp tensor names, `llama` q/k rows permuted for interleaved RoPE, 1-D
# tensors (norms, biases) in F32, matrices in the variant's formats. transformers reads the
# file back (dequantizing and un-permuting itself) for the references.
#
# "types": GGML type per tensor: "default" for every matrix, overridden by exact GGUF tensor
# name. Block formats need whole blocks per row (32 values; 256 for the k-quants), so the
# k-quant variants use hidden 256 and intermediate 512 (down_proj rows hold two superblocks).
GGUF_PROMPT_LENS = [1, 6, 21]
_GGUF_LLAMA_SMALL = dict(
    vocab_size=256, hidden_size=64, intermediate_size=192, num_hidden_layers=2,
    num_attention_heads=4, num_key_value_heads=2, rms_norm_eps=1e-5, rope_theta=10000.0,
    max_position_embeddings=128, bos_token_id=1, eos_token_id=2)
_GGUF_LLAMA_128 = dict(_GGUF_LLAMA_SMALL, hidden_size=128, intermediate_size=256)
_GGUF_LLAMA_256 = dict(_GGUF_LLAMA_SMALL, hidden_size=256, intermediate_size=512)
_UNTIED = dict(embed_std=1.0, lm_head_gain=2.0)
_TIED = dict(embed_std=0.25, out_gain=4.0)
GGUF_VARIANTS = [
    dict(
        name="gguf_llama_f32", gguf_arch="llama", architecture="LlamaForCausalLM",
        config_cls=LlamaConfig, config=dict(_GGUF_LLAMA_SMALL, tie_word_embeddings=False),
        types=dict(default="F32"), file_type="ALL_F32", init=_UNTIED, seed=2001,
        exercises="GGUF `llama`, all F32: llama.cpp tensor names, q/k rows permuted for "
        "interleaved RoPE (k with the 2 KV heads), GQA 4/2, untied output.",
    ),
    dict(
        name="gguf_qwen2_f16", gguf_arch="qwen2", architecture="Qwen2ForCausalLM",
        config_cls=Qwen2Config,
        config=dict(_GGUF_LLAMA_SMALL, rms_norm_eps=1e-6, rope_theta=1000000.0,
                    tie_word_embeddings=True, use_sliding_window=False, sliding_window=None),
        types=dict(default="F16"), file_type="MOSTLY_F16", init=_TIED, seed=2002,
        exercises="GGUF `qwen2`, F16 matrices: q/k/v biases (F32), no q/k permutation, tied "
        "embeddings (no output.weight).",
    ),
    dict(
        name="gguf_qwen3_bf16", gguf_arch="qwen3", architecture="Qwen3ForCausalLM",
        config_cls=Qwen3Config,
        config=dict(_GGUF_LLAMA_SMALL, num_attention_heads=2, num_key_value_heads=1,
                    head_dim=128, rms_norm_eps=1e-6, rope_theta=1000000.0,
                    tie_word_embeddings=False, use_sliding_window=False, attention_bias=False),
        types=dict(default="BF16"), file_type="MOSTLY_BF16", init=_UNTIED, seed=2003,
        exercises="GGUF `qwen3`, BF16 matrices: per-head q/k RMSNorm (attn_q_norm/attn_k_norm), "
        "head_dim 128 from attention.key_length (!= hidden/heads; transformers' Qwen3 default), "
        "MQA 2/1.",
    ),
    dict(
        name="gguf_q8_0", gguf_arch="llama", architecture="LlamaForCausalLM",
        config_cls=LlamaConfig, config=dict(_GGUF_LLAMA_128, tie_word_embeddings=True),
        types=dict(default="Q8_0"), file_type="MOSTLY_Q8_0", init=_TIED, seed=2004,
        exercises="Q8_0 everywhere, including the embedding, which is also the (tied) LM head; "
        "llama q/k permutation of quantized rows.",
    ),
    dict(
        name="gguf_q4_0", gguf_arch="llama", architecture="LlamaForCausalLM",
        config_cls=LlamaConfig,
        config=dict(_GGUF_LLAMA_128, intermediate_size=352, tie_word_embeddings=False),
        types=dict(default="Q4_0"), file_type="MOSTLY_Q4_0", init=_UNTIED, seed=2005,
        exercises="Q4_0 everywhere (embedding and output too); intermediate 352 = 11 blocks per "
        "down_proj row.",
    ),
    dict(
        name="gguf_q4_1", gguf_arch="llama", architecture="LlamaForCausalLM",
        config_cls=LlamaConfig, config=dict(_GGUF_LLAMA_128, tie_word_embeddings=True),
        types=dict(default="Q4_1"), file_type="MOSTLY_Q4_1", init=_TIED, seed=2006,
        exercises="Q4_1 everywhere, tied (the layout of the default SmolLM2 Q4_1 file).",
    ),
    dict(
        name="gguf_q4_k", gguf_arch="llama", architecture="LlamaForCausalLM",
        config_cls=LlamaConfig, config=dict(_GGUF_LLAMA_256, tie_word_embeddings=False),
        types=dict(default="Q4_K"), file_type="MOSTLY_Q4_K_S", init=_UNTIED, seed=2007,
        exercises="Q4_K everywhere (8 sub-blocks with 6-bit scales and mins per 256 values).",
    ),
    dict(
        name="gguf_q5_k", gguf_arch="llama", architecture="LlamaForCausalLM",
        config_cls=LlamaConfig, config=dict(_GGUF_LLAMA_256, tie_word_embeddings=True),
        types=dict(default="Q5_K"), file_type="MOSTLY_Q5_K_S", init=_TIED, seed=2008,
        exercises="Q5_K everywhere (fifth bits in a separate 32-byte plane), tied.",
    ),
    dict(
        name="gguf_q6_k", gguf_arch="llama", architecture="LlamaForCausalLM",
        config_cls=LlamaConfig, config=dict(_GGUF_LLAMA_256, tie_word_embeddings=False),
        types=dict(default="Q6_K"), file_type="MOSTLY_Q6_K", init=_UNTIED, seed=2009,
        exercises="Q6_K everywhere (16 signed 8-bit scales per 256 values).",
    ),
    dict(
        name="gguf_q4_k_m", gguf_arch="llama", architecture="LlamaForCausalLM",
        config_cls=LlamaConfig, config=dict(_GGUF_LLAMA_256, tie_word_embeddings=False),
        # llama.cpp's Q4_K_M: Q6_K for the output and for attn_v / ffn_down of the layers its
        # use_more_bits() picks (of 2 layers: the last), Q4_K elsewhere.
        types={"default": "Q4_K", "output.weight": "Q6_K", "blk.1.attn_v.weight": "Q6_K",
               "blk.1.ffn_down.weight": "Q6_K"},
        file_type="MOSTLY_Q4_K_M", init=_UNTIED, seed=2010,
        exercises="Q4_K_M-style mix: Q4_K with Q6_K output, layer-1 attn_v and ffn_down (q/k/v "
        "of one layer in different formats; layers differing).",
    ),
]
# Mixture-of-experts GGUF files, laid out as llama.cpp's converter writes them: per layer the
# router ffn_gate_inp [E, hidden] (F32, as the converter keeps it), the experts stacked into 3-D
# ffn_{gate,up}_exps [E, I, hidden] and ffn_down_exps [E, hidden, I], Qwen2-MoE's shared
# expert ffn_{gate,up,down}_shexp with its gate ffn_gate_inp_shexp (an F32 vector [hidden]);
# hyper-parameters under <arch>.expert_count, expert_used_count, expert_feed_forward_length and
# expert_shared_feed_forward_length. transformers 5 reads qwen2moe / qwen3moe GGUF files but maps
# neither expert size from the metadata (its GGUF config table lacks them), so they are passed to
# from_pretrained ("hf_overrides"); it has no GGUF Mixtral (a `llama` file with experts), so that
# reference is transformers' MixtralForCausalLM on the weights as the file decodes them
# ("reference": "decoded"), which F16 holds exactly.
_GGUF_MOE = dict(
    vocab_size=256, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
    num_key_value_heads=2, rms_norm_eps=1e-6, rope_theta=1000000.0, max_position_embeddings=128,
    num_experts_per_tok=2, tie_word_embeddings=False, bos_token_id=1, eos_token_id=2)
GGUF_VARIANTS += [
    dict(
        name="gguf_qwen2_moe_f16", gguf_arch="qwen2moe", architecture="Qwen2MoeForCausalLM",
        config_cls=Qwen2MoeConfig,
        config=dict(_GGUF_MOE, intermediate_size=128, num_experts=6, moe_intermediate_size=64,
                    shared_expert_intermediate_size=96, norm_topk_prob=False,
                    decoder_sparse_step=1, mlp_only_layers=[], use_sliding_window=False),
        hf_overrides=dict(moe_intermediate_size=64, shared_expert_intermediate_size=96),
        types=dict(default="F16"), file_type="MOSTLY_F16", init=_UNTIED, seed=2011,
        exercises="GGUF `qwen2moe`, F16: 6 stacked experts (ffn_*_exps) top-2 not renormalized "
        "(llama.cpp's qwen2moe never is), shared expert ffn_*_shexp (96) with its gate "
        "ffn_gate_inp_shexp an F32 vector [64] (read as [1, 64]), F32 router, q/k/v biases.",
    ),
    dict(
        name="gguf_qwen3_moe_q8_0", gguf_arch="qwen3moe", architecture="Qwen3MoeForCausalLM",
        config_cls=Qwen3MoeConfig,
        config=dict(_GGUF_MOE, intermediate_size=128, num_experts=8, moe_intermediate_size=64,
                    norm_topk_prob=True, decoder_sparse_step=1, use_sliding_window=False,
                    attention_bias=False),
        hf_overrides=dict(moe_intermediate_size=64),
        types=dict(default="Q8_0"), file_type="MOSTLY_Q8_0", init=_UNTIED, seed=2012,
        exercises="GGUF `qwen3moe`, Q8_0 matrices and experts (an expert is 64 rows of 2 blocks "
        "of the stacked tensors), 8 experts top-2 renormalized (llama.cpp's qwen3moe always is), "
        "F32 router, q/k RMSNorm.",
    ),
    dict(
        name="gguf_mixtral_f16", gguf_arch="llama", architecture="MixtralForCausalLM",
        config_cls=MixtralConfig,
        config=dict(_GGUF_MOE, intermediate_size=64, num_local_experts=4, sliding_window=None,
                    rms_norm_eps=1e-5),
        reference="decoded",
        types=dict(default="F16"), file_type="MOSTLY_F16", init=_UNTIED, seed=2013,
        exercises="GGUF Mixtral (`llama` with llama.expert_count 4), F16: stacked experts, q/k "
        "rows permuted, top-2 renormalized; reference: transformers' MixtralForCausalLM on the "
        "decoded weights (transformers has no GGUF Mixtral).",
    ),
]
for _v in GGUF_VARIANTS:
    _v.setdefault("prompt_lens", GGUF_PROMPT_LENS)

_GGUF_GLOBAL_NAMES = {"model.embed_tokens": "token_embd", "model.norm": "output_norm",
                      "lm_head": "output"}
_GGUF_LAYER_NAMES = {
    "input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm",
    "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output", "self_attn.q_norm": "attn_q_norm",
    "self_attn.k_norm": "attn_k_norm", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down", "mlp.gate": "ffn_gate_inp",
    "mlp.shared_expert.gate_proj": "ffn_gate_shexp", "mlp.shared_expert.up_proj": "ffn_up_shexp",
    "mlp.shared_expert.down_proj": "ffn_down_shexp", "mlp.shared_expert_gate": "ffn_gate_inp_shexp",
}
# Kept in F32 by llama.cpp's converter whatever the file type.
_GGUF_F32_MATRICES = ("ffn_gate_inp.weight", "ffn_gate_inp_shexp.weight")


def gguf_tensor_name(hf_name: str) -> str:
    stem, param = hf_name.rsplit(".", 1)
    if stem in _GGUF_GLOBAL_NAMES:
        return f"{_GGUF_GLOBAL_NAMES[stem]}.{param}"
    parts = stem.split(".")
    assert parts[:2] == ["model", "layers"], hf_name
    return f"blk.{parts[2]}.{_GGUF_LAYER_NAMES['.'.join(parts[3:])]}.{param}"


def llama_permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp convert_hf_to_gguf.py's q/k row order (for its interleaved RoPE)."""
    return (w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:])
            .swapaxes(1, 2).reshape(w.shape))


def llama_unpermute(w: np.ndarray, n_head: int) -> np.ndarray:
    return (w.reshape(n_head, w.shape[0] // n_head // 2, 2, *w.shape[1:])
            .swapaxes(1, 2).reshape(w.shape))


def gguf_encode(x: np.ndarray, type_name: str):
    """(data for GGUFWriter.add_tensor, raw_dtype or None, the values the data decodes to)."""
    if type_name == "F32":
        data = np.ascontiguousarray(x, dtype=np.float32)
        return data, None, data
    if type_name == "F16":
        data = x.astype(np.float16)
        return data, None, data.astype(np.float32)
    qtype = gguf.GGMLQuantizationType[type_name]
    if type_name in kquants.ENCODERS:
        data = kquants.ENCODERS[type_name](x)
    else:
        data = gguf.quants.quantize(x, qtype)  # BF16, Q8_0, Q4_0, Q4_1
    decoded = gguf.quants.dequantize(data, qtype).astype(np.float32).reshape(x.shape)
    return data, qtype, decoded


def write_gguf(v: dict, config, state: dict, path: Path):
    """Writes the float32 Hugging Face `state` as a GGUF file. Returns ({gguf name: type},
    {hf name: float32 tensor holding what the file decodes to, in Hugging Face row order})."""
    arch = v["gguf_arch"]
    c = config
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    w = gguf.GGUFWriter(str(path), arch)
    w.add_name(f"loom golden {v['name']}")
    w.add_file_type(int(gguf.LlamaFileType[v["file_type"]]))
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)
    w.add_context_length(c.max_position_embeddings)
    w.add_embedding_length(c.hidden_size)
    w.add_feed_forward_length(c.intermediate_size)
    w.add_block_count(c.num_hidden_layers)
    w.add_head_count(c.num_attention_heads)
    w.add_head_count_kv(c.num_key_value_heads)
    w.add_layer_norm_rms_eps(c.rms_norm_eps)
    w.add_rope_freq_base(c.rope_parameters["rope_theta"])
    w.add_vocab_size(c.vocab_size)
    if arch == "llama":
        w.add_rope_dimension_count(head_dim)
    if head_dim != c.hidden_size // c.num_attention_heads:
        w.add_key_length(head_dim)
        w.add_value_length(head_dim)
    w.add_bos_token_id(c.bos_token_id)
    w.add_eos_token_id(c.eos_token_id)
    num_experts = getattr(c, "num_local_experts", None) or getattr(c, "num_experts", 0)
    if num_experts:
        w.add_expert_count(num_experts)
        w.add_expert_used_count(c.num_experts_per_tok)
        if arch != "llama":
            w.add_expert_feed_forward_length(c.moe_intermediate_size)
        if getattr(c, "shared_expert_intermediate_size", 0):
            w.add_expert_shared_feed_forward_length(c.shared_expert_intermediate_size)

    types, decoded = {}, {}
    tied = bool(c.tie_word_embeddings)
    for hf_name in state:
        if tied and hf_name == "lm_head.weight":
            continue
        if hf_name.endswith((".mlp.experts.gate_up_proj", ".mlp.experts.down_proj")):
            # transformers' fused [E, 2I, H] gate_up / [E, H, I] down -> llama.cpp's stacked
            # ffn_gate_exps / ffn_up_exps [E, I, H] and ffn_down_exps [E, H, I].
            x = state[hf_name].detach().to(torch.float32).numpy()
            blk = f"blk.{hf_name.split('.')[2]}."
            if hf_name.endswith("down_proj"):
                parts = [(blk + "ffn_down_exps.weight", x)]
            else:
                inter = x.shape[1] // 2
                parts = [(blk + "ffn_gate_exps.weight", x[:, :inter]),
                         (blk + "ffn_up_exps.weight", x[:, inter:])]
            decs = []
            for name, part in parts:
                type_name = v["types"].get(name, v["types"]["default"])
                data, raw_dtype, dec = gguf_encode(np.ascontiguousarray(part), type_name)
                w.add_tensor(name, data, raw_dtype=raw_dtype)
                types[name] = type_name
                decs.append(dec)
            decoded[hf_name] = torch.from_numpy(np.ascontiguousarray(np.concatenate(decs, 1)))
            continue
        name = gguf_tensor_name(hf_name)
        x = state[hf_name].detach().to(torch.float32).numpy()
        permute = None
        if arch == "llama" and name.endswith(("attn_q.weight", "attn_q.bias")):
            permute = c.num_attention_heads
        elif arch == "llama" and name.endswith(("attn_k.weight", "attn_k.bias")):
            permute = c.num_key_value_heads
        if permute is not None:
            x = llama_permute(x, permute)
        hf_shape = x.shape
        if name.endswith("ffn_gate_inp_shexp.weight"):
            x = x.reshape(-1)  # a vector [hidden], as llama.cpp (and transformers) read it
        type_name = ("F32" if x.ndim == 1 or name.endswith(_GGUF_F32_MATRICES)
                     else v["types"].get(name, v["types"]["default"]))
        data, raw_dtype, dec = gguf_encode(x, type_name)
        if permute is not None:
            dec = llama_unpermute(dec, permute)
        dec = dec.reshape(hf_shape)
        w.add_tensor(name, data, raw_dtype=raw_dtype)
        types[name] = type_name
        decoded[hf_name] = torch.from_numpy(np.ascontiguousarray(dec))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return types, decoded


def build_gguf_variant(v: dict, out_root: Path) -> dict:
    name = v["name"]
    folder = out_root / name
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    config = v["config_cls"](**v["config"])
    config.architectures = [v["architecture"]]
    torch.manual_seed(v["seed"])
    source = getattr(transformers, v["architecture"])(config).to(torch.float32).eval()
    randomize(source, v["seed"], v["init"])
    state = dict(sorted(source.state_dict().items()))
    del source
    gguf_path = folder / "model.gguf"
    types, decoded = write_gguf(v, config, state, gguf_path)

    def load(attn: str):
        if v.get("reference") == "decoded":
            # transformers cannot read this GGUF architecture: the weights as the file decodes
            # them, into the transformers class (the file's hyper-parameters are checked by
            # loom's loader against the same config through the golden test).
            cfg = v["config_cls"](**v["config"])
            cfg.architectures = [v["architecture"]]
            cfg.rms_norm_eps = float(np.float32(cfg.rms_norm_eps))
            cfg._attn_implementation = attn
            m = getattr(transformers, v["architecture"])(cfg).to(torch.float32)
            missing, unexpected = m.load_state_dict(decoded, strict=False)
            assert not unexpected and set(missing) <= {"lm_head.weight"}, (missing, unexpected)
            return m.eval()
        m = AutoModelForCausalLM.from_pretrained(folder, gguf_file=gguf_path.name,
                                                 dtype=torch.float32, attn_implementation=attn,
                                                 **v.get("hf_overrides", {}))
        return m.eval()

    model = load("eager")
    assert type(model).__name__ == v["architecture"], type(model).__name__
    mc = model.config
    # transformers must read the file's hyper-parameters as the ones it was written from.
    for key in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                "num_attention_heads", "num_key_value_heads", "tie_word_embeddings",
                "max_position_embeddings"):
        assert getattr(mc, key) == getattr(config, key), (key, getattr(mc, key),
                                                          getattr(config, key))
    # GGUF stores rms_norm_eps as float32 (1e-5 becomes 9.99999975e-06).
    assert mc.rms_norm_eps == float(np.float32(config.rms_norm_eps)), mc.rms_norm_eps
    assert mc.rope_parameters["rope_theta"] == config.rope_parameters["rope_theta"]
    head_dim = getattr(mc, "head_dim", None) or mc.hidden_size // mc.num_attention_heads
    assert head_dim == (getattr(config, "head_dim", None)
                        or config.hidden_size // config.num_attention_heads)
    # ... and the tensors as what the blocks decode to, back in Hugging Face row order (this
    # checks transformers' un-permutation against ours).
    sd = model.state_dict()
    for k, t in decoded.items():
        assert torch.equal(sd[k], t), k
    if mc.tie_word_embeddings:
        assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()

    model_sdpa = load("sdpa")
    # The float64 forward reads the source config and our own decoding of the file.
    cfg64 = config.to_dict()
    cfg64["rms_norm_eps"] = mc.rms_norm_eps
    ref64 = Float64Reference(cfg64, decoded)
    tensors, prompts, max_sdpa, max_f64, all_logits, routing = record_prompts(
        v, model, model_sdpa, ref64)
    save_file(tensors, str(folder / "reference.safetensors"), metadata={"format": "pt"})

    logits_std = float(torch.cat(all_logits).std())
    max_logit = float(torch.cat(all_logits).abs().max())
    worst = max(max_f64, max_sdpa)
    tol = max(1e-3, float(f"{20 * worst:.1g}"))
    type_counts = {}
    for t in types.values():
        type_counts[t] = type_counts.get(t, 0) + 1
    ref = dict(
        name=name,
        architecture=v["architecture"],
        storage_dtype="gguf",
        reference_dtype="float32",
        attn_implementation="eager",
        transformers_version=transformers.__version__,
        torch_version=torch.__version__.split("+")[0],
        gguf_version=importlib.metadata.version("gguf"),
        exercises=v["exercises"],
        config_style="gguf",
        model_file=gguf_path.name,
        checkpoint_files=[gguf_path.name],
        gguf=dict(
            architecture=v["gguf_arch"],
            file_type=v["file_type"],
            qk_rows_permuted=v["gguf_arch"] == "llama",
            type_counts=dict(sorted(type_counts.items())),
            tensor_types=types,
        ),
        model=dict(
            vocab_size=mc.vocab_size,
            hidden_size=mc.hidden_size,
            num_hidden_layers=mc.num_hidden_layers,
            num_attention_heads=mc.num_attention_heads,
            num_key_value_heads=mc.num_key_value_heads,
            head_dim=head_dim,
            attention_scale=head_dim ** -0.5,
            rms_norm_eps=mc.rms_norm_eps,
            tie_word_embeddings=bool(mc.tie_word_embeddings),
            sliding_window=None,
            qk_norm=any(k.endswith("q_norm.weight") for k in decoded),
            biases=sorted({k.split(".")[-2] for k in decoded if k.endswith(".bias")}),
            rope=dict(rope_params(mc.to_dict()), layout="rotate_half (pairs i and i + head_dim/2)"),
        ),
        prompts=prompts,
        greedy_steps=GREEDY_STEPS,
        tolerance=dict(
            logits_abs=tol,
            note=(
                f"Absolute, on float32 logits (std {logits_std:.2f}) of the weights as the file "
                f"decodes them (exactly representable in float32, so the engine and the reference "
                f"compute with the same weights). Observed over all prompt and greedy positions: "
                f"independent float64 forward vs HF float32 eager max |diff| {max_f64:.2e}; HF "
                f"sdpa vs eager {max_sdpa:.2e}; the bound is 20x the larger, at least 1e-3. "
                f"Every greedy step has a top-1/top-2 gap >= {MIN_GREEDY_MARGIN}."
            ),
        ),
        checks=dict(fp64_vs_fp32_max_abs=max_f64, sdpa_vs_eager_max_abs=max_sdpa),
        logits_std=logits_std,
        logits_max_abs=max_logit,
    )
    if routing:
        ref["model"]["moe"] = moe_facts(mc, decoded, routing)
        ref["model"]["moe"]["expert_layout"] = "stacked (GGUF blk.N.ffn_{gate,up,down}_exps)"
        ref["gguf"]["reference"] = ("transformers' MixtralForCausalLM on the decoded weights"
                                    if v.get("reference") == "decoded"
                                    else "transformers reading the GGUF file")
    (folder / "reference.json").write_text(json.dumps(ref, indent=2) + "\n")
    if max_f64 > tol / 5:
        print(f"WARNING {name}: float64 vs float32 differ by {max_f64:.2e}", file=sys.stderr)
    return ref


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=HERE / "models")
    ap.add_argument("--only", default="", help="comma-separated variant names")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.use_deterministic_algorithms(True)
    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    groups = {"safetensors": [v["name"] for v in VARIANTS],
              "gguf": [v["name"] for v in GGUF_VARIANTS]}
    names = set()
    for n in (n for n in args.only.split(",") if n):
        names.update(groups.get(n, [n]))
    known = set(groups["safetensors"] + groups["gguf"])
    for n in sorted(names):
        if n not in known:
            ap.error(f"unknown variant {n}; known: {', '.join(sorted(known))} "
                     f"(or a group: safetensors, gguf)")
    args.out.mkdir(parents=True, exist_ok=True)
    work = [(v, build_variant) for v in VARIANTS] + [(v, build_gguf_variant) for v in GGUF_VARIANTS]
    for v, build in work:
        if names and v["name"] not in names:
            continue
        ref = build(v, args.out)
        size = sum(p.stat().st_size for p in (args.out / v["name"]).iterdir())
        print(f"{v['name']:20s} logits_std {ref['logits_std']:.2f}  "
              f"fp64 {ref['checks']['fp64_vs_fp32_max_abs']:.2e}  "
              f"sdpa {ref['checks']['sdpa_vs_eager_max_abs']:.2e}  "
              f"min margin {min(p['min_greedy_margin'] for p in ref['prompts']):.3f}  "
              f"tol {ref['tolerance']['logits_abs']:g}  {size / 1024:.0f} KiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
