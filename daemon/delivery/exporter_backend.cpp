// stokerd's choice of device backend: STOKER_DEVICE_BACKEND, with the normalize kernel in its `cuda`.
#include "device/device_backend.hpp"
#include "device/hostsim_objects.hpp"

namespace stoker::device {

BackendResult make_exporter_backend() {
  BackendResult made = make_backend(&make_cuda_daemon_backend);
  if (!made) return made;
  std::unique_ptr<Backend> b = std::move(made).value();
  // A killed stokerd's simulated allocations are removed like its stale segments.
  if (b->kind() == BackendKind::kHostSim) hostsim::remove_stale_objects();
  return b;
}

}  // namespace stoker::device
