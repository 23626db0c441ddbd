# tests/fuzz: one libFuzzer target per parser that untrusted bytes reach.
# Each target is tests/fuzz/fuzz_<name>.c (LLVMFuzzerTestOneInput) plus the
# program code it calls; its seeds are tests/fuzz/corpus/<name>/ and the
# inputs of past findings tests/fuzz/regressions/<name>/.
#
# Every build (any compiler) links each target with replay_main.c as the
# ctest fuzz_<name>_replay, which replays its seeds and regressions, so the
# normal and ASan suites check every harness. With SBX_FUZZ=ON (clang, set
# up by tests/fuzz/run in build-fuzz/) each target is also linked with
# libFuzzer as fuzz_<name>.
option(SBX_FUZZ "Also link the fuzz targets with libFuzzer (clang)" OFF)

# The wire fixture corpus seeds fuzz_wire: the repository's own copy (the
# tests read the same one, SBX_FIXTURES_DIR in tests/CMakeLists.txt).
set(SBX_FUZZ_WIRE_FIXTURES ${SBX_FIXTURES_DIR})

pkg_check_modules(FUZZ_EVENT REQUIRED IMPORTED_TARGET libevent)
pkg_check_modules(FUZZ_ARCHIVE REQUIRED IMPORTED_TARGET libarchive)

set(SBX_FUZZ_DIR ${CMAKE_CURRENT_LIST_DIR})

# sbx_fuzz_target(name SOURCES <program sources> INCLUDE <dirs> LIBS <libs>
#                 [REPLAY_ARGS <extra replay arguments before --raw>])
function(sbx_fuzz_target name)
  cmake_parse_arguments(F "" "" "SOURCES;INCLUDE;LIBS;REPLAY_ARGS" ${ARGN})
  set(variants ${name}_replay)
  if(SBX_FUZZ)
    list(APPEND variants ${name})
  endif()
  foreach(exe ${variants})
    if(exe STREQUAL name)
      add_executable(fuzz_${exe} ${SBX_FUZZ_DIR}/fuzz_${name}.c ${F_SOURCES})
      target_link_options(fuzz_${exe} PRIVATE -fsanitize=fuzzer)
    else()
      add_executable(fuzz_${exe} ${SBX_FUZZ_DIR}/fuzz_${name}.c ${SBX_FUZZ_DIR}/replay_main.c ${F_SOURCES})
    endif()
    # libsandbox/ for its internal utility layer ("util/util.h") and private headers.
    target_include_directories(fuzz_${exe} PRIVATE ${SBX_FUZZ_DIR} ${PROJECT_SOURCE_DIR}/libsandbox ${F_INCLUDE})
    target_link_libraries(fuzz_${exe} PRIVATE sandbox_static ${F_LIBS})
  endforeach()
  set(raw --raw)
  foreach(d corpus regressions)
    if(IS_DIRECTORY ${SBX_FUZZ_DIR}/${d}/${name})
      list(APPEND raw ${SBX_FUZZ_DIR}/${d}/${name})
    endif()
  endforeach()
  add_test(NAME fuzz_${name}_replay COMMAND fuzz_${name}_replay ${F_REPLAY_ARGS} ${raw})
  set_tests_properties(fuzz_${name}_replay PROPERTIES LABELS fuzz TIMEOUT 300)
endfunction()

set(SRC ${PROJECT_SOURCE_DIR})
# silkd wire codec: the fixtures in all 16 chunking/cap modes, then the rest
sbx_fuzz_target(wire REPLAY_ARGS ${SBX_FUZZ_WIRE_FIXTURES})
# sandboxd: request heads and bodies; the configuration file
sbx_fuzz_target(http SOURCES ${SRC}/sandboxd/http.c ${SRC}/sandboxd/http_parse.c INCLUDE ${SRC}/sandboxd LIBS PkgConfig::FUZZ_EVENT)
sbx_fuzz_target(config SOURCES ${SRC}/sandboxd/config.c ${SRC}/sandboxd/config_pools.c INCLUDE ${SRC}/sandboxd LIBS PkgConfig::JANSSON)
# sbxctl mcp: the JSON-RPC reader and the tool argument checks (sbxctl
# without its main: the verbs reach the other commands' helpers)
file(GLOB FUZZ_SBXCTL_SOURCES CONFIGURE_DEPENDS ${SRC}/sbxctl/*.c)
list(REMOVE_ITEM FUZZ_SBXCTL_SOURCES ${SRC}/sbxctl/main.c)
sbx_fuzz_target(mcp SOURCES ${FUZZ_SBXCTL_SOURCES} INCLUDE ${SRC}/sbxctl LIBS PkgConfig::JANSSON)
# silkd fs_push: tar extraction into a staging directory
sbx_fuzz_target(tar SOURCES ${SRC}/silkd/tar_extract.c ${SRC}/silkd/tarq.c INCLUDE ${SRC}/silkd
  LIBS PkgConfig::FUZZ_ARCHIVE PkgConfig::FUZZ_EVENT)
# libsandbox client: claim, redirect, node info, API error and upgrade answers
sbx_fuzz_target(client INCLUDE ${SRC}/libsandbox LIBS PkgConfig::JANSSON)
