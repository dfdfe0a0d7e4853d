#include "engine/experts/expert_store.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <thread>
#include <vector>

#include "engine/common/logging.h"
#include "engine/common/status.h"
#include "engine/common/strings.h"

namespace loom {
namespace {

constexpr int64_t kPage = 4096;

std::string KeyText(ExpertKey key) {
  return StrCat("(layer ", key.layer, ", expert ", key.expert, ")");
}

int64_t RoundUp(int64_t value, int64_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

// Reads [pos, pos + len) of `fd` into `dst`, looping over short reads; returns the bytes read
// (less than len only at the end of the file) or -errno.
int64_t ReadFully(int fd, uint8_t* dst, int64_t pos, int64_t len) {
  int64_t done = 0;
  while (done < len) {
    const ssize_t n = ::pread(fd, dst + done, static_cast<size_t>(len - done), pos + done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return -errno;
    }
    if (n == 0) break;
    done += n;
  }
  return done;
}

// The CPU backend's tiers: slots in RAM, homes in the checkpoint's files.
class FileTiers final : public ExpertTiers {
 public:
  // Takes the descriptors (closed with the tiers); direct_fds[i] is -1 where O_DIRECT is off.
  FileTiers(std::vector<int> fds, std::vector<int> direct_fds, size_t slot_memory_bytes)
      : fds_(std::move(fds)), direct_fds_(std::move(direct_fds)) {
    // On 2 MiB boundaries and marked for transparent huge pages: gigabytes of slots are first
    // touched by O_DIRECT reads (one fault per 2 MiB instead of per 4 KiB) and then read by the
    // expert GEMVs (fewer TLB misses). One cold start of a 17 GB cache: 90.8 s before, 75.1 s
    // after.
    const size_t bytes = (slot_memory_bytes + kHugePage - 1) / kHugePage * kHugePage;
    slots_ = static_cast<uint8_t*>(std::aligned_alloc(kHugePage, bytes));
    if (slots_ != nullptr) ::madvise(slots_, bytes, MADV_HUGEPAGE);
    touched_.assign(bytes / kHugePage, false);
    UpdateDirect();
  }
  ~FileTiers() override {
    std::free(slots_);
    for (int fd : direct_fds_) {
      if (fd >= 0) ::close(fd);
    }
    for (int fd : fds_) ::close(fd);
  }

  uint8_t* slots() const override { return slots_; }
  bool direct_io() const override { return direct_.load(); }
  absl::Status Load(const ExpertLocation& location, std::span<const int64_t> part_offsets,
                    uint8_t* slot) override;

 private:
  static constexpr size_t kHugePage = size_t{2} << 20;

  // First touch of the slot memory in [begin, end) that no load has written yet, on two threads.
  // The kernel zeroes a fresh page before an O_DIRECT read may fill it, on the reading thread;
  // in a VM whose host backs guest memory on demand that ran at 0.4-0.8 GB/s, slower than the
  // disk (the 8x7B file: 24 of the 33 s before the server was ready went to it). Two threads
  // zero about twice as fast, and it happens once per page of the cache.
  void TouchFirst(uint8_t* begin, uint8_t* end) {
    std::vector<size_t> fresh;
    const size_t first = static_cast<size_t>(begin - slots_) / kHugePage;
    const size_t last = (static_cast<size_t>(end - slots_) + kHugePage - 1) / kHugePage;
    for (size_t h = first; h < last && h < touched_.size(); ++h) {
      if (!touched_[h]) fresh.push_back(h);
    }
    if (fresh.empty()) return;
    auto touch = [this](const size_t* h, const size_t* h_end) {
      for (; h < h_end; ++h) {
        volatile uint8_t* page = slots_ + *h * kHugePage;
        // The same value written back: a page another slot already filled keeps its bytes.
        for (size_t off = 0; off < kHugePage; off += kPage) page[off] = page[off];
      }
    };
    const size_t half = fresh.size() / 2;
    std::thread helper;
    if (half > 0) helper = std::thread(touch, fresh.data() + fresh.size() - half,
                                       fresh.data() + fresh.size());
    touch(fresh.data(), fresh.data() + fresh.size() - half);
    if (helper.joinable()) helper.join();
    for (size_t h : fresh) touched_[h] = true;
  }

  // Whether any file is still read with O_DIRECT.
  void UpdateDirect() {
    direct_ = std::any_of(direct_fds_.begin(), direct_fds_.end(), [](int fd) { return fd >= 0; });
  }

  const std::vector<int> fds_;
  // Per file: -1 when O_DIRECT is unavailable (or failed once). The loader's only.
  std::vector<int> direct_fds_;
  uint8_t* slots_ = nullptr;
  // Per 2 MiB of slot memory: whether it has been touched (TouchFirst). The loader's only.
  std::vector<bool> touched_;
  std::atomic<bool> direct_{false};
};

absl::Status FileTiers::Load(const ExpertLocation& location, std::span<const int64_t> part_offsets,
                             uint8_t* slot) {
  for (size_t i = 0; i < location.parts.size(); ++i) {
    const ExpertPart& part = location.parts[i];
    const size_t file = static_cast<size_t>(part.file);
    const int64_t in_page = part.offset % kPage;
    uint8_t* chunk = slot + part_offsets[i] - in_page;
    const int64_t need = in_page + part.bytes;
    if (slots_ != nullptr) TouchFirst(chunk, chunk + RoundUp(need, kPage));
    int64_t got = -EINVAL;
    if (direct_fds_[file] >= 0) {
      // Whole pages into the page-aligned chunk; the last may run past the end of the file.
      got = ReadFully(direct_fds_[file], chunk, part.offset - in_page, RoundUp(need, kPage));
      if (got == -EINVAL) {
        LOOM_LOG(kWarning, "O_DIRECT reads are refused here; expert reads go through the page "
                 "cache and drop it afterwards");
        ::close(direct_fds_[file]);
        direct_fds_[file] = -1;
        UpdateDirect();
      }
    }
    if (direct_fds_[file] < 0) {
      got = ReadFully(fds_[file], chunk + in_page, part.offset, part.bytes);
      if (got >= 0) got += in_page;
      (void)::posix_fadvise(fds_[file], part.offset, part.bytes, POSIX_FADV_DONTNEED);
    }
    if (got < 0) {
      return absl::DataLossError(StrCat("reading expert ", KeyText(location.key), ": ",
                                        std::strerror(static_cast<int>(-got))));
    }
    if (got < need) {
      return absl::DataLossError(StrCat("reading expert ", KeyText(location.key),
                                        ": the file ended ", need - got, " bytes early"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<ExpertStore>> ExpertStore::Create(
    const std::vector<std::string>& paths, std::vector<ExpertLocation> experts,
    const ExpertStoreOptions& options) {
  // Closed here unless the tiers took them.
  std::vector<int> fds, direct_fds;
  auto close_all = [&] {
    for (int fd : fds) ::close(fd);
    for (int fd : direct_fds) {
      if (fd >= 0) ::close(fd);
    }
    fds.clear();
    direct_fds.clear();
  };
  std::vector<int64_t> file_bytes;
  for (const std::string& path : paths) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      const std::string error = std::strerror(errno);
      close_all();
      return absl::NotFoundError(StrCat(path, ": ", error));
    }
    fds.push_back(fd);
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
      close_all();
      return absl::InvalidArgumentError(StrCat(path, ": not a regular file"));
    }
    file_bytes.push_back(st.st_size);
    direct_fds.push_back(options.direct_io ? ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT)
                                           : -1);
  }
  auto store = CreateWithTiers(
      paths, file_bytes, std::move(experts), options,
      [&](int64_t slot_bytes, int32_t num_slots)
          -> absl::StatusOr<std::unique_ptr<ExpertTiers>> {
        auto tiers = std::make_unique<FileTiers>(std::move(fds), std::move(direct_fds),
                                                 static_cast<size_t>(slot_bytes * num_slots));
        fds.clear();
        direct_fds.clear();
        if (tiers->slots() == nullptr) {
          return absl::ResourceExhaustedError(
              StrCat("cannot allocate ", num_slots, " expert slots of ", slot_bytes, " bytes"));
        }
        return tiers;
      });
  close_all();
  return store;
}

absl::StatusOr<std::unique_ptr<ExpertStore>> ExpertStore::CreateWithTiers(
    const std::vector<std::string>& home_names, const std::vector<int64_t>& home_bytes,
    std::vector<ExpertLocation> experts, const ExpertStoreOptions& options,
    const ExpertTiersFactory& make_tiers) {
  int64_t slot_bytes = kPage;
  absl::flat_hash_map<ExpertKey, Entry> entries;
  for (ExpertLocation& location : experts) {
    Entry entry;
    int64_t cursor = 0;
    for (const ExpertPart& part : location.parts) {
      if (part.file < 0 || part.file >= static_cast<int32_t>(home_bytes.size())) {
        return absl::InvalidArgumentError(
            StrCat("expert ", KeyText(location.key), " names file ", part.file, " of ",
                   home_bytes.size()));
      }
      const int64_t size = home_bytes[static_cast<size_t>(part.file)];
      if (part.offset < 0 || part.bytes <= 0 || part.offset > size - part.bytes) {
        return absl::DataLossError(StrCat(home_names[static_cast<size_t>(part.file)],
                                          ": expert ", KeyText(location.key), " needs bytes [",
                                          part.offset, ", ", part.offset + part.bytes,
                                          ") of a file of ", size, " bytes"));
      }
      entry.part_offsets.push_back(cursor + part.offset % kPage);
      cursor += RoundUp(part.offset % kPage + part.bytes, kPage);
    }
    if (location.parts.empty()) {
      return absl::InvalidArgumentError(StrCat("expert ", KeyText(location.key), " has no parts"));
    }
    slot_bytes = std::max(slot_bytes, cursor);
    const ExpertKey key = location.key;
    entry.location = std::move(location);
    if (!entries.emplace(key, std::move(entry)).second) {
      return absl::InvalidArgumentError(StrCat("expert ", KeyText(key), " is listed twice"));
    }
  }
  const int32_t num_slots = static_cast<int32_t>(std::clamp<int64_t>(
      options.budget_bytes / slot_bytes, 1,
      std::max<int64_t>(1, static_cast<int64_t>(entries.size()))));
  LOOM_ASSIGN_OR_RETURN(std::unique_ptr<ExpertTiers> tiers, make_tiers(slot_bytes, num_slots));
  auto store =
      std::unique_ptr<ExpertStore>(new ExpertStore(std::move(tiers), slot_bytes, num_slots));
  store->entries_ = std::move(entries);
  store->loader_ = std::thread([s = store.get()] { s->LoaderLoop(); });
  return store;
}

ExpertStore::ExpertStore(std::unique_ptr<ExpertTiers> tiers, int64_t slot_bytes,
                         int32_t num_slots)
    : tiers_(std::move(tiers)), slot_bytes_(slot_bytes), slots_(tiers_->slots()) {
  slot_owner_.resize(static_cast<size_t>(num_slots));
  slot_used_.assign(static_cast<size_t>(num_slots), false);
  stats_.num_slots = num_slots;
}

ExpertStore::~ExpertStore() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (loader_.joinable()) loader_.join();
}

absl::StatusOr<ExpertBytes> ExpertStore::Acquire(ExpertKey key) {
  std::unique_lock<std::mutex> lock(mu_);
  auto it = entries_.find(key);
  if (it == entries_.end()) return absl::NotFoundError(StrCat("no expert ", KeyText(key)));
  Entry& e = it->second;
  bool counted = false;
  if (e.preloaded) {
    ++stats_.misses;
    e.preloaded = false;
    counted = true;
  }
  for (;;) {
    if (e.state == State::kResident) {
      if (!counted) ++stats_.hits;
      if (e.from_prefetch) {
        ++stats_.prefetches_used;
        e.from_prefetch = false;
      }
      ++e.pins;
      e.last_use = ++clock_;
      return ExpertBytes{slots_ + int64_t{e.slot} * slot_bytes_, e.part_offsets};
    }
    if (!counted) {
      // Arriving from a prefetch, or loaded on demand for another caller: this call loads
      // nothing. Otherwise it is a miss.
      const bool arriving = e.state == State::kLoading;
      ++(arriving ? stats_.hits : stats_.misses);
      counted = true;
    }
    if (e.state == State::kHome || (e.state == State::kQueued && !e.demanded)) {
      e.state = State::kQueued;
      e.demanded = true;
      e.error = absl::OkStatus();
      demand_.push_back(key);
      cv_.notify_all();
    }
    ++e.waiters;
    const auto wait_start = std::chrono::steady_clock::now();
    loaded_cv_.wait(lock, [&] {
      return e.state == State::kResident || e.state == State::kHome || stopping_;
    });
    stats_.wait_seconds +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - wait_start).count();
    --e.waiters;
    if (stopping_) return absl::CancelledError("the expert store is stopping");
    if (e.state == State::kHome && !e.error.ok()) return e.error;
    // Resident: pinned at the top of the loop. Home without an error cannot happen while this
    // call waits (a waited-for expert is never evicted), but would simply be queued again.
  }
}

void ExpertStore::Preload(ExpertKey key, bool miss_counted) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = entries_.find(key);
    if (it == entries_.end()) return;
    Entry& e = it->second;
    if (e.state != State::kHome && !(e.state == State::kQueued && !e.demanded)) return;
    e.state = State::kQueued;
    e.demanded = true;
    e.preloaded = !miss_counted;
    e.error = absl::OkStatus();
    demand_.push_back(key);
  }
  cv_.notify_all();
}

