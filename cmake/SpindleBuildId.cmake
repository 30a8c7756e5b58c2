# SPINDLE_BUILD_ID: identifies this build for on-disk caches (backend selection).
# The git commit (plus "-dirty" when the tree has changes) and the compiler, fixed at configure time.
find_package(Git QUIET)
set(_spindle_commit "nogit")
if(GIT_FOUND)
  execute_process(COMMAND ${GIT_EXECUTABLE} rev-parse --short=12 HEAD
                  WORKING_DIRECTORY ${CMAKE_SOURCE_DIR} OUTPUT_VARIABLE _out
                  RESULT_VARIABLE _rc OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  if(_rc EQUAL 0)
    set(_spindle_commit "${_out}")
    execute_process(COMMAND ${GIT_EXECUTABLE} status --porcelain --untracked-files=no
                    WORKING_DIRECTORY ${CMAKE_SOURCE_DIR} OUTPUT_VARIABLE _dirty ERROR_QUIET)
    if(NOT _dirty STREQUAL "")
      string(TIMESTAMP _now "%Y%m%d%H%M%S" UTC)
      set(_spindle_commit "${_spindle_commit}-dirty${_now}")
    endif()
  endif()
endif()
set(SPINDLE_BUILD_ID "${PROJECT_VERSION}-${_spindle_commit}-${CMAKE_CXX_COMPILER_ID}${CMAKE_CXX_COMPILER_VERSION}")
message(STATUS "Spindle: build id ${SPINDLE_BUILD_ID}")
