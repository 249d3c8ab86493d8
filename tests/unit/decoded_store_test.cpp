// The decoded store's file (store/decoded_store.hpp, store_format.hpp) without a daemon:
// entries survive a reopen, a changed file is a miss, a scribbled or truncated entry is never
// served, a torn tail is cut off before the next append, the budget admits until full, and a
// write error turns writes off without failing anyone.
#include <catch2/catch.hpp>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <numeric>
#include <sys/resource.h>
#include <vector>

#include "store/checksum.hpp"
#include "store/decoded_store.hpp"
#include "store/store_format.hpp"
#include "daemon_fixture.hpp"

namespace fs = std::filesystem;
using stoker::store::DecodedStore;
using stoker::store::EntryKey;
using stoker::store::StoredImage;
using Lookup = DecodedStore::Lookup;

namespace {

// A w x h image whose bytes depend on `seed`.
std::vector<std::uint8_t> image_bytes(std::uint32_t w, std::uint32_t h, std::uint8_t seed) {
  std::vector<std::uint8_t> px(std::size_t{w} * h * 3);
  for (std::size_t i = 0; i < px.size(); ++i) px[i] = static_cast<std::uint8_t>(i * 7 + seed);
  return px;
}

std::string name_of(int i) { return "/data/class" + std::to_string(i % 3) + "/img" + std::to_string(i) + ".jpg"; }

void put_n(DecodedStore& s, int n, std::uint32_t w = 20, std::uint32_t h = 10) {
  for (int i = 0; i < n; ++i) {
    const auto px = image_bytes(w, h, static_cast<std::uint8_t>(i));
    const std::string p = name_of(i);
    s.put(EntryKey{p, 1000u + i, 5}, StoredImage{w, h, 1 + i % 8, px.data()});
  }
}

// Whether entry i is served with its own pixels.
bool served(DecodedStore& s, int i, std::uint32_t w = 20, std::uint32_t h = 10) {
  std::vector<std::uint8_t> buf;
  StoredImage img;
  const std::string p = name_of(i);
  if (s.get(EntryKey{p, 1000u + i, 5}, buf, img) != Lookup::kHit) return false;
  const auto px = image_bytes(w, h, static_cast<std::uint8_t>(i));
  return img.width == w && img.height == h && img.orientation == 1 + i % 8 &&
         std::equal(px.begin(), px.end(), img.pixels);
}

constexpr std::uint64_t kEntryBytes(std::size_t path, std::uint32_t w, std::uint32_t h) {
  return sizeof(stoker::store::EntryHeader) + path + std::uint64_t{w} * h * 3;
}

}  // namespace

TEST_CASE("decoded store: entries survive a reopen, a changed file is a miss", "[decoded_store]") {
  stoker::test::TempDir dir;
  fs::path file;
  {
    auto s = DecodedStore::open(dir.path(), 42, 320, 1 << 20);
    file = s->file();
    put_n(*s, 5);
    CHECK(s->stats().entries == 5);
    for (int i = 0; i < 5; ++i) CHECK(served(*s, i));
  }
  auto s = DecodedStore::open(dir.path(), 42, 320, 1 << 20);
  CHECK(s->file() == file);
  CHECK(s->stats().entries == 5);
  for (int i = 0; i < 5; ++i) CHECK(served(*s, i));
  std::vector<std::uint8_t> buf;
  StoredImage img;
  const std::string p = name_of(2);
  CHECK(s->get(EntryKey{p, 1002, 6}, buf, img) == Lookup::kMissing);  // another mtime
  CHECK(s->get(EntryKey{p, 1003, 5}, buf, img) == Lookup::kMissing);  // another size
  CHECK(s->get(EntryKey{"/data/none.jpg", 1002, 5}, buf, img) == Lookup::kMissing);
  // Another max_side or source is another file.
  CHECK(DecodedStore::open(dir.path(), 42, 256, 1 << 20)->stats().entries == 0);
  CHECK(DecodedStore::open(dir.path(), 43, 320, 1 << 20)->stats().entries == 0);
  // Two opens of one store in a daemon share it.
  CHECK(DecodedStore::open(dir.path(), 42, 320, 1 << 20) == s);
}

TEST_CASE("decoded store: a scribbled pixel is never served and the entry is rebuilt", "[decoded_store]") {
  stoker::test::TempDir dir;
  fs::path file;
  {
    auto s = DecodedStore::open(dir.path(), 1, 320, 1 << 20);
    file = s->file();
    put_n(*s, 4);
  }
  {
    // One byte in entry 1's pixels.
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    const std::uint64_t at = sizeof(stoker::store::FileHeader) + kEntryBytes(name_of(0).size(), 20, 10) +
                             kEntryBytes(name_of(1).size(), 20, 10) - 5;
    f.seekp(static_cast<std::streamoff>(at));
    f.put('\x5a');
  }
  auto s = DecodedStore::open(dir.path(), 1, 320, 1 << 20);
  CHECK(s->stats().entries == 4);  // headers are whole: the damage is found on reading
  CHECK(served(*s, 0));
  CHECK_FALSE(served(*s, 1));
  CHECK(s->stats().rebuilt == 1);
  CHECK(served(*s, 2));
  CHECK(served(*s, 3));
  // Put again (as a worker does after decoding): served from the new entry.
  const auto px = image_bytes(20, 10, 1);
  const std::string p = name_of(1);
  s->put(EntryKey{p, 1001, 5}, StoredImage{20, 10, 2, px.data()});
  CHECK(served(*s, 1));
}

