// The expert store over a real file: bytes come back exactly (parts at unaligned offsets), pinned
// experts survive any pressure, eviction follows scores then recency, prefetches are counted as
// used, wasted, cancelled or dropped, a truncated file fails one expert and not the store, and
// concurrent callers see consistent bytes.
#include "engine/experts/expert_store.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace loom {
namespace {

constexpr int kLayers = 3;
constexpr int kExperts = 4;
constexpr int kParts = 3;

// A file holding kLayers x kExperts experts of kParts parts each, at odd offsets and sizes, every
// byte a function of (layer, expert, part, index).
class ExpertFile {
 public:
  ExpertFile() : path_(::testing::TempDir() + "/expert_store_test." + std::to_string(getpid())) {
    std::ofstream out(path_, std::ios::binary);
    int64_t offset = 0;
    std::mt19937 rng(3);
    for (int l = 0; l < kLayers; ++l) {
      for (int e = 0; e < kExperts; ++e) {
        ExpertLocation location{ExpertKey{l, e}, {}};
        for (int p = 0; p < kParts; ++p) {
          const int64_t gap = 1 + static_cast<int64_t>(rng() % 700);  // unaligned starts
          const int64_t bytes = 5000 + static_cast<int64_t>(rng() % 9000);
          out << std::string(static_cast<size_t>(gap), '\xee');
          offset += gap;
          std::string data(static_cast<size_t>(bytes), '\0');
          for (int64_t i = 0; i < bytes; ++i) data[static_cast<size_t>(i)] = Byte(l, e, p, i);
          out << data;
          location.parts.push_back({0, offset, bytes});
          offset += bytes;
        }
        locations_.push_back(location);
      }
    }
    size_ = offset;
  }
  ~ExpertFile() { std::remove(path_.c_str()); }

  static char Byte(int l, int e, int p, int64_t i) {
    return static_cast<char>((l * 131 + e * 31 + p * 7 + i * 13 + i / 251) & 0xff);
  }
  // Whether `bytes` holds expert (l, e) exactly.
  bool Matches(const ExpertBytes& bytes, int l, int e) const {
    const ExpertLocation& loc = locations_[static_cast<size_t>(l * kExperts + e)];
    if (bytes.part_offsets.size() != loc.parts.size()) return false;
    for (int p = 0; p < kParts; ++p) {
      const uint8_t* data = bytes.data + bytes.part_offsets[static_cast<size_t>(p)];
      for (int64_t i = 0; i < loc.parts[static_cast<size_t>(p)].bytes; ++i) {
        if (static_cast<char>(data[i]) != Byte(l, e, p, i)) return false;
      }
    }
    return true;
  }
  const std::string& path() const { return path_; }
  const std::vector<ExpertLocation>& locations() const { return locations_; }
  int64_t size() const { return size_; }

