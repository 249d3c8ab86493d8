// The Open a GPU node's dispatcher sends a worker for a job (daemon/remote/dispatcher.cpp,
// Link::open), built from a parsed config with a `remote:` key: for tests that play the node.
#pragma once

#include "config/config.hpp"
#include "remote/protocol.hpp"
#include "stoker/remote/worker.pb.h"

namespace stoker::test {

inline remote::v1::Open node_open(const config::JobConfig& j) {
  const config::RemoteConfig& rc = j.remote;
  remote::v1::Open o;
  o.set_protocol_major(remote::kWorkerMajor);
  o.set_protocol_minor(remote::kWorkerMinor);
  o.set_token(rc.token);
  o.set_job(j.name);
  o.set_job_yaml(rc.worker_yaml);
  o.set_base_dir(rc.base_dir.string());
  o.set_origin(rc.origin);
  o.set_pixel_seed(j.pixel_seed());
  o.set_sample_bytes(j.pipeline.sample_bytes());
  o.set_compression(rc.zstd ? remote::v1::COMPRESSION_ZSTD : remote::v1::COMPRESSION_NONE);
  return o;
}

}  // namespace stoker::test
