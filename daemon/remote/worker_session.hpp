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

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "image/pipeline_spec.hpp"
#include "image/sample_processor.hpp"
#include "base/confined_open.hpp"
#include "base/status.hpp"
#include "remote/worker_fetch.hpp"
#include "stoker/remote/worker.pb.h"

namespace stoker::remote {

// The messages' namespace, stoker::remote::v1 (worker.pb.h), is `v1` here as it stands: an
// alias of the same name is a redefinition to clang (gcc accepts it).

struct WorkerSettings {
  std::vector<std::filesystem::path> allow_roots;  // canonical folders the worker may read
  // Their descriptors (O_PATH), opened once at start (open_allow_roots): every item is opened
  // below one of these with base::confined_open, never by its name (issue #34, A1).
  std::vector<std::shared_ptr<const base::UniqueFd>> allow_root_fds;
  std::string token;                               // empty: no token asked for
  unsigned threads = 1;                            // announced in OpenReply.threads
  // The server's bounds on streams (issue #34, A4; worker_server.hpp): how long a stream may
  // go without its Open (`--open-timeout`), and how many streams it serves at once
  // (`--max-streams`; a waiting stream holds no thread, worker_stream.hpp).
  std::chrono::milliseconds open_timeout{10'000};
  unsigned max_streams = 64;
  // How long a finished result may wait for others to leave with it in one ResultBatch (issue
  // #36; worker_stream.hpp): each message is a wake-up of the GPU node, most of what a remote
  // sample costs it. 10 ms: a 1-thread worker (~1.3 ms a sample) sends ~7 a message. On the
  // 2-core bench, 2 ms left 1.15 switches per sample on the node, 5 ms 0.8, and (with the split
  // reader) 5 ms 0.48-0.51, 10 ms 0.33-0.38 (docs/PERFORMANCE.md). Only a slow worker waits it
  // out: a many-thread one fills kMaxBatch or kBatchBytes first. The node's window and hedging
  // see it as link time (2% of the 0.5 s hedge floor). Zero: each result leaves as soon as no
  // write is outstanding.
  std::chrono::microseconds result_linger{10'000};
  // Where plaintext streams' results connections are taken (`--results-port`; issue #36,
  // results_channel.hpp): on the --listen host, this port; 0: any free one.
  std::uint16_t results_port = 0;
  // Object storage read with this worker's own credentials and endpoint (worker_fetch.hpp);
  // null: a job whose source is in object storage is refused at its Open.
  std::shared_ptr<WorkerObjects> objects;
  // What a GPU node may have this worker read with its credentials (`--allow-objects`): URL
  // prefixes ("s3://datasets/imagenet/", "https://host/shards/"); a job's URL source outside
  // them is refused at its Open, as a folder outside --allow-root is. The node's word is not
  // taken for what the worker's credentials may fetch and hand back decoded.
  std::vector<std::string> allow_objects;
  // Endpoints a job's `endpoint:` may name (`--allow-endpoint`): signed requests go nowhere
  // else. A job without `endpoint:` uses the worker's own (AWS_ENDPOINT_URL, else AWS's).
  std::vector<std::string> allow_endpoints;
};

// The Open's protocol major and token, the checks a stream passes before the worker allocates
// anything for it: empty when they pass, else the refusal (the same text WorkerSession::open gives).
std::string open_precheck(const v1::Open& open, const std::string& token);

// Opens each of settings.allow_roots (a folder) into settings.allow_root_fds; the error names it.
base::Status open_allow_roots(WorkerSettings& settings);

// The one refusal of an item's file: the same text whether it is missing, outside every
// --allow-root, a symlink leading out, or not a regular file (A2: a worker says nothing about
// what lies outside its folders).
std::string item_refusal(const std::string& path);

// `path` (canonical) lies in one of `roots` (canonical): equal to one or below it.
bool inside(const std::filesystem::path& path, const std::vector<std::filesystem::path>& roots);

class WorkerSession {
 public:
  // Settings without allow_root_fds (tests, the fuzz target): the session opens its own now.
  explicit WorkerSession(const WorkerSettings& settings);

  // The stream's first message. accepted=false: the stream ends after this reply.
  v1::OpenReply open(const v1::Open& open);
  bool opened() const { return pipeline_.has_value(); }
  const image::PipelineSpec& pipeline() const { return *pipeline_; }
  const std::string& job() const { return job_; }
  // The node speaks 1.5 or later: its results connection takes split frames (split_frames.hpp).
  bool split_results() const { return node_minor_ >= 5; }
  // The Open asked to compress when waiting (remote.compression auto, protocol 1.6): a result
  // is compressed only while the stream's results wait on the link
  // (WorkerStream::results_wait_on_link), by compress_result after process().
  bool compresses_when_waiting() const { return zstd_auto_; }
  // A made, uncompressed result's pixels compressed in place (zstd; `compressed` set), unless
  // that would not make them smaller: a sample zstd cannot shrink (noise) leaves raw under
  // `zstd` too, and the node takes either (Result.compressed). The time it took is added to
  // busy_ns. process() calls it for `zstd`; the stream's decode thread for `auto`.
  void compress_result(v1::Result& result) const;

  // The item's fields, before anything is read: the path inside --allow-root, sizes bounded.
  base::Status check_item(const v1::Item& item) const;
  // Makes the item's sample into `result` (its id, the outcome, the pixels). `processor` is the
  // calling thread's own, built from pipeline(). A read failure comes back as error kIo.
  // `fetched`: the item's bytes as prefetch() started fetching them (an object URL's item);
  // null: read now.
  void process(const v1::Item& item, image::SampleProcessor& processor, std::vector<std::uint8_t>& bytes,
               v1::Result& result, const std::shared_future<Fetched>* fetched = nullptr) const;
  // An item whose path is an object URL of the job's sources: its fetch started now (on
  // settings.objects' threads). Not valid() for any other item (a file, or one refused:
  // process() says why).
  std::shared_future<Fetched> prefetch(const v1::Item& item) const;

 private:
  base::Status check_open(const v1::Open& open);
  // check_item's work: the item's fields checked, its file opened (confined below a root).
  base::Result<int> open_item(const v1::Item& item) const;
  // An object URL item checked (a URL below one of the job's URL sources, no dot segment,
  // sizes bounded) into what to fetch.
  base::Result<ObjectRead> object_read(const v1::Item& item) const;
  // The job's sources in object storage: an item's URL must be `text` itself (a shard named
  // without a pattern) or lie below it (`folder`), and is fetched from `endpoint`.
  struct UrlSource {
    std::string text;
    bool folder = false;
    std::string endpoint;
    objstore::Addressing addressing = objstore::Addressing::kPath;
  };
  base::Status add_url_sources(const std::vector<std::string>& urls, bool folders, const config::SourceConfig& src);
  std::vector<UrlSource> url_sources_;
  const WorkerSettings& settings_;
  std::vector<std::shared_ptr<const base::UniqueFd>> own_root_fds_;  // when settings_ has none
  const std::vector<std::shared_ptr<const base::UniqueFd>>* root_fds_ = nullptr;
  std::optional<image::PipelineSpec> pipeline_;
  std::uint64_t pixel_seed_ = 0;
  bool zstd_ = false;             // every result compressed (that zstd can shrink)
  bool zstd_auto_ = false;        // results compressed while they wait on the connection
  std::uint32_t node_minor_ = 0;  // the Open's protocol minor
  std::string job_;
};

}  // namespace stoker::remote
