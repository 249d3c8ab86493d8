// WebDataset tar shards: shards indexed once at start, samples read later by (offset, size).
// The header walker is our own because what the job needs from a shard is exactly the byte
// range of each image member; it trusts nothing in the file: every size and offset is checked
// against the file's size before it is used, and a header that fails its checksum stops the
// walk with the shard and offset named.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstring>
#include <exception>
#include <limits>
#include <optional>
#include <string_view>
#include <thread>
#include <unordered_set>

#include <sys/mman.h>

#include "log/log.hpp"
#include "objstore/object_url.hpp"
#include "source/dataset.hpp"
#include "source/tar_shards.hpp"
#include "base/mutex.hpp"

namespace stoker::source {
namespace tar {
namespace {

constexpr std::uint64_t kBlock = 512;
constexpr std::uint64_t kMaxLongName = 64 * 1024;   // a GNU 'L' or pax 'x' record we read whole
constexpr std::uint64_t kMaxPax = 1024 * 1024;
constexpr std::uint64_t kMaxLabelBytes = 64;        // a .cls holds one decimal number

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

std::string at(const std::string& path, std::uint64_t offset) {
  return path + ": at offset " + std::to_string(offset) + ": ";
}

// Reads exactly n bytes at offset (the caller checked the range lies inside the file).
void read_exact(int fd, const std::string& path, std::uint64_t offset, void* out, std::size_t n) {
  std::size_t got = 0;
  while (got < n) {
    const ssize_t r = ::pread(fd, static_cast<char*>(out) + got, n - got, static_cast<off_t>(offset + got));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) throw SourceError(at(path, offset) + "cannot read: " + std::strerror(errno));
    if (r == 0) throw SourceError(at(path, offset) + "the file ended early (changed while being indexed?)");
    got += static_cast<std::size_t>(r);
  }
}

// A numeric header field: octal digits (leading spaces/NULs allowed, ended by space or NUL),
// or GNU's base-256 (first byte's high bit set; negative values refused).
std::optional<std::uint64_t> number_field(const unsigned char* f, std::size_t n) {
  if (f[0] & 0x80) {
    if (f[0] & 0x40) return std::nullopt;
    std::uint64_t v = f[0] & 0x3f;
    for (std::size_t i = 1; i < n; ++i) {
      if (v >> 55) return std::nullopt;  // would not fit in 63 bits
      v = (v << 8) | f[i];
    }
    return v;
  }
  std::size_t i = 0;
  while (i < n && (f[i] == ' ' || f[i] == 0)) ++i;
  std::uint64_t v = 0;
  for (; i < n && f[i] >= '0' && f[i] <= '7'; ++i) {
    if (v >> 60) return std::nullopt;
    v = v * 8 + (f[i] - '0');
  }
  for (; i < n; ++i) {
    if (f[i] != ' ' && f[i] != 0) return std::nullopt;
  }
  return v;
}

std::string text_field(const unsigned char* f, std::size_t n) {
  std::size_t len = 0;
  while (len < n && f[len] != 0) ++len;
  return std::string(reinterpret_cast<const char*>(f), len);
}

bool checksum_ok(const unsigned char* h) {
  const auto recorded = number_field(h + 148, 8);
  if (!recorded) return false;
  // The sum is taken with the checksum field as spaces; old tars summed signed chars.
  std::uint64_t unsigned_sum = 0;
  std::int64_t signed_sum = 0;
  for (std::size_t i = 0; i < kBlock; ++i) {
    const unsigned char c = (i >= 148 && i < 156) ? ' ' : h[i];
    unsigned_sum += c;
    signed_sum += static_cast<signed char>(c);
  }
  return *recorded == unsigned_sum || static_cast<std::int64_t>(*recorded) == signed_sum;
}

// pax extended header records "LEN key=value\n"; only path and size matter here.
void parse_pax(const std::string& data, const std::string& path, std::uint64_t offset,
               std::optional<std::string>& pax_path, std::uint64_t& pax_size) {
  std::size_t pos = 0;
  while (pos < data.size()) {
    if (data[pos] == 0) break;  // NUL padding after the last record
    std::size_t len = 0;
    const auto [end, ec] = std::from_chars(data.data() + pos, data.data() + data.size(), len);
    const std::size_t space = static_cast<std::size_t>(end - data.data());
    if (ec != std::errc() || len == 0 || space >= data.size() || data[space] != ' ' || len > data.size() - pos ||
        data[pos + len - 1] != '\n') {
      throw SourceError(at(path, offset) + "corrupt pax header record");
    }
    const std::string_view rec(data.data() + space + 1, pos + len - 1 - (space + 1));
    const auto eq = rec.find('=');
    if (eq == std::string_view::npos) throw SourceError(at(path, offset) + "corrupt pax header record (no '=')");
    const std::string_view key = rec.substr(0, eq), value = rec.substr(eq + 1);
    if (key == "path") {
      pax_path = std::string(value);
    } else if (key == "size") {
      std::uint64_t v = 0;
      const auto [e, ec2] = std::from_chars(value.data(), value.data() + value.size(), v);
      if (ec2 != std::errc() || e != value.data() + value.size() || v >= (std::uint64_t{1} << 62)) {
        throw SourceError(at(path, offset) + "corrupt pax size '" + std::string(value) + "'");
      }
      pax_size = v;  // the header's own size field may not hold it (above 8 GiB)
    }
    pos += len;
  }
}

}  // namespace

bool unsafe_name(std::string_view name) {
  if (name.empty() || name.front() == '/' || name.find('\n') != std::string_view::npos) return true;
  std::size_t pos = 0;
  while (pos <= name.size()) {
    const std::size_t slash = std::min(name.find('/', pos), name.size());
    if (name.substr(pos, slash - pos) == "..") return true;
    pos = slash + 1;
  }
  return false;
}

bool image_extension(std::string_view ext) {
  for (std::string_view e : {"jpg", "jpeg", "png", "webp", "bmp", "tif", "tiff", "ppm", "pgm"}) {
    if (ext == e) return true;
  }
  return false;
}

namespace {

std::optional<std::int64_t> decimal(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\n' || s.front() == '\r')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\n' || s.back() == '\r' || s.back() == 0)) {
    s.remove_suffix(1);
  }
  std::int64_t v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return v;
}

