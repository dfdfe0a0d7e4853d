#include "engine/weights/checkpoint.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <map>
#include <utility>

#include "absl/status/status.h"
#include "engine/common/file.h"
#include "engine/common/json.h"
#include "engine/common/status.h"
#include "engine/common/strings.h"

namespace loom {
namespace {

constexpr std::string_view kIndexName = "model.safetensors.index.json";
constexpr std::string_view kSingleName = "model.safetensors";
constexpr std::string_view kExtension = ".safetensors";
constexpr int64_t kMaxIndexBytes = 100'000'000;

// Shard file name -> the tensors the index maps to it. Ordered, so shards open in name order.
using ShardMap = std::map<std::string, std::vector<std::string>>;

enum class PathKind { kMissing, kFile, kFolder, kOther };

absl::StatusOr<PathKind> KindOf(const std::string& path) {
  struct stat info;
  if (stat(path.c_str(), &info) != 0) {
    if (errno == ENOENT || errno == ENOTDIR) return PathKind::kMissing;
    return absl::ErrnoToStatus(errno, StrCat(path, ": cannot stat"));
  }
  if (S_ISREG(info.st_mode)) return PathKind::kFile;
  if (S_ISDIR(info.st_mode)) return PathKind::kFolder;
  return PathKind::kOther;
}

std::string Join(std::string_view dir, std::string_view name) {
  if (!dir.empty() && dir.back() == '/') return StrCat(dir, name);
  return StrCat(dir, "/", name);
}

// A shard must be a plain file name in the model folder: nothing that could lead out of it.
absl::Status CheckShardName(std::string_view index_path, std::string_view tensor,
                            std::string_view shard) {
  const bool plain = !shard.empty() &&
                     shard.find_first_of(std::string_view("/\\\0", 3)) == std::string_view::npos &&
                     shard.find("..") == std::string_view::npos;
  if (plain) return absl::OkStatus();
  return absl::InvalidArgumentError(StrCat(index_path, ": tensor '", tensor, "': shard name '",
                                           shard, "' is not a plain file name in the folder"));
}

absl::StatusOr<ShardMap> ParseIndex(const std::string& index_path) {
  LOOM_ASSIGN_OR_RETURN(const std::string text, ReadFile(index_path, kMaxIndexBytes));
  absl::StatusOr<Json> index = Json::Parse(text, "index");
  if (!index.ok()) {
    return absl::InvalidArgumentError(
        StrCat(index_path, ": ", std::string(index.status().message())));
  }
  std::optional<Json> weight_map = index->Find("weight_map");
  if (!weight_map || !weight_map->IsObject()) {
    return absl::InvalidArgumentError(StrCat(index_path, ": no \"weight_map\" object"));
  }
  ShardMap shards;
  for (const auto& [tensor, shard] : weight_map->Items()) {
    if (!shard.IsString()) {
      return absl::InvalidArgumentError(StrCat(index_path, ": tensor '", tensor, "': shard is ",
                                               shard.Dump(), ", expected a file name"));
    }
    const std::string shard_name = *shard.AsString();
    LOOM_RETURN_IF_ERROR(CheckShardName(index_path, tensor, shard_name));
    shards[shard_name].push_back(tensor);
  }
  if (shards.empty()) return absl::InvalidArgumentError(StrCat(index_path, ": empty weight_map"));
  return shards;
}

// model.safetensors, or else the only *.safetensors file in `dir`.
absl::StatusOr<std::string> FindSingleFile(const std::string& dir) {
  const std::string single = Join(dir, kSingleName);
  LOOM_ASSIGN_OR_RETURN(const PathKind kind, KindOf(single));
  if (kind == PathKind::kFile) return single;
  std::error_code error;
  std::vector<std::string> found;
  for (std::filesystem::directory_iterator it(dir, error), end; !error && it != end;
       it.increment(error)) {
    const std::string name = it->path().filename().string();
    if (name.size() > kExtension.size() && name.ends_with(kExtension) &&
        it->is_regular_file(error)) {
      found.push_back(name);
    }
  }
  if (error) return absl::ErrnoToStatus(error.value(), StrCat(dir, ": cannot list the folder"));
  if (found.size() == 1) return Join(dir, found[0]);
  if (found.empty()) {
    return absl::NotFoundError(
        StrCat(dir, ": no ", kIndexName, ", ", kSingleName, " or other *", kExtension, " file"));
  }
  std::sort(found.begin(), found.end());
  std::string names;
  for (const std::string& name : found) names += StrCat(names.empty() ? "" : ", ", name);
  return absl::InvalidArgumentError(StrCat(dir, ": no ", kIndexName, " and several *", kExtension,
                                           " files (", names, "): which one is the model?"));
}

std::string MoreThanOne(const std::vector<std::string>& names) {
  if (names.size() <= 1) return "";
  return StrCat(" and ", names.size() - 1, " more");
}

}  // namespace

absl::StatusOr<Checkpoint> Checkpoint::Open(const std::string& model_dir,
                                            const MapOptions& options) {
  LOOM_ASSIGN_OR_RETURN(const PathKind kind, KindOf(model_dir));
  if (kind == PathKind::kMissing) return absl::NotFoundError(StrCat(model_dir, ": no such folder"));
  if (kind == PathKind::kFile) {
    if (IsGgufFile(model_dir)) return OpenGguf(model_dir, options);
    return OpenSingle(model_dir, options);
  }
  if (kind != PathKind::kFolder) {
    return absl::InvalidArgumentError(StrCat(model_dir, ": not a folder or a file"));
  }
  const std::string index_path = Join(model_dir, kIndexName);
  LOOM_ASSIGN_OR_RETURN(const PathKind index_kind, KindOf(index_path));
  if (index_kind != PathKind::kMissing) return OpenSharded(model_dir, index_path, options);
  LOOM_ASSIGN_OR_RETURN(const std::string single, FindSingleFile(model_dir));
  LOOM_ASSIGN_OR_RETURN(Checkpoint checkpoint, OpenSingle(single, options));
  checkpoint.path_ = model_dir;
  return checkpoint;
}

absl::StatusOr<Checkpoint> Checkpoint::OpenSingle(const std::string& path,
                                                  const MapOptions& options) {
  Checkpoint checkpoint;
  checkpoint.path_ = path;
  LOOM_ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsFile> file,
                        SafetensorsFile::Open(path, options));
  for (const TensorInfo& tensor : file->tensors()) checkpoint.tensors_.push_back(&tensor);
  checkpoint.files_.push_back(std::move(file));
  checkpoint.Finish();
  return checkpoint;
}

