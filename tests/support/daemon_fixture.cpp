#include "daemon_fixture.hpp"

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <sys/resource.h>
#include <fstream>
#include <poll.h>
#include <sstream>
#include <stdexcept>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>

extern char** environ;

namespace stoker::test {
namespace fs = std::filesystem;

std::string bin(const char* name) { return std::string(STOKER_BIN_DIR) + "/" + name; }
std::string data_dir() { return STOKER_TEST_DATA_DIR; }

fs::path write_config(const fs::path& dir, const std::vector<JobSpec>& jobs, int workers,
                      const std::string& server_extra) {
  std::ostringstream y;
  y << "server:\n  workers: " << workers << "\n  log_level: info\n" << server_extra << "jobs:\n";
  for (const auto& j : jobs) {
    y << "  " << j.name << ":\n"
      << "    source: "
      << (j.source.empty() ? "{type: imagefolder, root: \"" + (j.root.empty() ? data_dir() + "/demo" : j.root) + "\"}"
                           : j.source)
      << "\n"
      << "    batch_size: " << j.batch_size << "\n"
      << "    shuffle: " << (!j.shuffle_yaml.empty() ? j.shuffle_yaml : j.shuffle ? "true" : "false") << "\n"
      << "    seed: " << j.seed << "\n"
      << "    drop_last: " << (j.drop_last ? "true" : "false") << "\n"
      << "    consumers: " << j.consumers << "\n"
      << "    prefetch: " << j.prefetch << "\n";
    if (!j.on_error.empty()) y << "    on_error: " << j.on_error << "\n";
    if (!j.pipeline_yaml.empty()) {
      y << j.pipeline_yaml << j.extra;
      continue;
    }
    y << "    pipeline:\n      - decode: {}\n";
    if (j.random_crop) {
      y << "      - random_resized_crop: {size: " << j.out_size << "}\n"
        << "      - horizontal_flip: {p: 0.5}\n";
    } else {
      y << "      - resize: {size: " << j.out_size + j.out_size / 7 << "}\n"
        << "      - center_crop: {size: " << j.out_size << "}\n";
    }
    y << "    output: {dtype: " << j.dtype << ", layout: NCHW}\n" << j.extra;
  }
  const fs::path p = dir / "stoker.yaml";
  std::ofstream(p) << y.str();
  return p;
}

namespace {

bool can_connect(const std::string& socket) {
  const int fd = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, socket.c_str(), sizeof(addr.sun_path) - 1);
  const bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  ::close(fd);
  return ok;
}

std::string read_all(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// `env_extra`: "NAME=value" entries added to the child's environment (built before the fork:
// the child of a threaded test only calls async-signal-safe functions until exec).
int spawn(const std::vector<std::string>& argv, const fs::path& log, const std::vector<std::string>& env_extra = {}) {
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  std::vector<char*> env;
  for (char** e = environ; *e != nullptr; ++e) env.push_back(*e);
  for (const auto& e : env_extra) env.push_back(const_cast<char*>(e.c_str()));
  env.push_back(nullptr);
  // Fault tests: STOKER_TEST_NOFILE=N runs the program with a hard descriptor limit of N
  // (as a unit with LimitNOFILE=N would), in the child only.
  const char* nofile = std::getenv("STOKER_TEST_NOFILE");
  const rlimit rl{static_cast<rlim_t>(nofile ? std::atol(nofile) : 0), static_cast<rlim_t>(nofile ? std::atol(nofile) : 0)};
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    if (nofile != nullptr) ::setrlimit(RLIMIT_NOFILE, &rl);
    ::execve(args[0], args.data(), env.data());
    _exit(127);
  }
  return pid;
}

// A descriptor that becomes readable when `pid` exits (pidfd_open, Linux 5.3), or -1.
int exit_event(int pid) { return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)); }

int wait_exit(int pid, int timeout_s) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  int status = 0;
  const int exited = exit_event(pid);
  for (;;) {
    const pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid) break;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      if (exited >= 0) ::close(exited);
      return 124;
    }
    if (exited >= 0) {
      pollfd p{exited, POLLIN, 0};
      ::poll(&p, 1, static_cast<int>(left.count()));  // woken by the exit itself
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));  // a kernel without pidfd
    }
  }
  if (exited >= 0) ::close(exited);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// The readiness stokerd announces under systemd (READY=1 on $NOTIFY_SOCKET, sent once its jobs
