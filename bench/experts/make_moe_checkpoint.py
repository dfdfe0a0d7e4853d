#!/usr/bin/env python3
"""Writes a Mixtral-shaped random-weight checkpoint whose router is skewed and topical, for the
expert-cache benchmarks: a Hugging Face folder (safetensors, bf16) or a Q4_0 GGUF file that loom
and llama.cpp both load.

Plain random weights route every token almost uniformly, so no cache policy could show anything.
Real MoE models do not: some experts are more popular than others, and a request keeps using a
subset of experts because its text has a topic (MoE-Infinity's request-level locality). This
script builds both properties into the weights; the matrices are otherwise N(0, 0.02) noise
(Q4_0 files: uniform 4-bit codes of the same spread), so every byte a forward pass moves is as
in the real model.

How the structure is made, with H the hidden size and T topics:
  - Topic directions u_0..u_{T-1}: random unit vectors of R^H. Token id v has topic v % T.
  - Embedding of v: sqrt(H) * (a * u_{v % T} + b * g_v), g_v a random unit vector (a = b =
    1/sqrt(2)): every token carries its topic and a part of its own.
  - Output projections (o_proj, the experts' down projection) have spread 0.002, so the
    residual stream stays dominated by the current token's embedding through all layers.
  - Router of layer l, expert e: sum_t logw[l][t][e] * u_t / (a * sqrt(H)) plus N(0, 1/H) noise,
    so a token of topic t gets router logits logw[l][t] + a unit of token-specific noise.
    logw is the same model as bench/experts/synthetic_traces.h: per-layer Zipf popularity over
    a random expert order, and each topic boosts a core of `core_size` experts `core_boost` times.
  - LM head row of v: 0.5 * u_{v % T} + noise, so sampled text stays on its prompt's topic.

A prompt of tokens of one topic is one "request topic"; bench/experts/expert_cache_bench.py
draws topics with skewed popularity. The routing description (topics, logw) goes to
routing.json in the folder, or OUT.routing.json beside a GGUF file.

    make_moe_checkpoint.py --shape mixtral-mini --format safetensors --out DIR
    make_moe_checkpoint.py --shape mixtral-8x7b --format gguf-q4_0 --out FILE.gguf
"""
import argparse
import json
import os
import struct
import sys
from pathlib import Path

import numpy as np

SHAPES = {
    # hidden, layers, heads, kv_heads, ffn, experts, top_k, vocab, rope_theta
    "mixtral-tiny": (256, 2, 4, 2, 1024, 4, 2, 1024, 1e6),  # for the benchmark's own test
    "mixtral-mini": (1024, 16, 16, 4, 3584, 8, 2, 32000, 1e6),
    "mixtral-8x7b": (4096, 32, 32, 8, 14336, 8, 2, 32000, 1e6),
}
ALPHA = BETA = 0.5 ** 0.5
OUT_SPREAD = 0.002
LM_TOPIC = 0.5


def topic_log_weights(layers, experts, topics, zipf, core_size, core_boost, rng):
    """logw[l][t][e], as bench/experts/synthetic_traces.h describes its weights."""
    logw = np.zeros((layers, topics, experts))
    for l in range(layers):
        rank = rng.permutation(experts)
        logw[l, :, :] = -zipf * np.log(rank + 1.0)
        for t in range(topics):
            core = rng.permutation(experts)[:min(core_size, experts)]
            logw[l, t, core] += np.log(core_boost)
    return logw


class Weights:
    """Produces every tensor of the checkpoint as float32, on demand, deterministic per name."""

    def __init__(self, shape, args):
        (self.hidden, self.layers, self.heads, self.kv_heads, self.ffn, self.experts, self.top_k,
         self.vocab, self.rope_theta) = shape
        self.topics = args.topics
        self.seed = args.seed
        rng = np.random.default_rng(args.seed)
        u = rng.standard_normal((self.topics, self.hidden))
        self.u = (u / np.linalg.norm(u, axis=1, keepdims=True)).astype(np.float32)
        self.logw = topic_log_weights(self.layers, self.experts, self.topics, args.zipf,
                                      args.core_size, args.core_boost, rng)

    def rng(self, name):
        return np.random.default_rng([self.seed, *name.encode()])

    def noise(self, name, shape, spread):
        return self.rng(name).standard_normal(shape, dtype=np.float32) * np.float32(spread)

    def embedding(self):
        topic = np.arange(self.vocab) % self.topics
        g = self.rng("embed").standard_normal((self.vocab, self.hidden), dtype=np.float32)
        g /= np.linalg.norm(g, axis=1, keepdims=True)
        return np.float32(self.hidden ** 0.5) * (ALPHA * self.u[topic] + BETA * g)

    def lm_head(self):
        topic = np.arange(self.vocab) % self.topics
        return LM_TOPIC * self.u[topic] + self.noise("lm_head", (self.vocab, self.hidden), 0.02)

    def router(self, layer):
        structured = self.logw[layer].T.astype(np.float32) @ self.u / (ALPHA * self.hidden ** 0.5)
        return structured + self.noise(f"router{layer}", (self.experts, self.hidden),
                                       1.0 / self.hidden ** 0.5)

    def routing_description(self):
        return {"num_topics": self.topics, "topic_of_token": "token id % num_topics",
                "first_plain_token": 259, "num_layers": self.layers,
                "num_experts": self.experts, "top_k": self.top_k, "vocab_size": self.vocab,
                "log_weights": np.round(self.logw, 4).tolist()}


