# Installation and packaging: `cmake --install build --prefix P` puts the static libraries, the
# public headers (with the generated rewind/version.h), the C API's shared library and its Python
# module, and the CLI (apps/CMakeLists.txt) under P, and a CMake package
# (find_package(rewind CONFIG) -> rewind::rewind) and rewind.pc beside the libraries.
include(CMakePackageConfigHelpers)

# rewind::rewind: everything a decoding program links (guess sources and the decoder, the
# runtime, models, kernels) with their usage requirements. Nothing of tests, CLI11 or JSON.
add_library(rewind_library INTERFACE)
target_link_libraries(rewind_library INTERFACE rewind_speculate)
target_compile_features(rewind_library INTERFACE cxx_std_20)
set_target_properties(rewind_library PROPERTIES EXPORT_NAME rewind)
add_library(rewind::rewind ALIAS rewind_library)

set(REWIND_INSTALL_TARGETS rewind_kernels rewind_models rewind_runtime rewind_speculate rewind_library)
if(REWIND_HAVE_CUDA)
  list(APPEND REWIND_INSTALL_TARGETS rewind_kernels_cuda)
endif()
if(TARGET rewind_c)
  list(APPEND REWIND_INSTALL_TARGETS rewind_c)
endif()
set(REWIND_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/rewind)

install(TARGETS ${REWIND_INSTALL_TARGETS} EXPORT rewindTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
# Public headers only: private ones live in */src.
foreach(dir kernels/include models/include runtime/include speculate/include capi/include)
  if(EXISTS ${PROJECT_SOURCE_DIR}/${dir})
    install(DIRECTORY ${PROJECT_SOURCE_DIR}/${dir}/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
            FILES_MATCHING PATTERN "*.h")
  endif()
endforeach()
install(FILES ${REWIND_GENERATED_INCLUDE_DIR}/rewind/version.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/rewind)
# The Python module (ctypes over librewind_c.so) two levels below the library, where it looks
# for it whatever LIBDIR is (lib, lib64, lib/<multiarch>): PYTHONPATH=P/LIBDIR/rewind/python.
if(TARGET rewind_c)
  install(FILES ${PROJECT_SOURCE_DIR}/apps/python/rewind.py DESTINATION ${CMAKE_INSTALL_LIBDIR}/rewind/python)
endif()

install(EXPORT rewindTargets NAMESPACE rewind:: FILE rewindTargets.cmake DESTINATION ${REWIND_CMAKE_DIR})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/rewindConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/rewindConfig.cmake INSTALL_DESTINATION ${REWIND_CMAKE_DIR})
# 0.x: only the same minor version is compatible.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/rewindConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/rewindConfig.cmake ${PROJECT_BINARY_DIR}/rewindConfigVersion.cmake
        DESTINATION ${REWIND_CMAKE_DIR})

# pkg-config. The libraries are static, so their dependencies go into Libs / Requires.
set(REWIND_PC_CFLAGS "")
set(REWIND_PC_LIBS "-lrewind_speculate -lrewind_runtime -lrewind_models -lrewind_kernels")
if(REWIND_HAVE_CUDA)
  set(REWIND_PC_CFLAGS "-DREWIND_HAVE_CUDA=1")
  string(APPEND REWIND_PC_LIBS " -lrewind_kernels_cuda -L${CUDAToolkit_LIBRARY_DIR} -lcublas -lcudart")
endif()
# The prefix is found from the .pc file's own place, so --install --prefix P anywhere works.
file(RELATIVE_PATH REWIND_PC_UP /root/${CMAKE_INSTALL_LIBDIR}/pkgconfig /root)
configure_file(${PROJECT_SOURCE_DIR}/cmake/rewind.pc.in ${PROJECT_BINARY_DIR}/rewind.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/rewind.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
