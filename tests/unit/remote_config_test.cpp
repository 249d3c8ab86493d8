// Unit tier: the job key `remote:` (daemon/config/job_remote.cpp, issue #27). The accepted
// forms fill RemoteConfig; every refusal names test.yaml:LINE:COL and the key path of the
// culprit, so a user finds the line to fix.
#include <catch2/catch.hpp>

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "config/config.hpp"

namespace fs = std::filesystem;
using Catch::Contains;
using Catch::StartsWith;
using stoker::config::Config;
using stoker::config::ConfigError;
using stoker::config::parse_config;

namespace {

const fs::path kDemo = fs::path(STOKER_TEST_DATA_DIR) / "demo";

// A private folder for token and TLS files, removed with its contents.
class Scratch {
 public:
  Scratch() {
    std::string t = (fs::temp_directory_path() / "stoker-remote-config-XXXXXX").string();
    REQUIRE(::mkdtemp(t.data()) != nullptr);
    path_ = t;
  }
  ~Scratch() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }
  fs::path write(const std::string& name, const std::string& text) const {
    std::ofstream(path_ / name, std::ios::binary) << text;
    return path_ / name;
  }

 private:
  fs::path path_;
};

// A demo job whose `remote:` block is `remote_lines` (each indented by 6), after 4 fixed lines:
// line 5 is "    remote:", the block's first line is line 6.
std::string job(const std::string& remote_lines, const std::string& extra_job_lines = "") {
  return "jobs:\n"
         "  train:\n"
         "    source: {root: \"" + kDemo.string() + "\"}\n"
         "    batch_size: 4\n"
         "    remote:\n" +
         remote_lines + extra_job_lines +
         "    pipeline:\n"
         "      - decode: {}\n"
         "      - random_resized_crop: {size: 32}\n";
}

Config parse(const std::string& yaml) { return parse_config(yaml, "test.yaml", kDemo); }

std::string refusal(const std::string& yaml) {
  try {
    parse(yaml);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "(accepted)";
}

}  // namespace

TEST_CASE("remote: the accepted forms fill the job's RemoteConfig", "[config][remote]") {
  Scratch s;
  const fs::path token = s.write("token", "s3cret\r\n\n");  // a file written by `echo` or an editor
  const Config c = parse(job("      workers: [\"10.0.0.1:7000\", \"cpu-node-2:7001\", \"[::1]:7002\"]\n"
                             "      local: false\n"
                             "      compression: zstd\n"
                             "      deadline_s: 2.5\n"
                             "      token_file: \"" + token.string() + "\"\n"));
  REQUIRE(c.jobs.size() == 1);
  const auto& j = c.jobs[0];
  const auto& r = j.remote;
  CHECK(r.enabled());
  CHECK(r.workers == std::vector<std::string>{"10.0.0.1:7000", "cpu-node-2:7001", "[::1]:7002"});
  CHECK_FALSE(r.local);
  CHECK(r.compression == stoker::config::RemoteConfig::Compression::kZstd);
  CHECK(r.deadline_s == 2.5);
  CHECK(r.token_file == token);
  CHECK(r.token == "s3cret");  // trailing newlines stripped, nothing else
  // local: false turns this node's read-ahead off (the workers read the bytes).
  CHECK(j.read_ahead_bytes == 0);
  CHECK(j.read_ahead_requests == 0);
  // What the worker is sent: the pixel keys as a one-job config, where paths resolve, the origin.
  CHECK_THAT(r.worker_yaml, Contains("train") && Contains("pipeline") && Contains("random_resized_crop") &&
                                Contains(kDemo.string()));
  CHECK_THAT(r.worker_yaml, !Contains("remote:") && !Contains("token_file") && !Contains("workers"));
  CHECK(r.base_dir == kDemo);
  CHECK(r.origin == "test.yaml");

  // Defaults: local pool on (read-ahead kept), no compression, 30 s, no token.
  const Config d = parse(job("      workers: [\"w:1\"]\n"));
  CHECK(d.jobs[0].remote.local);
  CHECK(d.jobs[0].remote.compression == stoker::config::RemoteConfig::Compression::kNone);
  CHECK(d.jobs[0].remote.deadline_s == 30);
  CHECK(d.jobs[0].remote.token.empty());
  CHECK(d.jobs[0].read_ahead_bytes > 0);
  CHECK(parse(job("      workers: [\"w:1\"]\n      compression: none\n")).jobs[0].remote.compression ==
        stoker::config::RemoteConfig::Compression::kNone);
  CHECK(parse(job("      workers: [\"w:1\"]\n      compression: auto\n")).jobs[0].remote.compression ==
        stoker::config::RemoteConfig::Compression::kAuto);
  CHECK(parse(job("      workers: [\"w:1\"]\n      local: true\n")).jobs[0].remote.local);
  // Without `remote:` nothing is enabled.
  const std::string plain = "jobs:\n  train:\n    source: {root: \"" + kDemo.string() +
                            "\"}\n    batch_size: 4\n    pipeline: [decode: {}, random_resized_crop: {size: 32}]\n";
  CHECK_FALSE(parse(plain).jobs[0].remote.enabled());
}

