// stoker::log (daemon/log/log.hpp) against spdlog's own functions, through the same logger: the
// same line for the same call, nothing formatted below the level, and a formatter that throws
// logged as such rather than thrown into the daemon's code.
#include <catch2/catch.hpp>

#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>

#include <spdlog/sinks/ostream_sink.h>

#include "log/log.hpp"

namespace {

// Counts its formatting; throws if asked to.
struct Counted {
  int* formatted;
  bool throws = false;
};

// The default logger swapped for one writing "LEVEL message" into a string, restored after.
class CapturedLog {
 public:
  CapturedLog() : saved_(spdlog::default_logger()), level_(spdlog::get_level()) {
    auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(out_);
    auto logger = std::make_shared<spdlog::logger>("test", sink);
    logger->set_pattern("%l %v");
    spdlog::set_default_logger(logger);
  }
  ~CapturedLog() {
    spdlog::set_default_logger(saved_);
    spdlog::set_level(level_);
  }
  std::string take() {
    std::string s = out_.str();
    out_.str("");
    return s;
  }

 private:
  std::ostringstream out_;
  std::shared_ptr<spdlog::logger> saved_;
  spdlog::level::level_enum level_;
};

}  // namespace

template <>
struct fmt::formatter<Counted> : fmt::formatter<int> {
  template <typename Context>
  auto format(const Counted& c, Context& ctx) const {
    ++*c.formatted;
    if (c.throws) throw std::runtime_error("the formatter threw");
    return fmt::formatter<int>::format(*c.formatted, ctx);
  }
};

TEST_CASE("log: stoker::log writes the line spdlog's function of the same name writes", "[log]") {
  CapturedLog log;
  spdlog::set_level(spdlog::level::debug);
  const std::string path = "/data/a b.jpg";
  int n = 0;
  stoker::log::warn("{}: corrupt ({}), {} of {} skipped; {:.2f}", path, "Premature end", 3u, 10L, 0.25);
  const std::string ours = log.take();
  spdlog::warn("{}: corrupt ({}), {} of {} skipped; {:.2f}", path, "Premature end", 3u, 10L, 0.25);
  CHECK(ours == log.take());
  CHECK(ours == "warning /data/a b.jpg: corrupt (Premature end), 3 of 10 skipped; 0.25\n");
  for (auto level : {spdlog::level::debug, spdlog::level::info, spdlog::level::err, spdlog::level::critical}) {
    INFO(spdlog::level::to_string_view(level).data());
    switch (level) {
      case spdlog::level::debug:
        stoker::log::debug("x {}", Counted{&n});
        break;
      case spdlog::level::info:
        stoker::log::info("x {}", Counted{&n});
        break;
      case spdlog::level::err:
        stoker::log::error("x {}", Counted{&n});
        break;
      default:
        stoker::log::critical("x {}", Counted{&n});
        break;
    }
    const std::string line = log.take();
    CHECK(line == std::string(spdlog::level::to_string_view(level).data()) + " x " + std::to_string(n) + "\n");
  }
  CHECK(n == 4);
}

TEST_CASE("log: below the logger's level nothing is formatted, and a throwing formatter is logged, not thrown",
          "[log]") {
  CapturedLog log;
  spdlog::set_level(spdlog::level::warn);
  int n = 0;
  stoker::log::info("x {}", Counted{&n});
  stoker::log::debug("x {}", Counted{&n});
  CHECK(n == 0);
  CHECK(log.take().empty());
  CHECK_NOTHROW(stoker::log::error("item {}: {}", 5, Counted{&n, true}));
  CHECK(n == 1);
  CHECK(log.take() == "error a log line could not be formatted (item {}: {}): the formatter threw\n");
}