std::optional<ExpertBytes> ExpertStore::PinIfResident(ExpertKey key) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(key);
  if (it == entries_.end() || it->second.state != State::kResident) return std::nullopt;
  Entry& e = it->second;
  ++e.pins;
  return ExpertBytes{slots_ + int64_t{e.slot} * slot_bytes_, e.part_offsets};
}

void ExpertStore::CountUse(ExpertKey key, bool from_slot) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(key);
  if (it == entries_.end()) return;
  Entry& e = it->second;
  if (!from_slot) {
    ++stats_.computed_at_home;
    return;
  }
  ++stats_.hits;
  e.preloaded = false;
  if (e.from_prefetch) {
    ++stats_.prefetches_used;
    e.from_prefetch = false;
  }
  e.last_use = ++clock_;
}

void ExpertStore::Release(ExpertKey key) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(key);
  if (it == entries_.end() || it->second.pins == 0) {
    LOOM_LOG(kError, "expert ", KeyText(key), " released more often than acquired");
    return;
  }
  --it->second.pins;
  it->second.last_use = ++clock_;
}

void ExpertStore::Prefetch(std::span<const ExpertKey> keys) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (ExpertKey old : prefetch_) {
      Entry& e = entries_.find(old)->second;
      if (e.state == State::kQueued && !e.demanded) {
        e.state = State::kHome;
        ++stats_.prefetches_cancelled;
      }
    }
    prefetch_.clear();
    for (ExpertKey key : keys) {
      auto it = entries_.find(key);
      if (it == entries_.end() || it->second.state != State::kHome) continue;
      it->second.state = State::kQueued;
      prefetch_.push_back(key);
    }
  }
  cv_.notify_all();
}

