#!/usr/bin/env python3
"""Writes a Llama-shaped Hugging Face checkpoint (e.g. `loom_engine_bench make-model`'s random
1.1B) as an F16 GGUF file that llama.cpp and loom both load, for side-by-side benchmarks.

It does what llama.cpp's convert_hf_to_gguf.py does for the `llama` architecture (tensor names,
the q/k row permutation for interleaved RoPE, hyper-parameters) without needing a tokenizer in the
folder: the vocabulary is synthetic (SentencePiece-style: <unk>, <s>, </s>, the 256 byte tokens,
then plain pieces), which changes nothing a benchmark measures. Quantize the result with
llama.cpp's `llama-quantize` (Q8_0, Q4_0, Q4_K_M, ...).

    python bench/engine/make_gguf.py MODEL_DIR OUT.gguf
"""
import json
import sys
from pathlib import Path

import numpy as np
import gguf

DTYPES = {"BF16": np.uint16, "F16": np.float16, "F32": np.float32}


def load_safetensors(path):
    """name -> (numpy array, safetensors dtype name), memory-mapped (numpy has no bfloat16)."""
    raw = np.memmap(path, dtype=np.uint8, mode="r")
    header_len = int(np.frombuffer(raw[:8].tobytes(), dtype="<u8")[0])
    header = json.loads(raw[8:8 + header_len].tobytes())
    base = 8 + header_len
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        array = raw[base + begin:base + end].view(DTYPES[info["dtype"]]).reshape(info["shape"])
        out[name] = (array, info["dtype"])
    return out


def permute(w, heads):
    rows = w.shape[0]
    return w.reshape(heads, 2, rows // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def bf16_to_f32(raw):
    return (raw.astype(np.uint32) << 16).view(np.float32)


def add_synthetic_vocab(w, vocab):
    """A SentencePiece-style vocabulary of `vocab` pieces: <unk>, <s>, </s>, the 256 byte tokens,
    then plain pieces."""
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    tokens += [f"\u2581t{i}" for i in range(vocab - len(tokens))]
    types = [gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL]
    types += [gguf.TokenType.BYTE] * 256 + [gguf.TokenType.NORMAL] * (vocab - 259)
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores([0.0] * 259 + [-float(i) for i in range(vocab - 259)])
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)


def main():
    src, out = Path(sys.argv[1]), sys.argv[2]
    cfg = json.loads((src / "config.json").read_text())
    heads, kv_heads = cfg["num_attention_heads"], cfg.get("num_key_value_heads", cfg["num_attention_heads"])
    vocab = cfg["vocab_size"]
    w = gguf.GGUFWriter(out, "llama")
    w.add_name(src.name)
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_context_length(cfg.get("max_position_embeddings", 2048))
    w.add_embedding_length(cfg["hidden_size"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(heads)
    w.add_head_count_kv(kv_heads)
    w.add_rope_dimension_count(cfg["hidden_size"] // heads)
    w.add_rope_freq_base(float(cfg.get("rope_theta", 10000.0)))
    w.add_layer_norm_rms_eps(float(cfg.get("rms_norm_eps", 1e-5)))
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    add_synthetic_vocab(w, vocab)

    names = {"input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm",
             "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
             "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
             "mlp.down_proj": "ffn_down"}
    tensors = {}
    for path in sorted(src.glob("*.safetensors")):
        tensors.update(load_safetensors(str(path)))
    for name, (value, dtype) in tensors.items():
        x = bf16_to_f32(np.asarray(value)) if dtype == "BF16" else np.asarray(value, dtype=np.float32)
        if name == "model.embed_tokens.weight":
            gname = "token_embd.weight"
        elif name == "model.norm.weight":
            gname = "output_norm.weight"
        elif name == "lm_head.weight":
            gname = "output.weight"
        else:
            parts = name.split(".")  # model.layers.N.<module...>.weight
            module = ".".join(parts[3:-1])
            gname = f"blk.{parts[2]}.{names[module]}.{parts[-1]}"
            if module == "self_attn.q_proj":
                x = permute(x, heads)
            elif module == "self_attn.k_proj":
                x = permute(x, kv_heads)
        # Norms stay f32 (as llama.cpp writes them); matrices f16.
        w.add_tensor(gname, x if x.ndim == 1 else x.astype(np.float16))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    main()
