// What `stokerctl status`, /metrics and `stokerctl top` show of one remote worker endpoint of
// a job (remote/dispatcher.hpp fills it). Plain data, no gRPC: the job table and the control
// wing use it whether or not this stokerd was built with remote workers.
#pragma once

#include <cstdint>
#include <string>

namespace stoker::remote {

// One worker endpoint, for `stokerctl status`, /metrics and `stokerctl top`.
struct WorkerLinkStatus {
  std::string address;   // the `workers` entry as written
  std::string endpoint;  // the address it resolved to (ip:port)
  bool connected = false;
  std::uint32_t in_flight = 0;   // items sent, not answered
  std::uint32_t window = 0;      // the most it may hold now (from its threads, rate and round trip)
  std::uint32_t threads = 0;     // the worker's decode threads
  std::uint64_t samples = 0;     // answered and written into batches
  std::uint64_t reissued = 0;    // handed back to the queue after a failure of this worker
  std::uint64_t errors = 0;      // stream failures (disconnects, stalls, garbage, refusals)
  // Results this node made again (remote.verify, or a "bad file" verdict) that differed from
  // the worker's answer: each drops the worker's stream (issue #34, A5/A6).
  std::uint64_t mismatches = 0;
  // Items outstanding past the link's hedge time (a multiple of its answer time), made here
  // instead; the worker's late answer is discarded (A7). Counted in `reissued` too.
  std::uint64_t hedged = 0;
  // Items the worker answered "cannot read" (its storage, its --allow-root, its object storage
  // credentials): made here, never a verdict on the file; the reason is in last_error.
  std::uint64_t read_failures = 0;
  std::uint64_t bytes_received = 0;
  // Of `samples`, those that arrived compressed (remote.compression: zstd, or auto while the
  // worker's results waited on the connection).
  std::uint64_t compressed = 0;
  double rtt_s = 0;              // mean round trip of the last items
  double samples_per_s = 0;      // over the last second or so
  // Where this stream's results arrive: a TCP connection of their own (protocol 1.3, plaintext
  // links) or the gRPC stream (TLS, an older worker, or a connection that could not be made).
  bool results_tcp = false;
  // Where this node's items travel: on that connection too (a 1.4 worker), or the gRPC stream.
  bool items_tcp = false;
  std::string last_error;        // why the last stream ended or was refused, or the last read failure
};

}  // namespace stoker::remote
