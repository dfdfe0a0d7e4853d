// The peer side of the generation benchmarks that need llama.cpp to decode its own output (the
// expert-cache benchmark's larger-than-RAM case): load a GGUF file once through llama.cpp's
// library (mmap, as llama.cpp runs by default, without the weight repacking into RAM that
// --no-repack turns off), then for each request read from standard input
// prefill its prompt, given as token ids, and generate tokens one at a time, timing each.
// llama-bench cannot do this: its generation test feeds random tokens, which would throw away the
// request-level locality the benchmark is about.
//
// Built by bench/engine/build_llamacpp.sh against the vendored llama.cpp, not by CMake.
//
//   llamacpp_generate MODEL.gguf THREADS TEMPERATURE < requests
//
// A request is a line "SEED MAX_TOKENS ID ID ...". For each, one JSON line goes to standard
// output: {"prompt_tokens": N, "prefill_s": S, "token_s": [..], "tokens": [..]}. Temperature 0 is
// greedy; otherwise temperature, then a draw seeded by the request's seed.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "llama.h"

namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void Quiet(ggml_log_level level, const char* text, void*) {
  if (level >= GGML_LOG_LEVEL_ERROR) std::fputs(text, stderr);
}

// One request on a fresh sequence of `ctx`; returns its JSON line, or "" on a failure.
std::string Generate(llama_context* ctx, float temperature, uint32_t seed, int max_tokens,
                     std::vector<llama_token> prompt) {
  llama_memory_clear(llama_get_memory(ctx), true);
  llama_sampler* sampler = llama_sampler_chain_init(llama_sampler_chain_default_params());
  if (temperature <= 0) {
    llama_sampler_chain_add(sampler, llama_sampler_init_greedy());
  } else {
    llama_sampler_chain_add(sampler, llama_sampler_init_temp(temperature));
    llama_sampler_chain_add(sampler, llama_sampler_init_dist(seed));
  }
  double start = Now();
  if (llama_decode(ctx, llama_batch_get_one(prompt.data(), static_cast<int32_t>(prompt.size()))) != 0) {
    llama_sampler_free(sampler);
    return "";
  }
  llama_token token = llama_sampler_sample(sampler, ctx, -1);
  const double prefill_s = Now() - start;
  std::vector<double> token_s;
  std::vector<llama_token> tokens = {token};
  for (int i = 1; i < max_tokens; ++i) {
    start = Now();
    if (llama_decode(ctx, llama_batch_get_one(&token, 1)) != 0) {
      llama_sampler_free(sampler);
      return "";
    }
    token = llama_sampler_sample(sampler, ctx, -1);
    token_s.push_back(Now() - start);
    tokens.push_back(token);
  }
  llama_sampler_free(sampler);
  std::string out = "{\"prompt_tokens\": " + std::to_string(prompt.size()) +
                    ", \"prefill_s\": " + std::to_string(prefill_s) + ", \"token_s\": [";
  for (size_t i = 0; i < token_s.size(); ++i) out += (i ? ", " : "") + std::to_string(token_s[i]);
  out += "], \"tokens\": [";
  for (size_t i = 0; i < tokens.size(); ++i) out += (i ? ", " : "") + std::to_string(tokens[i]);
  return out + "]}";
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s MODEL.gguf THREADS TEMPERATURE < requests\n", argv[0]);
    return 2;
  }
  const int threads = std::atoi(argv[2]);
  const float temperature = static_cast<float>(std::atof(argv[3]));
  std::vector<std::pair<uint32_t, std::pair<int, std::vector<llama_token>>>> requests;
  size_t longest = 0;
  for (std::string line; std::getline(std::cin, line);) {
    std::istringstream in(line);
    uint32_t seed = 0;
    int max_tokens = 0;
    if (!(in >> seed >> max_tokens) || max_tokens < 1) continue;
    std::vector<llama_token> prompt;
    for (llama_token id; in >> id;) prompt.push_back(id);
    if (prompt.empty()) continue;
    longest = std::max(longest, prompt.size() + max_tokens);
    requests.push_back({seed, {max_tokens, std::move(prompt)}});
  }

  llama_log_set(Quiet, nullptr);
  llama_backend_init();
  llama_model_params mparams = llama_model_default_params();
  mparams.n_gpu_layers = 0;
  // What --no-repack does: run the weights where the mapping has them. The default repacks
  // Q4_0 and friends into a copy in RAM, which a model larger than RAM cannot get.
  mparams.use_extra_bufts = false;
  llama_model* model = llama_model_load_from_file(argv[1], mparams);
  if (model == nullptr) {
    std::fprintf(stderr, "cannot load %s\n", argv[1]);
    return 1;
  }
  llama_context_params cparams = llama_context_default_params();
  cparams.n_ctx = static_cast<uint32_t>(longest + 8);
  cparams.n_batch = cparams.n_ctx;
  cparams.n_threads = threads;
  cparams.n_threads_batch = threads;
  llama_context* ctx = llama_init_from_model(model, cparams);
  if (ctx == nullptr) {
    std::fprintf(stderr, "cannot create a context\n");
    return 1;
  }
  int status = 0;
  for (auto& [seed, request] : requests) {
    const std::string line = Generate(ctx, temperature, seed, request.first, request.second);
    if (line.empty()) {
      std::fprintf(stderr, "decode failed\n");
      status = 1;
      break;
    }
    std::printf("%s\n", line.c_str());
    std::fflush(stdout);
  }
  llama_free(ctx);
  llama_model_free(model);
  llama_backend_free();
  return status;
}
