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

}  // namespace

std::string render_top_frame(const Json& st) {
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
