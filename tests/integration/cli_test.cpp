// Integration tier: the command lines of stokerctl and stokerd as a user meets them (CLI11,
// issue 22) — each command's generated --help, errors that name the option and point to that
// help, and numbers that keep meaning what they meant (decimal only, last option wins).
#include <catch2/catch.hpp>

#include <string>
#include <tuple>
#include <vector>

#include "daemon_fixture.hpp"

using namespace stoker::test;
using Catch::Contains;
using Catch::StartsWith;

TEST_CASE("stokerctl COMMAND --help lists each of that command's options with what it does", "[integration][cli]") {
  std::string out;
  REQUIRE(run_program({bin("stokerctl"), "consume", "--help"}, out) == 0);
  CHECK_THAT(out, StartsWith("usage: stokerctl consume --job NAME"));
  CHECK_THAT(out, Contains("Options:") && Contains("--batches N") && Contains("stop after N batches") &&
                      Contains("--hold-ms MS") && Contains("--start-batch B") && Contains("--ids") &&
                      Contains("--socket PATH") && Contains("$STOKER_SOCKET"));
  CHECK_THAT(out, !Contains("--columns") && !Contains("--interval"));  // not another command's

  REQUIRE(run_program({bin("stokerctl"), "top", "--help"}, out) == 0);
  CHECK_THAT(out, StartsWith("usage: stokerctl top"));
  CHECK_THAT(out, Contains("-d,--interval SECONDS") && Contains("-n,--iterations N") && Contains("--no-clear"));
  CHECK_THAT(out, !Contains("--batches"));

  REQUIRE(run_program({bin("stokerctl"), "preview", "--help"}, out) == 0);
  CHECK_THAT(out, Contains("--columns C") && Contains("tiles per row") && Contains("--out FILE.png"));

  // --help anywhere on the command's line, not only right after its name.
  REQUIRE(run_program({bin("stokerctl"), "consume", "--job", "demo", "--help"}, out) == 0);
  CHECK_THAT(out, StartsWith("usage: stokerctl consume"));

  // The top level lists the commands.
  REQUIRE(run_program({bin("stokerctl"), "--help"}, out) == 0);
  for (const char* cmd : {"consume", "status", "top", "preview", "drain", "reload", "prepare"}) {
    CHECK_THAT(out, Contains(std::string("\n  ") + cmd + " "));
  }
}

TEST_CASE("stokerctl: an unknown option or a mistyped value exits 2 naming the option and its command's help",
          "[integration][cli]") {
  std::string out;
  // A value that is not a number, a negative or hexadecimal one (CLI11 alone would wrap -1 to
  // 2^64-1 and read 0x10 as 16), one too large for the option.
  for (const char* bad : {"abc", "-1", "0x10", "3x", "99999999999999999999"}) {
    CAPTURE(bad);
    CHECK(run_program({bin("stokerctl"), "consume", "--job", "demo", "--batches", bad, "--socket", "/nonexistent"},
                      out) == 2);
    CHECK_THAT(out, Contains("stokerctl consume: --batches") && Contains(std::string("'") + bad + "'") &&
                        Contains("'stokerctl consume --help'"));
  }
  CHECK(run_program({bin("stokerctl"), "consume", "--job", "demo", "--rank", "4294967296"}, out) == 2);
  CHECK_THAT(out, Contains("--rank") && Contains("4294967296"));

  CHECK(run_program({bin("stokerctl"), "consume", "--job", "demo", "--bogus"}, out) == 2);
  CHECK_THAT(out, Contains("--bogus") && Contains("'stokerctl consume --help'"));
  // An unknown option is named even when a required one is missing too.
  CHECK(run_program({bin("stokerctl"), "consume", "--jbo", "demo"}, out) == 2);
  CHECK_THAT(out, Contains("--jbo"));
  CHECK(run_program({bin("stokerctl"), "consume"}, out) == 2);
  CHECK_THAT(out, Contains("stokerctl consume: --job is required"));

  CHECK(run_program({bin("stokerctl"), "top", "-d", "0.01"}, out) == 2);
  CHECK_THAT(out, Contains("--interval") && Contains("0.1..3600") && Contains("'0.01'"));
  CHECK(run_program({bin("stokerctl"), "top", "-d", "nan"}, out) == 2);
  CHECK(run_program({bin("stokerctl"), "preview", "demo", "--out", "x.png", "--columns", "0"}, out) == 2);
  CHECK_THAT(out, Contains("--columns") && Contains("'stokerctl preview --help'"));
  CHECK(run_program({bin("stokerctl"), "status", "--socket"}, out) == 2);
  CHECK_THAT(out, Contains("--socket"));
  CHECK(run_program({bin("stokerctl"), "reload", "extra"}, out) == 2);
  CHECK_THAT(out, Contains("extra"));
  CHECK(run_program({bin("stokerctl"), "nosuch"}, out) == 2);
  CHECK_THAT(out, Contains("unknown command 'nosuch'"));
  CHECK(run_program({bin("stokerctl")}, out) == 2);
  CHECK_THAT(out, StartsWith("usage: stokerctl"));
}