TEST_CASE("remote: the worker list is refused with its line when malformed", "[config][remote]") {
  CHECK_THAT(refusal(job("      workers: \"w:1\"\n")),
             StartsWith("test.yaml:6:16: jobs.train.remote.workers: ") && Contains("expected a list of worker addresses"));
  CHECK_THAT(refusal(job("      workers: []\n")),
             StartsWith("test.yaml:6:16: jobs.train.remote.workers: ") && Contains("expected a list of worker addresses"));
  CHECK_THAT(refusal(job("      local: false\n")),
             StartsWith("test.yaml:6:7: jobs.train.remote.workers: ") && Contains("required key is missing"));
  // Addresses: each element's own position and index.
  for (const char* bad : {"w", "w:", ":7000", "w:0", "w:70000", "w:123456", "w:-1", "w: 7000", "my host:7000", "w:7x"}) {
    INFO(bad);
    CHECK_THAT(refusal(job(std::string("      workers:\n        - \"a:1\"\n        - \"") + bad + "\"\n")),
               StartsWith("test.yaml:8:11: jobs.train.remote.workers[1]: ") &&
                   Contains(std::string("expected HOST:PORT (a port 1..65535), got '") + bad + "'"));
  }
  CHECK_THAT(refusal(job("      workers:\n        - \"a:1\"\n        - \"b:2\"\n        - \"a:1\"\n")),
             StartsWith("test.yaml:9:11: jobs.train.remote.workers[2]: ") && Contains("'a:1' is listed twice"));
  // The edges of the port range are accepted.
  CHECK(parse(job("      workers: [\"a:1\", \"a:65535\"]\n")).jobs[0].remote.workers.size() == 2);
}

TEST_CASE("remote: sub-keys, compression and deadline are checked", "[config][remote]") {
  CHECK_THAT(refusal(job("      workers: [\"w:1\"]\n      locale: false\n")),
             StartsWith("test.yaml:7:7: jobs.train.remote.locale: ") && Contains("did you mean 'local'?"));
  CHECK_THAT(refusal(job("      workers: [\"w:1\"]\n      retries: 3\n")),
             StartsWith("test.yaml:7:7: jobs.train.remote.retries: ") && Contains("unknown key"));
  CHECK_THAT(refusal(job("      workers: [\"w:1\"]\n      compression: lz4\n")),
             StartsWith("test.yaml:7:20: jobs.train.remote.compression: ") && Contains("lz4") && Contains("zstd") &&
                 Contains("auto"));
  CHECK_THAT(refusal(job("      workers: [\"w:1\"]\n      local: sometimes\n")),
             StartsWith("test.yaml:7:14: jobs.train.remote.local: ") && Contains("expected true or false"));
  for (const char* bad : {"0", "0.05", "3601", "-1", ".nan"}) {
    INFO(bad);
    CHECK_THAT(refusal(job(std::string("      workers: [\"w:1\"]\n      deadline_s: ") + bad + "\n")),
               StartsWith("test.yaml:7:19: jobs.train.remote.deadline_s: "));
  }
  CHECK_THAT(refusal(job("      workers: [\"w:1\"]\n      deadline_s: 3601\n")), Contains("[0.1, 3600]"));
  CHECK(parse(job("      workers: [\"w:1\"]\n      deadline_s: 0.1\n")).jobs[0].remote.deadline_s == 0.1);
  CHECK(parse(job("      workers: [\"w:1\"]\n      deadline_s: 3600\n")).jobs[0].remote.deadline_s == 3600);
}

