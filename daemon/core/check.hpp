// STOKER_CHECK(cond, fmt, args...): an invariant of the daemon's own code (never a check of
// input: bad input is refused with a Status and never aborts). When it does not hold, the
// failure is logged with file:line, the condition and the formatted detail, the log is
// flushed, and the process aborts: continuing would serve wrong batches or corrupt a segment.
#pragma once

#include <cstdlib>

#include <spdlog/spdlog.h>

#include "log/log.hpp"

#define STOKER_CHECK(cond, ...)                                                                                  \
  do {                                                                                                           \
    if (!(cond)) [[unlikely]] {                                                                                  \
      stoker::log::critical("{}:{}: check failed: {}: {}", __FILE__, __LINE__, #cond, fmt::format(__VA_ARGS__)); \
      spdlog::default_logger()->flush();                                                                         \
      std::abort();                                                                                              \
    }                                                                                                            \
  } while (false)