TEST_CASE("stokerctl and stokerd numbers are decimal, and the last of a repeated option counts", "[integration][cli]") {
  TempDir dir;
  const auto socket = (dir.path() / "s.sock").string();
  // stokerd --workers 010: ten workers, not octal 8 (the config says 1).
  Daemon d(write_config(dir.path(), {JobSpec{}}, 1), socket, {"--workers", "010"});
  std::string out;
  REQUIRE(run_program({bin("stokerctl"), "status", "--socket", socket}, out) == 0);
  CHECK_THAT(out, Contains("\"workers\":10,"));
  // "010" is ten batches (CLI11's own conversion reads it as octal 8).
  REQUIRE(run_program({bin("stokerctl"), "consume", "--job", "demo", "--socket", socket, "--batches", "010"}, out) == 0);
  CHECK_THAT(out, Contains("\"summary\":true,\"batches\":10,"));
  REQUIRE(run_program({bin("stokerctl"), "consume", "--job", "demo", "--socket", socket, "--batches", "5", "--batches",
                       "2"},
                      out) == 0);
  CHECK_THAT(out, Contains("\"summary\":true,\"batches\":2,"));
  // --clear and --no-clear: the last given wins.
  REQUIRE(run_program({bin("stokerctl"), "top", "--socket", socket, "-n", "1", "--no-clear", "--clear"}, out) == 0);
  CHECK_THAT(out, StartsWith("\x1b[H\x1b[2J"));
  REQUIRE(run_program({bin("stokerctl"), "top", "--socket", socket, "-n", "1", "--clear", "--no-clear"}, out) == 0);
  CHECK_THAT(out, !StartsWith("\x1b["));
}

TEST_CASE("stokerd: generated --help, and errors that name the option", "[integration][cli]") {
  std::string out;
  REQUIRE(run_program({bin("stokerd"), "--help"}, out) == 0);
  CHECK_THAT(out, StartsWith("usage: stokerd --config FILE"));
  CHECK_THAT(out, Contains("-c,--config FILE") && Contains("--workers N") && Contains("--log-level LEVEL") &&
                      Contains("--state-dir DIR") && Contains("--version"));

  TempDir dir;
  const std::string cfg = write_config(dir.path(), {JobSpec{}}, 1).string();
  const std::string socket = (dir.path() / "s.sock").string();
  for (const char* bad : {"0", "1025", "abc", "0x10"}) {
    CAPTURE(bad);
    CHECK(run_program({bin("stokerd"), "--config", cfg, "--socket", socket, "--workers", bad}, out) == 2);
    CHECK_THAT(out, Contains("stokerd: --workers") && Contains("1..1024") && Contains(std::string("'") + bad + "'"));
  }
  // A misspelt level is refused as server.log_level would be, not read as "off" (a silent daemon).
  CHECK(run_program({bin("stokerd"), "--config", cfg, "--socket", socket, "--log-level", "dbug"}, out) == 2);
  CHECK_THAT(out, Contains("--log-level") && Contains("'dbug'") && Contains("trace, debug, info, warn, error"));
  CHECK(run_program({bin("stokerd"), "--cnofig", cfg}, out) == 2);
  CHECK_THAT(out, Contains("--cnofig") && Contains("'stokerd --help'"));
  CHECK(run_program({bin("stokerd"), "--socket", socket}, out) == 2);
  CHECK_THAT(out, Contains("--config is required"));
  CHECK(run_program({bin("stokerd"), "--config"}, out) == 2);
  CHECK_THAT(out, Contains("--config"));
}

TEST_CASE("stokerd --worker: a stream bound out of range exits 2 naming the option and its range", "[integration][cli]") {
  TempDir dir;
  std::string out;
  const std::vector<std::string> base = {bin("stokerd"), "--worker", "--listen", "127.0.0.1:0", "--allow-root",
                                         dir.path().string()};
  // A stokerd built without gRPC has no --worker mode (cmake/remote.cmake): nothing to check.
  if (run_program({bin("stokerd"), "--worker", "--help"}, out) != 0) {
    WARN("stokerd has no --worker mode in this build (STOKER_REMOTE off): not checked");
    return;
  }
  for (const auto& [opt, bad, range] :
       {std::tuple<const char*, const char*, const char*>{"--max-streams", "0", "1 to 4096"},
        {"--max-streams", "5000", "1 to 4096"},
        {"--max-streams", "abc", "1 to 4096"},
        {"--open-timeout", "0", "0.1"},
        {"--open-timeout", "1e9", "3600"},
        {"--open-timeout", "soon", "3600"},
        {"--results-port", "70000", "0 to 65535"},
        {"--results-port", "any", "0 to 65535"}}) {
    CAPTURE(opt, bad);
    std::vector<std::string> args = base;
    args.insert(args.end(), {opt, bad});
    CHECK(run_program(args, out) == 2);
    CHECK_THAT(out, Contains(std::string("stokerd --worker: ") + opt) && Contains(bad) && Contains(range));
  }
}
