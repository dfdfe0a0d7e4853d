#include "server/cluster/wire.h"

#include "engine/common/strings.h"

namespace loom::cluster {
namespace {

void SamplingToProto(const SamplingParams& s, v1::SchedSamplingParams* p) {
  p->set_temperature(s.temperature);
  p->set_top_k(s.top_k);
  p->set_top_p(s.top_p);
  p->set_min_p(s.min_p);
  p->set_repetition_penalty(s.repetition_penalty);
  p->set_frequency_penalty(s.frequency_penalty);
  p->set_presence_penalty(s.presence_penalty);
  for (const auto& [token, bias] : s.logit_bias) {
    p->add_logit_bias_ids(token.value());
    p->add_logit_bias_values(bias);
  }
  p->set_min_tokens(s.min_tokens);
  for (TokenId t : s.min_tokens_banned_ids) p->add_min_tokens_banned_ids(t.value());
  p->set_seed(s.seed);
  p->set_logprobs(s.logprobs);
  p->set_prompt_logprobs(s.prompt_logprobs);
}

absl::StatusOr<SamplingParams> SamplingFromProto(const v1::SchedSamplingParams& p,
                                                 int32_t vocab_size) {
  SamplingParams s;
  s.temperature = p.temperature();
  s.top_k = p.top_k();
  s.top_p = p.top_p();
  s.min_p = p.min_p();
  s.repetition_penalty = p.repetition_penalty();
  s.frequency_penalty = p.frequency_penalty();
  s.presence_penalty = p.presence_penalty();
  if (p.logit_bias_ids_size() != p.logit_bias_values_size()) {
    return absl::InvalidArgumentError("logit bias ids and values differ in length");
  }
  for (int i = 0; i < p.logit_bias_ids_size(); ++i) {
    s.logit_bias.emplace_back(TokenId(p.logit_bias_ids(i)), p.logit_bias_values(i));
  }
  s.min_tokens = p.min_tokens();
  for (int32_t t : p.min_tokens_banned_ids()) s.min_tokens_banned_ids.push_back(TokenId(t));
  s.seed = p.seed();
  s.logprobs = p.logprobs();
  s.prompt_logprobs = -1;  // reported by the instance that computed the prompt
  if (absl::Status st = ValidateSamplingParams(s, vocab_size); !st.ok()) return st;
  for (TokenId t : s.min_tokens_banned_ids) {
    if (t.value() < 0 || t.value() >= vocab_size) {
      return absl::InvalidArgumentError("a banned token id is outside the vocabulary");
    }
  }
  return s;
}

absl::Status CheckTokens(const google::protobuf::RepeatedField<int32_t>& ids, int32_t vocab_size,
                         const char* what) {
  for (int32_t t : ids) {
    if (t < 0 || t >= vocab_size) {
      return absl::InvalidArgumentError(
          StrCat(what, " token id ", t, " is outside the vocabulary [0, ", vocab_size, ")"));
    }
  }
  return absl::OkStatus();
}

void LogprobsToProto(const PositionLogprobs& lp, v1::RemotePositionLogprobs* p) {
  p->mutable_token()->set_token_id(lp.token.token_id.value());
  p->mutable_token()->set_logprob(lp.token.logprob);
  p->set_rank(lp.rank);
  for (const TokenLogprob& t : lp.top) {
    v1::RemoteLogprob* e = p->add_top();
    e->set_token_id(t.token_id.value());
    e->set_logprob(t.logprob);
  }
}

PositionLogprobs LogprobsFromProto(const v1::RemotePositionLogprobs& p) {
  PositionLogprobs lp;
  lp.token = {TokenId(p.token().token_id()), p.token().logprob()};
  lp.rank = p.rank();
  for (const v1::RemoteLogprob& t : p.top()) lp.top.push_back({TokenId(t.token_id()), t.logprob()});
  return lp;
}

}  // namespace

void MigrantToProto(const MigrantState& state, v1::ResumeRequest* out) {
  const SchedRequest& r = state.params;
  for (TokenId t : r.prompt) out->add_prompt(t.value());
  SamplingToProto(r.sampling, out->mutable_sampling());
  out->set_max_new_tokens(r.max_new_tokens);
  for (TokenId t : r.stop_token_ids) out->add_stop_token_ids(t.value());
  out->set_priority(r.priority);
  out->set_cache_salt(r.cache_salt);
  for (size_t i = r.prompt.size(); i < state.tokens.size(); ++i) {
    out->add_generated(state.tokens[i].value());
  }
  out->set_num_computed_tokens(state.num_computed);
}

absl::StatusOr<MigrantState> MigrantFromProto(const v1::ResumeRequest& in, int32_t vocab_size,
                                              int64_t now_ms) {
  if (in.prompt_size() == 0) return absl::InvalidArgumentError("the prompt is empty");
  if (absl::Status s = CheckTokens(in.prompt(), vocab_size, "prompt"); !s.ok()) return s;
  if (absl::Status s = CheckTokens(in.generated(), vocab_size, "generated"); !s.ok()) return s;
  if (absl::Status s = CheckTokens(in.stop_token_ids(), vocab_size, "stop"); !s.ok()) return s;
  if (in.max_new_tokens() < 0 || in.generated_size() > in.max_new_tokens()) {
    return absl::InvalidArgumentError("max_new_tokens is inconsistent with the tokens generated");
  }
  // Past about 30 years a deadline is a peer's garbage, and now + it could overflow.
  constexpr int64_t kMaxDeadlineMs = int64_t{1} << 40;
  if (in.deadline_remaining_ms() < 0 || in.deadline_remaining_ms() > kMaxDeadlineMs) {
    return absl::InvalidArgumentError(
        StrCat("deadline_remaining_ms ", in.deadline_remaining_ms(), " is outside [0, ",
               kMaxDeadlineMs, "]"));
  }
  absl::StatusOr<SamplingParams> sampling = SamplingFromProto(in.sampling(), vocab_size);
  if (!sampling.ok()) return sampling.status();
  MigrantState state;
  SchedRequest& r = state.params;
  for (int32_t t : in.prompt()) r.prompt.push_back(TokenId(t));
  r.sampling = *std::move(sampling);
  r.max_new_tokens = in.max_new_tokens();
  for (int32_t t : in.stop_token_ids()) r.stop_token_ids.push_back(TokenId(t));
  r.priority = in.priority();
  r.cache_salt = in.cache_salt();
  r.deadline_ms = in.deadline_remaining_ms() > 0 ? now_ms + in.deadline_remaining_ms() : 0;
  r.n = 1;
  state.tokens = r.prompt;
  for (int32_t t : in.generated()) state.tokens.push_back(TokenId(t));
  state.num_computed = in.num_computed_tokens();
  return state;
}

void OutputToProto(const ChoiceOutput& out, v1::RemoteOutput* msg) {
  for (TokenId t : out.new_tokens) msg->add_new_tokens(t.value());
  for (const PositionLogprobs& lp : out.logprobs) LogprobsToProto(lp, msg->add_logprobs());
  msg->set_finish(static_cast<int32_t>(out.finish));
  msg->set_num_cached_tokens(out.num_cached_tokens);
}

ChoiceOutput OutputFromProto(const v1::RemoteOutput& msg, RequestId id) {
  ChoiceOutput out;
  out.request_id = id;
  out.index = 0;
  for (int32_t t : msg.new_tokens()) out.new_tokens.push_back(TokenId(t));
  for (const auto& lp : msg.logprobs()) out.logprobs.push_back(LogprobsFromProto(lp));
  const int32_t f = msg.finish();
  out.finish = f >= 0 && f <= static_cast<int32_t>(FinishReason::kDeadline)
                   ? static_cast<FinishReason>(f)
                   : FinishReason::kAbort;
  out.num_cached_tokens = msg.num_cached_tokens();
  return out;
}

}  // namespace loom::cluster
