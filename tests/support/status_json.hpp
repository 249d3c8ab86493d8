// The daemon's status document, parsed: for tests that read its figures. Apart from
// batch_copy.hpp so that tests which do not read JSON do not parse nlohmann's header.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "batch_copy.hpp"

namespace stoker::test {

using Json = nlohmann::json;

inline Json status_json(const std::string& socket) { return Json::parse(daemon_status_text(socket)); }

}  // namespace stoker::test
