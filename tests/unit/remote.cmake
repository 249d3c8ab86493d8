# Remote workers (issue #27), built only with gRPC/protobuf/zstd (cmake/remote.cmake): the
# worker's stream handling without transport, the shared protocol helpers, and the `remote:`
# job key.
if(STOKER_HAVE_REMOTE)
  stoker_add_test(remote_session_test LABEL unit
    SOURCES unit/remote_session_test.cpp
    LIBS stoker_remote_worker)
  stoker_add_test(remote_config_test LABEL unit
    SOURCES unit/remote_config_test.cpp
    LIBS stoker_config)
endif()