void ExpertStore::SetScores(std::span<const std::pair<ExpertKey, double>> scores) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [key, e] : entries_) e.score = 0;
  for (const auto& [key, score] : scores) {
    auto it = entries_.find(key);
    if (it != entries_.end()) it->second.score = score;
  }
}

bool ExpertStore::IsResident(ExpertKey key) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(key);
  return it != entries_.end() && it->second.state == State::kResident;
}

bool ExpertStore::IsResidentOrComing(ExpertKey key) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(key);
  if (it == entries_.end()) return false;
  const Entry& e = it->second;
  return e.state == State::kResident || e.state == State::kLoading ||
         (e.state == State::kQueued && e.demanded);
}

void ExpertStore::CountComputedAtHome() {
  std::lock_guard<std::mutex> lock(mu_);
  ++stats_.computed_at_home;
}

ExpertStoreStats ExpertStore::Stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  ExpertStoreStats s = stats_;
  s.direct_io = tiers_->direct_io();
  s.resident = 0;
  for (const auto& [key, e] : entries_) s.resident += e.state == State::kResident;
  return s;
}

int32_t ExpertStore::TakeSlot(double victim_score_below) {
  for (size_t i = 0; i < slot_used_.size(); ++i) {
    if (!slot_used_[i]) return static_cast<int32_t>(i);
  }
  Entry* victim = nullptr;
  for (size_t i = 0; i < slot_owner_.size(); ++i) {
    Entry& e = entries_[slot_owner_[i]];
    if (e.state != State::kResident || e.pins > 0 || e.waiters > 0 ||
        !(e.score < victim_score_below)) {
      continue;
    }
    if (victim == nullptr || e.score < victim->score ||
        (e.score == victim->score && e.last_use < victim->last_use)) {
      victim = &e;
    }
  }
  if (victim == nullptr) return -1;
  const int32_t slot = victim->slot;
  if (victim->from_prefetch) ++stats_.prefetches_wasted;
  ++stats_.evictions;
  victim->state = State::kHome;
  victim->slot = -1;
  victim->from_prefetch = false;
  slot_used_[static_cast<size_t>(slot)] = false;
  return slot;
}

