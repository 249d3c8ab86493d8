// `stokerctl status` reads this JSON: jobs, consumers, ring occupancy, images/s, errors.
#include <chrono>
#include <sstream>
#include <unistd.h>

#include "image/sample_processor.hpp"
#include "device/device_delivery.hpp"
#include "server/control_server.hpp"
#include "server/job.hpp"

namespace stoker::server {
namespace {

// A consumer counts as stuck once it holds a batch this long: its lease_timeout_s, else 10 s
// (far beyond any training step that keeps up with its data).
double stuck_after(const config::JobConfig& c) { return c.lease_timeout_s > 0 ? c.lease_timeout_s : 10.0; }

std::string quoted(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

}  // namespace

void ControlServer::sample_rates() {
  const auto now = std::chrono::steady_clock::now();
  const double dt = std::chrono::duration<double>(now - last_sample_).count();
  if (dt < 1.0) return;
  for (std::size_t i = 0; i < jobs_.size(); ++i) {
    const std::uint64_t ok = jobs_[i]->stats().samples_ok;
    rates_[i] = static_cast<double>(ok - last_samples_ok_[i]) / dt;
    last_samples_ok_[i] = ok;
  }
  last_sample_ = now;
}

std::string ControlServer::status_json() const {
  std::ostringstream o;
  const double uptime =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
  o << "{\"pid\":" << ::getpid() << ",\"socket\":" << quoted(socket_path_)
    << ",\"generation\":" << daemon_generation_ << ",\"workers\":" << workers_
    << ",\"uptime_s\":" << uptime << ",\"clients\":" << sessions_.size()
    << ",\"device\":{\"backend\":" << quoted(delivery_.describe())
    << ",\"rings_awaiting_free\":" << delivery_.live_rings()
    << ",\"rings_freed\":" << delivery_.rings_freed() << "}"
    << ",\"jobs\":[";
  for (std::size_t i = 0; i < jobs_.size(); ++i) {
    const Job& j = *jobs_[i];
    const JobStats st = j.stats();
    if (i) o << ",";
    o << "{\"name\":" << quoted(j.name()) << ",\"samples\":" << j.dataset().samples.size()
      << ",\"classes\":" << j.dataset().classes.size() << ",\"batch_size\":" << j.config().batch_size
      << ",\"batches_per_epoch\":" << j.batches_per_epoch() << ",\"world_size\":" << j.world_size()
      << ",\"ranks\":[" << j.first_rank() << "," << j.first_rank() + j.consumers() - 1 << "]"
      << ",\"images_per_s\":" << rates_[i] << ",\"samples_ok\":" << st.samples_ok
      << ",\"batches_published\":" << st.batches_published
      << ",\"decode_warnings\":" << st.decode_warnings << ",\"substituted\":" << st.substituted
      << ",\"quarantined\":" << st.quarantined << ",\"transient_read_errors\":" << st.transient_read_errors
      << ",\"missing\":" << st.missing << ",\"errors\":{";
    for (int k = 1; k < 6; ++k) {
      if (k > 1) o << ",";
      o << quoted(image::to_string(static_cast<image::SampleErrorKind>(k))) << ":" << st.errors[k];
    }
    o << "},\"failure\":" << (j.failure() ? quoted(*j.failure()) : std::string("null"))
      << ",\"consumers\":[";
    const auto rings = j.ring_status();
    for (std::size_t r = 0; r < rings.size(); ++r) {
      const auto& rs = rings[r];
      if (r) o << ",";
      o << "{\"rank\":" << rs.rank << ",\"connected\":" << (rs.attached ? "true" : "false")
        << ",\"slots\":{\"free\":" << rs.free << ",\"filling\":" << rs.filling
        << ",\"ready\":" << rs.ready << ",\"leased\":" << rs.leased << "}"
        << ",\"next\":{\"epoch\":" << rs.next_epoch << ",\"batch\":" << rs.next_batch << "}"
        << ",\"published\":" << rs.published << ",\"released\":" << rs.released
        << ",\"device\":" << (rs.device_uuid.empty() ? std::string("null") : quoted(rs.device_uuid))
        << ",\"oldest_lease_s\":" << rs.oldest_lease_s
        << ",\"stuck\":" << (rs.oldest_lease_s >= stuck_after(j.config()) ? "true" : "false")
        << "}";
    }
    o << "]}";
  }
  o << "]}";
  return o.str();
}

}  // namespace stoker::server
