# Runs COMMAND (a list separated by '|'), which must fail (non-zero exit) with output (stdout and
# stderr together) matching the regular expression EXPECT and, if given, not matching FORBID.
#   cmake -DCOMMAND=prog|arg|arg -DEXPECT=regex [-DFORBID=regex] -P expect_failure.cmake
string(REPLACE "|" ";" cmd "${COMMAND}")
execute_process(COMMAND ${cmd} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
message("${out}")
if(rc EQUAL 0)
  message(FATAL_ERROR "the command succeeded, but it must fail")
endif()
if(NOT out MATCHES "${EXPECT}")
  message(FATAL_ERROR "the output does not match '${EXPECT}'")
endif()
if(DEFINED FORBID AND out MATCHES "${FORBID}")
  message(FATAL_ERROR "the output matches '${FORBID}', which it must not")
endif()
message(STATUS "failed as expected (exit ${rc})")
