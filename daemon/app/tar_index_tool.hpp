// `stokerd --write-tar-index SHARD...`: writes each local tar shard's index beside it as a
// sidecar ("train-000001.tar" -> "train-000001.idx"), in the format a job reading the shards
// from a bucket takes instead of reading every shard once at start (source/tar_sidecar.cpp).
// Upload the .idx files beside the shards.
#pragma once

#include <string>
#include <vector>

namespace stoker::app {

// Returns the exit code: 0 when every sidecar was written, 1 otherwise (each failure named on
// stderr, with the shard).
int write_tar_indexes(const std::vector<std::string>& patterns);

}  // namespace stoker::app
