// grpc.reflection.v1.ServerReflection (proto/grpc/reflection/v1/reflection.proto): server
// reflection as current clients ask for it. gRPC 1.51, as Debian ships it, serves only v1alpha;
// this gives the same answers under v1.
//
// Answers come from the process's generated descriptor pool, as v1alpha's do: a file by name, the
// file defining a symbol or an extension (each with every file it imports), the extension numbers
// of a type, and the list of services. What cannot be found is an
// `error_response` (NOT_FOUND) and the stream goes on; an empty request is UNIMPLEMENTED.
//
// Thread safety: the service is immutable after construction; each stream is its own reactor.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <grpcpp/impl/service_type.h>

namespace loom {

// `services`: the fully qualified names `list_services` answers with (the server's services).
std::unique_ptr<grpc::Service> MakeReflectionV1Service(std::vector<std::string> services);

}  // namespace loom
