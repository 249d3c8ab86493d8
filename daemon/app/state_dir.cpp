#include "app/state_dir.hpp"

#include <cstdlib>

namespace stoker::app {

std::filesystem::path resolve_state_dir(const std::string& option, const std::filesystem::path& config,
                                        const std::string& socket_path, const std::string& state_directory_env) {
  if (!option.empty()) return option;
  if (!config.empty()) return config;
  if (!state_directory_env.empty()) return state_directory_env.substr(0, state_directory_env.find(':'));
  return std::filesystem::path(socket_path).parent_path();
}

std::filesystem::path resolve_state_dir(const std::string& option, const std::filesystem::path& config,
                                        const std::string& socket_path) {
  const char* env = std::getenv("STATE_DIRECTORY");
  return resolve_state_dir(option, config, socket_path, env != nullptr ? env : "");
}

}  // namespace stoker::app