// Issue #34, A6: the fraction of the workers' results this node makes again and compares.
TEST_CASE("remote: verify is a fraction in [0, 1], refused outside with its line", "[config][remote]") {
  CHECK(parse(job("      workers: [\"w:1\"]\n")).jobs[0].remote.verify == 0.01);
  CHECK(parse(job("      workers: [\"w:1\"]\n      verify: 0\n")).jobs[0].remote.verify == 0);
  CHECK(parse(job("      workers: [\"w:1\"]\n      verify: 1\n")).jobs[0].remote.verify == 1);
  CHECK(parse(job("      workers: [\"w:1\"]\n      verify: 0.25\n")).jobs[0].remote.verify == 0.25);
  for (const char* bad : {"-0.01", "1.5", "2", "1e9"}) {
    INFO(bad);
    CHECK_THAT(refusal(job(std::string("      workers: [\"w:1\"]\n      verify: ") + bad + "\n")),
               StartsWith("test.yaml:7:15: jobs.train.remote.verify: ") && Contains("[0, 1]"));
  }
  for (const char* bad : {"all", ".nan", "-.inf", "[0.5]"}) {
    INFO(bad);
    CHECK_THAT(refusal(job(std::string("      workers: [\"w:1\"]\n      verify: ") + bad + "\n")),
               StartsWith("test.yaml:7:15: jobs.train.remote.verify: "));
  }
}

// Issue #36: where a plaintext link's results travel.
TEST_CASE("remote: results is tcp (default) or stream, refused otherwise with its line", "[config][remote]") {
  CHECK(parse(job("      workers: [\"w:1\"]\n")).jobs[0].remote.results_tcp);
  CHECK(parse(job("      workers: [\"w:1\"]\n      results: tcp\n")).jobs[0].remote.results_tcp);
  CHECK_FALSE(parse(job("      workers: [\"w:1\"]\n      results: stream\n")).jobs[0].remote.results_tcp);
  CHECK_THAT(refusal(job("      workers: [\"w:1\"]\n      results: udp\n")),
             StartsWith("test.yaml:7:16: jobs.train.remote.results: ") && Contains("udp"));
}

