#include "top_render.hpp"

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <string>

namespace stoker::ctl {
namespace {

using Json = nlohmann::json;

std::string duration_text(double s) {
  const long t = static_cast<long>(s);
  char buf[32];
  if (t >= 86400) std::snprintf(buf, sizeof buf, "%ldd%02ldh", t / 86400, t % 86400 / 3600);
  else if (t >= 3600) std::snprintf(buf, sizeof buf, "%ldh%02ldm", t / 3600, t % 3600 / 60);
  else std::snprintf(buf, sizeof buf, "%ldm%02lds", t / 60, t % 60);
  return buf;
}

// A name cut to `n` columns (job names may be long; the table must stay 80 wide).
std::string fit(const std::string& s, std::size_t n) { return s.size() <= n ? s : s.substr(0, n - 1) + "~"; }

double num(const Json& j, const char* key) {
  const auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : 0.0;
}

// The entry of `parent[key]` (an array of objects) whose "name" is `name`; null when none.
// (A pointer into `parent`, never into a copy: value() would return one.)
const Json* named(const Json& parent, const char* key, const std::string& name) {
  const auto list = parent.find(key);
  if (list == parent.end() || !list->is_array()) return nullptr;
  for (const Json& e : *list) {
    if (e.is_object() && e.value("name", std::string()) == name) return &e;
  }
  return nullptr;
}

// Object storage (issue #35): one line per source with request counters, its fetch rate
// (from the previous frame's counters) and latency. Local sources have no counters: no line.
void render_sources(const Json& job, const Json* prev_job, double seconds, std::string& out) {
  const auto sources = job.find("sources");
  if (sources == job.end() || !sources->is_array()) return;
  char line[256];
  bool header = false;
  for (const Json& s : *sources) {
    if (!s.is_object() || !s.contains("requests")) continue;
    if (!header) {
      std::snprintf(line, sizeof line, "  %-16s %9s %8s %7s %7s %8s %6s %7s", "SOURCE", "MB/S", "REQ/S", "P50_MS",
                    "P99_MS", "RETRIES", "INFLT", "C_HITS");
      out += line;
      out += "\n";
      header = true;
    }
    const std::string name = s.value("name", std::string("?"));
    char rate[32] = "-", reqs[32] = "-";
    const Json* before = prev_job != nullptr ? named(*prev_job, "sources", name) : nullptr;
    if (before != nullptr && seconds > 0) {
      const double bytes = std::max(0.0, num(s, "bytes") - num(*before, "bytes")) / seconds;
      std::snprintf(rate, sizeof rate, "%.1f", std::min(bytes / 1e6, 99999.9));
      std::snprintf(reqs, sizeof reqs, "%.0f",
                    std::min(std::max(0.0, num(s, "requests") - num(*before, "requests")) / seconds, 9999999.0));
    }
    const Json lat = s.value("latency_ms", Json::object());
    std::snprintf(line, sizeof line, "  %-16s %9s %8s %7.1f %7.1f %8.0f %6.0f %7.0f", fit(name, 16).c_str(), rate, reqs,
                  std::min(num(lat, "p50"), 99999.9), std::min(num(lat, "p99"), 99999.9),
                  std::min(num(s, "retries"), 99999999.0), std::min(num(s, "in_flight"), 999999.0),
                  std::min(num(s, "cache_hits"), 9999999.0));
    out += line;
    out += "\n";
  }
}

}  // namespace

std::string render_top_frame(const Json& st, const Json* previous, double seconds) {
  std::string out;
  char line[256];
  const auto busy = st.find("worker_busy_fraction");
  const std::string busy_text = busy != st.end() && busy->is_number()
                                    ? " (" + std::to_string(static_cast<int>(busy->get<double>() * 100 + 0.5)) + "% busy)"
                                    : std::string();
  std::time_t now = std::time(nullptr);
  char clock[16];
  std::strftime(clock, sizeof clock, "%H:%M:%S", std::localtime(&now));
  // Two header lines, each far below 80 columns whatever the figures: the first keeps the
  // clock at the right edge, so nothing in it is ever cut.
  std::snprintf(line, sizeof line, "stokerd pid %d  up %s  clients %d", static_cast<int>(num(st, "pid")),
                duration_text(num(st, "uptime_s")).c_str(), static_cast<int>(num(st, "clients")));
  std::string head = line;
  head += std::string(head.size() < 71 ? 72 - head.size() : 1, ' ');
  out += head + clock + "\n";
  std::snprintf(line, sizeof line, "workers %d%s  rss %.0f MiB", static_cast<int>(num(st, "workers")),
                busy_text.c_str(), num(st, "rss_bytes") / 1048576.0);
  out += line;
  out += "\n";
  for (const Json& job : st.value("jobs", Json::array())) {
    double errors = 0;
    const Json errs = job.value("errors", Json::object());
    for (const auto& [kind, n] : errs.items()) errors += n.is_number() ? n.get<double>() : 0;
    out += "\n";
    std::snprintf(line, sizeof line, "%-16s %9s %12s %8s %6s %s", "JOB", "IMG/S", "SAMPLES", "ERRORS", "QUAR",
                  "STATE");
    out += line;
    out += "\n";
    const auto failure = job.find("failure");
    const bool failed = failure != job.end() && failure->is_string();
    std::snprintf(line, sizeof line, "%-16s %9.1f %12.0f %8.0f %6.0f %s", fit(job.value("name", "?"), 16).c_str(),
                  num(job, "images_per_s"), num(job, "samples_ok"), errors, num(job, "quarantined"),
                  failed ? "FAILED" : fit(job.value("state", "serving"), 10).c_str());
    out += line;
    out += "\n";
    // A job waiting for an unreachable object store says so under its row (issue #35).
    if (const auto paused = job.find("paused"); paused != job.end() && paused->is_string()) {
      out += fit("  PAUSED: " + paused->get<std::string>(), 80) + "\n";
    }
    const Json* prev_job = previous != nullptr ? named(*previous, "jobs", job.value("name", "?"))
                                               : nullptr;
    render_sources(job, prev_job, seconds, out);
    std::snprintf(line, sizeof line, "  %5s %4s %-4s %7s %6s %10s %7s %9s %6s", "RANK", "RDR", "CONN", "READY",
                  "LEASED", "RELEASED", "WAIT%", "WAIT_S", "STUCK");
    out += line;
    out += "\n";
    for (const Json& c : job.value("consumers", Json::array())) {
      const Json slots = c.value("slots", Json::object());
      const double total = num(slots, "free") + num(slots, "filling") + num(slots, "ready") + num(slots, "leased");
      auto row = [&](const std::string& reader, bool connected, double leased, double wait_frac, double wait_s,
                     bool stuck, bool ring) {
        char ready[32];
        if (ring) std::snprintf(ready, sizeof ready, "%.0f/%.0f", num(slots, "ready"), total);
        else std::snprintf(ready, sizeof ready, "-");
        char released[32];
        if (ring) std::snprintf(released, sizeof released, "%.0f", num(c, "released"));
        else std::snprintf(released, sizeof released, "-");
        std::snprintf(line, sizeof line, "  %5.0f %4s %-4s %7s %6.0f %10s %6.1f%% %9.2f %6s", num(c, "rank"),
                      reader.c_str(), connected ? "yes" : "no", ready, leased, released, wait_frac * 100, wait_s,
                      stuck ? "STUCK" : "");
        std::string row_text = line;
        row_text.erase(row_text.find_last_not_of(' ') + 1);
        out += row_text;
        out += "\n";
      };
      row("-", c.value("connected", false), num(slots, "leased"), num(c, "wait_fraction"), num(c, "wait_s"),
          c.value("stuck", false), true);
      for (const Json& r : c.value("readers", Json::array())) {
        row(std::to_string(static_cast<int>(num(r, "reader"))), r.value("connected", false), num(r, "leased"),
            num(r, "wait_fraction"), num(r, "wait_s"), r.value("stuck", false), false);
      }
    }
    // remote: one row per worker endpoint (issue #27), and its hedged/mismatches line.
    const auto remote = job.find("remote");
    if (remote != job.end() && remote->is_array() && !remote->empty()) {
      std::snprintf(line, sizeof line, "  %-21s %-4s %6s %8s %10s %7s %8s %6s", "REMOTE WORKER", "CONN", "INFLT",
                    "IMG/S", "SAMPLES", "RTT_MS", "REISSUED", "ERRORS");
      out += line;
      out += "\n";
      for (const Json& w : *remote) {
        std::snprintf(line, sizeof line, "  %-21s %-4s %6.0f %8.1f %10.0f %7.1f %8.0f %6.0f",
                      fit(w.value("endpoint", w.value("address", "?")), 21).c_str(), w.value("connected", false) ? "yes" : "no",
                      num(w, "in_flight"), num(w, "samples_per_s"), num(w, "samples"), num(w, "rtt_ms"), num(w, "reissued"),
                      num(w, "errors"));
        out += line;
        out += "\n";
        // Issue #34: what the node did about a slow or lying worker, on a line of its own (the
        // row above is full at 80 columns): items it hedged (made elsewhere too, first answer
        // won) and remote.verify's byte-for-byte mismatches (each drops the worker).
        std::snprintf(line, sizeof line, "    hedged %.0f  mismatches %.0f", num(w, "hedged"), num(w, "mismatches"));
        out += line;
        out += "\n";
      }
    }
  }
  out += "\nWAIT%: share of the last 10 s (or of the time since it connected, if shorter)\n"
         "the trainer spent blocked waiting for a batch (high: data loading is the\n"
         "bottleneck). READY: prefetched batches / ring slots.\n";
  return out;
}

}  // namespace stoker::ctl
