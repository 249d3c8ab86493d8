// Whether a TCP peer is reading: remote.compression auto (worker_stream.hpp). A worker's writes
// of results that wait tell it the link cannot keep up, unless it is the node that is not
// reading: then the node's advertised receive window is closed, and compressing would only add
// decompression to a node that is already behind.
#pragma once

namespace stoker::remote {

// The window `fd`'s peer advertises is (nearly) closed: under kClosedWindowBytes, so its receive
// buffer is full of what it has not read. False where the kernel does not say (not TCP, or a
// kernel without tcp_info's tcpi_snd_wnd).
bool peer_window_closed(int fd);

inline constexpr unsigned kClosedWindowBytes = 64u << 10;

}  // namespace stoker::remote