// Members of one key, gathered until the key changes.
struct Group {
  std::string key;
  bool duplicate = false;
  struct Image {
    std::string member;
    std::uint64_t offset, size;
  };
  std::optional<Image> image;
  std::string image_ext;
  std::optional<std::int64_t> cls, txt;
};

}  // namespace

ShardIndex index_shard(const std::string& path, int fd, const Arriving* arriving) {
  Fd f;
  if (fd >= 0) {
    f.fd = ::fcntl(fd, F_DUPFD_CLOEXEC, 0);
  } else {
    do {
      f.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    } while (f.fd < 0 && errno == EINTR);
  }
  if (f.fd < 0) throw SourceError(path + ": cannot open: " + std::strerror(errno));
  struct stat st {};
  if (::fstat(f.fd, &st) != 0) throw SourceError(path + ": cannot stat: " + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) throw SourceError(path + ": not a regular file");
  // The walk goes forward through the shard: let the kernel read ahead in large requests
  // (headers of small members share pages, so most of a shard is read either way).
  if (arriving == nullptr) (void)::posix_fadvise(f.fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  ShardIndex ix;
  ix.file_size = arriving != nullptr ? arriving->size : static_cast<std::uint64_t>(st.st_size);
  ix.mtime_ns = static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1000000000LL + st.st_mtim.tv_nsec;
  const std::uint64_t file_size = ix.file_size;

  // Every read of the walk: a shard still arriving is waited for first, and what lies well
  // behind the walk is given back (punched out of the memfd) every kGiveBackStep bytes.
  constexpr std::uint64_t kGiveBackStep = 8u << 20;
  std::uint64_t given_back = 0;
  auto read_at = [&](std::uint64_t offset, void* out, std::size_t n) {
    if (arriving != nullptr) {
      if (!arriving->watch->wait_for(offset + n)) {
        throw SourceError(at(path, offset) + "the object ended early (its transfer failed, or it changed while "
                                             "being indexed)");
      }
      const std::uint64_t behind = offset & ~std::uint64_t{4095};
      if (behind >= given_back + kGiveBackStep) {
        // From 0 each time: a retry of the transfer writes the start again (holes cost nothing).
        (void)::fallocate(f.fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, static_cast<off_t>(behind));
        given_back = behind;
      }
    }
    read_exact(f.fd, path, offset, out, n);
  };

  unsigned char h[kBlock];
  if (file_size >= 2) {
    read_at(0, h, 2);
    if (h[0] == 0x1f && h[1] == 0x8b) {
      throw SourceError(path + ": gzip-compressed; tar shards must be uncompressed (members are read by offset): "
                               "gunzip it, or re-write the shards without compression");
    }
  }

  std::unordered_set<std::string> keys;  // every key seen in this shard
  Group g;
  auto skip = [&](SkipKind kind, const std::string& member) {
    if (ix.skipped[kind]++ == 0) {
      ix.first_skipped[kind] = member;
      std::replace(ix.first_skipped[kind].begin(), ix.first_skipped[kind].end(), '\n', '?');  // one log line
    }
  };
  auto finish = [&] {
    if (g.key.empty()) return;
    if (g.duplicate) {
      // counted when it was found
    } else if (!g.image) {
      skip(kNoImage, g.key);
    } else {
      ix.add(g.image->member, g.image->offset, g.image->size, g.cls ? *g.cls : g.txt ? *g.txt : -1);
    }
    g = Group{};
  };
  auto small_member = [&](std::uint64_t offset, std::uint64_t size) {
    std::string s(size, '\0');
    read_at(offset, s.data(), size);
    return s;
  };

  std::optional<std::string> long_name, pax_path;
  // A pax 'size' record overrides the next header's size field; kNoPaxSize: none pending.
  constexpr std::uint64_t kNoPaxSize = ~std::uint64_t{0};
  std::uint64_t pax_size = kNoPaxSize;
  std::uint64_t pos = 0;
  while (pos < file_size) {
    // Invariant: pos is a multiple of 512 and below the file size.
    if (file_size - pos < kBlock) {
      throw SourceError(at(path, pos) + "truncated tar header (" + std::to_string(file_size - pos) +
                        " of 512 bytes before the end of the file)");
    }
    read_at(pos, h, kBlock);
    if (std::all_of(h, h + kBlock, [](unsigned char c) { return c == 0; })) break;  // end-of-archive block
    if (!checksum_ok(h)) {
      throw SourceError(at(path, pos) + "corrupt tar header (checksum mismatch; not a tar file, or damaged)");
    }
    const auto header_size = number_field(h + 124, 12);
    if (!header_size) throw SourceError(at(path, pos) + "corrupt tar header (size field)");
    const std::uint64_t size = pax_size != kNoPaxSize ? pax_size : *header_size;
    const std::uint64_t data = pos + kBlock;
    if (size > file_size - data) {
      throw SourceError(at(path, pos) + "truncated: member '" + text_field(h, 100) + "' needs " + std::to_string(size) +
                        " bytes, the file ends " + std::to_string(file_size - data) + " bytes after its header");
    }
    const std::uint64_t next = data + (size + kBlock - 1) / kBlock * kBlock;
    const char type = static_cast<char>(h[156]);

    if (type == 'L' || type == 'x') {
      if (size > (type == 'L' ? kMaxLongName : kMaxPax)) {
        throw SourceError(at(path, pos) + "corrupt tar header (a " + std::to_string(size) + "-byte " +
                          (type == 'L' ? "long name" : "pax header") + ")");
      }
      std::string s = small_member(data, size);
      if (type == 'L') {
        s.resize(std::strlen(s.c_str()));  // NUL-terminated inside its blocks
        long_name = std::move(s);
      } else {
        parse_pax(s, path, pos, pax_path, pax_size);
      }
      pos = next;
      continue;
    }
    if (type == 'g' || type == 'K') {  // global pax record, GNU long link name: nothing we use
      pos = next;
      continue;
    }

    // A real member: its name is the pax path, else the GNU long name, else prefix/name.
    std::string name;
    if (pax_path) {
      name = std::move(*pax_path);
    } else if (long_name) {
      name = std::move(*long_name);
    } else {
      name = text_field(h, 100);
      const bool posix_ustar = std::memcmp(h + 257, "ustar\0", 6) == 0;  // GNU's "ustar  " has no prefix
      if (posix_ustar && h[345] != 0) name = text_field(h + 345, 155) + "/" + name;
    }
    pax_path.reset();
    long_name.reset();
    pax_size = kNoPaxSize;
    pos = next;

    while (name.size() >= 2 && name.compare(0, 2, "./") == 0) name.erase(0, 2);  // `tar -C dir .`
    const bool regular = type == '0' || type == 0 || type == '7';
    if (type == '5' || (regular && !name.empty() && name.back() == '/')) continue;  // directories
    // Skipped members leave the current group open: a symlink between a.jpg and a.cls
    // does not split sample a in two.
    if (!regular) {
      skip(kNotRegular, name);
      continue;
    }
    if (unsafe_name(name)) {
      skip(kUnsafeName, name);
      continue;
    }

    const std::size_t base = name.rfind('/') == std::string::npos ? 0 : name.rfind('/') + 1;
    const std::size_t dot = name.find('.', base);
    std::string key = name.substr(0, dot);
    std::string ext = dot == std::string::npos ? std::string() : name.substr(dot + 1);
    for (char& c : ext) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (key != g.key) {
      finish();
      g.key = key;
      if (!keys.insert(key).second) {
        g.duplicate = true;
        skip(kDuplicateKey, name);
      }
    }
    if (g.duplicate) continue;
    if (image_extension(ext)) {
      if (g.image) {
        // The same member name again: the first one stays the sample. An image of another
        // kind under the same key (a mask, a depth map) is not the sample either.
        if (ext == g.image_ext) skip(kDuplicateKey, name);
        continue;
      }
      g.image = Group::Image{name, data, size};
      g.image_ext = ext;
    } else if (ext == "cls" || ext == "txt") {
      if (ext == "cls" && size > kMaxLabelBytes) {
        throw SourceError(path + ": member '" + name + "': a " + std::to_string(size) + "-byte .cls (expected a class number)");
      }
      if (size > kMaxLabelBytes) continue;  // a caption, not a label
      const auto v = decimal(small_member(data, size));
      if (ext == "cls") {
        if (!v || *v < 0) {
          throw SourceError(path + ": member '" + name + "': not a class number (a non-negative decimal integer)");
        }
        g.cls = v;
      } else if (v && *v >= 0) {
        g.txt = v;
      }
    }
  }
  finish();
  return ix;
}

}  // namespace tar

