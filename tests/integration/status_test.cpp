// Integration tier: `stokerctl status` for hundreds of consumers (issue #15 §5): one complete
// JSON document, carried in several messages.
#include <catch2/catch.hpp>

#include <fstream>
#include <memory>
#include <sys/resource.h>

#include "daemon_fixture.hpp"
#include "stoker/stoker.hpp"

using namespace stoker::test;

TEST_CASE("status stays one complete JSON document with 700 consumers attached", "[integration][status]") {
  // 700 clients in this process: make room for their sockets.
  rlimit rl{};
  ::getrlimit(RLIMIT_NOFILE, &rl);
  if (rl.rlim_cur < 4096 && rl.rlim_max > rl.rlim_cur) {
    rl.rlim_cur = std::min<rlim_t>(rl.rlim_max, 4096);
    ::setrlimit(RLIMIT_NOFILE, &rl);
  }
  REQUIRE(rl.rlim_cur >= 800);
  TempDir dir;
  const auto socket = (dir.path() / "s.sock").string();
  JobSpec j;
  j.consumers = 700;
  j.batch_size = 1;
  j.prefetch = 1;
  j.out_size = 8;
  Daemon d(write_config(dir.path(), {j}, 2, "  max_connections: 1000\n"), socket);
  std::vector<std::unique_ptr<stoker::Client>> clients;
  stoker::ClientOptions o;
  o.socket_path = socket;
  for (std::uint32_t r = 0; r < 700; ++r) clients.push_back(std::make_unique<stoker::Client>("demo", r, o));

  std::string out;
  REQUIRE(run_program({bin("stokerctl"), "status", "--socket", socket}, out) == 0);
  CHECK(out.size() > 65536);  // more than one control message
  const auto json_file = dir.path() / "status.json";
  std::ofstream(json_file) << out;
  // Parsed by a real JSON parser: complete and valid, every consumer there and connected.
  std::string check;
  REQUIRE(run_program({"/usr/bin/python3", "-c",
                       "import json,sys; s=json.load(open(sys.argv[1])); c=s['jobs'][0]['consumers'];"
                       "assert len(c)==700, len(c); assert all(x['connected'] for x in c);"
                       "assert [x['rank'] for x in c]==list(range(700)); print('ok')",
                       json_file.string()},
                      check) == 0);
  CHECK_THAT(check, Catch::Contains("ok"));
}
