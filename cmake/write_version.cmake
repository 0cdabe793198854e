# Writes build/generated/common/version.h from common/version.h.in: the project version,
# plus `git describe` when built from a checkout. Run at configure time and again at every
# build (the hvdrun_version target), so the version follows the checkout's commits without
# a new configure; configure_file leaves the header alone, and nothing is recompiled, while
# the string is unchanged.
# Usage: cmake -DSOURCE_DIR=... -DPROJECT_VERSION=... -DGIT_EXECUTABLE=... -DIN=... -DOUT=...
#              -P write_version.cmake
set(HVDRUN_VERSION_STRING "${PROJECT_VERSION}")
if(GIT_EXECUTABLE AND EXISTS "${SOURCE_DIR}/.git")
  execute_process(COMMAND "${GIT_EXECUTABLE}" describe --always --dirty --tags
                  WORKING_DIRECTORY "${SOURCE_DIR}"
                  OUTPUT_VARIABLE describe OUTPUT_STRIP_TRAILING_WHITESPACE
                  ERROR_QUIET)
  if(describe)
    set(HVDRUN_VERSION_STRING "${PROJECT_VERSION} (${describe})")
  endif()
endif()
configure_file("${IN}" "${OUT}" @ONLY)
