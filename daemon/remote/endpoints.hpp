// Where a job's remote workers are: each `workers` entry ("HOST:PORT", "[V6]:PORT") resolved
// to the addresses its name has now (a Kubernetes headless Service gives one per pod).
#pragma once

#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace stoker::remote {

// "HOST:PORT" / "[V6]:PORT" split into host (brackets removed) and port; the config checked
// the shape.
std::pair<std::string, std::string> split_address(const std::string& a);

struct Endpoints {
  // "ip:port" / "[v6]:port" -> (the entry as written, its gRPC target "ipv4:..."/"ipv6:...").
  std::map<std::string, std::pair<std::string, std::string>> endpoints;
  std::set<std::string> unresolved;  // entries whose name resolved to nothing now
};

// Blocking name lookups (getaddrinfo): call it off the control thread.
Endpoints resolve_workers(const std::vector<std::string>& addresses);

}  // namespace stoker::remote
