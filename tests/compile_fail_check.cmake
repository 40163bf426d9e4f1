# compile_fail_check.cmake — one compile-fail test (see tests/CMakeLists.txt):
#   cmake -DBUILD_DIR=<tree> -DTARGET=<name>_cf -DSOURCE=<file.cpp> -P compile_fail_check.cmake
# Passes when building TARGET fails AND the compiler output matches the regular expression on the
# source's "// expect-error: <regex>" lines (any one of them), so a file that fails for another
# reason (a typo, a missing include) does not pass. A source without such a line fails the test.
foreach(var BUILD_DIR TARGET SOURCE)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "compile_fail_check.cmake: -D${var}=... is missing")
  endif()
endforeach()
file(STRINGS "${SOURCE}" expect_lines REGEX "^// expect-error: ")
if(NOT expect_lines)
  message(FATAL_ERROR "${SOURCE} has no '// expect-error: <regex>' line")
endif()
list(TRANSFORM expect_lines REPLACE "^// expect-error: " "")
list(JOIN expect_lines "|" expect)  # several lines: alternatives (one per compiler's wording)
# LC_ALL=C: the compiler quotes names with ASCII quotes, whatever the caller's locale.
execute_process(COMMAND "${CMAKE_COMMAND}" -E env LC_ALL=C LANG=C
                        "${CMAKE_COMMAND}" --build "${BUILD_DIR}" --target "${TARGET}"
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
if(rc EQUAL 0)
  message(FATAL_ERROR "${TARGET} compiled, but ${SOURCE} must not compile")
endif()
if(NOT out MATCHES "${expect}")
  message(FATAL_ERROR "${TARGET} failed to compile, but not with the expected error\n"
                      "  expected (regex): ${expect}\n  output:\n${out}")
endif()
message(STATUS "${TARGET} does not compile, as expected: ${expect}")