TEST_CASE("decoded store: a torn tail ends the log and is cut off before the next append", "[decoded_store]") {
  stoker::test::TempDir dir;
  fs::path file;
  {
    auto s = DecodedStore::open(dir.path(), 1, 320, 1 << 20);
    file = s->file();
    put_n(*s, 3);
  }
  const auto full = fs::file_size(file);
  fs::resize_file(file, full - 17);  // the last entry loses its last pixels
  {
    auto s = DecodedStore::open(dir.path(), 1, 320, 1 << 20);
    CHECK(s->stats().entries == 2);
    CHECK(served(*s, 0));
    CHECK(served(*s, 1));
    CHECK_FALSE(served(*s, 2));
    // The next append cuts the torn bytes off first, so what follows is found again.
    put_n(*s, 3);
    CHECK(s->stats().entries == 3);
    CHECK(fs::file_size(file) == full);
  }
  auto s = DecodedStore::open(dir.path(), 1, 320, 1 << 20);
  CHECK(s->stats().entries == 3);
  for (int i = 0; i < 3; ++i) CHECK(served(*s, i));
  // A header scribbled: the log ends there (later entries are decoded again, never misread).
  {
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(sizeof(stoker::store::FileHeader) + 8));  // entry 0's width
    f.put('\x7f');
  }
  s.reset();
  s = DecodedStore::open(dir.path(), 1, 320, 1 << 20);
  CHECK(s->stats().entries == 0);
  for (int i = 0; i < 3; ++i) CHECK_FALSE(served(*s, i));
  // A store file of another version is started again.
  s.reset();
  {
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(7);  // the magic's version digit
    f.put('0');
  }
  s = DecodedStore::open(dir.path(), 1, 320, 1 << 20);
  CHECK(s->stats().entries == 0);
  put_n(*s, 1);
  CHECK(served(*s, 0));
  // Garbage is not a store file: refused, left as it is (issue #34, B1: never truncated).
  s.reset();
  std::ofstream(file, std::ios::binary) << "not a store";
  CHECK_THROWS_WITH(DecodedStore::open(dir.path(), 1, 320, 1 << 20), Catch::Contains("is not a store file"));
  std::ifstream in(file, std::ios::binary);
  CHECK(std::string(std::istreambuf_iterator<char>(in), {}) == "not a store");
}

TEST_CASE("decoded store: a read error is a broken entry, counted, not served", "[decoded_store]") {
  stoker::test::TempDir dir;
  auto s = DecodedStore::open(dir.path(), 1, 320, 1 << 20);
  put_n(*s, 3);
  // Cut under the open store (another process, a failing disk): the last entry's read is short.
  fs::resize_file(s->file(), fs::file_size(s->file()) - 100);
  CHECK(served(*s, 0));
  CHECK_FALSE(served(*s, 2));
  CHECK(s->stats().rebuilt == 1);
}

TEST_CASE("decoded store: admits until the budget is full, then keeps", "[decoded_store]") {
  stoker::test::TempDir dir;
  const std::uint64_t one = kEntryBytes(name_of(0).size(), 20, 10);
  auto s = DecodedStore::open(dir.path(), 1, 320, sizeof(stoker::store::FileHeader) + 3 * one + one / 2);
  put_n(*s, 6);
  const auto st = s->stats();
  CHECK(st.entries == 3);
  CHECK(st.refused_full == 3);
  CHECK(st.bytes <= st.budget);
  for (int i = 0; i < 3; ++i) CHECK(served(*s, i));
  CHECK_FALSE(served(*s, 4));
}

TEST_CASE("decoded store: a write error turns writes off, what is stored is still served", "[decoded_store]") {
  stoker::test::TempDir dir;
  auto s = DecodedStore::open(dir.path(), 1, 320, 1 << 20);
  put_n(*s, 2);
  const auto size = fs::file_size(s->file());
  // A disk that is full past this size: writes beyond it fail with EFBIG.
  rlimit old{};
  getrlimit(RLIMIT_FSIZE, &old);
  auto* previous = std::signal(SIGXFSZ, SIG_IGN);
  rlimit small = old;
  small.rlim_cur = size + 100;
  REQUIRE(setrlimit(RLIMIT_FSIZE, &small) == 0);
  const auto px = image_bytes(20, 10, 3);
  const std::string p = name_of(3);
  s->put(EntryKey{p, 1003, 5}, StoredImage{20, 10, 4, px.data()});
  setrlimit(RLIMIT_FSIZE, &old);
  std::signal(SIGXFSZ, previous);
  const auto st = s->stats();
  CHECK(st.writes_off);
  CHECK(st.errors == 1);
  CHECK(st.entries == 2);
  CHECK(fs::file_size(s->file()) == size);  // the partial entry was cut off
  CHECK(served(*s, 0));
  CHECK(served(*s, 1));
  CHECK_FALSE(served(*s, 3));
  put_n(*s, 5);  // off for the rest of the run
  CHECK(s->stats().entries == 2);
}

TEST_CASE("decoded store: the checksum sees every byte", "[decoded_store]") {
  std::vector<std::uint8_t> a(1000);
  std::iota(a.begin(), a.end(), 0);
  const auto h = stoker::store::checksum64(a.data(), a.size());
  for (std::size_t i : {0, 31, 32, 500, 995, 999}) {
    auto b = a;
    b[i] ^= 1;
    CHECK(stoker::store::checksum64(b.data(), b.size()) != h);
  }
  CHECK(stoker::store::checksum64(a.data(), 999) != h);
}
