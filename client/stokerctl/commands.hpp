#pragma once

namespace stoker::ctl {

int consume_main(int argc, char** argv);  // argv[0] == "consume"
int status_main(int argc, char** argv);   // argv[0] == "status"
int drain_main(int argc, char** argv);    // argv[0] == "drain"
int reload_main(int argc, char** argv);   // argv[0] == "reload"
int top_main(int argc, char** argv);      // argv[0] == "top" (top.cpp)
int preview_main(int argc, char** argv);  // argv[0] == "preview" (preview.cpp)

}  // namespace stoker::ctl
