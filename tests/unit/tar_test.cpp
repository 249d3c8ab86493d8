// Unit tier: WebDataset tar shards. Shards are written by the test's own tiny writer; the
// index must give each image member's exact byte range, group members by key, skip what is
// unsafe or odd without failing, refuse what is broken naming shard and offset, and be cached.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "no_free_descriptors.hpp"
#include "source/dataset.hpp"
#include "source/file_reader.hpp"
#include "source/mapped_allocator.hpp"
#include "source/sample_reader.hpp"

#include <sys/resource.h>
#include "objstore/sink_watch.hpp"
#include "source/tar_shards.hpp"
#include "tar_writer.hpp"

namespace fs = std::filesystem;
using Catch::Contains;
using stoker::source::expand_braces;
using stoker::source::read_tar_shards;
using stoker::source::SourceError;
using stoker::test::TarWriter;
namespace tar = stoker::source::tar;

namespace {

class Dir {
 public:
  Dir() {
    static int counter = 0;
    path_ = fs::temp_directory_path() / ("stoker-tar-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~Dir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string operator/(const std::string& name) const { return (path_ / name).string(); }

 private:
  fs::path path_;
};

std::string error_of(const std::vector<std::string>& patterns, const fs::path& cache = {}) {
  try {
    read_tar_shards(patterns, cache);
  } catch (const SourceError& e) {
    return e.what();
  }
  return "(accepted)";
}

std::string bytes_at(const stoker::source::Dataset& ds, std::size_t id) {
  std::vector<std::uint8_t> out;
  const auto& s = ds.samples[id];
  const auto r = stoker::source::read_range(ds.shards[s.shard], s.offset, s.size, out);
  REQUIRE(r.ok());
  return std::string(out.begin(), out.end());
}

void set_mtime(const std::string& path, long sec) {
  const struct timespec t[2] = {{sec, 0}, {sec, 0}};
  REQUIRE(::utimensat(AT_FDCWD, path.c_str(), t, 0) == 0);
}

}  // namespace

TEST_CASE("tar: brace ranges keep the zero padding as written, lists and several groups expand in order", "[source][tar]") {
  CHECK(expand_braces("/d/train-{000000..000002}.tar") ==
        std::vector<std::string>{"/d/train-000000.tar", "/d/train-000001.tar", "/d/train-000002.tar"});
  CHECK(expand_braces("s{8..11}.tar") == std::vector<std::string>{"s8.tar", "s9.tar", "s10.tar", "s11.tar"});
  CHECK(expand_braces("s{08..10}.tar") == std::vector<std::string>{"s08.tar", "s09.tar", "s10.tar"});
  CHECK(expand_braces("{a,b}-{0..1}.tar") == std::vector<std::string>{"a-0.tar", "a-1.tar", "b-0.tar", "b-1.tar"});
  CHECK(expand_braces("plain.tar") == std::vector<std::string>{"plain.tar"});
  CHECK(expand_braces("x-{0000..1023}.tar").size() == 1024);
  auto refusal = [](const std::string& p) {
    try {
      expand_braces(p);
    } catch (const SourceError& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  CHECK_THAT(refusal("a-{3..1}.tar"), Contains("counts down"));
  CHECK_THAT(refusal("a-{1..x}.tar"), Contains("not a range"));
  CHECK_THAT(refusal("a-{1..2.tar"), Contains("'{' without '}'"));
  CHECK_THAT(refusal("a-1}.tar"), Contains("'}' without '{'"));
  CHECK_THAT(refusal("a-{0..99999999}.tar"), Contains("more than 10^7"));
}

TEST_CASE("tar: samples are groups of members sharing a key, with byte ranges and labels from .cls", "[source][tar]") {
  Dir d;
  const std::string long_dir = std::string(120, 'd');  // needs the ustar prefix field
  TarWriter w;
  w.global_pax("20 comment=whatever\n")
      .directory("cls0/")
      .file("cls0/a.jpg", "AAAA")
      .file("cls0/a.cls", "0\n")
      .file("cls0/a.json", "{}")
      .file("cls0/b.seg.png", "mask, not the sample")  // extension "seg.png": another field
      .file("cls0/b.JPEG", "BBBBB")
      .file("cls0/b.cls", " 2 ")
      .file(long_dir + "/c.png", "CC")
      .file(long_dir + "/c.cls", "1")
      .file("gnu/" + std::string(150, 'g') + ".webp", "GNU", TarWriter::Name::kGnuLong)
      .file("gnu/" + std::string(150, 'g') + ".cls", "3", TarWriter::Name::kGnuLong)
      .file("pax/p.tiff", "PAXPAX", TarWriter::Name::kPax)
      .file("pax/p.txt", "1", TarWriter::Name::kPax)
      .file("./dot/e.bmp", std::string(1000, 'E'))  // `tar -C dir .` names; spans two blocks
      .file("./dot/e.cls", "0");
  w.save(d / "s0.tar");
  const auto ds = read_tar_shards({d / "s0.tar"}, {});
  REQUIRE(ds.samples.size() == 6);
  CHECK(ds.classes == std::vector<std::string>{"0", "1", "2", "3"});
  CHECK(ds.path(0) == d / "s0.tar" + ":cls0/a.jpg");
  CHECK(ds.path(1) == d / "s0.tar" + ":cls0/b.JPEG");
  CHECK(ds.path(2) == d / "s0.tar" + ":" + long_dir + "/c.png");
  CHECK(ds.path(3) == d / "s0.tar" + ":gnu/" + std::string(150, 'g') + ".webp");
  CHECK(ds.path(4) == d / "s0.tar" + ":pax/p.tiff");
  CHECK(ds.path(5) == d / "s0.tar" + ":dot/e.bmp");
  const std::vector<std::int64_t> labels = {0, 2, 1, 3, 1, 0};
  const std::vector<std::string> bytes = {"AAAA", "BBBBB", "CC", "GNU", "PAXPAX", std::string(1000, 'E')};
  for (std::size_t i = 0; i < 6; ++i) {
    CHECK(ds.samples[i].label == labels[i]);
    CHECK(bytes_at(ds, i) == bytes[i]);
  }
}

TEST_CASE("tar: duplicate keys, '../' and absolute names, symlinks and samples without an image are skipped and counted",
          "[source][tar]") {
  Dir d;
  TarWriter w;
  w.file("a.jpg", "A1").file("a.cls", "0")
      .file("evil/../../x.jpg", "escape").file("/abs/y.jpg", "absolute")
      .file("b.jpg", "B").symlink("b.png", "/etc/passwd").file("b.cls", "1")  // b stays one sample
      .file("a.jpg", "A2").file("a.cls", "1")                                 // a again: skipped
      .file("c.cls", "0")                                                     // no image
      .file("e.jpg", "E1").file("e.jpg", "E2").file("e.cls", "0");            // same member twice
  w.save(d / "s.tar");
  const auto ds = read_tar_shards({d / "s.tar"}, {});
  REQUIRE(ds.samples.size() == 3);
  CHECK(bytes_at(ds, 0) == "A1");
  CHECK(bytes_at(ds, 1) == "B");
  CHECK(ds.samples[1].label == 1);
  CHECK(bytes_at(ds, 2) == "E1");

  const tar::ShardIndex ix = tar::index_shard(d / "s.tar");
  CHECK(ix.skipped[tar::kDuplicateKey] == 2);
  CHECK(ix.first_skipped[tar::kDuplicateKey] == "a.jpg");
  CHECK(ix.skipped[tar::kUnsafeName] == 2);
  CHECK(ix.first_skipped[tar::kUnsafeName] == "evil/../../x.jpg");
  CHECK(ix.skipped[tar::kNotRegular] == 1);
  CHECK(ix.first_skipped[tar::kNotRegular] == "b.png");
  CHECK(ix.skipped[tar::kNoImage] == 1);
  CHECK(ix.first_skipped[tar::kNoImage] == "c");
}

TEST_CASE("tar: a truncated or corrupt shard is refused naming the shard and offset", "[source][tar]") {
  Dir d;
  TarWriter w;
  w.file("a.jpg", "A").file("a.cls", "0").file("b.jpg", std::string(5000, 'B')).file("b.cls", "1");
  const std::size_t b_header = 2048;  // a.jpg, a.cls: a header and a data block each
  // Cut inside b.jpg's data: its header claims more than is left.
  w.save(d / "t.tar", false);
  fs::resize_file(d / "t.tar", b_header + 512 + 1000);
  CHECK_THAT(error_of({d / "t.tar"}), Contains(d / "t.tar" + ": at offset 2048: truncated: member 'b.jpg' needs 5000 bytes"));
  // Cut inside a header.
  fs::resize_file(d / "t.tar", b_header + 100);
  CHECK_THAT(error_of({d / "t.tar"}), Contains(d / "t.tar" + ": at offset 2048: truncated tar header (100 of 512 bytes"));
  // A damaged header.
  w.save(d / "c.tar");
  {
    std::fstream f(d / "c.tar", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(b_header + 3));
    f.put('X');
  }
  CHECK_THAT(error_of({d / "c.tar"}), Contains(d / "c.tar" + ": at offset 2048: corrupt tar header (checksum mismatch"));
  // Not a tar at all; a shard that is not there.
  std::ofstream(d / "text.tar") << std::string(600, 'x');
  CHECK_THAT(error_of({d / "text.tar"}), Contains("at offset 0: corrupt tar header"));
  CHECK_THAT(error_of({d / "none-{0..1}.tar"}), Contains(d / "none-0.tar" + ": cannot read: No such file or directory"));
}

TEST_CASE("tar: gzip-compressed shards are refused at start naming the file", "[source][tar]") {
  Dir d;
  TarWriter w;
  w.file("a.jpg", "A");
  w.save(d / "s.tar");
  CHECK_THAT(error_of({d / "s.tar.gz"}), Contains(d / "s.tar.gz" + ": compressed shards are not supported"));
  CHECK_THAT(error_of({d / "s.tgz"}), Contains(d / "s.tgz" + ": compressed shards are not supported"));
  // Compressed content under a plain name: told by the gzip magic.
  std::ofstream(d / "g.tar", std::ios::binary) << std::string("\x1f\x8b\x08\x00", 4) << std::string(600, '\0');
  CHECK_THAT(error_of({d / "g.tar"}), Contains(d / "g.tar" + ": gzip-compressed; tar shards must be uncompressed"));
}

TEST_CASE("tar: a sample without a label among labelled ones is refused naming shard and key - none at all is unlabelled",
          "[source][tar]") {
  Dir d;
  TarWriter a, b;
  a.file("x/one.jpg", "1").file("x/one.cls", "0");
  b.file("y/two.jpg", "2");
  a.save(d / "a.tar");
  b.save(d / "b.tar");
  CHECK(error_of({d / "a.tar", d / "b.tar"}) == d / "b.tar" + ": sample 'y/two' has no .cls label, but other samples have one");
  const auto ds = read_tar_shards({d / "b.tar"}, {});
  CHECK(ds.classes.empty());
  CHECK(ds.samples.at(0).label == -1);
  TarWriter bad;
  bad.file("z.jpg", "z").file("z.cls", "cat");
  bad.save(d / "bad.tar");
  CHECK_THAT(error_of({d / "bad.tar"}), Contains(d / "bad.tar" + ": member 'z.cls': not a class number"));
}

TEST_CASE("tar: the index cache is reused while a shard keeps its size and mtime, and rebuilt when it changes",
          "[source][tar]") {
  Dir d;
  TarWriter w;
  w.file("a.jpg", "AAAA").file("a.cls", "0").file("b.jpg", "BB").file("b.cls", "1");
  w.save(d / "s-0.tar");
  w.save(d / "s-1.tar");
  set_mtime(d / "s-0.tar", 1700000000);
  const fs::path cache = d / "state/job.tarindex";
  const auto first = read_tar_shards({d / "s-{0..1}.tar"}, cache);
  REQUIRE(fs::exists(cache));
  REQUIRE(first.samples.size() == 4);

  // Damage s-0's second header in place, keeping size and mtime: the cache still answers,
  // which shows the headers were not read again.
  {
    std::fstream f(d / "s-0.tar", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(1024 + 3);
    f.put('X');
  }
  set_mtime(d / "s-0.tar", 1700000000);
  const auto second = read_tar_shards({d / "s-{0..1}.tar"}, cache);
  REQUIRE(second.samples.size() == 4);
  for (std::size_t i = 0; i < 4; ++i) {
    CHECK(second.path(i) == first.path(i));
    CHECK(second.samples[i].offset == first.samples[i].offset);
    CHECK(second.samples[i].size == first.samples[i].size);
    CHECK(second.samples[i].label == first.samples[i].label);
  }
  // A new mtime: s-0 is indexed again, and the damage is found.
  set_mtime(d / "s-0.tar", 1700000100);
  CHECK_THAT(error_of({d / "s-{0..1}.tar"}, cache), Contains(d / "s-0.tar" + ": at offset 1024: corrupt tar header"));
  // A garbled cache is no cache: the shards are indexed again.
  w.save(d / "s-0.tar");
  std::ofstream(cache) << "stoker-tar-index 1\nshard nonsense\n";
  CHECK(read_tar_shards({d / "s-{0..1}.tar"}, cache).samples.size() == 4);
  const auto reloaded = tar::load_index_cache(cache);  // rewritten whole
  CHECK(reloaded.size() == 2);
  CHECK(reloaded.at(d / "s-1.tar").entries.size() == 2);
}

TEST_CASE("tar: many shards index in parallel in pattern order", "[source][tar]") {
  Dir d;
  for (int i = 0; i < 70; ++i) {
    TarWriter w;
    w.file("k" + std::to_string(i) + ".jpg", std::to_string(i)).file("k" + std::to_string(i) + ".cls", std::to_string(i % 3));
    char name[32];
    std::snprintf(name, sizeof name, "p-%03d.tar", i);
    w.save(d / name);
  }
  const auto ds = read_tar_shards({d / "p-{000..069}.tar"}, {});
  REQUIRE(ds.samples.size() == 70);
  for (std::size_t i = 0; i < 70; ++i) {
    CHECK(bytes_at(ds, i) == std::to_string(i));
    CHECK(ds.samples[i].label == static_cast<std::int64_t>(i % 3));
  }
}

TEST_CASE("tar: reading a member of a shard that shrank since indexing is 'missing', not transient", "[source][tar]") {
  Dir d;
  TarWriter w;
  w.file("a.jpg", std::string(3000, 'A'));
  w.save(d / "s.tar");
  const auto ds = read_tar_shards({d / "s.tar"}, {});
  fs::resize_file(d / "s.tar", 1000);
  std::vector<std::uint8_t> out;
  const auto r = stoker::source::read_range(ds.shards[0], ds.samples[0].offset, ds.samples[0].size, out);
  CHECK(r.status == stoker::source::ReadStatus::kMissing);
  CHECK_THAT(r.reason, Contains("changed since it was indexed"));
  fs::remove(d / "s.tar");
  CHECK(stoker::source::read_range(ds.shards[0], 0, 1, out).status == stoker::source::ReadStatus::kMissing);
}

namespace {

// Five one-member shards (member bytes "m0".."m4") and their dataset.
stoker::source::Dataset five_shards(const Dir& d) {
  for (int i = 0; i < 5; ++i) {
    TarWriter w;
    w.file("k" + std::to_string(i) + ".jpg", "m" + std::to_string(i)).file("k" + std::to_string(i) + ".cls", "0");
    w.save(d / ("c-" + std::to_string(i) + ".tar"));
  }
  return read_tar_shards({d / "c-{0..4}.tar"}, {});
}

std::string read_with(stoker::source::SampleReader& r, std::uint32_t id) {
  std::vector<std::uint8_t> out;
  const auto res = r.read(id, out);
  REQUIRE(res.ok());
  return std::string(out.begin(), out.end());
}

}  // namespace

TEST_CASE("tar: shard descriptors are cached in a bounded LRU and give the same bytes as a read by offset",
          "[source][tar][read_ahead]") {
  Dir d;
  const auto ds = five_shards(d);
  stoker::source::SampleReader reader(ds, {.sequential = true, .max_open_shards = 2});
  for (int pass = 0; pass < 2; ++pass) {
    for (std::uint32_t i = 0; i < 5; ++i) {
      CHECK(read_with(reader, i) == "m" + std::to_string(i));
      CHECK(reader.open_shards() == (pass == 0 ? std::min<std::size_t>(i + 1, 2) : 2));
    }
  }
  // A shard truncated in place is still 'missing' through a cached descriptor (fstat per read).
  fs::resize_file(d / "c-4.tar", 10);
  std::vector<std::uint8_t> out;
  CHECK(reader.read(4, out).status == stoker::source::ReadStatus::kMissing);
  stoker::source::SampleReader uncached(ds, {.sequential = false, .max_open_shards = 0});
  CHECK(read_with(uncached, 0) == "m0");
  CHECK(uncached.open_shards() == 0);
}

TEST_CASE("tar: out of descriptors (EMFILE) is transient and the shard cache gives its descriptors back",
          "[source][tar][read_ahead]") {
  Dir d;
  const auto ds = five_shards(d);
  stoker::source::SampleReader reader(ds, {.sequential = false, .max_open_shards = 4});
  CHECK(read_with(reader, 0) == "m0");
  CHECK(read_with(reader, 1) == "m1");
  REQUIRE(reader.open_shards() == 2);

  stoker::test::NoFreeDescriptors none;
  std::vector<std::uint8_t> out;
  const auto r = reader.read(2, out);
  const std::size_t open_after = reader.open_shards();
  none.restore();

  CHECK(r.status == stoker::source::ReadStatus::kTransient);
  CHECK_THAT(r.reason, Contains("Too many open files"));
  CHECK(open_after == 0);  // the two cached descriptors were closed for the machine's sake
  CHECK(read_with(reader, 2) == "m2");  // and reads work again once descriptors are back
  CHECK(read_with(reader, 0) == "m0");
}

TEST_CASE("tar: a shard indexed as it arrives gives the whole file's index, gives back the pages walked past, and "
          "stops where the transfer ended", "[source][tar]") {
  // A 40 MiB shard of 100 KiB images, written into a memfd in 256 KiB steps as a download
  // would be, while index_shard walks behind it.
  Dir d;
  TarWriter w;
  for (int i = 0; i < 400; ++i) {
    const std::string key = "s/" + std::to_string(1000 + i);
    w.file(key + ".jpg", std::string(100 * 1024, static_cast<char>('a' + i % 26))).file(key + ".cls", std::to_string(i % 7));
  }
  w.save(d / "whole.tar");
  const auto whole = tar::index_shard(d / "whole.tar");
  std::string bytes = w.bytes() + std::string(1024, '\0');
  REQUIRE(whole.entries.size() == 400);

  // Feeds `upto` bytes of the shard into a memfd; the peak of its allocated bytes is kept.
  struct Feed {
    int fd = ::memfd_create("tar-test", MFD_CLOEXEC);
    stoker::objstore::SinkWatch watch;
    std::uint64_t peak = 0;
    std::thread t;
    void start(const std::string& b, std::size_t upto) {
      t = std::thread([this, &b, upto] {
        for (std::size_t at = 0; at < upto;) {
          const std::size_t n = std::min<std::size_t>(256 * 1024, upto - at);
          REQUIRE(::pwrite(fd, b.data() + at, n, static_cast<off_t>(at)) == static_cast<ssize_t>(n));
          at += n;
          watch.wrote(at);
          struct stat st {};
          ::fstat(fd, &st);
          peak = std::max<std::uint64_t>(peak, static_cast<std::uint64_t>(st.st_blocks) * 512);
          std::this_thread::sleep_for(std::chrono::microseconds(300));
        }
        watch.finished();
      });
    }
    ~Feed() {
      if (t.joinable()) t.join();
      ::close(fd);
    }
  };

  SECTION("the whole body: the same entries, and never the whole shard in memory") {
    Feed f;
    f.start(bytes, bytes.size());
    const tar::Arriving arriving{bytes.size(), &f.watch};
    const auto ix = tar::index_shard("s3://b/whole.tar", f.fd, &arriving);
    f.t.join();
    REQUIRE(ix.entries.size() == whole.entries.size());
    for (std::size_t i = 0; i < ix.entries.size(); ++i) {
      CHECK(ix.entries[i].offset == whole.entries[i].offset);
      CHECK(ix.entries[i].size == whole.entries[i].size);
      CHECK(ix.entries[i].label == whole.entries[i].label);
      CHECK(ix.member(ix.entries[i]) == whole.member(whole.entries[i]));
    }
    // The walk gives back what lies 8 MiB behind it, so a 40 MiB body never lies whole in memory.
    CHECK(f.peak < bytes.size() / 2);
  }
  SECTION("a transfer that ends at half: the walk stops there, naming the offset") {
    Feed f;
    f.start(bytes, bytes.size() / 2);
    const tar::Arriving arriving{bytes.size(), &f.watch};
    try {
      (void)tar::index_shard("s3://b/half.tar", f.fd, &arriving);
      FAIL("indexed a shard that ended at half");
    } catch (const SourceError& e) {
      CHECK_THAT(e.what(), Contains("s3://b/half.tar: at offset") && Contains("ended early"));
    }
  }
}

TEST_CASE("tar: a sidecar index in Stoker's format or DALI's v1.2 gives the walked index, and one that does not "
          "fit the shard is not used, saying why", "[source][tar]") {
  Dir d;
  TarWriter w;
  for (int i = 0; i < 5; ++i) w.file("k/" + std::to_string(i) + ".jpg", std::string(700 + i, 'x')).file("k/" + std::to_string(i) + ".cls", std::to_string(i));
  w.save(d / "s.tar");
  const auto walked = tar::index_shard(d / "s.tar");
  const std::uint64_t size = fs::file_size(d / "s.tar");
  auto same = [&](const tar::ShardIndex& a, const tar::ShardIndex& b) {
    REQUIRE(a.entries.size() == b.entries.size());
    for (std::size_t i = 0; i < a.entries.size(); ++i) {
      CHECK(a.entries[i].offset == b.entries[i].offset);
      CHECK(a.entries[i].size == b.entries[i].size);
      CHECK(a.entries[i].label == b.entries[i].label);
      CHECK(a.member(a.entries[i]) == b.member(b.entries[i]));
    }
  };
  std::string why;
  CHECK(tar::sidecar_url("s3://b/x/train-000001.tar") == "s3://b/x/train-000001.idx");
  CHECK(tar::sidecar_url("s3://b/x.d/a.b.tar") == "s3://b/x.d/a.idx");

  SECTION("Stoker's format, labels included") {
    const std::string text = tar::format_index({"s.tar"}, {&walked});
    const auto got = tar::parse_sidecar(text, size, why);
    REQUIRE(got);
    same(*got, walked);
    CHECK_FALSE(tar::parse_sidecar(text, size + 512, why));
    CHECK_THAT(why, Contains("out of date"));
    std::string moved = text;  // an entry pointing past the shard's end
    moved.replace(moved.find("\n", moved.find("shard ")) + 1, 3, "999999");
    CHECK_FALSE(tar::parse_sidecar(moved, size, why));
    CHECK_FALSE(tar::parse_sidecar("garbage\n", size, why));
  }
  SECTION("DALI's v1.2: used for unlabelled samples, not when labels are members") {
    std::string dali = "v1.2 5\n";
    for (const auto& e : walked.entries) {
      const std::string m(walked.member(e));
      dali += "jpg " + std::to_string(e.offset) + " " + std::to_string(e.size) + " " + m + "\n";
    }
    const auto got = tar::parse_sidecar(dali, size, why);
    REQUIRE(got);
    REQUIRE(got->entries.size() == 5);
    for (std::size_t i = 0; i < 5; ++i) {
      CHECK(got->entries[i].offset == walked.entries[i].offset);
      CHECK(got->entries[i].label == -1);
    }
    std::string with_cls = "v1.2 1\njpg 512 700 k/0.jpg cls 1536 1 k/0.cls\n";
    CHECK_FALSE(tar::parse_sidecar(with_cls, size, why));
    CHECK_THAT(why, Contains("label"));
    CHECK_FALSE(tar::parse_sidecar("v1.2 2\njpg 512 700 k/0.jpg\n", size, why));  // declares 2, lists 1
    CHECK_FALSE(tar::parse_sidecar("v1.2 1\njpg " + std::to_string(size) + " 700 k/0.jpg\n", size, why));
    const auto odd = tar::parse_sidecar("v1.2 3\njpg 512 7 ../e.jpg\njpg 512 7 a.jpg\njpg 1024 7 a.jpg\n", size, why);
    REQUIRE(odd);
    CHECK(odd->entries.size() == 1);
    CHECK(odd->skipped[tar::kUnsafeName] == 1);
    CHECK(odd->skipped[tar::kDuplicateKey] == 1);
  }
}

TEST_CASE("mapped allocator: big blocks mapped and unmapped, small ones and those past the mapping cap from "
          "operator new, contents kept across growth", "[source][tar]") {
  using stoker::source::g_mapped_blocks;
  using Alloc = stoker::source::MappedAllocator<std::uint64_t>;
  const std::size_t before = g_mapped_blocks.load();
  {
    std::vector<std::uint64_t, Alloc> big;
    for (std::uint64_t i = 0; i < 100000; ++i) big.push_back(i * 7);  // grows through mapped blocks
    CHECK(g_mapped_blocks.load() == before + 1);
    std::vector<std::uint64_t, Alloc> small(10, 3);  // 80 bytes: operator new
    CHECK(g_mapped_blocks.load() == before + 1);
    bool same = true;
    for (std::uint64_t i = 0; i < 100000; ++i) same = same && big[i] == i * 7;
    CHECK(same);
    std::vector<std::vector<std::uint64_t, Alloc>> many(Alloc::kMaxMappings + 10);
    for (auto& v : many) v.resize(4096);  // 32 KiB each: mapped until the cap, then operator new
    CHECK(g_mapped_blocks.load() == Alloc::kMaxMappings);
  }
  CHECK(g_mapped_blocks.load() == before);
}
