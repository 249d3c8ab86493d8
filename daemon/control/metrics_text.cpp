#include "control/metrics_text.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <unistd.h>

#include <spdlog/fmt/fmt.h>

namespace stoker::control {
namespace {

// Label values: backslash, double quote and newline escaped (exposition format 0.0.4).
void append_escaped(std::string& out, const std::string& v) {
  for (const char c : v) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
}

}  // namespace

void MetricsText::family(const char* name, const char* type, const char* help) {
  out_ += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
}

void MetricsText::sample(const char* name, const MetricLabels& labels, double value) {
  out_ += name;
  if (!labels.empty()) {
    out_ += '{';
    for (std::size_t i = 0; i < labels.size(); ++i) {
      if (i != 0) out_ += ',';
      out_ += labels[i].first;
      out_ += "=\"";
      append_escaped(out_, labels[i].second);
      out_ += '"';
    }
    out_ += '}';
  }
  // Shortest text that reads back as the same double; integers print without a fraction.
  if (std::isnan(value)) out_ += " NaN\n";
  else if (std::isinf(value)) out_ += value > 0 ? " +Inf\n" : " -Inf\n";
  else out_ += fmt::format(" {}\n", value);
}

void CounterWindow::sample(std::chrono::steady_clock::time_point now, std::map<std::string, double> totals) {
  history_.emplace_back(now, std::move(totals));
  while (history_.size() > 2 && now - history_[1].first >= window_) history_.pop_front();
}

double CounterWindow::rate(const std::string& key) const {
  if (history_.size() < 2) return 0.0;
  const auto& [t0, old] = history_.front();
  const auto& [t1, cur] = history_.back();
  const double dt = std::chrono::duration<double>(t1 - t0).count();
  const auto a = old.find(key), b = cur.find(key);
  if (dt <= 0 || b == cur.end()) return 0.0;
  return (b->second - (a == old.end() ? 0.0 : a->second)) / dt;
}

double CounterWindow::rate_since(const std::string& key, std::chrono::steady_clock::time_point since) const {
  if (history_.size() < 2) return 0.0;
  const auto& [t0, old] = history_.front();
  const auto& [t1, cur] = history_.back();
  const double dt = std::chrono::duration<double>(t1 - std::max(t0, since)).count();
  const auto a = old.find(key), b = cur.find(key);
  if (dt <= 0 || b == cur.end()) return 0.0;
  return (b->second - (a == old.end() ? 0.0 : a->second)) / dt;
}

double CounterWindow::rate_to_now(const std::string& key, std::chrono::steady_clock::time_point since,
                                  double current, std::chrono::steady_clock::time_point now) const {
  auto t0 = since;
  double before = 0;
  if (!history_.empty() && history_.front().first > since) {
    t0 = history_.front().first;
    const auto a = history_.front().second.find(key);
    before = a == history_.front().second.end() ? 0.0 : a->second;
  }
  const double dt = std::chrono::duration<double>(now - t0).count();
  return dt > 0 ? (current - before) / dt : 0.0;
}

std::uint64_t resident_memory_bytes() {
  std::FILE* f = std::fopen("/proc/self/statm", "re");
  if (f == nullptr) return 0;
  unsigned long long size = 0, resident = 0;
  const int n = std::fscanf(f, "%llu %llu", &size, &resident);
  std::fclose(f);
  if (n != 2) return 0;
  return resident * static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
}

base::Status write_metrics_textfile(const std::filesystem::path& dir, const std::string& text) {
  const std::filesystem::path final_path = dir / "stoker.prom";
  // A name node_exporter ignores (it reads *.prom only) and no other writer uses.
  const std::filesystem::path tmp = dir / (".stoker.prom." + std::to_string(::getpid()) + ".tmp");
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    return base::Status::error("cannot create " + tmp.string() + ": " + std::strerror(errno));
  }
  std::size_t at = 0;
  while (at < text.size()) {
    const ssize_t w = ::write(fd, text.data() + at, text.size() - at);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      const std::string error = std::strerror(errno);  // before close/unlink change errno
      ::close(fd);
      ::unlink(tmp.c_str());
      return base::Status::error("cannot write " + tmp.string() + ": " + error);
    }
    at += static_cast<std::size_t>(w);
  }
  ::close(fd);
  if (::rename(tmp.c_str(), final_path.c_str()) != 0) {
    const std::string error = std::strerror(errno);
    ::unlink(tmp.c_str());
    return base::Status::error("cannot rename to " + final_path.string() + ": " + error);
  }
  return {};
}

}  // namespace stoker::control
