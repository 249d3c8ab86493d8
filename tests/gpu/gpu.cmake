# gpu tier: built with the CUDA parts; exits 77 without a device, which ctest shows as Skipped.
if(STOKER_HAVE_CUDA)
  add_executable(gpu_test gpu/gpu_test.cu)
  target_link_libraries(gpu_test PRIVATE stoker_cuda_exporter stoker_cuda_importer CUDA::cudart)
  target_include_directories(gpu_test PRIVATE ${PROJECT_SOURCE_DIR}/daemon ${PROJECT_SOURCE_DIR}/client)
  set_target_properties(gpu_test PROPERTIES CUDA_ARCHITECTURES "${STOKER_CUDA_ARCHITECTURES}")
  target_sources(gpu_test PRIVATE ${PROJECT_SOURCE_DIR}/daemon/cuda/normalize_kernel.cu)
  add_test(NAME gpu_ipc_and_normalize COMMAND gpu_test)
  set_tests_properties(gpu_ipc_and_normalize PROPERTIES LABELS gpu SKIP_RETURN_CODE 77 TIMEOUT 300)
else()
  # Without the CUDA toolkit the tier still reports itself, as skipped.
  add_test(NAME gpu_ipc_and_normalize COMMAND ${CMAKE_COMMAND} -E echo "SKIP: built without CUDA")
  set_tests_properties(gpu_ipc_and_normalize PROPERTIES LABELS gpu DISABLED TRUE)
endif()
