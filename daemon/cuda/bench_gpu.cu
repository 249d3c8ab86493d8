// stoker_bench_gpu: the GPU figures issue #5 asks for, side by side in one run.
//  1. H2D throughput of the batch path (registered shared memory -> device slot, async on a
//     stream + IPC event record) as a ratio of plain pinned cudaMemcpy (target >= 0.9);
//  2. normalize-kernel bandwidth (uint8 in + float out) as a ratio of a device-to-device copy
//     (target >= 0.8);
//  3. "batch ready" -> device pointer usable in another process (IPC event wait through a
//     cached handle, plus the wake-up over a socket pair), median microseconds (target <= 50).
// Exit code 77 when no device is present (reported as skipped).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

#include <cuda_runtime.h>

#include "cuda/normalize_kernel.cuh"

using Clock = std::chrono::steady_clock;

#define CK(x)                                                                        \
  do {                                                                               \
    cudaError_t e_ = (x);                                                            \
    if (e_ != cudaSuccess) {                                                         \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      return 1;                                                                      \
    }                                                                                \
  } while (0)

static double seconds(Clock::time_point a) { return std::chrono::duration<double>(Clock::now() - a).count(); }

int main() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    std::printf("SKIP: no CUDA device\n");
    return 77;
  }
  cudaDeviceProp prop{};
  CK(cudaGetDeviceProperties(&prop, 0));
  std::printf("gpu %s\n", prop.name);
  const std::size_t batch = 256ull * 3 * 224 * 224;  // one uint8 ImageNet batch, 38.5 MB
  const int reps = 50;

  // 1. Plain pinned copy vs the batch path on registered (mmap'ed, shared) memory.
  void* pinned = nullptr;
  void* dev = nullptr;
  CK(cudaMallocHost(&pinned, batch));
  CK(cudaMalloc(&dev, batch * 4));
  std::memset(pinned, 1, batch);
  CK(cudaMemcpy(dev, pinned, batch, cudaMemcpyHostToDevice));
  auto t = Clock::now();
  for (int i = 0; i < reps; ++i) CK(cudaMemcpy(dev, pinned, batch, cudaMemcpyHostToDevice));
  const double plain = batch * reps / seconds(t) / 1e9;

  void* shm = mmap(nullptr, batch, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  std::memset(shm, 1, batch);
  CK(cudaHostRegister(shm, batch, cudaHostRegisterPortable));
  cudaStream_t stream;
  CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaEvent_t ev;
  CK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming | cudaEventInterprocess));
  t = Clock::now();
  for (int i = 0; i < reps; ++i) {
    CK(cudaMemcpyAsync(dev, shm, batch, cudaMemcpyHostToDevice, stream));
    CK(cudaEventRecord(ev, stream));
  }
  CK(cudaStreamSynchronize(stream));
  const double path = batch * reps / seconds(t) / 1e9;
  std::printf("h2d_plain_pinned_GBps %.2f\nh2d_batch_path_GBps %.2f\nh2d_ratio %.3f (target >= 0.9)\n", plain,
              path, path / plain);

  // 2. Normalize kernel (reads 1 B, writes 4 B per element) vs a D2D copy of the output size.
  void* dev_in = nullptr;
  CK(cudaMalloc(&dev_in, batch));
  CK(cudaMemset(dev_in, 7, batch));
  const float mean[3] = {0.485f, 0.456f, 0.406f}, inv_std[3] = {1 / 0.229f, 1 / 0.224f, 1 / 0.225f};
  CK(stoker::cuda::launch_normalize(static_cast<std::uint8_t*>(dev_in), dev, 224 * 224, 256, false, false, mean,
                                    inv_std, stream));
  CK(cudaStreamSynchronize(stream));
  t = Clock::now();
  for (int i = 0; i < reps; ++i) {
    CK(stoker::cuda::launch_normalize(static_cast<std::uint8_t*>(dev_in), dev, 224 * 224, 256, false, false,
                                      mean, inv_std, stream));
  }
  CK(cudaStreamSynchronize(stream));
  const double kern = 5.0 * batch * reps / seconds(t) / 1e9;
  void* dev2 = nullptr;
  CK(cudaMalloc(&dev2, batch * 4));
  t = Clock::now();
  for (int i = 0; i < reps; ++i) CK(cudaMemcpyAsync(dev2, dev, batch * 4, cudaMemcpyDeviceToDevice, stream));
  CK(cudaStreamSynchronize(stream));
  const double d2d = 2.0 * 4 * batch * reps / seconds(t) / 1e9;
  std::printf("normalize_GBps %.1f\nd2d_copy_GBps %.1f\nnormalize_ratio %.3f (target >= 0.8)\n", kern, d2d,
              kern / d2d);

  // 3. Ready -> usable in another process: the parent records the event and wakes the child
  //    over a socket pair (as stokerd's control socket does); the child waits on the event
  //    through its cached IPC handle and reports the time.
  cudaIpcEventHandle_t eh;
  cudaIpcMemHandle_t mh;
  CK(cudaIpcGetEventHandle(&eh, ev));
  CK(cudaIpcGetMemHandle(&mh, dev));
  int sv[2];
  socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sv);
  const int iters = 1000;
  const pid_t child = fork();
  if (child == 0) {
    cudaEvent_t cev;
    void* p = nullptr;
    cudaStream_t s;
    if (cudaIpcOpenEventHandle(&cev, eh) != cudaSuccess || cudaIpcOpenMemHandle(&p, mh, cudaIpcMemLazyEnablePeerAccess) != cudaSuccess ||
        cudaStreamCreate(&s) != cudaSuccess) {
      _exit(3);
    }
    std::vector<double> us;
    for (int i = 0; i < iters; ++i) {
      long long sent_ns = 0;
      if (recv(sv[1], &sent_ns, sizeof sent_ns, 0) != sizeof sent_ns) _exit(4);
      cudaStreamWaitEvent(s, cev, 0);
      const long long now = std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
      us.push_back((now - sent_ns) / 1000.0);
      char ack = 1;
      send(sv[1], &ack, 1, 0);
    }
    std::sort(us.begin(), us.end());
    std::printf("ready_to_tensor_median_us %.1f\nready_to_tensor_p99_us %.1f (target median <= 50)\n",
                us[us.size() / 2], us[us.size() * 99 / 100]);
    std::fflush(stdout);
    _exit(0);
  }
  for (int i = 0; i < iters; ++i) {
    CK(cudaMemcpyAsync(dev, shm, 4096, cudaMemcpyHostToDevice, stream));
    CK(cudaEventRecord(ev, stream));
    const long long now = std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
    send(sv[0], &now, sizeof now, 0);
    char ack;
    if (recv(sv[0], &ack, 1, 0) != 1) break;
  }
  int status = 0;
  waitpid(child, &status, 0);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
}
