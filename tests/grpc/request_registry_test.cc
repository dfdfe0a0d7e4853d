#include "server/grpc/request_registry.h"

#include <set>
#include <string>

#include "gtest/gtest.h"

namespace loom {
namespace {

TEST(RequestRegistryTest, AssignedNamesAreRandom128BitHex) {
  RequestRegistry registry;
  std::set<std::string> names;
  for (int i = 0; i < 100; ++i) {
    const std::string name = registry.Add("peer:a", "", RequestId(7));
    ASSERT_EQ(name.size(), 5u + 32u) << name;
    EXPECT_EQ(name.substr(0, 5), "grpc-");
    EXPECT_EQ(name.find_first_not_of("0123456789abcdef", 5), std::string::npos) << name;
    names.insert(name);
  }
  EXPECT_EQ(names.size(), 100u);  // no repeats, and nothing like a counter
}

TEST(RequestRegistryTest, NamesComeFromTheGivenRandomness) {
  RequestRegistry registry([](std::span<uint8_t> out) {
    for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<uint8_t>(i);
  });
  EXPECT_EQ(registry.Add("o", "", RequestId(1)), "grpc-000102030405060708090a0b0c0d0e0f");
}

TEST(RequestRegistryTest, OnlyTheOwnerFindsItsRequest) {
  RequestRegistry registry;
  const std::string name = registry.Add("key:alice", "job-1", RequestId(3));
  EXPECT_EQ(name, "job-1");
  ASSERT_TRUE(registry.Find("key:alice", "job-1").has_value());
  EXPECT_EQ(*registry.Find("key:alice", "job-1"), RequestId(3));
  // Somebody else's name is exactly as unknown as a name nobody uses.
  EXPECT_FALSE(registry.Find("key:mallory", "job-1").has_value());
  EXPECT_FALSE(registry.Find("key:alice", "job-2").has_value());
  registry.Remove("key:mallory", "job-1");  // not theirs to remove
  EXPECT_TRUE(registry.Find("key:alice", "job-1").has_value());
  registry.Remove("key:alice", "job-1");
  EXPECT_FALSE(registry.Find("key:alice", "job-1").has_value());
}

TEST(RequestRegistryTest, OwnersHaveTheirOwnNamespaces) {
  RequestRegistry registry;
  EXPECT_EQ(registry.Add("peer:a", "same", RequestId(1)), "same");
  // Another owner's use of a name neither clashes nor shows.
  EXPECT_EQ(registry.Add("peer:b", "same", RequestId(2)), "same");
  EXPECT_EQ(*registry.Find("peer:a", "same"), RequestId(1));
  EXPECT_EQ(*registry.Find("peer:b", "same"), RequestId(2));
  // The owner's own running name gets a random suffix.
  const std::string again = registry.Add("peer:a", "same", RequestId(3));
  EXPECT_EQ(again.substr(0, 5), "same-");
  EXPECT_EQ(again.size(), 5u + 32u);
  EXPECT_EQ(*registry.Find("peer:a", again), RequestId(3));
  EXPECT_EQ(*registry.Find("peer:a", "same"), RequestId(1));
}

}  // namespace
}  // namespace loom
