// remote: {workers: ["HOST:PORT", ...], local, token_file, compression, deadline_s, verify, results, tls} — a
// job whose samples other machines' `stokerd --worker` may decode (daemon/remote/). Read here:
// the addresses (checked for shape; resolved when the job starts), the token (read now, so an
// unreadable file is refused with its line), the TLS files, and what the workers are sent: the
// job's keys its pixels depend on, as written.
#include <fstream>
#include <sstream>
#include <string>

#include "config/sections.hpp"

namespace stoker::config {

namespace fs = std::filesystem;

namespace {

// The keys a worker needs to make the same pixels: the sources (its --allow-root check), the
// pipeline and output (the pixels), the seeds and batch_size (validated as a config is). The
// world, sharing, cache and store keys stay on this node (and may hold ${ENV} values only
// this node has).
constexpr std::string_view kWorkerKeys[] = {"source", "sources", "epoch_size", "labels", "allow_missing_classes",
                                            "batch_size", "seed", "augment_seed", "pipeline", "output",
                                            "device", "device_normalize"};

// "HOST:PORT", "[V6]:PORT": a port 1..65535 and a host of printable characters.
void check_address(const Reader& r, const Value& v, const std::string& a) {
  const std::size_t colon = a.rfind(':');
  std::string host = colon == std::string::npos ? "" : a.substr(0, colon);
  const std::string port = colon == std::string::npos ? "" : a.substr(colon + 1);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  const bool port_ok = !port.empty() && port.size() <= 5 && port.find_first_not_of("0123456789") == std::string::npos &&
                       std::stoul(port) >= 1 && std::stoul(port) <= 65535;
  bool host_ok = !host.empty() && host.size() <= 253;
  for (char c : host) host_ok = host_ok && c > ' ' && c != '/' && c != '[' && c != ']' && c < 127;
  if (!port_ok || !host_ok) r.fail(v, "expected HOST:PORT (a port 1..65535), got '" + a + "'");
}

fs::path file_key(const Reader& r, const Fields& f, std::string_view key, const fs::path& base_dir) {
  const Value* v = f.get(key);
  if (v == nullptr) return {};
  const fs::path p = resolve(r.string(*v), base_dir);
  std::ifstream in(p, std::ios::binary);
  if (!in) r.fail(*v, "cannot read '" + p.string() + "'");
  return p;
}

}  // namespace

void parse_remote(const Reader& r, const Value& v, const Value& job_node, const fs::path& base_dir, JobConfig& job) {
  if (r.client_job()) {
    r.fail(v, "a client-defined job cannot name remote workers (stokerd would connect where a client says); "
              "define the job in the server's config");
  }
  const Fields f(r, v, {"workers", "local", "token_file", "compression", "deadline_s", "verify", "results", "tls"});
  RemoteConfig& rc = job.remote;
  const Value& w = f.need("workers");
  if (!w.node.IsSequence() || w.node.size() == 0) {
    r.fail(w, "expected a list of worker addresses, [\"HOST:PORT\", ...], got " + describe(w.node));
  }
  if (w.node.size() > 256) r.fail(w, "at most 256 worker addresses");
  for (std::size_t i = 0; i < w.node.size(); ++i) {
    const Value e = r.element(w, i);
    const std::string a = r.string(e);
    check_address(r, e, a);
    for (const std::string& seen : rc.workers) {
      if (seen == a) r.fail(e, "'" + a + "' is listed twice");
    }
    rc.workers.push_back(a);
  }
  if (auto* l = f.get("local")) rc.local = r.boolean(*l);
  if (!rc.local) {
    // Every item goes to a worker, which reads its own bytes: read-ahead here would read each
    // sample for nothing (with every worker gone the local pool reads as it decodes).
    job.read_ahead_bytes = 0;
    job.read_ahead_requests = 0;
  }
  if (auto* c = f.get("compression")) {
    const std::string how = r.choice(*c, {"none", "zstd", "auto"});
    rc.compression = how == "zstd"   ? RemoteConfig::Compression::kZstd
                     : how == "auto" ? RemoteConfig::Compression::kAuto
                                     : RemoteConfig::Compression::kNone;
  }
  if (auto* d = f.get("deadline_s")) {
    rc.deadline_s = r.number(*d);
    if (!(rc.deadline_s >= 0.1 && rc.deadline_s <= 3600)) r.fail(*d, "must be within [0.1, 3600] seconds");
  }
  if (auto* fr = f.get("verify")) {
    rc.verify = r.number(*fr);
    if (!(rc.verify >= 0 && rc.verify <= 1)) {
      r.fail(*fr, "must be a fraction within [0, 1] (of the workers' results made again here and compared)");
    }
  }
  if (auto* x = f.get("results")) rc.results_tcp = r.choice(*x, {"tcp", "stream"}) == "tcp";
  rc.token_file = file_key(r, f, "token_file", base_dir);
  if (!rc.token_file.empty()) {
    std::ifstream in(rc.token_file, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    rc.token = ss.str();
    while (!rc.token.empty() && (rc.token.back() == '\n' || rc.token.back() == '\r')) rc.token.pop_back();
    if (rc.token.empty()) r.fail(f.need("token_file"), "'" + rc.token_file.string() + "' is empty");
    if (rc.token.size() > 4096) r.fail(f.need("token_file"), "a token is at most 4096 bytes");
  }
  if (auto* t = f.get("tls")) {
    const Fields tf(r, *t, {"ca", "cert", "key"});
    rc.tls_ca = file_key(r, tf, "ca", base_dir);
    rc.tls_cert = file_key(r, tf, "cert", base_dir);
    rc.tls_key = file_key(r, tf, "key", base_dir);
    if (rc.tls_ca.empty()) r.fail(*t, "needs ca (the certificate the workers' certificates are signed by)");
    if (rc.tls_cert.empty() != rc.tls_key.empty()) r.fail(*t, "cert and key go together (this node's client certificate)");
  }
  if (job.store_max_side > 0) {
    r.fail(v, "remote workers cannot serve a job with a decoded_store (the store is on this node, and its "
              "reduced images give other pixels than a worker's full decode): choose one");
  }
  YAML::Node keep(YAML::NodeType::Map);
  for (std::string_view k : kWorkerKeys) {
    const std::string key(k);
    if (job_node.node[key]) keep[key] = job_node.node[key];
  }
  YAML::Node doc;
  doc["jobs"][job.name] = keep;
  rc.worker_yaml = YAML::Dump(doc);
  rc.base_dir = base_dir;
  rc.origin = r.file();
}

}  // namespace stoker::config
