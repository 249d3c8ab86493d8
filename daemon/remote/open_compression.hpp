// The Open's compression fields for a job's `remote.compression` (the node's side of the choice;
// the worker's is WorkerSession::open and WorkerStream::results_wait_on_link).
#pragma once

#include "config/config.hpp"
#include "stoker/remote/worker.pb.h"

namespace stoker::remote {

inline void set_compression(v1::Open& open, config::RemoteConfig::Compression c) {
  open.set_compression(c == config::RemoteConfig::Compression::kZstd ? v1::COMPRESSION_ZSTD : v1::COMPRESSION_NONE);
  open.set_compress_when_waiting(c == config::RemoteConfig::Compression::kAuto);
}

}  // namespace stoker::remote
