# ../shared/fixtures beside the checkout, where CI and developers have it; overridable.
get_filename_component(_fragscope_shared "${CMAKE_SOURCE_DIR}/../shared/fixtures" ABSOLUTE)
set(FRAGSCOPE_SHARED_FIXTURES "${_fragscope_shared}" CACHE PATH "shared fixtures folder (may be absent)")

# Warnings as errors on our own code only (third-party headers come in as SYSTEM).
function(fragscope_target_warnings target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Werror -Wno-error=deprecated-declarations>)
  # GCC 12's -Wrestrict misfires inside libstdc++'s std::string at -O2/-O3 (GCC bug 105329):
  # keep it visible, but not fatal.
  if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND CMAKE_CXX_COMPILER_VERSION VERSION_LESS 13)
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Wno-error=restrict>)
  endif()
  if(FRAGSCOPE_SANITIZE)
    # GCC 12 with -fsanitize at -O2 reports maybe-uninitialized inside libstdc++'s <regex> (the
    # sanitizer's instrumentation defeats its flow analysis): visible, not fatal.
    if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND CMAKE_CXX_COMPILER_VERSION VERSION_LESS 13)
      target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Wno-error=maybe-uninitialized>)
    endif()
    target_compile_options(${target} PRIVATE -fsanitize=${FRAGSCOPE_SANITIZE} -fno-omit-frame-pointer)
    target_link_options(${target} PRIVATE -fsanitize=${FRAGSCOPE_SANITIZE})
  endif()
endfunction()

# Precompiled headers: the standard library and nlohmann/json.hpp, which most files include
# through the engine's headers (parsing json.hpp alone is ~1.2 CPU-s per file with g++ -O0), plus
# GoogleTest for the test binaries and the common Qt headers for the GUI. Targets compiled with the
# same flags share one (SHARED_AS group: the group's first target precompiles, the others reuse it),
# because precompiling costs 3-8 CPU-s a target. Default on for a plain build such as CI's clean
# one; off where a compiler launcher (ccache) is set, because ccache does not cache a file built
# with a precompiled header unless told to be sloppy.
if(CMAKE_CXX_COMPILER_LAUNCHER)
  set(_fragscope_pch_default OFF)
else()
  set(_fragscope_pch_default ON)
endif()
option(FRAGSCOPE_PCH "precompile the common headers of each library and test binary"
       ${_fragscope_pch_default})
# fragscope_precompile_headers(TARGET [SHARED_AS group] [GTEST] [QT] [QTEST]). A group's first
# target must not use AUTOMOC (CMake cannot reuse such a target's precompiled header).
function(fragscope_precompile_headers target)
  cmake_parse_arguments(ARG "GTEST;QT;QTEST" "SHARED_AS" "" ${ARGN})
  if(NOT FRAGSCOPE_PCH)
    return()
  endif()
  if(ARG_SHARED_AS)
    get_property(_owner GLOBAL PROPERTY FRAGSCOPE_PCH_OF_${ARG_SHARED_AS})
    if(_owner)
      target_precompile_headers(${target} REUSE_FROM ${_owner})
      return()
    endif()
    set_property(GLOBAL PROPERTY FRAGSCOPE_PCH_OF_${ARG_SHARED_AS} ${target})
  endif()
  set(_headers <algorithm> <cstdint> <functional> <map> <memory> <optional> <string>
               <string_view> <unordered_map> <vector> <nlohmann/json.hpp>)
  if(ARG_GTEST)
    list(APPEND _headers <gtest/gtest.h>)
  endif()
  if(ARG_QT OR ARG_QTEST)
    list(APPEND _headers <QAbstractTableModel> <QHBoxLayout> <QLabel> <QString> <QVBoxLayout>
         <QWidget>)
  endif()
  if(ARG_QTEST)
    list(APPEND _headers <QSignalSpy> <QTest>)
  endif()
  target_precompile_headers(${target} PRIVATE ${_headers})
endfunction()

# fragscope_add_test(NAME SOURCES... LIBS ...): one GoogleTest binary, discovered by ctest.
# FRAGSCOPE_FIXTURES points at the real PyTorch recordings shipped in tests/fixtures;
# FRAGSCOPE_SHARED_FIXTURES at ../shared/fixtures beside the checkout (third-party snapshots and
# the developer recordings), which tests must skip cleanly without.
function(fragscope_add_test name)
  cmake_parse_arguments(ARG "" "" "SOURCES;LIBS;LABELS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ${ARG_LIBS} GTest::gtest GTest::gtest_main GTest::gmock)
  target_compile_definitions(${name} PRIVATE
    FRAGSCOPE_FIXTURES="${CMAKE_SOURCE_DIR}/tests/fixtures/torch-2.11-h200"
    FRAGSCOPE_SHARED_FIXTURES="${FRAGSCOPE_SHARED_FIXTURES}"
    FRAGSCOPE_SOURCE_DIR="${CMAKE_SOURCE_DIR}"
    FRAGSCOPE_BINARY_DIR="${CMAKE_BINARY_DIR}")
  target_include_directories(${name} PRIVATE ${CMAKE_SOURCE_DIR}/tests)
  fragscope_target_warnings(${name})
  fragscope_precompile_headers(${name} SHARED_AS tests GTEST)
  if(FRAGSCOPE_SANITIZE)
    # The code under test keeps the preset's -O1 in its libraries; the tests' own code is compiled
    # at -O0, which halves a sanitized test file's compile (run_store_test.cpp 19.7 -> 8.7 CPU-s,
    # fixture_replay_test.cpp 13.4 -> 7.3 with clang 14) and so lets CI build every suite sanitized.
    target_compile_options(${name} PRIVATE -O0)
  endif()
  gtest_discover_tests(${name} DISCOVERY_TIMEOUT 60 PROPERTIES LABELS "${ARG_LABELS}")
endfunction()