std::vector<std::string> expand_braces(const std::string& pattern) {
  constexpr std::size_t kMaxNames = 10'000'000;
  const std::size_t open = pattern.find('{');
  if (open == std::string::npos) {
    if (pattern.find('}') != std::string::npos) throw SourceError(pattern + ": '}' without '{'");
    return {pattern};
  }
  const std::size_t close = pattern.find('}', open);
  if (close == std::string::npos) throw SourceError(pattern + ": '{' without '}'");
  const std::string body = pattern.substr(open + 1, close - open - 1);
  if (body.find('{') != std::string::npos) throw SourceError(pattern + ": nested braces are not supported");
  std::vector<std::string> alternatives;
  if (const std::size_t dots = body.find(".."); dots != std::string::npos) {
    const std::string a = body.substr(0, dots), b = body.substr(dots + 2);
    std::uint64_t lo = 0, hi = 0;
    auto parse = [&](const std::string& s, std::uint64_t& v) {
      const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
      return !s.empty() && ec == std::errc() && end == s.data() + s.size();
    };
    if (!parse(a, lo) || !parse(b, hi)) {
      throw SourceError(pattern + ": '{" + body + "}' is not a range of non-negative integers like {000..127}");
    }
    if (hi < lo) throw SourceError(pattern + ": '{" + body + "}' counts down; write the smaller bound first");
    if (hi - lo >= kMaxNames) throw SourceError(pattern + ": '{" + body + "}' names more than 10^7 shards");
    // Zero-padded as written: a bound with a leading zero fixes the width (braceexpand's rule).
    const bool padded = (a.size() > 1 && a[0] == '0') || (b.size() > 1 && b[0] == '0');
    const std::size_t width = padded ? std::max(a.size(), b.size()) : 0;
    for (std::uint64_t v = lo; v <= hi; ++v) {
      std::string s = std::to_string(v);
      if (s.size() < width) s.insert(0, width - s.size(), '0');
      alternatives.push_back(std::move(s));
    }
  } else if (body.find(',') != std::string::npos) {
    for (std::size_t pos = 0;;) {
      const std::size_t comma = body.find(',', pos);
      alternatives.push_back(body.substr(pos, comma - pos));
      if (comma == std::string::npos) break;
      pos = comma + 1;
    }
  } else {
    throw SourceError(pattern + ": '{" + body + "}' is neither a range {A..B} nor a list {a,b}");
  }
  const std::vector<std::string> rest = expand_braces(pattern.substr(close + 1));
  if (alternatives.size() * rest.size() > kMaxNames) throw SourceError(pattern + ": names more than 10^7 shards");
  std::vector<std::string> out;
  out.reserve(alternatives.size() * rest.size());
  const std::string head = pattern.substr(0, open);
  for (const auto& alt : alternatives) {
    for (const auto& r : rest) out.push_back(head + alt + r);
  }
  return out;
}