TEST_CASE("remote: token and TLS files are read when the config is, refused with their line", "[config][remote]") {
  Scratch s;
  const std::string missing = (s.path() / "nope").string();
  CHECK_THAT(refusal(job("      workers: [\"w:1\"]\n      token_file: \"" + missing + "\"\n")),
             StartsWith("test.yaml:7:19: jobs.train.remote.token_file: ") && Contains("cannot read '" + missing + "'"));
  // A folder opens as a stream on Linux but holds no token: refused as empty or unreadable.
  CHECK_THAT(refusal(job("      workers: [\"w:1\"]\n      token_file: \"" + s.path().string() + "\"\n")),
             StartsWith("test.yaml:7:19: jobs.train.remote.token_file: "));
  const fs::path empty = s.write("empty", "\n\r\n");
  CHECK_THAT(refusal(job("      workers: [\"w:1\"]\n      token_file: \"" + empty.string() + "\"\n")),
             StartsWith("test.yaml:7:19: jobs.train.remote.token_file: ") && Contains("is empty"));
  const fs::path big = s.write("big", std::string(4097, 'x'));
  CHECK_THAT(refusal(job("      workers: [\"w:1\"]\n      token_file: \"" + big.string() + "\"\n")),
             StartsWith("test.yaml:7:19: jobs.train.remote.token_file: ") && Contains("at most 4096 bytes"));
  if (::geteuid() != 0) {  // root reads a mode-000 file anyway
    const fs::path locked = s.write("locked", "tok\n");
    REQUIRE(::chmod(locked.c_str(), 0) == 0);
    CHECK_THAT(refusal(job("      workers: [\"w:1\"]\n      token_file: \"" + locked.string() + "\"\n")),
               StartsWith("test.yaml:7:19: jobs.train.remote.token_file: ") && Contains("cannot read"));
  }

  const std::string ca = s.write("ca.pem", "ca").string(), cert = s.write("c.pem", "c").string(),
                    key = s.write("k.pem", "k").string();
  const auto tls = [](const std::string& body) { return "      workers: [\"w:1\"]\n      tls: {" + body + "}\n"; };
  const Config ok = parse(job(tls("ca: \"" + ca + "\", cert: \"" + cert + "\", key: \"" + key + "\"")));
  CHECK(ok.jobs[0].remote.tls_ca == ca);
  CHECK(ok.jobs[0].remote.tls_cert == cert);
  CHECK(ok.jobs[0].remote.tls_key == key);
  CHECK(parse(job(tls("ca: \"" + ca + "\""))).jobs[0].remote.tls_cert.empty());  // server-auth only
  CHECK_THAT(refusal(job(tls("cert: \"" + cert + "\", key: \"" + key + "\""))),
             StartsWith("test.yaml:7:12: jobs.train.remote.tls: ") && Contains("needs ca"));
  CHECK_THAT(refusal(job(tls("ca: \"" + ca + "\", cert: \"" + cert + "\""))),
             StartsWith("test.yaml:7:12: jobs.train.remote.tls: ") && Contains("cert and key go together"));
  CHECK_THAT(refusal(job(tls("ca: \"" + ca + "\", key: \"" + key + "\""))),
             StartsWith("test.yaml:7:12: jobs.train.remote.tls: ") && Contains("cert and key go together"));
  CHECK_THAT(refusal(job(tls("ca: \"" + missing + "\""))),
             StartsWith("test.yaml:7:17: jobs.train.remote.tls.ca: ") && Contains("cannot read"));
  CHECK_THAT(refusal(job(tls("ca: \"" + ca + "\", crt: x"))),
             StartsWith("test.yaml:7:") && Contains("jobs.train.remote.tls.crt: ") && Contains("unknown key"));
}

TEST_CASE("remote: not with a decoded store, not in a client-defined job", "[config][remote]") {
  Scratch s;
  CHECK_THAT(refusal(job("      workers: [\"w:1\"]\n",
                         "    decoded_store: {max_side: 64, path: \"" + s.path().string() + "\", bytes: 1GiB}\n")),
             StartsWith("test.yaml:6:7: jobs.train.remote: ") && Contains("cannot serve a job with a decoded_store"));
  const std::string client = "jobs:\n  j:\n    source: {root: \"" + kDemo.string() +
                             "\"}\n    batch_size: 2\n    pipeline: [decode: {}, resize: {size: 8}, center_crop: {size: 8}]\n";
  CHECK_NOTHROW(stoker::config::parse_client_job(client, "<client>"));
  try {
    stoker::config::parse_client_job(client + "    remote: {workers: [\"evil:1\"]}\n", "<client>");
    FAIL("a client named remote workers");
  } catch (const ConfigError& e) {
    CHECK(e.key_path() == "jobs.j.remote");
    CHECK_THAT(e.what(), StartsWith("<client>:6:") && Contains("cannot name remote workers"));
  }
}
