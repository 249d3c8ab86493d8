// The rules behind client-defined jobs (issue 24, C1), without a daemon: the permission
// check a client's user is read with (source/read_access.hpp) on real files, the reads of a
// job's samples under it, the quarantine file's escaping, and what a client's YAML may not say.
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <fstream>
#include <sys/stat.h>
#include <unistd.h>

#include "config/config.hpp"
#include "daemon_fixture.hpp"
#include "job/quarantine.hpp"
#include "source/dataset.hpp"
#include "source/read_access.hpp"
#include "source/sample_reader.hpp"

using namespace stoker;
namespace fs = std::filesystem;

namespace {

struct stat mode_of(unsigned mode, uid_t uid, gid_t gid) {
  struct stat st {};
  st.st_mode = S_IFREG | mode;
  st.st_uid = uid;
  st.st_gid = gid;
  return st;
}

const source::ReadAs kAlice{1000, 1000, {1000, 27}};

}  // namespace

TEST_CASE("mode bits are read as the kernel reads them: one class decides", "[unit][client-jobs]") {
  using source::kMayPass;
  using source::kMayRead;
  CHECK(source::mode_grants(mode_of(0400, 1000, 0), kAlice, kMayRead));         // owner
  CHECK_FALSE(source::mode_grants(mode_of(0044, 1000, 0), kAlice, kMayRead));   // owner class decides: no
  CHECK(source::mode_grants(mode_of(0040, 0, 27), kAlice, kMayRead));           // supplementary group
  CHECK_FALSE(source::mode_grants(mode_of(0604, 0, 27), kAlice, kMayRead));     // group class decides: no
  CHECK(source::mode_grants(mode_of(0004, 0, 0), kAlice, kMayRead));            // others
  CHECK_FALSE(source::mode_grants(mode_of(0600, 0, 0), kAlice, kMayRead));
  CHECK_FALSE(source::mode_grants(mode_of(0444, 0, 0), kAlice, kMayRead | kMayPass));  // a folder needs x too
  CHECK(source::mode_grants(mode_of(0000, 0, 0), source::ReadAs{0, 0, {}}, kMayRead));  // root
}

TEST_CASE("a descriptor is checked against the user's permissions, folders above it included",
          "[unit][client-jobs]") {
  if (::geteuid() != 0) {
    WARN("not root: the files cannot belong to another uid here; the pure check above still ran");
    return;
  }
  stoker::test::TempDir dir;
  ::chmod(dir.path().c_str(), 0755);
  const source::ReadAs nobody{65534, 65534, {}};
  const fs::path open_file = dir.path() / "open.txt", private_file = dir.path() / "private.txt";
  std::ofstream(open_file) << "x";
  std::ofstream(private_file) << "secret";
  ::chmod(open_file.c_str(), 0644);
  ::chmod(private_file.c_str(), 0600);
  fs::create_directories(dir.path() / "closed");
  const fs::path behind = dir.path() / "closed" / "readable.txt";
  std::ofstream(behind) << "y";
  ::chmod(behind.c_str(), 0644);
  ::chmod((dir.path() / "closed").c_str(), 0700);
  // A symlink the user may follow, to a file they may read only by mode, behind a closed folder.
  fs::create_symlink(behind, dir.path() / "link.txt");

  base::Result<int> fd = source::open_checked(open_file.string(), nobody, false);
  CHECK(fd.ok());
  CHECK(fd.status().message().empty());
  if (fd.ok()) ::close(*fd);
  for (const fs::path& p : {private_file, behind, dir.path() / "link.txt", dir.path() / "missing.txt"}) {
    INFO(p);
    const base::Result<int> refused = source::open_checked(p.string(), nobody, false);
    CHECK(!refused.ok());
    CHECK_THAT(refused.status().message(), Catch::Contains("not readable by uid 65534"));
  }
  // Folders: listing needs r and x; a closed one is refused without a word of what it holds.
  fd = source::open_checked(dir.path().string(), nobody, true);
  CHECK(fd.ok());
  if (fd.ok()) ::close(*fd);
  CHECK(!source::open_checked((dir.path() / "closed").string(), nobody, true).ok());
  // stokerd's own reads are unchanged, and root as the user reads everything.
  fd = source::open_checked(behind.string(), source::ReadAs{0, 0, {}}, false);
  CHECK(fd.ok());
  if (fd.ok()) ::close(*fd);

  // A job's samples read as the user: what they may not read is missing, never served.
  source::Dataset ds;
  ds.root = dir.path().string();
  ds.add("open.txt", 0);
  ds.add("private.txt", 0);
  ds.add("link.txt", 0);
  std::vector<std::uint8_t> bytes;
  {
    source::SampleReader as_daemon(ds, {});
    CHECK(as_daemon.read(1, bytes).ok());  // without read_as: stokerd's reads, as before
  }
  ds.read_as = std::make_shared<const source::ReadAs>(nobody);
  source::SampleReader as_user(ds, {});
  CHECK(as_user.read(0, bytes).ok());
  CHECK(bytes.size() == 1);
  for (std::uint32_t id : {1u, 2u}) {
    const source::ReadResult r = as_user.read(id, bytes);
    CHECK(r.status == source::ReadStatus::kMissing);
    CHECK_THAT(r.reason, Catch::Contains("not readable by uid 65534"));
  }
}

