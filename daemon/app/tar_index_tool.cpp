#include "app/tar_index_tool.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

#include "objstore/object_url.hpp"
#include "source/dataset.hpp"
#include "source/tar_shards.hpp"

namespace stoker::app {
namespace {

// What lies at `path` now: nothing (ENOENT), one of Stoker's sidecars, or something else,
// which is never overwritten (a DALI index a pipeline may still need, or a user's file).
bool replaceable(const std::string& path, std::string& why) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return true;
    why = std::string("cannot open it: ") + std::strerror(errno);
    return false;
  }
  char head[18] = {};
  const ssize_t n = ::read(fd, head, sizeof head);
  ::close(fd);
  if (n == static_cast<ssize_t>(sizeof head) && std::memcmp(head, "stoker-tar-index ", 17) == 0) return true;
  why = "it exists and is not a Stoker index (a DALI index?); move it away first";
  return false;
}

}  // namespace

int write_tar_indexes(const std::vector<std::string>& patterns) {
  int failed = 0, written = 0;
  for (const auto& pattern : patterns) {
    for (const auto& shard : source::expand_braces(pattern)) {
      if (objstore::looks_like_url(shard)) {
        std::fprintf(stderr, "stokerd: %s: index a shard where it is a file, then upload the .idx beside it\n",
                     shard.c_str());
        ++failed;
        continue;
      }
      const std::string idx = source::tar::sidecar_url(shard);
      std::string why;
      try {
        const source::tar::ShardIndex ix = source::tar::index_shard(shard);
        const std::string name = shard.substr(shard.rfind('/') == std::string::npos ? 0 : shard.rfind('/') + 1);
        if (replaceable(idx, why)) why = source::tar::write_new_file(idx, source::tar::format_index({name}, {&ix}));
        if (why.empty()) {
          std::printf("%s: %zu sample(s)\n", idx.c_str(), ix.entries.size());
          ++written;
          continue;
        }
      } catch (const source::SourceError& e) {
        why = e.what();
      }
      std::fprintf(stderr, "stokerd: %s: %s\n", idx.c_str(), why.c_str());
      ++failed;
    }
  }
  std::printf("wrote %d sidecar index(es), %d failed\n", written, failed);
  return failed == 0 && written > 0 ? 0 : 1;
}

}  // namespace stoker::app
