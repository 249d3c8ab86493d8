# Remote workers (issue #27), built only with gRPC/protobuf/zstd (cmake/remote.cmake): the
# worker's stream handling without transport, the shared protocol helpers, and the `remote:`
# job key.
if(STOKER_HAVE_REMOTE)
  stoker_add_test(remote_session_test LABEL unit
    SOURCES unit/remote_session_test.cpp
    LIBS stoker_remote_worker)
  # Issue #36: the GPU node's hand parser of a worker's Reply (daemon/remote/reply_view.hpp)
  # against protobuf's, and against malformed and mutated messages; and protocol 1.5's split
  # results frames on a loopback connection (split_frames_test.cpp: one wake-up a frame with
  # the low-water mark, a frame that stalls or is cut, the mark put back, the lies); and what
  # held a sender back (send_limits_test.cpp, remote.compression auto). One
  # program, two sources: a test program more costs every tier a link against gRPC.
  stoker_add_test(remote_reply_view_test LABEL unit
    SOURCES unit/remote_reply_view_test.cpp unit/split_frames_test.cpp unit/send_limits_test.cpp
    LIBS stoker_remote_worker)
  stoker_add_test(remote_config_test LABEL unit
    SOURCES unit/remote_config_test.cpp
    LIBS stoker_config)
  # Integration tier, security (issue #34): a GPU node's stokerd against this test's own lying
  # worker (a gRPC server of the worker protocol that spoils its answers): bad-file verdicts,
  # swapped ids, swapped or flipped pixels, answers 2.5 s late. Not in the TSan build: the lying
  # worker runs Debian's uninstrumented gRPC inside the test process, whose hand-offs TSan
  # cannot see (remote_under_tsan.sh suppresses them for stokerd; not yet for this binary).
  if(NOT STOKER_TSAN)
    stoker_add_test(remote_lying_worker_test LABEL integration
      SOURCES integration/remote_lying_worker_test.cpp
      LIBS stoker_daemon_fixture stoker::client stoker_remote_worker)
    add_dependencies(remote_lying_worker_test stokerd stokerctl)
    # Issue #34, A4: streams without an Open, or with a wrong token, against the product's
    # WorkerServer in this process (its thread count read from /proc/self/status); issue #36:
    # its results linger into few messages.
    stoker_add_test(remote_worker_limits_test LABEL integration
      SOURCES integration/remote_worker_limits_test.cpp
      LIBS stoker_remote_worker)
    # Issue #36: the results listener against greetings a hostile peer would send, beside a
    # stream that binds and is served there; and (protocol 1.4) the items sent on the bound
    # connection. One program, two sources sharing tests/support/results_channel_peer.hpp.
    stoker_add_test(remote_results_channel_test LABEL integration
      SOURCES integration/remote_results_channel_test.cpp integration/remote_items_channel_test.cpp
      LIBS stoker_remote_worker)
  endif()
endif()
