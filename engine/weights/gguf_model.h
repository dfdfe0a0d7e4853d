// A GGUF file seen as a Hugging Face model: its hyper-parameters as the config.json transformers
// would write for it, and its tensors under Hugging Face names, so the architectures, the
// validation and the binding of engine/models work on GGUF files unchanged.
//
// Architectures (`general.architecture`): `llama` (Llama, Mistral, SmolLM, TinyLlama ...) ->
// LlamaForCausalLM, or MixtralForCausalLM when `llama.expert_count` > 0; `qwen2` ->
// Qwen2ForCausalLM, `qwen3` -> Qwen3ForCausalLM, `qwen2moe` -> Qwen2MoeForCausalLM, `qwen3moe` ->
// Qwen3MoeForCausalLM. Anything else is refused (Unimplemented, naming the architecture).
//
// Mixture of experts: `<arch>.expert_count`, `expert_used_count`, `expert_feed_forward_length`
// (default feed_forward_length / expert_used_count, as llama.cpp; Mixtral: feed_forward_length),
// `expert_shared_feed_forward_length` (qwen2moe; default feed_forward_length) and
// `expert_weights_norm` (default: what llama.cpp hard-codes: false for qwen2moe, true for qwen3moe
// and Mixtral) become the config.json keys of the Hugging Face class; a layer without
// blk.N.ffn_gate_inp is dense (mlp_only_layers). Refused (Unimplemented, naming the key): routing
// other than softmax (`expert_gating_func`), `expert_weights_scale` != 1, grouped routing
// (`expert_group_count` > 1), a dense layer in a Mixtral file, experts in other architectures.
//
// Tensor names (llama.cpp's convention; N is the layer):
//   token_embd -> model.embed_tokens          output_norm -> model.norm    output -> lm_head
//   blk.N.attn_norm -> input_layernorm        blk.N.ffn_norm -> post_attention_layernorm
//   blk.N.attn_{q,k,v} -> self_attn.{q,k,v}_proj    blk.N.attn_output -> self_attn.o_proj
//   blk.N.attn_{q,k}_norm -> self_attn.{q,k}_norm   blk.N.ffn_{gate,up,down} -> mlp.*_proj
//   blk.N.ffn_gate_inp -> mlp.gate (the router)     blk.N.ffn_{gate,up,down}_shexp ->
//   mlp.shared_expert.*_proj                         blk.N.ffn_gate_inp_shexp -> mlp.shared_expert_gate
//     (a vector [hidden] is seen as [1, hidden])
// (".weight" / ".bias" kept), and the stacked experts blk.N.ffn_{gate,up,down}_exps.weight ->
// model.layers.N.mlp.experts.{gate,up,down}_proj (no suffix; [num_experts, rows, cols], each
// expert whole rows of it: engine/models/moe_weights.h's kStacked layout). Other tensors keep their GGUF names (the binder warns about them);
// `rope_freqs.weight` (Llama 3.1 scaling as per-frequency divisors) is read by GgufRopeFactors.
//
// RoPE: llama.cpp's converter permutes the rows of `llama` q/k projections (and biases) so that
// its interleaved RoPE computes what Hugging Face's half-split RoPE computes on the original rows.
// loom uses the half-split form, so those rows are put back in Hugging Face order: within each
// head of d rows, GGUF row 2i + j holds Hugging Face row j * d/2 + i. The un-permuted tensors are
// copies owned by the view; all others point into the mapping. qwen2/qwen3 files are not permuted.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/weights/gguf.h"
#include "engine/weights/safetensors.h"

namespace loom {

// The config.json (as JSON text) that describes `file`'s model: architectures, sizes, heads,
// head_dim, rms_norm_eps, rope_theta and rope_scaling, max_position_embeddings, vocab_size,
// tie_word_embeddings (no `output.weight`), bos/eos ids (eos, eot and eom), torch_dtype.
// InvalidArgument for missing or out-of-range keys, Unimplemented for an unknown architecture.
absl::StatusOr<std::string> GgufConfigJson(const GgufFile& file);

// The tensors of `file` under Hugging Face names, with q/k un-permuted where needed. Owns the
// copies it makes; the GgufFile must outlive it.
struct GgufTensorView {
  std::vector<TensorInfo> tensors;
  std::vector<std::unique_ptr<uint8_t[]>> owned;
};
absl::StatusOr<std::unique_ptr<GgufTensorView>> MapGgufTensors(const GgufFile& file);

// The `rope_freqs` divisors of `file` (f32, head_dim / 2 of them, all positive and finite), empty
// when it has none. InvalidArgument for a malformed tensor.
absl::StatusOr<std::vector<float>> GgufRopeFactors(const GgufFile& file, int64_t head_dim);

// The Hugging Face name of a GGUF tensor name (unchanged when it has none).
std::string HfTensorName(std::string_view gguf_name);

}  // namespace loom