TEST_CASE("quarantine fields escape control characters and read back as written", "[unit][client-jobs]") {
  const std::string name = "a\\b\nc\td\r\x01\x7f" "é.jpg";
  const std::string escaped = job::escape_field(name);
  CHECK(escaped == "a\\\\b\\nc\\td\\x0d\\x01\\x7f" "é.jpg");
  CHECK(escaped.find_first_of("\n\t\r") == std::string::npos);
  CHECK(job::unescape_field(escaped) == name);
  CHECK(job::unescape_field("old\\qname") == "old\\qname");  // an older file's backslash stays

  stoker::test::TempDir dir;
  const fs::path file = dir.path() / "q.quarantine";
  const std::string bad = (dir.path() / "bad\nEVIL\tline.jpg").string();
  {
    job::Quarantine q(file);
    CHECK(q.add(bad, "content", "not an image:\nsecond line"));
  }
  std::ifstream in(file);
  std::string line, more;
  REQUIRE(std::getline(in, line));
  CHECK_FALSE(std::getline(in, more));  // one entry, one line
  CHECK(std::count(line.begin(), line.end(), '\t') == 4);
  job::Quarantine again(file);  // the next start reads the escaped name back
  CHECK(again.contains(bad));
  CHECK(again.size() == 1);
}

TEST_CASE("a client's job text may not choose stokerd's files nor read its environment", "[unit][client-jobs]") {
  stoker::test::TempDir dir;  // the root must exist: config validation checks it
  fs::create_directories(dir.path() / "s3cr3t");
  const std::string job = "jobs:\n  j:\n    source: {type: imagefolder, root: \"" + dir.path().string() +
                          "\"}\n    batch_size: 2\n"
                          "    pipeline: [decode: {}, resize: {size: 8}, center_crop: {size: 8}]\n";
  CHECK_NOTHROW(config::parse_client_job(job, "<client>"));
  try {
    config::parse_client_job(job + "    quarantine: /etc/passwd\n", "<client>");
    FAIL("a client chose its quarantine file");
  } catch (const config::ConfigError& e) {
    CHECK(e.key_path() == "jobs.j.quarantine");
    CHECK_THAT(e.what(), Catch::Contains("<client>:6:") && Catch::Contains("cannot choose its quarantine file"));
  }
  try {
    // Nor a folder stokerd writes its decoded store into (#26).
    config::parse_client_job(job + "    decoded_store: {max_side: 64, path: /etc, bytes: 1GiB}\n", "<client>");
    FAIL("a client chose a decoded store folder");
  } catch (const config::ConfigError& e) {
    CHECK(e.key_path() == "jobs.j.decoded_store");
    CHECK_THAT(e.what(), Catch::Contains("<client>:6:") && Catch::Contains("cannot use a decoded store"));
  }
  ::setenv("STOKER_UNIT_SECRET", "s3cr3t", 1);
  std::string with_var = job;
  with_var.replace(with_var.find(dir.path().string()), dir.path().string().size(),
                   dir.path().string() + "/${STOKER_UNIT_SECRET}");
  try {
    config::parse_client_job(with_var, "<client>");
    FAIL("a client's job read stokerd's environment");
  } catch (const config::ConfigError& e) {
    CHECK(e.key_path() == "jobs.j.source.root");
    CHECK_THAT(e.what(), Catch::Contains("cannot use ${") && !Catch::Contains("s3cr3t"));
  }
  // The config file keeps both: the operator's own environment and files.
  const config::Config cfg = config::parse_config(with_var + "    quarantine: /var/q\n", "c.yaml", "/");
  CHECK(cfg.jobs[0].source.root == dir.path() / "s3cr3t");
  CHECK(cfg.jobs[0].quarantine == "/var/q");
  ::unsetenv("STOKER_UNIT_SECRET");

  // server.client_jobs_per_user: 8 unless set, 1..16.
  CHECK(config::parse_config(job, "c.yaml", "/").server.client_jobs_per_user == 8);
  CHECK(config::parse_config("server: {client_jobs_per_user: 2}\n" + job, "c.yaml", "/").server.client_jobs_per_user == 2);
  CHECK_THROWS_WITH(config::parse_config("server: {client_jobs_per_user: 0}\n" + job, "c.yaml", "/"),
                    Catch::Contains("server.client_jobs_per_user"));
}
