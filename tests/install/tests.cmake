# Included by tests/CMakeLists.txt: a test (label cpu) that installs this build into a temporary
# prefix and builds and runs the client of tests/install/ against it with find_package(moekit).
set(_moekit_install_work ${PROJECT_BINARY_DIR}/tests/install_test)
set(_moekit_install_args
  -DMOEKIT_BUILD_DIR=${PROJECT_BINARY_DIR}
  -DCLIENT_SOURCE_DIR=${CMAKE_CURRENT_LIST_DIR}
  -DWORK_DIR=${_moekit_install_work}
  "-DGENERATOR=${CMAKE_GENERATOR}"
  -DBUILD_TYPE=$<CONFIG>
  -DCXX_COMPILER=${CMAKE_CXX_COMPILER})
if(MOEKIT_WITH_CUDA AND CUDAToolkit_BIN_DIR)
  get_filename_component(_moekit_cuda_root ${CUDAToolkit_BIN_DIR} DIRECTORY)
  list(APPEND _moekit_install_args -DCUDA_ROOT=${_moekit_cuda_root})
endif()
add_test(NAME Install.ClientBuildsAgainstInstalledMoekit
         COMMAND ${CMAKE_COMMAND} ${_moekit_install_args} -P ${CMAKE_CURRENT_LIST_DIR}/run_install_test.cmake)
set_tests_properties(Install.ClientBuildsAgainstInstalledMoekit PROPERTIES LABELS "cpu;install" TIMEOUT 900)
