#include "remote/protocol.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include <zstd.h>

namespace stoker::remote {

std::string version_mismatch(std::uint32_t their_major, std::uint32_t their_minor, const char* their_side) {
  if (their_major == kWorkerMajor) return {};
  return std::string(their_side) + " speaks worker protocol " + std::to_string(their_major) + "." +
         std::to_string(their_minor) + ", this stokerd " + std::to_string(kWorkerMajor) + "." +
         std::to_string(kWorkerMinor) + ": another major version (upgrade both to the same release)";
}

bool token_equal(std::string_view presented, std::string_view expected) {
  unsigned char diff = presented.size() == expected.size() ? 0 : 1;
  for (std::size_t i = 0; i < presented.size(); ++i) {
    diff |= static_cast<unsigned char>(presented[i] ^ (i < expected.size() ? expected[i] : 0));
  }
  return diff == 0;
}

void compress(std::span<const std::uint8_t> in, std::string& out) {
  // One context per thread; frames carry their content size and a checksum, so a frame
  // spoiled on the way (or by the worker) is refused rather than decoded into other pixels.
  thread_local std::unique_ptr<ZSTD_CCtx, std::size_t (*)(ZSTD_CCtx*)> cctx(ZSTD_createCCtx(), ZSTD_freeCCtx);
  ZSTD_CCtx_setParameter(cctx.get(), ZSTD_c_compressionLevel, 1);
  ZSTD_CCtx_setParameter(cctx.get(), ZSTD_c_checksumFlag, 1);
  out.resize(ZSTD_compressBound(in.size()));
  const std::size_t n = ZSTD_compress2(cctx.get(), out.data(), out.size(), in.data(), in.size());
  // Only a too-small buffer fails, and compressBound rules that out.
  out.resize(ZSTD_isError(n) ? 0 : n);
}

base::Status decompress(std::string_view in, std::span<std::uint8_t> out) {
  const unsigned long long size = ZSTD_getFrameContentSize(in.data(), in.size());
  if (size == ZSTD_CONTENTSIZE_ERROR || size == ZSTD_CONTENTSIZE_UNKNOWN) {
    return base::Status::error("not a zstd frame with its size");
  }
  if (size != out.size()) {
    return base::Status::error("a compressed sample of " + std::to_string(size) + " bytes, expected " +
                               std::to_string(out.size()));
  }
  const std::size_t n = ZSTD_decompress(out.data(), out.size(), in.data(), in.size());
  if (ZSTD_isError(n) || n != out.size()) {
    return base::Status::error(std::string("corrupt zstd frame: ") + (ZSTD_isError(n) ? ZSTD_getErrorName(n) : "short"));
  }
  return {};
}

base::Status read_bytes(const std::string& path, bool member, std::uint64_t offset, std::uint64_t size,
                        std::vector<std::uint8_t>& out) {
  // O_NONBLOCK: opening a FIFO (or a device) inside --allow-root must not wait for a writer;
  // it is refused below, as anything but a regular file is, for a member too (a device read
  // as a "tar shard" would hand out whatever it produces). Regular files ignore the flag.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return base::Status::error(path + ": " + std::strerror(errno));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  return read_fd(fd, path, member, offset, size, out);
}

base::Status read_fd(int fd, const std::string& path, bool member, std::uint64_t offset, std::uint64_t size,
                     std::vector<std::uint8_t>& out) {
  struct stat st{};
  if (::fstat(fd, &st) != 0) return base::Status::error(path + ": " + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) return base::Status::error(path + ": not a regular file");
  const auto file_size = static_cast<std::uint64_t>(st.st_size);
  if (!member) {
    offset = 0;
    size = file_size;
  }
  if (size > kMaxReadBytes) return base::Status::error(path + ": " + std::to_string(size) + " bytes, more than a sample may have");
  // A member past the file's end is refused before its size is allocated (a peer naming 1 GiB
  // members of a small file would otherwise have each decode thread allocate and zero 1 GiB).
  if (offset > file_size || size > file_size - offset) {
    return base::Status::error(path + ": ends before the sample's " + std::to_string(size) + " bytes");
  }
  out.resize(size);
  std::uint64_t done = 0;
  while (done < size) {
    const ssize_t n = ::pread(fd, out.data() + done, size - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return base::Status::error(path + ": " + std::strerror(errno));
    if (n == 0) return base::Status::error(path + ": ends before the sample's " + std::to_string(size) + " bytes");
    done += static_cast<std::uint64_t>(n);
  }
  return {};
}

}  // namespace stoker::remote
