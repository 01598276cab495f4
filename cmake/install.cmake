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

set(REWIND_INSTALL_TARGETS rewind_base rewind_kernels rewind_models rewind_grammar rewind_runtime rewind_speculate rewind_library)
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
# The installed API: what a decoding program calls (model, cache, context, sampling, generation,
# the verification core, sessions, guess sources, decoders, grammars and guidance-style programs,
# errors, the C API) and the headers
# those include. Kernel front ends and bodies, CUDA headers, GGUF writing and test helpers stay in
# the build tree (apps and tests reach them there). tests/consumer/check.sh compiles every
# installed header on its own, so a header that comes to include one left out fails CI.
set(REWIND_INSTALLED_HEADERS
  base/include/rewind/error.h
  base/include/rewind/hash.h
  kernels/include/rewind/kernels/dtype.h
  kernels/include/rewind/kernels/simd.h
  kernels/include/rewind/kernels/thread_pool.h
  grammar/include/rewind/grammar/gbnf.h
  grammar/include/rewind/grammar/json_schema.h
  grammar/include/rewind/grammar/matcher.h
  grammar/include/rewind/grammar/regex.h
  grammar/include/rewind/grammar/token_mask.h
  models/include/rewind/arch.h
  models/include/rewind/chat.h
  models/include/rewind/gguf.h
  models/include/rewind/llama_model.h
  models/include/rewind/tokenizer.h
  runtime/include/rewind/chat_session.h
  runtime/include/rewind/constraint.h
  runtime/include/rewind/context.h
  runtime/include/rewind/decode_state.h
  runtime/include/rewind/device.h
  runtime/include/rewind/generate.h
  runtime/include/rewind/kv_cache.h
  runtime/include/rewind/logprobs.h
  runtime/include/rewind/model.h
  runtime/include/rewind/sampler.h
  runtime/include/rewind/session.h
  speculate/include/rewind/rewind.h
  speculate/include/rewind/speculate/batch_decoder.h
  speculate/include/rewind/speculate/composite_source.h
  speculate/include/rewind/speculate/constraint_compiler.h
  speculate/include/rewind/speculate/decoder.h
  speculate/include/rewind/speculate/draft_source.h
  speculate/include/rewind/speculate/forced_source.h
  speculate/include/rewind/speculate/grammar_constraint.h
  speculate/include/rewind/speculate/guess_source.h
  speculate/include/rewind/speculate/ngram_source.h
  speculate/include/rewind/speculate/program.h
  speculate/include/rewind/speculate/reference_source.h
  speculate/include/rewind/speculate/source_factory.h
  speculate/include/rewind/speculate/speculative_session.h
  speculate/include/rewind/speculate/suffix_source.h
  speculate/include/rewind/speculate/token_index.h)
foreach(h IN LISTS REWIND_INSTALLED_HEADERS)
  # The path below <layer>/include/ is the include path users write.
  string(REGEX REPLACE "^[a-z]+/include/" "" rel "${h}")
  get_filename_component(dir "${rel}" DIRECTORY)
  install(FILES ${PROJECT_SOURCE_DIR}/${h} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/${dir})
endforeach()
if(TARGET rewind_c)
  install(FILES ${PROJECT_SOURCE_DIR}/capi/include/rewind_c.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
endif()
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
set(REWIND_PC_LIBS "-lrewind_speculate -lrewind_runtime -lrewind_grammar -lrewind_models -lrewind_kernels")
if(REWIND_HAVE_CUDA)
  set(REWIND_PC_CFLAGS "-DREWIND_HAVE_CUDA=1")
  string(APPEND REWIND_PC_LIBS " -lrewind_kernels_cuda -L${CUDAToolkit_LIBRARY_DIR} -lcublas -lcudart")
endif()
# The prefix is found from the .pc file's own place, so --install --prefix P anywhere works.
file(RELATIVE_PATH REWIND_PC_UP /root/${CMAKE_INSTALL_LIBDIR}/pkgconfig /root)
configure_file(${PROJECT_SOURCE_DIR}/cmake/rewind.pc.in ${PROJECT_BINARY_DIR}/rewind.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/rewind.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
