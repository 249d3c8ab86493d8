// The Open a GPU node's dispatcher sends a worker for a job (daemon/remote/link_connect.cpp,
// Link::open), built from a parsed config with a `remote:` key: for tests that play the node.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "remote/open_compression.hpp"
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
  remote::set_compression(o, rc.compression);
  return o;
}

// The JPEGs below `demo` (tests/data/demo): the paths a test's items name.
inline std::vector<std::string> demo_jpegs(const std::filesystem::path& demo) {
  std::vector<std::string> files;
  for (const auto& e : std::filesystem::recursive_directory_iterator(demo)) {
    if (e.is_regular_file() && e.path().extension() == ".jpg") files.push_back(e.path().string());
  }
  return files;
}

// `n` items numbered 1..n over `files` (in turn), epoch 0, draw i: one ItemBatch.
inline remote::v1::Request demo_items(const std::vector<std::string>& files, int n) {
  remote::v1::Request req;
  for (int i = 0; i < n; ++i) {
    remote::v1::Item* it = req.mutable_items()->add_items();
    it->set_id(static_cast<std::uint64_t>(i) + 1);
    it->set_path(files[static_cast<std::size_t>(i) % files.size()]);
    it->set_draw(static_cast<std::uint32_t>(i));
  }
  return req;
}

// A node's config with one job "small" on `demo`: decode, RandomResizedCrop(`size`), uint8,
// batches of 4, naming a remote worker (its Open is what node_open() builds from jobs[0]).
inline config::Config small_remote_job(const std::filesystem::path& demo, const std::filesystem::path& dir, int size) {
  const std::string yaml =
      "jobs:\n"
      "  small:\n"
      "    source: {root: \"" +
      demo.string() +
      "\"}\n"
      "    batch_size: 4\n"
      "    remote: {workers: [\"127.0.0.1:1\"]}\n"
      "    pipeline:\n"
      "      - decode: {}\n"
      "      - random_resized_crop: {size: " +
      std::to_string(size) +
      "}\n"
      "    output: {dtype: uint8}\n";
  return config::parse_config(yaml, "node.yaml", dir);
}

}  // namespace stoker::test
