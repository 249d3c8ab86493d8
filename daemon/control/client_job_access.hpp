// Who may use a client-defined job. Such a job reads what its defining user could read
// (source/read_access.hpp), so only that uid (and stokerd's own user, and root) may consume
// it or list its samples; asked by the handshake (sessions) and the `samples` command.
#pragma once

#include <cstdint>

#include "control/forward.hpp"
#include "base/status.hpp"

namespace stoker::control {

// ok when the peer `peer_uid` may use `job`; else why not (a message for that client).
base::Status client_job_access(const jobs::JobTable& jobs, std::uint32_t peer_uid, const job::Job* job);

}  // namespace stoker::control