def bf16_bytes(x):
    """float32 -> bfloat16 bytes, rounded to nearest even."""
    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    return rounded.astype(np.uint16)


def write_safetensors(weights, out):
    w = weights
    out.mkdir(parents=True, exist_ok=True)
    head_dim = w.hidden // w.heads
    config = {
        "architectures": ["MixtralForCausalLM"], "model_type": "mixtral",
        "hidden_size": w.hidden, "intermediate_size": w.ffn, "num_hidden_layers": w.layers,
        "num_attention_heads": w.heads, "num_key_value_heads": w.kv_heads, "head_dim": head_dim,
        "vocab_size": w.vocab, "max_position_embeddings": 4096, "rms_norm_eps": 1e-5,
        "rope_theta": w.rope_theta, "hidden_act": "silu", "tie_word_embeddings": False,
        "num_local_experts": w.experts, "num_experts_per_tok": w.top_k,
        "router_aux_loss_coef": 0.0, "output_router_logits": False,
        "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "bfloat16"}
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    (out / "generation_config.json").write_text('{"bos_token_id": 1, "eos_token_id": 2}\n')
    (out / "routing.json").write_text(json.dumps(w.routing_description()) + "\n")

    # (name, shape, producer) in file order.
    tensors = [("model.embed_tokens.weight", (w.vocab, w.hidden), w.embedding)]
    for l in range(w.layers):
        p = f"model.layers.{l}."
        kv = w.kv_heads * head_dim
        tensors += [
            (p + "input_layernorm.weight", (w.hidden,), lambda: np.ones(w.hidden, np.float32)),
            (p + "post_attention_layernorm.weight", (w.hidden,),
             lambda: np.ones(w.hidden, np.float32)),
            (p + "self_attn.q_proj.weight", (w.hidden, w.hidden), None),
            (p + "self_attn.k_proj.weight", (kv, w.hidden), None),
            (p + "self_attn.v_proj.weight", (kv, w.hidden), None),
            (p + "self_attn.o_proj.weight", (w.hidden, w.hidden), OUT_SPREAD),
            (p + "block_sparse_moe.gate.weight", (w.experts, w.hidden),
             (lambda layer: lambda: w.router(layer))(l)),
        ]
        for e in range(w.experts):
            q = f"{p}block_sparse_moe.experts.{e}."
            tensors += [(q + "w1.weight", (w.ffn, w.hidden), None),
                        (q + "w2.weight", (w.hidden, w.ffn), OUT_SPREAD),
                        (q + "w3.weight", (w.ffn, w.hidden), None)]
    tensors += [("model.norm.weight", (w.hidden,), lambda: np.ones(w.hidden, np.float32)),
                ("lm_head.weight", (w.vocab, w.hidden), w.lm_head)]

    header, offset = {"__metadata__": {"format": "pt", "generator": "loom moe checkpoint"}}, 0
    for name, shape, _ in tensors:
        nbytes = int(np.prod(shape)) * 2
        header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(out / "model.safetensors", "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        for name, shape, make in tensors:
            if callable(make):
                x = make()
            else:
                x = w.noise(name, shape, 0.02 if make is None else make)
            bf16_bytes(x.reshape(shape)).tofile(f)


def random_q4_0(rng, rows, cols, spread):
    """Q4_0 blocks of uniform codes in [-7, 7] (mean 0) whose values have the given spread."""
    blocks = rows * cols // 32
    raw = np.frombuffer(rng.bytes(blocks * 18), dtype=np.uint8).reshape(blocks, 18).copy()
    d = np.float16(spread / 4.3)  # the codes' spread is about 4.3
    raw[:, 0:2] = np.frombuffer(d.tobytes(), dtype=np.uint8)
    q = raw[:, 2:]
    q[(q & 0x0F) == 0] |= 0x08  # code 0 (value -8) becomes 8 (value 0): symmetric codes
    q[(q & 0xF0) == 0] |= 0x80
    return raw


def write_gguf(weights, out):
    import gguf
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "engine"))
    from make_gguf import add_synthetic_vocab

    w = weights
    head_dim = w.hidden // w.heads
    kv = w.kv_heads * head_dim
    Path(str(out) + ".routing.json").write_text(json.dumps(w.routing_description()) + "\n")
    writer = gguf.GGUFWriter(str(out), "llama")
    writer.add_name("mixtral-shaped random")
    writer.add_block_count(w.layers)
    writer.add_context_length(4096)
    writer.add_embedding_length(w.hidden)
    writer.add_feed_forward_length(w.ffn)
    writer.add_head_count(w.heads)
    writer.add_head_count_kv(w.kv_heads)
    writer.add_rope_dimension_count(head_dim)
    writer.add_rope_freq_base(w.rope_theta)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_expert_count(w.experts)
    writer.add_expert_used_count(w.top_k)
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_Q4_0)
    add_synthetic_vocab(writer, w.vocab)

    q4 = gguf.GGMLQuantizationType.Q4_0
    f16 = gguf.GGMLQuantizationType.F16
    f32 = gguf.GGMLQuantizationType.F32
    # (name, numpy shape, ggml type, producer of the bytes)
    tensors = [("token_embd.weight", (w.vocab, w.hidden), f16,
                lambda: w.embedding().astype(np.float16))]
    for l in range(w.layers):
        p = f"blk.{l}."
        tensors += [(p + "attn_norm.weight", (w.hidden,), f32, lambda: np.ones(w.hidden, np.float32)),
                    (p + "ffn_norm.weight", (w.hidden,), f32, lambda: np.ones(w.hidden, np.float32)),
                    (p + "attn_q.weight", (w.hidden, w.hidden), q4, 0.02),
                    (p + "attn_k.weight", (kv, w.hidden), q4, 0.02),
                    (p + "attn_v.weight", (kv, w.hidden), q4, 0.02),
                    (p + "attn_output.weight", (w.hidden, w.hidden), q4, OUT_SPREAD),
                    (p + "ffn_gate_inp.weight", (w.experts, w.hidden), f32,
                     (lambda layer: lambda: w.router(layer))(l)),
                    (p + "ffn_gate_exps.weight", (w.experts, w.ffn, w.hidden), q4, 0.02),
                    (p + "ffn_down_exps.weight", (w.experts, w.hidden, w.ffn), q4, OUT_SPREAD),
                    (p + "ffn_up_exps.weight", (w.experts, w.ffn, w.hidden), q4, 0.02)]
    tensors += [("output_norm.weight", (w.hidden,), f32, lambda: np.ones(w.hidden, np.float32)),
                ("output.weight", (w.vocab, w.hidden), f16, lambda: w.lm_head().astype(np.float16))]

    def nbytes(shape, kind):
        n = int(np.prod(shape))
        return n * 18 // 32 if kind == q4 else n * (2 if kind == f16 else 4)

    for name, shape, kind, _ in tensors:
        writer.add_tensor_info(name, shape, np.float16, nbytes(shape, kind), raw_dtype=kind)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for name, shape, kind, make in tensors:
        if kind == q4:
            data = random_q4_0(w.rng(name), int(np.prod(shape[:-1])), shape[-1], make)
        else:
            data = make()
        writer.write_tensor_data(data)
    writer.close()


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shape", choices=sorted(SHAPES), required=True)
    p.add_argument("--format", choices=["safetensors", "gguf-q4_0"], required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--topics", type=int, default=8)
    p.add_argument("--zipf", type=float, default=1.0)
    p.add_argument("--core-size", type=int, default=3)
    p.add_argument("--core-boost", type=float, default=8.0)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--layers", type=int, default=0,
                   help="override the shape's layer count (0: the shape's own), e.g. a few "
                   "layers of the 8x7B shape that fit in RAM, to compare compute alone")
    args = p.parse_args()
    shape = SHAPES[args.shape]
    if args.layers > 0:
        shape = (shape[0], args.layers) + shape[2:]
    weights = Weights(shape, args)
    if args.format == "safetensors":
        write_safetensors(weights, Path(args.out))
    else:
        write_gguf(weights, Path(args.out))
    print(os.path.abspath(args.out))


if __name__ == "__main__":
    main()
