// libFuzzer harness: the config parser on arbitrary text. Every input must end, quickly, in a
// Config or a ConfigError (never another exception, a crash or a hang: yaml-cpp 0.7's LoadAll
// looped forever on ",a").
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>

#include "config/config.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    stoker::config::parse_config(text, "fuzz.yaml", std::filesystem::temp_directory_path());
  } catch (const stoker::config::ConfigError&) {
  }
  return 0;
}
