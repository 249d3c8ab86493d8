// Fuzz harness: a tar shard's sidecar index (source/tar_sidecar.cpp) on any bytes, what a
// bucket (or anything between) may hold beside a shard. It must not crash, and an index it
// accepts must keep every sample inside the shard and every name inside its folder: the
// sidecar is the one thing a job takes about a shard without reading the shard.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "source/tar_shards.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  namespace tar = stoker::source::tar;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  constexpr std::uint64_t kShard = 10240;  // what the seeds' own records state
  std::string why;
  if (const auto ix = tar::parse_sidecar(text, kShard, why)) {
    if (ix->file_size != kShard) std::abort();
    for (const auto& e : ix->entries) {
      if (e.size > kShard || e.offset > kShard - e.size) std::abort();
      if (tar::unsafe_name(ix->member(e))) std::abort();
    }
  } else if (why.empty()) {
    std::abort();  // a refusal always says why (the log line names it)
  }
  return 0;
}
