# Unit tier of the running daemon's parts that need no process: the work queue's sharing.
# The log lines' function (log/log.hpp) rides in the same binary: a link less per tier.
stoker_add_test(work_queue_test LABEL unit
  SOURCES unit/work_queue_test.cpp unit/log_test.cpp
  LIBS stoker_sched stoker_log)
stoker_add_test(read_ahead_test LABEL unit
  SOURCES unit/read_ahead_test.cpp
  LIBS stoker_source)

# MixUp/CutMix on a finished batch (job/batch_mix.hpp) and its job keys.
stoker_add_test(batch_mix_test LABEL unit
  SOURCES unit/batch_mix_test.cpp
  LIBS stoker_job)

# Operations: server.metrics* keys, Prometheus text, the /metrics responder on garbage.
stoker_add_test(metrics_test LABEL unit
  SOURCES unit/metrics_test.cpp
  LIBS stoker_control)

# One stokerd per socket: the lock file's removal at exit and its race with a starting daemon.
stoker_add_test(instance_lock_test LABEL unit
  SOURCES unit/instance_lock_test.cpp
  LIBS stoker_app stoker_daemon_fixture)

# One rank's Ring (job/ring.hpp), the slot state machine, with no segment, socket or process:
# fan-out, replanning after a resume, detach, lease reclaim, drain, bad releases. The same
# binary (one link less in each build of CI) tests ShmSegment::write, the sealed memfd's
# write through its descriptor.
stoker_add_test(ring_test LABEL unit
  SOURCES unit/ring_test.cpp unit/shm_segment_test.cpp
  LIBS stoker_job)

# The decoded store's file format (store/decoded_store.hpp): reopen, checksums, torn tail,
# budget, read and write errors (issue 26).
stoker_add_test(decoded_store_test LABEL unit
  SOURCES unit/decoded_store_test.cpp
  LIBS stoker_store stoker_daemon_fixture)

# Issue #34, D1: a peer's credentials (SO_PEERCRED, SO_PEERGROUPS) taken once, at accept.
stoker_add_test(peer_credentials_test LABEL unit
  SOURCES unit/peer_credentials_test.cpp
  LIBS stoker_control)

# Issue #34, B1/B2: the store's file and folder must be the daemon's own; anything else is
# refused, never truncated.
stoker_add_test(decoded_store_trust_test LABEL unit
  SOURCES unit/decoded_store_trust_test.cpp
  LIBS stoker_store)