// are planned and its socket listens), received on an abstract datagram socket of this test.
class ReadyListener {
 public:
  ReadyListener() {
    static std::atomic<int> counter{0};
    name_ = "stoker-test-ready-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
    fd_ = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::memcpy(addr.sun_path + 1, name_.data(), name_.size());  // abstract: sun_path[0] == 0
    const auto len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name_.size());
    if (fd_ >= 0 && ::bind(fd_, reinterpret_cast<sockaddr*>(&addr), len) != 0) {
      ::close(fd_);
      fd_ = -1;
    }
  }
  ~ReadyListener() {
    if (fd_ >= 0) ::close(fd_);
  }
  int fd() const { return fd_; }
  std::string env() const { return "NOTIFY_SOCKET=@" + name_; }
  // Reads what is queued; true once READY=1 came.
  bool ready() {
    char buf[512];
    for (ssize_t n; (n = ::recv(fd_, buf, sizeof buf, MSG_DONTWAIT)) > 0;) {
      if (std::string(buf, static_cast<std::size_t>(n)).find("READY=1") != std::string::npos) return true;
    }
    return false;
  }

 private:
  int fd_ = -1;
  std::string name_;
};

}  // namespace

Daemon::Daemon(const fs::path& config, const std::string& socket,
               const std::vector<std::string>& extra_args)
    : log_path_(fs::path(socket).parent_path() / ("stokerd-" + std::to_string(::getpid()) + "-" +
                                                  std::to_string(std::rand()) + ".log")) {
  std::vector<std::string> argv = {bin("stokerd"), "--config", config.string(), "--socket", socket};
  argv.insert(argv.end(), extra_args.begin(), extra_args.end());
  // Waited for on the events themselves: READY=1 from the daemon, or its exit. A test that set
  // $NOTIFY_SOCKET itself (the systemd test) keeps it, and then the socket is polled.
  const bool notify_own = std::getenv("NOTIFY_SOCKET") == nullptr;
  ReadyListener ready;
  const bool by_event = notify_own && ready.fd() >= 0;
  pid_ = spawn(argv, log_path_, by_event ? std::vector<std::string>{ready.env()} : std::vector<std::string>{});
  const int exited = exit_event(pid_);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  for (;;) {
    if (by_event ? ready.ready() : can_connect(socket)) break;
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      if (exited >= 0) ::close(exited);
      throw std::runtime_error("stokerd exited during start:\n" + log());
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      if (exited >= 0) ::close(exited);
      stop();
      throw std::runtime_error("stokerd did not come up in 20 s:\n" + log());
    }
    if (by_event && exited >= 0) {
      pollfd p[2] = {{ready.fd(), POLLIN, 0}, {exited, POLLIN, 0}};
      ::poll(p, 2, static_cast<int>(left.count()));
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  if (exited >= 0) ::close(exited);
}

Daemon::~Daemon() {
  if (pid_ > 0) stop();
}

int Daemon::stop() {
  if (pid_ <= 0) return -1;
  ::kill(pid_, SIGTERM);
  const int rc = wait_exit(pid_, 30);
  pid_ = -1;
  return rc;
}

void Daemon::kill9() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGKILL);
  int status = 0;
  ::waitpid(pid_, &status, 0);
  pid_ = -1;
}

std::string Daemon::log() const { return read_all(log_path_); }

int start_program(const std::vector<std::string>& argv, const fs::path& log) { return spawn(argv, log); }
int wait_program(int pid, int timeout_s) { return wait_exit(pid, timeout_s); }

int run_program(const std::vector<std::string>& argv, std::string& output, int timeout_s) {
  char tmpl[] = "/tmp/stoker-run-XXXXXX";
  const int fd = ::mkstemp(tmpl);
  ::close(fd);
  const int pid = spawn(argv, tmpl);
  const int rc = wait_exit(pid, timeout_s);
  output = read_all(tmpl);
  ::unlink(tmpl);
  return rc;
}

std::vector<fs::path> quarantine_files(const fs::path& state_dir, const std::string& job) {
  std::vector<fs::path> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(state_dir, ec)) {
    const std::string n = e.path().filename().string();
    if (n.rfind(job + "-", 0) == 0 && n.size() > job.size() + 12 && n.ends_with(".quarantine")) out.push_back(e.path());
  }
  return out;
}

std::string memfd_of(int pid, const std::string& name) {
  std::error_code ec;
  const fs::path dir = "/proc/" + std::to_string(pid) + "/fd";
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const fs::path target = fs::read_symlink(e.path(), ec);
    if (!ec && target.string().rfind("/memfd:" + name + " ", 0) == 0) return e.path().string();
  }
  return {};
}

std::vector<std::string> shm_objects_containing(const std::string& part) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/dev/shm", ec)) {
    const std::string n = e.path().filename().string();
    if (n.find(part) != std::string::npos) out.push_back(n);
  }
  return out;
}

}  // namespace stoker::test
