/* Fault injection for the fault tier, preloaded into stokerd (LD_PRELOAD):
 *   STOKER_FAIL_OPEN="SUBSTRING:COUNT:ERRNO"
 * makes the first COUNT opens of a path containing SUBSTRING fail with ERRNO, as a machine
 * out of descriptors (EMFILE = 24), an NFS hiccup (EIO = 5) or a permission change (EACCES = 13)
 * would. Every other open goes to libc. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

static char pattern[256];
static atomic_int remaining = -1; /* -1: not parsed yet */
static int fail_errno;

static int should_fail(const char* path) {
  if (atomic_load(&remaining) == -1) {
    const char* spec = getenv("STOKER_FAIL_OPEN");
    int count = 0;
    if (spec != NULL) {
      const char* c1 = strchr(spec, ':');
      const char* c2 = c1 ? strchr(c1 + 1, ':') : NULL;
      if (c1 && c2 && (size_t)(c1 - spec) < sizeof pattern) {
        memcpy(pattern, spec, (size_t)(c1 - spec));
        count = atoi(c1 + 1);
        fail_errno = atoi(c2 + 1);
      }
    }
    int expected = -1;
    atomic_compare_exchange_strong(&remaining, &expected, count);
  }
  if (path == NULL || pattern[0] == '\0' || strstr(path, pattern) == NULL) return 0;
  int n = atomic_load(&remaining);
  while (n > 0) {
    if (atomic_compare_exchange_weak(&remaining, &n, n - 1)) return 1;
  }
  return 0;
}

static int forward(const char* name, const char* path, int flags, mode_t mode) {
  int (*real)(const char*, int, ...) = (int (*)(const char*, int, ...))dlsym(RTLD_NEXT, name);
  return real(path, flags, mode);
}

#define STOKER_OPEN_SHIM(name)                              \
  int name(const char* path, int flags, ...) {              \
    mode_t mode = 0;                                        \
    if (flags & (O_CREAT | __O_TMPFILE)) {                  \
      va_list ap;                                           \
      va_start(ap, flags);                                  \
      mode = va_arg(ap, mode_t);                            \
      va_end(ap);                                           \
    }                                                       \
    if (should_fail(path)) {                                \
      errno = fail_errno;                                   \
      return -1;                                            \
    }                                                       \
    return forward(#name, path, flags, mode);               \
  }

STOKER_OPEN_SHIM(open)
STOKER_OPEN_SHIM(open64)

int __open_2(const char* path, int flags) {
  if (should_fail(path)) {
    errno = fail_errno;
    return -1;
  }
  return forward("open", path, flags, 0);
}
