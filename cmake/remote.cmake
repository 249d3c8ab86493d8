# Remote workers need gRPC C++, protobuf and zstd (Debian: libgrpc++-dev, protobuf-compiler-grpc,
# libprotobuf-dev, protobuf-compiler, libzstd-dev; scripts/setup.sh installs them). AUTO builds
# them when found and says so when not; ON refuses to configure without them.
set(STOKER_HAVE_REMOTE OFF)
if(NOT STOKER_REMOTE STREQUAL "OFF")
  pkg_check_modules(GRPCPP IMPORTED_TARGET grpc++ protobuf)
  pkg_check_modules(ZSTD IMPORTED_TARGET libzstd)
  find_program(STOKER_PROTOC protoc)
  find_program(STOKER_GRPC_CPP_PLUGIN grpc_cpp_plugin)
  if(GRPCPP_FOUND AND ZSTD_FOUND AND STOKER_PROTOC AND STOKER_GRPC_CPP_PLUGIN)
    set(STOKER_HAVE_REMOTE ON)
  elseif(STOKER_REMOTE STREQUAL "ON")
    message(FATAL_ERROR "STOKER_REMOTE=ON needs gRPC C++, protobuf and zstd: run scripts/setup.sh "
                        "(libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler libzstd-dev)")
  else()
    message(STATUS "Remote workers: off (gRPC/protobuf/zstd not found; scripts/setup.sh installs them)")
  endif()
endif()
if(STOKER_HAVE_REMOTE)
  message(STATUS "Remote workers: on (gRPC ${GRPCPP_grpc++_VERSION})")
endif()