absl::StatusOr<Checkpoint> Checkpoint::OpenGguf(const std::string& path,
                                                const MapOptions& options) {
  Checkpoint checkpoint;
  checkpoint.path_ = path;
  LOOM_ASSIGN_OR_RETURN(checkpoint.gguf_, GgufFile::Open(path, options));
  LOOM_ASSIGN_OR_RETURN(checkpoint.gguf_view_, MapGgufTensors(*checkpoint.gguf_));
  for (const TensorInfo& tensor : checkpoint.gguf_view_->tensors) {
    checkpoint.tensors_.push_back(&tensor);
  }
  checkpoint.Finish();
  for (size_t i = 1; i < checkpoint.tensors_.size(); ++i) {
    if (checkpoint.tensors_[i - 1]->name == checkpoint.tensors_[i]->name) {
      return absl::InvalidArgumentError(StrCat(path, ": two tensors map to the name '",
                                               checkpoint.tensors_[i]->name, "'"));
    }
  }
  return checkpoint;
}

absl::StatusOr<Checkpoint> Checkpoint::OpenSharded(const std::string& dir,
                                                   const std::string& index_path,
                                                   const MapOptions& options) {
  LOOM_ASSIGN_OR_RETURN(const ShardMap shards, ParseIndex(index_path));
  Checkpoint checkpoint;
  checkpoint.path_ = dir;
  for (const auto& [shard, names] : shards) {
    const std::string shard_path = Join(dir, shard);
    absl::StatusOr<std::unique_ptr<SafetensorsFile>> file =
        SafetensorsFile::Open(shard_path, options);
    if (absl::IsNotFound(file.status())) {
      return absl::NotFoundError(StrCat(index_path, ": shard ", shard_path, " (holding tensor '",
                                        names[0], "'", MoreThanOne(names), ") does not exist"));
    }
    if (!file.ok()) return file.status();
    for (const std::string& name : names) {
      const TensorInfo* tensor = (*file)->Find(name);
      if (tensor == nullptr) {
        return absl::InvalidArgumentError(StrCat(index_path, ": tensor '", name,
                                                 "' is mapped to shard ", shard_path,
                                                 ", which has no such tensor"));
      }
      checkpoint.tensors_.push_back(tensor);
    }
    checkpoint.files_.push_back(*std::move(file));
  }
  checkpoint.Finish();
  return checkpoint;
}

void Checkpoint::Finish() {
  std::sort(tensors_.begin(), tensors_.end(),
            [](const TensorInfo* a, const TensorInfo* b) { return a->name < b->name; });
  for (const TensorInfo* tensor : tensors_) {
    total_bytes_ += tensor->num_bytes;
    num_parameters_ += tensor->NumElements();
  }
}

bool Checkpoint::in_anonymous_memory() const {
  if (gguf_ != nullptr) return gguf_->in_anonymous_memory();
  return !files_.empty() && std::all_of(files_.begin(), files_.end(), [](const auto& file) {
    return file->in_anonymous_memory();
  });
}

const TensorInfo* Checkpoint::Find(std::string_view name) const {
  auto it = std::lower_bound(
      tensors_.begin(), tensors_.end(), name,
      [](const TensorInfo* tensor, std::string_view key) { return tensor->name < key; });
  if (it == tensors_.end() || (*it)->name != name) return nullptr;
  return *it;
}

}  // namespace loom
