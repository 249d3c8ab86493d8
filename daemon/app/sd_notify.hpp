// systemd's readiness protocol (sd_notify(3)) without libsystemd: one datagram per state to
// the socket named by $NOTIFY_SOCKET (a path, or an abstract name starting with '@'). Does
// nothing when the variable is unset (stokerd started by hand or by another supervisor).
#pragma once

#include <chrono>
#include <string>

namespace stoker::app {

class SdNotify {
 public:
  SdNotify();  // reads $NOTIFY_SOCKET and $WATCHDOG_USEC once
  // "READY=1\nSTATUS=serving 2 jobs" etc.; false when there is no socket or the send failed.
  bool send(const std::string& state) const;
  // WATCHDOG=1 when half the watchdog interval has passed since the last one (call often).
  void keepalive();
  bool watchdog_enabled() const { return interval_.count() > 0; }
  std::chrono::microseconds interval() const { return interval_; }

 private:
  std::string socket_;
  std::chrono::microseconds interval_{0};
  std::chrono::steady_clock::time_point last_{};
};

}  // namespace stoker::app
