// Forward declarations of the classes control's headers pass by reference or pointer (the
// <iosfwd> habit): one place instead of the same block at the top of every control header,
// and no header includes another wing's full definition just to name a type.
#pragma once

namespace stoker::job {
class Job;
}  // namespace stoker::job
namespace stoker::jobs {
class JobLoader;
class JobTable;
struct LoadResult;
}  // namespace stoker::jobs
namespace stoker::delivery {
class DeviceDelivery;
class DeviceRing;
class PeerProcess;
}  // namespace stoker::delivery

namespace stoker::control {
class Reloads;
struct Session;
class Sessions;
class Telemetry;
struct JobSources;
}  // namespace stoker::control
