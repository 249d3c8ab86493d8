// stokerctl's commands. Each file adds its subcommand to the top-level app, with its options
// bound to its own arguments, and returns what runs it (main.cpp picks the one parsed).
#pragma once

#include "cli_args.hpp"

namespace stoker::ctl {

Command add_consume(CLI::App& root);  // consume.cpp
Command add_status(CLI::App& root);   // consume.cpp
Command add_top(CLI::App& root);      // top.cpp
Command add_preview(CLI::App& root);  // preview.cpp
Command add_drain(CLI::App& root);    // jobs_cmd.cpp
Command add_reload(CLI::App& root);   // jobs_cmd.cpp
Command add_prepare(CLI::App& root);  // prepare_cmd.cpp

}  // namespace stoker::ctl
