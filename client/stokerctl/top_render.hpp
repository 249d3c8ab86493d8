// `stokerctl top`'s frame: the daemon's status JSON (as `stokerctl status` prints it) drawn
// in 80 columns. Apart from top.cpp's loop so that the layout is tested on any figures.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace stoker::ctl {

// One frame; every line is at most 80 columns, whatever the figures and names in `status`.
std::string render_top_frame(const nlohmann::json& status);

}  // namespace stoker::ctl
