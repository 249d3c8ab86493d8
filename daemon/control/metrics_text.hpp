// Prometheus text exposition (format 0.0.4) and the small helpers the operations code needs:
// a writer that escapes label values, a windowed rate over growing counters, the process's
// resident memory, and the node_exporter textfile writer.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.hpp"

namespace stoker::control {

inline constexpr const char* kMetricsContentType = "text/plain; version=0.0.4; charset=utf-8";

// The whole HTTP/1.0 response to one request head (metrics_http_request.cpp, over Boost.Beast's
// parser): 200 with `document` for GET/HEAD /metrics, else 400/404/405/431. Pure, so tests can feed it garbage directly.
std::string metrics_http_response(std::string_view head, const std::string& document);

using MetricLabels = std::vector<std::pair<std::string, std::string>>;

// Writes families in the order they are declared; each family's HELP/TYPE once, before its
// samples. Invariant: samples of one family are written together (Prometheus requires it).
class MetricsText {
 public:
  void family(const char* name, const char* type, const char* help);
  void sample(const char* name, const MetricLabels& labels, double value);
  const std::string& str() const { return out_; }

 private:
  std::string out_;
};

// Rates of monotonically growing values over the last `window`: sample() once a second with
// the current totals; rate(key) is (now - oldest in window) / elapsed. A key absent from the
// oldest sample counts from 0 there.
class CounterWindow {
 public:
  explicit CounterWindow(std::chrono::seconds window) : window_(window) {}
  void sample(std::chrono::steady_clock::time_point now, std::map<std::string, double> totals);
  double rate(const std::string& key) const;
  // The same over the part of the window after `since` (when what the key measures began to
  // exist: a consumer's connection), so that time before it does not dilute the rate.
  double rate_since(const std::string& key, std::chrono::steady_clock::time_point since) const;
  // The same with `current`, the key's total read now, as the newest point: a rate between
  // two status calls or in the first seconds (before two samples exist), where rate_since has
  // nothing yet. The key's total is taken as 0 at `since` when no sample is older.
  double rate_to_now(const std::string& key, std::chrono::steady_clock::time_point since, double current,
                     std::chrono::steady_clock::time_point now) const;

 private:
  std::chrono::seconds window_;
  std::deque<std::pair<std::chrono::steady_clock::time_point, std::map<std::string, double>>> history_;
};

// This process's resident set size (/proc/self/statm), 0 if unreadable.
std::uint64_t resident_memory_bytes();

// Writes `text` to DIR/stoker.prom through a temporary file in DIR and rename(), so that
// node_exporter's textfile collector never reads half a file. The error names the file.
base::Status write_metrics_textfile(const std::filesystem::path& dir, const std::string& text);

}  // namespace stoker::control
