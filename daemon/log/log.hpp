// stoker::log::info / warn / error / debug / critical (format, args...): the daemon's log lines,
// written as spdlog's functions of the same names write them (the default logger, its level,
// pattern and sinks), with the format string checked at compile time as theirs is.
//
// Why not spdlog::info itself: it formats through fmt's whole formatting engine, and though fmt
// declares that engine extern (compiled once, in libfmt), GCC and clang still instantiate and
// optimise it in every file that logs, to inline it: the cold ASan build of the same tree took
// 430 s with spdlog::info, 338 s with this (docs/TESTING.md, "What made it fit"). Here a line
// is formatted by fmt::vformat,
// which is compiled in libfmt, and handed to the logger as a finished string.
//
// Invariant: logging never throws (as spdlog's functions): a failure to format is logged as such.
#pragma once

#include <exception>
#include <string>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace stoker::log {

namespace detail {
inline void write(spdlog::level::level_enum level, fmt::string_view format, fmt::format_args args) noexcept {
  spdlog::logger* logger = spdlog::default_logger_raw();
  if (!logger->should_log(level)) return;  // below the level: not formatted
  try {
    const std::string line = fmt::vformat(format, args);
    logger->log(level, spdlog::string_view_t(line.data(), line.size()));
  } catch (const std::exception& e) {  // out of memory, or a formatter of our own that threw
    try {
      logger->log(spdlog::level::err,
                  spdlog::string_view_t(std::string("a log line could not be formatted (") +
                                        std::string(format.data(), format.size()) + "): " + e.what()));
    } catch (...) {
    }
  }
}
}  // namespace detail

template <typename... T>
void debug(fmt::format_string<T...> format, T&&... args) {
  detail::write(spdlog::level::debug, format, fmt::make_format_args(args...));
}
template <typename... T>
void info(fmt::format_string<T...> format, T&&... args) {
  detail::write(spdlog::level::info, format, fmt::make_format_args(args...));
}
template <typename... T>
void warn(fmt::format_string<T...> format, T&&... args) {
  detail::write(spdlog::level::warn, format, fmt::make_format_args(args...));
}
template <typename... T>
void error(fmt::format_string<T...> format, T&&... args) {
  detail::write(spdlog::level::err, format, fmt::make_format_args(args...));
}
template <typename... T>
void critical(fmt::format_string<T...> format, T&&... args) {
  detail::write(spdlog::level::critical, format, fmt::make_format_args(args...));
}

}  // namespace stoker::log
