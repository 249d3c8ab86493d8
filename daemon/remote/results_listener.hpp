// The worker's results listener (issue #36; the protocol is results_channel.hpp's): one thread
// accepting connections on --results-port and binding each to the stream whose Open carried
// the nonce it presents. A node sends its greeting as it connects, so it is read at accept and
// bound at once; a peer that has not spoken yet waits, polled with the others still in their
// handshake (at most kMaxGreeting), and is closed after kBindTimeout. Out of descriptors while
// accepting, the oldest silent peer gives way (or, with none, the thread tries again every
// 50 ms), reported at most every 10 s.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "base/mutex.hpp"
#include "remote/results_channel.hpp"

namespace stoker::remote {

class WorkerStream;

inline constexpr std::size_t kMaxGreeting = 64;

// The worker's listener: one thread accepting, binding each connection to its stream.
class ResultsListener {
 public:
  // Listens on `host` (the worker's --listen host; "" or "0.0.0.0"/"::" for all) and `port`
  // (0: any free one). Throws std::runtime_error naming them when it cannot.
  ResultsListener(const std::string& host, std::uint16_t port);
  ~ResultsListener();  // stop()
  ResultsListener(const ResultsListener&) = delete;
  ResultsListener& operator=(const ResultsListener&) = delete;

  int port() const { return port_; }
  // A connection presenting `nonce` is bound to `stream` (once; withdrawn when the stream ends).
  void offer(const std::string& nonce, std::weak_ptr<WorkerStream> stream);
  void withdraw(const std::string& nonce);
  // Stops accepting (a connection in its handshake is closed unbound) and joins the thread.
  void stop();

 private:
  void accept_loop();
  // A whole greeting was read from fd (blocking again): bound to its stream, or closed.
  void greeted(int fd, const char* hello);

  int fd_ = -1;
  int wake_ = -1;  // an eventfd: stop() wakes the polling thread
  int port_ = 0;
  std::atomic<bool> stopping_{false};
  base::Mutex mu_;
  std::vector<std::pair<std::string, std::weak_ptr<WorkerStream>>> offered_ STOKER_GUARDED_BY(mu_);
  std::thread thread_;
};

}  // namespace stoker::remote
