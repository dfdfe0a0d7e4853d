#include "engine/experts/stored_experts.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <optional>

#include "engine/common/logging.h"
#include "engine/common/status.h"
#include "engine/common/strings.h"
#include "engine/experts/device_tiers.h"

namespace loom {
namespace {

// The bytes of one of the checkpoint's files, as mapped.
struct MappedBytes {
  const uint8_t* base;
  int64_t num_bytes;
};

// Where `view`'s bytes lie in the checkpoint's files.
absl::StatusOr<ExpertPart> Locate(const WeightView& view, std::span<const MappedBytes> files,
                                  ExpertKey key) {
  const auto* data = static_cast<const uint8_t*>(view.data);
  const int64_t bytes = view.rows * DTypeRowBytes(view.dtype, view.cols);
  for (size_t f = 0; f < files.size(); ++f) {
    if (data >= files[f].base && data + bytes <= files[f].base + files[f].num_bytes) {
      return ExpertPart{static_cast<int32_t>(f), data - files[f].base, bytes};
    }
  }
  return absl::InternalError(StrCat("expert ", key.expert, " of layer ", key.layer,
                                    " is not in the checkpoint's files"));
}

// The locations of the routed experts of `experts` ([num_layers * num_experts], dense layers'
// entries empty), each matrix placed by `place`; `shapes` gets `experts` with the routed experts'
// data pointers cleared.
absl::StatusOr<std::vector<ExpertLocation>> LocateExperts(
    std::span<const ExpertWeights> experts, int32_t num_experts,
    const std::function<absl::StatusOr<ExpertPart>(const LinearWeight&, ExpertKey)>& place,
    std::vector<ExpertWeights>* shapes) {
  shapes->assign(experts.begin(), experts.end());
  std::vector<ExpertLocation> locations;
  for (size_t i = 0; i < experts.size(); ++i) {
    const ExpertWeights& w = experts[i];
    if (w.gate.weight.data == nullptr) continue;  // a dense layer
    const ExpertKey key{static_cast<int32_t>(i / static_cast<size_t>(num_experts)),
                        static_cast<int32_t>(i % static_cast<size_t>(num_experts))};
    ExpertLocation location{key, {}};
    for (const LinearWeight* m : {&w.gate, &w.up, &w.down}) {
      LOOM_ASSIGN_OR_RETURN(ExpertPart part, place(*m, key));
      location.parts.push_back(part);
    }
    locations.push_back(std::move(location));
    ExpertWeights& shape = (*shapes)[i];
    shape.gate.weight.data = shape.up.weight.data = shape.down.weight.data = nullptr;
  }
  return locations;
}

}  // namespace

absl::StatusOr<std::unique_ptr<StoredExpertProvider>> StoredExpertProvider::Create(
    std::span<const ExpertWeights> experts, int32_t num_experts, const Checkpoint& checkpoint,
    const ExpertStoreOptions& options) {
  std::vector<std::string> paths;
  std::vector<MappedBytes> mapped;
  if (const GgufFile* gguf = checkpoint.gguf()) {
    paths.push_back(gguf->path());
    mapped.push_back({static_cast<const uint8_t*>(gguf->mapping()), gguf->file_bytes()});
  }
  for (const auto& file : checkpoint.files()) {
    paths.push_back(file->path());
    mapped.push_back({static_cast<const uint8_t*>(file->mapping()), file->file_bytes()});
  }
  std::vector<ExpertWeights> shapes;
  LOOM_ASSIGN_OR_RETURN(
      std::vector<ExpertLocation> locations,
      LocateExperts(
          experts, num_experts,
          [&](const LinearWeight& m, ExpertKey key) { return Locate(m.weight, mapped, key); },
          &shapes));
  LOOM_ASSIGN_OR_RETURN(std::unique_ptr<ExpertStore> store,
                        ExpertStore::Create(paths, std::move(locations), options));
  return std::unique_ptr<StoredExpertProvider>(
      new StoredExpertProvider(std::move(shapes), num_experts, std::move(store), nullptr));
}

bool HostComputeCost::HostIsFaster(int32_t rows, int64_t expert_bytes, int64_t row_bytes) const {
  if (!(load_bytes_per_second > 0) || rows <= 0) return false;
  const double host = host_seconds_base + host_seconds_per_row * rows +
                      2.0 * static_cast<double>(rows) * static_cast<double>(row_bytes) /
                          load_bytes_per_second;
  return host < static_cast<double>(expert_bytes) / load_bytes_per_second;
}

absl::StatusOr<std::unique_ptr<StoredExpertProvider>> StoredExpertProvider::CreateInHostMemory(
    std::span<const ExpertWeights> experts, int32_t num_experts, Backend& backend,
    const ExpertStoreOptions& options, const HostComputeOptions& host) {
  constexpr int64_t kPage = 4096;
  // Each part at a page boundary of the home, so it keeps that alignment in a slot.
  std::vector<const void*> sources;
  std::vector<ExpertWeights> shapes;
  int64_t home_bytes = 0;
  LOOM_ASSIGN_OR_RETURN(
      std::vector<ExpertLocation> locations,
      LocateExperts(
          experts, num_experts,
          [&](const LinearWeight& m, ExpertKey) -> absl::StatusOr<ExpertPart> {
            if (m.bias != nullptr) {
              return absl::UnimplementedError(
                  "an expert cache in device memory does not hold experts with biases");
            }
            const int64_t bytes = m.weight.rows * DTypeRowBytes(m.weight.dtype, m.weight.cols);
            const ExpertPart part{0, home_bytes, bytes};
            sources.push_back(m.weight.data);
            home_bytes += (bytes + kPage - 1) / kPage * kPage;
            return part;
          },
          &shapes));
  absl::StatusOr<HostMemory> home = backend.AllocateHost(home_bytes);
  if (!home.ok()) {
    return absl::ResourceExhaustedError(StrCat("the experts' host copy (", home_bytes >> 20,
                                               " MiB): ", home.status().message()));
  }
  size_t source = 0;
  for (const ExpertLocation& location : locations) {
    for (const ExpertPart& part : location.parts) {
      std::memcpy(home->get() + part.offset, sources[source++], static_cast<size_t>(part.bytes));
    }
  }
  HostMemory memory = std::move(*home);
  // The same experts, viewed in the host copy (for computing them there).
  std::vector<ExpertWeights> host_weights(experts.begin(), experts.end());
  for (const ExpertLocation& location : locations) {
    ExpertWeights& w = host_weights[static_cast<size_t>(location.key.layer) *
                                        static_cast<size_t>(num_experts) +
                                    static_cast<size_t>(location.key.expert)];
    w.gate.weight.data = memory.get() + location.parts[0].offset;
    w.up.weight.data = memory.get() + location.parts[1].offset;
    w.down.weight.data = memory.get() + location.parts[2].offset;
  }
  LOOM_ASSIGN_OR_RETURN(
      std::unique_ptr<ExpertStore> store,
      ExpertStore::CreateWithTiers(
          {"the experts' host copy"}, {home_bytes}, std::move(locations), options,
          [&](int64_t slot_bytes, int32_t num_slots)
              -> absl::StatusOr<std::unique_ptr<ExpertTiers>> {
            LOOM_ASSIGN_OR_RETURN(
                std::unique_ptr<DeviceTiers> tiers,
                DeviceTiers::Create(backend, std::move(memory), slot_bytes, num_slots));
            return std::unique_ptr<ExpertTiers>(std::move(tiers));
          }));
  std::unique_ptr<StoredExpertProvider> provider(
      new StoredExpertProvider(std::move(shapes), num_experts, std::move(store), &backend));
  provider->host_weights_ = std::move(host_weights);
  if (host.ops != nullptr && host.mode != ExpertHostCompute::kNever) {
    LOOM_RETURN_IF_ERROR(provider->SetUpHostCompute(backend, host));
  }
  if (host.mode != ExpertHostCompute::kNever && host.grouped_tables) {
    LOOM_RETURN_IF_ERROR(provider->SetUpGroupedTables(backend));
  }
  return provider;
}

absl::Status StoredExpertProvider::SetUpGroupedTables(Backend& backend) {
  Ops& ops = backend.ops();
  if (ops.MaxGroupedExpertTokens() <= 0) return absl::OkStatus();
  const size_t n = static_cast<size_t>(num_experts_);
  std::vector<std::unique_ptr<ExpertTable>> tables(host_weights_.size() / n);
  for (size_t l = 0; l < tables.size(); ++l) {
    const std::span<const ExpertWeights> layer(host_weights_.data() + l * n, n);
    if (layer[0].gate.weight.data == nullptr) continue;  // a dense layer
    absl::StatusOr<std::unique_ptr<ExpertTable>> table = ops.CreateExpertTable(layer);
    if (!table.ok()) {
      LOOM_LOG(kInfo, "expert cache: experts routed on the host (", table.status().message(),
               ")");
      return absl::OkStatus();
    }
    tables[l] = *std::move(table);
  }
  grouped_ops_ = &ops;
  tables_ = std::move(tables);
  from_slot_.assign(host_weights_.size(), 0);
  read_at_home_.assign(host_weights_.size(), 0);
  return absl::OkStatus();
}

const ExpertTable* StoredExpertProvider::GroupedTable(int32_t layer) const {
  if (layer < 0 || static_cast<size_t>(layer) >= tables_.size()) return nullptr;
  return tables_[static_cast<size_t>(layer)].get();
}

absl::Status StoredExpertProvider::BeginGroupedStep() {
  if (grouped_ops_ == nullptr) {
    return absl::FailedPreconditionError("this expert cache keeps no grouped tables");
  }
  const size_t n = static_cast<size_t>(num_experts_);
  std::vector<ExpertWeights> layer(n);
  for (size_t l = 0; l < tables_.size(); ++l) {
    if (tables_[l] == nullptr) continue;
    for (size_t e = 0; e < n; ++e) {
      const size_t index = l * n + e;
      const ExpertKey key{static_cast<int32_t>(l), static_cast<int32_t>(e)};
      std::optional<ExpertBytes> bytes = store_->PinIfResident(key);
      from_slot_[index] = bytes.has_value();
      if (!bytes.has_value()) {
        layer[e] = host_weights_[index];
        continue;
      }
      pinned_.push_back(key);
      layer[e] = shapes_[index];
      layer[e].gate.weight.data = bytes->data + bytes->part_offsets[0];
      layer[e].up.weight.data = bytes->data + bytes->part_offsets[1];
      layer[e].down.weight.data = bytes->data + bytes->part_offsets[2];
    }
    grouped_ops_->UpdateExpertTable(*tables_[l], layer);
  }
  return absl::OkStatus();
}

void StoredExpertProvider::GroupedRouting(int32_t layer, std::span<const int32_t> expert_ids) {
  if (GroupedTable(layer) == nullptr) return;
  for (const int32_t expert : expert_ids) {
    if (expert < 0 || expert >= num_experts_) continue;
    const size_t index = static_cast<size_t>(Index(layer, expert));
    if (read_at_home_[index] == 1 || from_slot_[index] == 2) continue;  // counted this step
    const ExpertKey key{layer, expert};
    if (from_slot_[index] == 1) {
      from_slot_[index] = 2;
      store_->CountUse(key, /*from_slot=*/true);
    } else {
      read_at_home_[index] = 1;
      store_->CountUse(key, /*from_slot=*/false);
      to_load_.push_back(key);
    }
  }
}

absl::Status StoredExpertProvider::SetUpHostCompute(Backend& backend,
                                                    const HostComputeOptions& host) {
  int64_t hidden = 0, inter = 0;
  for (const ExpertWeights& w : host_weights_) {
    hidden = std::max(hidden, w.gate.weight.cols);
    inter = std::max(inter, w.gate.weight.rows);
  }
  const int32_t rows = std::max(host.max_rows, 1);
  const int32_t expert_rows = std::clamp(host.max_expert_rows, 1, rows);
  const int64_t row_bytes = hidden * static_cast<int64_t>(sizeof(float));
  LOOM_ASSIGN_OR_RETURN(host_x_memory_, backend.AllocateHost(rows * row_bytes));
  LOOM_ASSIGN_OR_RETURN(host_out_memory_, backend.AllocateHost(rows * row_bytes));
  host_x_ = reinterpret_cast<float*>(host_x_memory_.get());
  host_out_ = reinterpret_cast<float*>(host_out_memory_.get());
  std::fill(host_x_, host_x_ + rows * hidden, 0.0f);
  host_gate_.assign(static_cast<size_t>(expert_rows * inter), 0.0f);
  host_up_.assign(static_cast<size_t>(expert_rows * inter), 0.0f);
  host_ops_ = host.ops;
  host_max_rows_ = rows;
  host_max_expert_rows_ = expert_rows;
  host_mode_ = host.mode;
  if (host_mode_ == ExpertHostCompute::kAuto) LOOM_RETURN_IF_ERROR(MeasureHostCompute());
  return absl::OkStatus();
}

// The costs, measured on the first routed expert: one load through the store (the copy queue's
// rate), and the host's time for 1 and for R rows of it (best of three each; the line through
// the two).
absl::Status StoredExpertProvider::MeasureHostCompute() {
  int32_t first = -1;
  for (size_t i = 0; i < host_weights_.size() && first < 0; ++i) {
    if (host_weights_[i].gate.weight.data != nullptr) first = static_cast<int32_t>(i);
  }
  if (first < 0) return absl::OkStatus();
  const int32_t layer = first / num_experts_, expert = first % num_experts_;
  LOOM_RETURN_IF_ERROR(store_->Acquire({layer, expert}).status());
  store_->Release({layer, expert});
  const ExpertStoreStats stats = store_->Stats();
  if (stats.load_seconds > 0) {
    cost_.load_bytes_per_second = static_cast<double>(stats.bytes_loaded) / stats.load_seconds;
  }
  auto time_rows = [&](int32_t rows) -> absl::StatusOr<double> {
    double best = 0;
    for (int rep = 0; rep < 3; ++rep) {
      const auto start = std::chrono::steady_clock::now();
      LOOM_RETURN_IF_ERROR(Compute(host_weights_[static_cast<size_t>(first)], 0, rows));
      const double seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      best = rep == 0 ? seconds : std::min(best, seconds);
    }
    return best;
  };
  const int32_t many = std::min(host_max_expert_rows_, 16);
  LOOM_ASSIGN_OR_RETURN(const double one, time_rows(1));
  LOOM_ASSIGN_OR_RETURN(const double all, time_rows(many));
  cost_.host_seconds_per_row = many > 1 ? std::max(0.0, (all - one) / (many - 1)) : 0.0;
  cost_.host_seconds_base = std::max(0.0, one - cost_.host_seconds_per_row);
  LOOM_LOG(kInfo, "expert cache: a load moves ", cost_.load_bytes_per_second / 1e9,
           " GB/s; the host computes an expert's 1 / ", many, " rows in ", one * 1e3, " / ",
           all * 1e3, " ms");
  return absl::OkStatus();
}

StoredExpertProvider::StoredExpertProvider(std::vector<ExpertWeights> shapes, int32_t num_experts,
                                           std::unique_ptr<ExpertStore> store,
                                           Backend* async_backend)
    : shapes_(std::move(shapes)),
      num_experts_(num_experts),
      store_(std::move(store)),
      async_backend_(async_backend) {}

int64_t StoredExpertProvider::Index(int32_t layer, int32_t expert) const {
  const int64_t index = int64_t{layer} * num_experts_ + expert;
  LOOM_CHECK(expert >= 0 && expert < num_experts_ && index >= 0 &&
                 index < static_cast<int64_t>(shapes_.size()),
             "expert ", expert, " of layer ", layer, " out of range");
  return index;
}

absl::Status StoredExpertProvider::Compute(const ExpertWeights& w, int32_t first,
                                           int32_t rows) {
  if (rows <= 0 || rows > host_max_expert_rows_ || first < 0 || first > host_max_rows_ - rows) {
    return absl::InvalidArgumentError(StrCat("rows [", first, ", ", first + rows,
                                             ") on the host, which holds ", host_max_rows_,
                                             " rows and ", host_max_expert_rows_,
                                             " of one expert"));
  }
  const int64_t hidden = w.gate.weight.cols, inter = w.gate.weight.rows;
  const LinearOutput gate_up[] = {{&w.gate, host_gate_.data(), inter},
                                  {&w.up, host_up_.data(), inter}};
  host_ops_->Linear(host_x_ + first * hidden, hidden, rows, gate_up);
  host_ops_->SiluMul(host_gate_.data(), host_up_.data(), rows, static_cast<int32_t>(inter),
                     host_gate_.data());
  const LinearOutput down[] = {{&w.down, host_out_ + first * hidden, hidden}};
  host_ops_->Linear(host_gate_.data(), inter, rows, down);
  return absl::OkStatus();
}

bool StoredExpertProvider::PrefersHost(int32_t layer, int32_t expert, int32_t rows) {
  if (host_ops_ == nullptr || host_mode_ == ExpertHostCompute::kNever) return false;
  const int64_t index = Index(layer, expert);
  if (store_->IsResidentOrComing({layer, expert})) return false;
  if (host_mode_ == ExpertHostCompute::kAlways) return true;
  const int64_t row_bytes = shapes_[static_cast<size_t>(index)].gate.weight.cols *
                            static_cast<int64_t>(sizeof(float));
  return cost_.HostIsFaster(rows, store_->slot_bytes(), row_bytes);
}

absl::Status StoredExpertProvider::RunOnHost(int32_t layer, int32_t expert, int32_t first,
                                             int32_t rows) {
  if (host_ops_ == nullptr) return ExpertProvider::RunOnHost(layer, expert, first, rows);
  const ExpertWeights& w = host_weights_[static_cast<size_t>(Index(layer, expert))];
  LOOM_CHECK(w.gate.weight.data != nullptr, "layer ", layer, " has no experts");
  LOOM_RETURN_IF_ERROR(Compute(w, first, rows));
  store_->CountComputedAtHome();
  return absl::OkStatus();
}

absl::Status StoredExpertProvider::ReleaseDone(bool wait) {
  absl::Status status;
  if (wait && async_backend_ != nullptr && !done_.empty()) status = async_backend_->Synchronize();
  for (ExpertKey key : done_) store_->Release(key);
  done_.clear();
  return status;
}

void StoredExpertProvider::WillUse(int32_t layer, std::span<const int32_t> experts) {
  // Ops::MoeRoute, just before, waited for every op queued before it: the earlier layers'
  // experts are no longer read.
  if (async_backend_ != nullptr) (void)ReleaseDone(/*wait=*/false);
  upcoming_layer_ = layer;
  upcoming_.assign(experts.begin(), experts.end());
}

absl::StatusOr<const ExpertWeights*> StoredExpertProvider::Get(int32_t layer, int32_t expert) {
  const int64_t index = Index(layer, expert);
  const ExpertKey key{layer, expert};
  absl::StatusOr<ExpertBytes> acquired = store_->Acquire(key);
  if (absl::IsResourceExhausted(acquired.status()) && !done_.empty()) {
    // Every slot is pinned, some by experts whose ops are queued: wait for those, then retry.
    LOOM_RETURN_IF_ERROR(ReleaseDone(/*wait=*/true));
    acquired = store_->Acquire(key);
  }
  if (!acquired.ok()) return acquired.status();
  const ExpertBytes& bytes = *acquired;
  pinned_.push_back(key);
  if (layer == upcoming_layer_) {
    auto next = std::find(upcoming_.begin(), upcoming_.end(), expert);
    if (next != upcoming_.end() && ++next != upcoming_.end()) store_->Preload({layer, *next});
  }
  auto weights = std::make_unique<ExpertWeights>(shapes_[static_cast<size_t>(index)]);
  weights->gate.weight.data = bytes.data + bytes.part_offsets[0];
  weights->up.weight.data = bytes.data + bytes.part_offsets[1];
  weights->down.weight.data = bytes.data + bytes.part_offsets[2];
  handed_out_.push_back(std::move(weights));
  return handed_out_.back().get();
}

void StoredExpertProvider::Done(int32_t layer, int32_t expert) {
  const ExpertKey key{layer, expert};
  auto it = std::find(pinned_.begin(), pinned_.end(), key);
  if (it == pinned_.end()) return;
  if (async_backend_ != nullptr) {
    done_.push_back(key);
  } else {
    store_->Release(key);
  }
  pinned_.erase(it);
}

void StoredExpertProvider::EndStep() {
  upcoming_layer_ = -1;
  upcoming_.clear();
  // Experts Get handed out whose Done never came (a failed step) are released with the rest.
  done_.insert(done_.end(), pinned_.begin(), pinned_.end());
  pinned_.clear();
  // A failure of the wait is the device's; the executor's own wait reports it.
  (void)ReleaseDone(/*wait=*/true);
  // The experts a grouped step read at home come in for the next steps, now that nothing is
  // pinned (their use is counted: the next Acquire of one counts as usual).
  for (const ExpertKey key : to_load_) {
    read_at_home_[static_cast<size_t>(Index(key.layer, key.expert))] = 0;
    store_->Preload(key, /*miss_counted=*/true);
  }
  to_load_.clear();
  std::fill(from_slot_.begin(), from_slot_.end(), uint8_t{0});
  if (host_mode_ == ExpertHostCompute::kAuto && host_ops_ != nullptr) {
    // The loads so far say what a load costs now.
    const ExpertStoreStats stats = store_->Stats();
    if (stats.load_seconds > 0 && stats.bytes_loaded > 0) {
      cost_.load_bytes_per_second = static_cast<double>(stats.bytes_loaded) / stats.load_seconds;
    }
  }
  handed_out_.clear();
}

}  // namespace loom
