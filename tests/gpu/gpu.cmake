# gpu tier (label gpu): the `cuda` device backend on a real GPU. The tests build in every build
# (the backend is the driver API loaded at run time; no toolkit needed); without a usable
# device each case exits 77, which ctest reports as "Skipped" (SKIP_RETURN_CODE), never as
# passed. scripts/gpu-check.sh sets STOKER_REQUIRE_GPU=1: a missing device fails there.
# Also here: the no-driver fallback (label unit) and the GPU benchmark.
set(_gpu_dir ${CMAKE_CURRENT_LIST_DIR})

add_executable(cuda_backend_test ${_gpu_dir}/cuda_backend_test.cpp)
target_link_libraries(cuda_backend_test PRIVATE stoker_catch_main stoker_cuda_backend)
stoker_catch_pch(cuda_backend_test)
target_include_directories(cuda_backend_test PRIVATE ${_gpu_dir})
catch_discover_tests(cuda_backend_test EXTRA_ARGS -w NoTests PROPERTIES LABELS gpu SKIP_RETURN_CODE 77 TIMEOUT 300)

# The trainer's side of the IPC case: a separate program, through libstoker's backend.
add_executable(stoker_gpu_ipc_peer ${_gpu_dir}/ipc_peer.cpp)
target_link_libraries(stoker_gpu_ipc_peer PRIVATE stoker_device)
target_include_directories(stoker_gpu_ipc_peer PRIVATE ${_gpu_dir})
add_dependencies(cuda_backend_test stoker_gpu_ipc_peer stoker_cuda_emu)

# The same cases over the CUDA driver emulation (tests/cuda_emu), where a skip is a failure;
# the normalize case only where stokerd's kernel image exists (built with nvcc).
set(_emu_spec)
if(NOT STOKER_HAVE_CUDA)
  set(_emu_spec TEST_SPEC "~normalize*")
endif()
catch_discover_tests(cuda_backend_test TEST_PREFIX "cuda-emu/" ${_emu_spec} EXTRA_ARGS -w NoTests --use-colour no
  TEST_LIST cuda_backend_test_EMU PROPERTIES TIMEOUT 300)
stoker_discovered_tests_properties(cuda_backend_test_EMU LABELS unit device-emu
  ENVIRONMENT ${STOKER_CUDA_EMU_ENV} STOKER_REQUIRE_GPU=1)

stoker_add_test(cuda_fallback_test LABEL unit SOURCES ${_gpu_dir}/cuda_fallback_test.cpp
  LIBS stoker_cuda_backend stoker_delivery)
if(STOKER_HAVE_CUDA)
  target_compile_definitions(cuda_fallback_test PRIVATE STOKER_HAVE_NORMALIZE_FATBIN)
endif()

# GPU benchmark run by scripts/gpu-check.sh (prints figures; exit 77 without a GPU).
add_executable(stoker_bench_gpu ${_gpu_dir}/bench_gpu.cpp)
target_link_libraries(stoker_bench_gpu PRIVATE stoker_cuda_backend rt)
target_include_directories(stoker_bench_gpu PRIVATE ${_gpu_dir})

# libstoker and stokerd link no CUDA library (the driver is dlopen'ed; no cudart anywhere), so
# a trainer's torch brings the only CUDA runtime in its process.
foreach(t stoker_client stokerd)
  add_test(NAME ${t}_links_no_cuda_library
    COMMAND sh -c "readelf -d \"$1\" | grep NEEDED; ! readelf -d \"$1\" | grep -Ei 'NEEDED.*(cuda|cudart|nvidia)' && ! nm -D \"$1\" | grep -E ' U cuda'" sh $<TARGET_FILE:${t}>)
  set_tests_properties(${t}_links_no_cuda_library PROPERTIES LABELS unit)
endforeach()
