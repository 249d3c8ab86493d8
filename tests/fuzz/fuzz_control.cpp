// libFuzzer harness: the daemon's control-message handling, end to end through a real
// ControlServer (one tiny job over tests/data/demo, no workers) and a real Unix socket.
// Each input is a sequence of messages, each prefixed by a 2-byte little-endian length; they
// are sent on one connection (lengths beyond the input are clipped), the server's loop runs,
// the connection closes, the loop runs again. Nothing a client sends may crash the daemon,
// leak, or leave it unable to serve: after each input a well-formed StatusQuery on a fresh
// connection must be answered.
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>

#include "config/config.hpp"
#include "delivery/device_delivery.hpp"
#include "control/control_server.hpp"
#include "job/job.hpp"
#include "sched/worker_pool.hpp"
#include "jobs/job_table.hpp"
#include "source/dataset.hpp"
#include "stoker/proto/control.hpp"

namespace fs = std::filesystem;
using namespace stoker;

namespace {

struct World {
  fs::path dir;
  std::string socket;
  sched::WorkQueue queue;
  std::unique_ptr<delivery::DeviceDelivery> delivery;
  std::unique_ptr<jobs::JobTable> table;
  std::unique_ptr<control::ControlServer> server;
  config::JobConfig job_config;

  // An input that drained the job (the "drain" command) does not starve the next ones.
  void add_job() {
    if (table->serving("demo") == nullptr) {
      table->add(jobs::PreparedJob{job_config, source::scan_image_folder(job_config.source.root)});
    }
  }

  World() {
    dir = fs::temp_directory_path() / ("stoker-fuzz-control-" + std::to_string(::getpid()));
    fs::create_directories(dir);
    socket = (dir / "s.sock").string();
    const char* data = std::getenv("STOKER_FUZZ_DEMO_DIR");
    const std::string root = data ? data : STOKER_FUZZ_DEMO_DIR;
    const std::string yaml = "jobs:\n  demo:\n    source: {root: \"" + root + "\"}\n    batch_size: 4\n    consumers: 2\n"
                             "    prefetch: 2\n    pipeline:\n      - decode: {}\n      - random_resized_crop: {size: 8}\n";
    config::Config cfg = config::parse_config(yaml, "fuzz.yaml", dir);
    config::JobConfig jc = cfg.jobs.at(0);
    jc.quarantine = dir / "q";
    std::string why;
    delivery = std::make_unique<delivery::DeviceDelivery>(nullptr, "no device in the fuzz harness");
    jobs::JobContext ctx;
    ctx.socket = socket;
    ctx.generation = 1;
    ctx.queue = &queue;
    ctx.notify = [] {};
    table = std::make_unique<jobs::JobTable>(ctx, *delivery);
    // add() plans work items; nothing runs them: slots stay FILLING.
    job_config = jc;
    add_job();
    control::ControlServer::Limits limits;
    limits.max_connections = 64;
    // Commands are fuzzed up to their parsing; a define_job would start scanning whatever
    // folder the input names, so client-defined jobs are off here (drain is on: the harness
    // runs as the daemon's own user, so "drain" of "demo" ends the job as it would).
    control::ControlServer::JobSources sources;
    sources.client_jobs = false;
    server = std::make_unique<control::ControlServer>(socket, *table, 1, 1, *delivery, limits, sources);
  }
};

int connect_to(const std::string& path) {
  const int fd = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof addr.sun_path - 1);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) std::abort();
  return fd;
}

void drain(int fd) {
  alignas(8) static std::uint8_t buf[1 << 17];
  while (::recv(fd, buf, sizeof buf, MSG_DONTWAIT) > 0) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static World w;
  w.add_job();
  const int fd = connect_to(w.socket);
  w.server->run_once(0);  // accept
  for (std::size_t at = 0; at + 2 <= size;) {
    std::size_t n = data[at] | (data[at + 1] << 8);
    at += 2;
    n = std::min(n, size - at);
    // A message that looks like ours more often: fill in magic and version when asked (odd length).
    std::uint8_t msg[4096];
    n = std::min(n, sizeof msg);
    std::memcpy(msg, data + at, n);
    at += n;
    if ((n & 1) && n >= sizeof(proto::MessageHeader)) {
      auto* h = reinterpret_cast<proto::MessageHeader*>(msg);
      h->magic = proto::kControlMagic;
      h->proto_major = proto::kProtoMajor;
      h->proto_minor = proto::kProtoMinor;
      h->size = static_cast<std::uint32_t>(n);
    }
    [[maybe_unused]] const ssize_t s = ::send(fd, msg, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    w.server->run_once(0);
    drain(fd);
  }
  ::close(fd);
  w.server->run_once(0);
  // The daemon still serves: a status query on a fresh connection is answered.
  const int probe = connect_to(w.socket);
  auto q = proto::make_message<proto::StatusQueryMsg>(proto::MsgType::kStatusQuery);
  if (::send(probe, &q, sizeof q, MSG_NOSIGNAL) != static_cast<ssize_t>(sizeof q)) std::abort();
  bool answered = false;
  for (int i = 0; i < 20 && !answered; ++i) {
    w.server->run_once(1);
    alignas(8) std::uint8_t buf[1 << 17];
    answered = ::recv(probe, buf, sizeof buf, MSG_DONTWAIT) > 0;
  }
  ::close(probe);
  w.server->run_once(0);
  if (!answered) std::abort();
  return 0;
}
