/* Storage latency for the fault tier and scripts/bench-coldread.py, preloaded into stokerd:
 *   STOKER_SLOW_READ="SUBSTRING:MICROSECONDS"
 * makes every pread()/read() of a file whose path contains SUBSTRING sleep MICROSECONDS first,
 * as a read that misses the page cache on a disk or network file system waits for the device.
 * Reads in different threads sleep at the same time (a storage with a deep queue: NFS, a
 * cloud disk), so reads issued ahead overlap their waits and one thread's reads do not.
 * Other descriptors (sockets, the segment, pipes) go straight to libc.
 *   STOKER_SLOW_READ_GATE=PATH
 * moreover holds each such read until PATH exists: a test decides when a slow load ends
 * instead of guessing how long its other steps take on a loaded machine. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

/* Set once (pthread_once) before any wrapped call goes on: read-only afterwards, so the
 * wrappers may run in any number of threads (the ThreadSanitizer tier preloads this too). */
static char pattern[256];
static char gate[4096];
static long delay_us;
static ssize_t (*real_pread)(int, void*, size_t, off_t);
static ssize_t (*real_pread64)(int, void*, size_t, off_t);
static ssize_t (*real_read)(int, void*, size_t);
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void init(void) {
  real_pread = (ssize_t(*)(int, void*, size_t, off_t))dlsym(RTLD_NEXT, "pread");
  real_pread64 = (ssize_t(*)(int, void*, size_t, off_t))dlsym(RTLD_NEXT, "pread64");
  real_read = (ssize_t(*)(int, void*, size_t))dlsym(RTLD_NEXT, "read");
  const char* spec = getenv("STOKER_SLOW_READ");
  if (spec != NULL) {
    const char* colon = strrchr(spec, ':');
    if (colon != NULL && (size_t)(colon - spec) < sizeof pattern) {
      memcpy(pattern, spec, (size_t)(colon - spec));
      delay_us = atol(colon + 1);
    }
  }
  const char* g = getenv("STOKER_SLOW_READ_GATE");
  if (g != NULL && strlen(g) < sizeof gate) strcpy(gate, g);
}

static void maybe_wait(int fd) {
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
  while (gate[0] != '\0' && access(gate, F_OK) != 0) {
    struct timespec poll = {0, 10 * 1000 * 1000};
    nanosleep(&poll, NULL);
  }
}

ssize_t pread(int fd, void* buf, size_t count, off_t offset) {
  pthread_once(&once, init);
  maybe_wait(fd);
  return real_pread(fd, buf, count, offset);
}

ssize_t pread64(int fd, void* buf, size_t count, off_t offset) {
  pthread_once(&once, init);
  maybe_wait(fd);
  return real_pread64(fd, buf, count, offset);
}

ssize_t read(int fd, void* buf, size_t count) {
  pthread_once(&once, init);
  maybe_wait(fd);
  return real_read(fd, buf, count);
}
