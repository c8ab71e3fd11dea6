# Hopper-only GPU code: sm_90a for wgmma/TMA/setmaxnreg, and the CUTLASS/CuTe headers (the pinned
# nvidia-cutlass pip wheel ships them: scripts/deps.sh installs it, and `pip install .` has it as a
# build requirement, found through the build's own Python).
set(SWAPFFN_CUTLASS_DIR "" CACHE PATH "CUTLASS include directory (holds cutlass/ and cute/)")
set(SWAPFFN_PYTHON_FOR_PATHS python3)
if(Python_EXECUTABLE)  # scikit-build-core's: the interpreter of pip's isolated build environment
  set(SWAPFFN_PYTHON_FOR_PATHS ${Python_EXECUTABLE})
endif()
if(NOT SWAPFFN_CUTLASS_DIR)
  execute_process(COMMAND ${SWAPFFN_PYTHON_FOR_PATHS} -c "import cutlass_library, os; print(os.path.join(os.path.dirname(cutlass_library.__file__), 'source', 'include'))"
                  OUTPUT_VARIABLE _cutlass OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  if(_cutlass AND EXISTS "${_cutlass}/cute")
    set(SWAPFFN_CUTLASS_DIR "${_cutlass}")
  endif()
endif()
if(NOT SWAPFFN_CUTLASS_DIR OR NOT EXISTS "${SWAPFFN_CUTLASS_DIR}/cute")
  message(FATAL_ERROR "swapffn: CUTLASS/CuTe headers not found: pip install nvidia-cutlass==4.2.0.0, "
                      "or set SWAPFFN_CUTLASS_DIR")
endif()
message(STATUS "swapffn: CUTLASS headers at ${SWAPFFN_CUTLASS_DIR}")

function(swapffn_hopper_target tgt)
  target_compile_options(${tgt} PRIVATE
    $<$<COMPILE_LANGUAGE:CUDA>:-gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr -lineinfo -Xptxas=-warn-spills>)
  target_include_directories(${tgt} SYSTEM PRIVATE ${SWAPFFN_CUTLASS_DIR})
  target_include_directories(${tgt} PRIVATE ${PROJECT_SOURCE_DIR}/src)
endfunction()
