// Tokenizer encode throughput: loads a tokenizer directory, splits a text file into chunks at
// line boundaries (about --chunk_bytes each, the same rule compare_hf.py uses for HF), and
// encodes every chunk on one thread, best of --repeats passes. Prints one JSON object: machine
// (CPU model, logical cores), settings, MB/s, token count and an id checksum (so a comparison can
// check both sides produced the same ids).
//
//   tokenizer_bench --tokenizer_dir DIR --text FILE [--chunk_bytes 4096] [--repeats 5]
//                   [--add_special_tokens 0|1]
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "engine/common/file.h"
#include "server/text/tokenizer/tokenizer.h"

namespace {

// Chunks of `text` cut after a newline once at least `chunk_bytes` have accumulated.
std::vector<std::string_view> Chunks(std::string_view text, size_t chunk_bytes) {
  std::vector<std::string_view> chunks;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = std::min(text.size(), start + chunk_bytes);
    const size_t newline = text.find('\n', end);
    end = newline == std::string_view::npos ? text.size() : newline + 1;
    chunks.push_back(text.substr(start, end - start));
    start = end;
  }
  return chunks;
}

std::string CpuModel() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      const size_t colon = line.find(':');
      return colon == std::string::npos ? line : line.substr(colon + 2);
    }
  }
  return "unknown";
}

std::string JsonEscape(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) < 0x20) continue;
    out += c;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir;
  std::string text_path;
  size_t chunk_bytes = 4096;
  int repeats = 5;
  bool add_special = false;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string_view flag = argv[i];
    if (flag == "--tokenizer_dir") {
      dir = argv[i + 1];
    } else if (flag == "--text") {
      text_path = argv[i + 1];
    } else if (flag == "--chunk_bytes") {
      chunk_bytes = std::strtoul(argv[i + 1], nullptr, 10);
    } else if (flag == "--repeats") {
      repeats = std::max(1, std::atoi(argv[i + 1]));
    } else if (flag == "--add_special_tokens") {
      add_special = std::atoi(argv[i + 1]) != 0;
    } else {
      std::fprintf(stderr, "unknown flag %s\n", argv[i]);
      return 2;
    }
  }
  if (dir.empty() || text_path.empty()) {
    std::fprintf(stderr,
                 "usage: %s --tokenizer_dir DIR --text FILE [--chunk_bytes N] "
                 "[--repeats N] [--add_special_tokens 0|1]\n",
                 argv[0]);
    return 2;
  }
  auto tok = loom::text::Tokenizer::LoadFromDir(dir);
  if (!tok.ok()) {
    std::fprintf(stderr, "%s\n", std::string(tok.status().message()).c_str());
    return 1;
  }
  auto text = loom::ReadFile(text_path);
  if (!text.ok()) {
    std::fprintf(stderr, "%s\n", std::string(text.status().message()).c_str());
    return 1;
  }
  const std::vector<std::string_view> chunks = Chunks(*text, chunk_bytes);
  double best_s = 1e30;
  double first_s = 0;
  uint64_t num_tokens = 0;
  uint64_t checksum = 0;
  for (int r = 0; r < repeats; ++r) {
    num_tokens = 0;
    checksum = 0;
    const auto start = std::chrono::steady_clock::now();
    for (std::string_view chunk : chunks) {
      const std::vector<int32_t> ids = (*tok)->Encode(chunk, add_special);
      num_tokens += ids.size();
      for (int32_t id : ids) checksum = checksum * 1000003 + static_cast<uint64_t>(id);
    }
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (r == 0) first_s = s;
    best_s = std::min(best_s, s);
  }
  const double mb = static_cast<double>(text->size()) / 1e6;
  std::printf(
      "{\"machine\": {\"cpu\": \"%s\", \"logical_cores\": %u}, "
      "\"settings\": {\"tokenizer_dir\": \"%s\", \"text\": \"%s\", \"text_bytes\": %zu, "
      "\"chunk_bytes\": %zu, \"num_chunks\": %zu, \"repeats\": %d, \"threads\": 1, "
      "\"add_special_tokens\": %s}, "
      "\"loom\": {\"best_mb_per_s\": %.3f, \"first_pass_mb_per_s\": %.3f, \"num_tokens\": %llu, "
      "\"checksum\": \"%016llx\"}}\n",
      JsonEscape(CpuModel()).c_str(), std::thread::hardware_concurrency(), JsonEscape(dir).c_str(),
      JsonEscape(text_path).c_str(), text->size(), chunk_bytes, chunks.size(), repeats,
      add_special ? "true" : "false", mb / best_s, mb / first_s,
      static_cast<unsigned long long>(num_tokens), static_cast<unsigned long long>(checksum));
  return 0;
}
