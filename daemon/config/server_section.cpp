// The `server:` section: the socket and who may connect (shm_mode, group), workers, timeouts
// and connection limits, client-defined jobs, state and log settings, and the metrics endpoint
// (validated here: a numeric loopback address unless remote serving is asked for).
#include <algorithm>
#include <charconv>
#include <cstdint>
#include <string>
#include <vector>

#include <arpa/inet.h>
#include <grp.h>

#include "config/sections.hpp"
#include "base/status.hpp"

namespace stoker::config {

namespace fs = std::filesystem;

namespace {

constexpr std::size_t kMaxSocketPath = 107;  // sizeof(sockaddr_un::sun_path) - 1 on Linux

// server.group: a group name or a numeric gid that exists on this machine (looked up now, so
// a typo is refused with the config's line rather than found when the socket is made).
void parse_server_group(const Reader& r, const Value& v, ServerConfig& out) {
  const std::string g = r.string(v);
  if (g.empty()) r.fail(v, "must not be empty (leave the key out for owner-only access)");
  std::vector<char> buf(16384);
  group gr{};
  group* found = nullptr;
  const bool numeric = g.size() <= 9 && std::all_of(g.begin(), g.end(), [](char c) { return c >= '0' && c <= '9'; });
  if (numeric) {
    ::getgrgid_r(static_cast<gid_t>(std::stoul(g)), &gr, buf.data(), buf.size(), &found);
  } else {
    ::getgrnam_r(g.c_str(), &gr, buf.data(), buf.size(), &found);
  }
  if (found == nullptr) {
    r.fail(v, "no group '" + g + "' on this machine (`getent group " + g + "`; create it with `groupadd " + g + "`)");
  }
  out.group = found->gr_name;
  out.group_id = found->gr_gid;
}

}  // namespace

// "HOST:PORT" or "[V6]:PORT"; an error saying what is wrong with it otherwise.
base::Result<MetricsAddress> parse_metrics_address(const std::string& a) {
  const std::size_t colon = a.rfind(':');
  if (colon == std::string::npos || colon + 1 == a.size()) {
    return base::Status::error("expected HOST:PORT like \"127.0.0.1:9400\", got '" + a + "'");
  }
  MetricsAddress out;
  out.host = a.substr(0, colon);
  const std::string p = a.substr(colon + 1);
  unsigned long n = 0;
  const auto [end, ec] = std::from_chars(p.data(), p.data() + p.size(), n);
  if (ec != std::errc() || end != p.data() + p.size() || n > 65535) {
    return base::Status::error("port must be 0..65535 (0: any free port), got '" + p + "'");
  }
  out.port = static_cast<std::uint16_t>(n);
  std::string& host = out.host;
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  if (host == "localhost") host = "127.0.0.1";
  in_addr v4{};
  in6_addr v6{};
  if (::inet_pton(AF_INET, host.c_str(), &v4) == 1) {
    out.loopback = (ntohl(v4.s_addr) >> 24) == 127;
  } else if (::inet_pton(AF_INET6, host.c_str(), &v6) == 1) {
    out.loopback = IN6_IS_ADDR_LOOPBACK(&v6);
  } else {
    return base::Status::error("host must be a numeric IPv4/IPv6 address or localhost (no name lookups), got '" +
                               host + "'");
  }
  return out;
}


void parse_server(const Reader& r, const Value& s, const fs::path& base_dir, ServerConfig& out) {
  const Fields f(r, s, {"workers", "socket", "log_level", "state_dir", "shm_mode", "handshake_timeout_s",
                        "idle_timeout_s", "max_connections", "client_jobs", "client_job_linger_s", "drain_timeout_s",
                        "metrics", "metrics_allow_remote", "metrics_textfile", "log_interval_s", "group",
                        "client_jobs_for_group", "client_jobs_per_user", "client_job_buckets"});
  if (auto* v = f.get("workers")) out.workers = static_cast<std::uint32_t>(r.integer(*v, 0, 1024));
  if (auto* v = f.get("socket")) {
    out.socket = r.string(*v);
    if (out.socket.empty()) r.fail(*v, "must not be empty (leave the key out for the default)");
    if (out.socket.size() > kMaxSocketPath) {
      r.fail(*v, "a Unix socket path holds at most " + std::to_string(kMaxSocketPath) + " bytes, this one has " +
                     std::to_string(out.socket.size()));
    }
  }
  if (auto* v = f.get("log_level")) out.log_level = r.choice(*v, {"trace", "debug", "info", "warn", "error"});
  if (auto* v = f.get("state_dir")) {
    const fs::path d = r.string(*v);
    if (d.empty()) r.fail(*v, "must not be empty (leave the key out for the default)");
    out.state_dir = resolve(d, base_dir);
  }
  if (auto* v = f.get("shm_mode")) {
    // Written 0600 or "0600"; the scalar's text is read as octal either way.
    const std::string m = r.string(*v);
    const bool octal = (m.size() == 3 || (m.size() == 4 && m[0] == '0')) &&
                       std::all_of(m.begin(), m.end(), [](char c) { return c >= '0' && c <= '7'; });
    if (!octal) r.fail(*v, "expected an octal mode like 0600, got '" + m + "'");
    out.shm_mode = static_cast<std::uint32_t>(std::stoul(m, nullptr, 8));
    if ((out.shm_mode & 0600) != 0600) r.fail(*v, "the owner needs read and write (0600)");
  }
  if (auto* v = f.get("handshake_timeout_s")) {
    out.handshake_timeout_s = r.number(*v);
    if (!(out.handshake_timeout_s > 0 && out.handshake_timeout_s <= 3600)) {
      r.fail(*v, "must be within (0, 3600] seconds");
    }
  }
  if (auto* v = f.get("idle_timeout_s")) {
    out.idle_timeout_s = r.number(*v);
    if (!(out.idle_timeout_s > 0 && out.idle_timeout_s <= 3600)) r.fail(*v, "must be within (0, 3600] seconds");
  }
  if (auto* v = f.get("max_connections")) out.max_connections = static_cast<std::uint32_t>(r.integer(*v, 1, 1000000));
  if (auto* v = f.get("client_jobs")) out.client_jobs = r.boolean(*v);
  if (auto* v = f.get("client_jobs_for_group")) out.client_jobs_for_group = r.boolean(*v);
  if (auto* v = f.get("client_jobs_per_user")) {
    out.client_jobs_per_user = static_cast<std::uint32_t>(r.integer(*v, 1, 16));  // 16: all client jobs
  }
  if (auto* v = f.get("client_job_buckets")) {
    // S3's rules for a bucket's name (3-63 of a-z 0-9 . -), so a typo or a URL is refused here.
    auto add = [&](const Value& e) {
      const std::string b = r.string(e);
      const bool ok = b.size() >= 3 && b.size() <= 63 && std::all_of(b.begin(), b.end(), [](char c) {
                        return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '-';
                      });
      if (!ok) r.fail(e, "expected a bucket's name (3-63 characters of a-z, 0-9, '.', '-'), got '" + b + "'");
      out.client_job_buckets.push_back(b);
    };
    if (!v->node.IsSequence()) r.fail(*v, "expected a list of bucket names, e.g. [datasets, imagenet-public]");
    for (std::size_t i = 0; i < v->node.size(); ++i) add(r.element(*v, i));
  }
  if (auto* v = f.get("client_job_linger_s")) {
    out.client_job_linger_s = r.number(*v);
    if (!(out.client_job_linger_s >= 0 && out.client_job_linger_s <= 86400)) r.fail(*v, "must be within [0, 86400] seconds");
  }
  if (auto* v = f.get("drain_timeout_s")) {
    out.drain_timeout_s = r.number(*v);
    if (!(out.drain_timeout_s > 0 && out.drain_timeout_s <= 86400)) r.fail(*v, "must be within (0, 86400] seconds");
  }
  if (auto* v = f.get("metrics_allow_remote")) out.metrics_allow_remote = r.boolean(*v);
  if (auto* v = f.get("metrics")) {
    out.metrics = r.string(*v);
    base::Result<MetricsAddress> address = parse_metrics_address(out.metrics);
    if (!address) r.fail(*v, address.status().message());
    out.metrics_host = address->host;
    out.metrics_port = address->port;
    // The endpoint has no authentication: off the loopback only when asked for in so many words.
    if (!address->loopback && !out.metrics_allow_remote) {
      r.fail(*v, "'" + out.metrics_host + "' is not a loopback address; /metrics has no authentication, so "
                 "set server.metrics_allow_remote: true to serve it there");
    }
  }
  if (auto* v = f.get("metrics_textfile")) {
    const fs::path d = r.string(*v);
    if (d.empty()) r.fail(*v, "must not be empty (leave the key out for none)");
    out.metrics_textfile = resolve(d, base_dir);
  }
  if (auto* v = f.get("log_interval_s")) {
    out.log_interval_s = r.number(*v);
    if (!(out.log_interval_s >= 0 && out.log_interval_s <= 86400)) r.fail(*v, "must be within [0, 86400] seconds (0: off)");
  }
  if (auto* v = f.get("group")) parse_server_group(r, *v, out);
}


}  // namespace stoker::config
