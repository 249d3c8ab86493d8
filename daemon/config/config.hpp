// The YAML config, parsed and validated before anything starts. A bad config throws
// ConfigError whose what() is "FILE:LINE:COL: KEY.PATH: message" and nothing is created.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "image/pipeline_spec.hpp"
#include "sampler/sampler.hpp"
#include "base/status.hpp"

namespace stoker::config {

struct Mark {  // 1-based position of a key in the YAML file
  int line = 0;
  int column = 0;
};

class ConfigError : public std::runtime_error {
 public:
  ConfigError(const std::string& file, Mark mark, const std::string& key_path,
              const std::string& message);
  const std::string& file() const { return file_; }
  Mark mark() const { return mark_; }
  const std::string& key_path() const { return key_path_; }

 private:
  std::string file_;
  Mark mark_;
  std::string key_path_;
};

enum class OnError : std::uint8_t {
  kSkip,        // drop the sample; the batch is filled from the next samples
  kSubstitute,  // deliver a replacement sample in its place (see README)
  kFail,        // stop the job, naming the path and the reason
};

struct SourceConfig {
  std::string type = "imagefolder";  // or "filelist", "tar"
  std::filesystem::path root;  // absolute or relative to the config file's folder (tar: unused)
  std::filesystem::path file;  // filelist: the list, key `list` (alias `file`); root defaults to its folder
  std::vector<std::string> shards;  // tar: absolute shard patterns or s3:// / https:// URLs, braces not yet expanded
  // s3:// sources: the S3-compatible endpoint (key `endpoint`, e.g. "http://127.0.0.1:9000");
  // "" takes AWS_ENDPOINT_URL, else AWS's regional endpoint (objstore/credentials.hpp).
  std::string endpoint;
  // `addressing`: "path", "virtual", or "" (virtual-host for AWS's own endpoint, path-style for
  // an endpoint given by `endpoint:` or AWS_ENDPOINT_URL).
  std::string addressing;
  // A source in object storage: `cache: {path, bytes}`, a local LRU cache of fetched bytes
  // (objstore/object_cache.hpp); empty path: none.
  std::filesystem::path cache_path;
  std::uint64_t cache_bytes = 0;
  Mark root_mark;              // so a scan failure (no images) can name the key
  std::string root_key = "root";  // the key root_mark points at: root, list, file or shards
};

// One source of a mixture (job key `sources:`): a source as `source:` takes it, its `weight`
// and the `name` its classes are prefixed with (default: its folder's, list's or first
// shard's name; made unique by appending _<index>).
struct MixtureEntry {
  SourceConfig source;
  double weight = 1;  // > 0, relative to the other sources' weights
  std::string name;
  Mark mark;          // the list element, for refusals found when the sources are read
};

// How a mixture's labels combine (job key `labels:`):
//  kPerSource  each source's classes follow the previous sources' (offset), named SOURCE/CLASS;
//  kShared     one class list, the sorted union of the sources' class names; a class missing
//              from a source is refused unless `allow_missing_classes: true`.
enum class MixtureLabels : std::uint8_t { kPerSource, kShared };

// Batch mixing (job keys `mixup: {alpha}`, `cutmix: {alpha}`, `mix_switch_prob`), applied
// once per finished batch (job/batch_mix.hpp). An alpha of 0 means that kind is off.
struct MixConfig {
  double mixup_alpha = 0;
  double cutmix_alpha = 0;
  double switch_prob = 0.5;  // both on: probability that a batch takes CutMix (else MixUp)
  bool enabled() const { return mixup_alpha > 0 || cutmix_alpha > 0; }
};

// Remote workers (job key `remote:`, daemon/remote/): other machines' `stokerd --worker`
// processes decode and augment some (or, with local: false, all) of the job's samples; the job
// stays this daemon's (order, seeds, rings, quarantine). Off when `workers` is empty.
struct RemoteConfig {
  std::vector<std::string> workers;  // "HOST:PORT" as written; a HOST may resolve to several workers
  bool local = true;                 // false: every item to remote workers while one is connected
  std::string token;                 // read from token_file when the config is read; empty: none
  std::filesystem::path token_file;
  // compression: none; zstd (every returned sample compressed by the worker); auto (the worker
  // compresses only while its results wait on the link, slower than its decoding, and this
  // node's receive window is open; protocol 1.6: an older worker sends them raw).
  enum class Compression { kNone, kZstd, kAuto } compression = Compression::kNone;
  double deadline_s = 30;            // an item unanswered this long: the worker counts as stalled
  // verify: the fraction of a worker's results this node makes again itself and compares byte
  // for byte (chosen per item, unpredictably to the worker); 0: none, 1: every result.
  double verify = 0.01;
  // results: tcp (default): a plaintext link's results travel on a TCP connection of their own,
  // to a port the worker names (daemon/remote/results_channel.hpp); stream: on the gRPC stream
  // (a firewall that passes only the worker's --listen port). TLS links always use the stream.
  bool results_tcp = true;
  std::filesystem::path tls_ca, tls_cert, tls_key;  // tls: {ca, cert, key}; all empty: plain TCP
  // What the workers are sent (Open.job_yaml/base_dir/origin): the job's keys its pixels depend
  // on (sources, pipeline, output, seeds), as written, and where relative paths resolve from.
  std::string worker_yaml;
  std::filesystem::path base_dir;
  std::string origin;
  bool enabled() const { return !workers.empty(); }
};

struct JobConfig {
  std::string name;            // [A-Za-z0-9_.-]{1,48}
  Mark mark;
  // The job's YAML as written (re-emitted, so layout and comments do not count) and the folder
  // relative paths resolve from: a reload restarts a job only when this changed.
  std::string definition;
  SourceConfig source;  // a mixture: type "mixture", the sources in `sources`
  // A weighted mixture (`sources:`, sampler/mixture.hpp); empty for a job with one `source:`.
  std::vector<MixtureEntry> sources;
  std::uint64_t epoch_size = 0;  // samples per epoch of a mixture; 0: the sum of the sources' sizes
  MixtureLabels labels = MixtureLabels::kPerSource;
  bool allow_missing_classes = false;
  Mark labels_mark;  // `labels:` (or `sources:`): where a refused class list is reported
  bool mixture() const { return !sources.empty(); }
  std::uint32_t batch_size = 0;
  bool shuffle = true;
  // shuffle: {window_shards: N} (tar sources only; sampler/window_order.hpp): shards shuffled
  // and visited N at a time, samples shuffled within each window. shuffle is then true;
  // 0: off (an ordinary permutation, or none).
  std::uint32_t window_shards = 0;
  std::uint64_t seed = 0;
  // The augmentations' and mixes' randomness; unset: `seed`. Apart so a trainer can keep a
  // DistributedSampler's order (its seed) while torch.manual_seed varies the augmentations,
  // as DataLoader's workers do.
  std::optional<std::uint64_t> augment_seed;
  std::uint64_t pixel_seed() const { return augment_seed.value_or(seed); }
  bool drop_last = false;          // DataLoader's: a rank's last short batch of an epoch is dropped
  bool sampler_drop_last = false;  // DistributedSampler's: the epoch is cut to a multiple of the world
  bool pad_shards = true;          // false: every sample exactly once, ranks uneven by at most one
  sampler::Shards shards() const {
    return !pad_shards ? sampler::Shards::kUneven : sampler_drop_last ? sampler::Shards::kDrop : sampler::Shards::kPad;
  }
  // Ranks this daemon serves: first_rank .. first_rank + consumers - 1 of a world of
  // world_size (one ring each). Without world_size/ranks: 0..consumers-1 of `consumers`.
  std::uint32_t consumers = 1;
  std::uint32_t world_size = 1;
  std::uint32_t first_rank = 0;
  // Processes reading each rank (fan-out): all get the same batches from the same slots.
  std::uint32_t readers = 1;
  std::uint32_t prefetch = 4;  // ready batches buffered per consumer (ring slots)
  // RAM for finished samples of a deterministic pipeline (0: no cache); later epochs copy
  // them instead of reading and decoding.
  std::uint64_t cache_bytes = 0;
  // decoded_store: {max_side, path, bytes}: images reduced to max_side (pipeline.store_max_side)
  // kept in a file under `path` (store/decoded_store.hpp), at most `bytes` of it; 0: off.
  std::uint32_t store_max_side = 0;
  std::filesystem::path store_path;
  std::uint64_t store_bytes = 0;
  // Read-ahead (key `read_ahead`): sample bytes fetched ahead of decode by `requests` reader
  // threads, holding at most about `bytes` (source/read_ahead.hpp); either 0: off.
  std::uint64_t read_ahead_bytes = std::uint64_t{64} << 20;
  std::uint32_t read_ahead_requests = 16;
  // A consumer holding a batch longer than this (alive but stuck) is disconnected so its
  // ring's slots come back; 0: never (status still reports it as stuck).
  double lease_timeout_s = 0;
  // Sharing the worker pool with the other jobs (see sched/work_queue.hpp): while several
  // jobs have work, each gets items in proportion to `weight`; `max_workers` (the key
  // `workers`) is the most worker threads that may run this job's items at once, 0: no cap.
  double weight = 1;
  std::uint32_t max_workers = 0;
  image::PipelineSpec pipeline;
  MixConfig mix;  // labels become soft targets [batch, classes] when enabled
  OnError on_error = OnError::kSkip;
  std::filesystem::path quarantine;  // default: <state_dir>/<job>-<dataset hash>.quarantine
  bool device_output = false;        // serve batches on the consumer's GPU (CUDA IPC)
  // device_normalize: `pipeline` then writes uint8 on the CPU (what host consumers get) and
  // `device_pipeline` holds the float output the GPU makes of it for device consumers.
  bool device_normalize = false;
  image::PipelineSpec device_pipeline;
  RemoteConfig remote;
};

struct ServerConfig {
  std::uint32_t workers = 0;   // 0: one per online core
  std::string socket;          // empty: resolved from --socket / env (proto/names.hpp)
  std::string log_level = "info";
  std::uint32_t shm_mode = 0600;
  double handshake_timeout_s = 10;  // a connection that says nothing for this long is closed
  // A connection not attached to a job (status, top) is closed after this long without a
  // message, so idle status callers cannot hold descriptors the workers need.
  double idle_timeout_s = 5;
  // Connections beyond this are refused with an error; 0: derived from the descriptor limit.
  std::uint32_t max_connections = 0;
  // Clients may define jobs (stoker.Loader.from_folder); such a job is drained once no
  // consumer used it for client_job_linger_s. A draining job's consumers that have not taken
  // its last planned batches within drain_timeout_s are told and disconnected.
  bool client_jobs = true;
  bool client_jobs_for_group = false;  // other users admitted by server.group may define jobs too
  // Client-defined jobs one uid may have serving or loading at once (of the 16 in all).
  std::uint32_t client_jobs_per_user = 8;
  double client_job_linger_s = 30;
  // Buckets a client-defined job may read with stokerd's credentials (s3://BUCKET/... sources,
  // through stokerd's endpoint); empty: none, a client job's URL source is refused.
  std::vector<std::string> client_job_buckets;
  double drain_timeout_s = 60;
  std::filesystem::path state_dir;  // quarantine files; default: next to the socket
  // Operations (daemon/control/metrics*): Prometheus text on http://metrics_host:metrics_port/metrics
  // when `metrics` is set (port 0: any free port, logged and shown in status). Validated here:
  // a numeric IPv4/IPv6 literal or "localhost", loopback unless metrics_allow_remote.
  std::string metrics;              // as written, "127.0.0.1:9400"; empty: no endpoint
  std::string metrics_host;         // numeric literal ("localhost" becomes 127.0.0.1)
  std::uint16_t metrics_port = 0;
  bool metrics_allow_remote = false;
  std::filesystem::path metrics_textfile;  // node_exporter textfile directory; empty: none
  double log_interval_s = 0;        // periodic one-line throughput log; 0: off
  // server.group: members of this group may connect too (socket 0660 root:group, each peer's
  // credentials checked at accept; see control/peer_access.hpp). Empty: owner (and root) only.
  std::string group;
  std::uint32_t group_id = 0;  // the group's gid, looked up when the config is read
};

struct Config {
  std::filesystem::path file;
  ServerConfig server;
  std::vector<JobConfig> jobs;
};

// Where a metrics endpoint listens (server.metrics, `stokerd --worker --metrics`): a numeric
// host (IPv4 or IPv6; "localhost" is 127.0.0.1), a port (0: any free port), and whether the
// host is a loopback address. "HOST:PORT" or "[V6]:PORT"; an error saying what is wrong.
struct MetricsAddress {
  std::string host;
  std::uint16_t port = 0;
  bool loopback = false;
};
base::Result<MetricsAddress> parse_metrics_address(const std::string& a);

// What one job may take of this machine's memory up front, before a file is read: a quarter
// of its physical memory (sysconf(_SC_PHYS_PAGES)). It bounds every size that a config or a
// client sets and that the job allocates when it starts: a mixture's epoch_size (its epoch's
// order) and the rings (ranks x prefetch x batch_size x the output's bytes). Issue #34, C1:
// a size past it is refused at its line, naming the bound, never left to std::bad_alloc.
std::uint64_t job_memory_budget();
// Tests pin the budget so that refusals do not depend on the machine; 0 gives it back.
void set_job_memory_budget_for_testing(std::uint64_t bytes);
// Bytes of memory per position of a mixture's epoch: its order is built from a 2-byte source
// pick and a 4-byte sample id per position, and the ranks' streams keep 4 bytes a position.
inline constexpr std::uint64_t kBytesPerEpochPosition = 10;

Config load_config(const std::filesystem::path& file);            // throws ConfigError
Config parse_config(const std::string& yaml_text, const std::string& file_name,
                    const std::filesystem::path& base_dir);       // for tests

// A job a client defines (stoker.Loader.from_folder): a config text holding exactly one job
// and no `server` section, validated as a config file is (errors name `origin`:line). Paths
// must be absolute (a client's working folder means nothing to the daemon).
// `client_buckets`: server.client_job_buckets, the buckets such a job may read from.
JobConfig parse_client_job(const std::string& yaml_text, const std::string& origin,
                           const std::vector<std::string>& client_buckets = {});

}  // namespace stoker::config
