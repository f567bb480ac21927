# Writes build_info.cc (cmake -P): IN, OUT, VERSION, and COMMIT (empty: asks
# git in SOURCE_DIR). configure_file leaves OUT alone when nothing changed.
if(NOT COMMIT)
  execute_process(COMMAND git -C "${SOURCE_DIR}" rev-parse --short=12 HEAD
                  OUTPUT_VARIABLE COMMIT OUTPUT_STRIP_TRAILING_WHITESPACE
                  RESULT_VARIABLE failed ERROR_QUIET)
  if(failed OR NOT COMMIT)
    set(COMMIT unknown)
  else()
    execute_process(COMMAND git -C "${SOURCE_DIR}" status --porcelain
                            --untracked-files=no
                    OUTPUT_VARIABLE changes ERROR_QUIET)
    if(changes)
      string(APPEND COMMIT "+")
    endif()
  endif()
endif()
set(DELAYD_VERSION "${VERSION}")
set(DELAYD_COMMIT "${COMMIT}")
configure_file("${IN}" "${OUT}" @ONLY)
