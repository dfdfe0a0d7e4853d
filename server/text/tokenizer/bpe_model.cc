#include "server/text/tokenizer/bpe_model.h"

#include <functional>
#include <queue>
#include <tuple>
#include <utility>

#include "absl/hash/hash.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "engine/common/status.h"
#include "engine/common/strings.h"
#include "engine/common/utf8.h"

namespace loom::text {
namespace {

uint64_t PairKey(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}


absl::Status Invalid(const Json& at, std::string_view message) {
  return absl::InvalidArgumentError(StrCat(at.path(), ": ", message));
}

}  // namespace

absl::StatusOr<std::unique_ptr<BpeModel>> BpeModel::FromJson(const Json& model) {
  if (!model.IsObject()) return Invalid(model, "expected an object");
  LOOM_ASSIGN_OR_RETURN(std::string type, model.GetString("type", "BPE"));
  if (type != "BPE") {
    return Invalid(model, StrCat("model type \"", type, "\" is not supported (only BPE)"));
  }
  LOOM_ASSIGN_OR_RETURN(double dropout, model.GetDouble("dropout", 0.0));
  if (dropout != 0.0) return Invalid(model, "BPE dropout is not supported (must be null or 0)");
  std::unique_ptr<BpeModel> bpe(new BpeModel());
  LOOM_ASSIGN_OR_RETURN(Json vocab, model.Get("vocab"));
  LOOM_RETURN_IF_ERROR(bpe->LoadVocab(vocab));
  LOOM_ASSIGN_OR_RETURN(bpe->continuing_subword_prefix_,
                        model.GetString("continuing_subword_prefix", ""));
  LOOM_ASSIGN_OR_RETURN(bpe->end_of_word_suffix_, model.GetString("end_of_word_suffix", ""));
  LOOM_ASSIGN_OR_RETURN(bpe->byte_fallback_, model.GetBool("byte_fallback", false));
  LOOM_ASSIGN_OR_RETURN(bpe->fuse_unk_, model.GetBool("fuse_unk", false));
  LOOM_ASSIGN_OR_RETURN(bpe->ignore_merges_, model.GetBool("ignore_merges", false));
  LOOM_ASSIGN_OR_RETURN(std::string unk, model.GetString("unk_token", ""));
  if (!unk.empty()) {
    bpe->unk_id_ = bpe->Lookup(unk);
    if (!bpe->unk_id_.has_value()) {
      return Invalid(model, StrCat("unk_token \"", unk, "\" is not in the vocabulary"));
    }
  }
  for (int b = 0; b < 256; ++b) {
    static constexpr char kHex[] = "0123456789ABCDEF";
    const char name[] = {'<', '0', 'x', kHex[b >> 4], kHex[b & 15], '>'};
    bpe->byte_ids_[b] = bpe->Lookup(std::string_view(name, sizeof(name))).value_or(-1);
  }
  if (model.Has("merges")) {
    LOOM_ASSIGN_OR_RETURN(Json merges, model.Get("merges"));
    LOOM_RETURN_IF_ERROR(bpe->LoadMerges(merges));
  }
  return bpe;
}

absl::Status BpeModel::LoadVocab(const Json& vocab) {
  if (!vocab.IsObject()) return Invalid(vocab, "expected an object mapping tokens to ids");
  const std::vector<std::pair<std::string, Json>> items = vocab.Items();
  const auto max_dense_id = static_cast<int64_t>(2 * items.size() + 65536);
  for (auto& [token, id_json] : items) {
    absl::StatusOr<int64_t> id = id_json.AsInt();
    if (!id.ok() || *id < 0 || *id > kMaxVocabId) {
      return Invalid(id_json, StrCat("expected a token id in [0, ", kMaxVocabId, "]"));
    }
    if (*id >= max_dense_id) {
      return Invalid(id_json,
                     StrCat("token id ", *id, " is far past the vocabulary size ", items.size()));
    }
    const auto index = static_cast<size_t>(*id);
    if (index >= id_to_token_.size()) {
      id_to_token_.resize(index + 1);
      has_id_.resize(index + 1, false);
    }
    if (!has_id_[index]) {
      id_to_token_[index] = token;
      has_id_[index] = true;
    }
    vocab_[token] = static_cast<int32_t>(*id);
  }
  return absl::OkStatus();
}

absl::Status BpeModel::LoadMerges(const Json& merges) {
  if (!merges.IsArray()) return Invalid(merges, "expected an array");
  merges_.reserve(merges.size());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const Json entry = merges[rank];
    std::string left;
    std::string right;
    if (entry.IsString()) {
      LOOM_ASSIGN_OR_RETURN(std::string line, entry.AsString());
      const size_t space = line.find(' ');
      if (space == std::string::npos || line.find(' ', space + 1) != std::string::npos) {
        return Invalid(entry, "expected a merge \"left right\"");
      }
      left = line.substr(0, space);
      right = line.substr(space + 1);
    } else if (entry.IsArray() && entry.size() == 2) {
      LOOM_ASSIGN_OR_RETURN(left, entry[0].AsString());
      LOOM_ASSIGN_OR_RETURN(right, entry[1].AsString());
    } else {
      return Invalid(entry, "expected a merge \"left right\" or [left, right]");
    }
    const std::optional<int32_t> left_id = Lookup(left);
    const std::optional<int32_t> right_id = Lookup(right);
    if (!left_id || !right_id) {
      return Invalid(entry, StrCat("merge names a token missing from the vocabulary: \"",
                                   left_id ? right : left, "\""));
    }
    std::string_view right_part = right;
    if (!continuing_subword_prefix_.empty() && right_part.starts_with(continuing_subword_prefix_)) {
      right_part.remove_prefix(continuing_subword_prefix_.size());
    }
    const std::string merged = StrCat(left, right_part);
    const std::optional<int32_t> merged_id = Lookup(merged);
    if (!merged_id) {
      return Invalid(entry, StrCat("merged token \"", merged, "\" is not in the vocabulary"));
    }
    // Like the reference (a map collected in order), a repeated pair takes its last rank.
    merges_.insert_or_assign(PairKey(*left_id, *right_id),
                             Merge{static_cast<int32_t>(rank), *merged_id});
  }
  return absl::OkStatus();
}

