// The mixture-of-experts kernels: the reference routing against hand-computed softmax / top-k /
// renormalization and against tie orders recorded from torch.topk (CPU), the grouping by expert,
// and the CPU kernels against the reference on random inputs of odd sizes and thread counts.
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/cpu/moe.h"
#include "kernels/ref/moe_ref.h"
#include "tests/kernels/moe_routing.h"

namespace loom {
namespace {

struct Routed {
  std::vector<int32_t> ids;
  std::vector<float> weights;
};

Routed RouteOne(const std::vector<float>& logits, int32_t top_k, bool renormalize) {
  Routed out{std::vector<int32_t>(top_k), std::vector<float>(top_k)};
  ref::MoeRouteToken(logits.data(), static_cast<int32_t>(logits.size()), top_k, renormalize,
                     out.ids.data(), out.weights.data());
  return out;
}

TEST(MoeRefTest, SoftmaxThenTopKThenOptionalRenormalization) {
  const std::vector<float> logits = {0.5f, 2.0f, -1.0f, 1.0f};
  double sum = 0;
  for (float l : logits) sum += std::exp(double(l));
  const double p1 = std::exp(2.0) / sum, p3 = std::exp(1.0) / sum;

  const Routed plain = RouteOne(logits, 2, false);
  EXPECT_EQ(plain.ids, (std::vector<int32_t>{1, 3}));
  EXPECT_NEAR(plain.weights[0], p1, 1e-6);
  EXPECT_NEAR(plain.weights[1], p3, 1e-6);

  const Routed norm = RouteOne(logits, 2, true);
  EXPECT_EQ(norm.ids, plain.ids);
  EXPECT_NEAR(norm.weights[0], p1 / (p1 + p3), 1e-6);
  EXPECT_NEAR(norm.weights[1], p3 / (p1 + p3), 1e-6);
  EXPECT_NEAR(norm.weights[0] + norm.weights[1], 1.0f, 1e-6);

  // top_k = E: every expert, most probable first.
  EXPECT_EQ(RouteOne(logits, 4, false).ids, (std::vector<int32_t>{1, 3, 0, 2}));
}

// torch.topk(values, k).indices on the CPU (torch 2.15), for equal values: neither lowest nor
// highest index first. Equal logits give equal probabilities, so routing must agree.
TEST(MoeRefTest, TiesAreBrokenAsTorchTopk) {
  struct Case {
    std::vector<float> values;
    int32_t top_k;
    std::vector<int32_t> want;
  };
  std::vector<float> wide(64, 0.1f);
  for (int i = 60; i < 64; ++i) wide[i] = 0.2f;
  const std::vector<Case> cases = {
      {{0.1f, 0.3f, 0.3f, 0.2f}, 2, {1, 2}},
      {{0.3f, 0.1f, 0.3f, 0.3f}, 2, {2, 3}},
      {{0.25f, 0.25f, 0.25f, 0.25f}, 2, {2, 3}},
      {{0.2f, 0.1f, 0.2f, 0.2f, 0.1f, 0.2f, 0.0f, 0.0f}, 2, {2, 5}},
      {wide, 2, {63, 60}},  // k * 64 <= E: the partial-sort path
  };
  for (const Case& c : cases) {
    EXPECT_EQ(RouteOne(c.values, c.top_k, true).ids, c.want) << "E=" << c.values.size();
  }
}

TEST(MoeRefTest, GroupsPairsByExpertInTokenOrder) {
  // 3 tokens, top-2 of 4 experts.
  std::vector<int32_t> ids = {2, 0, 0, 2, 3, 2};
  std::vector<float> weights = {0.6f, 0.4f, 0.7f, 0.3f, 0.9f, 0.1f};
  std::vector<int32_t> offsets(5), tokens(6), token_rows(6, -1);
  std::vector<float> grouped(6);
  MoeRouteArgs args;
  args.num_tokens = 3;
  args.num_experts = 4;
  args.top_k = 2;
  args.expert_ids = ids.data();
  args.expert_weights = weights.data();
  args.expert_offsets = offsets.data();
  args.grouped_tokens = tokens.data();
  args.grouped_weights = grouped.data();
  args.token_rows = token_rows.data();
  ref::MoeGroup(args);
  EXPECT_EQ(offsets, (std::vector<int32_t>{0, 2, 2, 5, 6}));
  EXPECT_EQ(tokens, (std::vector<int32_t>{0, 1, 0, 1, 2, 2}));
  EXPECT_EQ(grouped, (std::vector<float>{0.4f, 0.7f, 0.6f, 0.3f, 0.1f, 0.9f}));
  // The grouped row of each (token, slot): the inverse of `tokens`.
  EXPECT_EQ(token_rows, (std::vector<int32_t>{2, 0, 1, 3, 5, 4}));
}

// MoeCombine adds each token's rows in ascending grouped row (ascending expert), so its sums are
// the floats that MoeScatterAdd called expert by expert makes; the CPU kernel's too.
TEST(MoeRefTest, CombineAddsWhatScatterAddAddsExpertByExpert) {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  cpu::ThreadPool pool(2);
  for (int32_t top_k : {1, 2, 3, 8}) {
    const int32_t num_tokens = 37, num_experts = 16, dim = 129;
    SCOPED_TRACE(testing::Message() << "k=" << top_k);
    std::vector<float> logits(size_t(num_tokens) * num_experts);
    for (float& l : logits) l = normal(rng);
    const size_t pairs = size_t(num_tokens) * top_k;
    moe_test::HostRouting route(num_tokens, num_experts, top_k);
    ref::MoeRoute(
        moe_test::RouteArgs(logits.data(), num_tokens, num_experts, top_k, false, route.buffers()));
    const std::vector<int32_t>& offsets = route.offsets;
    const std::vector<int32_t>& tokens = route.tokens;
    const std::vector<int32_t>& rows_of = route.token_rows;
    const std::vector<float>& grouped = route.grouped;
    std::vector<float> rows(pairs * dim), start(size_t(num_tokens) * dim);
    for (float& v : rows) v = normal(rng);
    for (float& v : start) v = normal(rng);
    std::vector<float> want = start, ref_got = start, cpu_got = start;
    for (int32_t e = 0; e < num_experts; ++e) {
      const int32_t first = offsets[e];
      cpu::MoeScatterAdd(pool, rows.data() + size_t(first) * dim, offsets[e + 1] - first, dim,
                         tokens.data() + first, grouped.data() + first, want.data());
    }
    ref::MoeCombine(rows.data(), num_tokens, top_k, dim, rows_of.data(), grouped.data(),
                    ref_got.data());
    cpu::MoeCombine(pool, rows.data(), num_tokens, top_k, dim, rows_of.data(), grouped.data(),
                    cpu_got.data());
    EXPECT_EQ(cpu_got, want);
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_NEAR(ref_got[i], want[i], 1e-6f * (1.0f + std::fabs(want[i]))) << i;
    }
  }
}

TEST(MoeRefTest, InitOutputAndScatterAdd) {
  const std::vector<float> shared = {1, 2, 3, 4};  // 2 tokens, dim 2
  const std::vector<float> gate = {0.0f, 100.0f};  // sigmoid: 0.5, 1
  std::vector<float> out(4);
  ref::MoeInitOutput(shared.data(), gate.data(), 2, 2, out.data());
  EXPECT_EQ(out, (std::vector<float>{0.5f, 1.0f, 3.0f, 4.0f}));
  ref::MoeInitOutput(nullptr, nullptr, 2, 2, out.data());
  EXPECT_EQ(out, (std::vector<float>(4, 0.0f)));
  const std::vector<float> rows = {1, 1, 2, 2};
  const std::vector<int32_t> tokens = {1, 0};
  const std::vector<float> w = {0.5f, 2.0f};
  ref::MoeScatterAdd(rows.data(), 2, 2, tokens.data(), w.data(), out.data());
  EXPECT_EQ(out, (std::vector<float>{4.0f, 4.0f, 0.5f, 0.5f}));
}

class MoeCpuTest : public ::testing::TestWithParam<int> {};

TEST_P(MoeCpuTest, MatchesReference) {
  cpu::ThreadPool pool(GetParam());
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  for (int32_t num_experts : {1, 5, 8, 60, 128}) {
    for (int32_t top_k : {1, 2, 4}) {
      if (top_k > num_experts) continue;
      for (int32_t num_tokens : {1, 7, 300}) {
        for (bool renormalize : {false, true}) {
          SCOPED_TRACE(testing::Message() << "E=" << num_experts << " k=" << top_k
                                          << " T=" << num_tokens << " renorm=" << renormalize);
          const int64_t stride = num_experts + 3;
          std::vector<float> logits(size_t(num_tokens) * stride);
          for (float& l : logits) l = normal(rng);
          const size_t pairs = size_t(num_tokens) * top_k;
          struct Out {
            std::vector<int32_t> ids, offsets, tokens;
            std::vector<float> weights, grouped;
          } want, got;
          auto run = [&](Out& o, bool cpu) {
            o.ids.assign(pairs, -1);
            o.weights.assign(pairs, 0);
            o.offsets.assign(num_experts + 1, -1);
            o.tokens.assign(pairs, -1);
            o.grouped.assign(pairs, 0);
            MoeRouteArgs a;
            a.logits = logits.data();
            a.logits_stride = stride;
            a.num_tokens = num_tokens;
            a.num_experts = num_experts;
            a.top_k = top_k;
            a.renormalize = renormalize;
            a.expert_ids = o.ids.data();
            a.expert_weights = o.weights.data();
            a.expert_offsets = o.offsets.data();
            a.grouped_tokens = o.tokens.data();
            a.grouped_weights = o.grouped.data();
            cpu ? cpu::MoeRoute(pool, a) : ref::MoeRoute(a);
          };
          run(want, false);
          run(got, true);
          EXPECT_EQ(got.ids, want.ids);
          EXPECT_EQ(got.weights, want.weights);
          EXPECT_EQ(got.offsets, want.offsets);
          EXPECT_EQ(got.tokens, want.tokens);
          EXPECT_EQ(got.grouped, want.grouped);
          EXPECT_EQ(want.offsets.back(), static_cast<int32_t>(pairs));

          // Gather and scatter-add the rows of the busiest expert.
          const int32_t dim = 33;
          std::vector<float> x(size_t(num_tokens) * (dim + 5));
          for (float& v : x) v = normal(rng);
          int32_t busiest = 0;
          for (int32_t e = 1; e < num_experts; ++e) {
            if (want.offsets[e + 1] - want.offsets[e] >
                want.offsets[busiest + 1] - want.offsets[busiest]) {
              busiest = e;
            }
          }
          const int32_t first = want.offsets[busiest];
          const int32_t rows = want.offsets[busiest + 1] - first;
          std::vector<float> g_want(size_t(rows) * dim), g_got(size_t(rows) * dim);
          ref::GatherRows(x.data(), dim + 5, want.tokens.data() + first, rows, dim, g_want.data());
          cpu::GatherRows(pool, x.data(), dim + 5, want.tokens.data() + first, rows, dim,
                          g_got.data());
          EXPECT_EQ(g_got, g_want);
          std::vector<float> gate(num_tokens);
          for (float& v : gate) v = normal(rng);
          std::vector<float> o_want(size_t(num_tokens) * dim), o_got(o_want.size());
          ref::MoeInitOutput(x.data(), gate.data(), num_tokens, dim, o_want.data());
          cpu::MoeInitOutput(pool, x.data(), gate.data(), num_tokens, dim, o_got.data());
          ref::MoeScatterAdd(g_want.data(), rows, dim, want.tokens.data() + first,
                             want.grouped.data() + first, o_want.data());
          cpu::MoeScatterAdd(pool, g_got.data(), rows, dim, want.tokens.data() + first,
                             want.grouped.data() + first, o_got.data());
          for (size_t i = 0; i < o_want.size(); ++i) {
            ASSERT_NEAR(o_got[i], o_want[i], 1e-6f * (1.0f + std::fabs(o_want[i]))) << i;
          }
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Threads, MoeCpuTest, ::testing::Values(1, 3));

}  // namespace
}  // namespace loom
