// Where stokerd keeps what outlives it: quarantine files and tar index caches.
#pragma once

#include <filesystem>
#include <string>

namespace stoker::app {

// First set: --state-dir, the config's server.state_dir, $STATE_DIRECTORY (systemd's
// StateDirectory=; its first path when it lists several, separated by ':'), else the socket's
// folder. `state_directory_env` is the variable's value (empty: unset).
std::filesystem::path resolve_state_dir(const std::string& option, const std::filesystem::path& config,
                                        const std::string& socket_path, const std::string& state_directory_env);

// The same, reading $STATE_DIRECTORY from the environment.
std::filesystem::path resolve_state_dir(const std::string& option, const std::filesystem::path& config,
                                        const std::string& socket_path);

}  // namespace stoker::app
