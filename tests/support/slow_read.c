/* Storage latency for the fault tier and scripts/bench-coldread.py, preloaded into stokerd:
 *   STOKER_SLOW_READ="SUBSTRING:MICROSECONDS"
 * makes every pread()/read() of a file whose path contains SUBSTRING sleep MICROSECONDS first,
 * as a read that misses the page cache on a disk or network file system waits for the device.
 * Reads in different threads sleep at the same time (a storage with a deep queue: NFS, a
 * cloud disk), so reads issued ahead overlap their waits and one thread's reads do not.
 * Other descriptors (sockets, the segment, pipes) go straight to libc. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

static char pattern[256];
static long delay_us = -1; /* -1: not parsed yet */

static void parse(void) {
  const char* spec = getenv("STOKER_SLOW_READ");
  long us = 0;
  if (spec != NULL) {
    const char* colon = strrchr(spec, ':');
    if (colon != NULL && (size_t)(colon - spec) < sizeof pattern) {
      memcpy(pattern, spec, (size_t)(colon - spec));
      us = atol(colon + 1);
    }
  }
  __atomic_store_n(&delay_us, us, __ATOMIC_RELEASE);
}

static void maybe_wait(int fd) {
  if (__atomic_load_n(&delay_us, __ATOMIC_ACQUIRE) < 0) parse();
  if (delay_us <= 0 || pattern[0] == '\0') return;
  char link[64], path[4096];
  snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
  const ssize_t n = readlink(link, path, sizeof path - 1);
  if (n <= 0) return;
  path[n] = '\0';
  if (strstr(path, pattern) == NULL) return;
  struct timespec ts = {delay_us / 1000000, (delay_us % 1000000) * 1000};
  while (nanosleep(&ts, &ts) != 0) {
  }
}

ssize_t pread(int fd, void* buf, size_t count, off_t offset) {
  static ssize_t (*real)(int, void*, size_t, off_t);
  if (real == NULL) real = (ssize_t(*)(int, void*, size_t, off_t))dlsym(RTLD_NEXT, "pread");
  maybe_wait(fd);
  return real(fd, buf, count, offset);
}

ssize_t pread64(int fd, void* buf, size_t count, off_t offset) {
  static ssize_t (*real)(int, void*, size_t, off_t);
  if (real == NULL) real = (ssize_t(*)(int, void*, size_t, off_t))dlsym(RTLD_NEXT, "pread64");
  maybe_wait(fd);
  return real(fd, buf, count, offset);
}

ssize_t read(int fd, void* buf, size_t count) {
  static ssize_t (*real)(int, void*, size_t);
  if (real == NULL) real = (ssize_t(*)(int, void*, size_t))dlsym(RTLD_NEXT, "read");
  maybe_wait(fd);
  return real(fd, buf, count);
}