void ExpertStore::LoaderLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stopping_ || !demand_.empty() || !prefetch_.empty(); });
    if (stopping_) return;
    const bool on_demand = !demand_.empty();
    std::deque<ExpertKey>& queue = on_demand ? demand_ : prefetch_;
    const ExpertKey key = queue.front();
    queue.pop_front();
    Entry& e = entries_[key];
    // Skip stale entries: promoted to demand meanwhile (their demand entry loads them), or not
    // queued any more.
    if (e.state != State::kQueued || e.demanded != on_demand) continue;
    const int32_t slot =
        TakeSlot(on_demand ? std::numeric_limits<double>::infinity() : e.score);
    if (slot < 0) {
      e.state = State::kHome;
      if (!on_demand) ++stats_.prefetches_dropped;
      if (on_demand) {
        e.demanded = false;
        e.error = absl::ResourceExhaustedError(
            StrCat("every one of the ", slot_used_.size(), " expert slots is in use; expert ",
                   KeyText(key), " cannot be loaded (raise the expert cache budget)"));
        loaded_cv_.notify_all();
      }
      continue;
    }
    e.state = State::kLoading;
    e.slot = slot;
    e.from_prefetch = !on_demand;
    if (!on_demand) ++stats_.prefetches_issued;
    slot_owner_[static_cast<size_t>(slot)] = key;
    slot_used_[static_cast<size_t>(slot)] = true;
    uint8_t* dst = slots_ + int64_t{slot} * slot_bytes_;
    lock.unlock();
    const auto start = std::chrono::steady_clock::now();
    absl::Status read = tiers_->Load(e.location, e.part_offsets, dst);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    lock.lock();
    stats_.load_seconds += seconds;
    e.demanded = false;
    if (read.ok()) {
      e.state = State::kResident;
      e.last_use = ++clock_;
      for (const ExpertPart& part : e.location.parts) stats_.bytes_loaded += part.bytes;
    } else {
      LOOM_LOG(kError, read.message());
      e.state = State::kHome;
      e.slot = -1;
      e.from_prefetch = false;
      e.error = std::move(read);
      slot_used_[static_cast<size_t>(slot)] = false;
    }
    loaded_cv_.notify_all();
  }
}

}  // namespace loom
