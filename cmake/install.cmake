# Installs libgpumem, its headers, a relocatable CMake package (gpumem-config.cmake finds CUDA and
# CCCL where the package is used; no path of this machine is written into it) and a pkg-config
# file (gpumem.pc; its CUDA folders are variables that pkg-config --define-variable can change).
include(CMakePackageConfigHelpers)

install(TARGETS gpumem gpumem_simulated gpumem_spec gpumem_replay gpumem_all
        EXPORT gpumem-targets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(DIRECTORY include/gpumem DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT gpumem-targets NAMESPACE gpumem:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/gpumem)

# The CCCL version compiled against (gpumem-config.cmake checks the consumer's has the same
# major.minor): CCCL_VERSION is MMMmmmppp.
file(STRINGS "${GPUMEM_CCCL_INCLUDE_DIR}/cuda/std/__cccl/version.h" GPUMEM_CCCL_BUILT
     REGEX "^#define CCCL_VERSION [0-9]+")
string(REGEX REPLACE ".* ([0-9]+).*" "\\1" GPUMEM_CCCL_BUILT "${GPUMEM_CCCL_BUILT}")
math(EXPR GPUMEM_CCCL_MINOR_BUILT "${GPUMEM_CCCL_BUILT} / 1000")
configure_package_config_file(cmake/gpumem-config.cmake.in
  ${PROJECT_BINARY_DIR}/gpumem-config.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/gpumem)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/gpumem-config-version.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/gpumem-config.cmake
              ${PROJECT_BINARY_DIR}/gpumem-config-version.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/gpumem)
install(FILES cmake/cuda_root.cmake RENAME gpumem-cuda-root.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/gpumem)

# pkg-config: the defaults of the CUDA variables are this build's toolkit. Libs names the four
# libraries, the core last (a static link resolves left to right), as gpumem::gpumem does.
set(GPUMEM_PC_PARTS "-lgpumem_replay -lgpumem_spec -lgpumem_simulated")
set(GPUMEM_PC_CUDA_LIBDIR ${CUDAToolkit_LIBRARY_DIR})
list(GET CUDAToolkit_INCLUDE_DIRS 0 GPUMEM_PC_CUDA_INCLUDEDIR)
set(GPUMEM_PC_CCCL_INCLUDEDIR ${GPUMEM_CCCL_INCLUDE_DIR})
if(GPUMEM_BUILD_SHARED)
  set(GPUMEM_PC_LIBS "-L\${libdir} ${GPUMEM_PC_PARTS} -lgpumem -L\${cuda_libdir} -lcudart")
  set(GPUMEM_PC_LIBS_PRIVATE "-lpthread -ldl")
else()
  set(GPUMEM_PC_LIBS "-L\${libdir} ${GPUMEM_PC_PARTS} -lgpumem -L\${cuda_libdir} -lcudart_static -lpthread -ldl -lrt")
  set(GPUMEM_PC_LIBS_PRIVATE "")
endif()
configure_file(cmake/gpumem.pc.in ${PROJECT_BINARY_DIR}/gpumem.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/gpumem.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
