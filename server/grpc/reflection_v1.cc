#include "server/grpc/reflection_v1.h"

#include <utility>

#include <google/protobuf/descriptor.h>
#include <google/protobuf/descriptor.pb.h>
#include <grpcpp/grpcpp.h>

#include "absl/container/flat_hash_set.h"
#include "grpc/reflection/v1/reflection.grpc.pb.h"

namespace loom {
namespace {

namespace rv1 = ::grpc::reflection::v1;
using ::google::protobuf::Descriptor;
using ::google::protobuf::DescriptorPool;
using ::google::protobuf::FieldDescriptor;
using ::google::protobuf::FileDescriptor;

// One ServerReflectionInfo stream: read a request, write its answer, repeat until the client
// half-closes.
class ReflectionStream final
    : public grpc::ServerBidiReactor<rv1::ServerReflectionRequest, rv1::ServerReflectionResponse> {
 public:
  explicit ReflectionStream(const std::vector<std::string>& services) : services_(services) {
    StartRead(&request_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {  // the client is done asking (or gone)
      Finish(grpc::Status::OK);
      return;
    }
    response_.Clear();
    Answer();
    StartWrite(&response_);
  }

  void OnWriteDone(bool ok) override {
    if (!ok) {
      Finish(grpc::Status(grpc::StatusCode::INTERNAL, "cannot write the reflection response"));
      return;
    }
    request_.Clear();
    StartRead(&request_);
  }

  void OnDone() override { delete this; }

 private:
  void Answer() {
    response_.set_valid_host(request_.host());
    *response_.mutable_original_request() = request_;
    const DescriptorPool* pool = DescriptorPool::generated_pool();
    switch (request_.message_request_case()) {
      case rv1::ServerReflectionRequest::kFileByFilename:
        return SendFile(pool->FindFileByName(request_.file_by_filename()), "File not found.");
      case rv1::ServerReflectionRequest::kFileContainingSymbol:
        return SendFile(pool->FindFileContainingSymbol(request_.file_containing_symbol()),
                        "Symbol not found.");
      case rv1::ServerReflectionRequest::kFileContainingExtension: {
        const rv1::ExtensionRequest& ext = request_.file_containing_extension();
        const Descriptor* type = pool->FindMessageTypeByName(ext.containing_type());
        if (type == nullptr) return Error(grpc::StatusCode::NOT_FOUND, "Type not found.");
        const FieldDescriptor* field = pool->FindExtensionByNumber(type, ext.extension_number());
        if (field == nullptr) return Error(grpc::StatusCode::NOT_FOUND, "Extension not found.");
        return SendFile(field->file(), "");
      }
      case rv1::ServerReflectionRequest::kAllExtensionNumbersOfType: {
        const Descriptor* type =
            pool->FindMessageTypeByName(request_.all_extension_numbers_of_type());
        if (type == nullptr) return Error(grpc::StatusCode::NOT_FOUND, "Type not found.");
        std::vector<const FieldDescriptor*> extensions;
        pool->FindAllExtensions(type, &extensions);
        rv1::ExtensionNumberResponse* out = response_.mutable_all_extension_numbers_response();
        out->set_base_type_name(type->full_name());
        for (const FieldDescriptor* e : extensions) out->add_extension_number(e->number());
        return;
      }
      case rv1::ServerReflectionRequest::kListServices: {
        rv1::ListServiceResponse* out = response_.mutable_list_services_response();
        for (const std::string& name : services_) out->add_service()->set_name(name);
        return;
      }
      case rv1::ServerReflectionRequest::MESSAGE_REQUEST_NOT_SET:
        return Error(grpc::StatusCode::UNIMPLEMENTED, "");
    }
  }

  // The file and every file it imports, directly or not, each once (as v1alpha answers: every
  // response is complete on its own).
  void SendFile(const FileDescriptor* file, const char* not_found) {
    if (file == nullptr) return Error(grpc::StatusCode::NOT_FOUND, not_found);
    absl::flat_hash_set<std::string> added;
    AddFile(file, response_.mutable_file_descriptor_response(), added);
  }

  static void AddFile(const FileDescriptor* file, rv1::FileDescriptorResponse* out,
                      absl::flat_hash_set<std::string>& added) {
    if (!added.insert(file->name()).second) return;
    google::protobuf::FileDescriptorProto proto;
    file->CopyTo(&proto);
    proto.SerializeToString(out->add_file_descriptor_proto());
    for (int i = 0; i < file->dependency_count(); ++i) AddFile(file->dependency(i), out, added);
  }

  void Error(grpc::StatusCode code, const char* message) {
    rv1::ErrorResponse* error = response_.mutable_error_response();
    error->set_error_code(static_cast<int32_t>(code));
    error->set_error_message(message);
  }

  const std::vector<std::string>& services_;
  rv1::ServerReflectionRequest request_;
  rv1::ServerReflectionResponse response_;
};

class ReflectionService final : public rv1::ServerReflection::CallbackService {
 public:
  explicit ReflectionService(std::vector<std::string> services) : services_(std::move(services)) {}

  grpc::ServerBidiReactor<rv1::ServerReflectionRequest, rv1::ServerReflectionResponse>*
  ServerReflectionInfo(grpc::CallbackServerContext*) override {
    return new ReflectionStream(services_);
  }

 private:
  const std::vector<std::string> services_;
};

}  // namespace

std::unique_ptr<grpc::Service> MakeReflectionV1Service(std::vector<std::string> services) {
  return std::make_unique<ReflectionService>(std::move(services));
}

}  // namespace loom