namespace {

bool compressed_name(const std::string& path) {
  for (std::string_view e : {".gz", ".tgz", ".zst", ".bz2", ".xz"}) {
    if (path.size() >= e.size() && path.compare(path.size() - e.size(), e.size(), e) == 0) return true;
  }
  return false;
}

}  // namespace

namespace {

// An object's headers walked as its body arrives: one GET (the one pass over its bytes that
// indexing needs) streams into a memfd, and index_shard walks the headers behind the download,
// giving back the pages it has passed. So the index is ready about when the last byte is, and
// an indexing thread holds about what the download is ahead of its walk, not the shard.
// `size` is the object's size as HEAD gave it; a body of another size is refused (changed).
tar::ShardIndex index_object(const std::string& url_text, const objstore::ObjectUrl& url, objstore::Fetcher& fetcher,
                             std::uint64_t size) {
  const int fd = ::memfd_create("stoker-tar-index", MFD_CLOEXEC);
  if (fd < 0) throw SourceError(url_text + ": cannot index: memfd_create: " + std::strerror(errno));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  objstore::SinkWatch watch;
  objstore::FetchResult got;
  std::thread transfer([&] {
    got = fetcher.get_to_fd(url, fd, &watch);
    watch.finished();
  });
  const tar::Arriving arriving{size, &watch};
  tar::ShardIndex ix;
  try {
    ix = tar::index_shard(url_text, fd, &arriving);
  } catch (...) {
    // The transfer ended before the walk needed its next bytes: its own error is the one to
    // report (a store that failed is no corrupt shard), or a body shorter than HEAD said.
    const bool transfer_ended = watch.has_finished();
    watch.cancel();  // else the shard is corrupt: fetch no more of it
    transfer.join();
    if (transfer_ended && !got.ok()) throw SourceError(got.message);
    if (transfer_ended && got.size != size) {
      throw SourceError(url_text + ": changed while it was indexed (" + std::to_string(size) + " then " +
                        std::to_string(got.size) + " bytes); start the job again");
    }
    throw;
  }
  // The walk stops at the end-of-archive block; the padding after it is still arriving.
  transfer.join();
  if (!got.ok()) throw SourceError(got.message);
  ix.file_size = got.size;
  return ix;
}

// The shard's sidecar index (tar::sidecar_url), when there is one that can be used; else the
// shard is indexed by reading it. A sidecar that is there but cannot be used is logged once
// per job with the reason (its first), not refused: the walk gives the same index, slower.
std::optional<tar::ShardIndex> sidecar_index(const std::string& shard, objstore::Fetcher& fetcher, std::uint64_t size,
                                             const std::string& log_name, std::atomic<bool>& told) {
  std::string why;
  const std::string idx = tar::sidecar_url(shard);
  const auto url = objstore::parse_object_url(idx, why);
  if (!url) return std::nullopt;
  const objstore::FetchResult got = fetcher.get(*url, /*use_cache=*/false);
  if (got.error == objstore::FetchError::kNotFound) return std::nullopt;  // none: the usual case
  if (!got.ok()) {
    why = got.message;
  } else if (auto ix = tar::parse_sidecar(
                 std::string_view(reinterpret_cast<const char*>(got.body.data()), got.body.size()), size, why)) {
    return ix;
  }
  if (!told.exchange(true)) {
    stoker::log::info("{}: not using the sidecar index {} ({}); indexing such shards by reading them", log_name, idx,
                      why);
  }
  return std::nullopt;
}

Dataset read_tar_shards_unsettled(const std::vector<std::string>& patterns, const std::filesystem::path& index_cache,
                                  const ReadAs* as, const std::string& log_name, objstore::Fetcher* fetcher) {
  std::vector<std::string> shards;
  for (const auto& p : patterns) {
    for (auto& s : expand_braces(p)) shards.push_back(std::move(s));
  }
  if (shards.empty()) throw SourceError("no tar shards given");
  for (const auto& s : shards) {
    if (compressed_name(s)) {
      throw SourceError(s + ": compressed shards are not supported (members are read by offset); "
                            "decompress the shards to plain .tar");
    }
  }

  const auto t0 = std::chrono::steady_clock::now();
  std::map<std::string, tar::ShardIndex> cached;
  if (!index_cache.empty()) cached = tar::load_index_cache(index_cache);
  std::vector<tar::ShardIndex> fresh(shards.size());
  std::vector<const tar::ShardIndex*> indexes(shards.size(), nullptr);
  std::vector<std::exception_ptr> errors(shards.size());
  std::atomic<std::size_t> next{0}, done{0}, walked{0}, from_sidecar{0};
  std::atomic<bool> sidecar_told{false};
  // Wakes the reporting thread when the last shard is done; `done` is atomic, the mutex only
  // orders that last notify after the reporter's check (no lost wake-up).
  base::Mutex mu;
  base::CondVar cv;

  // A shard's index is taken from the cache when its size and mtime are those it had when
  // indexed; else its headers are walked. Each thread writes only its own shards' slots.
  auto work = [&] {
    for (std::size_t i; (i = next.fetch_add(1)) < shards.size();) {
      try {
        if (objstore::looks_like_url(shards[i])) {
          // An object: keyed in the cache by its size and Last-Modified, as a file by size and mtime.
          std::string why;
          const auto url = objstore::parse_object_url(shards[i], why);
          if (!url) throw SourceError(shards[i] + ": " + why);
          if (fetcher == nullptr) throw SourceError(shards[i] + ": object storage is not set up for this source");
          const objstore::FetchResult head = fetcher->head(*url);
          if (!head.ok()) throw SourceError(head.message);
          const std::int64_t mtime = head.mtime < 0 ? -1 : head.mtime * 1000000000LL;
          const auto it = cached.find(shards[i]);
          if (it != cached.end() && it->second.file_size == head.size && it->second.mtime_ns == mtime && mtime >= 0) {
            indexes[i] = &it->second;
          } else if (auto side = sidecar_index(shards[i], *fetcher, head.size, log_name, sidecar_told)) {
            fresh[i] = std::move(*side);
            fresh[i].mtime_ns = mtime;
            indexes[i] = &fresh[i];
            from_sidecar.fetch_add(1);
          } else {
            fresh[i] = index_object(shards[i], *url, *fetcher, head.size);
            if (fresh[i].file_size != head.size) {
              throw SourceError(shards[i] + ": changed while it was indexed (" + std::to_string(head.size) + " then " +
                                std::to_string(fresh[i].file_size) + " bytes); start the job again");
            }
            fresh[i].mtime_ns = mtime;
            indexes[i] = &fresh[i];
            walked.fetch_add(1);
          }
          if (done.fetch_add(1) + 1 == shards.size()) {
            base::MutexLock lock(mu);
            cv.notify_all();
          }
          continue;
        }
        struct stat st {};
        // For a client's user (`as`): checked on a descriptor, which is then what is stat'ed
        // and indexed, so the index (cached or walked) is of a shard that user could read.
        int checked = -1;
        if (as != nullptr) {
          const base::Result<int> opened = open_checked(shards[i], *as, /*directory=*/false);
          if (!opened) throw SourceError(shards[i] + ": cannot read: " + opened.status().message());
          checked = *opened;
        }
        struct Closer {
          int fd;
          ~Closer() {
            if (fd >= 0) ::close(fd);
          }
        } closer{checked};
        if ((checked >= 0 ? ::fstat(checked, &st) : ::stat(shards[i].c_str(), &st)) != 0) {
          throw SourceError(shards[i] + ": cannot read: " + std::strerror(errno));
        }
        const std::int64_t mtime = static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1000000000LL + st.st_mtim.tv_nsec;
        const auto it = cached.find(shards[i]);
        if (it != cached.end() && it->second.file_size == static_cast<std::uint64_t>(st.st_size) &&
            it->second.mtime_ns == mtime) {
          indexes[i] = &it->second;
        } else {
          fresh[i] = tar::index_shard(shards[i], checked);
          indexes[i] = &fresh[i];
          walked.fetch_add(1);
        }
      } catch (...) {
        errors[i] = std::current_exception();
      }
      if (done.fetch_add(1) + 1 == shards.size()) {
        base::MutexLock lock(mu);
        cv.notify_all();
      }
    }
  };
  // Four threads whatever the cores: walking headers waits on the disk or the network file
  // system far more than it computes.
  const std::size_t threads = std::min<std::size_t>(shards.size(), 4);
  {
    std::vector<std::jthread> pool;
    for (std::size_t t = 1; t < threads; ++t) pool.emplace_back(work);
    if (shards.size() >= 64) {
      // Many shards: this thread reports progress while the others index.
      stoker::log::info("{}: indexing {} tar shard(s) with {} thread(s) (unchanged ones from the cache)", log_name,
                        shards.size(), threads);
      base::MutexLock lock(mu);
      while (!cv.wait_for(lock, std::chrono::seconds(2), [&] { return done.load() == shards.size(); })) {
        stoker::log::info("{}: indexed {} of {} tar shard(s)", log_name, done.load(), shards.size());
      }
    } else {
      work();
    }
  }
  for (const auto& e : errors) {
    if (e) std::rethrow_exception(e);  // the first failing shard in pattern order
  }

  Dataset ds;
  ds.shards = shards;
  if (fetcher != nullptr) {
    ds.shard_source.assign(shards.size(), Dataset::kLocalShard);
    for (std::size_t i = 0; i < shards.size(); ++i) {
      if (objstore::looks_like_url(shards[i])) ds.shard_source[i] = 0;
    }
  }
  std::size_t total = 0, labelled = 0;
  std::int64_t max_label = -1;
  std::array<std::uint64_t, tar::kSkipKinds> skipped{};
  for (std::size_t i = 0; i < shards.size(); ++i) {
    total += indexes[i]->entries.size();
    for (const auto& e : indexes[i]->entries) {
      labelled += e.label >= 0 ? 1 : 0;
      max_label = std::max(max_label, e.label);
    }
    for (std::size_t k = 0; k < tar::kSkipKinds; ++k) {
      if (indexes[i]->skipped[k] != 0 && skipped[k] == 0) {
        stoker::log::warn("{}: {}: member '{}' skipped: {} (the first such; all are counted below)", log_name,
                          shards[i], indexes[i]->first_skipped[k], tar::kSkipWhat[k]);
      }
      skipped[k] += indexes[i]->skipped[k];
    }
  }
  if (total == 0) throw SourceError(shards.front() + (shards.size() > 1 ? " and the other shards" : "") +
                                    ": no samples (no member with an image extension)");
  if (total > std::numeric_limits<std::uint32_t>::max()) {
    throw SourceError(shards.front() + ": " + std::to_string(total) + " samples, more than the 2^32 - 1 a job can index");
  }
  if (max_label > 1000000) throw SourceError(shards.front() + ": class numbers above 1,000,000");
  // Labelled or not is all or nothing: a sample without a label among labelled ones would
  // otherwise get a made-up class.
  if (labelled != 0 && labelled != total) {
    for (std::size_t i = 0; i < shards.size(); ++i) {
      for (const auto& e : indexes[i]->entries) {
        if (e.label < 0) {
          const std::string member(indexes[i]->member(e));
          throw SourceError(shards[i] + ": sample '" + member.substr(0, member.rfind('.')) +
                            "' has no .cls label, but other samples have one");
        }
      }
    }
  }
  for (std::int64_t c = 0; c <= max_label; ++c) ds.classes.push_back(std::to_string(c));
  ds.samples.reserve(total);
  for (std::size_t i = 0; i < shards.size(); ++i) {
    for (const auto& e : indexes[i]->entries) {
      ds.add(indexes[i]->member(e), e.label, static_cast<std::uint32_t>(i), e.offset, e.size);
    }
  }

  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (walked.load() == 0 && from_sidecar.load() == 0) {
    stoker::log::info("{}: index of {} shard(s) loaded from cache {} ({:.2f} s)", log_name, shards.size(),
                      index_cache.string(), secs);
  } else {
    const std::size_t sidecars = from_sidecar.load();
    stoker::log::info("{}: indexed {} of {} tar shard(s) in {:.2f} s ({}{} from cache)", log_name, walked.load(),
                      shards.size(), secs, sidecars == 0 ? "" : std::to_string(sidecars) + " from sidecar indexes, ",
                      shards.size() - walked.load() - sidecars);
  }
  if (walked.load() + from_sidecar.load() != 0 || cached.size() != shards.size()) {
    if (!index_cache.empty()) {
      const std::string err = tar::save_index_cache(index_cache, shards, indexes);
      if (!err.empty())
        stoker::log::warn("{}: cannot write the index cache ({}); shards will be indexed again next start", log_name,
                          err);
    }
  }
  stoker::log::info(
      "{}: {} sample(s) in {} shard(s), {}", log_name, total, shards.size(),
      labelled ? std::to_string(ds.classes.size()) + " class(es) from .cls" : std::string("unlabelled (label -1)"));
  std::uint64_t any = 0;
  for (auto n : skipped) any += n;
  if (any != 0) {
    stoker::log::warn(
        "{}: skipped while indexing: {} duplicate key(s), {} sample(s) without an image member, {} unsafe "
        "name(s), {} non-regular member(s)",
        log_name, skipped[tar::kDuplicateKey], skipped[tar::kNoImage], skipped[tar::kUnsafeName],
        skipped[tar::kNotRegular]);
  }
  return ds;
}

}  // namespace

Dataset read_tar_shards(const std::vector<std::string>& patterns, const std::filesystem::path& index_cache,
                        const std::string& log_name, const ReadAs* as, std::shared_ptr<objstore::Fetcher> fetcher) {
  Dataset d = read_tar_shards_unsettled(patterns, index_cache, as, log_name, fetcher.get());
  if (fetcher != nullptr) d.object_sources.push_back(ObjectSource{patterns.front(), std::move(fetcher)});
  settle(d);
  return d;
}

}  // namespace stoker::source
