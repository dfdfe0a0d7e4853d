// The byte-pair-encoding model of tokenizer.json ("model": {"type": "BPE", ...}).
//
// Encodes one pre-tokenized word into ids: the word is split into characters (each looked up in
// the vocabulary, with continuing_subword_prefix / end_of_word_suffix when set; a character
// missing from the vocabulary becomes its <0xXX> byte tokens with byte_fallback, else the unknown
// token, consecutive unknowns fused with fuse_unk), then adjacent symbols are merged, always the
// pair with the lowest merge rank first (leftmost on ties), with a priority queue: O(n log n) per
// word. With ignore_merges a word that is itself in the vocabulary is one token.
//
// Results are kept in a bounded word cache (sharded, a mutex per shard). The model is immutable
// after loading apart from that cache; Encode is const and thread-safe.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "engine/common/json.h"

namespace loom::text {

// The BPE vocabulary, merge ranks and word cache.
class BpeModel {
 public:
  // Parses a "model" object of type BPE. Refuses (InvalidArgument naming the JSON path) other
  // model types, dropout other than null/0, merges that name tokens missing from the vocabulary,
  // ids that are negative or above `kMaxVocabId`, and vocabularies whose ids are far sparser than
  // their size (max id >= 2 * size + 65536), so hostile files cannot make huge tables.
  static absl::StatusOr<std::unique_ptr<BpeModel>> FromJson(const Json& model);

  // Largest token id accepted in a vocabulary (keeps tables of size max-id bounded).
  static constexpr int64_t kMaxVocabId = (int64_t{1} << 22) - 1;

  // Appends the ids of `word` (non-empty, well-formed UTF-8).
  void Encode(std::string_view word, std::vector<int32_t>* ids) const;

  // The id of `token` in the model vocabulary.
  std::optional<int32_t> TokenToId(std::string_view token) const;
  // The token string of `id`, or nullptr when no token has that id.
  const std::string* IdToToken(int32_t id) const;
  // One past the largest id of the model vocabulary.
  int32_t id_end() const { return static_cast<int32_t>(id_to_token_.size()); }

 private:
  struct Merge {
    int32_t rank;
    int32_t new_id;
  };
  struct CacheShard {
    std::mutex mu;
    absl::flat_hash_map<std::string, std::vector<int32_t>> words;
  };
  static constexpr int kNumCacheShards = 16;
  static constexpr size_t kMaxCachedWordsPerShard = 4096;
  static constexpr size_t kMaxCachedWordBytes = 64;

  BpeModel() = default;
  absl::Status LoadVocab(const Json& vocab);
  absl::Status LoadMerges(const Json& merges);
  std::optional<int32_t> Lookup(std::string_view token) const;
  // Encodes without the cache.
  void EncodeUncached(std::string_view word, std::vector<int32_t>* ids) const;
  // Appends the initial symbols of `word` (characters, byte fallback, unknowns).
  void InitialSymbols(std::string_view word, std::vector<int32_t>* symbols) const;
  void MergeSymbols(std::vector<int32_t>* symbols) const;

  absl::flat_hash_map<std::string, int32_t> vocab_;
  std::vector<std::string> id_to_token_;
  std::vector<bool> has_id_;
  absl::flat_hash_map<uint64_t, Merge> merges_;
  std::optional<int32_t> unk_id_;
  std::string continuing_subword_prefix_;
  std::string end_of_word_suffix_;
  bool byte_fallback_ = false;
  bool fuse_unk_ = false;
  bool ignore_merges_ = false;
  std::array<int32_t, 256> byte_ids_{};  // <0xXX> ids, -1 when missing
  mutable std::array<CacheShard, kNumCacheShards> cache_;
};

}  // namespace loom::text
