// The JSON a command is answered with when it fails: {"ok": false, "error": why}. Shared by
// the command groups (commands.cpp, reloads.cpp, job_definitions.cpp).
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace stoker::control {

inline std::string reply_error(const std::string& why) {
  return nlohmann::json{{"ok", false}, {"error", why}}.dump();
}

}  // namespace stoker::control
