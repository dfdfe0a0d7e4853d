// Builds GGUF file bytes for tests: typed metadata and tensors, laid out as the format says, with
// hooks to break each part on purpose.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace loom::testing {

class GgufBuilder {
 public:
  explicit GgufBuilder(uint32_t version = 3, uint32_t alignment = 32)
      : version_(version), alignment_(alignment) {}

  GgufBuilder& U32(std::string_view key, uint32_t v) { return Scalar(key, 4, &v, 4); }
  GgufBuilder& I32(std::string_view key, int32_t v) { return Scalar(key, 5, &v, 4); }
  GgufBuilder& F32(std::string_view key, float v) { return Scalar(key, 6, &v, 4); }
  GgufBuilder& Bool(std::string_view key, bool v) {
    const uint8_t b = v ? 1 : 0;
    return Scalar(key, 7, &b, 1);
  }
  GgufBuilder& U64(std::string_view key, uint64_t v) { return Scalar(key, 10, &v, 8); }
  GgufBuilder& F64(std::string_view key, double v) { return Scalar(key, 12, &v, 8); }
  GgufBuilder& Str(std::string_view key, std::string_view v) {
    Key(key);
    Put<uint32_t>(kv_, 8);
    PutString(kv_, v);
    ++kv_count_;
    return *this;
  }
  GgufBuilder& StrArray(std::string_view key, const std::vector<std::string>& v) {
    Key(key);
    Put<uint32_t>(kv_, 9);
    Put<uint32_t>(kv_, 8);
    Put<uint64_t>(kv_, v.size());
    for (const std::string& s : v) PutString(kv_, s);
    ++kv_count_;
    return *this;
  }
  GgufBuilder& I32Array(std::string_view key, const std::vector<int32_t>& v) {
    Key(key);
    Put<uint32_t>(kv_, 9);
    Put<uint32_t>(kv_, 5);
    Put<uint64_t>(kv_, v.size());
    for (int32_t x : v) Put<int32_t>(kv_, x);
    ++kv_count_;
    return *this;
  }
  // Raw key + type + payload bytes, for malformed values.
  GgufBuilder& RawKv(std::string_view key, uint32_t type, const std::vector<uint8_t>& payload) {
    Key(key);
    Put<uint32_t>(kv_, type);
    kv_.insert(kv_.end(), payload.begin(), payload.end());
    ++kv_count_;
    return *this;
  }

  // A tensor with dims as stored (dims[0] contiguous), ggml type number and its data bytes.
  GgufBuilder& Tensor(std::string_view name, std::vector<uint64_t> dims, uint32_t ggml_type,
                      const std::vector<uint8_t>& data) {
    PutString(infos_, name);
    Put<uint32_t>(infos_, static_cast<uint32_t>(dims.size()));
    for (uint64_t d : dims) Put<uint64_t>(infos_, d);
    Put<uint32_t>(infos_, ggml_type);
    while (data_.size() % alignment_ != 0) data_.push_back(0);
    Put<uint64_t>(infos_, data_.size() + offset_skew_);
    data_.insert(data_.end(), data.begin(), data.end());
    ++tensor_count_;
    return *this;
  }
  GgufBuilder& F32Tensor(std::string_view name, std::vector<uint64_t> dims,
                         const std::vector<float>& values) {
    std::vector<uint8_t> bytes(values.size() * 4);
    std::memcpy(bytes.data(), values.data(), bytes.size());
    return Tensor(name, std::move(dims), 0, bytes);
  }
  // Added to every later tensor's stored offset (to misalign or push it past the end).
  GgufBuilder& OffsetSkew(uint64_t skew) {
    offset_skew_ = skew;
    return *this;
  }
  // Overrides the counts written in the header.
  GgufBuilder& Counts(uint64_t tensors, uint64_t kvs) {
    forced_tensor_count_ = tensors;
    forced_kv_count_ = kvs;
    forced_counts_ = true;
    return *this;
  }

  std::vector<uint8_t> Build() const {
    std::vector<uint8_t> out = {'G', 'G', 'U', 'F'};
    Put<uint32_t>(out, version_);
    Put<uint64_t>(out, forced_counts_ ? forced_tensor_count_ : tensor_count_);
    Put<uint64_t>(out, forced_counts_ ? forced_kv_count_ : kv_count_ + (alignment_ != 32 ? 1 : 0));
    if (alignment_ != 32) {
      PutString(out, "general.alignment");
      Put<uint32_t>(out, 4);
      Put<uint32_t>(out, alignment_);
    }
    out.insert(out.end(), kv_.begin(), kv_.end());
    out.insert(out.end(), infos_.begin(), infos_.end());
    if (tensor_count_ > 0) {
      while (out.size() % alignment_ != 0) out.push_back(0);
      out.insert(out.end(), data_.begin(), data_.end());
    }
    return out;
  }

 private:
  template <typename T>
  static void Put(std::vector<uint8_t>& out, T v) {
    const size_t at = out.size();
    out.resize(at + sizeof(T));
    std::memcpy(out.data() + at, &v, sizeof(T));
  }
  static void PutString(std::vector<uint8_t>& out, std::string_view s) {
    Put<uint64_t>(out, s.size());
    out.insert(out.end(), s.begin(), s.end());
  }
  void Key(std::string_view key) { PutString(kv_, key); }
  GgufBuilder& Scalar(std::string_view key, uint32_t type, const void* v, size_t n) {
    Key(key);
    Put<uint32_t>(kv_, type);
    const size_t at = kv_.size();
    kv_.resize(at + n);
    std::memcpy(kv_.data() + at, v, n);
    ++kv_count_;
    return *this;
  }

  uint32_t version_;
  uint32_t alignment_;
  std::vector<uint8_t> kv_, infos_, data_;
  uint64_t kv_count_ = 0, tensor_count_ = 0;
  uint64_t offset_skew_ = 0;
  bool forced_counts_ = false;
  uint64_t forced_tensor_count_ = 0, forced_kv_count_ = 0;
};

}  // namespace loom::testing