std::optional<int32_t> BpeModel::Lookup(std::string_view token) const {
  auto it = vocab_.find(AbslView(token));
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

std::optional<int32_t> BpeModel::TokenToId(std::string_view token) const { return Lookup(token); }

const std::string* BpeModel::IdToToken(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= id_to_token_.size() || !has_id_[id]) return nullptr;
  return &id_to_token_[id];
}

void BpeModel::Encode(std::string_view word, std::vector<int32_t>* ids) const {
  if (word.empty()) return;
  if (word.size() > kMaxCachedWordBytes) {
    EncodeUncached(word, ids);
    return;
  }
  CacheShard& shard = cache_[absl::HashOf(AbslView(word)) % kNumCacheShards];
  {
    std::lock_guard<std::mutex> lock(shard.mu);
    auto it = shard.words.find(AbslView(word));
    if (it != shard.words.end()) {
      ids->insert(ids->end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const size_t start = ids->size();
  EncodeUncached(word, ids);
  std::vector<int32_t> result(ids->begin() + static_cast<ptrdiff_t>(start), ids->end());
  std::lock_guard<std::mutex> lock(shard.mu);
  // A full shard starts over: simpler than LRU and bounded.
  if (shard.words.size() >= kMaxCachedWordsPerShard) shard.words.clear();
  shard.words.try_emplace(std::string(word), std::move(result));
}

void BpeModel::EncodeUncached(std::string_view word, std::vector<int32_t>* ids) const {
  if (ignore_merges_) {
    if (std::optional<int32_t> id = Lookup(word)) {
      ids->push_back(*id);
      return;
    }
  }
  std::vector<int32_t> symbols;
  symbols.reserve(word.size());
  InitialSymbols(word, &symbols);
  MergeSymbols(&symbols);
  ids->insert(ids->end(), symbols.begin(), symbols.end());
}

void BpeModel::InitialSymbols(std::string_view word, std::vector<int32_t>* symbols) const {
  const bool affixes = !continuing_subword_prefix_.empty() || !end_of_word_suffix_.empty();
  std::string scratch;
  bool pending_unk = false;
  size_t len = 0;
  for (size_t pos = 0; pos < word.size(); pos += len) {
    DecodeUtf8(word, pos, &len);
    std::string_view ch = word.substr(pos, len);
    if (affixes) {
      scratch.clear();
      if (pos > 0) scratch += continuing_subword_prefix_;
      scratch += ch;
      if (pos + len == word.size()) scratch += end_of_word_suffix_;
      ch = scratch;
    }
    if (std::optional<int32_t> id = Lookup(ch)) {
      if (pending_unk) symbols->push_back(*unk_id_);
      pending_unk = false;
      symbols->push_back(*id);
      continue;
    }
    if (byte_fallback_) {
      bool all = true;
      for (unsigned char b : ch) all = all && byte_ids_[b] >= 0;
      if (all) {
        // Like the reference, a pending unknown is not flushed before the byte tokens.
        for (unsigned char b : ch) symbols->push_back(byte_ids_[b]);
        continue;
      }
    }
    if (unk_id_.has_value()) {
      if (pending_unk && !fuse_unk_) symbols->push_back(*unk_id_);
      pending_unk = true;
    }
  }
  if (pending_unk) symbols->push_back(*unk_id_);
}

void BpeModel::MergeSymbols(std::vector<int32_t>* symbols) const {
  const int n = static_cast<int>(symbols->size());
  if (n < 2 || merges_.empty()) return;
  std::vector<int32_t>& id = *symbols;
  std::vector<int32_t> prev(n);
  std::vector<int32_t> next(n);
  for (int i = 0; i < n; ++i) {
    prev[i] = i - 1;
    next[i] = i + 1 < n ? i + 1 : -1;
  }
  std::vector<bool> alive(n, true);
  // (rank, position, new id): smallest rank first, then leftmost.
  using Entry = std::tuple<int32_t, int32_t, int32_t>;
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> queue;
  auto push = [&](int pos) {
    if (pos < 0 || next[pos] < 0) return;
    auto it = merges_.find(PairKey(id[pos], id[next[pos]]));
    if (it != merges_.end()) queue.emplace(it->second.rank, pos, it->second.new_id);
  };
  for (int i = 0; i + 1 < n; ++i) push(i);
  while (!queue.empty()) {
    const auto [rank, pos, new_id] = queue.top();
    queue.pop();
    if (!alive[pos] || next[pos] < 0) continue;
    const int right = next[pos];
    auto it = merges_.find(PairKey(id[pos], id[right]));
    if (it == merges_.end() || it->second.new_id != new_id) continue;
    id[pos] = new_id;
    alive[right] = false;
    next[pos] = next[right];
    if (next[right] >= 0) prev[next[right]] = pos;
    push(prev[pos]);
    push(pos);
  }
  int out = 0;
  for (int i = 0; i < n; ++i) {
    if (alive[i]) id[out++] = id[i];
  }
  symbols->resize(out);
}

}  // namespace loom::text
