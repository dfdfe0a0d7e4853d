// LocalExecutor::Validate: every check a plan must pass before the executor changes any state,
// so that a rejected plan leaves every sequence exactly as it was.
#include "absl/container/flat_hash_set.h"
#include "engine/common/status.h"
#include "engine/common/strings.h"
#include "engine/runtime/local_executor.h"

namespace loom {
namespace {

absl::Status Bad(std::string_view message) {
  return absl::InvalidArgumentError(StrCat("step plan: ", message));
}

int32_t BlocksFor(int32_t num_tokens, int32_t block_size) {
  return (num_tokens + block_size - 1) / block_size;
}

}  // namespace

absl::Status LocalExecutor::ValidateBlocks(SequenceId id, const std::vector<int32_t>& existing,
                                           const std::vector<BlockId>& added,
                                           int32_t num_tokens) const {
  for (BlockId block : added) {
    if (block.value() < 0 || block.value() >= capacity_.num_blocks) {
      return Bad(StrCat("sequence ", id, " names block ", block, " outside [0, ",
                        capacity_.num_blocks, ")"));
    }
  }
  const int64_t have = static_cast<int64_t>(existing.size() + added.size());
  if (have < BlocksFor(num_tokens, capacity_.block_size)) {
    return Bad(StrCat("sequence ", id, " has ", have, " blocks for ", num_tokens, " tokens"));
  }
  return absl::OkStatus();
}

absl::Status LocalExecutor::ValidateNew(const NewSequencePlan& p) const {
  const int32_t len = static_cast<int32_t>(p.token_ids.size());
  if (len == 0) return Bad(StrCat("new sequence ", p.seq_id, " has no tokens"));
  for (TokenId token : p.token_ids) {
    if (token.value() < 0 || token.value() >= info_.vocab_size) {
      return Bad(StrCat("sequence ", p.seq_id, " has token ", token, " outside the vocabulary"));
    }
  }
  if (p.num_prompt_tokens < 1 || p.num_prompt_tokens > len) {
    return Bad(StrCat("sequence ", p.seq_id, " has num_prompt_tokens ", p.num_prompt_tokens,
                      " for ", len, " tokens"));
  }
  if (p.num_computed_tokens < 0 || p.num_scheduled_tokens < 1 ||
      int64_t{p.num_computed_tokens} + p.num_scheduled_tokens > len) {
    return Bad(StrCat("sequence ", p.seq_id, " schedules ", p.num_scheduled_tokens,
                      " tokens after ", p.num_computed_tokens, " of ", len));
  }
  if (len > info_.max_context_len) {
    return Bad(StrCat("sequence ", p.seq_id, " has ", len, " tokens, more than the context of ",
                      info_.max_context_len));
  }
  absl::Status params = ValidateSamplingParams(p.sampling, info_.vocab_size);
  if (!params.ok()) return Bad(StrCat("sequence ", p.seq_id, ": ", params.message()));
  return ValidateBlocks(p.seq_id, {}, p.block_table, p.num_computed_tokens + p.num_scheduled_tokens);
}

absl::Status LocalExecutor::ValidateImportedTail(const NewSequencePlan& p) const {
  const KvBlob* blob = p.imported_tail.get();
  if (blob == nullptr) return absl::OkStatus();
  if (p.num_computed_tokens == 0) {
    return Bad(StrCat("new sequence ", p.seq_id,
                      " carries an imported tail but has no computed tokens to resume from"));
  }
  if (blob->layout != capacity_.kv_layout) {
    return Bad(StrCat("new sequence ", p.seq_id, " carries an imported tail of KV layout \"",
                      blob->layout, "\", this engine's is \"", capacity_.kv_layout, "\""));
  }
  const int64_t want = kv_->shape().TailSlotBytes();
  if (static_cast<int64_t>(blob->tail.size()) != want) {
    return Bad(StrCat("new sequence ", p.seq_id, " carries an imported tail of ",
                      blob->tail.size(), " bytes, not the ", want, " of a tail slot"));
  }
  if (blob->tail_first_block < 0 ||
      blob->tail_first_block > p.num_computed_tokens / capacity_.block_size) {
    return Bad(StrCat("new sequence ", p.seq_id, " carries an imported tail whose first block ",
                      blob->tail_first_block, " is not in [0, ",
                      p.num_computed_tokens / capacity_.block_size, "]"));
  }
  return absl::OkStatus();
}

absl::Status LocalExecutor::ValidateImports(
    const StepPlan& plan, const absl::flat_hash_set<SequenceId>& finished) const {
  if (plan.kv_imports.empty()) return absl::OkStatus();
  // An import overwrites its blocks: none may hold K/V that a sequence of the engine (held
  // after this plan, or new in it) or a block copy of this plan puts there.
  absl::flat_hash_set<int32_t> held, copied, imported;
  for (const auto& [id, seq] : sequences_) {
    if (!finished.contains(id)) held.insert(seq.block_table.begin(), seq.block_table.end());
  }
  for (const NewSequencePlan& p : plan.new_sequences) {
    for (BlockId block : p.block_table) held.insert(block.value());
  }
  for (const ContinuingSequencePlan& p : plan.continuing) {
    for (BlockId block : p.new_block_ids) held.insert(block.value());
  }
  for (const BlockCopy& copy : plan.block_copies) copied.insert(copy.dst.value());
  for (size_t i = 0; i < plan.kv_imports.size(); ++i) {
    const KvImport& import = plan.kv_imports[i];
    const KvBlob* blob = import.data.get();
    if (blob == nullptr) return Bad(StrCat("KV import ", i, " has no data"));
    if (blob->layout != capacity_.kv_layout) {
      return Bad(StrCat("KV import ", i, " has KV layout \"", blob->layout,
                        "\", this engine's is \"", capacity_.kv_layout, "\""));
    }
    if (blob->num_blocks < 0 || static_cast<size_t>(blob->num_blocks) != import.blocks.size()) {
      return Bad(StrCat("KV import ", i, " carries ", blob->num_blocks, " blocks for ",
                        import.blocks.size(), " block ids"));
    }
    const int64_t want = int64_t{blob->num_blocks} * capacity_.bytes_per_block;
    if (static_cast<int64_t>(blob->blocks.size()) != want) {
      return Bad(StrCat("KV import ", i, " has ", blob->blocks.size(), " bytes, not the ",
                        want, " of ", blob->num_blocks, " blocks"));
    }
    for (BlockId block : import.blocks) {
      if (block.value() < 0 || block.value() >= capacity_.num_blocks) {
        return Bad(StrCat("KV import ", i, " names block ", block, " outside [0, ",
                          capacity_.num_blocks, ")"));
      }
      if (held.contains(block.value())) {
        return Bad(StrCat("KV import ", i, " writes block ", block,
                          ", which a sequence holds"));
      }
      if (copied.contains(block.value())) {
        return Bad(StrCat("KV import ", i, " writes block ", block,
                          ", the destination of a block copy"));
      }
      if (!imported.insert(block.value()).second) {
        return Bad(StrCat("block ", block, " is imported twice"));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status LocalExecutor::ValidateExports(
    const StepPlan& plan, const absl::flat_hash_set<SequenceId>& finished) const {
  absl::flat_hash_set<const KvBlob*> outputs;
  for (size_t i = 0; i < plan.kv_exports.size(); ++i) {
    const KvExport& request = plan.kv_exports[i];
    if (request.out == nullptr) return Bad(StrCat("KV export ", i, " has no output blob"));
    if (!outputs.insert(request.out.get()).second) {
      return Bad(StrCat("KV export ", i, " shares its output blob with another export"));
    }
    for (BlockId block : request.blocks) {
      if (block.value() < 0 || block.value() >= capacity_.num_blocks) {
        return Bad(StrCat("KV export ", i, " names block ", block, " outside [0, ",
                          capacity_.num_blocks, ")"));
      }
    }
    if (request.tail_of.value() != 0 &&
        (!sequences_.contains(request.tail_of) || finished.contains(request.tail_of))) {
      return Bad(StrCat("KV export ", i, " asks for the tail of sequence ", request.tail_of,
                        ", which the engine does not hold after this plan's releases"));
    }
  }
  return absl::OkStatus();
}

absl::Status LocalExecutor::Validate(const StepPlan& plan) const {
  absl::flat_hash_set<SequenceId> finished, seen;
  for (SequenceId id : plan.finished) {
    if (!sequences_.contains(id)) return Bad(StrCat("finished sequence ", id, " is unknown"));
    if (!finished.insert(id).second) return Bad(StrCat("sequence ", id, " finished twice"));
  }
  for (const BlockCopy& copy : plan.block_copies) {
    if (copy.src.value() < 0 || copy.src.value() >= capacity_.num_blocks ||
        copy.dst.value() < 0 || copy.dst.value() >= capacity_.num_blocks) {
      return Bad(StrCat("block copy ", copy.src, " -> ", copy.dst, " is out of range"));
    }
  }
  int64_t num_tokens = 0;
  for (const NewSequencePlan& p : plan.new_sequences) {
    if (!seen.insert(p.seq_id).second) return Bad(StrCat("sequence ", p.seq_id, " appears twice"));
    if (sequences_.contains(p.seq_id) && !finished.contains(p.seq_id)) {
      return Bad(StrCat("new sequence ", p.seq_id, " already exists"));
    }
    LOOM_RETURN_IF_ERROR(ValidateNew(p));
    LOOM_RETURN_IF_ERROR(ValidateImportedTail(p));
    num_tokens += p.num_scheduled_tokens;
  }
  for (const ContinuingSequencePlan& p : plan.continuing) {
    if (!seen.insert(p.seq_id).second) return Bad(StrCat("sequence ", p.seq_id, " appears twice"));
    auto it = sequences_.find(p.seq_id);
    if (it == sequences_.end() || finished.contains(p.seq_id)) {
      return Bad(StrCat("continuing sequence ", p.seq_id, " is unknown"));
    }
    const Sequence& seq = it->second;
    const int64_t end = int64_t{seq.num_computed_tokens} + p.num_scheduled_tokens;
    if (p.num_scheduled_tokens < 1 || end > static_cast<int64_t>(seq.token_ids.size())) {
      return Bad(StrCat("sequence ", p.seq_id, " schedules ", p.num_scheduled_tokens,
                        " tokens after ", seq.num_computed_tokens, " of ", seq.token_ids.size()));
    }
    if (end > info_.max_context_len) {
      return Bad(StrCat("sequence ", p.seq_id, " would reach ", end,
                        " tokens, more than the context of ", info_.max_context_len));
    }
    LOOM_RETURN_IF_ERROR(
        ValidateBlocks(p.seq_id, seq.block_table, p.new_block_ids, static_cast<int32_t>(end)));
    num_tokens += p.num_scheduled_tokens;
  }
  if (num_tokens > capacity_.max_num_batched_tokens) {
    return Bad(StrCat(num_tokens, " tokens exceed the step budget of ",
                      capacity_.max_num_batched_tokens));
  }
  if (static_cast<int64_t>(seen.size()) > capacity_.max_num_seqs) {
    return Bad(StrCat(seen.size(), " sequences exceed the step limit of ", capacity_.max_num_seqs));
  }
  LOOM_RETURN_IF_ERROR(ValidateImports(plan, finished));
  LOOM_RETURN_IF_ERROR(ValidateExports(plan, finished));
  const int32_t num_tail_slots = kv_->shape().num_tail_slots;
  if (num_tail_slots > 0) {
    // Low-bit KV: every held sequence has a tail slot, and a new sequence starts either at a
    // block edge (a prefix hit shares only full, packed blocks), or on a partial block that a
    // block copy of this plan takes from a sequence's tail, or on one whose tail it imports
    // (resumed from a KV transfer).
    const int64_t held = static_cast<int64_t>(sequences_.size() - finished.size() +
                                              plan.new_sequences.size());
    if (held > num_tail_slots) {
      return Bad(StrCat(held, " sequences would be held, more than the ", num_tail_slots,
                        " residual tails of the KV cache"));
    }
    for (const NewSequencePlan& p : plan.new_sequences) {
      if (p.num_computed_tokens % capacity_.block_size == 0 || p.imported_tail != nullptr) {
        continue;
      }
      const BlockId block = p.block_table[p.num_computed_tokens / capacity_.block_size];
      bool supplied = false;
      for (const BlockCopy& copy : plan.block_copies) {
        supplied |= copy.dst == block && PartialBlockOwner(copy.src.value()) != nullptr;
      }
      if (!supplied) {
        return Bad(StrCat("new sequence ", p.seq_id, " starts after ", p.num_computed_tokens,
                          " cached tokens, inside a block, with no tail to copy it from (a "
                          "block copy of a held sequence's partial block, or an imported tail)"));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace loom
