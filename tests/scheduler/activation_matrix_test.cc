#include "scheduler/experts/activation_matrix.h"

#include <cmath>
#include <vector>

#include "gtest/gtest.h"

namespace loom {
namespace {

ActivationMatrix Matrix(int32_t num_layers, int32_t num_experts, std::vector<int32_t> counts) {
  absl::StatusOr<ActivationMatrix> m = ActivationMatrix::FromCounts(num_layers, num_experts, counts);
  EXPECT_TRUE(m.ok()) << m.status();
  return m.ok() ? *m : ActivationMatrix();
}

TEST(ActivationMatrixTest, FromCountsRejectsBadShapesAndNegativeCounts) {
  EXPECT_EQ(ActivationMatrix::FromCounts(0, 4, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ActivationMatrix::FromCounts(2, 2, std::vector<int32_t>{1, 2, 3}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ActivationMatrix::FromCounts(1, 2, std::vector<int32_t>{1, -1}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ActivationMatrix::Zeros(3, -1).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ActivationMatrixTest, CountsAreRowMajorAndTotalsFollow) {
  ActivationMatrix m = Matrix(2, 3, {1, 0, 2, 0, 5, 0});
  EXPECT_EQ(m.count({0, 2}), 2);
  EXPECT_EQ(m.count({1, 1}), 5);
  EXPECT_EQ(m.layer_total(0), 3);
  EXPECT_EQ(m.layer_total(1), 5);
  EXPECT_EQ(m.total(), 8);

  ASSERT_TRUE(m.Add({1, 2}, 4).ok());
  EXPECT_EQ(m.count({1, 2}), 4);
  EXPECT_EQ(m.layer_total(1), 9);
  EXPECT_EQ(m.Add({2, 0}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(m.Add({0, 3}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(m.Add({0, 0}, -1).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(m.total(), 12);
}

TEST(ActivationMatrixTest, AddCountsAndMergeCheckTheShapeAndChangeNothingOnError) {
  ActivationMatrix m = Matrix(2, 2, {1, 1, 1, 1});
  const std::vector<int32_t> step = {0, 2, 3, 0};
  ASSERT_TRUE(m.AddCounts(2, 2, step).ok());
  EXPECT_EQ(m.count({0, 1}), 3);
  EXPECT_EQ(m.count({1, 0}), 4);
  EXPECT_EQ(m.total(), 9);

  EXPECT_EQ(m.AddCounts(1, 4, step).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(m.AddCounts(2, 2, std::vector<int32_t>{1, 1, 1}).code(),
            absl::StatusCode::kInvalidArgument);
  // A negative count anywhere refuses the whole record, not just the tail after it.
  EXPECT_EQ(m.AddCounts(2, 2, std::vector<int32_t>{5, 5, 5, -1}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(m.total(), 9);
  EXPECT_EQ(m.count({0, 0}), 1);

  EXPECT_EQ(m.Merge(Matrix(2, 3, {1, 1, 1, 1, 1, 1})).code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(m.Merge(Matrix(2, 2, {1, 0, 0, 1})).ok());
  EXPECT_EQ(m.count({0, 0}), 2);
  EXPECT_EQ(m.count({1, 1}), 2);
  EXPECT_EQ(m.layer_total(0), 5);
  EXPECT_EQ(m.total(), 11);
}

TEST(ActivationMatrixTest, NormalizedRowSumsToOneOrIsZero) {
  ActivationMatrix m = Matrix(2, 4, {1, 3, 0, 4, 0, 0, 0, 0});
  const std::vector<double> row = m.NormalizedRow(0);
  EXPECT_DOUBLE_EQ(row[0], 0.125);
  EXPECT_DOUBLE_EQ(row[1], 0.375);
  EXPECT_DOUBLE_EQ(row[3], 0.5);
  EXPECT_EQ(m.NormalizedRow(1), std::vector<double>(4, 0.0));
}

TEST(ActivationMatrixTest, SimilarityIsCosinePerLayerAveraged) {
  ActivationMatrix a = Matrix(2, 2, {1, 0, 1, 1});
  ActivationMatrix b = Matrix(2, 2, {1, 0, 1, 0});
  // Layer 0: cos = 1; layer 1: cos([1,1],[1,0]) = 1/sqrt(2).
  EXPECT_NEAR(a.Similarity(b), (1.0 + 1.0 / std::sqrt(2.0)) / 2.0, 1e-12);
  EXPECT_NEAR(a.Similarity(a), 1.0, 1e-12);
  // Scale does not matter: a long request matches a short one with the same shape.
  ActivationMatrix scaled = Matrix(2, 2, {7, 0, 7, 7});
  EXPECT_NEAR(a.Similarity(scaled), 1.0, 1e-12);
  // Disjoint experts: 0.
  EXPECT_DOUBLE_EQ(Matrix(1, 2, {1, 0}).Similarity(Matrix(1, 2, {0, 3})), 0.0);
}

TEST(ActivationMatrixTest, SimilarityOverFirstLayersOnly) {
  ActivationMatrix a = Matrix(3, 2, {1, 0, 1, 0, 1, 0});
  ActivationMatrix b = Matrix(3, 2, {1, 0, 1, 0, 0, 1});
  EXPECT_NEAR(a.Similarity(b, 2), 1.0, 1e-12);
  EXPECT_NEAR(a.Similarity(b, 3), 2.0 / 3.0, 1e-12);
  EXPECT_NEAR(a.Similarity(b, 99), 2.0 / 3.0, 1e-12);  // clamped
  EXPECT_DOUBLE_EQ(a.Similarity(b, 0), 0.0);
}

TEST(ActivationMatrixTest, SimilaritySkipsLayersWithoutQueryTokens) {
  // The query has run only layer 0: layers 1 and 2 are no evidence, so a perfect match on layer
  // 0 is a perfect match, whatever the other matrix holds later.
  ActivationMatrix partial = Matrix(3, 2, {2, 0, 0, 0, 0, 0});
  ActivationMatrix full = Matrix(3, 2, {5, 0, 0, 5, 5, 0});
  EXPECT_NEAR(partial.Similarity(full), 1.0, 1e-12);
  // The other way round the layers are evidence, and `partial` has none there: cosine 0 each.
  EXPECT_NEAR(full.Similarity(partial), 1.0 / 3.0, 1e-12);
  // A query with no tokens at all matches nothing; another shape matches nothing.
  EXPECT_DOUBLE_EQ(Matrix(3, 2, {0, 0, 0, 0, 0, 0}).Similarity(full), 0.0);
  EXPECT_DOUBLE_EQ(partial.Similarity(Matrix(2, 3, {1, 1, 1, 1, 1, 1})), 0.0);
}

}  // namespace
}  // namespace loom