 private:
  std::string path_;
  std::vector<ExpertLocation> locations_;
  int64_t size_ = 0;
};

std::unique_ptr<ExpertStore> Make(const ExpertFile& file, int slots, bool direct_io = true) {
  // Slot size is known only after creation: make one to learn it, then the real one.
  auto probe = ExpertStore::Create({file.path()}, file.locations(), {.budget_bytes = 1});
  EXPECT_TRUE(probe.ok()) << probe.status();
  auto store = ExpertStore::Create(
      {file.path()}, file.locations(),
      {.budget_bytes = (*probe)->slot_bytes() * slots, .direct_io = direct_io});
  EXPECT_TRUE(store.ok()) << store.status();
  EXPECT_EQ((*store)->Stats().num_slots, slots);
  return *std::move(store);
}

bool WaitFor(const std::function<bool()>& done) {
  for (int i = 0; i < 2000; ++i) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return done();
}

TEST(ExpertStoreTest, AcquireReturnsTheFilesBytesWhateverTheOffsets) {
  ExpertFile file;
  auto store = Make(file, 2);
  for (int round = 0; round < 2; ++round) {
    for (int l = 0; l < kLayers; ++l) {
      for (int e = 0; e < kExperts; ++e) {
        absl::StatusOr<ExpertBytes> bytes = store->Acquire({l, e});
        ASSERT_TRUE(bytes.ok()) << bytes.status();
        EXPECT_TRUE(file.Matches(*bytes, l, e)) << "layer " << l << " expert " << e;
        store->Release({l, e});
      }
    }
  }
  const ExpertStoreStats s = store->Stats();
  EXPECT_EQ(s.misses, 2 * kLayers * kExperts) << "two slots cannot hold a cycle of twelve";
  EXPECT_EQ(s.hits, 0);
  EXPECT_EQ(s.resident, 2);
  EXPECT_GT(s.bytes_loaded, 2 * kLayers * kExperts * kParts * 5000);
  // Every miss waited for its load; the loader's reads are inside those waits.
  EXPECT_GT(s.wait_seconds, 0.0);
  EXPECT_GE(s.wait_seconds, s.load_seconds * 0.5);
  // Twice in a row: the second is a hit, and a hit does not wait.
  ASSERT_TRUE(store->Acquire({0, 0}).ok());
  store->Release({0, 0});
  const double waited = store->Stats().wait_seconds;
  ASSERT_TRUE(store->Acquire({0, 0}).ok());
  store->Release({0, 0});
  EXPECT_EQ(store->Stats().hits, 1);
  EXPECT_EQ(store->Stats().wait_seconds, waited);
}

TEST(ExpertStoreTest, BufferedReadsGiveTheSameBytes) {
  ExpertFile file;
  auto store = Make(file, 2, /*direct_io=*/false);
  EXPECT_FALSE(store->Stats().direct_io);
  for (int l = 0; l < kLayers; ++l) {
    for (int e = 0; e < kExperts; ++e) {
      absl::StatusOr<ExpertBytes> bytes = store->Acquire({l, e});
      ASSERT_TRUE(bytes.ok()) << bytes.status();
      EXPECT_TRUE(file.Matches(*bytes, l, e)) << "layer " << l << " expert " << e;
      store->Release({l, e});
    }
  }
}

TEST(ExpertStoreTest, PinnedExpertsAreNeverEvicted) {
  ExpertFile file;
  auto store = Make(file, 2);
  absl::StatusOr<ExpertBytes> a = store->Acquire({0, 0});
  absl::StatusOr<ExpertBytes> b = store->Acquire({0, 1});
  ASSERT_TRUE(a.ok() && b.ok());
  absl::StatusOr<ExpertBytes> c = store->Acquire({0, 2});
  EXPECT_EQ(c.status().code(), absl::StatusCode::kResourceExhausted) << c.status();
  store->Release({0, 1});
  c = store->Acquire({0, 2});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(store->IsResident({0, 0}));
  EXPECT_FALSE(store->IsResident({0, 1}));
  EXPECT_TRUE(file.Matches(*a, 0, 0)) << "the pinned expert's bytes were overwritten";
  EXPECT_TRUE(file.Matches(*c, 0, 2));
  store->Release({0, 0});
  store->Release({0, 2});
}

TEST(ExpertStoreTest, EvictsTheLowestScoreThenTheLeastRecentlyUsed) {
  ExpertFile file;
  auto store = Make(file, 2);
  for (int e : {0, 1}) {
    ASSERT_TRUE(store->Acquire({1, e}).ok());
    store->Release({1, e});
  }
  // (1,0) is older, but scored higher: (1,1) goes.
  const std::pair<ExpertKey, double> scores[] = {{{1, 0}, 5.0}};
  store->SetScores(scores);
  ASSERT_TRUE(store->Acquire({1, 2}).ok());
  store->Release({1, 2});
  EXPECT_TRUE(store->IsResident({1, 0}));
  EXPECT_FALSE(store->IsResident({1, 1}));
  // Without scores, recency decides: (1,0) is now the older one.
  store->SetScores({});
  ASSERT_TRUE(store->Acquire({1, 3}).ok());
  store->Release({1, 3});
  EXPECT_FALSE(store->IsResident({1, 0}));
  EXPECT_TRUE(store->IsResident({1, 2}));
}

TEST(ExpertStoreTest, PrefetchedExpertsAreHitsAndCountedAsUsedOrWasted) {
  ExpertFile file;
  auto store = Make(file, 2);
  const ExpertKey wanted[] = {{2, 1}, {2, 3}};
  store->Prefetch(wanted);
  ASSERT_TRUE(WaitFor([&] { return store->IsResident({2, 1}) && store->IsResident({2, 3}); }));
  absl::StatusOr<ExpertBytes> got = store->Acquire({2, 1});
  ASSERT_TRUE(got.ok());
  EXPECT_TRUE(file.Matches(*got, 2, 1));
  store->Release({2, 1});
  ExpertStoreStats s = store->Stats();
  EXPECT_EQ(s.prefetches_issued, 2);
  EXPECT_EQ(s.prefetches_used, 1);
  EXPECT_EQ(s.hits, 1);
  EXPECT_EQ(s.misses, 0);
  // An on-demand load evicts the unused prefetch (the older of the two): wasted.
  ASSERT_TRUE(store->Acquire({0, 0}).ok());
  store->Release({0, 0});
  s = store->Stats();
  EXPECT_EQ(s.prefetches_wasted, 1);
  EXPECT_FALSE(store->IsResident({2, 3}));
}

TEST(ExpertStoreTest, PrefetchesNeverEvictPinnedOrHigherScoredExperts) {
  ExpertFile file;
  auto store = Make(file, 2);
  absl::StatusOr<ExpertBytes> pinned = store->Acquire({0, 0});
  ASSERT_TRUE(pinned.ok());
  ASSERT_TRUE(store->Acquire({0, 1}).ok());
  store->Release({0, 1});
  const std::pair<ExpertKey, double> scores[] = {{{0, 1}, 2.0}, {{1, 1}, 1.0}};
  store->SetScores(scores);
  const ExpertKey hint[] = {{1, 1}};
  store->Prefetch(hint);
  ASSERT_TRUE(WaitFor([&] { return store->Stats().prefetches_dropped == 1; }));
  EXPECT_TRUE(store->IsResident({0, 0}));
  EXPECT_TRUE(store->IsResident({0, 1}));
  EXPECT_FALSE(store->IsResident({1, 1}));
  // Scored above the unpinned resident one, the prefetch goes in.
  const std::pair<ExpertKey, double> higher[] = {{{0, 1}, 2.0}, {{1, 1}, 3.0}};
  store->SetScores(higher);
  store->Prefetch(hint);
  ASSERT_TRUE(WaitFor([&] { return store->IsResident({1, 1}); }));
  EXPECT_FALSE(store->IsResident({0, 1}));
  EXPECT_TRUE(file.Matches(*pinned, 0, 0));
  store->Release({0, 0});
}

TEST(ExpertStoreTest, ReplacedPrefetchesAreCancelledOrAccountedFor) {
  ExpertFile file;
  auto store = Make(file, kLayers * kExperts);
  std::vector<ExpertKey> first;
  for (int l = 0; l < kLayers; ++l) {
    for (int e = 0; e < kExperts; ++e) first.push_back({l, e});
  }
  store->Prefetch(first);
  store->Prefetch({});  // stale: whatever has not started is cancelled
  ASSERT_TRUE(WaitFor([&] {
    const ExpertStoreStats s = store->Stats();
    return s.prefetches_issued + s.prefetches_cancelled == kLayers * kExperts &&
           s.resident == s.prefetches_issued;
  })) << "every hint is either loaded or cancelled";
  const ExpertStoreStats s = store->Stats();
  EXPECT_EQ(s.resident, s.prefetches_issued);
  EXPECT_EQ(s.prefetches_dropped, 0);
}

TEST(ExpertStoreTest, LocationsOutsideTheFileAreRefusedAtCreation) {
  ExpertFile file;
  std::vector<ExpertLocation> bad = file.locations();
  bad[5].parts[2].offset = file.size() - 10;
  absl::StatusOr<std::unique_ptr<ExpertStore>> store =
      ExpertStore::Create({file.path()}, bad, {.budget_bytes = 1 << 20});
  EXPECT_EQ(store.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(store.status().message().find("layer 1, expert 1"), std::string::npos)
      << store.status();
  std::vector<ExpertLocation> other_file = file.locations();
  other_file[3].parts[0].file = 1;
  EXPECT_EQ(ExpertStore::Create({file.path()}, other_file, {.budget_bytes = 1 << 20})
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  std::vector<ExpertLocation> twice = file.locations();
  twice.push_back(twice.front());
  EXPECT_EQ(ExpertStore::Create({file.path()}, twice, {.budget_bytes = 1 << 20}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ExpertStore::Create({file.path() + ".missing"}, file.locations(), {}).status().code(),
            absl::StatusCode::kNotFound);
}

TEST(ExpertStoreTest, AFileTruncatedAfterOpeningFailsOneExpertNotTheStore) {
  ExpertFile file;
  auto store = Make(file, 2);
  const ExpertLocation& last = file.locations().back();
  ASSERT_EQ(::truncate(file.path().c_str(), last.parts[0].offset + 10), 0);
  absl::StatusOr<ExpertBytes> gone = store->Acquire(last.key);
  EXPECT_EQ(gone.status().code(), absl::StatusCode::kDataLoss) << gone.status();
  absl::StatusOr<ExpertBytes> fine = store->Acquire({0, 0});
  ASSERT_TRUE(fine.ok()) << fine.status();
  EXPECT_TRUE(file.Matches(*fine, 0, 0));
  store->Release({0, 0});
  EXPECT_EQ(store->Acquire({9, 9}).status().code(), absl::StatusCode::kNotFound);
}

TEST(ExpertStoreTest, ConcurrentCallersSeeConsistentBytes) {
  ExpertFile file;
  // Three pins and a prefetch in flight at most.
  auto store = Make(file, 4);
  std::atomic<int> wrong{0}, failed{0};
  constexpr int kThreads = 3, kCalls = 150;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(static_cast<uint32_t>(t + 1));
      for (int i = 0; i < kCalls; ++i) {
        const int l = static_cast<int>(rng() % kLayers), e = static_cast<int>(rng() % kExperts);
        if (i % 10 == 0) {
          const ExpertKey hint[] = {{static_cast<int>(rng() % kLayers), 0}};
          store->Prefetch(hint);
        }
        absl::StatusOr<ExpertBytes> b = store->Acquire({l, e});
        if (!b.ok()) {
          ++failed;
          continue;
        }
        if (!file.Matches(*b, l, e)) ++wrong;
        store->Release({l, e});
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(failed.load(), 0);
  const ExpertStoreStats s = store->Stats();
  EXPECT_EQ(s.hits + s.misses, kThreads * kCalls);
}

}  // namespace
}  // namespace loom
