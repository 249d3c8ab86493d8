// `stokerctl top`'s frame: the daemon's status JSON (as `stokerctl status` prints it) drawn
// in 80 columns. Apart from top.cpp's loop so that the layout is tested on any figures.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace stoker::ctl {

// One frame; every line is at most 80 columns, whatever the figures and names in `status`.
// `previous`: the frame before's status, taken `seconds` earlier (null on the first frame):
// rates that status gives as counters (an object source's bytes and requests) are the
// difference between the two, shown as "-" without one.
std::string render_top_frame(const nlohmann::json& status, const nlohmann::json* previous = nullptr,
                             double seconds = 0);

}  // namespace stoker::ctl
