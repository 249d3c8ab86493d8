// What a `stokerd --worker` does with one stream, without the transport (worker_server.cpp
// carries it over gRPC; the fuzz target drives it directly): the stream's Open is checked
// (protocol major, token, the job as a config, its sources inside --allow-root), then each
// Item is checked (its path inside --allow-root, its sizes bounded) and made: read, decoded,
// augmented, exactly as a local worker of the GPU node would make it.
//
// Invariant: nothing a peer sends is used before it is checked; a bad Open ends the stream
// with a reply saying why, a bad Item gets a result saying why (the GPU node makes it itself).
// Threads: open() once, then check_item/process from any number of threads (const).
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "image/pipeline_spec.hpp"
#include "image/sample_processor.hpp"
#include "base/status.hpp"
#include "stoker/remote/worker.pb.h"

namespace stoker::remote {

// The messages' namespace, stoker::remote::v1 (worker.pb.h), is `v1` here as it stands: an
// alias of the same name is a redefinition to clang (gcc accepts it).

struct WorkerSettings {
  std::vector<std::filesystem::path> allow_roots;  // canonical folders the worker may read
  std::string token;                               // empty: no token asked for
  unsigned threads = 1;                            // announced in OpenReply.threads
};

// `path` (canonical) lies in one of `roots` (canonical): equal to one or below it.
bool inside(const std::filesystem::path& path, const std::vector<std::filesystem::path>& roots);

class WorkerSession {
 public:
  explicit WorkerSession(const WorkerSettings& settings) : settings_(settings) {}

  // The stream's first message. accepted=false: the stream ends after this reply.
  v1::OpenReply open(const v1::Open& open);
  bool opened() const { return pipeline_.has_value(); }
  const image::PipelineSpec& pipeline() const { return *pipeline_; }
  const std::string& job() const { return job_; }

  // The item's fields, before anything is read: the path inside --allow-root, sizes bounded.
  base::Status check_item(const v1::Item& item) const;
  // Makes the item's sample into `result` (its id, the outcome, the pixels). `processor` is the
  // calling thread's own, built from pipeline(). A read failure comes back as error kIo.
  void process(const v1::Item& item, image::SampleProcessor& processor, std::vector<std::uint8_t>& bytes,
               v1::Result& result) const;

 private:
  base::Status check_open(const v1::Open& open);
  // check_item's work: the canonical path to read, or why not.
  base::Result<std::string> checked_path(const v1::Item& item) const;
  const WorkerSettings& settings_;
  std::optional<image::PipelineSpec> pipeline_;
  std::uint64_t pixel_seed_ = 0;
  bool zstd_ = false;
  std::string job_;
};

}  // namespace stoker::remote
