#include "remote/worker_session.hpp"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <string_view>
#include <system_error>
#include <unistd.h>
#include <utility>

#include "config/config.hpp"
#include "objstore/object_url.hpp"
#include "image/decoder_versions.hpp"
#include "image/sample_result.hpp"
#include "remote/protocol.hpp"

namespace stoker::remote {

namespace fs = std::filesystem;

base::Status open_allow_roots(WorkerSettings& settings) {
  settings.allow_root_fds.clear();
  for (const fs::path& r : settings.allow_roots) {
    base::Result<base::UniqueFd> fd = base::open_root(r.string());
    if (!fd) return base::Status::error("--allow-root " + fd.status().message());
    settings.allow_root_fds.push_back(std::make_shared<const base::UniqueFd>(std::move(*fd)));
  }
  return {};
}

std::string item_refusal(const std::string& path) {
  return path + ": outside this worker's --allow-root folders, missing, or not a regular file";
}

WorkerSession::WorkerSession(const WorkerSettings& settings) : settings_(settings) {
  if (settings_.allow_root_fds.size() == settings_.allow_roots.size()) {
    root_fds_ = &settings_.allow_root_fds;
    return;
  }
  WorkerSettings own;
  own.allow_roots = settings_.allow_roots;
  // A root that cannot be opened is left out (its items are refused with the one text).
  for (const fs::path& r : own.allow_roots) {
    base::Result<base::UniqueFd> fd = base::open_root(r.string());
    own_root_fds_.push_back(fd ? std::make_shared<const base::UniqueFd>(std::move(*fd))
                               : std::make_shared<const base::UniqueFd>());
  }
  root_fds_ = &own_root_fds_;
}

bool inside(const fs::path& path, const std::vector<fs::path>& roots) {
  const std::string p = path.string();
  for (const fs::path& root : roots) {
    const std::string r = root.string();
    if (r == "/") return true;
    if (p == r || (p.size() > r.size() && p.compare(0, r.size(), r) == 0 && p[r.size()] == '/')) return true;
  }
  return false;
}

namespace {

// The folder a source reads below: a tar pattern's literal part (before any brace or glob).
fs::path source_folder(const std::string& pattern) {
  const std::size_t wild = pattern.find_first_of("{*?[");
  const std::string literal = pattern.substr(0, wild);
  return wild == std::string::npos ? fs::path(literal) : fs::path(literal).parent_path();
}

// Whether brace expansion (source::expand_braces: `{a,b}` alternatives, `{0..9}` ranges) of a
// shard pattern's part after its literal folder could name a ".." folder, and so climb out of
// the folder source_folder() checks. Conservative, without expanding (a pattern may stand for
// millions of names): a group holding '/' or another group, or a '/'-component whose text
// outside groups is only dots and that has a group with an all-dots or empty alternative (or
// no group and is ".."), counts as climbing. Ranges are digits or letters, never dots.
bool braces_may_climb(std::string_view rest) {
  std::size_t start = 0;
  while (start <= rest.size()) {
    // One component: up to the next '/' outside a group.
    bool outside_dots = true, groups = false, dotty_alternative = false;
    std::size_t i = start;
    for (; i < rest.size() && rest[i] != '/'; ++i) {
      if (rest[i] != '{') {
        outside_dots = outside_dots && rest[i] == '.';
        continue;
      }
      groups = true;
      const std::size_t close = rest.find('}', i);
      if (close == std::string_view::npos) return true;  // unbalanced: expand_braces refuses it anyway
      const std::string_view body = rest.substr(i + 1, close - i - 1);
      if (body.find_first_of("/{") != std::string_view::npos) return true;
      std::size_t a = 0;
      while (true) {
        const std::size_t comma = body.find(',', a);
        const std::string_view alt = body.substr(a, comma == std::string_view::npos ? body.npos : comma - a);
        if (alt.find_first_not_of('.') == std::string_view::npos) dotty_alternative = true;  // "", ".", "..", ...
        if (comma == std::string_view::npos) break;
        a = comma + 1;
      }
      i = close;
    }
    const std::string_view component = rest.substr(start, i - start);
    if (groups ? outside_dots && dotty_alternative : component == "..") return true;
    start = i + 1;
  }
  return false;
}

base::Status check_source(const config::SourceConfig& s, const std::vector<fs::path>& roots) {
  std::vector<fs::path> folders;
  if (!s.root.empty()) folders.push_back(s.root);
  if (!s.file.empty()) folders.push_back(s.file);
  for (const std::string& p : s.shards) {
    const std::size_t wild = p.find_first_of("{*?[");
    const std::size_t folder_end = wild == std::string::npos ? p.size() : p.rfind('/', wild);
    if (wild != std::string::npos && braces_may_climb(std::string_view(p).substr(folder_end + 1))) {
      return base::Status::error("the job reads '" + p + "', whose braces may name '..' and so lead outside this " +
                                 "worker's --allow-root folders (name the folders without '..')");
    }
    folders.push_back(source_folder(p));
  }
  for (const fs::path& f : folders) {
    std::error_code ec;
    const fs::path c = fs::weakly_canonical(f, ec);
    if (ec || !inside(c, roots)) {
      return base::Status::error("the job reads '" + f.string() + "', outside this worker's --allow-root folders");
    }
  }
  return {};
}

// The object storage part of a source (issue #35): its URLs moved out of `s` (which keeps its
// files, for check_source) into `folders` (every object below one may be an item: a root, a
// pattern's literal folder) and `files` (a shard named without a pattern: that object only).
void take_urls(config::SourceConfig& s, std::vector<std::string>& folders, std::vector<std::string>& files) {
  const auto folder_of = [](const std::string& u) { return u.substr(0, u.rfind('/') + 1); };
  if (objstore::looks_like_url(s.root.string())) {
    std::string r = s.root.string();
    while (!r.empty() && r.back() == '/') r.pop_back();
    folders.push_back(r + "/");
    s.root.clear();
  }
  if (objstore::looks_like_url(s.file.string())) {
    if (folders.empty()) folders.push_back(folder_of(s.file.string()));  // names relative to the list's folder
    s.file.clear();
  }
  std::vector<std::string> local;
  for (const std::string& p : s.shards) {
    if (!objstore::looks_like_url(p)) {
      local.push_back(p);
    } else if (const std::size_t wild = p.find_first_of("{*?["); wild == std::string::npos) {
      files.push_back(p);
    } else {
      folders.push_back(folder_of(p.substr(0, wild)));
    }
  }
  s.shards = std::move(local);
}

// A key with a "." or ".." segment: libcurl squashes dot segments before sending (so
// "BUCKET/a/../../other/key" would read another bucket), and a %2e may be decoded by a server
// as a dot. Refused whatever the prefix it seems to lie below.
bool has_dot_segment(std::string_view key) {
  std::string lower(key);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (lower.find("%2e") != std::string::npos) return true;
  std::size_t at = 0;
  while (at <= key.size()) {
    const std::size_t slash = std::min(key.find('/', at), key.size());
    const std::string_view seg = key.substr(at, slash - at);
    if (seg == "." || seg == "..") return true;
    at = slash + 1;
  }
  return false;
}

}  // namespace

base::Status WorkerSession::add_url_sources(const std::vector<std::string>& urls, bool folders,
                                            const config::SourceConfig& src) {
  if (urls.empty()) return {};
  if (!settings_.objects) {
    return base::Status::error("the job reads '" + urls.front() +
                               "' in object storage; this worker is not set up to read it");
  }
  for (const std::string& u : urls) {
    // Inside one of --allow-objects, compared as text after refusing dot segments (libcurl
    // would collapse them into another key or bucket).
    std::string why;
    const auto url = objstore::parse_object_url(u, why);
    const bool allowed =
        url && !has_dot_segment(url->key) &&
        std::any_of(settings_.allow_objects.begin(), settings_.allow_objects.end(), [&](const std::string& prefix) {
          const std::string dir = prefix.ends_with('/') ? prefix : prefix + "/";
          return u == dir.substr(0, dir.size() - 1) || u.starts_with(dir);
        });
    if (!allowed) {
      return base::Status::error("the job reads '" + u + "', outside this worker's --allow-objects");
    }
  }
  if (!src.endpoint.empty()) {
    std::string e = src.endpoint;
    while (e.ends_with('/')) e.pop_back();
    if (std::find(settings_.allow_endpoints.begin(), settings_.allow_endpoints.end(), e) ==
        settings_.allow_endpoints.end()) {
      return base::Status::error("the job's endpoint '" + e +
                                 "' is not one this worker signs requests for (its --allow-endpoint)");
    }
  }
  const std::string endpoint = settings_.objects->endpoint_for(src.endpoint);
  const objstore::Addressing addressing = settings_.objects->addressing_for(src.addressing, endpoint);
  for (const std::string& u : urls) url_sources_.push_back(UrlSource{u, folders, endpoint, addressing});
  return {};
}

std::string open_precheck(const v1::Open& open, const std::string& token) {
  if (std::string why = version_mismatch(open.protocol_major(), open.protocol_minor(), "the GPU node"); !why.empty()) {
    return why;
  }
  if (!token_equal(open.token(), token)) {
    // A token sent to a worker without one is refused too (the two sides disagree about the
    // set-up; accepting would hide that the GPU node's secret is going somewhere unexpected).
    return open.token().empty() ? "this worker needs a token (remote.token_file)"
           : token.empty()      ? "wrong token (this worker has no --token-file; remove "
                                  "remote.token_file or give the worker the same token)"
                                : "wrong token (remote.token_file differs from the worker's --token-file)";
  }
  return {};
}

base::Status WorkerSession::check_open(const v1::Open& open) {
  if (std::string why = open_precheck(open, settings_.token); !why.empty()) return base::Status::error(why);
  if (open.job_yaml().size() > kMaxJobYamlBytes || open.origin().size() > kMaxPathBytes ||
      open.base_dir().size() > kMaxPathBytes || open.job().size() > 256) {
    return base::Status::error("the job's definition is larger than a worker accepts");
  }
  // A NUL would cut these short: in every system call (base_dir), and in a ConfigError's
  // what(), which starts with the origin (a refusal with an empty text).
  for (const std::string* name : {&open.origin(), &open.base_dir(), &open.job()}) {
    if (name->find('\0') != std::string::npos) {
      return base::Status::error("the job's origin, base folder or name holds a NUL byte");
    }
  }
  if (open.base_dir().empty() || open.base_dir().front() != '/') {
    return base::Status::error("the job's base folder must be an absolute path, got '" + open.base_dir() + "'");
  }
  if (open.compression() != v1::COMPRESSION_NONE && open.compression() != v1::COMPRESSION_ZSTD) {
    return base::Status::error("unknown compression " + std::to_string(open.compression()));
  }
  config::Config cfg;
  try {
    cfg = config::parse_config(open.job_yaml(), open.origin() + " (job as sent to the worker)", open.base_dir());
  } catch (const std::exception& e) {
    return base::Status::error(e.what());  // config::ConfigError: FILE:LINE:COL: KEY: why
  }
  if (cfg.jobs.size() != 1) return base::Status::error("expected exactly one job, got " + std::to_string(cfg.jobs.size()));
  const config::JobConfig& job = cfg.jobs.front();
  // Files must lie below --allow-root; objects are read with this worker's own credentials
  // (its store decides what they may read), only below the job's own URLs.
  url_sources_.clear();
  const auto check = [&](config::SourceConfig src) -> base::Status {
    std::vector<std::string> folders, files;
    take_urls(src, folders, files);
    if (base::Status s = check_source(src, settings_.allow_roots); !s) return s;
    if (base::Status s = add_url_sources(folders, true, src); !s) return s;
    return add_url_sources(files, false, src);
  };
  if (job.mixture()) {
    for (const config::MixtureEntry& e : job.sources) {
      if (base::Status s = check(e.source); !s) return s;
    }
  } else if (base::Status s = check(job.source); !s) {
    return s;
  }
  if (job.pipeline.sample_bytes() != open.sample_bytes()) {
    return base::Status::error("this worker's pipeline makes samples of " + std::to_string(job.pipeline.sample_bytes()) +
                               " bytes, the GPU node's " + std::to_string(open.sample_bytes()) +
                               " (another release reads the job differently)");
  }
  if (job.pipeline.sample_bytes() > kMaxSampleBytes) return base::Status::error("a sample larger than 1 GiB");
  pipeline_ = job.pipeline;
  pixel_seed_ = open.pixel_seed();
  zstd_ = open.compression() == v1::COMPRESSION_ZSTD;
  zstd_auto_ = !zstd_ && open.compress_when_waiting();
  node_minor_ = open.protocol_minor();
  job_ = job.name;
  return {};
}

v1::OpenReply WorkerSession::open(const v1::Open& open) {
  v1::OpenReply reply;
  reply.set_protocol_major(kWorkerMajor);
  reply.set_protocol_minor(kWorkerMinor);
  reply.set_threads(settings_.threads);
  reply.set_decoder_versions(image::decoder_versions());
  if (opened()) {
    reply.set_error("the stream is already open (one Open per stream)");
    return reply;
  }
  const base::Status s = check_open(open);
  reply.set_accepted(s.ok());
  reply.set_error(s.message());
  if (!s) pipeline_.reset();
  return reply;
}

base::Result<ObjectRead> WorkerSession::object_read(const v1::Item& item) const {
  if (!opened()) return base::Status::error("an item before the stream's Open");
  if (item.path().size() > kMaxPathBytes || item.path().find('\0') != std::string::npos) {
    return base::Status::error("an item without a URL of at most 4096 bytes");
  }
  if (item.member() && (item.size() > kMaxReadBytes || item.offset() > (std::uint64_t{1} << 62))) {
    return base::Status::error(item.path() + ": a member's offset or size out of range");
  }
  std::string why;
  std::optional<objstore::ObjectUrl> url = objstore::parse_object_url(item.path(), why);
  const std::string refusal = item.path() + ": not an object of this job's sources in object storage";
  if (!url || has_dot_segment(url->key)) return base::Status::error(refusal);
  for (const UrlSource& u : url_sources_) {
    const bool below = u.folder ? item.path().size() > u.text.size() && item.path().starts_with(u.text)
                                : item.path() == u.text;
    if (below) return ObjectRead{std::move(*url), u.endpoint, u.addressing, item.member(), item.offset(), item.size()};
  }
  return base::Status::error(refusal);
}

std::shared_future<Fetched> WorkerSession::prefetch(const v1::Item& item) const {
  if (!settings_.objects || !objstore::looks_like_url(item.path())) return {};
  base::Result<ObjectRead> r = object_read(item);
  if (!r) return {};
  return settings_.objects->start(std::move(*r));
}

base::Status WorkerSession::check_item(const v1::Item& item) const {
  if (objstore::looks_like_url(item.path())) return object_read(item).status();
  base::Result<int> fd = open_item(item);
  if (fd) ::close(*fd);
  return fd.status();
}

namespace {

// The roots `path` names lexically (equal to one, or below it), with the rest of the path.
std::vector<std::pair<std::size_t, std::string>> roots_naming(const std::string& path, const std::vector<fs::path>& roots) {
  std::vector<std::pair<std::size_t, std::string>> out;
  for (std::size_t i = 0; i < roots.size(); ++i) {
    const std::string r = roots[i].string();
    if (r == "/") {
      out.emplace_back(i, path.substr(1));
    } else if (path == r) {
      out.emplace_back(i, std::string());
    } else if (path.size() > r.size() && path.compare(0, r.size(), r) == 0 && path[r.size()] == '/') {
      out.emplace_back(i, path.substr(r.size() + 1));
    }
  }
  return out;
}

}  // namespace

base::Result<int> WorkerSession::open_item(const v1::Item& item) const {
  if (!opened()) return base::Status::error("an item before the stream's Open");
  if (item.path().empty() || item.path().size() > kMaxPathBytes || item.path().front() != '/' ||
      item.path().find('\0') != std::string::npos) {
    return base::Status::error("an item without an absolute path of at most 4096 bytes");
  }
  if (item.member() && (item.size() > kMaxReadBytes || item.offset() > (std::uint64_t{1} << 62))) {
    return base::Status::error(item.path() + ": a member's offset or size out of range");
  }
  // The path picks the root and names the file below it; the root's descriptor is what the
  // file is opened from (base::confined_open): no "..", symlink or swapped folder leads out of
  // it, and only a regular file is opened. A path naming no root as sent (a symlink above the
  // root on the GPU node's side) is tried as the worker resolves it now; the confined open
  // decides all the same.
  auto candidates = roots_naming(item.path(), settings_.allow_roots);
  if (candidates.empty()) {
    std::error_code ec;
    const fs::path c = fs::weakly_canonical(item.path(), ec);
    if (!ec) candidates = roots_naming(c.string(), settings_.allow_roots);
  }
  for (const auto& [i, rel] : candidates) {
    const base::UniqueFd& root = *(*root_fds_)[i];
    if (!root) continue;
    base::ConfinedOptions o;
    o.root_path = settings_.allow_roots[i].string();
    base::Result<int> fd = base::confined_open(root.get(), rel, o);
    if (fd) return fd;
  }
  return base::Status::error(item_refusal(item.path()));
}

void WorkerSession::process(const v1::Item& item, image::SampleProcessor& processor, std::vector<std::uint8_t>& bytes,
                            v1::Result& result, const std::shared_future<Fetched>* fetched) const {
  const auto t0 = std::chrono::steady_clock::now();
  result.set_id(item.id());
  result.set_epoch(item.epoch());  // echoed (1.1): the node checks them against what it sent
  result.set_draw(item.draw());
  base::Status s;
  if (objstore::looks_like_url(item.path())) {
    // Object storage, with this worker's credentials: fetched ahead by the stream, else now.
    Fetched got;
    if (fetched != nullptr && fetched->valid()) {
      got = fetched->get();  // a copy: the future is shared
    } else if (base::Result<ObjectRead> r = object_read(item); !r) {
      got.status = r.status();
    } else if (!settings_.objects) {
      got.status = base::Status::error(item.path() + ": this worker is not set up to read object storage");
    } else {
      got = settings_.objects->fetch(*r);
    }
    s = got.status;
    if (s) bytes = std::move(got.bytes);
  } else {
    // The descriptor opened below a root is the one read (never the path again).
    base::Result<int> fd = open_item(item);
    s = fd.status();
    if (s) {
      s = read_fd(*fd, item.path(), item.member(), item.offset(), item.size(), bytes);
      ::close(*fd);
    }
  }
  if (!s) {
    result.set_error(static_cast<std::uint32_t>(image::SampleErrorKind::kIo));
    result.set_reason(s.message());
    return;
  }
  // Made raw, in the message's own string; `compression: zstd` compresses it after, through the
  // same compress_result that `auto` uses while the link is the bottleneck (one path for both).
  std::string* pixels = result.mutable_pixels();
  pixels->resize(pipeline_->sample_bytes());
  const image::SampleResult r =
      processor.process(bytes, pixel_seed_, item.epoch(), item.draw(), reinterpret_cast<std::uint8_t*>(pixels->data()));
  result.set_error(static_cast<std::uint32_t>(r.error));
  result.set_reason(r.reason);
  result.set_warnings(r.warnings);
  result.set_format(static_cast<std::uint32_t>(r.format));
  if (!r.ok()) pixels->clear();
  result.set_busy_ns(static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count()));
  if (zstd_) compress_result(result);  // adds its own time to busy_ns
}

void WorkerSession::compress_result(v1::Result& result) const {
  if (result.error() != 0 || result.compressed() || result.pixels().empty()) return;
  const auto t0 = std::chrono::steady_clock::now();
  thread_local std::string packed;  // reused: it takes the raw string's buffer in the swap below
  const std::string& raw = result.pixels();
  compress(std::span(reinterpret_cast<const std::uint8_t*>(raw.data()), raw.size()), packed);
  if (packed.size() >= raw.size()) return;  // noise does not shrink: it leaves as it is
  result.mutable_pixels()->swap(packed);
  result.set_compressed(true);
  result.set_busy_ns(
      result.busy_ns() +
      static_cast<std::uint64_t>(
          std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count()));
}

}  // namespace stoker::remote
