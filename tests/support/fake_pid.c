/* Another PID namespace, as seen from outside, preloaded into stokerd:
 *   STOKER_FAKE_PID=N
 * makes getpid() return N. stokerd in its own PID namespace (PID 1 of a trainer pod's
 * container) reports a number that names some other process to a stokerctl outside it; this
 * gives the same mismatch without root or namespaces, pointing at a process the test owns.
 * Unset or empty: the real pid. */
#define _GNU_SOURCE
#include <stdlib.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <unistd.h>

pid_t getpid(void) {
  const char* v = getenv("STOKER_FAKE_PID");
  if (v != NULL && v[0] != '\0') return (pid_t)atol(v);
  return (pid_t)syscall(SYS_getpid);
}
