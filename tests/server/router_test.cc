// The HTTP routes of server/api/router.h driven in-process (no sockets): probes that tell the
// truth about the engine loop, GET /v1/models/{id}, the Bearer scheme in any case, and /metrics
// behind the API key or open as configured.
#include "server/api/router.h"

#include <atomic>
#include <memory>
#include <string>

#include "engine/common/json.h"
#include "gtest/gtest.h"
#include "tests/scheduler/fake_executor.h"

namespace loom::api {
namespace {

using loom::testing::FakeExecutor;

// Keeps what the route sent.
class RecordingResponder : public http::Responder {
 public:
  void Send(http::Response response) override { response_ = std::move(response); }
  void StartStream(int status, std::string, std::vector<std::pair<std::string, std::string>>) override {
    response_.status = status;
  }
  void Write(std::string chunk) override { response_.body += chunk; }
  void End() override {}
  void OnCancel(std::function<void()>) override {}
  bool cancelled() const override { return false; }
  const http::Response& response() const { return response_; }

 private:
  http::Response response_;
};

ModelInfo Model() {
  ModelInfo info;
  info.name = "tiny";
  info.vocab_size = 64;
  info.max_context_len = 256;
  return info;
}

KvCapacity Capacity() {
  KvCapacity c;
  c.num_blocks = 32;
  c.block_size = 4;
  c.max_num_batched_tokens = 64;
  c.max_num_seqs = 8;
  return c;
}

class RouterTest : public ::testing::Test {
 protected:
  RouterTest()
      : executor_(Model(), Capacity()),
        loop_(executor_, SchedulerConfig{}, [this] { return now_.load(); }),
        metrics_(MetricsOptions{"tiny", false, 256}),
        work_(1) {
    context_.config.api_keys = {"secret"};
    context_.model = Model();
    context_.capacity = Capacity();
    context_.model_id = "org/tiny model";
    context_.engine = &loop_;
    context_.metrics = &metrics_;
    context_.now_ms = [this] { return now_.load(); };
    context_.warmed_up = true;
  }

  http::Response Get(const std::string& path, const std::string& authorization = "Bearer secret") {
    http::Request request;
    request.method = "GET";
    request.path = path;
    if (!authorization.empty()) request.headers.emplace_back("authorization", authorization);
    auto responder = std::make_shared<RecordingResponder>();
    MakeRouter(context_, work_, "test")(request, responder);
    return responder->response();
  }

  std::atomic<int64_t> now_{1000};
  FakeExecutor executor_;
  EngineLoop loop_;
  ServerMetrics metrics_;
  WorkQueue work_;
  ServingContext context_;
};

std::string ErrorMessage(const http::Response& r) {
  absl::StatusOr<Json> body = Json::Parse(r.body, "response");
  if (!body.ok()) return "";
  std::optional<Json> error = body->Find("error");
  if (!error.has_value()) return "";
  absl::StatusOr<std::string> message = error->GetString("message");
  return message.ok() ? *message : "";
}

TEST_F(RouterTest, ProbesAreOkWhenTheLoopIsIdleAndWarm) {
  EXPECT_EQ(Get("/livez", "").status, 200);
  EXPECT_EQ(Get("/readyz", "").status, 200);
  EXPECT_EQ(Get("/health", "").status, 200);
}

TEST_F(RouterTest, ReadinessFailsWhileWarmingUpAndWhileDraining) {
  context_.warmed_up = false;
  http::Response r = Get("/readyz", "");
  EXPECT_EQ(r.status, 503);
  EXPECT_EQ(ErrorMessage(r), "warming up");
  EXPECT_EQ(Get("/livez", "").status, 200);  // alive all the same
  context_.warmed_up = true;
  context_.draining = true;
  r = Get("/health", "");
  EXPECT_EQ(r.status, 503);
  EXPECT_EQ(ErrorMessage(r), "draining");
}

TEST_F(RouterTest, RetrievesTheServedModelAndAnswers404ForAnyOther) {
  http::Response r = Get("/v1/models/org/tiny%20model");
  ASSERT_EQ(r.status, 200) << r.body;
  absl::StatusOr<Json> body = Json::Parse(r.body, "response");
  ASSERT_TRUE(body.ok());
  EXPECT_EQ(*body->GetString("id"), "org/tiny model");
  EXPECT_EQ(*body->GetString("object"), "model");
  r = Get("/v1/models/other");
  EXPECT_EQ(r.status, 404);
  absl::StatusOr<Json> error = Json::Parse(r.body, "response");
  ASSERT_TRUE(error.ok());
  std::optional<Json> e = error->Find("error");
  ASSERT_TRUE(e.has_value()) << r.body;
  EXPECT_EQ(*e->GetString("type"), "not_found_error");
  EXPECT_NE(ErrorMessage(r).find("`other` does not exist"), std::string::npos) << r.body;
  EXPECT_EQ(Get("/v1/models/bad%zz").status, 404);
  EXPECT_EQ(Get("/v1/models/org/tiny%20model", "").status, 401);
}

TEST_F(RouterTest, TheBearerSchemeIsCaseInsensitive) {
  EXPECT_EQ(Get("/v1/models", "Bearer secret").status, 200);
  EXPECT_EQ(Get("/v1/models", "bearer secret").status, 200);
  EXPECT_EQ(Get("/v1/models", "BEARER  secret").status, 200);
  EXPECT_EQ(Get("/v1/models", "bearer wrong").status, 401);
  EXPECT_EQ(Get("/v1/models", "Basic secret").status, 401);
  EXPECT_EQ(Get("/v1/models", "bearersecret").status, 401);
  EXPECT_EQ(Get("/v1/models", "bearer").status, 401);
  EXPECT_TRUE(AuthorizedBearer("bEaReR secret", {"secret"}));
  EXPECT_FALSE(AuthorizedBearer("bearer ", {"secret"}));
}

TEST_F(RouterTest, MetricsNeedTheKeyByDefaultAndAreOpenWhenConfigured) {
  EXPECT_EQ(Get("/metrics", "").status, 401);
  EXPECT_EQ(Get("/metrics").status, 200);
  context_.config.metrics_require_api_key = false;
  const http::Response open = Get("/metrics", "");
  EXPECT_EQ(open.status, 200);
  EXPECT_NE(open.body.find("loom_num_requests_running"), std::string::npos) << open.body;
  // Only /metrics opens: the API still needs the key.
  EXPECT_EQ(Get("/v1/models", "").status, 401);
}

TEST(PercentDecodeTest, DecodesEscapesAndRefusesMalformedOnes) {
  EXPECT_EQ(PercentDecode("a%2Fb%20c"), "a/b c");
  EXPECT_EQ(PercentDecode("plain"), "plain");
  EXPECT_EQ(PercentDecode("%"), std::nullopt);
  EXPECT_EQ(PercentDecode("%4"), std::nullopt);
  EXPECT_EQ(PercentDecode("%g0"), std::nullopt);
}

}  // namespace
}  // namespace loom::api
